#!/usr/bin/env python3
# speculative.py — what speculation buys: `ember serve` on 127.0.0.1 with a
# model (and, given DRAFT, --draft-model DRAFT), greedy completions of a
# repetitive prompt, a code-like one and a story, each with "speculative":
# "off", "prompt_lookup" and (with a draft) "draft_model"; prints tokens/s
# each way, the speed-up over off and the share of drafted tokens accepted
# (from /metrics). Not a test: a benchmark.
#   python3 tests/bench/speculative.py BUILD MODEL [max_tokens] [DRAFT]
import json
import os
import re
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), '..', 'e2e'))
os.environ.setdefault('EMBER_BIN', os.path.join(sys.argv[1], 'firmware', 'ember'))
from serve_util import Server  # noqa: E402

PROMPTS = {
    'repetitive': 'Repeat after me ten times: the quick brown fox jumps over the lazy dog. '
                  'The quick brown fox jumps over the lazy dog. The quick brown fox jumps over the lazy dog. The',
    'code': 'def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\ndef mul(a, b):\n'
            '    return a * b\n\ndef div(a, b):\n',
    'story': 'Once upon a time, there was a little girl named Lily. She loved to play outside.',
}

model = sys.argv[2]
n = int(sys.argv[3]) if len(sys.argv) > 3 else 128
draft = sys.argv[4] if len(sys.argv) > 4 else None
arms = ('off', 'prompt_lookup') + (('draft_model',) if draft else ())
srv = Server(model, '--parallel', '4', *(('--draft-model', draft) if draft else ()))


def counters():
    text = srv.request('GET', '/metrics')[2].decode()
    return [int(re.search(r'^%s (\d+)$' % k, text, re.M).group(1)) for k in
            ('ember_speculative_drafted_tokens_total', 'ember_speculative_accepted_tokens_total')]


try:
    print('%-11s %10s ' % ('prompt', 'off tok/s') +
          ' '.join('%14s %8s %10s' % (a + ' tok/s', 'speed-up', 'accepted') for a in arms[1:]))
    for name, prompt in PROMPTS.items():
        rate = {}
        for spec in arms:
            srv.post('/v1/completions', {'prompt': prompt, 'max_tokens': 4, 'temperature': 0})   # warm
            d0 = counters()
            t0 = time.monotonic()
            st, _, r = srv.post('/v1/completions', {'prompt': prompt, 'max_tokens': n, 'temperature': 0,
                                                    'ignore_eos': True, 'speculative': spec})
            dt = time.monotonic() - t0
            assert st == 200, r
            d1 = counters()
            rate[spec] = (r['usage']['completion_tokens'] / dt, d1[0] - d0[0], d1[1] - d0[1])
        print('%-11s %10.1f ' % (name, rate['off'][0]) +
              ' '.join('%14.1f %7.2fx %5d/%-4d' % (rate[a][0], rate[a][0] / rate['off'][0], rate[a][2], rate[a][1])
                       for a in arms[1:]))
finally:
    srv.stop()
print(json.dumps({'model': os.path.basename(model), 'draft': draft and os.path.basename(draft), 'max_tokens': n}))
