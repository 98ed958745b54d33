#!/usr/bin/env python3
# ws_chat_test.py — ember.chat.v1 with the real chat model (SmolLM2-135M-
# Instruct and its own chat template, system prompt included), on a real
# `ember serve`: a greedy chat over the WebSocket is byte for byte the
# /v1/chat/completions answer; a conversation is created, continued with
# `message` (the stored history rendered through the template, the first
# exchange served by the prefix cache), listed, shown and deleted for its own
# key only; and a stream the client drops mid-answer ends cancelled in the
# ledger. SKIPs without the model (scripts/setup.sh fetches it).
import asyncio
import sys

sys.path.insert(0, __file__.rsplit('/', 1)[0])
from serve_util import Server, chat_model  # noqa: E402
from ws_util import (T, chat, chat_msg, check_stream, connect, conversation_story, http_chat, recv,  # noqa: E402
                     send, text_of)

model = chat_model()


async def main(srv):
    n = 0
    ws, ready = await connect(srv)
    assert ready['model'] == 'SmolLM2-135M-Instruct.Q4_1' and ready['context'] == 1024, ready
    m = [{'role': 'system', 'content': 'You answer in one short sentence.'},
         {'role': 'user', 'content': 'What is the capital of France?'}]
    p = {'max_tokens': 24, 'temperature': 0}
    frames = await chat(ws, 1, messages=m, **p)
    d = check_stream(frames)
    ref, ref_u = http_chat(srv, m, **p)
    assert text_of(frames) == ref and 'Paris' in ref, (text_of(frames), ref)
    assert d['usage']['prompt_tokens'] == ref_u['prompt_tokens'], (d, ref_u)
    assert d['usage']['completion_tokens'] == ref_u['completion_tokens'], (d, ref_u)
    n += 2
    n += await conversation_story(srv, srv.keys['alice'], srv.keys['bob'], 'Name a fruit that is yellow.',
                                  'What colour is it inside?', 16)
    # a client gone mid-answer: its request is cancelled
    await send(ws, **chat_msg('gone', messages=m, max_tokens=400, temperature=0, ignore_eos=True))
    rid = (await recv(ws))['request_id']
    for _ in range(1000):
        if (await recv(ws))['type'] == 'token':
            break
    ws.transport.abort()
    await asyncio.wait_for(ws.wait_closed(), T)
    n += 1
    rows = srv.ledger_settled(n)
    assert len(rows) == n, (len(rows), n, rows)
    gone = [r for r in rows if r['request_id'] == rid]
    assert gone and gone[0]['status'] == 'cancelled' and gone[0]['completion_tokens'] < 400, gone
    print('ws-chat: %d requests' % n)


srv = Server(model, '--ctx', '1024', keys=[('alice', ()), ('bob', ())])
try:
    asyncio.run(main(srv))
finally:
    rc, err = srv.stop()
assert rc == 0, (rc, err)
print('ws-chat: ok')
