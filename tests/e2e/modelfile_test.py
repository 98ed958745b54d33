#!/usr/bin/env python3
# modelfile_test.py — the model file changed on disk under a live `ember
# serve` (a copy of stories260K), twice: truncated, and written over in
# place with its size and times kept (another model copied over it with
# cp -p: only the sampled checksum, core/model/gguf.c, tells). Serving goes on
# from the weights on the device and the chat template copied at start
# (nothing reads the mapping); when the device then fails
# (EMBER_VK_FAULT=lost:40) the rebuild, which would upload the weights from
# the file again, sees the file changed and refuses, saying so in the log;
# requests get a clear error, never a crash or a hang, and the server still
# stops with exit 0.
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, __file__.rsplit('/', 1)[0])
from serve_util import Server, shared_model  # noqa: E402



def truncate(path):
    os.truncate(path, 4096)   # an admin copies a new model over the old one, in place


def overwrite_keeping_times(path):
    st = os.stat(path)
    with open(path, 'r+b') as f:
        data = f.read()
        f.seek(0)
        f.write(bytes(b ^ 0x5a for b in data))   # same size, other bytes
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))   # and the times put back


def run(change, reason):
    tmp = tempfile.mkdtemp(prefix='ember-modelfile-')
    model = os.path.join(tmp, 'model.gguf')
    shutil.copy(shared_model('stories260K.gguf'), model)
    os.environ['EMBER_VK_FAULT'] = 'lost:40'
    try:
        srv = Server(model, '--ctx', '256', '--parallel', '2')
    finally:
        del os.environ['EMBER_VK_FAULT']
    try:
        st, _, r = srv.post('/v1/chat/completions', {'messages': [{'role': 'user', 'content': 'Hi'}], 'max_tokens': 2})
        ok_before = st
        change(model)
        statuses = []
        err = ''
        for _ in range(400):   # bounded: until the device has failed and its rebuild was refused
            st, _, r = srv.post('/v1/chat/completions', {'messages': [{'role': 'user', 'content': 'Hi'}],
                                                         'max_tokens': 4})
            statuses.append(st)
            if st != 200:
                assert isinstance(r, dict) and r['error']['message'], r   # a clear error, in OpenAI's shape
            err = open(srv.err_path).read()
            if 'could not be rebuilt' in err:
                break
            time.sleep(0.02)
        assert 'could not be rebuilt' in err and reason in err, err[-2000:]
        assert 'restart ember serve' in err, err[-2000:]
        assert 200 in statuses, statuses   # served from the device after the change, before the fault
        st, _, body = srv.request('GET', '/healthz')
        assert st in (200, 503), (st, body)   # alive and answering
    finally:
        rc, err = srv.stop()
    assert rc == 0, (rc, err[-2000:])
    shutil.rmtree(tmp, ignore_errors=True)
    print('modelfile: %s under a live server: %d answered after it, then the rebuild refused (%r); '
          'first answer %d; exit 0' % (change.__name__, statuses.count(200), reason, ok_before))


run(truncate, 'the model file changed size on disk')
run(overwrite_keeping_times, "the model file's contents changed on disk")
print('modelfile: ok')
