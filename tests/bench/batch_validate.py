#!/usr/bin/env python3
# batch_validate.py — what validating a large batch costs everyone else:
# `ember serve` on 127.0.0.1 with MODEL; a LINES-line input file is uploaded,
# then a batch is created from it while a client asks /healthz every 10 ms;
# prints the file's size, how long the create call took, the status it
# answered, and the slowest and median /healthz meanwhile. Not a test: a
# benchmark (docs/PERFORMANCE.md, "The Batch API").
#   python3 tests/bench/batch_validate.py BUILD MODEL [LINES]
import http.client
import io
import json
import os
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), '..', 'e2e'))
os.environ.setdefault('EMBER_BIN', os.path.join(sys.argv[1], 'firmware', 'ember'))
from serve_util import Server  # noqa: E402

import openai  # noqa: E402

n = int(sys.argv[3]) if len(sys.argv) > 3 else 50000
srv = Server(sys.argv[2], keys=(('bench', ()),))
try:
    client = openai.OpenAI(base_url=srv.base + '/v1', api_key=srv.keys['bench'], max_retries=0, timeout=600)
    rows = [{'custom_id': 'r%d' % i, 'method': 'POST', 'url': '/v1/completions',
             'body': {'prompt': 'Once upon a time there was a little dog named %d and' % i, 'max_tokens': 1,
                      'temperature': 0}} for i in range(n)]
    data = b''.join(json.dumps(r).encode() + b'\n' for r in rows)
    f = client.files.create(file=('b.jsonl', io.BytesIO(data)), purpose='batch')
    lat, stop = [], threading.Event()

    def probe():
        while not stop.is_set():
            t0 = time.monotonic()
            h = http.client.HTTPConnection('127.0.0.1', srv.port, timeout=60)
            h.request('GET', '/healthz')
            h.getresponse().read()
            h.close()
            lat.append(time.monotonic() - t0)
            time.sleep(0.01)
    th = threading.Thread(target=probe)
    th.start()
    time.sleep(0.3)
    t0 = time.monotonic()
    b = client.batches.create(input_file_id=f.id, endpoint='/v1/completions', completion_window='24h')
    dt = time.monotonic() - t0
    for _ in range(600):   # validated (bounded), then stopped: only validation is measured
        if client.batches.retrieve(b.id).status != 'validating':
            break
        time.sleep(0.05)
    client.batches.cancel(b.id)
    time.sleep(0.3)
    stop.set()
    th.join()
    lat.sort()
    print('file %.1f MB (%d lines): create answered in %.3f s (%s); /healthz meanwhile: max %.3f s, median %.4f s'
          % (len(data) / 1e6, n, dt, b.status, lat[-1], lat[len(lat) // 2]))
finally:
    srv.stop()
