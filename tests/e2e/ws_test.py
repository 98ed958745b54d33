#!/usr/bin/env python3
# ws_test.py — the WebSocket chat protocol ember.chat.v1 (GET /ws) and the
# conversations API, on real `ember serve`s started here (127.0.0.1, fresh
# SQLite ledgers), with Debian's python3-websockets:
#  - the happy path: ready, chat, queued, tokens, done; the streamed text is
#    byte for byte the greedy /v1/chat/completions answer; usage, timings;
#  - conversations: created by a chat, continued by `message` (history and
#    prefix cache), listed, shown and deleted for their own key only;
#  - hostile input, each answered (error frame, or close 1009 past
#    --max-ws-message) while a second client's chat completes: bad JSON,
#    unknown types, missing and bad ids, binary frames, bad parameters,
#    duplicate ids, too many requests on one socket, oversized messages
#    (whole and fragmented); a client that floods and never reads is
#    throttled, loses nothing, and stalls no one else; a slow reader gets
#    every stream whole;
#  - cancel by message (done, finish_reason cancelled) and a client that
#    drops the connection mid-stream: both end cancelled in the ledger;
#  - 64 clients at once, each streaming a chat: every one completes or gets
#    an explicit error, one ledger row per request;
#  - --require-key: auth_required, chat before auth refused (nothing runs),
#    bad and missing keys, the socket closed (1008) after three failures,
#    ready after a good key; --no-store-content keeps nothing.
# Uses the tiny stories260K model (no chat template: the ChatML fallback).
import asyncio
import json
import socket
import sys

sys.path.insert(0, __file__.rsplit('/', 1)[0])
from serve_util import Server, shared_model  # noqa: E402
from ws_util import (T, chat, chat_msg, check_stream, collect, connect, conversation_story, get_json,  # noqa: E402
                     http_chat, open_ws, recv, send, text_of, websockets)

model = shared_model('stories260K.gguf')
M = [{'role': 'user', 'content': 'Once upon a time'}]
LONG = {'max_tokens': 1900, 'temperature': 0, 'ignore_eos': True}   # ~2 s at stories260K's pace: outlives a reaction
MAX_MSG = 16384


def closed_code(e):
    return e.rcvd.code if e.rcvd else None


async def expect_close(ws, code):
    try:
        for _ in range(100):
            await recv(ws)
    except websockets.ConnectionClosed as e:
        assert closed_code(e) == code, (e.rcvd, e.sent)
        return
    raise AssertionError('not closed')


async def error_of(ws, code, id=None, param=None):
    e = await recv(ws)
    assert e['type'] == 'error' and e['code'] == code and e['id'] == id, (code, id, e)
    assert isinstance(e['message'], str) and e['message'], e
    if param is not None:
        assert e.get('param') == param, e
    return e


def kv_pool_back_to_idle(srv):
    """Every KV block is back in the pool (free or cached): GET /metrics's ember_kv_blocks,
    once /metrics exists on this server (web/metrics.c); until then there is nothing to read."""
    st, h, body = srv.request('GET', '/metrics')
    if st == 404:
        print('ws: /metrics is not served here: the KV pool check waits for it')
        return
    assert st == 200, (st, body)
    used = [ln for ln in body.decode().splitlines() if ln.startswith('ember_kv_blocks{state="used"}')]
    assert used and float(used[0].split()[-1]) == 0, used


# ---- server 1: keys, no --require-key (loopback may go without) ----------------------------

async def happy_path(srv):
    ws, ready = await connect(srv)
    device = ready.pop('device', None)
    assert isinstance(device, str) and device, ready     # e.g. "llvmpipe (LLVM 15.0.6, 256 bits) (cpu)"
    assert ready == {'type': 'ready', 'model': 'stories260K', 'context': 2048,
                     'limits': {'max_message_bytes': MAX_MSG, 'max_requests': 8}, 'key': None}, ready
    p = {'max_tokens': 24, 'temperature': 0}
    frames = await chat(ws, 'c1', messages=M, **p)
    d = check_stream(frames)
    ref, ref_u = http_chat(srv, M, **p)
    assert text_of(frames) == ref and ref, (text_of(frames), ref)
    assert d['finish_reason'] == 'length' and d['usage']['completion_tokens'] == 24, d
    assert d['usage']['prompt_tokens'] == ref_u['prompt_tokens'], (d, ref_u)
    assert isinstance(d['conversation_id'], int), d     # a loopback client without a key: key 0's
    # a numeric id is echoed as a number; a message sent in fragments is one message
    m = json.dumps(chat_msg(7, messages=M, **p))
    await ws.send([m[:10], m[10:30], m[30:]])
    frames = await collect(ws, 7)
    check_stream(frames)
    assert text_of(frames) == ref
    # the title: the first user message, on one line, cut at a character boundary to 60 bytes
    frames = await chat(ws, 't', messages=[{'role': 'user', 'content': '\n' + '\u00e9' * 20 + '\nxy' + '\u00e9' * 40}],
                        max_tokens=4, temperature=0)
    cid = check_stream(frames)['conversation_id']
    st, one = get_json(srv, '/api/conversations/%d' % cid)
    assert st == 200 and one['title'] == '\u00e9' * 20 + ' xy' + '\u00e9' * 8, one['title']
    await ws.close()
    return 4


async def hostile(srv):
    """Each bad message gets its answer while another client's chat goes on."""
    n = 0
    good, _ = await connect(srv)
    g = asyncio.ensure_future(chat(good, 'g', messages=M, max_tokens=200, temperature=0, ignore_eos=True))
    n += 1
    bad, _ = await connect(srv)
    await bad.send('{"type": "chat", ')
    e = await error_of(bad, 'invalid_json')
    assert 'not JSON' in e['message'], e
    await bad.send('[1, 2]')
    await error_of(bad, 'invalid_json')
    await send(bad, type='hello', id=5)
    await error_of(bad, 'unknown_type', id=5, param='type')
    await send(bad, id='x')
    await error_of(bad, 'invalid_message', id='x', param='type')
    await send(bad, type='chat', messages=M)
    await error_of(bad, 'missing_id', param='id')
    await send(bad, type='chat', id={'a': 1}, messages=M)
    await error_of(bad, 'invalid_id', param='id')
    await send(bad, type='chat', id='', messages=M)
    await error_of(bad, 'invalid_id', param='id')
    await send(bad, type='cancel', id='nobody')
    await error_of(bad, 'unknown_id', id='nobody', param='id')
    await bad.send(b'\x00\x01binary')
    await error_of(bad, 'binary_frame')
    # bad chats: one ledger row each (failed), as over HTTP
    for msg, code, param in ((chat_msg('p1', messages=M, temperature=5), 'invalid_request', 'temperature'),
                             (chat_msg('p2', messages=M, logprobs=True), 'unsupported_parameter',
                              'logprobs'),
                             (chat_msg('p3', messages=M, stop=[1]), 'invalid_request', 'stop'),
                             (chat_msg('p4', messages=M, priority='urgent'), 'invalid_request', 'priority'),
                             (chat_msg('p5'), 'invalid_request', 'messages'),
                             (chat_msg('p6', messages=M, message='x'), 'invalid_request', 'messages'),
                             (chat_msg('p7', message='x'), 'invalid_request', 'message'),
                             (chat_msg('p8', message='x', conversation_id=999999), 'not_found', 'conversation_id'),
                             (chat_msg('p9', messages=M, conversation_id='one'), 'invalid_request',
                              'conversation_id'),
                             (chat_msg('p10', messages=[{'role': 'tool', 'content': 'x'}]), 'invalid_request',
                              'messages[0]'),
                             (dict(chat_msg('p11', messages=M), mesages=M), 'unknown_field', 'mesages'),
                             (chat_msg('p12', messages=[{'role': 'user', 'content': 'word ' * 2100}]),
                              'context_length_exceeded', 'messages')):
        await bad.send(json.dumps(msg))
        await error_of(bad, code, id=msg['id'], param=param)
        n += 1
    # a duplicate id while the first runs; more than 8 at once on one socket; cancel them
    for i in range(8):
        await send(bad, **chat_msg('r%d' % i, messages=M, **LONG))
    n += 8
    await send(bad, **chat_msg('r0', messages=M, max_tokens=2))
    await send(bad, **chat_msg('r8', messages=M, max_tokens=2))
    n += 1
    others = []
    dup = await collect(bad, 'r0', others)   # the error comes before r0's done
    assert dup[-1]['type'] == 'error' and dup[-1]['code'] == 'duplicate_id', dup[-1]
    busy = await collect(bad, 'r8', others)
    assert busy[-1]['type'] == 'error' and busy[-1]['code'] == 'too_many_requests', busy
    for i in range(8):
        await send(bad, type='cancel', id='r%d' % i)
    ended = {}
    for f in others:
        if f['type'] in ('done', 'error'):
            ended[f['id']] = f
    for _ in range(100000):
        if len(ended) == 8:
            break
        f = await recv(bad)
        if f['type'] in ('done', 'error'):
            ended[f['id']] = f
    assert sorted(ended) == ['r%d' % i for i in range(8)], ended
    assert all(f['type'] == 'done' and f['finish_reason'] == 'cancelled' for f in ended.values()), ended
    # over --max-ws-message: close 1009, whole or in fragments
    await bad.send(json.dumps(chat_msg('big', messages=[{'role': 'user', 'content': 'a' * MAX_MSG}])))
    await expect_close(bad, 1009)
    frag, _ = await connect(srv)
    await frag.send(['{"type": "chat", "id": "f", "x": "'] + ['b' * 1000] * (MAX_MSG // 1000 + 1) + ['"}'])
    await expect_close(frag, 1009)
    # the other client was served all along
    d = check_stream(await asyncio.wait_for(g, T))
    assert d['finish_reason'] == 'length' and d['usage']['completion_tokens'] == 200, d
    await good.close()
    return n


async def flood(srv):
    """A client that sends and never reads: once its answers back up (a tiny receive
    window, so they do), the server stops reading it (its backlog stays bounded), serves
    another client meanwhile, and answers every message once the client reads again."""
    n_bad = 16000       # ~6 MB of answers: more than the kernel's socket buffers hold
    fl = await open_ws(srv, sock=small_window_socket(srv), max_queue=1, read_limit=4096)
    assert (await recv(fl))['type'] == 'ready'

    async def pour():
        for i in range(n_bad):
            await fl.send('{"type": "x", "id": "%0250d"}' % i)   # an unknown type: an error echoing the id
    pouring = asyncio.ensure_future(pour())
    await asyncio.sleep(0)
    ok, _ = await connect(srv)
    d = check_stream(await chat(ok, 'ok', messages=M, max_tokens=16, temperature=0))
    assert d['usage']['completion_tokens'] == 16, d
    await ok.close()
    for i in range(n_bad):
        f = await recv(fl)
        assert f['type'] == 'error' and f['code'] == 'unknown_type' and f['id'] == '%0250d' % i, f
    await asyncio.wait_for(pouring, T)
    await fl.close()
    return 1


def small_window_socket(srv):
    """A TCP connection whose receive window is tiny: what it is sent backs up at the server."""
    sk = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sk.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sk.connect(('127.0.0.1', srv.port))
    return sk


async def slow_reader(srv):
    """8 long streams to a client that reads nothing until the server has finished them
    all: every frame arrives, in order, each text the greedy answer."""
    ws = await open_ws(srv, sock=small_window_socket(srv), max_queue=1, read_limit=4096)
    assert (await recv(ws))['type'] == 'ready'
    p = {'max_tokens': 300, 'temperature': 0, 'ignore_eos': True}
    before = len(srv.ledger())
    for i in range(8):
        await send(ws, **chat_msg('s%d' % i, messages=M, **p))
    for _ in range(T * 10):   # wait (bounded) until the server has generated everything
        rows = srv.ledger()
        if len(rows) == before + 8 and all(r['status'] != 'admitted' for r in rows):
            break
        await asyncio.sleep(0.1)
    texts, frames, done = {}, 0, {}
    for _ in range(100000):
        if len(done) == 8:
            break
        f = await recv(ws)
        if f['type'] == 'token':
            assert f['id'] not in done, f
            texts[f['id']] = texts.get(f['id'], '') + f['text']
            frames += 1
        elif f['type'] == 'done':
            done[f['id']] = f
    ref, ref_u = http_chat(srv, M, **p)
    assert sorted(done) == ['s%d' % i for i in range(8)], done
    assert all(d['finish_reason'] == 'length' and d['usage']['completion_tokens'] == 300 for d in done.values())
    assert set(texts.values()) == {ref}, [t[:40] for t in texts.values()]
    assert frames <= 8 * 300, frames
    print('ws: slow reader: %d token frames for %d tokens' % (frames, 8 * 300))
    await ws.close()
    return 9


async def cancels(srv):
    """Cancel by message: done with finish_reason cancelled. A client gone mid-stream: cancelled too."""
    ws, _ = await connect(srv)
    await send(ws, **chat_msg('c', messages=M, **LONG))
    q = await recv(ws)
    assert q['type'] == 'queued', q
    rid_c = q['request_id']
    for _ in range(1000):
        if (await recv(ws))['type'] == 'token':
            break
    await send(ws, type='cancel', id='c')
    frames = await collect(ws, 'c')
    d = frames[-1]
    assert d['type'] == 'done' and d['finish_reason'] == 'cancelled', d
    assert 1 <= d['usage']['completion_tokens'] < 1900, d
    await ws.close()
    st, before = get_json(srv, '/api/conversations')
    assert st == 200, before
    newest = max([c['id'] for c in before['data']] + [0])
    ws, _ = await connect(srv)
    await send(ws, **chat_msg('gone', messages=M, **LONG))
    q = await recv(ws)
    rid_gone = q['request_id']
    got = ''
    for _ in range(1000):
        f = await recv(ws)
        if f['type'] == 'token':
            got += f['text']
            break
    ws.transport.abort()    # no closing handshake: the connection just drops
    await asyncio.wait_for(ws.wait_closed(), T)   # (the socket is closed on the loop's next turn)
    # the exchange is stored as a stopped one: the user's message and the text so far, cancelled
    for _ in range(200):
        st, after = get_json(srv, '/api/conversations')
        new = [c for c in after['data'] if c['id'] > newest]
        if new:
            break
        await asyncio.sleep(0.05)
    assert len(new) == 1, after
    st, conv = get_json(srv, '/api/conversations/%d' % new[0]['id'])
    assert [(m['role'], m['content']) for m in conv['messages'][:1]] == [('user', M[0]['content'])], conv
    ans = conv['messages'][1]
    assert ans['role'] == 'assistant' and ans['finish_reason'] == 'cancelled', ans
    assert ans['content'].startswith(got) and 1 <= ans['tokens'] < 1900, (got, ans)
    return rid_c, rid_gone


async def server1():
    srv = Server(model, '--ctx', '2048', '--max-ws-message', str(MAX_MSG), keys=[('alice', ()), ('bob', ())])
    try:
        n = await happy_path(srv)
        n += await conversation_story(srv, srv.keys['alice'], srv.keys['bob'], 'Tell me a story about a cat.',
                                      'What did the cat do next?', 16)
        n += await hostile(srv)
        n += await flood(srv)
        n += await slow_reader(srv)
        rid_c, rid_gone = await cancels(srv)
        n += 2
        rows = srv.ledger_settled(n)
        assert len(rows) == n, (len(rows), n, rows[-5:])
        by = {r['request_id']: r for r in rows}
        for rid in (rid_c, rid_gone):
            assert by[rid]['status'] == 'cancelled' and by[rid]['finish_reason'] == 'cancelled', by[rid]
            assert 1 <= by[rid]['completion_tokens'] < 1900, by[rid]
        stat = {}
        for r in rows:
            stat[r['status']] = stat.get(r['status'], 0) + 1
        assert stat.get('cancelled') == 10, stat     # 8 cancelled by message in hostile, c, gone
        assert stat.get('rejected') == 1, stat       # too_many_requests
        print('ws: server 1: %d requests, ledger %s' % (n, stat))
        kv_pool_back_to_idle(srv)
    finally:
        rc, err = srv.stop()
    assert rc == 0, (rc, err)
    assert 'closed (1009)' in err, err


# ---- server 2: 64 clients at once ----------------------------------------------------------

async def many(srv, n_clients=64):
    async def one(i):
        try:
            ws, _ = await connect(srv)
        except (OSError, websockets.WebSocketException, asyncio.TimeoutError) as e:
            return ('refused', repr(e))
        try:
            frames = await chat(ws, i, messages=[{'role': 'user', 'content': 'Tell story %d' % i}], max_tokens=8,
                                temperature=0.8, seed=i)
            if frames[-1]['type'] == 'done':
                d = check_stream(frames)
                assert 1 <= d['usage']['completion_tokens'] <= 8, d
            return (frames[-1]['type'], frames[-1])
        finally:
            await ws.close()
    return await asyncio.gather(*[one(i) for i in range(n_clients)])


async def server2():
    srv = Server(model, '--ctx', '256')
    try:
        res = await many(srv)
        kinds = {}
        for kind, f in res:
            kinds[kind] = kinds.get(kind, 0) + 1
            assert kind in ('done', 'error'), (kind, f)      # completed, or told why not
        rows = srv.ledger_settled(64)
        assert len(rows) == 64, (len(rows), kinds)
        assert sum(r['status'] == 'completed' for r in rows) == kinds.get('done', 0), (kinds, rows[:3])
        assert kinds.get('done', 0) >= 1, kinds
        print('ws: 64 clients: %s' % kinds)
        kv_pool_back_to_idle(srv)
    finally:
        rc, err = srv.stop()
    assert rc == 0, (rc, err)


# ---- server 3: --require-key, --no-store-content ----------------------------------------------

async def server3():
    srv = Server(model, '--ctx', '256', '--require-key', '--no-store-content', keys=[('alice', ())])
    key = srv.keys['alice']
    try:
        ws = await open_ws(srv)
        assert await recv(ws) == {'type': 'auth_required', 'timeout_s': 10}
        await send(ws, **chat_msg('early', messages=M, max_tokens=4))
        await error_of(ws, 'unauthorized', id='early')
        await send(ws, type='cancel', id='early')
        await error_of(ws, 'unauthorized', id='early')
        await send(ws, type='auth', key='em_' + 'x' * 43)
        await error_of(ws, 'invalid_api_key')
        await send(ws, type='auth')
        e = await error_of(ws, 'missing_api_key')
        assert '"auth"' in e['message'], e
        await send(ws, type='auth', key=key)
        r = await recv(ws)
        assert r['type'] == 'ready' and r['key'] == 'alice', r
        d = check_stream(await chat(ws, 'late', messages=M, max_tokens=4, temperature=0))
        assert d['conversation_id'] is None, d          # --no-store-content: nothing kept
        await ws.close()
        st, lst = get_json(srv, '/api/conversations', key)
        assert st == 200 and lst['data'] == [], lst
        st, e = get_json(srv, '/api/conversations')
        assert st == 401 and e['error']['code'] == 'missing_api_key', e
        st, h, body = srv.request('GET', '/api/conversations', headers={'Authorization': 'Bearer em_nope'})
        assert st == 401, body
        # three failed auth messages: closed (1008)
        ws = await open_ws(srv)
        await recv(ws)
        for _ in range(3):
            await send(ws, type='auth', key='em_nope')
        await error_of(ws, 'invalid_api_key')
        await error_of(ws, 'invalid_api_key')
        await error_of(ws, 'invalid_api_key')
        await expect_close(ws, 1008)
        # without the subprotocol, or on another path: no WebSocket
        for kw, path in (({'subprotocols': None}, '/ws'), ({}, '/nowhere')):
            try:
                sock = await websockets.connect('ws://127.0.0.1:%d%s' % (srv.port, path), open_timeout=T, **kw)
            except (websockets.WebSocketException, OSError):
                continue
            await sock.close()
            raise AssertionError('a WebSocket opened with %r on %s' % (kw, path))
        rows = srv.ledger_settled(2)
        assert [r['status'] for r in rows] == ['rejected', 'completed'], rows   # 'early' ran nothing
        assert rows[0]['key_id'] is None or rows[0]['key_id'] == 0, rows
        print('ws: --require-key: ok')
    finally:
        rc, err = srv.stop()
    assert rc == 0, (rc, err)
    assert key not in err, 'a key reached the log'
    assert 'WebSocket auth: 401' in err, err


asyncio.run(server1())
asyncio.run(server2())
asyncio.run(server3())
print('ws: ok')
