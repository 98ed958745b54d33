#!/usr/bin/env python3
# framing_test.py — request framing at the front door, over raw sockets to
# a real `ember serve` (the ASan build in the suite too), before any key:
#  - the input fuzz_http found (tests/fuzz/crashes/http/pipelined-te-garbage:
#    a GET, then on the same connection a mangled POST with a broken
#    Transfer-Encoding and a body), which made libwebsockets 4.1 hand ember
#    freed memory: the GET answered, the POST refused with 501, the
#    connection closed, the server still serving;
#  - Transfer-Encoding: chunked → 411 at once, logged, nothing read; a
#    Content-Length that is not a number → 400; each closes its connection;
#    a body past the limit → 413 that the client, still sending, reads;
#  - pipelining: GETs in order; a POST's answer and then the GET sent
#    behind it (reading waits for the POST's answer); a POST pipelined
#    behind another request → its predecessor answered, then a 400 naming
#    pipelining and the connection closed, short and long bodies, in one
#    write and split — never a request run on bytes lws handed twice;
#  - a POST without a length: answered as having no body, then closed;
#  - after all of it: every answer in the ledger is one this test expects,
#    and the server answers /healthz and a completion.
import base64
import json
import socket
import sys
import time

sys.path.insert(0, __file__.rsplit('/', 1)[0])
from serve_util import Server, recv_all, shared_model  # noqa: E402

CRASH = base64.b64decode(
    'R0VUIC9oZWFsdGh6IEhUVFAvMS4xDQpIb3N0OiAxMjcuMC4wLjENCg0KUE9TVCAvdsLCwsLCwsLCc3Q6IDEyN29udGVudC1UeXBlOiBh'
    'cHBsaWNhdGlvbi9qc29uDQpUcmFuc2Zlci1FbmNvZGluZzogYzrCwsLCicLCMS9jb21wbGV0aW9uIGNsb3NlDQoNCnsicHJvbXB0Ijog'
    'IngiLEaBBWhlbGwgIm1heF90b2tvZW5zIjogMX0=')

srv = Server(shared_model('stories260K.gguf'), '--parallel', '4')


def exchange(*parts, pause=0.0):
    """Send parts on one connection (pause seconds between them); every byte back until the server closes."""
    c = socket.create_connection(('127.0.0.1', srv.port), timeout=60)
    for i, p in enumerate(parts):
        if i and pause:
            time.sleep(pause)
        try:
            c.sendall(p)
        except OSError:   # the server closed already (a refusal): what it said is still readable
            break
    got = recv_all(c)
    c.close()
    return got


def answers(raw):
    """[(status, headers dict, body bytes)] of the HTTP/1.1 responses in raw, in order."""
    out = []
    while raw.startswith(b'HTTP/1.1 ') or raw.startswith(b'HTTP/1.0 '):   # (1.0: a mangled request line)
        head, _, rest = raw.partition(b'\r\n\r\n')
        lines = head.decode('latin-1').split('\r\n')
        h = {k.strip().lower(): v.strip() for k, v in (ln.split(':', 1) for ln in lines[1:])}
        if 'content-length' in h:
            n = int(h['content-length'])
            body, raw = rest[:n], rest[n:]
        else:   # chunked
            body = b''
            while True:
                size, _, rest = rest.partition(b'\r\n')
                n = int(size, 16)
                body, rest = body + rest[:n], rest[n + 2:]
                if not n:
                    break
            raw = rest
        out.append((int(lines[0].split()[1]), h, body))
    assert raw == b'', raw[:200]   # nothing but whole responses
    return out


def req(method, path, body=None, close=False, extra=''):
    h = '%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\n%s' % (method, path, extra)
    if body is not None:
        h += 'Content-Type: application/json\r\nContent-Length: %d\r\n' % len(body)
    return (h + ('Connection: close\r\n' if close else '') + '\r\n' + (body or '')).encode()


def alive():
    st, _, _ = srv.request('GET', '/healthz')
    assert st == 200, st


def code(body):
    return json.loads(body)['error']['code']


try:
    n_rows = len(srv.ledger())

    # the fuzzer's input: the GET answered, the mangled POST refused (501), closed; the server serves on
    got = answers(exchange(CRASH))
    assert [a[0] for a in got] == [200, 501], got
    assert got[1][1].get('connection') == 'close' and code(got[1][2]) == 'unsupported_transfer_encoding', got[1]
    alive()
    print('fuzz_http input: GET 200, mangled POST 501, connection closed, serving on')

    # chunked: 411 at once, the body never read (the connection closes)
    chunked = (b'POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n'
               b'Transfer-Encoding: chunked\r\n\r\n')
    body = json.dumps({'prompt': 'Once', 'max_tokens': 2}).encode()
    got = answers(exchange(chunked, b'%x\r\n%s\r\n0\r\n\r\n' % (len(body), body), pause=0.2))
    assert len(got) == 1 and got[0][0] == 411 and code(got[0][2]) == 'length_required', got
    assert got[0][1].get('connection') == 'close', got
    got = answers(exchange(req('PATCH', '/api/conversations/1', extra='Transfer-Encoding: chunked\r\n')))
    assert [a[0] for a in got] == [411], got
    assert 'Transfer-Encoding: chunked: send the body with a Content-Length' in open(srv.err_path).read()

    # lengths that are not one number of bytes
    for bad in ('abc', '-5', '12abc', '5, 5', '99999999999999999999999'):
        got = answers(exchange(('POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: %s\r\n\r\n'
                                '{"prompt": "x"}' % bad).encode()))
        assert len(got) == 1 and got[0][0] == 400 and code(got[0][2]) == 'invalid_content_length', (bad, got)
    # past --max-body's default: 413 while the client still sends, which it reads (no reset)
    st, h, body = srv.request('POST', '/v1/completions', raw=b'x' * (4 << 20 | 1))
    assert st == 413 and h.get('connection') == 'close' and code(body) == 'request_too_large', (st, h, body)
    print('chunked 411, bad lengths 400, oversized 413: each answered at once and closed')

    # pipelined GETs: in order on one connection
    got = answers(exchange(req('GET', '/healthz') + req('GET', '/v1/models') + req('GET', '/healthz', close=True)))
    assert [a[0] for a in got] == [200, 200, 200] and json.loads(got[1][2])['object'] == 'list', got

    # a request behind a POST's body before its answer: lws would spin on that body's completion,
    # so the POST is refused (400 naming pipelining), nothing run, the connection closed
    ask = json.dumps({'prompt': 'Once upon a time', 'max_tokens': 24, 'temperature': 0, 'ignore_eos': True})
    for behind in (req('GET', '/v1/models', close=True), req('POST', '/v1/completions', ask)):
        got = answers(exchange(req('POST', '/v1/completions', ask) + behind))
        assert [a[0] for a in got] == [400] and code(got[0][2]) == 'bad_framing', got
        assert 'pipelining' in json.loads(got[0][2])['error']['message'] and got[0][1]['connection'] == 'close'
    print('pipelining: GETs in order; a request behind a POST body: the POST refused (400), closed')

    # a POST pipelined behind a GET: the GET answered, then 400 and closed — short bodies (lws
    # completes them inside its own loop), long ones (it hands bytes it freed), and with only the
    # POST's head and a few bytes of its body in the first write (the rest a moment later)
    short = json.dumps({'prompt': 'x', 'max_tokens': 1})
    long_ = json.dumps({'prompt': 'Once upon a time ' * 40, 'max_tokens': 1})
    first = req('GET', '/healthz')
    for body in (short, long_):
        for split in (False, True):
            post = req('POST', '/v1/completions', body)
            cut = len(first) + post.index(b'\r\n\r\n') + 4 + 5
            data = first + post
            got = answers(exchange(data[:cut], data[cut:], pause=0.2) if split else exchange(data))
            assert [a[0] for a in got] == [200, 400], (len(body), split, got)
            assert code(got[1][2]) == 'bad_framing' and 'pipelin' in json.loads(got[1][2])['error']['message']
            assert got[1][1].get('connection') == 'close', got
    # but when the POST's head was not whole in lws's buffer, the rest of it comes from the socket
    # and lws reads its body right: answered
    post = req('POST', '/v1/completions', short, close=True)
    got = answers(exchange(first + post[:40], post[40:], pause=0.2))
    assert [a[0] for a in got] == [200, 200] and json.loads(got[1][2])['usage']['completion_tokens'] == 1, got
    # the same with the POST's body declared longer than it is (lws waits for the rest): still refused
    got = answers(exchange(first + req('POST', '/v1/completions', short).replace(
        b'Content-Length: %d' % len(short), b'Content-Length: %d' % (len(short) + 500))))
    assert [a[0] for a in got] == [200, 400], got
    alive()
    print('a POST pipelined behind a GET: the GET answered, the POST 400, closed (short, long, split), serving on')

    # a POST with no length has no body: answered so (a JSON error), then closed, what follows never read
    got = answers(exchange(b'POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n' + req('GET', '/healthz')))
    assert len(got) == 1 and got[0][0] == 400 and got[0][1].get('connection') == 'close', got
    print('a POST without a length: answered as bodiless, closed')

    # a GET with a body: answered, its body never read, closed
    got = answers(exchange(b'GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 5\r\n\r\nhello'))
    assert [a[0] for a in got] == [200] and got[0][1].get('connection') == 'close', got

    # the ledger: no request ran on the bytes of a refused one — the POST whose head came whole from
    # the socket, the bodiless POST's refusal and the completion below are its only rows
    st, _, o = srv.post('/v1/completions', {'prompt': 'The cat', 'max_tokens': 4, 'temperature': 0})
    assert st == 200 and o['usage']['completion_tokens'] == 4, o
    rows = srv.ledger_settled(n_rows + 3)[n_rows:]
    assert [r['status'] for r in rows] == ['completed', 'failed', 'completed'] and 'JSON' in rows[1]['error'], rows
    assert rows[-1]['completion_tokens'] == 4, rows
    print('ledger: the two completions and the bodiless POST refused; nothing else ran')
finally:
    rc, err = srv.stop()
assert rc == 0, err
assert 'ERROR: AddressSanitizer' not in err and 'runtime error' not in err, err[-3000:]
print('ok')
