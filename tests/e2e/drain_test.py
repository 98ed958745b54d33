#!/usr/bin/env python3
# drain_test.py — how `ember serve` stops, on a real server with a long
# streamed request (stories260K, 4000 tokens through end-of-text):
#  - the first SIGTERM drains: /healthz answers 503 "draining" with
#    Retry-After while the stream still runs (its running count says so), a
#    new request gets 503 server_draining with Retry-After (and a rejected
#    ledger row), /metrics says ember_draining 1; the stream completes to
#    [DONE] with every token; then the process exits 0 by itself and the
#    ledger has the stream completed;
#  - --drain-s 0: the running stream is cancelled at once (cut, no [DONE]),
#    exit 0, ledger cancelled;
#  - a second signal stops at once: exit 0, the stream cancelled.
import http.client
import json
import signal
import sys
import time

sys.path.insert(0, __file__.rsplit('/', 1)[0])
from serve_util import Server, shared_model  # noqa: E402

model = shared_model('stories260K.gguf')
N = 4000


def open_stream(srv):
    """A streamed completion of N tokens, its first events read: (connection, response, lines)."""
    c = http.client.HTTPConnection('127.0.0.1', srv.port, timeout=600)
    c.request('POST', '/v1/completions', body=json.dumps({
        'prompt': 'Once upon a time', 'max_tokens': N, 'ignore_eos': True, 'temperature': 0, 'stream': True,
        'stream_options': {'include_usage': True}}), headers={'Content-Type': 'application/json'})
    r = c.getresponse()
    assert r.status == 200, r.status
    lines = []
    while sum(1 for x in lines if x.startswith(b'data: ')) < 3:
        lines.append(r.readline())
        assert lines[-1], lines
    return c, r, lines


def read_rest(r, lines):
    """The stream's remaining lines, until it ends or is cut."""
    try:
        while True:
            line = r.readline()
            if not line:
                break
            lines.append(line)
    except (http.client.IncompleteRead, ConnectionError):
        pass
    return lines


def wait_exit(srv, within):
    t0 = time.monotonic()
    rc = srv.p.wait(timeout=within)
    return rc, time.monotonic() - t0


def ledger_rows(srv):
    return srv.ledger('SELECT request_id, status, completion_tokens, error FROM requests ORDER BY rowid')


def cut_and_gone(srv, c, r, lines):
    """The server exits 0 by itself, the stream is cut (no [DONE]) and its ledger row says cancelled."""
    rc, took = wait_exit(srv, 60)
    assert rc == 0, rc
    lines = read_rest(r, lines)
    c.close()
    assert b'data: [DONE]\n' not in lines, lines[-3:]
    rows = ledger_rows(srv)
    assert len(rows) == 1 and rows[0]['status'] == 'cancelled' and rows[0]['completion_tokens'] < N, rows
    return took


# ---- drain: refuse new work, finish the running stream, exit 0 ---------------------------------
srv = Server(model, '--ctx', '4096')
try:
    c, r, lines = open_stream(srv)
    srv.p.send_signal(signal.SIGTERM)
    for _ in range(100):
        st, h, body = srv.request('GET', '/healthz')
        if st == 503:
            break
        time.sleep(0.05)
    hz = json.loads(body)
    assert st == 503 and hz['status'] == 'draining', (st, hz)
    assert 1 <= int(h['retry-after']) <= 30, h
    assert hz['requests']['running']['interactive'] == 1, hz   # the stream is still going
    st, h, body = srv.post('/v1/completions', {'prompt': 'Once', 'max_tokens': 2})
    assert st == 503 and body['error']['code'] == 'server_draining', (st, body)
    assert 1 <= int(h['retry-after']) <= 30, h
    st, h, body = srv.request('GET', '/metrics')
    assert st == 200 and b'\nember_draining 1\n' in body, body[-300:]
    st, h, body = srv.request('GET', '/healthz')
    assert json.loads(body)['requests']['running']['interactive'] == 1, body   # still going
    lines = read_rest(r, lines)
    c.close()
    events = [x for x in lines if x.startswith(b'data: ')]
    assert events[-1] == b'data: [DONE]\n', events[-3:]
    usage = json.loads(events[-2][6:])['usage']
    assert usage['completion_tokens'] == N, usage
    rc, took = wait_exit(srv, 60)
    assert rc == 0, rc
    rows = ledger_rows(srv)
    assert [x['status'] for x in rows] == ['completed', 'rejected'], rows
    assert rows[0]['completion_tokens'] == N and rows[1]['error'].startswith('503 '), rows
    rc, err = srv.stop()
    assert 'draining: 1 request(s) running' in err and 'drained' in err, err
    print('drain: the stream finished (%d tokens), exit 0 %.1f s after it' % (N, took))
finally:
    if srv.p.poll() is None:
        srv.p.kill()
        srv.p.wait()

# ---- --drain-s 0: what runs is cancelled at once ---------------------------------------------------
srv = Server(model, '--ctx', '4096', '--drain-s', '0')
try:
    c, r, lines = open_stream(srv)
    srv.p.send_signal(signal.SIGTERM)
    took = cut_and_gone(srv, c, r, lines)
    rc, err = srv.stop()
    assert 'cancelling 1 request(s)' in err, err
    print('drain: --drain-s 0 cancelled the stream, exit 0 in %.1f s' % took)
finally:
    if srv.p.poll() is None:
        srv.p.kill()
        srv.p.wait()

# ---- a second signal stops at once -------------------------------------------------------------------
srv = Server(model, '--ctx', '4096')
try:
    c, r, lines = open_stream(srv)
    srv.p.send_signal(signal.SIGTERM)
    for _ in range(100):
        if srv.request('GET', '/healthz')[0] == 503:
            break
        time.sleep(0.05)
    srv.p.send_signal(signal.SIGTERM)
    took = cut_and_gone(srv, c, r, lines)
    srv.stop()
    print('drain: a second signal stopped it in %.1f s' % took)
finally:
    if srv.p.poll() is None:
        srv.p.kill()
        srv.p.wait()
print('drain: ok')
