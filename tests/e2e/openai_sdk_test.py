#!/usr/bin/env python3
# openai_sdk_test.py — the official `openai` Python SDK, unchanged, against a
# real `ember serve` with the real chat model (SmolLM2): a chat completion, a
# streamed chat with usage (role first, content deltas, finish_reason on the
# last content chunk, a usage chunk with no choices), a completion; greedy
# answers agree between plain and streamed; greedy /v1/completions equals
# `ember run --temp 0` for the same prompt; the SDK's own error types for a
# bad request, an unknown model and a missing key; `cached_tokens` counts a
# repeated conversation's prefix; the SDK insists on a key: from loopback
# one the server does not know ("sk-no-key-required", "x") gets answers as no
# key, with one warning in the log, a revoked key a 401, and with
# --require-key the unknown key a 401 too. SKIP without the SDK
# (scripts/venv.sh) or the model.
import subprocess
import sys

sys.path.insert(0, __file__.rsplit('/', 1)[0])
from serve_util import EMBER, Server, chat_model, skip  # noqa: E402

try:
    import openai
except ImportError:
    skip('the openai SDK is not installed (scripts/venv.sh puts it in .venv)')

model = chat_model()
srv = Server(model, '--ping-s', '1', keys=[('sdk', ()), ('gone', ())])
try:
    client = openai.OpenAI(base_url=srv.base + '/v1', api_key=srv.keys['sdk'], max_retries=0, timeout=600)
    name = client.models.list().data[0].id
    assert name == 'SmolLM2-135M-Instruct.Q4_1', name
    msgs = [{'role': 'user', 'content': 'What is the capital of France?'}]

    r = client.chat.completions.create(model=name, messages=msgs, max_tokens=32, temperature=0)
    answer = r.choices[0].message.content
    assert r.object == 'chat.completion' and r.choices[0].message.role == 'assistant', r
    assert 'Paris' in answer, answer
    assert r.choices[0].finish_reason == 'stop', r
    assert r.usage.completion_tokens > 0 and r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens

    chunks = list(client.chat.completions.create(model=name, messages=msgs, max_tokens=32, temperature=0,
                                                 stream=True, stream_options={'include_usage': True}))
    assert chunks[0].choices[0].delta.role == 'assistant', chunks[0]
    with_choices = [c for c in chunks if c.choices]
    streamed = ''.join(c.choices[0].delta.content or '' for c in with_choices)
    assert streamed == answer, (streamed, answer)
    assert with_choices[-1].choices[0].finish_reason == 'stop', with_choices[-1]
    assert all(c.choices[0].finish_reason is None for c in with_choices[:-1])
    assert not chunks[-1].choices and chunks[-1].usage.completion_tokens == r.usage.completion_tokens, chunks[-1]
    assert chunks[-1].usage.prompt_tokens == r.usage.prompt_tokens
    # the same conversation again: its prompt's full blocks come from the prefix cache
    again = client.chat.completions.create(model=name, messages=msgs, max_tokens=32, temperature=0)
    cached = again.usage.prompt_tokens_details.cached_tokens
    assert again.choices[0].message.content == answer
    assert cached >= (r.usage.prompt_tokens // 16) * 16 - 16 and cached > 0, (cached, r.usage.prompt_tokens)

    # greedy completions equal `ember run --temp 0`
    prompt = 'The three primary colours are'
    c = client.completions.create(model=name, prompt=prompt, max_tokens=24, temperature=0)
    run = subprocess.run([EMBER, 'run', '--model', model, '--prompt', prompt, '-n', '24', '--temp', '0'],
                         capture_output=True, text=True, check=True)
    assert run.stdout == prompt + c.choices[0].text + '\n', (run.stdout, c.choices[0].text)
    assert c.usage.completion_tokens == 24 or c.choices[0].finish_reason == 'stop', c

    # the SDK's error types
    try:
        client.chat.completions.create(model=name, messages=[], max_tokens=4)
        raise AssertionError('an empty conversation was accepted')
    except openai.BadRequestError as e:
        assert e.status_code == 400 and e.body['param'] == 'messages', e.body
    try:
        client.chat.completions.create(model='gpt-4o', messages=msgs, max_tokens=4)
        raise AssertionError('an unknown model was accepted')
    except openai.NotFoundError as e:
        assert e.body['code'] == 'model_not_found', e.body
    try:
        client.chat.completions.create(model=name, messages=msgs, max_tokens=4, tools=[{
            'type': 'function', 'function': {'name': 'f', 'parameters': {'type': 'object'}}}])
        raise AssertionError('tools were accepted by a model whose template has no tool calls')
    except openai.BadRequestError as e:   # SmolLM2's template renders no tool_calls: said, not guessed
        assert e.body['code'] == 'tools_unsupported' and e.body['param'] == 'tools', e.body
        assert "does not render an assistant message's tool_calls" in e.body['message'], e.body
    # non-ASCII streamed: every chunk valid UTF-8 (no character split across
    # chunks, no U+FFFD), the concatenation equal to the plain answer
    fr = [{'role': 'user', 'content': 'Écris une phrase en français avec des accents: été, café, à.'}]
    plain = client.chat.completions.create(model=name, messages=fr, max_tokens=40, temperature=0)
    parts = [c.choices[0].delta.content or '' for c in
             client.chat.completions.create(model=name, messages=fr, max_tokens=40, temperature=0, stream=True)
             if c.choices]
    assert ''.join(parts) == plain.choices[0].message.content, (parts, plain.choices[0].message.content)
    assert '\ufffd' not in ''.join(parts) and any(ord(ch) > 127 for ch in ''.join(parts)), parts

    # a long prompt: while its prefill runs the stream sends ": ping" comments
    # (every --ping-s 1 of silence); the SDK skips them, read the raw bytes
    import http.client
    import json
    import time
    long_msgs = [{'role': 'user', 'content': 'Summarise: ' + 'The quick brown fox jumps over the lazy dog. ' * 50}]
    conn = http.client.HTTPConnection('127.0.0.1', srv.port, timeout=600)
    conn.request('POST', '/v1/chat/completions', json.dumps({'model': name, 'messages': long_msgs, 'max_tokens': 4,
                                                             'stream': True, 'temperature': 0}),
                 {'Content-Type': 'application/json', 'Authorization': 'Bearer ' + srv.keys['sdk']})
    resp = conn.getresponse()
    t0 = time.monotonic()
    pings, first_content_s, buf = 0, None, b''
    while True:
        line = resp.readline()
        if not line:
            break
        if line.startswith(b': ping'):
            pings += 1 if first_content_s is None else 0
        if line.startswith(b'data: {') and b'"content":"' in line and b'"content":""' not in line and first_content_s is None:
            first_content_s = time.monotonic() - t0
    conn.close()
    assert first_content_s is not None
    # a silence of 2 s or more before the first token must have carried a ping
    assert pings >= 1 or first_content_s < 2.0, (pings, first_content_s)
    print('long prompt: first token after %.1f s, %d pings before it' % (first_content_s, pings))

    # a chat-completions batch with the chat model, through the SDK's Files and Batch calls: each
    # line's answer is the one the same request gets alone (the first is the question above)
    import io
    lines = [{'model': name, 'messages': msgs, 'max_tokens': 32, 'temperature': 0},
             {'model': name, 'messages': [{'role': 'user', 'content': 'Name a colour.'}], 'max_tokens': 12,
              'temperature': 0},
             {'model': name, 'messages': [{'role': 'system', 'content': 'Answer in one word.'},
                                          {'role': 'user', 'content': 'Is the sky blue?'}], 'max_tokens': 12,
              'temperature': 0}]
    jl = b''.join(json.dumps({'custom_id': 'c%d' % i, 'method': 'POST', 'url': '/v1/chat/completions',
                              'body': body}).encode() + b'\n' for i, body in enumerate(lines))
    f = client.files.create(file=('chat.jsonl', io.BytesIO(jl)), purpose='batch')
    b = client.batches.create(input_file_id=f.id, endpoint='/v1/chat/completions', completion_window='24h')
    for _ in range(2400):   # bounded: 10 minutes
        b = client.batches.retrieve(b.id)
        if b.status in ('completed', 'failed', 'expired', 'cancelled'):
            break
        time.sleep(0.25)
    assert b.status == 'completed' and b.request_counts.completed == 3 and b.error_file_id is None, b
    out = {o['custom_id']: o for o in map(json.loads, client.files.content(b.output_file_id).text.splitlines())}
    for i, body in enumerate(lines):
        got = out['c%d' % i]['response']['body']
        alone = answer if i == 0 else client.chat.completions.create(**body).choices[0].message.content
        assert got['object'] == 'chat.completion' and got['choices'][0]['message']['content'] == alone, (got, alone)
    print('chat batch: %d lines as each alone (%s)' % (len(lines), out['c1']['response']['body']['choices'][0]
                                                       ['message']['content']))
    print('openai-sdk: "%s" (%d tokens, %d cached on the repeat)' % (answer, r.usage.completion_tokens, cached))

    # the SDK will not go without a key: from loopback, one the server does not know is no key (the
    # loopback rule), said once in the log however often; a revoked key is still refused
    WARN = 'an API key this server does not know came from loopback: accepted as no key'
    for i, k in enumerate(('sk-no-key-required', 'x') * 2):
        anon = openai.OpenAI(base_url=srv.base + '/v1', api_key=k, max_retries=0, timeout=600)
        got = anon.chat.completions.create(model=name, max_tokens=8, temperature=0, messages=[
            {'role': 'user', 'content': 'Name colour number %d.' % i}])
        assert got.object == 'chat.completion' and got.choices[0].message.content, (k, got)
        assert got.usage.completion_tokens > 0, (k, got.usage)
    subprocess.run([EMBER, 'keys', 'revoke', '2', '--db', srv.db], capture_output=True, check=True, timeout=60)
    try:
        openai.OpenAI(base_url=srv.base + '/v1', api_key=srv.keys['gone'], max_retries=0,
                      timeout=600).chat.completions.create(model=name, messages=msgs, max_tokens=4)
        raise AssertionError('a revoked key was accepted')
    except openai.AuthenticationError as e:
        assert e.status_code == 401 and e.body['code'] == 'invalid_api_key' and 'revoked' in e.body['message'], e.body
    log = open(srv.err_path).read()
    assert log.count(WARN) == 1 and 'sk-no-key-required' not in log, log[-3000:]
    print('openai-sdk: api_key "sk-no-key-required" and "x" from loopback: answered as no key, one warning')
finally:
    rc, err = srv.stop()
assert rc == 0, (rc, err)

# with --require-key the same unknown key is refused
srv = Server(model, '--require-key', keys=[('sdk', ())])
try:
    for k in ('sk-no-key-required', 'x'):
        try:
            openai.OpenAI(base_url=srv.base + '/v1', api_key=k, max_retries=0, timeout=600).chat.completions.create(
                model=name, messages=msgs, max_tokens=4)
            raise AssertionError('--require-key accepted the unknown key %r' % k)
        except openai.AuthenticationError as e:
            assert e.status_code == 401 and e.body['code'] == 'invalid_api_key', e.body
    assert WARN not in open(srv.err_path).read()
finally:
    rc, err = srv.stop()
assert rc == 0, (rc, err)
print('openai-sdk: --require-key: the unknown key 401')
print('openai-sdk: ok')
