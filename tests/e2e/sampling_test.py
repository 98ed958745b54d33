#!/usr/bin/env python3
# sampling_test.py — the sampling chain through a real `ember serve`:
#  - logprobs / top_logprobs in OpenAI's shapes: chat (plain and streamed,
#    through the official openai SDK on the chat model) and completions'
#    legacy shape (tokens, token_logprobs, top_logprobs, text_offset); the
#    entries add up to the text, greedy picks the most likely alternative,
#    the alternatives are sorted and their probabilities sum to at most 1,
#    streamed entries equal the plain ones;
#  - logit_bias: +100 on one token makes greedy output nothing else, -100 on
#    greedy's first token moves it to the runner-up that logprobs named;
#  - frequency/presence/repetition penalties change greedy output the way
#    they should (fewer repeats), 0/1 change nothing;
#  - a seeded, sampled request gives the same tokens alone and while three
#    other streams share its batch;
#  - choosing on the device (topk.comp's summary of each row) gives the
#    same tokens and log-probabilities as reading every row to the host
#    (EMBER_SAMPLE_HOST=1): greedy, seeded draws with and without filters,
#    penalties, bias, logprobs.
import json
import os
import subprocess
import sys
import threading

sys.path.insert(0, __file__.rsplit('/', 1)[0])
from serve_util import skip, EMBER, Server, chat_model, shared_model  # noqa: E402

stories = shared_model('stories260K.gguf')
SAME = [dict(max_tokens=40, temperature=0, logprobs=5),
        dict(max_tokens=40, temperature=1.0, seed=11, logprobs=3, ignore_eos=True),
        dict(max_tokens=40, temperature=0.8, top_k=40, top_p=0.95, min_p=0.05, seed=12, ignore_eos=True),
        dict(max_tokens=40, temperature=1.3, top_k=5, seed=13, ignore_eos=True),
        dict(max_tokens=40, temperature=0.9, top_p=0.5, seed=14, frequency_penalty=0.7, repetition_penalty=1.2,
             logit_bias={'5': 3, '10': -100}, ignore_eos=True, logprobs=2),
        dict(max_tokens=40, temperature=2.0, seed=15, presence_penalty=1.5, ignore_eos=True)]


def comp_on(server, **body):
    return server.complete(**dict({'prompt': 'Once upon a time'}, **body))


srv = Server(stories, '--parallel', '4')
try:
    def comp(**body):
        return comp_on(srv, **body)

    # ---- completions: the legacy logprobs shape ----
    r = comp(max_tokens=24, temperature=0, logprobs=5)
    ch = r['choices'][0]
    lp = ch['logprobs']
    assert set(lp) == {'tokens', 'token_logprobs', 'top_logprobs', 'text_offset'}, lp
    n = r['usage']['completion_tokens']
    assert len(lp['tokens']) == len(lp['token_logprobs']) == len(lp['top_logprobs']) == len(lp['text_offset']) == n
    assert ''.join(lp['tokens']) == ch['text'], (lp['tokens'], ch['text'])
    off = 0
    for tok, l, top, o in zip(lp['tokens'], lp['token_logprobs'], lp['top_logprobs'], lp['text_offset']):
        assert o == off, (o, off)
        off += len(tok.encode())
        assert l <= 0 and len(top) == 5, (l, top)
        best = max(top.values())
        assert abs(l - best) < 1e-6 and top.get(tok) == l, (tok, l, top)   # greedy: the most likely
        assert sum(2.718281828 ** v for v in top.values()) <= 1 + 1e-4, top
    greedy_first = lp['tokens'][0]
    runner_up = sorted(lp['top_logprobs'][0].items(), key=lambda kv: -kv[1])[1][0]
    plain = comp(max_tokens=24, temperature=0)
    assert plain['choices'][0]['text'] == ch['text'] and plain['choices'][0]['logprobs'] is None, plain
    # logprobs 0: the chosen tokens' alone
    r0 = comp(max_tokens=8, temperature=0, logprobs=0)
    assert all(t == {} for t in r0['choices'][0]['logprobs']['top_logprobs']), r0

    # ---- logit_bias ----
    def ids_of(piece):   # the ids `ember tokenize` gives piece after the prompt (no leading-space surprises)
        def tok(text):
            out = subprocess.run([EMBER, 'tokenize', '--model', stories, '--no-bos', '--text', text],
                                 capture_output=True, text=True, timeout=120)
            assert out.returncode == 0, out.stderr
            return [int(x) for x in out.stdout.split()]
        head, whole = tok('Once upon a time'), tok('Once upon a time' + piece)
        assert whole[:len(head)] == head, (head, whole)
        return whole[len(head):]
    first_ids = ids_of(greedy_first)
    assert len(first_ids) == 1, (greedy_first, first_ids)
    banned = comp(max_tokens=6, temperature=0, logprobs=2, logit_bias={str(first_ids[0]): -100})
    bt = banned['choices'][0]['logprobs']['tokens']
    assert bt[0] != greedy_first and bt[0] == runner_up, (bt, greedy_first, runner_up)
    forced_id = ids_of(' the')
    assert len(forced_id) == 1, forced_id
    forced = comp(max_tokens=6, temperature=0, logit_bias={str(forced_id[0]): 100}, logprobs=1)
    ft = forced['choices'][0]['logprobs']['tokens']
    assert ft == [' the'] * 6, ft
    assert all(v > -1e-3 for v in forced['choices'][0]['logprobs']['token_logprobs']), forced   # p ~ 1

    # ---- penalties ----
    def toks(**kw):
        r = comp(max_tokens=60, temperature=0, logprobs=0, ignore_eos=True, **kw)
        return r['choices'][0]['logprobs']['tokens']
    base = toks()
    assert toks(presence_penalty=0, frequency_penalty=0, repetition_penalty=1) == base
    def max_count(t):
        return max(t.count(x) for x in set(t))
    for kw in ({'frequency_penalty': 2}, {'presence_penalty': 2}, {'repetition_penalty': 1.8}):
        t = toks(**kw)
        assert t != base and max_count(t) < max_count(base), (kw, max_count(t), max_count(base), t)
        assert len(set(t)) > len(set(base)), (kw, len(set(t)), len(set(base)))

    # ---- a seed gives the same tokens whatever shares the batch ----
    body = {'max_tokens': 40, 'temperature': 1.0, 'seed': 1234, 'logprobs': 0, 'ignore_eos': True}
    alone = comp(**body)['choices'][0]['logprobs']['tokens']
    others, errs = [], []
    def busy(i):
        try:
            st, _, out = srv.post('/v1/completions', {'prompt': 'The little dog', 'max_tokens': 120,
                                                      'temperature': 1.0, 'seed': i, 'ignore_eos': True})
            others.append(st)
        except Exception as e:   # noqa: BLE001 — reported below
            errs.append(e)
    th = [threading.Thread(target=busy, args=(i,)) for i in range(3)]
    for t in th:
        t.start()
    crowd = comp(**body)['choices'][0]['logprobs']['tokens']
    for t in th:
        t.join(timeout=600)
    assert not errs and others == [200, 200, 200], (errs, others)
    assert crowd == alone, (alone, crowd)
    print('sampling (stories): greedy %d tokens with logprobs; banned %r -> %r; penalties max repeats %d -> %s'
          % (n, greedy_first, bt[0], max_count(base),
             [max_count(toks(**kw)) for kw in ({'frequency_penalty': 2}, {'presence_penalty': 2})]))
    device_runs = [comp(**b) for b in SAME]
finally:
    rc, err = srv.stop()
assert rc == 0, err

# ---- the same requests with every row read to the host ----
host = Server(stories, '--parallel', '4', env=dict(os.environ, EMBER_SAMPLE_HOST='1'))
try:
    for b, dev in zip(SAME, device_runs):
        h = comp_on(host, **b)
        assert h['choices'][0]['text'] == dev['choices'][0]['text'], (b, h['choices'][0]['text'],
                                                                      dev['choices'][0]['text'])
        if b.get('logprobs') is not None:
            hl, dl = h['choices'][0]['logprobs'], dev['choices'][0]['logprobs']
            assert hl['tokens'] == dl['tokens'], b
            for x, y in zip(hl['token_logprobs'], dl['token_logprobs']):
                assert abs(x - y) < 1e-4, (b, x, y)
            for x, y in zip(hl['top_logprobs'], dl['top_logprobs']):
                assert list(x) == list(y) and all(abs(x[k] - y[k]) < 1e-4 for k in x), (b, x, y)
    print('sampling: %d requests alike on the device and on the host' % len(SAME))
finally:
    rc, err = host.stop()
assert rc == 0, err

# ---- chat logprobs through the official SDK ----
try:
    import openai
except ImportError:
    skip('the rest (through the official openai SDK) needs the SDK: scripts/venv.sh puts it in .venv; '
         'what ran before it passed')
model = chat_model()
srv = Server(model, keys=[('sdk', ())])
try:
    client = openai.OpenAI(base_url=srv.base + '/v1', api_key=srv.keys['sdk'], max_retries=0, timeout=600)
    name = client.models.list().data[0].id
    msgs = [{'role': 'user', 'content': 'Name three colours.'}]
    r = client.chat.completions.create(model=name, messages=msgs, max_tokens=16, temperature=0, logprobs=True,
                                       top_logprobs=3)
    c = r.choices[0]
    content = c.logprobs.content
    assert len(content) == r.usage.completion_tokens, (len(content), r.usage)
    assert b''.join(bytes(e.bytes) for e in content).decode() == c.message.content, (content, c.message.content)
    for e in content:
        assert len(e.top_logprobs) == 3 and e.logprob <= 0, e
        assert e.top_logprobs[0].token == e.token and abs(e.top_logprobs[0].logprob - e.logprob) < 1e-6, e
        assert [t.logprob for t in e.top_logprobs] == sorted((t.logprob for t in e.top_logprobs), reverse=True)
    streamed = []
    for chunk in client.chat.completions.create(model=name, messages=msgs, max_tokens=16, temperature=0,
                                                logprobs=True, top_logprobs=3, stream=True):
        if chunk.choices and chunk.choices[0].logprobs and chunk.choices[0].logprobs.content:
            streamed += chunk.choices[0].logprobs.content
    assert [(e.token, round(e.logprob, 5)) for e in streamed] == [(e.token, round(e.logprob, 5)) for e in content]
    off = client.chat.completions.create(model=name, messages=msgs, max_tokens=4, temperature=0)
    assert off.choices[0].logprobs is None, off
    raw = json.loads(r.model_dump_json())['choices'][0]['logprobs']
    assert set(raw) == {'content', 'refusal'} and raw['refusal'] is None, raw
    print('sampling (chat): %d tokens, first %r logprob %.3f' % (len(content), content[0].token, content[0].logprob))
finally:
    rc, err = srv.stop()
assert rc == 0, err
