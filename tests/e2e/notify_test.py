#!/usr/bin/env python3
# notify_test.py — `ember serve` under a service manager's eyes (Type=notify,
# firmware/notify.c): the test binds the Unix datagram socket that systemd
# would, starts a real server with NOTIFY_SOCKET and WATCHDOG_USEC set, and
# reads what arrives:
#  - READY=1 first (with a STATUS=), and the port answers;
#  - STATUS= lines ("<model>: N running, M queued, X tokens/s") every
#    EM_NOTIFY_STATUS_S, and WATCHDOG=1 pings every WATCHDOG_USEC/2: counted
#    against the STATUS lines, which the same thread sends on its own clock;
#  - a long stream shows as "1 running" with tokens/s > 0; SIGTERM sends
#    STOPPING=1 once, STATUS says draining, the process exits 0;
#  - EMBER_TEST_HANG_STEP=1 (scheduler/backend_gpu.c: the first step never
#    returns): pings go on while idle, and once a request is stuck in its
#    step they stop (STATUS says the scheduler thread shows no sign of life)
#    while the process lives and /healthz still answers.
import http.client
import json
import os
import queue
import re
import signal
import socket
import sys
import tempfile
import threading

sys.path.insert(0, __file__.rsplit('/', 1)[0])
from serve_util import Server, shared_model  # noqa: E402

model = shared_model('stories260K.gguf')
WATCHDOG_S = 2.0          # WATCHDOG_USEC: pings every 1 s
STATUS_S = 2.0            # EM_NOTIFY_STATUS_S (firmware/notify.h)
STATUS = re.compile(r'STATUS=(draining )?(\S+): (\d+) running, (\d+) queued, ([0-9.]+) tokens/s')


class Notify:
    """The service manager's end: a Unix datagram socket in a fresh folder, read all the time by a
    thread as systemd reads it (sd_notify blocks once the socket's queue, 10 datagrams, is full)."""

    def __init__(self):
        self.path = os.path.join(tempfile.mkdtemp(prefix='ember-notify-'), 'notify.sock')
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.s.bind(self.path)
        self.q = queue.Queue()
        self.seen = []
        threading.Thread(target=self.reader, daemon=True).start()

    def reader(self):
        while True:
            self.q.put(self.s.recv(4096).decode())

    def next(self, timeout=60):   # a bound for a hang, not a speed limit
        m = self.q.get(timeout=timeout)
        self.seen.append(m)
        return m

    def until_status(self, n=1, pred=lambda m: True, most=400):
        """Read until n STATUS lines matching pred arrived; the messages read (bounded)."""
        got, k = [], 0
        for _ in range(most):
            got.append(self.next())
            if 'STATUS=' in got[-1] and pred(got[-1]):
                k += 1
                if k == n:
                    return got
        raise AssertionError('%d STATUS lines did not come in %d messages: %r' % (n, most, got[-10:]))


def serve(notify, *args, hang=None):
    env = {'NOTIFY_SOCKET': notify.path, 'WATCHDOG_USEC': str(int(WATCHDOG_S * 1e6))}
    if hang:
        env['EMBER_TEST_HANG_STEP'] = hang
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        return Server(model, *args)
    finally:
        for k, v in old.items():
            if v is None:
                del os.environ[k]
            else:
                os.environ[k] = v


def pings(msgs):
    return sum(1 for m in msgs if m == 'WATCHDOG=1')


def fields(m):
    g = STATUS.search(m)
    assert g, m
    return g.group(1) is not None, g.group(2), int(g.group(3)), int(g.group(4)), float(g.group(5))


# ---- READY, STATUS, the pings' cadence, a stream, STOPPING on SIGTERM --------------------------
nt = Notify()
srv = serve(nt, '--ctx', '4096')
try:
    first = nt.next()
    assert first.startswith('READY=1\n') and 'STATUS=' in first, first
    draining, model_id, running, queued, tps = fields(first)
    assert not draining and model_id == 'stories260K' and running == 0 and queued == 0, first
    st, _, body = srv.request('GET', '/healthz')
    assert st == 200 and json.loads(body)['status'] == 'ok', (st, body)

    # cadence: between the first and the fifth STATUS line (4 periods of STATUS_S) come about
    # 4 * STATUS_S / (WATCHDOG_S / 2) pings; both are the notifier thread's own schedule
    msgs = nt.until_status(1)
    msgs = nt.until_status(4)
    n = pings(msgs)
    expect = 4 * STATUS_S / (WATCHDOG_S / 2)
    assert expect / 2 <= n <= expect * 1.5, (n, expect, msgs)
    assert all(fields(m)[2:4] == (0, 0) for m in msgs if 'STATUS=' in m), msgs
    print('notify: READY=1 first; %d pings over 4 STATUS periods (expected %.0f)' % (n, expect))

    # a long stream: STATUS says 1 running with a token rate
    out = {}

    def stream():
        c = http.client.HTTPConnection('127.0.0.1', srv.port, timeout=600)
        c.request('POST', '/v1/completions', body=json.dumps({
            'prompt': 'Once upon a time', 'max_tokens': 4000, 'ignore_eos': True, 'temperature': 0,
            'stream': True}), headers={'Content-Type': 'application/json'})
        r = c.getresponse()
        out['status'] = r.status
        out['body'] = r.read()
        c.close()

    th = threading.Thread(target=stream)
    th.start()
    msgs = nt.until_status(1, lambda m: fields(m)[2] == 1 and fields(m)[4] > 0, most=100)
    print('notify: during the stream: %s' % msgs[-1])
    srv.p.send_signal(signal.SIGTERM)
    msgs = nt.until_status(1, lambda m: fields(m)[0], most=100)   # draining
    assert 'STOPPING=1' in msgs[-1] or any('STOPPING=1' in m for m in msgs), msgs
    th.join(600)
    assert out['status'] == 200 and out['body'].rstrip().endswith(b'data: [DONE]'), out.get('status')
    rc = srv.p.wait(timeout=120)
    assert rc == 0, rc
    try:   # what is left in the queue
        while True:
            nt.next(timeout=0.5)
    except queue.Empty:
        pass
    stopping = sum(1 for m in nt.seen if 'STOPPING=1' in m)
    assert stopping == 1, [m for m in nt.seen if 'STOPPING' in m]
    ready = sum(1 for m in nt.seen if 'READY=1' in m)
    assert ready == 1, ready
    print('notify: SIGTERM: STOPPING=1 once, STATUS draining, the stream finished, exit 0')
    rc, err = srv.stop()
finally:
    if srv.p.poll() is None:
        srv.p.kill()
        srv.p.wait()

# ---- a stuck step: the pings stop while the process lives --------------------------------------
nt = Notify()
srv = serve(nt, '--ctx', '4096', hang='1')
try:
    assert nt.next().startswith('READY=1\n')
    msgs = nt.until_status(2)
    assert pings(msgs) >= 2, msgs   # idle: the scheduler beats while it waits
    s = socket.create_connection(('127.0.0.1', srv.port), timeout=60)
    req = json.dumps({'prompt': 'Once upon a time', 'max_tokens': 8}).encode()
    s.sendall(b'POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n'
              b'Content-Length: ' + str(len(req)).encode() + b'\r\n\r\n' + req)
    msgs = nt.until_status(1, lambda m: 'watchdog not pinged: the scheduler thread' in m, most=100)
    print('notify: stuck: %s' % msgs[-1])
    after = nt.until_status(3)   # three more STATUS periods: six pings' worth
    assert pings(after) == 0, after
    assert all('watchdog not pinged: the scheduler thread' in m for m in after if 'STATUS=' in m), after
    assert srv.p.poll() is None, srv.p.returncode
    st, _, body = srv.request('GET', '/healthz')   # the service thread still answers
    assert st == 200, (st, body)
    s.close()
    print('notify: a stuck step: no ping over 3 STATUS periods, the process alive, /healthz 200')
finally:
    srv.p.kill()
    srv.p.wait()
    srv.errf.close()
err = open(srv.err_path).read()
assert 'watchdog: the scheduler thread has shown no sign of life' in err, err
print('notify: ok')
