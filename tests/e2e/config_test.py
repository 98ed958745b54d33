#!/usr/bin/env python3
# config_test.py — `ember serve --config FILE` on a real server
# (stories260K):
#  - every error path of the file: an unknown section or key, bad values
#    (integer, range, choice, boolean), a duplicate key or section, a line
#    that is not `key = value`, a key before any section, a missing file;
#    each is one stderr line naming FILE:LINE, exit 2, and nothing started
#    (no "listening", the database the file names never created); a bad
#    flag likewise;
#  - --print-config: every key, with its source (default, file PATH:LINE,
#    flag --port); the sample firmware/ember.conf sets every key;
#  - a file's values take effect (port, context and parallel in /healthz and
#    /v1/models, kv_type, max_body, require_key, max_queued_interactive,
#    JSON logs) and flags override them;
#  - allowed origins: another site's Origin gets 403 origin_not_allowed over
#    HTTP and on a WebSocket upgrade; the server's own, a listed one and none
#    pass;
#  - the log: plain and JSON lines parsed (UTC ms time, level, request id),
#    one line per request with the response's id, no prompt or output text
#    unless log_content = true;
#  - SIGHUP: origins, trusted_proxies, require_key, rate_limit and log_level reloaded, a
#    restart-only key (port) named in the log, a bad file logged and the
#    running configuration kept;
#  - retention_days: a conversation older than it removed at start;
#  - TLS: HTTPS and WSS with a self-signed certificate made by openssl req,
#    tls_cert without tls_key (or a missing file) refused before start.
import asyncio
import http.client
import json
import os
import re
import signal
import socket
import sqlite3
import ssl
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, __file__.rsplit('/', 1)[0])
from serve_util import EMBER, Server, free_port, add_key, shared_model  # noqa: E402

model = shared_model('stories260K.gguf')
SRC = os.path.dirname(os.path.abspath(__file__)) + '/../..'
TIME = r'\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z'
PLAIN = re.compile(r'^(' + TIME + r') (error|warn|info|debug) (?:\[([A-Za-z0-9_-]+)\] )?(.*)$')
try:
    import websockets
except ImportError:
    websockets = None
SECRET = 'zebraquokka'   # a prompt word no log line may hold unless log_content
tmp = tempfile.mkdtemp(prefix='ember-config-')


def write(name, text):
    p = os.path.join(tmp, name)
    with open(p, 'w') as f:
        f.write(text)
    return p



class Serve(Server):
    """`ember serve ARGS...` as given (no --port/--db added); requests answer parsed JSON."""

    def __init__(self, *args):
        Server.__init__(self, None, argv=args)

    def err(self):
        self.errf.flush()
        with open(self.err_path) as f:
            return f.read()

    def request(self, method, path, body=None, headers=None):
        st, h, out = Server.request(self, method, path, body, headers)
        return st, h, json.loads(out) if h.get('content-type', '').startswith('application/json') else out

    def wait_log(self, text, count=1):
        """Wait (bounded) until the log holds text count times."""
        for _ in range(300):
            if self.err().count(text) >= count:
                return self.err()
            time.sleep(0.05)
        raise AssertionError('%r not logged %d times: %s' % (text, count, self.err()))


def run(*args):
    return subprocess.run([EMBER, 'serve'] + list(args), capture_output=True, text=True, timeout=300)


def complete(srv, prompt, key=None, **kw):
    body = {'prompt': prompt, 'max_tokens': 4, 'temperature': 0}
    body.update(kw)
    return srv.request('POST', '/v1/completions', body, {'Authorization': 'Bearer ' + key} if key else None)


# ---- every error path: FILE:LINE, exit 2, nothing started -------------------------------------
bad_db = os.path.join(tmp, 'never.db')
cases = [
    ('[server]\nport = 8080\n[serverz]\nport = 1\n', 3, 'unknown section [serverz]'),
    ('[server]\nprot = 8080\n', 2, 'unknown key prot in [server]'),
    ('[server]\n\ncontext = 128\n', 3, 'unknown key context in [server] (it belongs in [model])'),
    ('[server]\nport = eighty\n', 2, "[server] port: 'eighty' is not an integer"),
    ('[server]\nport = 70000\n', 2, '[server] port: 70000 is out of range [0, 65535]'),
    ('[server]\nping_s = fast\n', 2, "[server] ping_s: 'fast' is not a number"),
    ('[model]\nkv_type = q4_0\n', 2, "[model] kv_type: 'q4_0' is not one of f16|q8_0"),
    ('[auth]\nrequire_key = maybe\n', 2, "[auth] require_key: 'maybe' is not true or false"),
    ('[log]\nlog_level = loud\n', 2, "[log] log_level: 'loud' is not one of error|warn|info|debug"),
    ('[server]\nport = 1\n; a comment\nport = 2\n', 4, 'duplicate key port in [server] (first at line 2)'),
    ('[log]\n[server]\n[log]\n', 3, 'section [log] appears twice (first at line 1)'),
    ('[server]\nport 8080\n', 2, 'not a `key = value` line'),
    ('port = 8080\n', 1, 'port before any [section] (it belongs in [server])'),
    ('[server]\nport = 1\n  host = x\n', 3, 'continuation lines are not supported'),
]
for i, (text, line, why) in enumerate(cases):
    p = write('bad%d.conf' % i, text + '[storage]\ndb = %s\n' % bad_db)
    r = run('--config', p, '--model', model)
    where = '%s:%d: ' % (p, line)
    assert r.returncode == 2, (text, r.returncode, r.stderr)
    assert r.stderr.count('\n') == 1 and r.stderr.startswith('ember: serve: ' + where) and why in r.stderr, \
        (text, where, why, r.stderr)
    assert r.stdout == '', r.stdout
    assert not os.path.exists(bad_db), 'a bad file opened the database'
r = run('--config', os.path.join(tmp, 'absent.conf'))
assert r.returncode == 2 and r.stderr.count('\n') == 1 and 'absent.conf: No such file' in r.stderr, r.stderr
for flag, val, why in [('--port', 'x', "'x' is not an integer"), ('--log-format', 'xml', 'not one of plain|json'),
                       ('--ctx', '8', 'out of range'), ('--max-queued', '0', 'out of range')]:
    r = run('--db', bad_db, flag, val)
    assert r.returncode == 2 and r.stderr.count('\n') == 1 and r.stderr.startswith('ember: serve: %s: ' % flag) \
        and why in r.stderr, (flag, r.stderr)
assert not os.path.exists(bad_db)
print('config: %d bad files and 4 bad flags: FILE:LINE or the flag named, exit 2, nothing opened' % len(cases))

# ---- --print-config: every key and where it came from ------------------------------------------
conf = write('print.conf', '; for --print-config\n[server]\nport = 9\nhost = 127.0.0.1\n\n[model]\ncontext = 128\n'
                           '[storage]\ndb = %s\n' % bad_db)
r = run('--config', conf, '--port', '0', '--max-queued', '7', '-v', '--print-config')
assert r.returncode == 0 and r.stderr == '', (r.returncode, r.stderr)
got = {}
for line in r.stdout.splitlines():
    m = re.match(r'^(\w+) = (.*?)\s*; (.*)$', line)
    if m:
        got[m.group(1)] = (m.group(2), m.group(3))
assert got['port'] == ('0', 'flag --port'), got['port']
assert got['host'] == ('127.0.0.1', 'file %s:4' % conf), got['host']
assert got['context'] == ('128', 'file %s:7' % conf), got['context']
assert got['db'] == (bad_db, 'file %s:9' % conf), got['db']
assert got['max_queued_interactive'] == ('7', 'flag --max-queued') == got['max_queued_background'], got
assert got['log_level'] == ('debug', 'flag --verbose'), got['log_level']
assert got['drain_s'] == ('30', 'default') and got['kv_type'] == ('f16', 'default'), got
assert not os.path.exists(bad_db), 'printing the configuration opened the database'
sample = os.path.join(SRC, 'firmware', 'ember.conf')
r = run('--config', sample, '--print-config')
assert r.returncode == 0, r.stderr
keys = [x for x in r.stdout.splitlines() if re.match(r'^\w+ = ', x)]
assert len(keys) == len(got) and all('; file %s:' % sample in x for x in keys), r.stdout
print('config: --print-config gives all %d keys with their sources; the sample sets every one' % len(keys))

# ---- a file's values take effect; flags override them -------------------------------------------
db = os.path.join(tmp, 'ember.db')
key = add_key(db, 'alice')
port = free_port()
conf = write('serve.conf', '[model]\npath = %s\ncontext = 128\nkv_type = f16\n[server]\nport = %d\n'
                           'max_body = 2048\n[scheduler]\nparallel = 3\nmax_queued_interactive = 1\n'
                           '[auth]\nrequire_key = true\n[storage]\ndb = %s\n[log]\nlog_format = json\n'
                           % (model, port, db))
srv = Serve('--config', conf)
try:
    assert srv.port == port, (srv.port, port)
    st, h, hz = srv.request('GET', '/healthz')
    assert st == 200 and hz['context'] == 128 and hz['parallel'] == 3, hz
    st, h, body = srv.request('GET', '/v1/models')
    assert st == 401 and body['error']['code'] == 'missing_api_key', body   # require_key from loopback
    st, h, body = srv.request('GET', '/v1/models', headers={'Authorization': 'Bearer ' + key})
    assert st == 200 and body['data'][0]['id'] == 'stories260K', body
    st, h, body = complete(srv, 'x' * 3000, key)
    assert st == 413 and body['error']['code'] == 'request_too_large' and '2048 bytes' in body['error']['message'], body
    st, h, body = complete(srv, 'Once upon a time ' + SECRET, key)
    assert st == 200, body
    rid = body['id']
    err = srv.wait_log(rid)
    start = [json.loads(x)['msg'] for x in err.splitlines() if 'KV cache' in x]
    assert len(start) == 1 and re.search(r'context 128, 3 sequences at once, KV cache 24 blocks \(0 MiB, f16\)',
                                         start[0]), start
    lines = [json.loads(x) for x in err.splitlines()]   # every line is JSON
    for x in lines:
        assert re.fullmatch(TIME, x['time']) and x['level'] in ('error', 'warn', 'info', 'debug'), x
        assert set(x) <= {'time', 'level', 'request_id', 'msg'}, x
    mine = [x for x in lines if x.get('request_id') == rid]
    assert len(mine) == 1 and mine[0]['level'] == 'info' and 'completed' in mine[0]['msg'] \
        and '4 completion tokens' in mine[0]['msg'], mine
    assert any('401' in x['msg'] and x['level'] == 'warn' for x in lines), lines
    assert SECRET not in err and 'prompt: ' not in err and 'output 0: ' not in err, 'text in the log'
finally:
    rc, err = srv.stop()
assert rc == 0, err
srv = Serve('--config', conf, '--port', '0', '--ctx', '256', '--parallel', '1', '--log-format', 'plain')
try:
    assert srv.port != port
    st, h, hz = srv.request('GET', '/healthz')
    assert hz['context'] == 256 and hz['parallel'] == 1, hz   # flags over the file
    for x in srv.err().splitlines():
        assert PLAIN.match(x), x
finally:
    rc, err = srv.stop()
assert rc == 0, err
r = run('--model', model, '--db', os.path.join(tmp, 'dev.db'), '--port', '0', '--device', '99')
assert r.returncode == 2 and 'vulkan: device 99: no such device' in r.stderr, (r.returncode, r.stderr)
print('config: port, context, kv_type, max_body, parallel, require_key and JSON logs from the file; --port, --ctx, --parallel, '
      '--log-format over it')

# ---- max_queued_interactive = 1 from the file: a queue that holds one -----------------------------


def stream(srv, n):
    c = http.client.HTTPConnection('127.0.0.1', srv.port, timeout=600)
    c.request('POST', '/v1/completions', body=json.dumps({
        'prompt': 'Once', 'max_tokens': n, 'ignore_eos': True, 'temperature': 0, 'stream': True}),
        headers={'Content-Type': 'application/json', 'Authorization': 'Bearer ' + key})
    r = c.getresponse()
    assert r.status == 200, r.status
    assert r.readline().startswith(b'data: ')
    return c, r


srv = Serve('--config', conf, '--port', '0', '--parallel', '1', '--ctx', '256')
try:
    a = stream(srv, 200)               # runs
    ca = http.client.HTTPConnection('127.0.0.1', srv.port, timeout=600)
    ca.request('POST', '/v1/completions', body=json.dumps({'prompt': 'Once', 'max_tokens': 2}),
               headers={'Content-Type': 'application/json', 'Authorization': 'Bearer ' + key})   # waits
    for _ in range(200):
        st, h, hz = srv.request('GET', '/healthz')
        if hz['requests']['queued']['interactive'] == 1:
            break
        time.sleep(0.05)
    assert hz['requests']['queued']['interactive'] == 1, hz
    st, h, body = complete(srv, 'Once', key)
    assert st == 503 and body['error']['code'] == 'server_busy' and int(h['retry-after']) >= 1, (st, body)
    a[0].close()
    assert ca.getresponse().status == 200
    ca.close()
finally:
    rc, err = srv.stop()
assert rc == 0, err
print('config: max_queued_interactive = 1: the second waiting request got 503 server_busy')

# ---- allowed origins, the log in plain text with content, SIGHUP ---------------------------------
conf = write('live.conf', '[server]\nport = 0\nallowed_origins = http://good.example, https://also.example:8443\n'
                          '[log]\nlog_level = info\n')
srv = Serve('--config', conf, '--model', model, '--db', db)
try:
    own = 'http://127.0.0.1:%d' % srv.port

    def origin(o):
        return srv.request('GET', '/v1/models', headers={'Origin': o} if o else None)

    for o in (None, own, 'http://good.example', 'https://also.example:8443'):
        assert origin(o)[0] == 200, o
    for o in ('http://evil.example', 'null', 'http://127.0.0.1:1', 'https://good.example'):
        st, h, body = origin(o)
        assert st == 403 and body['error']['code'] == 'origin_not_allowed' and o in body['error']['message'], \
            (o, st, body)
    st, h, body = srv.request('POST', '/v1/completions', {'prompt': 'Once', 'max_tokens': 2},
                              {'Origin': 'http://evil.example'})
    assert st == 403 and body['error']['code'] == 'origin_not_allowed', body

    def upgrade(o):
        """A WebSocket upgrade with Origin o over a raw socket: the status line and body."""
        s = socket.create_connection(('127.0.0.1', srv.port), timeout=60)
        s.sendall(('GET /ws HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n'
                   'Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n'
                   'Sec-WebSocket-Protocol: ember.chat.v1\r\nOrigin: %s\r\n\r\n' % (srv.port, o)).encode())
        got = b''
        for _ in range(100):
            more = s.recv(4096)
            if not more:
                break
            got += more
            if b'\r\n\r\n' in got and (got.startswith(b'HTTP/1.1 101') or got.endswith(b'}')):
                break
        s.close()
        head, _, body = got.partition(b'\r\n\r\n')
        return head.split(b'\r\n')[0], body

    status, body = upgrade('http://evil.example')
    assert status == b'HTTP/1.1 403 Forbidden' and json.loads(body)['error']['code'] == 'origin_not_allowed', \
        (status, body)
    assert upgrade('http://good.example')[0] == b'HTTP/1.1 101 Switching Protocols'
    assert upgrade(own)[0] == b'HTTP/1.1 101 Switching Protocols'
    if websockets:
        async def ws(o):
            async with websockets.connect('ws://127.0.0.1:%d/ws' % srv.port, subprotocols=['ember.chat.v1'],
                                          origin=o, open_timeout=300, ping_interval=None) as w:
                return json.loads(await asyncio.wait_for(w.recv(), 300))['type']
        assert asyncio.run(ws('http://good.example')) == 'ready'
        try:
            asyncio.run(ws('http://evil.example'))
            raise AssertionError('the upgrade went through')
        except websockets.exceptions.InvalidStatusCode as e:
            assert e.status_code == 403, e
    st, h, body = complete(srv, 'Once upon a time ' + SECRET)
    assert st == 200
    rid = body['id']
    err = srv.wait_log(rid)
    for x in err.splitlines():
        assert PLAIN.match(x), x
    mine = [PLAIN.match(x) for x in err.splitlines() if PLAIN.match(x).group(3) == rid]
    assert len(mine) == 1 and mine[0].group(2) == 'info' and 'completed' in mine[0].group(4), mine
    assert SECRET not in err, 'the prompt reached the log'
    assert 'WebSocket refused: 403' in err and 'GET /v1/models: 403 Origin http://evil.example' in err, err
    print('config: origins — own, listed and none pass; others 403 over HTTP and WebSocket; plain log lines')

    # SIGHUP: new origins, require_key, rate_limit, debug with content; the port needs a restart
    st, h, body = srv.request('GET', '/v1/models', headers={'Authorization': 'Bearer em_wrong',
                                                            'X-Forwarded-For': '192.0.2.9'})
    assert st == 401 and '127.0.0.1 GET /v1/models: 401' in srv.err(), (st, body)   # no proxy trusted yet
    write('live.conf', '[server]\nport = 8080\nallowed_origins = http://better.example\n'
                       'trusted_proxies = 127.0.0.1\n'
                       '[auth]\nrequire_key = true\nrate_limit = 1\n'
                       '[log]\nlog_level = debug\nlog_content = true\n')
    srv.p.send_signal(signal.SIGHUP)
    err = srv.wait_log('SIGHUP: reloaded')
    assert 'SIGHUP: port changed in the file: needs a restart' in err, err
    assert 'SIGHUP: allowed_origins: http://good.example, https://also.example:8443 -> http://better.example' in err
    assert 'SIGHUP: log_level: info -> debug' in err and 'SIGHUP: require_key: false -> true' in err, err
    assert 'SIGHUP: rate_limit: 0 -> 1' in err, err
    assert 'SIGHUP: trusted_proxies:  -> 127.0.0.1' in err, err
    st, h, body = srv.request('GET', '/v1/models', headers={'Authorization': 'Bearer em_wrong',
                                                            'X-Forwarded-For': '192.0.2.9'})
    assert st == 401 and '192.0.2.9 GET /v1/models: 401' in srv.err(), (st, body)   # the proxy's client now
    assert origin(None)[0] == 401                                  # require_key now
    hk = {'Authorization': 'Bearer ' + key}
    assert srv.request('GET', '/v1/models', headers=dict(hk, Origin='http://good.example'))[0] == 403
    assert srv.request('GET', '/v1/models', headers=dict(hk, Origin='http://better.example'))[0] == 200
    st, h, body = complete(srv, 'Once upon a time ' + SECRET, key)
    assert st == 200, body
    rid2 = body['id']
    st, h, body = complete(srv, 'Once', key)                       # alice has no limit of her own: 1/min
    assert st == 429 and body['error']['code'] == 'rate_limit_exceeded', (st, body)
    err = srv.wait_log(rid2, 2)
    prompt = [x for x in err.splitlines() if '[%s] prompt: ' % rid2 in x]
    assert len(prompt) == 1 and SECRET in prompt[0] and ' debug ' in prompt[0], prompt
    assert any('[%s] output 0: ' % rid2 in x for x in err.splitlines()), err
    print('config: SIGHUP reloaded origins, trusted_proxies, require_key, rate_limit, log_level/log_content; '
          'port named as needing a restart')

    # a bad file on reload: logged, the running configuration kept
    write('live.conf', '[server]\nallowed_origins = http://good.example\nbogus = 1\n')
    srv.p.send_signal(signal.SIGHUP)
    err = srv.wait_log('the running configuration is kept')
    assert re.search(r' error SIGHUP: .*live\.conf:3: unknown key bogus in \[server\]', err), err
    assert srv.request('GET', '/v1/models', headers=dict(hk, Origin='http://better.example'))[0] == 200
    assert srv.request('GET', '/v1/models', headers=dict(hk, Origin='http://good.example'))[0] == 403
    # log_level back to warn: a request's info line no longer written
    write('live.conf', '[server]\nallowed_origins = http://better.example\n[auth]\nrequire_key = true\n'
                       '[log]\nlog_level = warn\n')
    srv.p.send_signal(signal.SIGHUP)
    srv.wait_log('SIGHUP: reloaded', 2)
    assert 'SIGHUP: log_level: debug -> warn' in srv.err() and 'SIGHUP: rate_limit: 1 -> 0' in srv.err()
    n_info = srv.err().count(' info ')
    st, h, body = complete(srv, 'Once', key)
    assert st == 200, body
    rid3 = body['id']
    assert origin(None)[0] == 401
    err = srv.wait_log('GET /v1/models: 401', 2)   # a warn line, written after the request's line would be
    assert rid3 not in err and err.count(' info ') == n_info, err
finally:
    rc, err = srv.stop()
assert rc == 0, err
print('config: a bad file on SIGHUP logged, the running configuration kept; log_level warn applied')

# ---- retention_days and store_content from the file ---------------------------------------------
db2 = os.path.join(tmp, 'retention.db')
add_key(db2, 'carol')   # creates the schema
now = int(time.time() * 1000)
con = sqlite3.connect(db2)
con.execute("INSERT INTO conversations (key_id, title, created_ms, updated_ms) VALUES (NULL, 'old', ?, ?)",
            (now - 10 * 86400000, now - 10 * 86400000))
con.execute("INSERT INTO conversations (key_id, title, created_ms, updated_ms) VALUES (NULL, 'new', ?, ?)",
            (now - 2 * 86400000, now - 2 * 86400000))
con.commit()
con.close()
conf = write('retention.conf', '[server]\nport = 0\n[storage]\ndb = %s\nretention_days = 7\n' % db2)
srv = Serve('--config', conf, '--model', model)
try:
    for _ in range(200):
        con = sqlite3.connect(db2, timeout=30)
        titles = sorted(t for (t,) in con.execute('SELECT title FROM conversations'))
        con.close()
        if titles == ['new']:
            break
        time.sleep(0.05)
    assert titles == ['new'], titles   # 10 days old: gone; 2 days: kept
finally:
    rc, err = srv.stop()
assert rc == 0, err
print('config: retention_days = 7 from the file removed the 10-day-old conversation, kept the 2-day-old one')

# ---- TLS: HTTPS and WSS with a certificate made here ----------------------------------------------
cert, pkey = os.path.join(tmp, 'cert.pem'), os.path.join(tmp, 'key.pem')
r = subprocess.run(['openssl', 'req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', pkey, '-out', cert,
                    '-days', '2', '-subj', '/CN=127.0.0.1', '-addext', 'subjectAltName=IP:127.0.0.1'],
                   capture_output=True, text=True, timeout=120)
assert r.returncode == 0, r.stderr
r = run('--model', model, '--db', bad_db, '--tls-cert', cert)
assert r.returncode == 2 and 'tls_cert and tls_key go together' in r.stderr, r.stderr
r = run('--model', model, '--db', bad_db, '--tls-cert', cert, '--tls-key', os.path.join(tmp, 'nokey.pem'))
assert r.returncode == 2 and r.stderr.startswith('ember: serve: tls_key: ') and 'No such file' in r.stderr, r.stderr
assert not os.path.exists(bad_db)
conf = write('tls.conf', '[server]\nport = 0\ntls_cert = %s\ntls_key = %s\n[storage]\ndb = %s\n' % (cert, pkey, db))
srv = Serve('--config', conf, '--model', model)
try:
    ctx = ssl.create_default_context(cafile=cert)
    c = http.client.HTTPSConnection('127.0.0.1', srv.port, timeout=600, context=ctx)
    c.request('GET', '/healthz')
    r = c.getresponse()
    assert r.status == 200 and json.loads(r.read())['status'] == 'ok'
    c.request('POST', '/v1/completions', body=json.dumps({'prompt': 'Once', 'max_tokens': 3}),
              headers={'Content-Type': 'application/json', 'Origin': 'https://127.0.0.1:%d' % srv.port})
    r = c.getresponse()
    body = json.loads(r.read())
    assert r.status == 200 and body['usage']['completion_tokens'] == 3, body
    c.close()
    try:   # plain HTTP on the TLS port gets no HTTP answer
        plain = http.client.HTTPConnection('127.0.0.1', srv.port, timeout=60)
        plain.request('GET', '/healthz')
        st = plain.getresponse().status
    except (http.client.HTTPException, ConnectionError):
        st = None
    assert st != 200, st
    if websockets:
        async def wss():
            async with websockets.connect('wss://127.0.0.1:%d/ws' % srv.port, subprotocols=['ember.chat.v1'],
                                          ssl=ctx, open_timeout=300, ping_interval=None) as w:
                return json.loads(await asyncio.wait_for(w.recv(), 300))['type']
        assert asyncio.run(wss()) == 'ready'
finally:
    rc, err = srv.stop()
assert rc == 0, err
print('config: TLS — HTTPS and WSS with a self-signed certificate, plain HTTP refused, '
      'a lone or missing tls_cert/tls_key refused before start')
print('config: ok')
