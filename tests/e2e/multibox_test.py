#!/usr/bin/env python3
# multibox_test.py — two `ember serve` boxes behind HAProxy, as docs/DEPLOY.md
# sets them up, all on 127.0.0.1: keys made on box A, exported and imported
# into box B (`ember keys export` / `import`); both boxes with --require-key
# and their own ledgers; HAProxy (Debian's haproxy, in the foreground) with
# the configuration block of docs/DEPLOY.md, ports and paths filled in.
#  - HAProxy's health checks mark both boxes UP (its stats socket, bounded);
#  - a key of A authenticates on B directly, an unknown key is refused
#    through HAProxy;
#  - stickiness: each key's requests stay on one box;
#  - concurrent streamed chats (http.client, SSE parsed) through HAProxy;
#    one box gets SIGTERM while they run: every request either completes
#    (its [DONE], no error event) or gets an explicit error (a 503 with a
#    JSON error, or an error event); a stream that ends without [DONE] is a
#    failure. Retries happen only until HAProxy marks the drained box DOWN;
#    every request sent after that succeeds at once, through the other box;
#  - a WebSocket chat through HAProxy (ws_util) works before and after, and
#    so does a streamed chat from the official openai SDK (.venv);
#  - the drained box exits 0 by itself; the merged ledgers (`ember usage
#    --db a --db b --format json --group-by key`, and the rows themselves)
#    count every request exactly once: the completed ones completed, with
#    the tokens the client saw, the refused ones as rejected.
import asyncio
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, __file__.rsplit('/', 1)[0])
from serve_util import EMBER, Server, free_port, recv_all, add_key, shared_model, skip  # noqa: E402
import ws_util  # noqa: E402

HAPROXY = shutil.which('haproxy') or ('/usr/sbin/haproxy' if os.path.exists('/usr/sbin/haproxy') else None)
if not HAPROXY:
    skip('haproxy is absent (scripts/setup.sh installs it)')

# The stories model: small enough that two boxes, their streams and a drain
# fit in well under a minute on two cores.
model = shared_model('stories260K.gguf')
DEPLOY = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'docs', 'DEPLOY.md')
KEYS = ['alice', 'bob', 'carol', 'dave']
WORKERS_PER_KEY = 2
LONG = 800            # tokens of each worker's first stream (running when the box drains)
SHORT = 12            # tokens of the requests after it
AFTER = 3             # requests each worker completes after the drain began
RETRIES = 100         # attempts one request may take (each waits 0.2 s), while the box goes DOWN
T = 300               # seconds any one read may take: a hang bound, not a speed limit



def haproxy_cfg(port, a, b, sock):
    """The configuration block of docs/DEPLOY.md with this test's ports and paths."""
    text = open(DEPLOY).read()
    m = re.search(r'```haproxy\n(.*?)```', text, re.S)
    assert m, 'no ```haproxy block in docs/DEPLOY.md'
    cfg = m.group(1)
    for old, new in [('log /dev/log local0', 'log stderr format raw local0'),
                     ('/run/haproxy/admin.sock', sock),
                     ('bind :80', 'bind 127.0.0.1:%d' % port),
                     ('10.0.0.11:8080', '127.0.0.1:%d' % a),
                     ('10.0.0.12:8080', '127.0.0.1:%d' % b)]:
        assert cfg.count(old) == 1, ('docs/DEPLOY.md: %r is not in its haproxy block once' % old)
        cfg = cfg.replace(old, new)
    return cfg


def hap_status(sock):
    """{server name: status} from HAProxy's stats socket (`show stat`)."""
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(30)
    s.connect(sock)
    s.sendall(b'show stat\n')
    out = recv_all(s)
    s.close()
    lines = out.decode().splitlines()
    head = lines[0].lstrip('# ').split(',')
    st = {}
    for line in lines[1:]:
        f = dict(zip(head, line.split(',')))
        if f.get('pxname') == 'ember_boxes' and f.get('svname') not in ('BACKEND', 'FRONTEND', None):
            st[f['svname']] = f['status']
    return st


def wait_status(sock, want, tries=300):
    """Poll (bounded, 0.1 s apart) until every server in want has its status; the last statuses."""
    st = {}
    for _ in range(tries):
        st = hap_status(sock)
        if all(st.get(k, '').startswith(v) for k, v in want.items()):
            return st
        time.sleep(0.1)
    raise AssertionError('HAProxy never reported %r: %r' % (want, st))


class Attempt:
    """One HTTP request as the client saw it."""

    def __init__(self, key, sent_after_down):
        self.key = key
        self.sent_after_down = sent_after_down
        self.status = None      # HTTP status
        self.outcome = None     # completed | ember_error | proxy_error | truncated
        self.id = None          # the completion id = the ledger's request_id
        self.tokens = 0         # completion tokens (the usage chunk)
        self.code = None        # the error code of an explicit error
        self.detail = ''


def chat_stream(port, key, max_tokens, att, first_tokens=None):
    """A streamed chat through HAProxy into att. first_tokens (an Event) is set once 3 chunks came."""
    body = {'messages': [{'role': 'user', 'content': 'Tell me a story about %s.' % att.key}],
            'max_tokens': max_tokens, 'ignore_eos': True, 'temperature': 0, 'stream': True,
            'stream_options': {'include_usage': True}}
    c = http.client.HTTPConnection('127.0.0.1', port, timeout=T)
    try:
        c.request('POST', '/v1/chat/completions', body=json.dumps(body),
                  headers={'Content-Type': 'application/json', 'Authorization': 'Bearer ' + key})
        r = c.getresponse()
        att.status = r.status
        if r.status != 200:
            raw = r.read()
            try:
                err = json.loads(raw)['error']
                att.outcome, att.code, att.detail = 'ember_error', err.get('code') or err.get('type'), err['message']
            except (ValueError, KeyError, TypeError):
                att.outcome, att.detail = 'proxy_error', raw[:200].decode('latin-1')
            return
        chunks, done, error = 0, False, None
        while True:
            try:
                line = r.readline()
            except (http.client.IncompleteRead, ConnectionError) as e:
                att.detail = repr(e)
                break
            if not line:
                break
            if not line.startswith(b'data: '):
                continue
            data = line[6:].strip()
            if data == b'[DONE]':
                done = True
                break
            ev = json.loads(data)
            if 'error' in ev:
                error = ev['error']
                continue
            att.id = ev.get('id', att.id)
            if ev.get('usage'):
                att.tokens = ev['usage']['completion_tokens']
            if ev.get('choices'):
                chunks += 1
                if chunks == 3 and first_tokens is not None:
                    first_tokens.set()
        if done and error is None:
            att.outcome = 'completed'
        elif done:
            att.outcome, att.code, att.detail = 'ember_error', error.get('code') or error.get('type'), error['message']
        else:
            att.outcome = 'truncated'
    except (ConnectionError, socket.timeout, http.client.HTTPException) as e:
        att.outcome, att.detail = 'proxy_error', repr(e)
    finally:
        c.close()
        if first_tokens is not None:
            first_tokens.set()   # never leave the main thread waiting


def main():
    d = tempfile.mkdtemp(prefix='ember-multibox-')
    db_a, db_b = os.path.join(d, 'a.db'), os.path.join(d, 'b.db')
    keys = {k: add_key(db_a, k) for k in KEYS}
    exp = os.path.join(d, 'keys.json')
    subprocess.run([EMBER, 'keys', 'export', '--db', db_a, '--output', exp], check=True)
    r = subprocess.run([EMBER, 'keys', 'import', exp, '--db', db_b], capture_output=True, text=True, check=True)
    assert '%d added' % len(KEYS) in r.stdout, r.stdout

    box = {'box1': Server(model, '--require-key', '--trusted-proxies', '127.0.0.1', db=db_a),
           'box2': Server(model, '--require-key', '--trusted-proxies', '127.0.0.1', db=db_b)}
    hp = None
    try:
        # a key made on A authenticates on B (B never saw it made)
        st, _, body = box['box2'].post('/v1/chat/completions', {
            'messages': [{'role': 'user', 'content': 'Hi'}], 'max_tokens': 2},
            headers={'Authorization': 'Bearer ' + keys['alice']})
        assert st == 200, (st, body)
        direct_b = body['id']

        port, sock = free_port(), os.path.join(d, 'haproxy.sock')
        cfg = os.path.join(d, 'haproxy.cfg')
        with open(cfg, 'w') as f:
            f.write(haproxy_cfg(port, box['box1'].port, box['box2'].port, sock))
        subprocess.run([HAPROXY, '-c', '-f', cfg], check=True, capture_output=True)
        hp_err = open(os.path.join(d, 'haproxy.err'), 'w')
        hp = subprocess.Popen([HAPROXY, '-db', '-f', cfg], stdout=hp_err, stderr=subprocess.STDOUT)
        for _ in range(300):
            if os.path.exists(sock) or hp.poll() is not None:
                break
            time.sleep(0.05)
        assert hp.poll() is None, open(os.path.join(d, 'haproxy.err')).read()
        wait_status(sock, {'box1': 'UP', 'box2': 'UP'})

        # an unknown key is refused through HAProxy, in OpenAI's shape
        c = http.client.HTTPConnection('127.0.0.1', port, timeout=T)
        c.request('POST', '/v1/chat/completions', body=json.dumps({'messages': [{'role': 'user', 'content': 'x'}]}),
                  headers={'Content-Type': 'application/json', 'Authorization': 'Bearer em_' + 'A' * 43})
        r = c.getresponse()
        e = json.loads(r.read())
        c.close()
        assert r.status == 401 and e['error']['type'] == 'invalid_request_error', (r.status, e)
        unknown_seen = 1

        attempts = []          # every Attempt, in the order made
        lock = threading.Lock()

        def record(att):
            with lock:
                attempts.append(att)
            return att

        # stickiness: each key's sequential requests land on one box
        for k in KEYS:
            for _ in range(3):
                a = record(Attempt(k, False))
                chat_stream(port, keys[k], 2, a)
                assert a.outcome == 'completed', vars(a)

        async def ws_chat(tag):
            front = type('Front', (), {'port': port})()
            ws, ready = await ws_util.connect(front, key=keys['alice'])
            assert ready['key'] == 'alice', ready
            frames = await ws_util.chat(ws, tag, messages=[{'role': 'user', 'content': 'Once upon a time'}],
                                        max_tokens=8, temperature=0)
            await ws.close()
            d_ = ws_util.check_stream(frames)
            return frames[0]['request_id'], d_['usage']['completion_tokens']

        ws_done = [asyncio.run(ws_chat('before'))]

        # the concurrent phase: each worker's first stream runs when a box drains
        down = threading.Event()
        first = []

        def worker(k):
            ev = threading.Event()
            first.append(ev)
            a = record(Attempt(k, False))
            chat_stream(port, keys[k], LONG, a, ev)
            done_after = 0
            for _ in range(AFTER * RETRIES):
                if done_after == AFTER:
                    break
                a = record(Attempt(k, down.is_set()))
                chat_stream(port, keys[k], SHORT, a)
                if a.outcome == 'completed':
                    done_after += 1
                elif a.outcome in ('ember_error', 'proxy_error') and not a.sent_after_down:
                    time.sleep(0.2)   # the drained box is not DOWN yet: try again
                else:
                    return            # a failure; the checks below say which

        threads = [threading.Thread(target=worker, args=(k,)) for k in KEYS for _ in range(WORKERS_PER_KEY)]
        for t in threads:
            t.start()
        while len(first) < len(threads):
            time.sleep(0.01)
        for ev in first:
            assert ev.wait(T), 'a first stream never started'
        # drain the box running more of them (each box's /healthz says)
        running = {}
        for name, srv in box.items():
            st, _, body = srv.request('GET', '/healthz')
            running[name] = json.loads(body)['requests']['running']['interactive']
        gone = max(running, key=lambda n: running[n])
        live = 'box2' if gone == 'box1' else 'box1'
        assert running[gone] > 0, running
        box[gone].p.send_signal(signal.SIGTERM)
        wait_status(sock, {gone: 'DOWN', live: 'UP'})
        down.set()
        for t in threads:
            t.join(T)
            assert not t.is_alive(), 'a worker hangs'
        rc = box[gone].p.wait(timeout=T)
        assert rc == 0, rc
        wait_status(sock, {gone: 'DOWN', live: 'UP'})

        ws_done.append(asyncio.run(ws_chat('after')))

        # the official openai SDK through HAProxy, streaming (when .venv has it)
        sdk = []
        try:
            import openai
        except ImportError:
            openai = None
            print('multibox: the openai SDK is absent (scripts/venv.sh): its request left out')
        if openai is not None:
            cl = openai.OpenAI(base_url='http://127.0.0.1:%d/v1' % port, api_key=keys['bob'], max_retries=0)
            text, sid, toks = '', None, None
            for ch in cl.chat.completions.create(model='stories260K', messages=[{'role': 'user', 'content': 'Hi'}],
                                                 max_tokens=6, temperature=0, stream=True,
                                                 stream_options={'include_usage': True}, extra_body={'ignore_eos': True}):
                sid = ch.id
                if ch.choices and ch.choices[0].delta.content:
                    text += ch.choices[0].delta.content
                if ch.usage:
                    toks = ch.usage.completion_tokens
            assert sid and text and toks == 6, (sid, text, toks)
            sdk.append((sid, toks))

        # ---- what the client saw ----
        bad = [vars(a) for a in attempts if a.outcome not in ('completed', 'ember_error', 'proxy_error')]
        assert not bad, bad   # truncated streams: no silent cut
        late = [vars(a) for a in attempts if a.sent_after_down and a.outcome != 'completed']
        assert not late, late  # after DOWN everything succeeds at once
        errors = [a for a in attempts if a.outcome != 'completed']
        assert all(a.outcome == 'proxy_error' or (a.status == 503 and a.code == 'server_draining')
                   for a in errors), [vars(a) for a in errors]
        completed = [a for a in attempts if a.outcome == 'completed']
        n_first = len(threads)
        assert len(completed) == len(KEYS) * 3 + n_first + n_first * AFTER, len(completed)
        longs = [a for a in completed if a.tokens == LONG]
        assert len(longs) == n_first, [a.tokens for a in completed]   # the drained box finished its streams

        rc, err = box[live].stop()
        assert rc == 0, (rc, err)
        assert 'drained' in box[gone].stop()[1]

        # ---- the ledgers: every request exactly once ----
        rows = {}
        for name, srv in box.items():
            for r in srv.ledger('SELECT r.request_id, r.status, r.completion_tokens, k.name AS key'
                                ' FROM requests r LEFT JOIN api_keys k ON k.id = r.key_id'):
                assert r['request_id'] not in rows, ('in both ledgers', r)
                rows[r['request_id']] = dict(r, box=name)
        by_id = {a.id: a for a in completed}
        assert len(by_id) == len(completed), 'two completions with one id'
        done_rows = {i: r for i, r in rows.items() if r['status'] == 'completed'}
        ws_ids = {i for i, _ in ws_done}
        want_ids = set(by_id) | ws_ids | {direct_b} | {i for i, _ in sdk}
        assert set(done_rows) == want_ids, set(done_rows) ^ want_ids
        for i, a in by_id.items():
            assert done_rows[i]['completion_tokens'] == a.tokens and done_rows[i]['key'] == a.key, (done_rows[i], vars(a))
        ember_errors = [a for a in errors if a.outcome == 'ember_error']
        # the unknown key's 401: one rejected row without a key
        nokey = [r for r in rows.values() if r['key'] is None]
        assert [r['status'] for r in nokey] == ['rejected'] * unknown_seen, nokey
        others = {i: r for i, r in rows.items() if r['status'] != 'completed' and r['key'] is not None}
        assert sorted(r['status'] for r in others.values()) == ['rejected'] * len(ember_errors), \
            (sorted(r['status'] for r in others.values()), len(ember_errors))
        assert all(r['box'] == gone for r in others.values()), others   # refused by the draining box only
        # stickiness, as the ledgers tell it: a key's requests before the drain on one box
        for k in KEYS:
            pre = [a for a in attempts if a.key == k and a.outcome == 'completed' and not a.sent_after_down][:3]
            boxes = {rows[a.id]['box'] for a in pre}
            assert len(boxes) == 1, (k, boxes)

        # the merged report counts the same
        r = subprocess.run([EMBER, 'usage', '--db', db_a, '--db', db_b, '--format', 'json', '--group-by', 'key'],
                           capture_output=True, text=True, check=True)
        rep = json.loads(r.stdout)
        assert rep['ledgers'] == 2, rep
        groups = {g['group']: g for g in rep['groups']}
        for k in KEYS:
            mine = [a for a in attempts if a.key == k and a.outcome != 'proxy_error']
            want_req, want_tok = len(mine), sum(a.tokens for a in mine)
            if k == 'alice':   # its WebSocket chats and the request straight to box B
                want_req += len(ws_done) + 1
                want_tok += sum(t for _, t in ws_done) + done_rows[direct_b]['completion_tokens']
            if k == 'bob':     # the SDK's
                want_req += len(sdk)
                want_tok += sum(t for _, t in sdk)
            assert groups[k]['requests'] == want_req and groups[k]['completion_tokens'] == want_tok, \
                (k, groups[k], want_req, want_tok)
        assert rep['total']['requests'] == len(rows), (rep['total'], len(rows))
        kinds = {}
        for a in errors:
            kinds['%s %s %s' % (a.outcome, a.status, a.code or a.detail[:60])] = kinds.get(
                '%s %s %s' % (a.outcome, a.status, a.code or a.detail[:60]), 0) + 1
        print('multibox: %d requests through HAProxy, %d completed, %d refused while %s drained (%s); '
              'the %d streams it was running finished; merged ledgers agree' %
              (len(attempts), len(completed), len(errors), gone, kinds or 'none', running[gone]))
    except BaseException:
        for name, srv in box.items():
            print('---- %s stderr:\n%s' % (name, open(srv.err_path).read()[-3000:]))
        if hp is not None:
            print('---- haproxy log:\n' + open(os.path.join(d, 'haproxy.err')).read()[-6000:])
        raise
    finally:
        if hp is not None and hp.poll() is None:
            hp.terminate()
            try:
                hp.wait(timeout=30)
            except subprocess.TimeoutExpired:
                hp.kill()
                hp.wait()
        for srv in box.values():
            if srv.p.poll() is None:
                srv.p.kill()
                srv.p.wait()
    shutil.rmtree(d, ignore_errors=True)
    print('multibox: ok')


main()
