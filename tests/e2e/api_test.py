#!/usr/bin/env python3
# api_test.py — `ember serve`'s OpenAI-compatible API, on a real server
# started here (127.0.0.1, a fresh SQLite ledger), byte by byte where it
# matters:
#  - every error path: bad JSON, wrong types, unknown model, unknown route,
#    wrong method, an oversized body (413), a prompt + max_tokens past the
#    context (400 context_length_exceeded), the parameters not built yet
#    (400, never ignored), messages the template refuses; each in OpenAI's
#    error shape {"error": {"message", "type", "param", "code"}};
#  - completions plain and streamed (SSE framing, [DONE]), stop strings
#    (matched on text and not returned), n choices, usage counts;
#  - keys: --require-key (401 without, with a bad or revoked key), a
#    background key cannot ask for interactive (403), a key's rate limit
#    (429 with Retry-After);
#  - connections per client address: the 65th is refused (429), and let
#    in again once the others close;
#  - the ledger: one row per request, completed / failed / rejected /
#    cancelled (a client that drops a stream), with key, class and tokens.
# Uses the tiny stories260K model (no chat template: the ChatML fallback).
import json
import socket
import sys
import time

sys.path.insert(0, __file__.rsplit('/', 1)[0])
from serve_util import Server, shared_model  # noqa: E402

model = shared_model('stories260K.gguf')
srv = Server(model, '--ctx', '256', '--require-key',
             keys=[('alice', ()), ('batch', ('--class', 'background')), ('slow', ('--rate-limit', '2/min'))])
A = {'Authorization': 'Bearer ' + srv.keys['alice']}
n_requests = 0   # generation requests made: each must leave one ledger row


def err_of(status, body, want_status, code=None, param=None, type_=None):
    assert status == want_status, (status, body)
    assert isinstance(body, dict) and set(body) == {'error'}, body
    e = body['error']
    assert set(e) == {'message', 'type', 'param', 'code'}, e
    assert isinstance(e['message'], str) and e['message'], e
    if code is not None:
        assert e['code'] == code, e
    if param is not None:
        assert e['param'] == param, e
    if type_ is not None:
        assert e['type'] == type_, e
    return e


def gen(path, body, headers=A):
    global n_requests
    n_requests += 1
    return srv.post(path, body, headers=headers)


try:
    # ---- the routes -----------------------------------------------------------
    st, h, body = srv.request('GET', '/healthz')
    assert st == 200 and json.loads(body)['status'] == 'ok', body
    st, h, body = srv.post('/v1/models', {}, headers=A)
    err_of(st, body, 404, code='not_found')
    st, h, body = srv.request('GET', '/v1/models', headers=A)
    models = json.loads(body)
    assert st == 200 and models['object'] == 'list' and models['data'][0]['id'] == 'stories260K', body
    st, h, body = srv.request('GET', '/v1/models/stories260K', headers=A)
    assert st == 200 and json.loads(body)['id'] == 'stories260K'
    st, h, body = srv.request('GET', '/v1/models/gpt-4', headers=A)
    err_of(st, json.loads(body), 404, code='model_not_found')
    st, h, body = srv.request('GET', '/v1/chat/completions', headers=A)
    err_of(st, json.loads(body), 405)
    st, h, body = srv.request('GET', '/nowhere')
    err_of(st, json.loads(body), 404)

    # ---- bad input: one clear error each ---------------------------------------
    n_requests += 1
    st, h, body = srv.request('POST', '/v1/completions', raw=b'{"prompt": "x", ', headers=A)
    e = err_of(st, json.loads(body), 400, type_='invalid_request_error')
    assert 'parse the JSON' in e['message'], e
    n_requests += 1
    st, h, body = srv.request('POST', '/v1/completions', raw=b'[1, 2]', headers=A)
    err_of(st, json.loads(body), 400)
    # a POST without a body and without Content-Length is answered, not left waiting
    n_requests += 1
    k = socket.create_connection(('127.0.0.1', srv.port), timeout=60)
    k.sendall(b'POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ' +
              srv.keys['alice'].encode() + b'\r\n\r\n')
    got = b''
    while b'\r\n\r\n' not in got:
        more = k.recv(4096)
        assert more, got
        got += more
    k.close()
    assert got.startswith(b'HTTP/1.1 400'), got[:100]
    for bad, param in (({'prompt': 'x', 'max_tokens': 'ten'}, 'max_tokens'),
                       ({'prompt': 'x', 'temperature': 3}, 'temperature'),
                       ({'prompt': 'x', 'top_p': 0}, 'top_p'),
                       ({'prompt': 'x', 'n': 9}, 'n'),
                       ({'prompt': 'x', 'stop': ['a', 'b', 'c', 'd', 'e']}, 'stop'),
                       ({'prompt': 'x', 'stop': [1]}, 'stop'),
                       ({'prompt': 'x', 'stream': 'yes'}, 'stream'),
                       ({'prompt': 'x', 'priority': 'urgent'}, 'priority'),
                       ({'prompt': 'x', 'stream_options': {'include_usage': True}}, 'stream_options'),
                       ({'prompt': 7}, 'prompt'),
                       ({'prompt': 'x', 'model': 7}, 'model')):
        st, h, body = gen('/v1/completions', bad)
        err_of(st, body, 400, param=param)
    st, h, body = gen('/v1/completions', {'prompt': 'x', 'model': 'gpt-4'})
    err_of(st, body, 404, code='model_not_found', param='model')
    for p in ({'response_format': {'type': 'xml'}}, {'echo': True}, {'best_of': 2}):
        st, h, body = gen('/v1/completions', dict(p, prompt='x'))
        err_of(st, body, 400, code='unsupported_parameter', param=list(p)[0])
    # the decoding parameters' bad values, each named
    for p in ({'presence_penalty': 2.5}, {'frequency_penalty': -3}, {'repetition_penalty': 0},
              {'logit_bias': []}, {'logit_bias': {'x': 1}}, {'logit_bias': {'-1': 1}}, {'logit_bias': {'5': 101}},
              {'logit_bias': {str(i): 1 for i in range(301)}}, {'logprobs': 21}, {'logprobs': 'yes'},
              {'logprobs': 2, 'top_logprobs': 2}, {'top_logprobs': 3}, {'logprobs': True, 'top_logprobs': 21}):
        st, h, body = gen('/v1/completions', dict(p, prompt='x'))
        err_of(st, body, 400, param=list(p)[-1] if 'top_logprobs' in p else list(p)[0])
    st, h, body = gen('/v1/completions', {'prompt': 'x', 'logit_bias': {'99999999': 5}})   # past the vocabulary
    err_of(st, body, 400, param='logit_bias')
    assert '99999999' in body['error']['message'] and 'vocabulary' in body['error']['message'], body
    # the values that change nothing are accepted
    st, h, body = gen('/v1/completions', {'prompt': 'Once', 'max_tokens': 2, 'presence_penalty': 0,
                                          'frequency_penalty': 0, 'logit_bias': {}, 'logprobs': None})
    assert st == 200, body
    for m, param in (([], 'messages'), ([{'role': 'tool', 'content': 'x'}], 'messages[0]'),
                     ([{'role': 'user', 'content': [{'type': 'image_url', 'image_url': {'url': 'x'}}]}],
                      'messages[0]'), ([{'content': 'x'}], 'messages[0]')):
        st, h, body = gen('/v1/chat/completions', {'messages': m})
        err_of(st, body, 400, param=param)
    # context: the server runs --ctx 256
    st, h, body = gen('/v1/completions', {'prompt': 'Once upon a time', 'max_tokens': 300})
    e = err_of(st, body, 400, code='context_length_exceeded', param='prompt')
    assert '256' in e['message'], e
    st, h, body = gen('/v1/chat/completions', {'messages': [{'role': 'user', 'content': 'word ' * 400}]})
    err_of(st, body, 400, code='context_length_exceeded', param='messages')
    # an oversized body: 413 before the body is read
    n_requests += 0   # refused by the HTTP layer, before the API: no ledger row
    st, h, body = srv.request('POST', '/v1/completions', raw=b'{"prompt": "' + b'a' * (5 << 20) + b'"}', headers=A)
    err_of(st, json.loads(body), 413)

    # ---- completions ---------------------------------------------------------------
    st, h, c1 = gen('/v1/completions', {'prompt': 'Once upon a time', 'max_tokens': 24, 'temperature': 0})
    assert st == 200 and c1['object'] == 'text_completion' and c1['model'] == 'stories260K', c1
    text = c1['choices'][0]['text']
    assert text and c1['choices'][0]['finish_reason'] == 'length', c1
    u = c1['usage']
    assert u['completion_tokens'] == 24 and u['total_tokens'] == u['prompt_tokens'] + 24, u
    assert u['prompt_tokens_details']['cached_tokens'] == 0, u   # no full block of it was seen before
    # streamed: the same text, chunk by chunk, then [DONE]
    n_requests += 1
    st, h, raw = srv.request('POST', '/v1/completions', {'prompt': 'Once upon a time', 'max_tokens': 24,
                                                         'temperature': 0, 'stream': True,
                                                         'stream_options': {'include_usage': True}}, headers=A)
    assert st == 200 and h['content-type'] == 'text/event-stream', h
    events = [e for e in raw.decode().split('\n\n') if e.strip()]
    assert events[-1] == 'data: [DONE]', events[-3:]
    chunks = [json.loads(e[len('data: '):]) for e in events[:-1] if not e.startswith(':')]
    assert all(e.startswith('data: ') or e.startswith(':') for e in events), events
    streamed = ''.join(c['choices'][0]['text'] for c in chunks if c['choices'])
    assert streamed == text, (streamed, text)
    assert chunks[-1]['choices'] == [] and chunks[-1]['usage']['completion_tokens'] == 24, chunks[-1]
    assert [c['choices'][0]['finish_reason'] for c in chunks if c['choices']][-1] == 'length'
    assert all(c['choices'][0]['finish_reason'] is None for c in chunks[:-2] if c['choices'])
    # a stop string: matched on the text, not returned, finish_reason stop
    cut = text.find(' ', 8)
    stop = text[cut:cut + 4]
    st, h, c2 = gen('/v1/completions', {'prompt': 'Once upon a time', 'max_tokens': 24, 'temperature': 0,
                                        'stop': [stop, 'zzzz']})
    assert st == 200 and c2['choices'][0]['text'] == text[:text.find(stop)], (c2, stop)
    assert c2['choices'][0]['finish_reason'] == 'stop', c2
    # n choices: as many, indexed, each with its own draws
    st, h, c3 = gen('/v1/completions', {'prompt': 'Once upon a time', 'max_tokens': 8, 'n': 3, 'seed': 5})
    assert st == 200 and [c['index'] for c in c3['choices']] == [0, 1, 2], c3
    assert c3['usage']['completion_tokens'] == 24, c3['usage']
    # the choices after the first take its prompt's full KV blocks from the prefix cache
    long_prompt = 'Once upon a time there was a little girl who lived in a small house near the big forest ' * 2
    st, h, c5 = gen('/v1/completions', {'prompt': long_prompt, 'max_tokens': 4, 'n': 3, 'seed': 1})
    assert st == 200 and len(c5['choices']) == 3, c5
    pt = c5['usage']['prompt_tokens']
    assert pt >= 40 and c5['usage']['prompt_tokens_details']['cached_tokens'] >= (pt - 1) // 16 * 16, c5['usage']
    # chat through the ChatML fallback
    st, h, c4 = gen('/v1/chat/completions', {'messages': [{'role': 'system', 'content': 'Be brief.'},
                                                          {'role': 'user', 'content': [{'type': 'text',
                                                                                       'text': 'Hi'}]}],
                                             'max_completion_tokens': 6, 'temperature': 0})
    assert st == 200 and c4['object'] == 'chat.completion', c4
    assert c4['choices'][0]['message']['role'] == 'assistant' and c4['usage']['completion_tokens'] <= 6, c4

    # ---- keys ---------------------------------------------------------------------------
    st, h, body = gen('/v1/completions', {'prompt': 'x'}, headers={})
    err_of(st, body, 401, code='missing_api_key')
    st, h, body = gen('/v1/completions', {'prompt': 'x'}, headers={'Authorization': 'Bearer em_nope'})
    err_of(st, body, 401, code='invalid_api_key')
    B = {'Authorization': 'Bearer ' + srv.keys['batch']}
    st, h, body = gen('/v1/completions', {'prompt': 'x', 'priority': 'interactive'}, headers=B)
    err_of(st, body, 403, code='priority_not_allowed')
    st, h, body = gen('/v1/completions', {'prompt': 'Once', 'max_tokens': 2}, headers=B)
    assert st == 200, body
    S = {'Authorization': 'Bearer ' + srv.keys['slow']}
    for i in range(2):
        st, h, body = gen('/v1/completions', {'prompt': 'Once', 'max_tokens': 2}, headers=S)
        assert st == 200, body
    st, h, body = gen('/v1/completions', {'prompt': 'Once', 'max_tokens': 2}, headers=S)
    err_of(st, body, 429, code='rate_limit_exceeded')
    assert 1 <= int(h['retry-after']) <= 60, h

    # ---- a client that drops a stream: its request is cancelled -----------------------
    n_requests += 1
    srv.drop_stream({'prompt': 'Once upon a time', 'max_tokens': 200, 'stream': True}, key=srv.keys['alice'])

    # ---- connections per client address: the 65th from one address is refused --------
    held = []
    req = json.dumps({'prompt': 'Once upon a time', 'max_tokens': 240, 'stream': True, 'ignore_eos': True,
                      'priority': 'background'}).encode()
    head = (b'POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n'
            b'Authorization: Bearer ' + srv.keys['alice'].encode() + b'\r\nContent-Length: ' +
            str(len(req)).encode() + b'\r\n\r\n' + req)
    for i in range(64):
        k = socket.create_connection(('127.0.0.1', srv.port), timeout=120)
        k.sendall(head)
        got = b''
        while b'\r\n\r\n' not in got:
            more = k.recv(4096)
            assert more, got
            got += more
        assert got.startswith(b'HTTP/1.1 200'), (i, got[:200])
        held.append(k)
    n_requests += 64
    st, h, body = srv.request('GET', '/v1/models', headers=A)
    err_of(st, json.loads(body), 429, code='too_many_connections')
    for k in held:
        k.close()   # 64 cancelled streams
    for _ in range(100):   # bounded: until the address's count is back down
        st, h, body = srv.request('GET', '/v1/models', headers=A)
        if st == 200:
            break
        time.sleep(0.1)
    assert st == 200, body

    # ---- the ledger: one row per generation request ------------------------------------
    rows = srv.ledger_settled(n_requests)
    assert len(rows) == n_requests, (len(rows), n_requests, rows[-5:])
    by = {}
    for r in rows:
        by[r['status']] = by.get(r['status'], 0) + 1
    # the dropped stream, and the 64 held ones (closed long before their 240
    # tokens; a device fast enough to finish some would leave them completed)
    held_rows = [r for r in rows if r['class'] == 'background' and r['prompt_tokens'] == rows[-1]['prompt_tokens']
                 and r['status'] in ('cancelled', 'completed') and r['completion_tokens'] != 2]
    assert len(held_rows) == 64 and by.get('cancelled', 0) >= 2, (by, len(held_rows))
    assert by.get('rejected') == 4, by            # 2 x 401, 403, 429
    keys = {r['key_id'] for r in rows if r['status'] == 'completed'}
    assert len(keys) == 3 and 0 not in keys, keys   # alice, batch, slow
    bg = [r for r in rows if r['class'] == 'background' and r not in held_rows]
    assert len(bg) == 2 and {r['status'] for r in bg} == {'completed', 'rejected'}, bg
    done = [r for r in rows if r['request_id'] == c1['id']]
    assert done and done[0]['completion_tokens'] == 24 and done[0]['prompt_tokens'] == u['prompt_tokens'], done
    assert done[0]['finish_reason'] == 'length'
    cancelled = [r for r in rows if r['status'] == 'cancelled' and r['class'] == 'interactive'][0]
    assert cancelled['completion_tokens'] >= 3 and cancelled['finish_reason'] == 'cancelled', cancelled
    failed = [r for r in rows if r['status'] == 'failed']
    assert all(r['error'].startswith(('400', '404')) for r in failed), failed
    print('api: %d requests, ledger %s' % (n_requests, by))
finally:
    rc, err = srv.stop()
assert rc == 0, (rc, err)
assert srv.keys['alice'] not in err, 'a key reached the log'
print('api: ok')
