#!/usr/bin/env python3
# security_test.py — the LAN attack surface of a real `ember serve`:
#  - the Host header against DNS rebinding: an attacker's name is refused
#    (403 host_not_allowed) over HTTP and for a WebSocket upgrade, even with a
#    "same-origin" Origin; addresses, localhost, the machine's name and
#    allowed_hosts pass;
#  - CORS: a page of an allowed origin may read the answers (its origin
#    echoed, Vary: Origin) and gets its preflight (204 with the methods and
#    headers); the server's own pages and other origins get no CORS header,
#    other origins a 403 for the preflight too;
#  - static files cannot escape the embedded assets: traversal in every
#    spelling is a 404 with nothing of the file system in it;
#  - the headers on every page and answer: a CSP without inline script,
#    nosniff, frame-ancestors none / X-Frame-Options DENY, no-referrer; API
#    answers not cacheable;
#  - keys, with --require-key: `ember keys rotate` on a live server (the old
#    key refused at once, the new one works, the usage stays the key's);
#    wrong keys from one address (a placeholder such as "sk-no-key-required"
#    among them) are limited (429 too_many_auth_failures with Retry-After,
#    over HTTP and WebSocket) while another address is not; no key in the log;
#  - the loopback rule without --require-key: a key the server does not know
#    (what the OpenAI SDKs send for "no key") is no key, over HTTP and
#    WebSocket, and never a wrong key (past the limit, not counted); a revoked
#    key is still a 401, a valid one still that key; one warning in the log;
#  - TLS with a pair from `ember tls-selfsigned`: HTTPS verified against it,
#    TLS 1.1 refused, plain HTTP to the TLS port refused cleanly and the
#    server still serving after it.
import asyncio
import http.client
import json
import os
import re
import socket
import ssl
import subprocess
import sys
import tempfile
import warnings

sys.path.insert(0, __file__.rsplit('/', 1)[0])
from serve_util import EMBER, Server, shared_model  # noqa: E402
import ws_util  # noqa: E402

model = shared_model('stories260K.gguf')


def raw(port, request):
    """Send raw request bytes, return the whole answer (the server closes or answers with a length; a
    101 Switching Protocols: its head)."""
    s = socket.create_connection(('127.0.0.1', port), timeout=60)
    s.sendall(request)
    got = b''
    while True:
        head, sep, body = got.partition(b'\r\n\r\n')
        m = re.search(rb'(?i)content-length: *(\d+)', head)
        if sep and ((m and len(body) >= int(m.group(1))) or head.startswith(b'HTTP/1.1 101')):
            break
        try:
            more = s.recv(65536)
        except ConnectionResetError:
            break
        if not more:
            break
        got += more
    s.close()
    return got


def get(port, path, host):
    return raw(port, b'GET ' + path + b' HTTP/1.1\r\nHost: ' + host + b'\r\nConnection: close\r\n\r\n')


srv = Server(model, '--allowed-hosts', 'ember.lan, box.intranet.example', '--allowed-origins',
             'https://intranet.example:8443', '--require-key', keys=[('alice', ()), ('bob', ())])
try:
    port = str(srv.port).encode()
    # ---- Host ---------------------------------------------------------------------------------------
    for host in (b'evil.example:' + port, b'evil.example', b'127.0.0.1.evil.example:' + port, b'localhost.evil:' + port):
        got = get(srv.port, b'/healthz', host)
        assert got.startswith(b'HTTP/1.1 403'), (host, got[:200])
        err = json.loads(got.partition(b'\r\n\r\n')[2])['error']
        assert err['code'] == 'host_not_allowed' and 'allowed_hosts' in err['message'], err
    # the rebinding page's own "same origin" does not help it
    got = raw(srv.port, b'POST /v1/completions HTTP/1.1\r\nHost: evil.example:' + port + b'\r\nOrigin: '
              b'http://evil.example:' + port + b'\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}')
    assert got.startswith(b'HTTP/1.1 403') and b'host_not_allowed' in got, got[:300]
    me = socket.gethostname().encode()
    for host in (b'127.0.0.1:' + port, b'127.0.0.1', b'localhost:' + port, b'LOCALHOST', b'[::1]:' + port,
                 b'192.168.7.7:' + port, me + b':' + port, me + b'.local', b'ember.lan:' + port,
                 b'Box.Intranet.Example'):
        got = get(srv.port, b'/healthz', host)
        assert got.startswith(b'HTTP/1.1 200'), (host, got[:200])

    def upgrade(host):   # a WebSocket upgrade by hand: the client library sets Host itself
        got = raw(srv.port, b'GET /ws HTTP/1.1\r\nHost: ' + host + b'\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n'
                  b'Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n'
                  b'Sec-WebSocket-Protocol: ember.chat.v1\r\n\r\n')
        return got.split(b'\r\n', 1)[0]
    assert upgrade(b'evil.example:' + port) == b'HTTP/1.1 403 Forbidden'
    assert upgrade(b'localhost:' + port).startswith(b'HTTP/1.1 101'), upgrade(b'localhost:' + port)

    # ---- CORS ---------------------------------------------------------------------------------------------
    def with_origin(method, origin, extra=b''):
        got = raw(srv.port, method + b' /v1/models HTTP/1.1\r\nHost: 127.0.0.1:' + port + b'\r\nOrigin: ' + origin +
                  b'\r\nAuthorization: Bearer ' + srv.keys['bob'].encode() + b'\r\n' + extra +
                  b'Connection: close\r\n\r\n')
        head = got.partition(b'\r\n\r\n')[0].decode().lower()
        return head.split(' ', 2)[1], dict(ln.split(': ', 1) for ln in head.split('\r\n')[1:] if ': ' in ln)
    st, hdr = with_origin(b'GET', b'https://intranet.example:8443')
    assert st == '200' and hdr.get('access-control-allow-origin') == 'https://intranet.example:8443', (st, hdr)
    assert hdr.get('vary') == 'origin', hdr
    st, hdr = with_origin(b'OPTIONS', b'https://intranet.example:8443',
                          b'Access-Control-Request-Method: POST\r\nAccess-Control-Request-Headers: authorization, '
                          b'content-type\r\n')
    assert st == '204' and 'post' in hdr.get('access-control-allow-methods', ''), (st, hdr)
    assert 'authorization' in hdr.get('access-control-allow-headers', '') and \
        'content-type' in hdr['access-control-allow-headers'], hdr
    st, hdr = with_origin(b'GET', b'http://127.0.0.1:' + port)   # the server's own page: no CORS needed
    assert st == '200' and 'access-control-allow-origin' not in hdr, (st, hdr)
    for method in (b'GET', b'OPTIONS'):
        st, hdr = with_origin(method, b'https://evil.example')
        assert st == '403' and 'access-control-allow-origin' not in hdr, (method, st, hdr)

    # ---- static files stay inside the embedded assets ----------------------------------------------
    for path in (b'/static/../../../../etc/passwd', b'/static/%2e%2e/%2e%2e/%2e%2e/etc/passwd',
                 b'/static/..%2f..%2f..%2fetc%2fpasswd', b'/static/....//....//etc/passwd',
                 b'/static/%252e%252e/etc/passwd', b'/../../etc/passwd', b'/static/app.js%00.png',
                 b'/static/vendor/../../web.h', b'/static//etc/passwd', b'/static/\\..\\..\\etc\\passwd'):
        got = get(srv.port, path, b'127.0.0.1')
        status = got.split(b' ', 2)[1] if got.startswith(b'HTTP/1.1 ') else got[:40]
        # a NUL in the path: libwebsockets drops the connection before ember sees it
        assert status in (b'404', b'400', b'403') or (got == b'' and b'%00' in path), (path, got[:200])
        assert b'root:' not in got and b'#include' not in got, (path, got[:200])
    assert get(srv.port, b'/healthz', b'127.0.0.1').startswith(b'HTTP/1.1 200')

    # ---- headers on every response --------------------------------------------------------------------
    for path in (b'/', b'/dashboard', b'/static/app.js', b'/v1/models', b'/healthz', b'/no/such/page'):
        got = get(srv.port, path, b'127.0.0.1')
        head = got.partition(b'\r\n\r\n')[0].decode().lower()
        hdr = dict(ln.split(': ', 1) for ln in head.split('\r\n')[1:] if ': ' in ln)
        csp = hdr.get('content-security-policy', '')
        script = re.search(r"script-src ([^;]*)", csp)
        assert script and script.group(1).strip() == "'self'", (path, csp)   # no inline script, no eval
        assert "frame-ancestors 'none'" in csp and "object-src 'none'" in csp, (path, csp)
        assert hdr.get('x-content-type-options') == 'nosniff' and hdr.get('x-frame-options') == 'deny', (path, hdr)
        assert hdr.get('referrer-policy') == 'no-referrer', (path, hdr)
        if not path.startswith(b'/static') and path not in (b'/', b'/dashboard'):
            assert hdr.get('cache-control') == 'no-store', (path, hdr)   # answers are never cached
    st, h, _ = srv.request('POST', '/v1/completions', {'prompt': 'Once', 'max_tokens': 2},
                           headers={'Authorization': 'Bearer ' + srv.keys['alice']})
    assert st == 200 and h['cache-control'] == 'no-store' and 'content-security-policy' in h, h

    # ---- keys: rotate on a live server ---------------------------------------------------------------
    def models(key):
        return srv.request('GET', '/v1/models', headers={'Authorization': 'Bearer ' + key})[0]
    old = srv.keys['alice']
    assert models(old) == 200
    r = subprocess.run([EMBER, 'keys', 'rotate', '1', '--db', srv.db], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.startswith('em_') and 'only time' in r.stderr, r
    new = r.stdout.strip()
    assert models(old) == 401 and models(new) == 200
    st, _, body = srv.post('/v1/completions', {'prompt': 'Once', 'max_tokens': 2},
                           headers={'Authorization': 'Bearer ' + new})
    assert st == 200, body
    rows = srv.ledger_settled(2)
    assert [x['key_id'] for x in rows] == [1, 1], rows   # before and after the rotation: one key, one usage
    srv.keys['alice'] = new

    # ---- wrong keys from one address are limited ---------------------------------------------------------
    wrong = 'em_' + 'A' * 43
    codes = [models(k) for k in ['sk-no-key-required', 'x'] + [wrong] * 7]   # the old key was already counted
    assert codes == [401] * 9, codes
    st, h, body = srv.request('GET', '/v1/models', headers={'Authorization': 'Bearer ' + wrong})
    err = json.loads(body)['error']
    assert st == 429 and err['code'] == 'too_many_auth_failures' and 1 <= int(h['retry-after']) <= 60, (st, h, err)
    assert models(srv.keys['bob']) == 429   # while it lasts, no key from that address is even checked

    async def ws_auth(key):
        ws = await ws_util.open_ws(srv)
        await ws_util.recv(ws)   # ready (loopback) or auth_required
        await ws_util.send(ws, type='auth', key=key)
        got = await ws_util.recv(ws)
        await ws.close()
        return got
    f = asyncio.run(ws_auth(wrong))
    assert f['type'] == 'error' and f['code'] == 'too_many_auth_failures', f
    # another address is not limited: 127.0.0.2 is loopback too, and another client address
    c = http.client.HTTPConnection('127.0.0.1', srv.port, timeout=60, source_address=('127.0.0.2', 0))
    c.request('GET', '/v1/models', headers={'Authorization': 'Bearer ' + srv.keys['bob']})
    assert c.getresponse().status == 200
    c.close()

    # ---- the log holds no key -----------------------------------------------------------------------------
    log = open(srv.err_path).read()
    assert 'wrong API keys in' in log, log[-2000:]
    for k in (old, new, wrong, srv.keys['bob']):
        assert k[3:] not in log, 'a key is in the log'
    assert 'sk-no-key-required' not in log and 'does not know came from loopback' not in log, log[-2000:]
finally:
    rc, err = srv.stop()
assert rc == 0, err
print('security: foreign Host refused (HTTP and WebSocket), traversal 404, headers on every response, '
      'rotate on a live server, wrong keys limited per address, no key in the log')

# ---- the loopback rule without --require-key: a key the server does not know is no key -----------------
srv = Server(model, keys=[('alice', ()), ('gone', ())])
try:
    subprocess.run([EMBER, 'keys', 'revoke', '2', '--db', srv.db], capture_output=True, check=True, timeout=60)

    def complete(key):
        st, _, body = srv.post('/v1/completions', {'prompt': 'Once', 'max_tokens': 2},
                               headers={'Authorization': 'Bearer ' + key})
        return st, body
    unknown = ['sk-no-key-required', 'x', 'em_' + 'A' * 43]
    for k in unknown * 4:   # 12: past the wrong-key limit (10), were they counted
        st, body = complete(k)
        assert st == 200 and body['choices'][0]['text'], (k, st, body)
    assert complete(srv.keys['alice'])[0] == 200
    st, body = complete(srv.keys['gone'])   # a 401, not the limit's 429: the unknown ones were not counted
    assert st == 401 and body['error']['code'] == 'invalid_api_key' and 'revoked' in body['error']['message'], body
    rows = srv.ledger_settled(14)
    assert [r['key_id'] for r in rows[:13]] == [None] * 12 + [1], rows
    assert rows[13]['status'] == 'rejected', rows

    async def ws_keys():
        ws = await ws_util.open_ws(srv)
        first = await ws_util.recv(ws)
        assert first['type'] == 'ready' and first['key'] is None, first   # loopback: ready at once
        for k, name in (('sk-no-key-required', None), (srv.keys['alice'], 'alice'), ('x', None)):
            await ws_util.send(ws, type='auth', key=k)
            r = await ws_util.recv(ws)
            assert r['type'] == 'ready' and r['key'] == name, (k, r)
        await ws_util.send(ws, type='auth', key=srv.keys['gone'])
        e = await ws_util.recv(ws)
        assert e['type'] == 'error' and e['code'] == 'invalid_api_key' and 'revoked' in e['message'], e
        await ws.close()
    asyncio.run(ws_keys())
    log = open(srv.err_path).read()
    assert log.count('an API key this server does not know came from loopback: accepted as no key') == 1, \
        log[-3000:]
    for k in ('sk-no-key-required', 'A' * 43, srv.keys['alice'][3:], srv.keys['gone'][3:]):
        assert k not in log, 'a key is in the log'
finally:
    rc, err = srv.stop()
assert rc == 0, err
print('security: loopback without --require-key: unknown keys as no key (HTTP, WebSocket; not counted), '
      'a revoked key 401, a valid one its own, one warning')

# ---- TLS with ember tls-selfsigned ----------------------------------------------------------------------
tmp = tempfile.mkdtemp(prefix='ember-tls-')
cert, key = os.path.join(tmp, 'c.pem'), os.path.join(tmp, 'k.pem')
r = subprocess.run([EMBER, 'tls-selfsigned', '--cert', cert, '--key', key, '--name', 'ember.lan', '--days', '30'],
                   capture_output=True, text=True, timeout=120)
assert r.returncode == 0 and os.stat(key).st_mode & 0o777 == 0o600, r
r2 = subprocess.run([EMBER, 'tls-selfsigned', '--cert', cert, '--key', key], capture_output=True, text=True)
assert r2.returncode == 1 and 'exists' in r2.stderr, r2   # kept without --force
srv = Server(model, '--tls-cert', cert, '--tls-key', key)
try:
    ctx = ssl.create_default_context(cafile=cert)   # verified: the name 127.0.0.1 is in the certificate

    def https_healthz():
        c = http.client.HTTPSConnection('127.0.0.1', srv.port, timeout=60, context=ctx)
        c.request('GET', '/healthz')
        resp = c.getresponse()
        st, proto = resp.status, c.sock.version()
        resp.read()
        c.close()
        return st, proto
    st, proto = https_healthz()
    assert st == 200 and proto in ('TLSv1.2', 'TLSv1.3'), (st, proto)
    old_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    old_ctx.check_hostname = False
    old_ctx.verify_mode = ssl.CERT_NONE
    tls11 = 'refused'
    warnings.simplefilter('ignore', DeprecationWarning)
    try:
        old_ctx.set_ciphers('DEFAULT:@SECLEVEL=0')
        old_ctx.minimum_version = ssl.TLSVersion.TLSv1
        old_ctx.maximum_version = ssl.TLSVersion.TLSv1_1
        s = old_ctx.wrap_socket(socket.create_connection(('127.0.0.1', srv.port), timeout=60))
        s.close()
        raise AssertionError('a TLS 1.1 handshake succeeded')
    except (ssl.SSLError, ConnectionError, ValueError) as e:
        if 'no protocols available' in str(e).lower():
            tls11 = 'not offered by this client'   # its OpenSSL cannot speak 1.1 at all

    got = raw(srv.port, b'GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n')   # plain HTTP on the TLS port
    assert not got.startswith(b'HTTP/1.1 200'), got[:100]
    assert https_healthz()[0] == 200   # and it still serves
finally:
    rc, err = srv.stop()
assert rc == 0, err
print('security: TLS with an ember tls-selfsigned pair (%s), TLS 1.1 %s, plain HTTP refused' % (proto, tls11))
print('security: ok')
