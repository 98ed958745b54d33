# ws_util.py — what the WebSocket tests share: a client of ember.chat.v1 on
# a real `ember serve` (Debian's python3-websockets, asyncio API): connect
# (and authenticate), send a message, receive frames with a bound on every
# wait, run one chat and collect its frames, check their order, and the
# greedy /v1/chat/completions answer to compare a chat with; and the
# conversations story both WebSocket tests tell (one per model).
import asyncio
import json

from serve_util import skip

try:
    import websockets
except ImportError:
    skip('python3-websockets is absent (scripts/setup.sh installs it)')

# seconds one frame may take to come: a bound for a hang (ASan, a cold
# shader cache on a slow host), not a speed limit
T = 300


def url(srv, path='/ws'):
    return 'ws://127.0.0.1:%d%s' % (srv.port, path)


async def open_ws(srv, **kw):
    kw.setdefault('subprotocols', ['ember.chat.v1'])
    return await websockets.connect(url(srv), max_size=None, open_timeout=T, close_timeout=30,
                                    ping_interval=None, **kw)


async def recv(ws, timeout=T):
    return json.loads(await asyncio.wait_for(ws.recv(), timeout))


async def send(ws, **msg):
    await ws.send(json.dumps(msg))


async def connect(srv, key=None, **kw):
    """A socket that got ready (after an auth message when key is given): (ws, ready)."""
    ws = await open_ws(srv, **kw)
    first = await recv(ws)
    if key is not None:
        assert first['type'] in ('ready', 'auth_required'), first
        await send(ws, type='auth', key=key)
        first = await recv(ws)
    assert first['type'] == 'ready', first
    return ws, first


def chat_msg(id, messages=None, message=None, conversation_id=None, parent_id=None, regenerate=None, **params):
    m = {'type': 'chat', 'id': id}
    if messages is not None:
        m['messages'] = messages
    if message is not None:
        m['message'] = message
    if conversation_id is not None:
        m['conversation_id'] = conversation_id
    if parent_id is not None:
        m['parent_id'] = parent_id
    if regenerate is not None:
        m['regenerate'] = regenerate
    if params:
        m['params'] = params
    return m


async def collect(ws, id, others=None, limit=100000):
    """The frames about id up to its done or error; frames about other ids go to others (a list)."""
    got = []
    for _ in range(limit):
        f = await recv(ws)
        if f.get('id') != id:
            assert others is not None, ('a frame about another request', id, f)
            others.append(f)
            continue
        got.append(f)
        if f['type'] in ('done', 'error'):
            return got
    raise AssertionError('no done for %r in %d frames' % (id, limit))


async def chat(ws, id, **kw):
    await ws.send(json.dumps(chat_msg(id, **kw)))
    return await collect(ws, id)


def text_of(frames):
    return ''.join(f['text'] for f in frames if f['type'] == 'token')


def check_stream(frames):
    """queued (one or more, positions >= 0, the first naming the ledger row), then tokens, then done."""
    types = [f['type'] for f in frames]
    assert types[-1] == 'done', frames[-3:]
    assert types[0] == 'queued' and frames[0]['request_id'].startswith('chatws-'), frames[:2]
    n_q = types.index('token') if 'token' in types else len(types) - 1
    assert set(types[:n_q]) == {'queued'} and set(types[n_q:-1]) <= {'token'}, types
    assert all(isinstance(f['position'], int) and f['position'] >= 0 for f in frames[:n_q]), frames[:n_q]
    assert all(f['text'] for f in frames if f['type'] == 'token'), 'an empty token frame'
    d = frames[-1]
    assert set(d) == {'type', 'id', 'conversation_id', 'user_message_id', 'message_id', 'finish_reason', 'usage',
                      'timings'}, d
    for k in ('conversation_id', 'user_message_id', 'message_id'):
        assert d[k] is None or (isinstance(d[k], int) and d[k] > 0), d
    u, t = d['usage'], d['timings']
    assert set(u) == {'prompt_tokens', 'completion_tokens', 'cached_tokens', 'reasoning_tokens'}, u
    assert u['prompt_tokens'] > 0 and 0 <= u['cached_tokens'] <= u['prompt_tokens'], u
    assert set(t) == {'queue_ms', 'ttft_ms', 'tokens_per_s'}, t
    assert t['queue_ms'] >= 0, t
    if u['completion_tokens'] > 0:
        assert t['ttft_ms'] >= t['queue_ms'], t
    if u['completion_tokens'] > 1:
        assert t['tokens_per_s'] > 0, t
    return d


def bearer(key):
    return {'Authorization': 'Bearer ' + key} if key else {}


def http_chat(srv, messages, key=None, **params):
    """The same conversation through POST /v1/chat/completions: (text, usage)."""
    st, h, body = srv.post('/v1/chat/completions', dict(params, messages=messages), headers=bearer(key))
    assert st == 200, body
    return body['choices'][0]['message']['content'], body['usage']


def get_json(srv, path, key=None, method='GET'):
    st, h, body = srv.request(method, path, headers=bearer(key))
    return st, json.loads(body) if body else None


async def conversation_story(srv, key_a, key_b, q1, q2, max_tokens):
    """A chat without conversation_id creates one; `message` continues it (the model
    sees the history, the prefix cache serves the first exchange); the API lists it,
    shows and deletes it for its key only. Returns the number of requests made."""
    p = {'max_tokens': max_tokens, 'temperature': 0}
    wa, ready = await connect(srv, key=key_a)
    assert ready['key'] == 'alice', ready
    m1 = [{'role': 'user', 'content': q1}]
    f1 = await chat(wa, 'q1', messages=m1, **p)
    d1 = check_stream(f1)
    a1 = text_of(f1)
    cid = d1['conversation_id']
    assert isinstance(cid, int) and cid > 0, d1
    f2 = await chat(wa, 'q2', message=q2, conversation_id=cid, **p)
    d2 = check_stream(f2)
    a2 = text_of(f2)
    assert d2['conversation_id'] == cid, d2
    # the model saw the history: the same prompt and answer as the whole
    # conversation sent over HTTP (one generation path, so byte for byte)
    m2 = m1 + [{'role': 'assistant', 'content': a1}, {'role': 'user', 'content': q2}]
    ref, ref_u = http_chat(srv, m2, key_a, **p)
    assert a2 == ref, (a2, ref)
    u1, u2 = d1['usage'], d2['usage']
    assert u2['prompt_tokens'] == ref_u['prompt_tokens'], (u2, ref_u)
    assert u2['prompt_tokens'] >= u1['prompt_tokens'] + u1['completion_tokens'], (u1, u2)
    assert u2['cached_tokens'] > 0, u2          # the first exchange's blocks, from the prefix cache

    st, lst = get_json(srv, '/api/conversations', key_a)
    assert st == 200 and lst['object'] == 'list', lst
    mine = [c for c in lst['data'] if c['id'] == cid]
    assert len(mine) == 1, lst
    c = mine[0]
    assert set(c) == {'id', 'title', 'created_ms', 'updated_ms', 'message_count'}, c
    assert c['message_count'] == 4 and c['title'] == q1[:60].strip() and c['updated_ms'] >= c['created_ms'], c
    st, one = get_json(srv, '/api/conversations/%d' % cid, key_a)
    assert st == 200 and one['id'] == cid, one
    assert [(m['role'], m['content']) for m in one['messages']] == [
        ('user', q1), ('assistant', a1), ('user', q2), ('assistant', a2)], one['messages']
    assert one['messages'][1]['tokens'] == u1['completion_tokens'], one['messages']

    # another key: 404 for it (GET, DELETE, a chat continuing it), and not in its list
    st, e = get_json(srv, '/api/conversations/%d' % cid, key_b)
    assert st == 404 and e['error']['code'] == 'not_found', e
    st, e = get_json(srv, '/api/conversations/%d' % cid, key_b, method='DELETE')
    assert st == 404 and e['error']['code'] == 'not_found', e
    st, lst_b = get_json(srv, '/api/conversations', key_b)
    assert st == 200 and cid not in [x['id'] for x in lst_b['data']], lst_b
    wb, ready = await connect(srv, key=key_b)
    assert ready['key'] == 'bob', ready
    fb = await chat(wb, 'steal', message='and?', conversation_id=cid, **p)
    assert fb == [{'type': 'error', 'id': 'steal', 'code': 'not_found', 'param': 'conversation_id',
                   'message': fb[0]['message']}], fb
    await wb.close()
    st, one = get_json(srv, '/api/conversations/%d' % cid, key_a)
    assert st == 200 and len(one['messages']) == 4, one     # untouched

    # its own key deletes it
    st, e = get_json(srv, '/api/conversations/%d' % cid, key_a, method='DELETE')
    assert st == 200 and e == {'id': cid, 'object': 'conversation', 'deleted': True}, e
    st, e = get_json(srv, '/api/conversations/%d' % cid, key_a)
    assert st == 404, e
    st, lst = get_json(srv, '/api/conversations', key_a)
    assert cid not in [x['id'] for x in lst['data']], lst
    await wa.close()
    return 4   # q1, q2, the HTTP reference, bob's refused chat
