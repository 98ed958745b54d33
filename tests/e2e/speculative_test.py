#!/usr/bin/env python3
# speculative_test.py — speculative decoding by prompt lookup through a
# real `ember serve`:
#  - greedy output token for token the same with "speculative":
#    "prompt_lookup" as without, on a repetitive prompt (drafts accepted)
#    and on a story (drafts mostly rejected and rolled back), streamed too;
#    /metrics counts drafted and accepted tokens;
#  - sampled output keeps the model's distribution: the three generated
#    tokens (the 2nd and 3rd checked against drafts) over 500 seeds with
#    and 500 other seeds without speculation, a two-sample chi-square test of homogeneity
#    at a significance level of 0.001 (pairs expected fewer than 5 times
#    pooled; the critical value by the Wilson–Hilferty approximation);
#  - a bad "speculative" value is refused by name.
import collections
import json
import sys

sys.path.insert(0, __file__.rsplit('/', 1)[0])
from serve_util import Server, shared_model, spec_counters, two_sample_chi2  # noqa: E402

REPEAT = 'one two three four, one two three four, one two three four, one two three four, one two'
STORY = 'Once upon a time, there was a little girl named Lily. She loved to play outside.'

srv = Server(shared_model('stories260K.gguf'), '--parallel', '4')
try:
    def counters():
        return spec_counters(srv)

    d0, a0 = counters()
    for prompt in (REPEAT, STORY):
        off = srv.complete(prompt=prompt, max_tokens=60, temperature=0, speculative='off')['choices'][0]['text']
        on = srv.complete(prompt=prompt, max_tokens=60, temperature=0, speculative='prompt_lookup')['choices'][0]['text']
        assert on == off, (prompt, on, off)
        big = srv.complete(prompt=prompt, max_tokens=60, temperature=0,
                   speculative={'method': 'prompt_lookup', 'max_draft': 8})['choices'][0]['text']
        assert big == off, (prompt, big, off)
        st, _, raw = srv.request('POST', '/v1/completions', {'prompt': prompt, 'max_tokens': 60, 'temperature': 0,
                                                             'speculative': 'prompt_lookup', 'stream': True})
        parts = [json.loads(ln[6:]) for ln in raw.decode().split('\n') if ln.startswith('data: {')]
        assert ''.join(p['choices'][0]['text'] for p in parts if p['choices']) == off
    d1, a1 = counters()
    assert d1 > d0 and a1 > a0 and a1 - a0 <= d1 - d0, (d0, a0, d1, a1)
    greedy_rate = (a1 - a0) / (d1 - d0)

    # the distribution: pairs of the 2nd and 3rd tokens, 500 seeds each way
    def pairs(spec):   # independent samples: the two arms draw with different seeds
        c = collections.Counter()
        for seed in range(500):
            r = srv.complete(prompt=REPEAT, max_tokens=3, temperature=1.0, seed=seed + (0 if spec else 100000),
                     logprobs=None, ignore_eos=True, speculative='prompt_lookup' if spec else 'off')
            toks = r['choices'][0]['text']
            c[toks] += 1
        return c
    d2, a2 = counters()
    with_spec, without = pairs(True), pairs(False)
    d3, a3 = counters()
    assert d3 > d2 and a3 > a2 and a3 < d3, ('the sampled runs must draft, accept and reject', d2, a2, d3, a3)
    chi, crit, df = two_sample_chi2(with_spec, without)
    assert df >= 3 and chi < crit, ('distributions differ', chi, crit, df)

    e = srv.complete(400, prompt='x', speculative='draft_model')['error']   # this server has no draft model
    assert '--draft-model' in e['message'], e
    e = srv.complete(400, prompt='x', speculative='guess')['error']
    assert e['param'] == 'speculative', e
    e = srv.complete(400, prompt='x', speculative={'method': 'prompt_lookup', 'max_draft': 9})['error']
    assert e['param'] == 'max_draft', e
    print('speculative: greedy identical, %.0f%% of %d greedy drafts accepted; sampled: %d of %d drafts accepted, '
          'chi-square %.1f < %.1f (df %d, alpha 0.001)' %
          (100 * greedy_rate, d1 - d0, a3 - a2, d3 - d2, chi, crit, df))
finally:
    rc, err = srv.stop()
assert rc == 0, err
