#!/usr/bin/env python3
# loadtest_test.py — `ember loadtest` against a small OpenAI-compatible
# streaming server written here (stdlib only: http.server + threading, on
# 127.0.0.1 on a free port, started and stopped by the test). The fixture
# counts the requests, records their bodies and headers, and behaves as the
# request's "model" asks: SSE framed by chunked encoding, Content-Length or
# the end of the connection, keep-alive pings and other SSE fields, a slow
# first token, 429 with Retry-After, a 500, truncated and malformed streams,
# an SSE line over 1 MiB, a body over 16 MiB, a server that stops sending.
# Asserted: the exact requests per user and level, what the bodies carry,
# that the JSON figures are consistent with each other and with what the
# fixture sent, the error kinds, the retry, TTFT against a known delay (a
# lower bound only: no wall-clock limit, the machine is shared), the SVG as
# XML, and bad flags as one stderr line with exit status 2.
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import xml.etree.ElementTree as ET
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

EMBER = os.environ['EMBER_BIN']
HEAD_DELAY = 0.2       # s before model "slow" sends its response head,
FIRST_DELAY = 0.4      # and then before its first token
RETRY_AFTER = 1        # s, of model "busy-once" / "busy-always"


class Handler(BaseHTTPRequestHandler):
    protocol_version = 'HTTP/1.1'
    timeout = 20       # an idle keep-alive connection ends after this

    def setup(self):
        super().setup()
        with self.server.fx.lock:
            self.server.fx.connections += 1
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)   # as real servers do

    def log_message(self, *args):
        pass

    def send_json(self, status, obj, extra=()):
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header('Content-Type', 'application/json')
        self.send_header('Content-Length', str(len(data)))
        for k, v in extra:
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        fx = self.server.fx
        with fx.lock:
            fx.gets.append(self.path)
        if self.path.endswith('/v1/models'):
            self.send_json(200, {'object': 'list', 'data': [{'id': 'fixture-model', 'object': 'model'},
                                                            {'id': 'other', 'object': 'model'}]})
        else:
            self.send_json(404, {'error': {'message': 'no such path'}})

    def do_POST(self):
        fx = self.server.fx
        n = int(self.headers.get('Content-Length', '0'))
        raw = self.rfile.read(n)
        body = json.loads(raw)
        with fx.lock:
            index = len(fx.posts)
            fx.posts.append({'path': self.path, 'body': body, 't': time.monotonic(),
                             'auth': self.headers.get('Authorization'),
                             'ctype': self.headers.get('Content-Type')})
            mode = body.get('model', '')
            if mode == 'mix':
                mode = fx.mix[fx.n_mix % len(fx.mix)]
                fx.n_mix += 1
            content = body['messages'][0]['content']
            first_time = content not in fx.seen
            fx.seen.add(content)
        if mode == 'err500' or (mode == 'half' and index % 2 == 1):
            self.send_json(500, {'error': {'message': 'fixture says no', 'type': 'server_error'}})
            return
        if mode == 'busy-always' or (mode == 'busy-once' and first_time):
            self.send_json(429, {'error': {'message': 'fixture is busy'}},
                           [('Retry-After', str(RETRY_AFTER))])
            return
        self.stream(mode, body)

    def stream(self, mode, body):
        if mode == 'slow':
            time.sleep(HEAD_DELAY)
        n_tok = body['max_tokens']
        prompt = len(body['messages'][0]['content'].split())
        events = []          # (bytes, delay before it)
        head = {'id': 'x', 'object': 'chat.completion.chunk', 'model': body['model']}

        def chunk(delta, finish=None):
            return dict(head, choices=[{'index': 0, 'delta': delta, 'finish_reason': finish}])

        events.append((b'data: ' + json.dumps(chunk({'role': 'assistant', 'content': ''})).encode() + b'\n\n', 0))
        for i in range(n_tok):
            delay = FIRST_DELAY if (mode == 'slow' and i == 0) else 0.002
            ev = b'data: ' + json.dumps(chunk({'content': 'tok%d ' % i})).encode() + b'\n\n'
            if mode == 'ping':
                ev = b': ping\n\nevent: message\nid: %d\nretry: 1000\n' % i + ev + b':\n\n'
            events.append((ev, delay))
        events.append((b'data: ' + json.dumps(chunk({}, 'length')).encode() + b'\n\n', 0))
        if mode != 'nousage' and body.get('stream_options', {}).get('include_usage'):
            usage = dict(head, choices=[], usage={'prompt_tokens': prompt, 'completion_tokens': n_tok,
                                                  'total_tokens': prompt + n_tok})
            events.append((b'data: ' + json.dumps(usage).encode() + b'\n\n', 0))
        if mode != 'nodone':
            events.append((b'data: [DONE]\n\n', 0))
        if mode == 'malformed':
            events.insert(2, (b'data: {not json\n\n', 0))
        if mode == 'huge':
            events.insert(2, (b'data: "' + b'x' * (1100 << 10) + b'"\n\n', 0))
        if mode == 'hugebody':
            events[2:2] = [(b': ' + b'p' * (512 << 10) + b'\n', 0)] * 34   # 17 MiB of comment lines
        if mode in ('length', 'dropidle'):
            data = b''.join(e for e, _ in events)
            self.send_response(200)
            self.send_header('Content-Type', 'text/event-stream')
            self.send_header('Content-Length', str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            # dropidle: a kept connection the server then closes while idle (a keep-alive timeout)
            self.close_connection = mode == 'dropidle'
            return
        self.send_response(200)
        self.send_header('Content-Type', 'text/event-stream; charset=utf-8')
        self.send_header('Cache-Control', 'no-cache')
        if mode == 'close':
            self.send_header('Connection', 'close')
            self.close_connection = True
        else:
            self.send_header('Transfer-Encoding', 'chunked')
        self.end_headers()
        self.wfile.flush()
        for k, (ev, delay) in enumerate(events):
            if delay:
                time.sleep(delay)
            if mode == 'hang' and k == 1:
                time.sleep(3)
                self.close_connection = True
                return
            if mode == 'trunc' and k == 4:   # mid-stream, inside the chunked body: the connection just ends
                self.wfile.flush()
                self.connection.shutdown(socket.SHUT_RDWR)
                self.close_connection = True
                return
            if mode == 'close':
                self.wfile.write(ev)
            else:
                self.wfile.write(b'%x\r\n' % len(ev) + ev + b'\r\n')
            self.wfile.flush()
        if mode != 'close':
            self.wfile.write(b'0\r\n\r\n')
            self.wfile.flush()


class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256   # the default 5 drops connections of many users arriving at once

    def handle_error(self, request, client_address):
        pass   # a client that gave up (timeouts, caps) breaks the pipe: expected here


class Server6(Server):
    address_family = socket.AF_INET6


class Fixture:
    def __init__(self, cls=Server, host='127.0.0.1'):
        self.lock = threading.Lock()
        self.reset()
        self.srv = cls((host, 0), Handler)
        self.srv.fx = self
        self.port = self.srv.server_address[1]
        self.thread = threading.Thread(target=self.srv.serve_forever, kwargs={'poll_interval': 0.05},
                                       daemon=True)
        self.thread.start()

    def reset(self, mix=()):
        with self.lock:
            self.posts, self.gets, self.seen, self.connections = [], [], set(), 0
            self.mix, self.n_mix = list(mix), 0

    def stop(self):
        self.srv.shutdown()
        self.srv.server_close()


fx = Fixture()
URL = 'http://127.0.0.1:%d' % fx.port
tmp = tempfile.mkdtemp(prefix='ember-loadtest-')


def loadtest(*args, expect=0, url=URL, mix=()):
    fx.reset(mix)
    cmd = [EMBER, 'loadtest'] + (['--url', url] if url else []) + list(args)
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120)
    assert r.returncode == expect, '%s: exit %d, expected %d\nstdout: %s\nstderr: %s' % (
        ' '.join(cmd), r.returncode, expect, r.stdout, r.stderr)
    return r


def run_json(*args, expect=0, url=URL, mix=()):
    r = loadtest(*args, '--json', expect=expect, url=url, mix=mix)
    return json.loads(r.stdout), r


def one_level(rpu, *args, expect=0, mix=()):
    """A run of one level of users doing rpu requests each: its level, checked, the document and the run."""
    j, r = run_json('--requests-per-user', str(rpu), *args, expect=expect, mix=mix)
    lv = j['levels'][0]
    check_level(lv, rpu)
    return lv, j, r


def close(a, b, rel=1e-6):
    return abs(a - b) <= rel * max(abs(a), abs(b), 1e-9)


def check_level(lv, rpu):
    """Figures of one level consistent with each other."""
    assert lv['requests'] == lv['users'] * rpu, lv
    assert lv['completed'] + sum(lv['errors'].values()) >= lv['requests'] or lv['background'], lv
    assert lv['wall_s'] > 0, lv
    assert close(lv['tokens_per_s'], lv['output_tokens'] / lv['wall_s'], 1e-3), lv
    if lv['completed']:
        assert lv['ttft_p50_ms'] <= lv['ttft_p99_ms'], lv
        assert lv['tpot_p50_ms'] <= lv['tpot_p99_ms'], lv
        assert lv['ttft_p50_ms'] > 0 and lv['tpot_p50_ms'] >= 0, lv
    if lv['goodput_tokens_per_s'] is not None:
        assert lv['goodput_tokens_per_s'] <= lv['tokens_per_s'] + 1e-9, lv
        assert lv['goodput_requests'] <= lv['completed'], lv


failures = []


def case(fn):
    try:
        fn()
        print('ok   %s' % fn.__name__)
    except AssertionError as e:
        failures.append(fn.__name__)
        print('FAIL %s: %s' % (fn.__name__, e))
    return fn


@case
def levels_and_bodies():
    j, r = run_json('--users', '1,3', '--requests-per-user', '3', '--prompt-tokens', '5-9',
                    '--gen-tokens', '4-7', '--model', 'chunked', '--api-key', 'sekrit',
                    '--slo-ttft-ms', '60000', '--slo-tpot-ms', '60000', '--gpu-cost-per-hour', '2',
                    '--svg', os.path.join(tmp, 'chart.svg'))
    assert r.stderr == '', r.stderr
    assert [lv['users'] for lv in j['levels']] == [1, 3], j
    posts = fx.posts
    assert len(posts) == 1 * 3 + 3 * 3, len(posts)
    for p in posts:
        b = p['body']
        assert p['path'] == '/v1/chat/completions', p['path']
        assert p['auth'] == 'Bearer sekrit', p['auth']
        assert p['ctype'] == 'application/json', p['ctype']
        assert b['model'] == 'chunked' and b['stream'] is True, b
        assert b['stream_options'] == {'include_usage': True}, b
        assert 4 <= b['max_tokens'] <= 7 and b['ignore_eos'] is True and b['temperature'] == 0, b
        assert 'priority' not in b, b
        assert b['messages'][0]['role'] == 'user', b
        assert 5 <= len(b['messages'][0]['content'].split()) <= 9, b
    contents = [p['body']['messages'][0]['content'] for p in posts]
    assert len(set(contents)) == len(contents), 'prompts repeat'
    # levels run one after another: the first 3 requests are the first level's
    spans = [posts[:3], posts[3:]]
    for lv, ps in zip(j['levels'], spans):
        check_level(lv, 3)
        assert lv['completed'] == lv['requests'] and sum(lv['errors'].values()) == 0, lv
        assert lv['retries'] == 0 and lv['background_requests'] == 0, lv
        assert lv['output_tokens'] == sum(p['body']['max_tokens'] for p in ps), lv
        words = [len(p['body']['messages'][0]['content'].split()) for p in ps]
        assert close(lv['prompt_tokens_mean'], sum(words) / len(words)), lv
        assert lv['goodput_requests'] == lv['completed'] and lv['within_slo'] is True, lv
        assert close(lv['goodput_tokens_per_s'], lv['tokens_per_s']), lv
        assert close(lv['cost_per_1m_tokens'], 2 / (lv['tokens_per_s'] * 3600) * 1e6), lv
    assert j['max_users_within_slo'] == 3, j
    assert j['model'] == 'chunked' and j['url'] == URL and j['requests_per_user'] == 3, j
    assert j['prompt_tokens'] == [5, 9] and j['gen_tokens'] == [4, 7], j
    assert j['slo_ttft_ms'] == 60000 and j['gpu_cost_per_hour'] == 2, j
    root = ET.parse(os.path.join(tmp, 'chart.svg')).getroot()
    assert root.tag == '{http://www.w3.org/2000/svg}svg', root.tag
    assert len(root.findall('{http://www.w3.org/2000/svg}polyline')) >= 3
    texts = ''.join(t.text or '' for t in root.iter('{http://www.w3.org/2000/svg}text'))
    assert 'Time to first token' in texts and 'SLO 60000 ms' in texts, texts


@case
def tight_slo():
    # a TTFT SLO below the fixture's first-token delay: nothing is within it
    j, _ = run_json('--users', '1,2', '--requests-per-user', '2', '--gen-tokens', '3', '--model', 'slow',
                    '--slo-ttft-ms', '%d' % (FIRST_DELAY * 1000 / 2))
    for lv in j['levels']:
        check_level(lv, 2)
        assert lv['goodput_requests'] == 0 and lv['goodput_tokens_per_s'] == 0, lv
        assert lv['within_slo'] is False, lv
    assert j['max_users_within_slo'] == 0 and j['slo_tpot_ms'] is None, j


@case
def framings():
    # connections: one per user kept alive, or one per request where the server ends them
    for mode, conns in (('length', 2), ('close', 4), ('ping', 2), ('chunked', 2), ('dropidle', 4)):
        lv, _, _ = one_level(2, '--users', '2', '--gen-tokens', '3-6', '--model', mode)
        assert lv['completed'] == 4 and sum(lv['errors'].values()) == 0, (mode, lv)
        assert len(fx.posts) == 4, (mode, len(fx.posts))
        assert fx.connections == conns, (mode, fx.connections)
        assert lv['output_tokens'] == sum(p['body']['max_tokens'] for p in fx.posts), (mode, lv)
        assert lv['goodput_requests'] is None and lv['within_slo'] is None, lv
        assert lv['cost_per_1m_tokens'] is None, lv


@case
def without_usage():
    lv, _, _ = one_level(3, '--users', '1', '--gen-tokens', '5-9', '--model', 'nousage')
    assert lv['completed'] == 3, lv
    assert lv['output_tokens'] == sum(p['body']['max_tokens'] for p in fx.posts), lv   # content chunks
    assert lv['prompt_tokens_mean'] is None, lv


@case
def slow_first_token():
    lv, _, _ = one_level(2, '--users', '2', '--gen-tokens', '4', '--model', 'slow')
    assert lv['completed'] == 4, lv
    # measured from the request, not from the response head: at least both of the fixture's delays
    # (a lower bound, not a speed limit)
    assert lv['ttft_p50_ms'] >= (HEAD_DELAY + FIRST_DELAY) * 1000, lv


@case
def retry_after():
    lv, _, _ = one_level(2, '--users', '2', '--gen-tokens', '3', '--model', 'busy-once')
    assert lv['completed'] == 4 and sum(lv['errors'].values()) == 0, lv
    assert lv['retries'] == 4, lv
    assert len(fx.posts) == 8, len(fx.posts)
    first = {}
    for p in fx.posts:
        c = p['body']['messages'][0]['content']
        if c in first:
            assert p['t'] - first[c] >= RETRY_AFTER - 0.05, 'retried %.3f s after the 429' % (p['t'] - first[c])
        else:
            first[c] = p['t']
    # the retried request is timed from its first send
    assert lv['ttft_p50_ms'] >= RETRY_AFTER * 1000 - 50, lv


@case
def retry_then_fail():
    lv, _, r = one_level(2, '--users', '1', '--gen-tokens', '3', '--model', 'busy-always', expect=1)
    assert lv['completed'] == 0 and lv['errors']['http'] == 2 and lv['retries'] == 2, lv
    assert len(fx.posts) == 4, len(fx.posts)
    assert 'HTTP 429' in lv['first_errors']['http'] and 'fixture is busy' in lv['first_errors']['http'], lv
    assert lv['ttft_p50_ms'] is None and lv['tpot_p99_ms'] is None, lv
    assert 'every request failed' in r.stderr, r.stderr


@case
def server_error():
    lv, _, _ = one_level(2, '--users', '1', '--model', 'err500', expect=1)
    assert lv['errors']['http'] == 2 and lv['retries'] == 0 and lv['completed'] == 0, lv
    assert lv['first_errors']['http'] == 'HTTP 500: fixture says no', lv
    assert len(fx.posts) == 2
    # half of them failing is not a failed run
    lv, _, r = one_level(4, '--users', '1', '--gen-tokens', '3', '--model', 'half')
    assert lv['completed'] == 2 and lv['errors']['http'] == 2, lv
    assert '2 of 4 requests failed' in r.stderr, r.stderr


@case
def broken_streams():
    mix = ['chunked', 'trunc', 'nodone', 'malformed', 'huge', 'hugebody', 'hang']
    lv, _, _ = one_level(len(mix), '--users', '1', '--gen-tokens', '6', '--model', 'mix', '--timeout-s', '1',
                         mix=mix)
    assert lv['completed'] == 1, lv
    want = {'http': 0, 'connect': 0, 'timeout': 1, 'malformed': 1, 'truncated': 2, 'too_large': 2}
    assert lv['errors'] == want, lv
    assert len(fx.posts) == len(mix), len(fx.posts)
    assert 'DONE' in lv['first_errors']['truncated'] or 'closed' in lv['first_errors']['truncated'], lv


@case
def background_users():
    lv, _, _ = one_level(2, '--users', '2', '--background', '1', '--gen-tokens', '10', '--model', 'chunked')
    inter = [p for p in fx.posts if 'priority' not in p['body']]
    bg = [p for p in fx.posts if 'priority' in p['body']]
    assert len(inter) == 4 and lv['completed'] == 4, (len(inter), lv)
    assert all(p['body']['priority'] == 'background' for p in bg), bg
    # the background user runs from before the first interactive request until the last one is done;
    # its request in flight then may or may not have reached the server
    assert len(bg) >= 1 and lv['background_requests'] - 1 <= len(bg) <= lv['background_requests'], (len(bg), lv)
    assert bg[0]['t'] < min(p['t'] for p in inter), 'background did not start first'
    assert lv['output_tokens'] >= sum(p['body']['max_tokens'] for p in inter), lv
    assert sum(lv['errors'].values()) == 0, lv


@case
def seeds():
    def contents(*extra):
        run_json('--users', '1', '--requests-per-user', '3', '--gen-tokens', '2', '--model', 'chunked', *extra)
        return [(p['body']['messages'][0]['content'], p['body']['max_tokens']) for p in fx.posts]
    a, b, c = contents('--seed', '7'), contents('--seed', '7'), contents('--seed', '8')
    assert a == b, 'the same seed drew other requests'
    assert a != c, 'another seed drew the same requests'


@case
def urls_and_default_model():
    for url in (URL + '/v1', URL + '/v1/', URL + '/', 'http://localhost:%d' % fx.port):
        j, _ = run_json('--users', '1', '--requests-per-user', '1', '--gen-tokens', '2', url=url)
        assert j['model'] == 'fixture-model', j
        assert fx.gets == ['/v1/models'], fx.gets
        assert [p['path'] for p in fx.posts] == ['/v1/chat/completions'], fx.posts
        assert fx.posts[0]['body']['model'] == 'fixture-model'
        assert fx.posts[0]['auth'] is None
    j, _ = run_json('--users', '1', '--requests-per-user', '1', '--gen-tokens', '2', '--model', 'x',
                    url=URL + '/behind/a/proxy/v1')
    assert [p['path'] for p in fx.posts] == ['/behind/a/proxy/v1/chat/completions'], fx.posts
    assert fx.gets == [], fx.gets
    try:
        fx6 = Fixture(Server6, '::1')
    except OSError as e:
        print('     (no IPv6 loopback here: %s)' % e)
        return
    try:
        r = subprocess.run([EMBER, 'loadtest', '--url', 'http://[::1]:%d/v1' % fx6.port, '--users', '1',
                            '--requests-per-user', '2', '--gen-tokens', '2', '--json'],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)['levels'][0]['completed'] == 2
        assert len(fx6.posts) == 2
    finally:
        fx6.stop()


@case
def table():
    r = loadtest('--users', '1,2', '--requests-per-user', '1', '--gen-tokens', '2', '--model', 'chunked')
    lines = r.stdout.splitlines()
    assert lines[0].startswith('server      %s, model chunked' % URL), lines
    rows = [l.split() for l in lines if l[:5].strip().isdigit()]
    assert [int(x[0]) for x in rows] == [1, 2], lines
    assert all(x[-2:] == ['not', 'given'] for x in rows), lines
    assert 'no SLO given' in r.stdout, r.stdout
    assert r.stderr.splitlines() == ['ember: loadtest: 1 users done', 'ember: loadtest: 2 users done'], r.stderr


@case
def no_server():
    s = socket.socket()
    s.bind(('127.0.0.1', 0))
    port = s.getsockname()[1]
    s.close()   # nothing listens there now
    r = loadtest('--users', '1', url='http://127.0.0.1:%d' % port, expect=1)
    assert r.stderr.count('\n') == 1 and r.stderr.startswith('ember: loadtest: GET ') and '--model' in r.stderr, \
        r.stderr
    j, r = run_json('--users', '1', '--requests-per-user', '2', '--model', 'm', '--timeout-s', '5',
                    url='http://127.0.0.1:%d' % port, expect=1)
    assert j['levels'][0]['errors']['connect'] == 2, j


@case
def bad_flags():
    bad = [
        [],                                                   # no --url
        ['--url', URL],                                       # no --users
        ['--url', URL, '--users', '0'],
        ['--url', URL, '--users', '1025'],
        ['--url', URL, '--users', '1,,2'],
        ['--url', URL, '--users', 'x'],
        ['--url', URL, '--users', '1000', '--background', '100'],
        ['--url', URL, '--users', '1', '--prompt-tokens', '9-5'],
        ['--url', URL, '--users', '1', '--prompt-tokens', '0'],
        ['--url', URL, '--users', '1', '--gen-tokens', '3-'],
        ['--url', URL, '--users', '1', '--gen-tokens', 'a-b'],
        ['--url', URL, '--users', '1', '--requests-per-user', '0'],
        ['--url', URL, '--users', '1', '--timeout-s', '0'],
        ['--url', URL, '--users', '1', '--slo-ttft-ms', '-1'],
        ['--url', URL, '--users', '1', '--bogus'],
        ['--url', URL, '--users', '1', '--svg', '/nonexistent-dir/x.svg'],
        ['--url', URL, '--users', '1', '--api-key', ''],
        ['--url', 'https://127.0.0.1:1', '--users', '1'],
        ['--url', 'ftp://127.0.0.1/', '--users', '1'],
        ['--url', 'http://', '--users', '1'],
        ['--url', 'http://127.0.0.1:99999', '--users', '1'],
        ['--url', 'http://127.0.0.1:x', '--users', '1'],
        ['--url', 'http://[::1', '--users', '1'],
        ['--url', 'http://user:pw@127.0.0.1:80', '--users', '1'],
        ['--url', URL + '/v1?x=1', '--users', '1'],
        ['--url', 'http://bad_host!:80', '--users', '1'],
    ]
    for args in bad:
        fx.reset()
        r = subprocess.run([EMBER, 'loadtest'] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, timeout=30)
        assert r.returncode == 2, '%s: exit %d: %s' % (args, r.returncode, r.stderr)
        lines = r.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith('ember: loadtest: '), (args, r.stderr)
        assert r.stdout == '', (args, r.stdout)
        assert not fx.posts and not fx.gets, (args, 'the server was asked')


fx.stop()
if failures:
    print('%d failed: %s' % (len(failures), ', '.join(failures)))
    sys.exit(1)
print('all passed')
