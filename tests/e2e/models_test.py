#!/usr/bin/env python3
# models_test.py — the model library (`ember models`, firmware/library.c):
#  - add: a file checked whole before it goes in (not a GGUF, a bad name, a
#    name taken: exit 2, one "ember: " line, nothing written); a copy (its
#    bytes the file's) or --link (a symbolic link); ember vram's fit printed;
#  - list: every model with its architecture, weight type, context and what
#    it can do — SmolLM2 chats, Qwen2.5-Coder calls tools, MiniLM gives
#    embeddings and rerank but no chat; --json the same; a broken file is
#    listed with its error (exit 1) and the others still;
#  - info NAME (and --json): the shape, the link's target, the tool-call
#    format;
#  - the folder from a --config file's [models] dir;
#  - `ember serve --models-dir D --model NAME` serves that model (its name
#    in /v1/models); an unknown name exits 2 naming the library's models;
#  - rm takes one out (the link, not its target).
import filecmp
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, __file__.rsplit('/', 1)[0])
from serve_util import EMBER, Server, chat_model, shared_model, tools_model  # noqa: E402

smol = chat_model()
minilm = shared_model('all-MiniLM-L6-v2-F16.gguf')
coder = tools_model()
tmp = tempfile.mkdtemp(prefix='ember-models-')
lib = os.path.join(tmp, 'lib')


def models(*args, check=None):
    r = subprocess.run([EMBER, 'models', '--dir', lib] + list(args), capture_output=True, text=True, timeout=600)
    if check is not None:
        assert r.returncode == check, (args, r.returncode, r.stdout, r.stderr)
    return r


def refused(args, needle):
    r = models(*args, check=2)
    err = r.stderr.strip()
    assert err.startswith('ember: ') and err.count('\n') == 0 and needle in err, (args, err)


# add: refusals first, nothing written
junk = os.path.join(tmp, 'junk.gguf')
with open(junk, 'wb') as f:
    f.write(b'GGUF' + b'\0' * 60)
refused(['add', junk], 'is refused')
refused(['add', '/etc/hostname'], 'not a GGUF')
refused(['add', smol, '--name', '../escape'], 'cannot name a model')
assert not os.path.exists(lib) or not os.listdir(lib), os.listdir(lib)
r = models('add', smol, '--name', 'smollm2', check=0)
assert 'added smollm2' in r.stdout and 'KV pool' in r.stdout and 'chat' in r.stdout, r.stdout
assert filecmp.cmp(smol, os.path.join(lib, 'smollm2.gguf'), shallow=False), 'the copy differs'
refused(['add', smol, '--name', 'smollm2'], 'already has a model')
models('add', minilm, '--link', check=0)
assert os.path.islink(os.path.join(lib, 'all-MiniLM-L6-v2-F16.gguf'))
models('add', coder, '--link', '--name', 'coder', check=0)

# list and info
r = models('list', check=0)
rows = {ln.split()[0]: ln for ln in r.stdout.splitlines()[1:]}
assert sorted(rows) == ['all-MiniLM-L6-v2-F16', 'coder', 'smollm2'], r.stdout
assert 'llama' in rows['smollm2'] and 'Q4_1' in rows['smollm2'] and 'chat' in rows['smollm2'], rows
assert 'tools' in rows['coder'] and 'qwen2' in rows['coder'], rows
assert 'bert' in rows['all-MiniLM-L6-v2-F16'] and 'rerank' in rows['all-MiniLM-L6-v2-F16'], rows
assert 'chat' not in rows['all-MiniLM-L6-v2-F16'], rows
js = json.loads(models('list', '--json', check=0).stdout)
caps = {m['name']: m['capabilities'] for m in js['models']}
assert caps == {'all-MiniLM-L6-v2-F16': ['embeddings', 'rerank'], 'coder': ['chat', 'tools', 'embeddings'],
                'smollm2': ['chat', 'embeddings']}, caps
info = models('info', 'coder', check=0).stdout
assert '-> ' + os.path.realpath(coder) in info and 'tool calls    written as <tool_call>' in info, info
ij = json.loads(models('info', 'all-MiniLM-L6-v2-F16', '--json', check=0).stdout)
assert ij['architecture'] == 'bert' and ij['context'] == 512 and ij['generates_text'] is False, ij
refused(['info', 'nope'], 'smollm2')

# a broken file among them: listed with its error, the others still
with open(os.path.join(lib, 'broken.gguf'), 'wb') as f:
    f.write(b'not a model')
r = models('list')
assert r.returncode == 1 and 'broken' in r.stdout and 'error:' in r.stdout and 'smollm2' in r.stdout, r.stdout
os.unlink(os.path.join(lib, 'broken.gguf'))

# the folder from a config file
conf = os.path.join(tmp, 'ember.conf')
with open(conf, 'w') as f:
    f.write('[models]\ndir = %s\n' % lib)
r = subprocess.run([EMBER, 'models', '--config', conf, 'list'], capture_output=True, text=True, timeout=600)
assert r.returncode == 0 and 'smollm2' in r.stdout, (r.stdout, r.stderr)

# serve by name
srv = Server(None, argv=['--models-dir', lib, '--model', 'smollm2', '--port', '0', '--db',
                         os.path.join(tmp, 'ember.db')])
try:
    st, _, body = srv.request('GET', '/v1/models')
    ids = [m['id'] for m in json.loads(body)['data']]
    assert st == 200 and ids and 'smollm2' in ids[0].lower(), ids
finally:
    rc, err = srv.stop()
assert rc == 0, err
r = subprocess.run([EMBER, 'serve', '--models-dir', lib, '--model', 'nosuch', '--port', '0', '--db',
                    os.path.join(tmp, 'x.db')], capture_output=True, text=True, timeout=600)
assert r.returncode == 2 and "no model 'nosuch'" in r.stderr and 'coder' in r.stderr, r.stderr

# rm: the link goes, its target stays
models('rm', 'coder', check=0)
assert not os.path.lexists(os.path.join(lib, 'coder.gguf')) and os.path.exists(coder)
refused(['rm', 'coder'], "no model 'coder'")
print('models: %d in the library; serve by name ok' % len(json.loads(models('list', '--json').stdout)['models']))
