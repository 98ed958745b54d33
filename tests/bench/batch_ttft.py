#!/usr/bin/env python3
# batch_ttft.py — what a running batch costs interactive users: `ember serve`
# on 127.0.0.1 with MODEL; the time to first token of N streamed interactive
# completions, one after another, first on an idle server, then while a
# batch of LINES background lines runs; prints both (median, p90), their
# ratio, and the batch's throughput (lines/s, completion tokens/s). Not a
# test: a benchmark (docs/PERFORMANCE.md, "The Batch API").
#   python3 tests/bench/batch_ttft.py BUILD MODEL [LINES] [N] [max_tokens]
import io
import json
import os
import http.client
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), '..', 'e2e'))
os.environ.setdefault('EMBER_BIN', os.path.join(sys.argv[1], 'firmware', 'ember'))
from serve_util import Server  # noqa: E402

import openai  # noqa: E402

model = sys.argv[2]
lines = int(sys.argv[3]) if len(sys.argv) > 3 else 500
n = int(sys.argv[4]) if len(sys.argv) > 4 else 20
max_tokens = int(sys.argv[5]) if len(sys.argv) > 5 else 64
srv = Server(model, '--parallel', '16', keys=(('bench', ()),))
auth = {'Content-Type': 'application/json', 'Authorization': 'Bearer ' + srv.keys['bench']}


def ttft():
    t0 = time.monotonic()
    first = None
    c = http.client.HTTPConnection('127.0.0.1', srv.port, timeout=600)
    c.request('POST', '/v1/completions', body=json.dumps({
        'prompt': 'Once upon a time, in a small town, there lived a', 'max_tokens': 16, 'temperature': 0,
        'stream': True, 'priority': 'interactive'}), headers=auth)
    r = c.getresponse()
    while True:
        ln = r.readline()
        if not ln:
            break
        if first is None and ln.startswith(b'data: {') and b'"text":""' not in ln:
            first = time.monotonic() - t0
    c.close()
    return first * 1e3


def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(p * len(v)))]


try:
    client = openai.OpenAI(base_url=srv.base + '/v1', api_key=srv.keys['bench'], max_retries=0, timeout=600)
    for _ in range(3):
        ttft()   # warm
    idle = [ttft() for _ in range(n)]
    reqs = [{'custom_id': 'b%d' % i, 'method': 'POST', 'url': '/v1/completions',
             'body': {'prompt': 'The little dog %d' % i, 'max_tokens': max_tokens, 'temperature': 0,
                      'ignore_eos': True}} for i in range(lines)]
    f = client.files.create(file=('b.jsonl', io.BytesIO(b''.join(json.dumps(r).encode() + b'\n' for r in reqs))),
                            purpose='batch')
    t0 = time.monotonic()
    b = client.batches.create(input_file_id=f.id, endpoint='/v1/completions', completion_window='24h')
    time.sleep(1.0)   # the batch fills the server
    busy = []
    while len(busy) < n and client.batches.retrieve(b.id).status == 'in_progress':
        busy.append(ttft())
    while client.batches.retrieve(b.id).status not in ('completed', 'failed', 'cancelled'):
        time.sleep(0.5)
    dt = time.monotonic() - t0
    done = client.batches.retrieve(b.id)
    print('%-18s %10s %10s' % ('TTFT ms', 'median', 'p90'))
    print('%-18s %10.1f %10.1f' % ('idle', statistics.median(idle), pct(idle, 0.9)))
    print('%-18s %10.1f %10.1f  (%d samples while the batch ran)' % ('batch running', statistics.median(busy),
                                                                   pct(busy, 0.9), len(busy)))
    print('ratio (median)     %10.2f' % (statistics.median(busy) / statistics.median(idle)))
    print('batch: %d lines (%s) in %.1f s: %.1f lines/s, %.0f completion tokens/s' % (
        lines, done.status, dt, lines / dt, lines * max_tokens / dt))
finally:
    srv.stop()
