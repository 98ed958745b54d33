#!/usr/bin/env python3
# soak.py — a long run of a real `ember serve` on 127.0.0.1 with a realistic
# mix, watched for leaks. Not in CI (docs/RELIABILITY.md records runs):
#   .venv/bin/python3 tests/soak/soak.py [--minutes 20] [--model M] [--build build] [--out DIR]
# For the whole time, at once:
#  - `ember loadtest` levels of interactive chat users plus background users,
#    one after another;
#  - WebSocket chats (ember.chat.v1), some cancelled mid-answer, some sockets
#    dropped mid-stream;
#  - streams over HTTP dropped mid-answer; malformed requests (bad JSON, bad
#    parameters, an oversized body, a wrong key); constrained (JSON schema)
#    and speculative (prompt lookup) requests;
#  - a background batch of a few hundred lines, a new one when it is done.
# Every 10 s it samples the server's RSS, open file descriptors, threads
# (/proc), KV blocks in use with no request running, queue depths and the
# latency of a probe request, and writes them to DIR/soak.csv and
# DIR/soak.svg. It fails (exit 1) on growth that indicates a leak: RSS,
# descriptors or threads in the last third of the run above the first
# third's peak by more than a margin, or KV blocks held while idle at the end.
import argparse
import asyncio
import csv
import http.client
import io
import json
import os
import random
import re
import socket
import subprocess
import sys
import threading
import time

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, '..', 'e2e'))

ap = argparse.ArgumentParser()
ap.add_argument('--minutes', type=float, default=20)
ap.add_argument('--model', default=os.path.join(here, '..', '..', '..', 'shared', 'models', 'stories260K.gguf'))
ap.add_argument('--build', default=os.path.join(here, '..', '..', 'build'))
ap.add_argument('--out', default='soak-out')
args = ap.parse_args()
os.environ.setdefault('EMBER_BIN', os.path.join(args.build, 'firmware', 'ember'))
from serve_util import EMBER, Server  # noqa: E402
import ws_util  # noqa: E402
import openai  # noqa: E402

os.makedirs(args.out, exist_ok=True)
END = time.monotonic() + args.minutes * 60
srv = Server(args.model, '--parallel', '8', '--ctx', '1024', '--max-queued', '64',
             keys=(('soak', ()), ('bg', ('--class', 'background'))))
KEY = srv.keys['soak']
H = {'Authorization': 'Bearer ' + KEY, 'Content-Type': 'application/json'}
counts = {}
lock = threading.Lock()


def count(what):
    with lock:
        counts[what] = counts.get(what, 0) + 1


def running():
    return time.monotonic() < END


def post(path, body, raw=None, headers=None, timeout=120):
    c = http.client.HTTPConnection('127.0.0.1', srv.port, timeout=timeout)
    c.request('POST', path, body=raw if raw is not None else json.dumps(body), headers=headers or H)
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, data


# ---- the mix ------------------------------------------------------------------------------------------
def loadtest_loop():
    while running():
        try:
            subprocess.run([EMBER, 'loadtest', '--url', srv.base, '--api-key', KEY, '--users', '4,8',
                            '--requests-per-user', '3', '--background', '2', '--gen-tokens', '8-32',
                            '--prompt-tokens', '16-64'], capture_output=True, timeout=900)
            count('loadtest runs')
        except (OSError, subprocess.TimeoutExpired):   # the binary being rebuilt meanwhile, a stuck level
            count('loadtest runs failed')
            time.sleep(1)


def odd_requests_loop():
    rnd = random.Random(1)
    while running():
        k = rnd.randrange(7)
        try:
            if k == 0:
                post('/v1/completions', None, raw=b'{"prompt": "x", ')   # malformed JSON
            elif k == 1:
                post('/v1/completions', {'prompt': 'x', 'temperature': 'hot'})   # bad parameter
            elif k == 2:
                post('/v1/completions', None, raw=b'{"prompt": "' + b'a' * (5 << 20) + b'"}')   # past max_body
            elif k == 3:
                post('/v1/models', {}, headers={'Authorization': 'Bearer em_' + 'x' * 43})   # wrong key
            elif k == 4:   # constrained
                post('/v1/chat/completions', {'messages': [{'role': 'user', 'content': 'a person'}], 'max_tokens': 40,
                                              'response_format': {'type': 'json_schema', 'json_schema': {
                                                  'name': 'p', 'schema': {'type': 'object', 'properties': {
                                                      'name': {'type': 'string', 'maxLength': 12}},
                                                      'required': ['name']}}}})
            elif k == 5:   # speculative
                post('/v1/completions', {'prompt': 'one two three one two three one two', 'max_tokens': 24,
                                         'temperature': 0, 'speculative': 'prompt_lookup'})
            else:   # a stream dropped mid-answer
                s = socket.create_connection(('127.0.0.1', srv.port), timeout=60)
                body = json.dumps({'prompt': 'Once upon a time', 'max_tokens': 200, 'stream': True}).encode()
                s.sendall(b'POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n'
                          b'Authorization: Bearer ' + KEY.encode() + b'\r\nContent-Length: ' +
                          str(len(body)).encode() + b'\r\n\r\n' + body)
                s.recv(4096)
                s.close()
            count('odd requests')
        except OSError:
            count('odd request socket errors')
        time.sleep(0.05)


async def ws_session(rnd):
    ws, _ = await ws_util.connect(srv)
    for _ in range(3):
        await ws_util.send(ws, type='chat', id='c', messages=[{'role': 'user', 'content': 'Tell me a story'}],
                           params={'max_tokens': rnd.randrange(8, 64)})
        mode = rnd.randrange(3)
        for _ in range(10000):
            f = await ws_util.recv(ws)
            if f['type'] == 'token' and mode == 1:
                await ws_util.send(ws, type='cancel', id='c')
                mode = 0
            if f['type'] == 'token' and mode == 2:
                ws.transport.close()   # dropped mid-stream
                return
            if f['type'] in ('done', 'error'):
                break
    await ws.close()


def ws_loop():
    rnd = random.Random(2)
    while running():
        try:
            asyncio.run(ws_session(rnd))
            count('ws sessions')
        except Exception:   # a dropped socket ends its session by design
            count('ws sessions dropped')


def batch_loop():
    client = openai.OpenAI(base_url=srv.base + '/v1', api_key=srv.keys['bg'], max_retries=0, timeout=600)
    n = 0
    while running():
        lines = [{'custom_id': 'b%d-%d' % (n, i), 'method': 'POST', 'url': '/v1/completions',
                  'body': {'prompt': 'The little dog %d' % i, 'max_tokens': 16}} for i in range(300)]
        f = client.files.create(file=('b.jsonl', io.BytesIO(b''.join(json.dumps(x).encode() + b'\n' for x in lines))),
                                purpose='batch')
        b = client.batches.create(input_file_id=f.id, endpoint='/v1/completions', completion_window='24h')
        while running():
            b = client.batches.retrieve(b.id)
            if b.status in ('completed', 'failed', 'cancelled', 'expired'):
                break
            time.sleep(2)
        if not running() and b.status not in ('completed', 'failed'):
            try:
                client.batches.cancel(b.id)
            except openai.ConflictError:   # it finished meanwhile
                pass
        count('batches ' + b.status)
        n += 1


# ---- the watcher ---------------------------------------------------------------------------------------
def proc_stats(pid):
    rss = 0
    with open('/proc/%d/status' % pid) as f:
        for ln in f:
            if ln.startswith('VmRSS:'):
                rss = int(ln.split()[1]) // 1024
            if ln.startswith('Threads:'):
                threads = int(ln.split()[1])
    fds = len(os.listdir('/proc/%d/fd' % pid))
    return rss, fds, threads


def metrics():
    """(sequences running, requests queued), all classes."""
    c = http.client.HTTPConnection('127.0.0.1', srv.port, timeout=60)
    c.request('GET', '/metrics', headers=H)
    text = c.getresponse().read().decode()
    c.close()

    def total(name):
        return sum(float(v) for v in re.findall(r'^%s\{[^}]*\} (\S+)$' % name, text, re.M))
    return total('ember_requests_running'), total('ember_requests_queued')


def kv_used():
    c = http.client.HTTPConnection('127.0.0.1', srv.port, timeout=60)
    c.request('GET', '/metrics', headers=H)
    text = c.getresponse().read().decode()
    c.close()
    m = re.search(r'^ember_kv_blocks\{state="used"\} (\d+)$', text, re.M)
    return int(m.group(1)) if m else -1


def probe_ms():
    t0 = time.monotonic()
    post('/v1/completions', {'prompt': 'Once', 'max_tokens': 1, 'temperature': 0, 'cache': False})
    return (time.monotonic() - t0) * 1e3


threads = [threading.Thread(target=f, daemon=True) for f in (loadtest_loop, odd_requests_loop, ws_loop, ws_loop,
                                                              batch_loop)]
for t in threads:
    t.start()
rows = []
t_start = time.monotonic()
try:
    while running():
        rss, fds, thr = proc_stats(srv.p.pid)
        run_n, queued = metrics()
        rows.append({'t_s': round(time.monotonic() - t_start, 1), 'rss_mb': rss, 'fds': fds, 'threads': thr,
                     'kv_used': kv_used(), 'running': run_n, 'queued': queued, 'probe_ms': round(probe_ms(), 1)})
        print('soak: %(t_s)7.1f s  rss %(rss_mb)5d MB  fds %(fds)4d  threads %(threads)3d  kv used %(kv_used)4d  '
              'running %(running)3.0f  queued %(queued)3.0f  probe %(probe_ms)7.1f ms' % rows[-1], flush=True)
        time.sleep(10)
    for t in threads:
        t.join(timeout=900)
    time.sleep(2)
    idle_kv = [kv_used() for _ in range(30) if not time.sleep(1)][-1]
    end_rss, end_fds, end_thr = proc_stats(srv.p.pid)
finally:
    rc, err = srv.stop()

with open(os.path.join(args.out, 'soak.csv'), 'w', newline='') as f:
    w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
    w.writeheader()
    w.writerows(rows)


def svg(path):
    W, Hh, pad = 900, 560, 50
    series = [('rss_mb', 'RSS MB', '#c0392b'), ('fds', 'open fds', '#2980b9'), ('threads', 'threads', '#27ae60'),
              ('kv_used', 'KV blocks used', '#8e44ad'), ('probe_ms', 'probe ms', '#d35400')]
    tmax = max(r['t_s'] for r in rows) or 1
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">'
           % (W, Hh), '<rect width="100%" height="100%" fill="white"/>']
    band = (Hh - pad) / len(series)
    for i, (k, label, col) in enumerate(series):
        vals = [r[k] for r in rows]
        lo, hi = min(vals), max(vals)
        span = (hi - lo) or 1
        y0 = 20 + i * band
        pts = ' '.join('%.1f,%.1f' % (pad + (W - 2 * pad) * r['t_s'] / tmax,
                                      y0 + band - 15 - (band - 30) * (r[k] - lo) / span) for r in rows)
        out.append('<text x="%d" y="%.0f" fill="%s">%s: %g .. %g</text>' % (pad, y0 + 10, col, label, lo, hi))
        out.append('<polyline fill="none" stroke="%s" stroke-width="1.5" points="%s"/>' % (col, pts))
    out.append('<text x="%d" y="%d">time: 0 .. %.0f s</text></svg>' % (pad, Hh - 10, tmax))
    open(path, 'w').write('\n'.join(out))


svg(os.path.join(args.out, 'soak.svg'))
third = max(1, len(rows) // 3)
first, last = rows[:third], rows[-third:]
fails = []
for k, margin in (('rss_mb', 64), ('fds', 16), ('threads', 4)):
    if max(r[k] for r in last) > max(r[k] for r in first) + margin:
        fails.append('%s grew: first third peak %s, last third peak %s' % (k, max(r[k] for r in first),
                                                                            max(r[k] for r in last)))
if idle_kv != 0:
    fails.append('%d KV blocks still used with nothing running' % idle_kv)
if rc != 0:
    fails.append('ember serve exited %s' % rc)
print('soak: %.1f minutes, %d samples; %s' % (args.minutes, len(rows), ', '.join('%s %d' % kv for kv in
                                                                                  sorted(counts.items()))))
print('soak: at the end rss %d MB, %d fds, %d threads, %d KV blocks used while idle' % (end_rss, end_fds, end_thr,
                                                                                         idle_kv))
for f in fails:
    print('soak: FAIL: ' + f)
print('soak: %s (%s)' % ('FAIL' if fails else 'ok', os.path.join(args.out, 'soak.csv')))
sys.exit(1 if fails else 0)
