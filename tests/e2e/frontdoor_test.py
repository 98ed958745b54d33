#!/usr/bin/env python3
# frontdoor_test.py — what a probe of the front door found (2026-12-07),
# each against a real `ember serve --require-key` on 127.0.0.1 with real
# clients (Debian's python3-websockets, raw HTTP), sockets from several
# loopback addresses (127.0.0.2-10: other clients):
#  - WebSockets that never authenticate: their own small budget (8 per
#    client address; 64 in all, the oldest closed to make room), apart from
#    the connection caps, so that /healthz, the API and a client that does
#    authenticate are served while 64 wait; each closed with 1008 after
#    --ws-auth-timeout-s;
#  - a key revoked or rotated under a live server: its open WebSockets get
#    an error frame and close (1008), a chat on one is refused; a batch of a
#    revoked key stops (cancelled, errors naming key_revoked), no line started
#    after the revocation;
#  - an upload whose filename is not UTF-8: 400 invalid_filename, nothing
#    stored, the answer's length exact;
#  - an imported conversation of 45,000 messages (3 MB): a chat on it is
#    refused (context_length_exceeded) without loading or rendering it, and
#    so is the same history sent whole over HTTP;
#  - a json_schema enum of 20,000 strings: 400 invalid_grammar (was 500
#    "out of memory"); one of 300 strings works.
import asyncio
import json
import subprocess
import sys
import time

sys.path.insert(0, __file__.rsplit('/', 1)[0])
from serve_util import EMBER, Server, shared_model  # noqa: E402
import ws_util  # noqa: E402
from ws_util import recv, send  # noqa: E402

srv = Server(shared_model('stories260K.gguf'), '--require-key', '--ws-auth-timeout-s', '2', '--parallel', '4',
             keys=[('alice', ()), ('bob', ()), ('carol', ()), ('root', ('--admin',))])
ALICE, BOB, CAROL, ROOT = (srv.keys[k] for k in ('alice', 'bob', 'carol', 'root'))


def hdr(key):
    return {'Authorization': 'Bearer ' + key}


async def ws_from(addr):
    """A socket opened from a loopback address; its first frame."""
    ws = await ws_util.open_ws(srv, local_addr=(addr, 0))
    return ws, await recv(ws)


async def closed_with(ws, code):
    """The frames until the server closes; its close code must be code."""
    frames = []
    try:
        while True:
            frames.append(await recv(ws, timeout=60))
    except ws_util.websockets.ConnectionClosed as e:
        assert e.code == code, (e.code, frames)
    return frames


async def pending_budget():
    # 8 from one address wait for auth; the 9th is refused (error, 1008)
    mine = [await ws_from('127.0.0.2') for _ in range(8)]
    assert all(f == {'type': 'auth_required', 'timeout_s': 2} for _, f in mine), mine
    ws9, f9 = await ws_from('127.0.0.2')
    assert f9['type'] == 'error' and f9['code'] == 'too_many_connections', f9
    await closed_with(ws9, 1008)
    # 56 more from seven other addresses: 64 wait; the server answers everyone else meanwhile
    for a in range(3, 10):
        mine += [await ws_from('127.0.0.%d' % a) for _ in range(8)]
    assert srv.request('GET', '/healthz')[0] == 200
    assert srv.request('GET', '/v1/models', headers=hdr(ALICE))[0] == 200
    # a 65th (a real client, from 127.0.0.10): in, the oldest waiting one closed for it
    ws, first = await ws_from('127.0.0.10')
    assert first['type'] == 'auth_required', first
    await send(ws, type='auth', key=ALICE)
    assert (await recv(ws))['type'] == 'ready'
    frames = await ws_util.chat(ws, 'c1', messages=[{'role': 'user', 'content': 'Hi'}], max_tokens=4)
    assert frames[-1]['type'] == 'done', frames[-1]
    oldest = await closed_with(mine[0][0], 1008)
    assert oldest and oldest[-1]['code'] == 'auth_timeout', oldest
    # the rest are closed once their time is up (2 s), each told why
    for w, _ in mine[1:]:
        got = await closed_with(w, 1008)
        assert got and got[-1]['code'] == 'auth_timeout' and 'auth' in got[-1]['message'], got
    # the authenticated socket stays
    frames = await ws_util.chat(ws, 'c2', messages=[{'role': 'user', 'content': 'Hi'}], max_tokens=4)
    assert frames[-1]['type'] == 'done', frames[-1]
    await ws.close()
    log = open(srv.err_path).read()
    assert 'not authenticated within 2 s: closed (1008)' in log, log[-2000:]
    print('pending auth: 8 per address, 64 in all (the oldest closed for a newcomer), closed after 2 s; '
          '/healthz, the API and an authenticated socket served throughout')

asyncio.run(pending_budget())


def keys(*args):
    r = subprocess.run([EMBER, 'keys'] + list(args) + ['--db', srv.db], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r
    return r.stdout.strip()


async def revocation():
    # alice's two sockets: one idle, one that chats after the revocation
    idle, _ = await ws_util.connect(srv, key=ALICE)
    busy, _ = await ws_util.connect(srv, key=ALICE)
    frames = await ws_util.chat(busy, 'before', messages=[{'role': 'user', 'content': 'Hi'}], max_tokens=4)
    assert frames[-1]['type'] == 'done', frames
    bobs, _ = await ws_util.connect(srv, key=BOB)
    keys('revoke', '1')
    await send(busy, **ws_util.chat_msg('after', messages=[{'role': 'user', 'content': 'Hi'}], max_tokens=4))
    got = await closed_with(busy, 1008)
    assert [f['code'] for f in got if f['type'] == 'error'] == ['key_revoked'], got
    assert not [f for f in got if f['type'] in ('queued', 'token', 'done')], got
    got = await closed_with(idle, 1008)   # checked again every 2 s
    assert got and got[-1]['code'] == 'key_revoked', got
    # rotation: the socket made with the old secret goes; the new secret works
    new_bob = keys('rotate', '2')
    got = await closed_with(bobs, 1008)
    assert got and got[-1]['code'] == 'invalid_api_key' and 'rotated' in got[-1]['message'], got
    again, _ = await ws_util.connect(srv, key=new_bob)
    await again.close()
    print('revoked/rotated keys: their sockets told (key_revoked / invalid_api_key) and closed (1008)')

asyncio.run(revocation())


def upload(key, name, data):
    """POST /v1/files by hand (multipart/form-data): (status, headers, body bytes)."""
    b = b'----ember-test-boundary'
    body = (b'--' + b + b'\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nbatch\r\n'
            b'--' + b + b'\r\nContent-Disposition: form-data; name="file"; filename="' + name +
            b'"\r\nContent-Type: application/jsonl\r\n\r\n' + data + b'\r\n--' + b + b'--\r\n')
    return srv.request('POST', '/v1/files', raw=body,
                       headers=dict(hdr(key), **{'Content-Type': 'multipart/form-data; boundary=' + b.decode()}))


# ---- a batch whose key is revoked: it stops -----------------------------------------------------------
lines = b''.join(json.dumps({'custom_id': 'l%02d' % i, 'method': 'POST', 'url': '/v1/completions',
                             'body': {'prompt': 'Once upon a time %d' % i, 'max_tokens': 48, 'temperature': 0,
                                      'ignore_eos': True}}).encode() + b'\n' for i in range(60))
st, _, body = upload(CAROL, b'sixty.jsonl', lines)
assert st == 200, body
fid = json.loads(body)['id']
st, _, b = srv.post('/v1/batches', {'input_file_id': fid, 'endpoint': '/v1/completions', 'completion_window': '24h'},
                    headers=hdr(CAROL))
assert st == 200, b


def batch(bid):
    return json.loads(srv.request('GET', '/v1/batches/' + bid, headers=hdr(ROOT))[2])   # (root: an admin key)


for _ in range(600):   # bounded: until a few lines are done
    b = batch(b['id'])
    if b['request_counts']['completed'] >= 3:
        break
    time.sleep(0.1)
assert b['status'] == 'in_progress' and b['request_counts']['completed'] >= 3, b
keys('revoke', '3')
revoked_ms = int(time.time() * 1000)
for _ in range(600):
    b = batch(b['id'])
    if b['status'] in ('cancelled', 'completed', 'failed', 'expired'):
        break
    time.sleep(0.1)
assert b['status'] == 'cancelled', b
assert [x['code'] for x in b['errors']['data']] == ['key_revoked'], b['errors']
counts = b['request_counts']
assert counts['completed'] + counts['failed'] < counts['total'] == 60, counts
rows = srv.ledger("SELECT received_ms FROM requests WHERE batch_id = '%s'" % b['id'])
late = [r for r in rows if r['received_ms'] > revoked_ms + 50]
assert not late, (len(late), revoked_ms, late[:3])
print('batch of a revoked key: cancelled after %d of 60 lines (errors: key_revoked), none started after'
      % counts['completed'])

# ---- an upload named with bytes that are not UTF-8 ----------------------------------------------------
st, h, body = upload(ROOT, b'\xff\xfe-bad.jsonl', lines[:200])
assert st == 400 and int(h['content-length']) == len(body), (st, h, body)
assert json.loads(body)['error']['code'] == 'invalid_filename', body
listed = json.loads(srv.request('GET', '/v1/files', headers=hdr(ROOT))[2])
names = sorted(f['filename'] for f in listed['data'])   # the batch's input and its output file
assert len(names) == 2 and names[1] == 'sixty.jsonl' and names[0].endswith('_output.jsonl'), listed
assert {listed['first_id'], listed['last_id']} == {f['id'] for f in listed['data']}, listed
print('a filename that is not UTF-8: 400 invalid_filename, nothing stored')

# ---- a huge imported conversation, and the same history over HTTP ---------------------------------------
N = 45000
msgs = [{'id': i + 1, 'parent_id': i or None, 'role': 'user' if i % 2 == 0 else 'assistant',
         'content': 'message %d' % i} for i in range(N)]
st, _, body = srv.request('POST', '/api/conversations/import', raw=json.dumps(
    {'ember_conversations': 1, 'conversations': [{'title': 'long', 'messages': msgs}]}).encode(), headers=hdr(ROOT))
assert st == 200, body
cid = json.loads(body)['imported'][0]


async def huge():
    ws, _ = await ws_util.connect(srv, key=ROOT)
    frames = await ws_util.chat(ws, 'h', conversation_id=cid, message='and now?', max_tokens=4)
    assert frames[-1]['type'] == 'error' and frames[-1]['code'] == 'context_length_exceeded', frames
    assert 'more than 2048 messages' in frames[-1]['message'], frames[-1]
    await ws.close()

asyncio.run(huge())
st, _, o = srv.post('/v1/chat/completions', {'messages': [{'role': m['role'], 'content': m['content']}
                                                          for m in msgs], 'max_tokens': 4}, headers=hdr(ROOT))
assert st == 400 and o['error']['code'] == 'context_length_exceeded' and 'at least' in o['error']['message'], o
# the same number of empty messages: the rendering stops once the prompt is past what could fit
st, _, o = srv.post('/v1/chat/completions', {'messages': [{'role': m['role'], 'content': ''} for m in msgs],
                                             'max_tokens': 4}, headers=hdr(ROOT))
assert st == 400 and o['error']['code'] == 'context_length_exceeded' and 'more than' in o['error']['message'], o
assert srv.request('GET', '/healthz')[0] == 200
print('45,000 messages: refused as too long for the context (stored history and over HTTP), not rendered')

# ---- enums in a json_schema -----------------------------------------------------------------------------


def enum_request(n):
    return {'prompt': 'Once', 'max_tokens': 12, 'temperature': 0, 'response_format': {
        'type': 'json_schema', 'json_schema': {'name': 'pick', 'schema': {
            'type': 'string', 'enum': ['value%05d' % i for i in range(n)]}}}}

st, _, o = srv.post('/v1/completions', enum_request(20000), headers=hdr(ROOT))
assert st == 400 and o['error']['code'] == 'invalid_grammar', o
st, _, o = srv.post('/v1/completions', enum_request(300), headers=hdr(ROOT))
assert st == 200 and json.loads(o['choices'][0]['text']) in ['value%05d' % i for i in range(300)], o
print('enum of 20,000 strings: 400 invalid_grammar; of 300: answered with one of them')

rc, err = srv.stop()
assert rc == 0, err
print('ok')
