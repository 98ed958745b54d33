#!/usr/bin/env python3
# proxy_test.py — a real `ember serve` behind a real HAProxy (Debian's, in
# the foreground, `option forwardfor`), clients on distinct loopback
# addresses (127.0.0.2, .3, .4: Linux routes all of 127/8 to lo):
#  - with --trusted-proxies 127.0.0.1 the wrong-key limit counts each client
#    behind the proxy, not the proxy: after client .2 is refused (a revoked
#    key: one the server does not know is no key from loopback) with 429
#    too_many_auth_failures, client .3 still gets its answers (without
#    trusted proxies the two were one address and .3 was locked out too);
#  - a client cannot choose its address: .2 sending its own
#    X-Forwarded-For naming .3 is still .2 (429), and .3 naming .2 is still
#    .3 (answered); the ledger rows name .2 and .3, not the proxy;
#  - the loopback rule follows the client: a request the trusted proxy
#    forwards for a LAN address (192.0.2.50) needs a key over HTTP and over
#    the WebSocket (auth_required), and its row names 192.0.2.50, and a key
#    the server does not know is a 401 for it; a client on this box through
#    the proxy (.4) needs none, and such a key is no key for it;
#  - X-Forwarded-For from a peer that is not trusted is ignored: a request
#    straight from .3 naming 192.0.2.60 is .3's in the ledger;
#  - with no trusted proxies, a request through HAProxy (which says it was
#    forwarded) is not treated as local: 401 without a key, while the same
#    client straight to ember needs none; its row names the proxy's address;
#  - a bad --trusted-proxies entry stops ember before it serves, naming it.
import asyncio
import http.client
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, __file__.rsplit('/', 1)[0])
from serve_util import EMBER, Server, free_port, shared_model, skip  # noqa: E402
import ws_util  # noqa: E402

HAPROXY = shutil.which('haproxy') or ('/usr/sbin/haproxy' if os.path.exists('/usr/sbin/haproxy') else None)
if not HAPROXY:
    skip('haproxy is absent (scripts/setup.sh installs it)')
model = shared_model('stories260K.gguf')
WRONG_MAX = 10   # web/auth.c AUTH_FAIL_MAX



class Proxy:
    """HAProxy on 127.0.0.1 in front of one ember."""

    def __init__(self, backend_port):
        self.dir = tempfile.mkdtemp(prefix='ember-proxy-')
        self.port = free_port()
        cfg = os.path.join(self.dir, 'haproxy.cfg')
        with open(cfg, 'w') as f:
            f.write('global\n    maxconn 256\n\ndefaults\n    mode http\n    option forwardfor\n'
                    '    timeout connect 5s\n    timeout client 120s\n    timeout server 600s\n'
                    '    timeout tunnel 1h\n\nfrontend ember\n    bind 127.0.0.1:%d\n    default_backend box\n\n'
                    'backend box\n    server box1 127.0.0.1:%d\n' % (self.port, backend_port))
        subprocess.run([HAPROXY, '-c', '-f', cfg], check=True, capture_output=True)
        self.err = open(os.path.join(self.dir, 'haproxy.err'), 'w')
        self.p = subprocess.Popen([HAPROXY, '-db', '-f', cfg], stdout=self.err, stderr=subprocess.STDOUT)
        for _ in range(100):   # bounded: until it accepts
            try:
                socket.create_connection(('127.0.0.1', self.port), timeout=5).close()
                return
            except OSError:
                time.sleep(0.1)
        raise AssertionError('HAProxy did not start: ' + open(os.path.join(self.dir, 'haproxy.err')).read())

    def stop(self):
        self.p.terminate()
        self.p.wait(timeout=30)
        shutil.rmtree(self.dir, ignore_errors=True)


def chat(port, source, key=None, xff=None):
    """A chat completion to 127.0.0.1:port from source: (status, body json)."""
    c = http.client.HTTPConnection('127.0.0.1', port, timeout=600, source_address=(source, 0))
    h = {'Content-Type': 'application/json'}
    if key:
        h['Authorization'] = 'Bearer ' + key
    if xff:
        h['X-Forwarded-For'] = xff
    c.request('POST', '/v1/chat/completions', body=json.dumps(
        {'messages': [{'role': 'user', 'content': 'Once'}], 'max_tokens': 3, 'temperature': 0}), headers=h)
    r = c.getresponse()
    body = r.read()
    c.close()
    return r.status, json.loads(body)


def rows_by_addr(srv, n):
    srv.ledger_settled(n)
    rows = srv.ledger('SELECT client_addr, status, error FROM requests ORDER BY received_ms, rowid')
    out = {}
    for r in rows:
        out.setdefault(r['client_addr'], []).append(r['status'])
    return rows, out


# ---- a bad list stops ember before it serves ----
r = subprocess.run([EMBER, 'serve', '--model', model, '--port', '0', '--db', os.path.join(tempfile.mkdtemp(), 'x.db'),
                    '--trusted-proxies', '127.0.0.1, 10.0.0.0/40'], capture_output=True, text=True, timeout=600)
assert r.returncode != 0 and "trusted_proxies: '10.0.0.0/40' is not an IP address" in r.stderr, (r.returncode, r.stderr)

# ---- trusted: 127.0.0.1 (HAProxy) ----
srv = Server(model, '--trusted-proxies', '127.0.0.1', keys=[('alice', []), ('gone', [])])
key = srv.keys['alice']
subprocess.run([EMBER, 'keys', 'revoke', '2', '--db', srv.db], capture_output=True, check=True, timeout=60)
hp = Proxy(srv.port)
try:
    n = 0
    for i in range(WRONG_MAX):   # from loopback only a key the server knows can be wrong
        st, body = chat(hp.port, '127.0.0.2', key=srv.keys['gone'])
        n += 1
        assert st == 401, (st, body)
    st, body = chat(hp.port, '127.0.0.2', key=key)
    n += 1
    assert st == 429 and body['error']['code'] == 'too_many_auth_failures', (st, body)
    # another client behind the same proxy is not held up
    st, body = chat(hp.port, '127.0.0.3', key=key)
    n += 1
    assert st == 200 and body['choices'][0]['message']['content'], (st, body)
    # a client's own header does not choose its address (HAProxy appends the real one)
    st, body = chat(hp.port, '127.0.0.2', key=key, xff='127.0.0.3')
    n += 1
    assert st == 429 and body['error']['code'] == 'too_many_auth_failures', (st, body)
    st, body = chat(hp.port, '127.0.0.3', key=key, xff='127.0.0.2')
    n += 1
    assert st == 200, (st, body)
    # a client on this box through the proxy is local: no key needed
    st, body = chat(hp.port, '127.0.0.4')
    n += 1
    assert st == 200, (st, body)
    st, body = chat(hp.port, '127.0.0.4', key='sk-no-key-required')   # unknown: as no key, on loopback
    n += 1
    assert st == 200, (st, body)
    # a LAN client behind the proxy (the proxy's header, sent straight from 127.0.0.1) needs a key
    st, body = chat(srv.port, '127.0.0.1', xff='192.0.2.50')
    n += 1
    assert st == 401, (st, body)
    st, body = chat(srv.port, '127.0.0.1', key='sk-no-key-required', xff='192.0.2.50')
    n += 1
    assert st == 401 and body['error']['code'] == 'invalid_api_key', (st, body)
    st, body = chat(srv.port, '127.0.0.1', key=key, xff='192.0.2.50')
    n += 1
    assert st == 200, (st, body)
    # an untrusted peer's header is ignored
    st, body = chat(srv.port, '127.0.0.3', key=key, xff='192.0.2.60')
    n += 1
    assert st == 200, (st, body)

    async def ws_checks():
        # over the WebSocket: the upgrade's header names the client
        ws = await ws_util.open_ws(srv, extra_headers={'X-Forwarded-For': '192.0.2.50'})
        first = await ws_util.recv(ws)
        assert first['type'] == 'auth_required', first
        await ws.close()
        # and a local client through the real proxy is ready at once
        ws = await ws_util.websockets.connect('ws://127.0.0.1:%d/ws' % hp.port, subprotocols=['ember.chat.v1'],
                                              open_timeout=ws_util.T, close_timeout=30, ping_interval=None)
        first = await ws_util.recv(ws)
        assert first['type'] == 'ready', first
        await ws.close()
    asyncio.run(ws_checks())

    rows, by = rows_by_addr(srv, n)
    assert by.get('127.0.0.2') == ['rejected'] * (WRONG_MAX + 2), (by, rows)
    assert by.get('127.0.0.3') == ['completed', 'completed', 'completed'], (by, rows)
    assert by.get('127.0.0.4') == ['completed', 'completed'], (by, rows)
    assert by.get('192.0.2.50') == ['rejected', 'rejected', 'completed'], (by, rows)
    assert '127.0.0.1' not in by and '192.0.2.60' not in by, (by, rows)
    log = open(srv.err_path).read()
    assert '127.0.0.2' in log and key not in log and srv.keys['gone'] not in log, log[-3000:]
    assert log.count('does not know came from loopback') == 1, log[-3000:]
finally:
    hp.stop()
    srv.stop()

# ---- no trusted proxies: a forwarded request is not local ----
srv = Server(model)
hp = Proxy(srv.port)
try:
    st, body = chat(hp.port, '127.0.0.2')
    assert st == 401, (st, body)
    st, body = chat(srv.port, '127.0.0.2')
    assert st == 200, (st, body)
    rows, by = rows_by_addr(srv, 2)
    assert by == {'127.0.0.1': ['rejected'], '127.0.0.2': ['completed']}, (by, rows)
finally:
    hp.stop()
    srv.stop()
print('proxy: wrong keys counted per client behind HAProxy (%d then 429 for .2 only), forged headers ignored, '
      'the loopback rule follows the client, rows name the clients' % WRONG_MAX)
