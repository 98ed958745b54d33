#!/usr/bin/env python3
# sockets_test.py — socket writes that cannot go through, under a live
# `ember serve` with other clients asking:
#  - a client that stops reading a long stream (a tiny receive buffer, so
#    the server's socket fills): the answer is still generated to its end,
#    everyone else is answered meanwhile, and when the client reads again
#    it gets every byte — the same text as the request alone, every token,
#    one finish and [DONE] — nothing dropped or cut short;
#  - clients that reset their connection (RST) in the middle of a stream:
#    the server's write fails, the request is cancelled and said so in the
#    ledger, its KV blocks come back, and the server goes on serving;
#  - a client that pipelines (sends its next request before the answer):
#    GETs are answered in order on the one connection; a request sent behind
#    a POST's body before its answer gets the POST refused (400, in the same
#    write) or cancelled (once it runs) and the connection closed, said so in
#    the log (and the ledger), instead of the service loop spinning for ever
#    and answering no one (libwebsockets 4.1; found by
#    tests/fuzz/fuzz_http.c), and everyone else is still answered
#    (tests/e2e/framing_test.py has the rest of request framing).
import json
import socket
import struct
import sys
import threading
import time

sys.path.insert(0, __file__.rsplit('/', 1)[0])
from serve_util import Server, recv_all, shared_model  # noqa: E402

srv = Server(shared_model('stories260K.gguf'), '--parallel', '4')
N_TOK = 400
BODY = {'prompt': 'Once upon a time', 'max_tokens': N_TOK, 'temperature': 0, 'ignore_eos': True,
        'n': 4, 'stream': True}


def post_raw(s, body):
    req = json.dumps(body).encode()
    s.sendall(b'POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n'
              b'Content-Length: ' + str(len(req)).encode() + b'\r\n\r\n' + req)


def dechunk(body):
    out, rest = b'', body
    while True:
        size, _, rest = rest.partition(b'\r\n')
        n = int(size.split(b';')[0], 16)
        if n == 0:
            return out
        out, rest = out + rest[:n], rest[n + 2:]


try:
    # what the request gives alone (the texts of its four choices, greedy: all the same)
    alone = dict(BODY, stream=False)
    st, _, r = srv.post('/v1/completions', alone)
    assert st == 200, r
    want = {c['index']: c['text'] for c in r['choices']}
    assert len(want) == 4 and r['usage']['completion_tokens'] == 4 * N_TOK, r['usage']

    # 1. a stalled reader: a 2 KB receive buffer, nothing read until the answer is done
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 2048)
    s.connect(('127.0.0.1', srv.port))
    s.settimeout(120)
    post_raw(s, BODY)
    n_rows = len(srv.ledger())
    # the server finishes generating while nothing is read (bounded wait), and answers others meanwhile
    others = 0
    for _ in range(600):
        st, _, o = srv.post('/v1/completions', {'prompt': 'The dog', 'max_tokens': 8, 'temperature': 0})
        assert st == 200 and o['usage']['completion_tokens'] == 8, o
        others += 1
        rows = srv.ledger()
        done = [x for x in rows[n_rows:] if x['completion_tokens'] == 4 * N_TOK]
        if done and done[0]['status'] != 'admitted':
            break
        time.sleep(0.05)
    else:
        raise AssertionError('the stalled reader\'s request never finished generating')
    assert done[0]['status'] == 'completed' and done[0]['finish_reason'] == 'length', done[0]
    # the stream really is held back by the socket: the bytes are more than the socket takes
    raw = b''
    while not raw.endswith(b'0\r\n\r\n'):
        more = s.recv(65536)
        assert more, raw[-300:]
        raw += more
    s.close()
    head, _, body = raw.partition(b'\r\n\r\n')
    assert head.startswith(b'HTTP/1.1 200'), head
    assert b'transfer-encoding: chunked' in head.lower(), head
    data = dechunk(body)
    assert len(data) > 64 * 1024, len(data)   # far more than the 2 KB buffer and the server's socket took
    events = [e[len(b'data: '):] for e in data.split(b'\n\n') if e.startswith(b'data: ')]
    assert events[-1] == b'[DONE]', events[-3:]
    got, finishes = {i: '' for i in range(4)}, {}
    for e in events[:-1]:
        ch = json.loads(e)['choices'][0]
        got[ch['index']] += ch['text']
        if ch.get('finish_reason'):
            assert ch['index'] not in finishes, 'two finishes for choice %d' % ch['index']
            finishes[ch['index']] = ch['finish_reason']
    assert got == want, 'the stalled stream differs from the request alone'
    assert finishes == {i: 'length' for i in range(4)}, finishes
    print('stalled reader: %d bytes, %d events, all received after the request finished; '
          '%d other requests answered meanwhile' % (len(data), len(events), others))

    # 2. connections reset mid-stream: the server's writes fail, the requests are cancelled
    n_rows = len(srv.ledger_settled(2 + others))   # the alone, the stalled and the others' rows
    assert n_rows == 2 + others, n_rows
    errs = []

    def reset_one():
        try:
            c = socket.create_connection(('127.0.0.1', srv.port), timeout=60)
            post_raw(c, dict(BODY, n=1))
            got = b''
            while got.count(b'data: ') < 5:
                more = c.recv(4096)
                assert more, got
                got += more
            c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack('ii', 1, 0))   # close = RST
            c.close()
        except Exception as e:   # noqa: BLE001 — reported below
            errs.append(repr(e))

    ts = [threading.Thread(target=reset_one) for _ in range(6)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)
    assert not errs, errs
    rows = srv.ledger_settled(n_rows + 6)[n_rows:]
    assert len(rows) == 6, rows
    for x in rows:
        assert x['status'] == 'cancelled' and x['completion_tokens'] < N_TOK, x
    # the server goes on: a full answer, every KV block back (bounded wait for the last steps)
    st, _, o = srv.post('/v1/completions', {'prompt': 'The cat', 'max_tokens': 16, 'temperature': 0})
    assert st == 200 and o['usage']['completion_tokens'] == 16, o
    used = None
    for _ in range(100):
        used = [ln for ln in srv.request('GET', '/metrics')[2].decode().splitlines()
                if ln.startswith('ember_kv_blocks{state="used"}')]
        if used and float(used[0].rsplit(' ', 1)[1]) == 0:
            break
        time.sleep(0.1)
    assert used and float(used[0].rsplit(' ', 1)[1]) == 0, used
    print('reset mid-stream: 6 requests cancelled (%s tokens each), no KV block held, serving on' %
          ','.join(str(x['completion_tokens']) for x in rows))

    def pipelined(data):
        """Send data at once on one connection; what came back until the server closed (bounded)."""
        c = socket.create_connection(('127.0.0.1', srv.port), timeout=60)
        c.sendall(data)
        got = recv_all(c)
        c.close()
        return got

    def req(method, path, body=None, close=False):
        h = '%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\n' % (method, path)
        if body is not None:
            h += 'Content-Type: application/json\r\nContent-Length: %d\r\n' % len(body)
        return (h + ('Connection: close\r\n' if close else '') + '\r\n' + (body or '')).encode()
    got = pipelined(req('GET', '/healthz') + req('GET', '/v1/models', close=True))
    assert got.count(b'HTTP/1.1 200') == 2 and b'"object":"list"' in got.replace(b' ', b''), got[:400]
    slow = json.dumps({'prompt': 'Once', 'max_tokens': 200, 'temperature': 0, 'ignore_eos': True})
    got = pipelined(req('POST', '/v1/completions', slow) + req('GET', '/healthz', close=True))
    assert got.startswith(b'HTTP/1.1 400') and got.count(b'HTTP/1.1') == 1 and b'pipelining' in got, got[:400]
    # the GET sent once the POST streams: the POST cancelled, the connection closed, the GET not answered
    c = socket.create_connection(('127.0.0.1', srv.port), timeout=60)
    c.sendall(req('POST', '/v1/completions', json.dumps({'prompt': 'Once', 'max_tokens': 1500, 'temperature': 0,
                                                         'ignore_eos': True, 'stream': True})))
    got = b''
    while b'data: ' not in got:   # it runs
        more = c.recv(4096)
        assert more, got
        got += more
    c.sendall(req('GET', '/healthz', close=True))
    got += recv_all(c)
    c.close()
    assert got.count(b'HTTP/1.1') == 1 and b'[DONE]' not in got, got[-400:]
    st, _, o = srv.post('/v1/completions', {'prompt': 'The cat', 'max_tokens': 4, 'temperature': 0})
    assert st == 200 and o['usage']['completion_tokens'] == 4, o
    rows = srv.ledger_settled(n_rows + 9)[n_rows + 7:]   # after the resets and the 16-token answer
    assert [x['status'] for x in rows] == ['cancelled', 'completed'], rows
    assert open(srv.err_path).read().count('(pipelining)') == 2
    print('pipelining: two GETs answered in order; a request behind a POST: the POST refused (400) in the same '
          'write, cancelled after %d tokens once running; serving on' % rows[0]['completion_tokens'])
finally:
    rc, err = srv.stop()
assert rc == 0, err
print('ok')
