#!/usr/bin/env python3
# selftest_test.py — the boot known-answer self-test (core/gpu/selftest.c):
#  - `ember selftest` on the stories model: every stage ran and passed,
#    NMSE against the CPU reference under the limit, table and JSON agree;
#  - every matrix pipeline the stages built checked alone (one per weight
#    type, token tile and epilogue), listed by name with its NMSE;
#  - a stage whose device logits go wrong (EMBER_SELFTEST_FAULT, as a
#    miscompiled kernel would): exit 1, the stage, the device, the figures
#    and the stage's non-matrix kernels named, in the table, the JSON and
#    the error line; a matrix kernel whose output is wrong for its check
#    (EMBER_SELFTEST_FAULT=mm_f32): that variant named, the others still ok;
#  - an encoder (all-MiniLM-L6-v2): its pooled rows against the CPU
#    encoder, decode and batch skipped; a wrong stage names attn_enc;
#  - `ember serve` with a failing self-test refuses to serve: exit 1 before
#    the port opens, the failing stage and the device named;
#  - a passing boot: /healthz shows the boot stages in order and the report,
#    /metrics the same figures; with one sequence slot the batch stage is
#    skipped, said so, and the server serves;
#  - the shader caches beside the database: the pipeline cache file, and
#    Mesa's cache in the state directory for a user without a home.
import json
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, __file__.rsplit('/', 1)[0])
from serve_util import Server, shared_model, EMBER, NO_DEVICE, skip  # noqa: E402

model = shared_model('stories260K.gguf')
STAGES = ['prefill', 'decode', 'batch']
BOOT = ['database', 'model', 'device', 'weights', 'selftest', 'port']


def selftest(*args, env=None):
    r = subprocess.run([EMBER, 'selftest', '--model', model] + list(args), capture_output=True, text=True,
                       env=env, timeout=600)
    if NO_DEVICE.search(r.stderr):
        skip(r.stderr.strip())
    return r


def faulty(stage):
    e = dict(os.environ)
    e['EMBER_SELFTEST_FAULT'] = stage
    return e


# ---- ember selftest ----
r = selftest('--json')
assert r.returncode == 0, (r.returncode, r.stderr)
rep = json.loads(r.stdout)
assert rep['ok'] is True and rep['limit_nmse'] == 1e-3 and 'failure' not in rep, rep
assert [s['name'] for s in rep['stages']] == STAGES, rep
for s in rep['stages']:
    assert s['ran'] and s['ok'] and 0 <= s['nmse'] < 1e-3 and s['rows'] >= 1, s
assert rep['device'] and rep['reference_ms'] > 0 and rep['total_ms'] >= rep['reference_ms'], rep
# the stories model is F32: its matrix pipelines are mm_f32 ones, one per token tile (decode tn=1, the
# prompt's tiles) and epilogue (the norm-fused QKV and gate/up+SwiGLU, the residual-adding outputs, the
# gathered logits rows)
KERNEL = re.compile(r'^mm_f32 tn=(\d+) ((?:norm_in|bias|add_out|swiglu|gather_in)(?:\+\w+)*|none)$')
names = [k['name'] for k in rep['kernels'] if not k['name'].startswith('topk')]
assert [k['name'] for k in rep['kernels'] if k['name'].startswith('topk')] == ['topk V=512'], rep['kernels']
assert names and all(KERNEL.match(n) for n in names) and len(set(names)) == len(names), names
assert {KERNEL.match(n).group(1) for n in names} >= {'1'}, names
assert any('swiglu' in n for n in names) and any('add_out' in n for n in names), names
assert all(k['ok'] and 0 <= k['nmse'] < rep['kernel_limit_nmse'] == 1e-6 for k in rep['kernels']), rep['kernels']
others = rep['other_kernels'].split(', ')
assert 'rope_kv' in others and 'embed_f32' in others and any(o.startswith('attn_dec') for o in others), others
t = selftest()
assert t.returncode == 0, t.stderr
rows = {ln.split()[0]: ln.split() for ln in t.stdout.splitlines() if ln.split() and ln.split()[0] in STAGES}
assert sorted(rows) == sorted(STAGES) and all(v[-1] == 'ok' for v in rows.values()), t.stdout
for n in names:   # a table row per kernel: name, NMSE, limit, ok
    assert re.search(r'^%s +\S+ +1e-06 +ok$' % re.escape(n), t.stdout, re.M), (n, t.stdout)
q8 = selftest('--kv-type', 'q8_0')   # the stories model's 8-wide heads: refused, clearly
assert q8.returncode == 2 and 'q8_0' in q8.stderr and q8.stderr.count('\n') == 1, q8.stderr

for stage in STAGES:
    r = selftest('--json', env=faulty(stage))
    assert r.returncode == 1, (stage, r.returncode, r.stderr)
    rep = json.loads(r.stdout)
    bad = [s for s in rep['stages'] if not s['ok']]
    assert rep['ok'] is False and [s['name'] for s in bad] == [stage], rep
    assert bad[0]['nmse'] is None or bad[0]['nmse'] > 1e-3, bad
    err = r.stderr.strip().splitlines()[-1]
    assert err.startswith('ember: selftest: on ') and ('the %s stage' % stage) in err and 'limit 1e-03' in err, err
    assert rep['device'].split(' (')[0] in err, (rep['device'], err)
    assert rep['failure'] in err, (rep['failure'], err)
    # the matrix kernels pass alone, so the stage's other kernels are the suspects
    assert all(k['ok'] for k in rep['kernels']), rep['kernels']
    sus = err.split('suspect ', 1)[1].split(', ')
    assert sus and set(sus) <= set(others), (sus, others)
    if stage == 'decode':
        assert any(s.startswith('attn_dec') for s in sus) and not any(s.startswith('attn_pre') for s in sus), sus
    if stage == 'prefill':
        assert any(s.startswith('attn_pre') for s in sus) and not any(s.startswith('attn_dec') for s in sus), sus
t = selftest(env=faulty('decode'))
assert t.returncode == 1 and re.search(r'^decode .* FAILED$', t.stdout, re.M), t.stdout

# one matrix kernel wrong: each of its variants fails alone, named; the stages still pass
r = selftest('--json', env=faulty('mm_f32'))
assert r.returncode == 1, (r.returncode, r.stderr)
rep = json.loads(r.stdout)
assert all(s['ok'] for s in rep['stages'] if s['ran']), rep['stages']
bad = [k for k in rep['kernels'] if not k['ok']]
assert [k['name'] for k in bad] == names and all(k['nmse'] > 1e-6 for k in bad), rep['kernels']
assert [k['ok'] for k in rep['kernels'] if k['name'].startswith('topk')] == [True], rep['kernels']
err = r.stderr.strip().splitlines()[-1]
assert ('the matrix kernel %s gives output far off' % names[0]) in err and 'limit 1e-06' in err, err
assert rep['device'].split(' (')[0] in err, err
r = selftest('--json', env=faulty('topk'))   # the token-choosing kernel wrong: named, with the row
assert r.returncode == 1 and [k['name'] for k in json.loads(r.stdout)['kernels'] if not k['ok']] == ['topk V=512']
assert 'the token-choosing kernel topk V=512 disagrees' in r.stderr and 'row 0' in r.stderr, r.stderr
r = selftest('--json', env=faulty('mm_q4_k'))   # a kernel this model does not use: nothing changes
assert r.returncode == 0 and json.loads(r.stdout)['ok'] is True, r.stderr

# an encoder (all-MiniLM-L6-v2): its stage is two whole sequences' pooled rows against
# core/run/encode.c (a typed pair among them); nothing to decode; a wrong stage names its kernels
minilm = os.path.join(os.environ.get('EMBER_SHARED', ''), 'models', 'all-MiniLM-L6-v2-F16.gguf')
if os.path.exists(minilm):
    r = subprocess.run([EMBER, 'selftest', '--model', minilm, '--json'], capture_output=True, text=True, timeout=600)
    rep = json.loads(r.stdout)
    st = {s['name']: s for s in rep['stages']}
    assert r.returncode == 0 and rep['ok'] is True, r.stderr
    assert st['prefill']['ran'] and st['prefill']['rows'] == 2 and st['prefill']['nmse'] < 1e-6, st
    assert 'encoder' in st['prefill']['checks'] and not st['decode']['ran'] and not st['batch']['ran'], st
    assert all(k['ok'] for k in rep['kernels']) and any('bias+add_out' in k['name'] for k in rep['kernels']), rep
    r = subprocess.run([EMBER, 'selftest', '--model', minilm], capture_output=True, text=True, timeout=600,
                       env=faulty('prefill'))
    err = r.stderr.strip().splitlines()[-1]
    assert r.returncode == 1 and 'gives pooled rows far off' in err and 'attn_enc' in err and 'layernorm' in err, err

# ---- ember serve refuses to serve wrong numbers ----
d = tempfile.mkdtemp(prefix='ember-selftest-')
p = subprocess.run([EMBER, 'serve', '--model', model, '--port', '0', '--db', os.path.join(d, 'e.db')],
                   capture_output=True, text=True, env=faulty('batch'), timeout=600)
assert p.returncode == 1, (p.returncode, p.stderr)
assert 'listening' not in p.stdout, p.stdout                 # the port never opened
last = p.stderr.strip().splitlines()[-1]
assert last.startswith('ember: serve: self-test failed on ') and 'the batch stage' in last and \
    'refusing to serve' in last, last
assert 'boot: port' not in p.stderr and 'boot: selftest' not in p.stderr, p.stderr
p = subprocess.run([EMBER, 'serve', '--model', model, '--port', '0', '--db', os.path.join(d, 'e.db')],
                   capture_output=True, text=True, env=faulty('mm_f32'), timeout=600)
last = p.stderr.strip().splitlines()[-1]
assert p.returncode == 1 and 'listening' not in p.stdout, (p.returncode, p.stdout, p.stderr)
assert ('the matrix kernel %s gives output far off' % names[0]) in last and 'refusing to serve' in last, last

# ---- a passing boot, shown in /healthz and /metrics ----
srv = Server(model)
try:
    st, _, body = srv.request('GET', '/healthz')
    h = json.loads(body)
    assert st == 200 and [s['name'] for s in h['boot']['stages']] == BOOT, h
    assert all(s['ms'] >= 0 for s in h['boot']['stages']), h
    sel = h['boot']['selftest']
    assert sel['ok'] is True and [s['name'] for s in sel['stages'] if s['ran'] and s['ok']] == STAGES, sel
    st, _, body = srv.request('GET', '/metrics')
    text = body.decode()
    assert re.search(r'^ember_selftest_passed 1$', text, re.M), text
    for s in sel['stages']:
        m = re.search(r'^ember_selftest_nmse\{stage="%s"\} (\S+)$' % s['name'], text, re.M)
        assert m and abs(float(m.group(1)) - s['nmse']) <= 1e-6 * s['nmse'] + 1e-15, (s, m and m.group(0))
    for k in sel['kernels']:
        if k['name'].startswith('topk'):
            assert re.search(r'^ember_selftest_kernel_nmse\{kernel="topk",tn="0",flags="none"\} 0$', text, re.M), text
            continue
        kern, tn, flags = KERNEL.match(k['name']).group(0).split(' ')
        m = re.search(r'^ember_selftest_kernel_nmse\{kernel="%s",tn="%s",flags="%s"\} (\S+)$' %
                      (kern, tn[3:], re.escape(flags)), text, re.M)
        assert m and abs(float(m.group(1)) - k['nmse']) <= 1e-6 * k['nmse'] + 1e-20, (k, m and m.group(0))
    for s in h['boot']['stages']:
        m = re.search(r'^ember_boot_stage_seconds\{stage="%s"\} (\S+)$' % s['name'], text, re.M)
        assert m and abs(float(m.group(1)) * 1e3 - s['ms']) < 0.1, (s, m and m.group(0))
    # the stage lines on stderr, in order
    err = open(srv.err_path).read()
    got = re.findall(r' info serve: boot: (\w+) in \d+ ms$', err, re.M)
    assert got == BOOT, err
    # the pipeline cache beside the database, written once the pipelines were built
    assert os.path.getsize(os.path.join(srv.dir, 'ember-pipelines.cache')) >= 32
    st, _, body = srv.post('/v1/completions', {'prompt': 'Once upon a time', 'max_tokens': 8})
    assert st == 200, body
finally:
    rc, err = srv.stop()
assert rc == 0, err

# one sequence slot: no mixed step to check, and it says so
one = Server(model, '--parallel', '1')
try:
    st, _, body = one.request('GET', '/healthz')
    b = {s['name']: s for s in json.loads(body)['boot']['selftest']['stages']}
    assert b['batch']['ran'] is False and b['batch']['skipped'] == 'one sequence slot', b
    assert b['prefill']['ok'] and b['decode']['ok'], b
    st, _, body = one.post('/v1/completions', {'prompt': 'Once upon a time', 'max_tokens': 8})
    assert st == 200, body
finally:
    rc, err = one.stop()
assert rc == 0, err

# a service user without a home: Mesa's shader cache goes beside the database
env = {k: v for k, v in os.environ.items() if k not in ('HOME', 'XDG_CACHE_HOME', 'MESA_SHADER_CACHE_DIR')}
d = tempfile.mkdtemp(prefix='ember-state-')
p = subprocess.Popen([EMBER, 'serve', '--model', model, '--port', '0', '--db', os.path.join(d, 'ember.db')],
                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
line = p.stdout.readline()
p.send_signal(2)
out, err = p.communicate(timeout=120)
assert 'listening' in line and p.returncode == 0, (line, err)
cache = os.path.join(d, 'mesa-shader-cache')
files = [f for _, _, fs in os.walk(cache) for f in fs]
assert os.path.isdir(cache) and files, (cache, files)
print('selftest: %s; boot %s; Mesa cache %d files' %
      (', '.join('%s %.1e' % (s['name'], s['nmse']) for s in sel['stages']),
       ', '.join('%s %.0f ms' % (s['name'], s['ms']) for s in h['boot']['stages']), len(files)))
