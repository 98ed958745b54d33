#!/usr/bin/env python3
# branches_test.py — conversation branches, rename, search, export and import
# (what the browser UI's regenerate / edit / switch / rename / search /
# export buttons use), on a real `ember serve` (127.0.0.1, a fresh SQLite
# file), over ember.chat.v1 (Debian's python3-websockets) and the
# conversations API:
#  - regenerate (parent_id = a user message, regenerate: true) stores a
#    sibling answer; the history it renders is root -> that message (the
#    same greedy answer and prompt_tokens as /v1/chat/completions of it);
#  - edit (parent_id = the edited message's parent, 0 for the first, and
#    message) stores a sibling user message with its own answer;
#  - GET has every message of every branch; the tree is rebuilt from
#    parent_id; switching current_leaf_id by PATCH and continuing renders
#    exactly that branch; a stopped answer is stored cancelled with its text;
#  - rename + search (case-insensitive, Unicode); hostile titles
#    (<img onerror>, <script>) round-trip byte for byte;
#  - another key gets 404 / not_found on every endpoint and over the socket;
#  - export -> import gives equal trees under new ids; hostile imports
#    (cycles, a parent in another conversation, missing fields, bad types, a
#    10 MB body) are refused with 400 / 413 and create nothing.
# Uses the tiny stories260K model (no chat template: the ChatML fallback).
import asyncio
import json
import sys

sys.path.insert(0, __file__.rsplit('/', 1)[0])
from serve_util import Server, shared_model  # noqa: E402
from ws_util import T, bearer, chat, chat_msg, check_stream, collect, connect, http_chat, recv, send, \
    text_of  # noqa: E402

model = shared_model('stories260K.gguf')
P = {'max_tokens': 12, 'temperature': 0}
XSS = '<img src=x onerror=alert(1)>'
SCRIPT = '<script>alert("t\u00e9")</script> & \u2603'


def req(srv, method, path, key, body=None, raw=None):
    """(status, parsed JSON or None)"""
    st, h, out = srv.request(method, path, body=body, raw=raw, headers=bearer(key))
    return st, json.loads(out) if out else None


def conv(srv, cid, key):
    st, c = req(srv, 'GET', '/api/conversations/%d' % cid, key)
    assert st == 200, (st, c)
    assert set(c) == {'id', 'title', 'created_ms', 'updated_ms', 'message_count', 'current_leaf_id', 'messages'}, c
    for m in c['messages']:
        assert set(m) == {'id', 'parent_id', 'role', 'content', 'tokens', 'finish_reason', 'created_ms'}, m
    assert c['message_count'] == len(c['messages']), c
    return c


def by_id(c):
    return {m['id']: m for m in c['messages']}


def path_to(c, leaf):
    """The branch root -> leaf as [(role, content)], built from parent_id as a client does."""
    ms, out = by_id(c), []
    while leaf is not None:
        out.append((ms[leaf]['role'], ms[leaf]['content']))
        leaf = ms[leaf]['parent_id']
    return out[::-1]


def as_msgs(path):
    return [{'role': r, 'content': t} for r, t in path]


def canon(c):
    """A conversation's tree without its ids: title, current leaf and each message (role, content,
    tokens, finish_reason, created_ms, parent) by position in id order."""
    pos = {m['id']: i for i, m in enumerate(sorted(c['messages'], key=lambda m: m['id']))}
    msgs = [(m['role'], m['content'], m['tokens'], m['finish_reason'], m['created_ms'],
             None if m['parent_id'] is None else pos[m['parent_id']])
            for m in sorted(c['messages'], key=lambda m: m['id'])]
    return (c['title'], None if c['current_leaf_id'] is None else pos[c['current_leaf_id']], msgs)


async def done_of(ws, id, **kw):
    frames = await chat(ws, id, **kw)
    d = check_stream(frames)
    return d, text_of(frames)


async def error_frame(ws, msg, code, param):
    await ws.send(json.dumps(msg))
    f = await collect(ws, msg['id'])
    assert f == [{'type': 'error', 'id': msg['id'], 'code': code, 'param': param, 'message': f[0]['message']}], \
        (msg, f)


async def branches(srv, ka, kb):
    """Regenerate, edit, switch, continue; the tree; a stopped answer. Returns (cid, the tree)."""
    ws, ready = await connect(srv, key=ka)
    assert ready['key'] == 'alice', ready
    q1 = 'Once upon a time'
    d1, a1_text = await done_of(ws, 'c1', messages=[{'role': 'user', 'content': q1}], **P)
    cid, u1, a1 = d1['conversation_id'], d1['user_message_id'], d1['message_id']
    assert cid and u1 and a1 and a1 > u1, d1
    c = conv(srv, cid, ka)
    assert c['current_leaf_id'] == a1 and c['title'] == q1, c
    assert [(m['id'], m['parent_id'], m['role'], m['finish_reason'], m['tokens']) for m in c['messages']] == [
        (u1, None, 'user', None, 0), (a1, u1, 'assistant', 'length', 12)], c

    # regenerate: a sibling of a1, from the history root -> u1 (greedy: the same answer, the same prompt)
    d, text = await done_of(ws, 'regen', conversation_id=cid, parent_id=u1, regenerate=True, **P)
    a1b = d['message_id']
    assert d['conversation_id'] == cid and d['user_message_id'] is None and a1b and a1b != a1, d
    assert text == a1_text and d['usage']['prompt_tokens'] == d1['usage']['prompt_tokens'], (text, d, d1)
    c = conv(srv, cid, ka)
    ms = by_id(c)
    assert ms[a1b]['parent_id'] == u1 and ms[a1]['parent_id'] == u1 and ms[a1b]['content'] == text, c
    assert c['current_leaf_id'] == a1b and c['message_count'] == 3, c

    # continue from the current leaf (no parent_id): under a1b
    d, a2_text = await done_of(ws, 'c2', conversation_id=cid, message='The cat', **P)
    u2, a2 = d['user_message_id'], d['message_id']
    ref, ref_u = http_chat(srv, as_msgs([('user', q1), ('assistant', a1_text), ('user', 'The cat')]), ka, **P)
    assert a2_text == ref and d['usage']['prompt_tokens'] == ref_u['prompt_tokens'], (a2_text, ref, d, ref_u)
    c = conv(srv, cid, ka)
    assert by_id(c)[u2]['parent_id'] == a1b and c['current_leaf_id'] == a2, c

    # edit u2: the new text under u2's parent, a sibling of u2 with its own answer
    d, a2e_text = await done_of(ws, 'e2', conversation_id=cid, parent_id=a1b, message='The bird', **P)
    u2e, a2e = d['user_message_id'], d['message_id']
    ref, ref_u = http_chat(srv, as_msgs([('user', q1), ('assistant', a1_text), ('user', 'The bird')]), ka, **P)
    assert a2e_text == ref and d['usage']['prompt_tokens'] == ref_u['prompt_tokens'], (a2e_text, ref)
    # edit the first message: parent_id 0, a second root
    d, a1e_text = await done_of(ws, 'e1', conversation_id=cid, parent_id=0, message='A dog ran', **P)
    u1e, a1e = d['user_message_id'], d['message_id']
    ref, ref_u = http_chat(srv, [{'role': 'user', 'content': 'A dog ran'}], ka, **P)
    assert a1e_text == ref and d['usage']['prompt_tokens'] == ref_u['prompt_tokens'], (a1e_text, ref)

    # the tree, rebuilt from parent_id as the UI does
    c = conv(srv, cid, ka)
    kids = {}
    for m in c['messages']:
        kids.setdefault(m['parent_id'], []).append(m['id'])
    assert kids == {None: [u1, u1e], u1: [a1, a1b], a1b: [u2, u2e], u2: [a2], u2e: [a2e], u1e: [a1e]}, kids
    assert c['current_leaf_id'] == a1e and c['message_count'] == 9, c
    assert path_to(c, a2e) == [('user', q1), ('assistant', a1_text), ('user', 'The bird'), ('assistant', a2e_text)]

    # switch to the first answer's branch, and continue: exactly that branch's history is rendered
    st, p = req(srv, 'PATCH', '/api/conversations/%d' % cid, ka, {'current_leaf_id': a1})
    assert st == 200 and p['current_leaf_id'] == a1 and p['id'] == cid and 'messages' not in p, (st, p)
    assert conv(srv, cid, ka)['current_leaf_id'] == a1
    d, a3_text = await done_of(ws, 'c3', conversation_id=cid, message='Then', **P)
    ref, ref_u = http_chat(srv, as_msgs([('user', q1), ('assistant', a1_text), ('user', 'Then')]), ka, **P)
    assert a3_text == ref and d['usage']['prompt_tokens'] == ref_u['prompt_tokens'], (a3_text, ref, d, ref_u)
    c = conv(srv, cid, ka)
    assert by_id(c)[d['user_message_id']]['parent_id'] == a1 and c['current_leaf_id'] == d['message_id'], c
    # switch to an inner message (a1b has children): continuing adds a third sibling under it
    st, p = req(srv, 'PATCH', '/api/conversations/%d' % cid, ka, {'current_leaf_id': a1b})
    assert st == 200, p
    d, text = await done_of(ws, 'inner', conversation_id=cid, message='Later', **P)
    ref, ref_u = http_chat(srv, as_msgs([('user', q1), ('assistant', a1_text), ('user', 'Later')]), ka, **P)
    assert text == ref and d['usage']['prompt_tokens'] == ref_u['prompt_tokens'], (text, ref)
    c = conv(srv, cid, ka)
    assert [m['id'] for m in c['messages'] if m['parent_id'] == a1b] == [u2, u2e, d['user_message_id']], c
    # regenerate an answer deep in a branch: root -> u2e rendered, the same greedy answer as a2e
    d, text = await done_of(ws, 'deep', conversation_id=cid, parent_id=u2e, regenerate=True, **P)
    assert text == a2e_text and by_id(conv(srv, cid, ka))[d['message_id']]['parent_id'] == u2e, (text, a2e_text)

    # a stopped answer: stored cancelled, with the text it had
    await send(ws, **chat_msg('stop', conversation_id=cid, parent_id=u1, regenerate=True, max_tokens=1900,
                              temperature=0, ignore_eos=True))
    got = []
    while True:
        f = await recv(ws)
        got.append(f)
        if f['type'] == 'token':
            await send(ws, type='cancel', id='stop')
            break
    got += await collect(ws, 'stop')
    d = check_stream(got)
    assert d['finish_reason'] == 'cancelled' and d['message_id'], d
    m = by_id(conv(srv, cid, ka))[d['message_id']]
    assert m['finish_reason'] == 'cancelled' and m['content'] == text_of(got) and m['parent_id'] == u1, (m, d)
    assert m['tokens'] == d['usage']['completion_tokens'], (m, d)

    # bad chats on stored history
    for msg, code, param in (
            (chat_msg('b1', message='x', parent_id=u1), 'invalid_request', 'conversation_id'),
            (chat_msg('b2', conversation_id=cid, regenerate=True), 'invalid_request', 'parent_id'),
            (chat_msg('b3', conversation_id=cid, parent_id=u1, regenerate=True, message='x'), 'invalid_request',
             'message'),
            (chat_msg('b4', conversation_id=cid, parent_id=a1, regenerate=True), 'invalid_request', 'parent_id'),
            (chat_msg('b5', conversation_id=cid, parent_id=a1, messages=[{'role': 'user', 'content': 'x'}]),
             'invalid_request', 'parent_id'),
            (chat_msg('b6', conversation_id=cid, parent_id='a1', message='x'), 'invalid_request', 'parent_id'),
            (chat_msg('b7', conversation_id=cid, parent_id=u1, regenerate='yes'), 'invalid_request', 'regenerate'),
            (chat_msg('b8', conversation_id=cid, parent_id=999999, message='x'), 'not_found', 'parent_id'),
            (chat_msg('b9', conversation_id=cid, parent_id=999999, regenerate=True), 'not_found', 'parent_id'),
            (chat_msg('b10', conversation_id=999999, parent_id=u1, regenerate=True), 'not_found',
             'conversation_id')):
        await error_frame(ws, msg, code, param)
    # a message id of another conversation of the same key is not found in this one
    d_other, _ = await done_of(ws, 'o1', messages=[{'role': 'user', 'content': 'Another story'}], **P)
    await error_frame(ws, chat_msg('b11', conversation_id=d_other['conversation_id'], parent_id=u1, message='x'),
                      'not_found', 'parent_id')
    # a new conversation from `messages`: the ids of what it stored
    assert d_other['user_message_id'] and d_other['message_id'] > d_other['user_message_id'], d_other
    await ws.close()
    return cid, d_other['conversation_id'], conv(srv, cid, ka)


async def other_key(srv, ka, kb, cid, tree):
    """bob: 404 / not_found for everything of alice's."""
    u1 = tree['messages'][0]['id']
    paths = ['/api/conversations/%d' % cid, '/api/conversations/%d/export' % cid]
    for path in paths:
        st, e = req(srv, 'GET', path, kb)
        assert st == 404 and e['error']['code'] == 'not_found', (path, st, e)
    for body in ({'title': 'mine'}, {'current_leaf_id': u1}):
        st, e = req(srv, 'PATCH', '/api/conversations/%d' % cid, kb, body)
        assert st == 404 and e['error']['code'] == 'not_found', (body, st, e)
    st, e = req(srv, 'DELETE', '/api/conversations/%d' % cid, kb)
    assert st == 404, e
    for q in ('', '?q=upon'):
        st, lst = req(srv, 'GET', '/api/conversations' + q, kb)
        assert st == 200 and cid not in [c['id'] for c in lst['data']], lst
    wb, _ = await connect(srv, key=kb)
    for msg in (chat_msg('s1', conversation_id=cid, parent_id=u1, regenerate=True, **P),
                chat_msg('s2', conversation_id=cid, parent_id=u1, message='x', **P),
                chat_msg('s3', conversation_id=cid, message='x', **P)):
        await error_frame(wb, msg, 'not_found', 'conversation_id')
    # bob's own conversation cannot take alice's message as a parent
    d, _ = await done_of(wb, 'own', messages=[{'role': 'user', 'content': 'Bob'}], **P)
    await error_frame(wb, chat_msg('s4', conversation_id=d['conversation_id'], parent_id=u1, message='x', **P),
                      'not_found', 'parent_id')
    await error_frame(wb, chat_msg('s5', conversation_id=d['conversation_id'], parent_id=u1, regenerate=True, **P),
                      'not_found', 'parent_id')
    st, e = req(srv, 'PATCH', '/api/conversations/%d' % d['conversation_id'], kb, {'current_leaf_id': u1})
    assert st == 400 and e['error']['param'] == 'current_leaf_id', e
    st, ex = req(srv, 'GET', '/api/conversations/export', kb)
    assert st == 200 and [c['title'] for c in ex['conversations']] == ['Bob'], ex
    await wb.close()
    assert conv(srv, cid, ka) == tree    # untouched


def rename_and_search(srv, ka, cid, other):
    base = '/api/conversations/%d' % cid
    for body, param in (({'title': ''}, 'title'), ({'title': 5}, 'title'), ({'title': None}, 'title'),
                        ({'title': 'x' * 513}, 'title'), ({'current_leaf_id': '3'}, 'current_leaf_id'),
                        ({'current_leaf_id': 0}, 'current_leaf_id'), ({'current_leaf_id': 1.5}, 'current_leaf_id'),
                        ({'current_leaf_id': 999999}, 'current_leaf_id'), ({'titel': 'x'}, 'titel'),
                        ({}, None), ([1], None)):
        st, e = req(srv, 'PATCH', base, ka, body)
        assert st == 400 and e['error']['param'] == param, (body, st, e)
    for raw in (b'{"title": ', b'', b'{"title": "a", "title": "b"}'):
        st, e = req(srv, 'PATCH', base, ka, raw=raw)
        assert st == 400, (raw, e)
    # a leaf of another conversation: 400, and a rename sent with it is not applied
    other_leaf = conv(srv, other, ka)['current_leaf_id']
    before = conv(srv, cid, ka)
    st, e = req(srv, 'PATCH', base, ka, {'title': 'not applied', 'current_leaf_id': other_leaf})
    assert st == 400 and e['error']['param'] == 'current_leaf_id', e
    assert conv(srv, cid, ka) == before
    # rename; search titles
    for title in (XSS, SCRIPT):
        st, p = req(srv, 'PATCH', base, ka, {'title': title})
        assert st == 200 and p['title'] == title and p['updated_ms'] == before['updated_ms'], p
        st, h, raw = srv.request('GET', base, headers=bearer(ka))
        assert json.loads(raw)['title'] == title, raw[:200]
    assert b'<script>alert(\\"t\xc3\xa9\\")</script> & \xe2\x98\x83' in raw, raw[:200]   # as is, not escaped
    st, p = req(srv, 'PATCH', base, ka, {'title': 'Stories of CATS and \u00c9t\u00e9'})
    assert st == 200, p
    st, p = req(srv, 'PATCH', '/api/conversations/%d' % other, ka, {'title': XSS})
    assert st == 200, p
    for q, want in (('cats', [cid]), ('%C3%A9T%C3%89', [cid]), ('stories+of', [cid]), ('onerror%3Dalert', [other]),
                    ('%3Cimg', [other]), ('dogs', []), ('%25', [])):
        st, lst = req(srv, 'GET', '/api/conversations?q=' + q, ka)
        assert st == 200 and [c['id'] for c in lst['data']] == want, (q, lst)
    st, lst = req(srv, 'GET', '/api/conversations', ka)
    ups = [c['updated_ms'] for c in lst['data']]
    assert st == 200 and {cid, other} <= {c['id'] for c in lst['data']} and ups == sorted(ups, reverse=True), lst
    for q in ('?q=%FF', '?q=a&q=b', '?x=1'):
        st, e = req(srv, 'GET', '/api/conversations' + q, ka)
        assert st == 400 and e['error']['param'] == 'q', (q, e)


def export_import(srv, ka, kb, cid):
    """Round trips (all of alice's into bob's, one into alice's own) and hostile imports."""
    st, ex = req(srv, 'GET', '/api/conversations/export', ka)
    assert st == 200 and ex['ember_conversations'] == 1 and len(ex['conversations']) == 2, ex
    for c in ex['conversations']:
        assert set(c) == {'title', 'created_ms', 'updated_ms', 'current_leaf_id', 'messages'}, c
    st, one = req(srv, 'GET', '/api/conversations/%d/export' % cid, ka)
    assert st == 200 and len(one['conversations']) == 1 and one['conversations'][0]['title'].startswith('Stories')
    st, r = req(srv, 'POST', '/api/conversations/import', kb, ex)
    assert st == 200 and len(r['imported']) == len(ex['conversations']), r
    for src, new in zip(ex['conversations'], r['imported']):
        st, got = req(srv, 'GET', '/api/conversations/%d/export' % new, kb)
        assert st == 200 and canon(got['conversations'][0]) == canon(src), (src, got)
        assert got['conversations'][0]['updated_ms'] == src['updated_ms'], got
        st, g = req(srv, 'GET', '/api/conversations/%d' % new, kb)
        old_ids = {m['id'] for m in src['messages']}
        assert not old_ids & {m['id'] for m in g['messages']} or not old_ids, g   # new ids
    st, r2 = req(srv, 'POST', '/api/conversations/import', ka, one)
    assert st == 200 and len(r2['imported']) == 1 and r2['imported'][0] not in (cid,), r2
    assert canon(conv(srv, r2['imported'][0], ka)) == canon(conv(srv, cid, ka))
    # a hand-written file: ids of its own, children before parents, fields left out take defaults
    hand = {'ember_conversations': 1, 'conversations': [{'title': XSS, 'current_leaf_id': 30, 'messages': [
        {'id': 30, 'parent_id': 20, 'role': 'assistant', 'content': 'answer', 'finish_reason': 'stop'},
        {'id': 20, 'parent_id': None, 'role': 'user', 'content': SCRIPT}]}]}
    st, r3 = req(srv, 'POST', '/api/conversations/import', ka, hand)
    assert st == 200, r3
    c = conv(srv, r3['imported'][0], ka)
    assert c['title'] == XSS and path_to(c, c['current_leaf_id']) == [('user', SCRIPT), ('assistant', 'answer')], c

    # hostile: 400 naming the place (413 for the size), nothing created
    def counts():
        total = 0
        for k in (ka, kb):
            st, e = req(srv, 'GET', '/api/conversations/export', k)
            total += sum(len(c['messages']) + 1 for c in e['conversations'])
        return total

    before = counts()
    msg = {'id': 1, 'parent_id': None, 'role': 'user', 'content': 'x'}

    def doc(*convs):
        return {'ember_conversations': 1, 'conversations': list(convs)}

    def c_of(*msgs, **kw):
        return dict({'title': 't', 'messages': list(msgs)}, **kw)

    cases = [
        (doc(c_of(dict(msg, parent_id=2), dict(msg, id=2, parent_id=1))), 'conversations[0].messages[0].parent_id'),
        (doc(c_of(dict(msg, parent_id=1))), 'conversations[0].messages[0].parent_id'),
        (doc(c_of(msg), c_of(dict(msg, id=2, parent_id=1))), 'conversations[1].messages[0].parent_id'),
        (doc(c_of(msg, dict(msg, content='dup'))), 'conversations[0].messages[1].id'),
        (doc(c_of(msg, current_leaf_id=7)), 'conversations[0].current_leaf_id'),
        (doc(c_of(msg), c_of({'id': 1, 'parent_id': None, 'content': 'x'})), 'conversations[1].messages[0].role'),
        (doc(c_of({'id': 1, 'parent_id': None, 'role': 'user'})), 'conversations[0].messages[0].content'),
        (doc(c_of({'parent_id': None, 'role': 'user', 'content': 'x'})), 'conversations[0].messages[0].id'),
        (doc(c_of({'id': 1, 'role': 'user', 'content': 'x'})), 'conversations[0].messages[0].parent_id'),
        (doc({'title': 't'}), 'conversations[0].messages'),
        (doc(c_of(dict(msg, role='tool'))), 'conversations[0].messages[0].role'),
        (doc(c_of(dict(msg, finish_reason='stop'))), 'conversations[0].messages[0].finish_reason'),
        (doc(c_of(dict(msg, role='assistant', finish_reason='eos'))), 'conversations[0].messages[0].finish_reason'),
        (doc(c_of(dict(msg, tokens=-1))), 'conversations[0].messages[0].tokens'),
        (doc(c_of(dict(msg, content=5))), 'conversations[0].messages[0].content'),
        (doc(c_of(dict(msg, id='1'))), 'conversations[0].messages[0].id'),
        (doc(c_of(msg, title='')), 'conversations[0].title'),
        (doc(c_of(msg, title='x' * 513)), 'conversations[0].title'),
        (doc(c_of(msg, created_ms=-5)), 'conversations[0].created_ms'),
        (doc('nope'), 'conversations[0]'),
        ({'ember_conversations': 2, 'conversations': []}, 'ember_conversations'),
        ({'conversations': []}, 'ember_conversations'),
        ({'ember_conversations': 1, 'conversations': {}}, 'conversations'),
        ([], None),
    ]
    for body, param in cases:
        st, e = req(srv, 'POST', '/api/conversations/import', ka, body)
        assert st == 400 and e['error']['param'] == param, (body, st, e)
        assert e['error']['message'].startswith(param or ''), e
    for raw in (b'', b'{"ember_conversations": 1, "conversations": [', b'\xff\xfe'):
        st, e = req(srv, 'POST', '/api/conversations/import', ka, raw=raw)
        assert st == 400, (raw, e)
    big = b'{"ember_conversations": 1, "conversations": [{"title": "' + b'a' * (10 << 20) + b'", "messages": []}]}'
    try:
        st, e = req(srv, 'POST', '/api/conversations/import', ka, raw=big)
        assert st == 413 and e['error']['code'] == 'request_too_large', (st, e)
    except (BrokenPipeError, ConnectionResetError):
        pass   # refused before the body was read, as it should be
    for method, path in (('GET', '/import'), ('POST', '/export'), ('PATCH', ''), ('POST', '/%d' % cid),
                         ('POST', '/%d/export' % cid)):
        st, e = req(srv, method, '/api/conversations' + path, ka)
        assert st == 405, (method, path, st, e)
    st, e = req(srv, 'GET', '/api/conversations/%d/nothing' % cid, ka)
    assert st == 404, e
    assert counts() == before


async def main(srv):
    ka, kb = srv.keys['alice'], srv.keys['bob']
    cid, other, tree = await branches(srv, ka, kb)
    await other_key(srv, ka, kb, cid, tree)
    rename_and_search(srv, ka, cid, other)
    export_import(srv, ka, kb, cid)
    # deleting takes the whole tree
    st, e = req(srv, 'DELETE', '/api/conversations/%d' % cid, ka)
    assert st == 200 and e['deleted'] is True, e
    st, e = req(srv, 'GET', '/api/conversations/%d' % cid, ka)
    assert st == 404, e


srv = Server(model, keys=[('alice', ()), ('bob', ())])
try:
    asyncio.run(asyncio.wait_for(main(srv), 20 * T))
finally:
    rc, err = srv.stop()
assert rc == 0, (rc, err)
print('branches: ok')
