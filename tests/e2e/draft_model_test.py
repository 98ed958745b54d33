#!/usr/bin/env python3
# draft_model_test.py — speculative decoding with a draft model through
# `ember run` and a real `ember serve --draft-model`: TinyStories-656K-Q8_0
# drafting for its own F32 original (the same vocabulary):
#  - `ember run --draft-model` and `--speculate` (prompt lookup): greedy
#    output byte for byte as without; penalties or another vocabulary are
#    refused with exit status 2;
#  - greedy output token for token the same with "speculative":
#    "draft_model" as with "off", on a story and a repetitive prompt,
#    plain and streamed; /metrics counts drafted and accepted tokens;
#  - sampled output keeps the target's distribution: the first three
#    generated tokens over 400 seeds with and 400 other seeds without
#    speculation, a two-sample chi-square test of homogeneity at a
#    significance level of 0.001 (pairs expected fewer than 5 times pooled;
#    the critical value by the Wilson–Hilferty approximation);
#  - requests that cannot use it (logprobs) still answer; a server without
#    a draft model refuses "draft_model" by name, and a draft model of
#    another vocabulary is refused at start with exit status 2.
import collections
import re
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, __file__.rsplit('/', 1)[0])
from serve_util import EMBER, Server, shared_model, spec_counters, sse_events, two_sample_chi2  # noqa: E402

REPEAT = 'one two three four, one two three four, one two three four, one two three four, one two'
STORY = 'Once upon a time, there was a little girl named Lily. She loved to play outside.'
TARGET, DRAFT = shared_model('TinyStories-656K-F32.gguf'), shared_model('TinyStories-656K-Q8_0.gguf')

# `ember run`: greedy output byte for byte the same with a draft model and
# with prompt lookup as without, on both prompts; the summary counts drafts
def run(*extra, prompt=STORY):
    return subprocess.run([EMBER, 'run', '--model', TARGET, '--temp', '0', '-n', '100', '--prompt', prompt]
                          + list(extra), capture_output=True, text=True, timeout=600)


for prompt in ('Once upon a time', REPEAT):
    plain = run(prompt=prompt)
    assert plain.returncode == 0, plain.stderr
    for extra in (('--draft-model', DRAFT), ('--draft-model', DRAFT, '--speculate', '8'), ('--speculate', '4')):
        r = run(*extra, prompt=prompt)
        assert r.returncode == 0 and r.stdout == plain.stdout, (extra, r.stderr, r.stdout, plain.stdout)
        m = re.search(r'speculation \((draft model|prompt lookup)\): (\d+) tokens drafted, (\d+) accepted', r.stderr)
        assert m and int(m.group(3)) <= int(m.group(2)), r.stderr
        assert int(m.group(2)) > 0 or (prompt != REPEAT and m.group(1) == 'prompt lookup'), r.stderr
sampled = run('--draft-model', DRAFT, '--temp', '1', '--seed', '7')
assert sampled.returncode == 0 and len(sampled.stdout) > len(STORY), sampled.stderr
for extra, why in ((('--draft-model', shared_model('stories260K.gguf')), 'cannot draft for'),
                   (('--speculate', '2', '--repeat-penalty', '1.2'), 'penalties')):
    r = run(*extra)
    assert r.returncode == 2 and why in r.stderr and r.stderr.count('\n') == 1, (extra, r.returncode, r.stderr)

# another vocabulary (512 tokens against 2048): refused before serving
bad = subprocess.run([EMBER, 'serve', '--model', TARGET, '--draft-model', shared_model('stories260K.gguf'),
                      '--port', '0', '--db', os.path.join(tempfile.mkdtemp(), 'e.db')], capture_output=True, text=True, timeout=600)
assert bad.returncode == 2 and 'cannot draft for' in bad.stderr and 'tokens' in bad.stderr, (bad.returncode,
                                                                                             bad.stderr)

srv = Server(TARGET, '--draft-model', DRAFT, '--parallel', '4')
try:
    def counters():
        return spec_counters(srv)

    d0, a0 = counters()
    for prompt in (STORY, REPEAT):
        off = srv.complete(prompt=prompt, max_tokens=80, temperature=0, speculative='off')['choices'][0]['text']
        on = srv.complete(prompt=prompt, max_tokens=80, temperature=0, speculative='draft_model')['choices'][0]['text']
        assert on == off, (prompt, on, off)
        dflt = srv.complete(prompt=prompt, max_tokens=80, temperature=0)['choices'][0]['text']   # the server's default
        assert dflt == off, (prompt, dflt, off)
        big = srv.complete(prompt=prompt, max_tokens=80, temperature=0,
                   speculative={'method': 'draft_model', 'max_draft': 8})['choices'][0]['text']
        assert big == off, (prompt, big, off)
        st, _, raw = srv.request('POST', '/v1/completions', {'prompt': prompt, 'max_tokens': 80, 'temperature': 0,
                                                             'speculative': 'draft_model', 'stream': True})
        ev = sse_events(raw)
        assert ev[-1] == '[DONE]' and ''.join(p['choices'][0]['text'] for p in ev[:-1] if p['choices']) == off
    d1, a1 = counters()
    assert d1 > d0 and a1 > a0 and a1 - a0 <= d1 - d0, (d0, a0, d1, a1)
    greedy_rate = (a1 - a0) / (d1 - d0)

    lp = srv.complete(prompt=STORY, max_tokens=5, temperature=0, logprobs=2)['choices'][0]
    assert lp['logprobs']['tokens'] and ''.join(lp['logprobs']['tokens']) == lp['text'], lp

    def triples(spec):   # independent samples: the two arms draw with different seeds
        c = collections.Counter()
        for seed in range(400):
            r = srv.complete(prompt=STORY, max_tokens=3, temperature=1.0, seed=seed + (0 if spec else 100000),
                     ignore_eos=True, speculative='draft_model' if spec else 'off')
            c[r['choices'][0]['text']] += 1
        return c
    d2, a2 = counters()
    with_spec, without = triples(True), triples(False)
    d3, a3 = counters()
    assert d3 > d2 and a3 > a2, ('the sampled runs must draft and accept', d2, a2, d3, a3)
    chi, crit, df = two_sample_chi2(with_spec, without)
    assert df >= 3 and chi < crit, ('distributions differ', chi, crit, df)
    print('draft model: greedy identical, %.0f%% of %d greedy drafts accepted; sampled: %d of %d drafts accepted, '
          'chi-square %.1f < %.1f (df %d, alpha 0.001)' %
          (100 * greedy_rate, d1 - d0, a3 - a2, d3 - d2, chi, crit, df))
finally:
    rc, err = srv.stop()
assert rc == 0, err

# without a draft model: "draft_model" is refused, saying what is missing
srv = Server(TARGET, '--parallel', '2')
try:
    st, _, r = srv.post('/v1/completions', {'prompt': 'x', 'max_tokens': 2, 'speculative': 'draft_model'})
    assert st == 400 and '--draft-model' in r['error']['message'], (st, r)
finally:
    rc, err = srv.stop()
assert rc == 0, err
