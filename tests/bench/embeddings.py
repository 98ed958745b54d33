#!/usr/bin/env python3
# embeddings.py — embeddings per second through `ember serve` on 127.0.0.1:
# one POST /v1/embeddings of N inputs of TOKENS token ids each (ids, so that
# every input is exactly that long), for each N of 1, 16 and 64, with the
# official openai SDK; three timed requests after a warm-up each, and the
# best, median and worst printed. Beside it, 16 concurrent one-input
# requests (what 16 clients indexing at once send): the scheduler batches
# them. Not a test: a benchmark (docs/PERFORMANCE.md, "Embeddings").
#   python3 tests/bench/embeddings.py BUILD MODEL [TOKENS]
import os
import random
import statistics
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), '..', 'e2e'))
os.environ.setdefault('EMBER_BIN', os.path.join(sys.argv[1], 'firmware', 'ember'))
from serve_util import Server  # noqa: E402

import openai  # noqa: E402

model = sys.argv[2]
tokens = int(sys.argv[3]) if len(sys.argv) > 3 else 128
srv = Server(model, '--parallel', '64', keys=(('bench', ()),))
rng = random.Random(7)


def inputs(n):
    # [CLS] words... [SEP] for a WordPiece vocabulary (ids 101, 102), else plain ids
    return [[101] + [rng.randrange(2000, 20000) for _ in range(tokens - 2)] + [102] for _ in range(n)]


try:
    client = openai.OpenAI(base_url=srv.base + '/v1', api_key=srv.keys['bench'], max_retries=0, timeout=900)
    srv_model = client.models.list().data[0].id
    print('embeddings: %s, %d-token inputs' % (srv_model, tokens))
    for n in (1, 16, 64):
        client.embeddings.create(model=srv_model, input=inputs(n))   # warm: the step shape recorded
        t = []
        for _ in range(3):
            x = inputs(n)
            t0 = time.monotonic()
            r = client.embeddings.create(model=srv_model, input=x)
            t.append(time.monotonic() - t0)
            assert len(r.data) == n and r.usage.prompt_tokens == n * tokens, r.usage
        print('  %2d inputs in one request: %6.1f embeddings/s (best; median %.1f, worst %.1f)' %
              (n, n / min(t), n / statistics.median(t), n / max(t)))
    done = []

    def one():
        client.embeddings.create(model=srv_model, input=inputs(1))
        done.append(1)
    t0 = time.monotonic()
    th = [threading.Thread(target=one) for _ in range(16)]
    for x in th:
        x.start()
    for x in th:
        x.join()
    dt = time.monotonic() - t0
    print('  16 concurrent one-input requests: %6.1f embeddings/s (%d done in %.1f s)' % (len(done) / dt,
                                                                                          len(done), dt))
finally:
    srv.stop()
