#!/usr/bin/env python3
# embeddings_serve_test.py — /v1/embeddings and /v1/rerank on a real `ember
# serve`, driven by the official openai SDK (client.embeddings.create: a
# string, a list, token arrays; encoding_format float, and base64, the SDK's
# default) and http.client for the rest.
# A decoder (SmolLM2, mean pooling of its output-normed hidden states): the
# vectors equal `ember embed --backend cpu` (cosine >= 0.999), token-array
# input gives the text's vector, rerank's cosine scores are the embeddings'
# cosines (also at /rerank, top_n, return_documents), hostile inputs (empty
# strings, 10,000 inputs, a huge token array, ids past the vocabulary, a
# body that is not UTF-8, an input past the context without truncate) are
# clear 400s, a background key's request is background, and every request
# has its ledger row naming the endpoint (and is counted by endpoint in
# /metrics).
# An encoder (all-MiniLM-L6-v2, F16): the golden texts' vectors (from the
# original weights, ../shared/golden/embeddings) with cosine >= 0.999, the
# same from their token ids, rerank puts the relevant document first; every
# generation door (chat, completions, responses, messages, the WebSocket)
# answers 400 "this model does not generate text", /v1/models and the
# WebSocket's ready say generates_text false, and the chat page has its
# note in place of the chat box. SKIP without the SDK or the models.
import asyncio
import base64
import json
import math
import os
import struct
import subprocess
import sys
import time

sys.path.insert(0, __file__.rsplit('/', 1)[0])
from serve_util import EMBER, SHARED, Server, chat_model, shared_model, skip  # noqa: E402

try:
    import openai
except ImportError:
    skip('the openai SDK is not installed (scripts/venv.sh puts it in .venv)')


def cos(a, b):
    dot = sum(x * y for x, y in zip(a, b))
    return dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


def norm(a):
    return math.sqrt(sum(x * x for x in a))


def bad(srv, path, body, param=None, code=None, raw=None):
    """body (or raw bytes) to path must be a 400 naming param (and code); its message."""
    st, h, r = srv.request('POST', path, body, raw=raw)
    assert st == 400, (path, st, r[:300])
    e = json.loads(r)['error']
    assert e['message'] and e['type'] == 'invalid_request_error', e
    assert param is None or e['param'] == param, (param, e)
    assert code is None or e['code'] == code, (code, e)
    return e['message']


def settled(srv, n):
    """The ledger once it holds n rows, none still admitted (bounded), with each row's endpoint."""
    sql = ('SELECT request_id, class, status, endpoint, prompt_tokens, completion_tokens, finish_reason, error '
           'FROM requests ORDER BY received_ms, rowid')
    for _ in range(300):
        rows = srv.ledger(sql)
        if len(rows) >= n and all(r['status'] != 'admitted' for r in rows):
            break
        time.sleep(0.1)
    return rows


TEXTS = ['The cat sits on the mat.', 'A feline rests on a rug.', 'Paris is the capital of France.',
         'Quantum computers use qubits.']


def decoder():
    model = chat_model()
    srv = Server(model, '--ctx', '512', keys=[('sdk', ()), ('bulk', ('--class', 'background'))])
    try:
        client = openai.OpenAI(base_url=srv.base + '/v1', api_key=srv.keys['sdk'], max_retries=0, timeout=600)
        name = client.models.list().data[0].id
        # the CPU reference: `ember embed --backend cpu` (unit length, the model's pooling: mean)
        out = subprocess.run([EMBER, 'embed', '--model', model, '--backend', 'cpu'] +
                             [a for t in TEXTS for a in ('--text', t)], capture_output=True, text=True, check=True)
        ref = [json.loads(line) for line in out.stdout.splitlines()]
        assert len(ref) == len(TEXTS), out.stdout[:300]

        one = client.embeddings.create(model=name, input=TEXTS[0])   # the SDK asks for base64 and decodes it
        assert len(one.data) == 1 and one.data[0].index == 0, one
        v = one.data[0].embedding
        assert len(v) == 576 and abs(norm(v) - 1) < 1e-4, (len(v), norm(v))
        assert cos(v, ref[0]['embedding']) >= 0.999, cos(v, ref[0]['embedding'])
        assert one.usage.prompt_tokens == ref[0]['tokens'] and one.usage.total_tokens == ref[0]['tokens'], one.usage

        many = client.embeddings.create(model=name, input=TEXTS, encoding_format='float')
        assert [d.index for d in many.data] == list(range(len(TEXTS)))
        for d, r in zip(many.data, ref):
            c = cos(d.embedding, r['embedding'])
            assert c >= 0.999, (r['index'], c)
        assert many.usage.prompt_tokens == sum(r['tokens'] for r in ref), many.usage

        # base64 on the wire: little-endian float32, the same vector
        st, _, raw = srv.post('/v1/embeddings', {'model': name, 'input': TEXTS[1], 'encoding_format': 'base64'},
                              headers={'Authorization': 'Bearer ' + srv.keys['sdk']})
        assert st == 200, raw
        b = base64.b64decode(raw['data'][0]['embedding'])
        fl = struct.unpack('<%df' % (len(b) // 4), b)
        assert cos(fl, many.data[1].embedding) > 0.99999, cos(fl, many.data[1].embedding)

        # token arrays: the ids of a text give its vector
        ids = [int(x) for x in subprocess.run([EMBER, 'tokenize', '--model', model, '--text', TEXTS[2]],
                                              capture_output=True, text=True, check=True).stdout.split()]
        tok = client.embeddings.create(model=name, input=[ids, ids[:3]], encoding_format='float')
        assert len(tok.data) == 2 and tok.usage.prompt_tokens == len(ids) + 3, tok.usage
        assert cos(tok.data[0].embedding, many.data[2].embedding) > 0.9999
        tok1 = client.embeddings.create(model=name, input=ids)   # one token array
        assert len(tok1.data) == 1 and cos(tok1.data[0].embedding, many.data[2].embedding) > 0.9999

        # normalize false: the pooled mean as it is (not unit length), the same direction
        st, _, raw = srv.post('/v1/embeddings', {'input': TEXTS[0], 'normalize': False, 'encoding_format': 'float'})
        assert st == 200, raw
        assert abs(norm(raw['data'][0]['embedding']) - 1) > 1e-3 and cos(raw['data'][0]['embedding'], v) > 0.99999

        # rerank by cosine: the scores are the embeddings' cosines; sorted; top_n; documents back; /rerank too
        q = 'Which city is the capital of France?'
        qv = client.embeddings.create(model=name, input=q, encoding_format='float').data[0].embedding
        for path in ('/v1/rerank', '/rerank'):
            st, _, rr = srv.post(path, {'model': name, 'query': q, 'documents': TEXTS, 'top_n': 3,
                                        'return_documents': True})
            assert st == 200 and rr['score'] == 'cosine' and len(rr['results']) == 3, rr
            scores = [r['relevance_score'] for r in rr['results']]
            assert scores == sorted(scores, reverse=True), scores
            for r in rr['results']:
                assert abs(r['relevance_score'] - cos(qv, many.data[r['index']].embedding)) < 1e-3, r
                assert r['document']['text'] == TEXTS[r['index']], r
        st, _, rr = srv.post('/v1/rerank', {'query': q, 'documents': [{'text': t} for t in TEXTS]})
        assert st == 200 and len(rr['results']) == 4 and 'document' not in rr['results'][0], rr

        # hostile inputs: clear 400s, and the server goes on
        msg = bad(srv, '/v1/embeddings', {'input': ''}, 'input')
        assert 'empty' in msg, msg
        bad(srv, '/v1/embeddings', {'input': ['a', '']}, 'input[1]')
        bad(srv, '/v1/embeddings', {'input': []}, 'input')
        msg = bad(srv, '/v1/embeddings', {'input': ['x'] * 10000}, 'input')
        assert '10000' in msg and '2048' in msg, msg
        bad(srv, '/v1/embeddings', {'input': [[1] * 200000, [2] * 200000]}, 'input[0]', 'context_length_exceeded')
        bad(srv, '/v1/embeddings', {'input': [[1, 2], [5, 10 ** 9]]}, 'input[1]')
        bad(srv, '/v1/embeddings', None, raw=b'{"input": "caf\xe9 \xff\xfe"}')
        msg = bad(srv, '/v1/embeddings', {'input': 'word ' * 2000}, 'input[0]', 'context_length_exceeded')
        assert 'truncate' in msg, msg
        bad(srv, '/v1/embeddings', {'input': 'x', 'encoding_format': 'int8'}, 'encoding_format')
        bad(srv, '/v1/embeddings', {'input': 'x', 'dimensions': 64}, 'dimensions')
        bad(srv, '/v1/rerank', {'query': '', 'documents': ['a']}, 'query')
        bad(srv, '/v1/rerank', {'query': 'q', 'documents': ['a', '']}, 'documents[1]')
        bad(srv, '/v1/rerank', {'query': 'q', 'documents': ['d'] * 1001}, 'documents')
        st, _, r = srv.post('/v1/embeddings', {'input': 'word ' * 2000, 'truncate': True, 'encoding_format': 'float'})
        assert st == 200 and r['usage']['prompt_tokens'] == 512, r['usage']
        st, _, r = srv.post('/v1/embeddings', {'input': 'x', 'model': 'nope'})
        assert st == 404 and r['error']['code'] == 'model_not_found', r
        with_sdk_error = False
        try:
            client.embeddings.create(model=name, input='')
        except openai.BadRequestError:
            with_sdk_error = True
        assert with_sdk_error

        # a background key's request runs in the background class
        bulk = openai.OpenAI(base_url=srv.base + '/v1', api_key=srv.keys['bulk'], max_retries=0, timeout=600)
        got = bulk.embeddings.create(model=name, input=TEXTS, encoding_format='float')
        assert all(cos(d.embedding, m.embedding) > 0.9999 for d, m in zip(got.data, many.data))

        rows = settled(srv, 27)
        emb = [r for r in rows if r['endpoint'] == 'embeddings']
        rer = [r for r in rows if r['endpoint'] == 'rerank']
        ok = [r for r in emb if r['status'] == 'completed']
        assert len(ok) == 9 and all(r['completion_tokens'] == 0 and r['finish_reason'] == 'stop' for r in ok), ok
        assert ok[0]['prompt_tokens'] == ref[0]['tokens'] and ok[0]['request_id'].startswith('embd-'), ok[0]
        assert ok[1]['prompt_tokens'] == many.usage.prompt_tokens, ok[1]
        assert ok[-1]['class'] == 'background' and ok[0]['class'] == 'interactive', (ok[0], ok[-1])
        failed = [r for r in emb if r['status'] == 'failed']
        assert len(failed) == 12 and all(r['error'].startswith('400 ') or r['error'].startswith('404 ')
                                         for r in failed), failed
        assert [r['status'] for r in rer] == ['completed'] * 3 + ['failed'] * 3, rer
        assert rer[0]['request_id'].startswith('rerank-'), rer[0]
        assert srv.metric('ember_requests_by_endpoint_total', endpoint='embeddings') == len(emb) == 21
        assert srv.metric('ember_requests_by_endpoint_total', endpoint='rerank') == len(rer) == 6
        code, err = srv.stop()
        assert code == 0, err
    finally:
        srv.stop()


async def ws_refused(srv):
    from ws_util import chat, connect   # (python3-websockets: a skip when absent)
    ws, ready = await connect(srv)
    assert ready['generates_text'] is False, ready
    frames = await chat(ws, 'c1', messages=[{'role': 'user', 'content': 'hi'}])
    assert frames[-1]['type'] == 'error' and 'does not generate text' in frames[-1]['message'], frames
    await ws.close()


def encoder():
    model = shared_model('all-MiniLM-L6-v2-F16.gguf')
    golden_path = os.path.join(SHARED, 'golden', 'embeddings', 'all-MiniLM-L6-v2.json')
    if not os.path.exists(golden_path):
        skip('%s is absent' % golden_path)
    golden = json.load(open(golden_path))
    srv = Server(model)
    try:
        client = openai.OpenAI(base_url=srv.base + '/v1', api_key='sk-no-key-required', max_retries=0, timeout=600)
        m = client.models.list().data[0]
        name = m.id
        assert name == 'all-MiniLM-L6-v2-F16' and m.model_extra.get('generates_text') is False, m
        texts = [g['text'] for g in golden]
        for fmt in ('float', None):   # None: the SDK's default, base64
            kw = {'encoding_format': fmt} if fmt else {}
            r = client.embeddings.create(model=name, input=texts, **kw)
            assert r.usage.prompt_tokens == sum(len(g['ids']) for g in golden), r.usage
            for d, g in zip(r.data, golden):
                c = cos(d.embedding, g['embedding'])
                assert c >= 0.999, (g['text'], c)
        ids = client.embeddings.create(model=name, input=[g['ids'] for g in golden], encoding_format='float')
        for d, g in zip(ids.data, golden):
            assert cos(d.embedding, g['embedding']) >= 0.999, (g['text'], 'from ids')
        st, _, rr = srv.post('/v1/rerank', {'model': name, 'query': 'Where is the cat?', 'documents': [
            'The stock market fell sharply today.', 'A cat is sleeping on the mat in the kitchen.',
            'Photosynthesis converts light into chemical energy.']})
        assert st == 200 and rr['score'] == 'cosine' and rr['results'][0]['index'] == 1, rr
        # past the encoder's 512 positions: a 400, or cut with truncate
        bad(srv, '/v1/embeddings', {'input': 'word ' * 600}, 'input[0]', 'context_length_exceeded')
        st, _, r = srv.post('/v1/embeddings', {'input': 'word ' * 600, 'truncate': True})
        assert st == 200 and r['usage']['prompt_tokens'] == 512, r

        # no text: every generation door says so
        try:
            client.chat.completions.create(model=name, messages=[{'role': 'user', 'content': 'hi'}])
            raise AssertionError('a chat on an encoder answered')
        except openai.BadRequestError as e:
            assert 'does not generate text' in str(e), e
        for path, body in (('/v1/completions', {'prompt': 'hi'}),
                           ('/v1/chat/completions', {'messages': [{'role': 'user', 'content': 'hi'}]}),
                           ('/v1/responses', {'input': 'hi'}),
                           ('/v1/messages', {'max_tokens': 8, 'messages': [{'role': 'user', 'content': 'hi'}]})):
            st, _, r = srv.post(path, body)
            assert st == 400 and 'does not generate text' in json.dumps(r), (path, st, r)
        asyncio.run(ws_refused(srv))
        # the chat page: a note instead of the chat box (app.js hides the box when ready says so)
        st, _, page = srv.request('GET', '/')
        assert st == 200 and b'id="no-chat"' in page, page[:200]
        st, _, js = srv.request('GET', '/static/app.js')
        assert st == 200 and b'generates_text' in js
        code, err = srv.stop()
        assert code == 0, err
    finally:
        srv.stop()


decoder()
encoder()
print('embeddings-serve: ok')
