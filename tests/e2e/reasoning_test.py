# reasoning_test.py — reasoning kept apart from the answer, through a real
# `ember serve` with a real model (SmolLM2-135M): a grammar forces a think
# block at the start of the answer (a model that thinks writes one itself),
# and the answer comes back split — `message.reasoning_content` and
# `content`, the streamed `delta.reasoning_content` adding up to the same,
# `usage.completion_tokens_details.reasoning_tokens` counting the block's
# tokens (also in the ledger); `include_reasoning: false` leaves the
# reasoning out; a think block that is not at the start stays text; bad
# reasoning parameters are refused by name. The WebSocket protocol sends the
# reasoning in `reasoning` frames before the answer's `token`s, and stores
# the answer alone. Then SmolLM2 with a template whose generation prompt
# opens the block (as DeepSeek-R1's does): all it writes is reasoning, and
# a reasoning budget (chat's reasoning_budget, Anthropic's
# thinking.budget_tokens) closes the block after that many tokens, the
# model answering after it.
import asyncio
import json

import serve_util as su

try:
    import openai
    import websockets
except ImportError as e:
    su.skip('%s (scripts/venv.sh installs the openai SDK, scripts/setup.sh python3-websockets)' % e)

THINK = 'root ::= "<think>\\n" [a-z ]{10,60} "\\n</think>\\n\\n" [A-Za-z ,.]{5,40}'
LATE = 'root ::= "So. <think>" [a-z ]{3,20} "</think> done"'


async def frames(srv, params, text='Is 7 prime?'):
    """The frames of one chat over the WebSocket, by type (their texts joined), and its done."""
    async with websockets.connect('ws://127.0.0.1:%d/ws' % srv.port, subprotocols=['ember.chat.v1'],
                                  open_timeout=30) as ws:
        got = {'reasoning': '', 'token': '', 'order': []}
        while True:
            m = json.loads(await asyncio.wait_for(ws.recv(), 300))
            if m['type'] == 'ready':
                await ws.send(json.dumps({'type': 'chat', 'id': 'r1', 'params': params,
                                          'messages': [{'role': 'user', 'content': text}]}))
            elif m['type'] in ('reasoning', 'token'):
                got[m['type']] += m['text']
                if m['text']:
                    got['order'].append(m['type'])
            elif m['type'] == 'done':
                return got, m
            elif m['type'] == 'error':
                raise AssertionError(m)

srv = su.Server(su.chat_model())
try:
    client = openai.OpenAI(base_url=srv.base + '/v1', api_key='sk-no-key-required', max_retries=0, timeout=600)
    name = client.models.list().data[0].id
    msgs = [{'role': 'user', 'content': 'Is 7 a prime number?'}]
    r = client.chat.completions.create(model=name, messages=msgs, max_tokens=80, temperature=0,
                                       extra_body={'grammar': THINK})
    m = r.choices[0].message
    reasoning = m.model_extra.get('reasoning_content')
    assert reasoning and m.content, m
    assert '<think>' not in m.content and '</think>' not in m.content and '<think>' not in reasoning, m
    assert reasoning == reasoning.strip() and m.content == m.content.lstrip(), m
    assert set(reasoning) <= set('abcdefghijklmnopqrstuvwxyz '), reasoning   # what the grammar let it write
    n_think = r.usage.completion_tokens_details.reasoning_tokens
    assert 4 <= n_think < r.usage.completion_tokens, r.usage
    print('reasoning: %r | %r (%d of %d tokens)' % (reasoning, m.content, n_think, r.usage.completion_tokens))

    # streamed: the reasoning deltas, then the answer's, add up to the same
    s = client.chat.completions.create(model=name, messages=msgs, max_tokens=80, temperature=0, stream=True,
                                       stream_options={'include_usage': True}, extra_body={'grammar': THINK})
    rs, cs, order, usage = '', '', [], None
    for ch in s:
        if not ch.choices:
            usage = ch.usage
            continue
        d = ch.choices[0].delta
        if (d.model_extra or {}).get('reasoning_content'):
            rs += d.model_extra['reasoning_content']
            order.append('r')
        if d.content:
            cs += d.content
            order.append('c')
    assert (rs, cs) == (reasoning, m.content), (rs, cs)
    assert 'r' in order and order.index('c') > max(i for i, k in enumerate(order) if k == 'r'), order
    assert usage.completion_tokens_details.reasoning_tokens == n_think, usage

    # include_reasoning false: the answer alone, the tokens still counted
    r = client.chat.completions.create(model=name, messages=msgs, max_tokens=80, temperature=0,
                                       extra_body={'grammar': THINK, 'include_reasoning': False})
    assert 'reasoning_content' not in (r.choices[0].message.model_extra or {}), r.choices[0].message
    assert r.choices[0].message.content == m.content and r.usage.completion_tokens_details.reasoning_tokens == n_think

    # a block that is not where the answer begins is the answer's text
    r = client.chat.completions.create(model=name, messages=msgs, max_tokens=40, temperature=0,
                                       extra_body={'grammar': LATE})
    assert r.choices[0].message.content.startswith('So. <think>'), r.choices[0].message
    assert not (r.choices[0].message.model_extra or {}).get('reasoning_content')
    assert r.usage.completion_tokens_details.reasoning_tokens == 0, r.usage

    # bad parameters: 400 naming them
    for body, param in (({'include_reasoning': 'yes'}, 'include_reasoning'),
                        ({'reasoning_effort': 'extreme'}, 'reasoning_effort'),
                        ({'chat_template_kwargs': ['enable_thinking']}, 'chat_template_kwargs')):
        try:
            client.chat.completions.create(model=name, messages=msgs, max_tokens=4, extra_body=body)
            raise AssertionError('accepted: %r' % body)
        except openai.BadRequestError as e:
            assert e.body['param'] == param, e.body
    # template variables reach the template (SmolLM2's ignores them: the same answer)
    r = client.chat.completions.create(model=name, messages=msgs, max_tokens=8, temperature=0,
                                       reasoning_effort='low', extra_body={'chat_template_kwargs':
                                                                           {'enable_thinking': False}})
    assert r.choices[0].message.content

    # the WebSocket protocol: reasoning frames, then the answer's
    got, done = asyncio.run(frames(srv, {'grammar': THINK, 'max_tokens': 80, 'temperature': 0}))
    assert got['reasoning'] and got['token'] and '<think>' not in got['token'] + got['reasoning'], got
    last_r = max(i for i, k in enumerate(got['order']) if k == 'reasoning')
    assert got['order'].index('token') > last_r, got['order']
    assert 0 < done['usage']['reasoning_tokens'] < done['usage']['completion_tokens'], done
    st, _, stored = srv.request('GET', '/api/conversations/%d' % done['conversation_id'])
    stored = json.loads(stored)
    assert [m['content'] for m in stored['messages'] if m['role'] == 'assistant'] == [got['token']], stored
finally:
    rc, err = srv.stop()
assert rc == 0, err
assert 'reasoning: <think>...</think>' in err, err

# a template whose generation prompt opens the block: the answer begins inside it
srv = su.Server(su.thinking_model(su.chat_model()))
try:
    got, done = asyncio.run(frames(srv, {'max_tokens': 24, 'temperature': 0}))
    assert got['reasoning'] and not got['token'], got   # it never closes the block: all of it is reasoning
    assert done['usage']['reasoning_tokens'] == done['usage']['completion_tokens'] > 0, done
    assert done['message_id'], done   # stored, though its answer is empty

    # a reasoning budget: the block is closed after it, and the model goes on to answer
    st, _, r = srv.post('/v1/chat/completions', {'messages': [{'role': 'user', 'content': 'Is 7 prime?'}],
                                                 'max_tokens': 40, 'temperature': 0, 'reasoning_budget': 4})
    assert st == 200, r
    u, m = r['usage'], r['choices'][0]['message']
    assert 4 <= u['completion_tokens_details']['reasoning_tokens'] <= 4 + 6, u   # the budget, then the close tag
    assert m['content'] and m['reasoning_content'] and '</think>' not in m['content'], m
    print('reasoning: budget 4: %r | %r' % (m['reasoning_content'], m['content'][:40]))
    st, _, r = srv.post('/v1/messages', {'max_tokens': 40, 'temperature': 0, 'messages': [
        {'role': 'user', 'content': 'Is 7 prime?'}], 'thinking': {'type': 'enabled', 'budget_tokens': 4}})
    assert st == 200 and [c['type'] for c in r['content']][:2] == ['thinking', 'text'], r
finally:
    rc, err = srv.stop()
assert rc == 0, err
assert 'reasoning: <think>...</think> (the template' in err, err
print('reasoning: ok')
