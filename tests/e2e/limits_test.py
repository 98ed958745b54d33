#!/usr/bin/env python3
# limits_test.py — the refusals of `ember serve` that need their own server:
#  - a full queue: with --parallel 1 --max-queued 1, one request runs, one
#    waits, and the third is answered 503 server_busy with Retry-After (a
#    `rejected` ledger row), while the other two complete;
#  - --host 0.0.0.0 with no API key in the database: refused before
#    anything starts, exit 2, saying how to make a key;
#  - listening on every interface with a key: a client on a non-loopback
#    address of this machine needs the key (401 without, 200 with), a
#    loopback one does not (skipped when the machine has no such address).
import json
import socket
import subprocess
import sys
import tempfile
import os

sys.path.insert(0, __file__.rsplit('/', 1)[0])
from serve_util import EMBER, Server, add_key, shared_model  # noqa: E402

model = shared_model('stories260K.gguf')


def open_stream(port, body):
    """Send a streamed completion on a raw socket; return it after the headers."""
    s = socket.create_connection(('127.0.0.1', port), timeout=120)
    data = json.dumps(body).encode()
    s.sendall(b'POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n'
              b'Content-Length: ' + str(len(data)).encode() + b'\r\n\r\n' + data)
    got = b''
    while b'\r\n\r\n' not in got:
        more = s.recv(4096)
        assert more, got
        got += more
    return s, got


def read_to_done(s, got):
    while b'data: [DONE]' not in got:
        more = s.recv(65536)
        assert more, got[-300:]
        got += more
    s.close()
    return got


# ---- a full queue ----------------------------------------------------------------------
srv = Server(model, '--ctx', '2048', '--parallel', '1', '--max-queued', '1')
try:
    long = {'prompt': 'Once upon a time', 'max_tokens': 1900, 'ignore_eos': True, 'stream': True}
    a, ga = open_stream(srv.port, long)
    while b'"text":"' not in ga.split(b'\r\n\r\n', 1)[1] or ga.split(b'\r\n\r\n', 1)[1].count(b'data: ') < 3:   # a is running
        more = a.recv(4096)
        assert more
        ga += more
    b, gb = open_stream(srv.port, dict(long, max_tokens=8))   # waits for a's slot
    assert gb.startswith(b'HTTP/1.1 200'), gb[:100]
    st, h, body = srv.post('/v1/completions', {'prompt': 'Once', 'max_tokens': 4})
    assert st == 503 and body['error']['code'] == 'server_busy', (st, body)
    assert int(h['retry-after']) >= 1, h
    read_to_done(a, ga)
    read_to_done(b, gb)
    rows = srv.ledger_settled(3)
    assert sorted(r['status'] for r in rows) == ['completed', 'completed', 'rejected'], rows
    assert [r['error'] for r in rows if r['status'] == 'rejected'][0].startswith('503'), rows
    print('queue: the third request was refused with 503 and Retry-After %s' % h['retry-after'])
finally:
    rc, err = srv.stop()
assert rc == 0, err

# ---- listening beyond loopback ---------------------------------------------------------------
d = tempfile.mkdtemp(prefix='ember-limits-')
db = os.path.join(d, 'ember.db')
r = subprocess.run([EMBER, 'serve', '--model', model, '--host', '0.0.0.0', '--port', '0', '--db', db],
                   capture_output=True, text=True, timeout=300)
assert r.returncode == 2 and r.stderr.count('\n') == 1 and 'ember keys add' in r.stderr, (r.returncode, r.stderr)
assert 'listening' not in r.stdout, r.stdout

# a non-loopback address of this machine, if it has one
addrs = []
try:
    out = subprocess.run(['ip', '-o', '-4', 'addr', 'show'], capture_output=True, text=True).stdout
    addrs = [line.split()[3].split('/')[0] for line in out.splitlines() if ' inet ' in line]
except OSError:
    pass
addrs = [a for a in addrs if not a.startswith('127.')]
key = add_key(db, 'lan')
srv = Server(model, '--host', '0.0.0.0', db=db)
try:
    st, h, body = srv.post('/v1/completions', {'prompt': 'Once', 'max_tokens': 2})
    assert st == 200, body   # loopback: no key needed
    if not addrs:
        print('no non-loopback IPv4 address here: the LAN client part is not run')
    else:
        import http.client
        for with_key in (False, True):
            c = http.client.HTTPConnection(addrs[0], srv.port, timeout=120)
            hd = {'Content-Type': 'application/json'}
            if with_key:
                hd['Authorization'] = 'Bearer ' + key
            c.request('POST', '/v1/completions', json.dumps({'prompt': 'Once', 'max_tokens': 2}), hd)
            resp = c.getresponse()
            out = json.loads(resp.read())
            c.close()
            if with_key:
                assert resp.status == 200, out
            else:
                assert resp.status == 401 and out['error']['code'] == 'missing_api_key', out
        print('LAN client from %s: 401 without the key, 200 with it' % addrs[0])
finally:
    rc, err = srv.stop()
assert rc == 0, err
assert key not in err
print('limits: ok')
