#!/usr/bin/env python3
# ui_reasoning_test.py — a model that thinks before it answers, on the chat
# page in a real headless Chromium and on the WebSocket protocol beneath it.
# The real SmolLM2 is given a chat template whose generation prompt opens a
# think block (as DeepSeek-R1's does): the server reads the tags off the
# template and the model's whole output is reasoning (it never closes the
# block). The protocol sends it in `reasoning` frames, never `token`s, with
# `reasoning_tokens` in `done`; the page shows it folded above the (empty)
# answer, "Thinking…" while it comes and "Thought for N s" once filed, the
# text inside when unfolded; the stored answer holds none of it. On the
# stock template a grammar forces a block and an answer: both come, each in
# its own frames. A reasoning budget closes the block after that many
# tokens (chat's reasoning_budget, Anthropic's thinking.budget_tokens), and
# the model answers after it.
import asyncio
import json
import os
import sys

sys.path.insert(0, __file__.rsplit('/', 1)[0])
import serve_util as su  # noqa: E402
from browser_util import Browser, By  # noqa: E402
from ui_util import get_conv, save_settings, send_message  # noqa: E402

try:
    import websockets
except ImportError:
    su.skip('python3-websockets is absent')

THINKING = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
            "{% if add_generation_prompt %}<|im_start|>assistant\n<think>\n{% endif %}")
FORCED = 'root ::= "<think>\\n" [a-z ]{10,40} "\\n</think>\\n\\n" [A-Za-z ,.]{5,30}'


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


base = su.chat_model()
srv = su.Server(base)
try:   # the stock template, a block forced by a grammar: reasoning frames, then the answer's
    got, done = asyncio.run(frames(srv, {'grammar': FORCED, 'max_tokens': 80, 'temperature': 0}))
    assert got['reasoning'] and got['token'] and '<think>' not in got['token'] + got['reasoning'], got
    last_r = max(i for i, k in enumerate(got['order']) if k == 'reasoning')
    assert got['order'].index('token') > last_r, got['order']
    assert 0 < done['usage']['reasoning_tokens'] < done['usage']['completion_tokens'], done
    stored = get_conv(srv, done['conversation_id'])
    assert [m['content'] for m in stored['messages'] if m['role'] == 'assistant'] == [got['token']], stored
finally:
    srv.stop()

model = os.path.join(su.tempfile.mkdtemp(prefix='ember-think-'), 'thinking.gguf')
su.gguf_with_template(base, model, THINKING)
srv = su.Server(model)
b = None
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
    print('ui-reasoning: budget 4: %r | %r' % (m['reasoning_content'], m['content'][:40]))
    st, _, r = srv.post('/v1/messages', {'max_tokens': 40, 'temperature': 0, 'messages': [
        {'role': 'user', 'content': 'Is 7 prime?'}], 'thinking': {'type': 'enabled', 'budget_tokens': 4}})
    assert st == 200 and [c['type'] for c in r['content']][:2] == ['thinking', 'text'], r

    b = Browser()
    b.get(srv.base + '/')
    b.wait(lambda d: d.find_element(By.ID, 'model').text.startswith('thinking'), 'the model name from ready')
    save_settings(b, max_tokens='40', temperature='0')
    send_message(b, 'Is 7 prime?')
    b.wait(lambda d: d.find_elements(By.CSS_SELECTOR, '#chat article.assistant .thought summary'),
           'the reasoning box while it comes')
    b.wait(lambda d: d.find_elements(By.CSS_SELECTOR, '#chat .msg.assistant[data-id] .thought'),
           'the answer filed with its reasoning', timeout=300)
    summary = b.d.find_element(By.CSS_SELECTOR, '#chat .msg.assistant[data-id] .thought summary')
    assert summary.text.startswith('Thought for ') and summary.text.endswith(' s'), summary.text
    box = b.d.find_element(By.CSS_SELECTOR, '#chat .msg.assistant[data-id] .thought')
    assert box.get_attribute('open') is None   # folded
    text = b.d.find_element(By.CSS_SELECTOR, '#chat .msg.assistant[data-id] .thought-text')
    assert not text.is_displayed()
    summary.click()
    b.wait(lambda d: text.is_displayed() and len(text.text) > 10, 'the reasoning unfolded')
    answer = b.d.find_element(By.CSS_SELECTOR, '#chat .msg.assistant[data-id] > .body').text
    assert answer == '' and text.text not in answer, (answer, text.text)
    b.screenshot('reasoning')
    # the stored answer is the answer alone (empty: it only thought)
    cid = int(b.d.current_url.split('?c=')[1])
    assert [m['content'] for m in get_conv(srv, cid)['messages'] if m['role'] == 'assistant'] == [''], cid
    # reloaded, the page still folds it (kept in this browser with the answer's timing)
    b.get(srv.base + '/?c=%d' % cid)
    b.wait(lambda d: d.find_elements(By.CSS_SELECTOR, '#chat .msg.assistant[data-id] .thought summary'),
           'the reasoning after a reload')
    b.assert_local_only(srv.port)
    b.assert_no_console_errors()
finally:
    if b:
        b.quit()
    srv.stop()
print('ui-reasoning: ok')
