#!/usr/bin/env python3
# diskfull_test.py — the disk full under a live `ember serve` while a batch
# runs and clients upload files. The server's file-size limit
# (RLIMIT_FSIZE, lowered from outside with prlimit(2) to below where SQLite
# and the files directory write) makes every write it makes to the
# database and to ember.db.files/ fail, as on a full disk:
#  - a file upload meanwhile is refused with a clear error and leaves
#    nothing behind (no file listed, no bytes in the files directory);
#  - the batch's lines that finish cannot be recorded: the log says each
#    runs again, /healthz says the storage is degraded, and the runner
#    does not spin on it (a try a second, not one per service turn);
#  - then, the limit lifted, the files directory is made unusable (a plain
#    file in its place) while the batch ends: its output cannot be written,
#    it stays finalizing and tries again once a second (not stuck, not
#    spinning);
#  - once the directory is back the same upload succeeds, and the batch
#    completes by itself: every custom_id exactly once in the output file,
#    each answer as the request gives alone, counts 40/40/0.
import io
import json
import os
import resource
import sys
import time

sys.path.insert(0, __file__.rsplit('/', 1)[0])
from serve_util import Server, completion_lines, jsonl, shared_model  # noqa: E402

import openai  # noqa: E402

N = 40
LIMIT = 32768
srv = Server(shared_model('stories260K.gguf'), '--parallel', '2', '--ctx', '256', '--require-key',
             keys=(('alice', ()),))



def storage_status():
    st = json.loads(srv.request('GET', '/healthz')[2]).get('storage')
    return st.get('status') if isinstance(st, dict) else None


def files_on_disk():
    d = srv.db + '.files'
    return sorted(os.listdir(d)) if os.path.isdir(d) else []


try:
    cl = openai.OpenAI(base_url=srv.base + '/v1', api_key=srv.keys['alice'], max_retries=0, timeout=120)
    model = cl.models.list().data[0].id
    reqs = completion_lines(model, N, 200)
    f = cl.files.create(file=('job.jsonl', io.BytesIO(jsonl(reqs))), purpose='batch')
    b = cl.batches.create(input_file_id=f.id, endpoint='/v1/completions', completion_window='24h')
    for _ in range(1200):
        b = cl.batches.retrieve(b.id)
        if b.status != 'validating':
            break
        time.sleep(0.05)
    assert b.status == 'in_progress' and b.request_counts.completed < N // 2, b
    on_disk = files_on_disk()

    # the disk fills
    soft, hard = resource.prlimit(srv.p.pid, resource.RLIMIT_FSIZE)
    assert os.path.getsize(srv.err_path) < LIMIT // 2 and os.path.getsize(srv.db) > LIMIT
    resource.prlimit(srv.p.pid, resource.RLIMIT_FSIZE, (LIMIT, hard))
    t_full = time.monotonic()
    upload = jsonl(reqs[:1]) * 2000   # ~300 KB: past the limit
    try:
        cl.files.create(file=('more.jsonl', io.BytesIO(upload)), purpose='batch')
        raise AssertionError('an upload past the limit was taken')
    except openai.APIStatusError as e:
        assert e.status_code >= 500 and 'more.jsonl' not in str(e.body), (e.status_code, e.body)
        upload_error = e.body['message'] if isinstance(e.body, dict) else str(e.body)
    assert files_on_disk() == on_disk, (files_on_disk(), on_disk)   # no bytes left behind
    # lines finish and cannot be recorded (bounded wait for two of them)
    log = ''
    for _ in range(600):
        log = open(srv.err_path).read()
        if log.count('could not be recorded (it runs again)') >= 2 and storage_status() == 'degraded':
            break
        time.sleep(0.1)
    assert log.count('could not be recorded (it runs again)') >= 2, log[-2000:]
    assert storage_status() == 'degraded'
    assert cl.batches.retrieve(b.id).status == 'in_progress'
    time.sleep(1.5)   # the fault holds a while: the runner tries once a second, not every turn
    held = time.monotonic() - t_full
    log = open(srv.err_path).read()
    fails = log.count('could not be recorded (it runs again)')
    resource.prlimit(srv.p.pid, resource.RLIMIT_FSIZE, (soft, hard))
    # lines run at most 2 at once: a spin would record-fail many lines a second;
    # one look a second keeps it near 2 per second (plus those finishing as it starts)
    assert fails <= 4 * (held + 2), (fails, held)

    # the disk has room again — but the files directory is unusable (a
    # plain file in its place) when the batch ends: its output cannot be
    # written, it waits in finalizing and tries again once a second
    d = srv.db + '.files'
    os.rename(d, d + '.away')
    open(d, 'w').close()
    fin = b
    for _ in range(2400):
        fin = cl.batches.retrieve(b.id)
        if fin.status != 'in_progress' or 'its output file cannot be written' in open(srv.err_path).read():
            break
        time.sleep(0.25)
    t_fin = time.monotonic()
    time.sleep(2)
    fin = cl.batches.retrieve(b.id)
    tries = open(srv.err_path).read().count('its output file cannot be written')
    fin_held = time.monotonic() - t_fin
    assert fin.status == 'finalizing' and fin.request_counts.completed == N and 1 <= tries <= fin_held + 3, \
        (fin.status, tries, fin_held)
    os.remove(d)
    os.rename(d + '.away', d)
    # back: the same upload goes through, the batch completes by itself
    more = cl.files.create(file=('more.jsonl', io.BytesIO(upload)), purpose='batch')
    assert more.bytes == len(upload)
    done = b
    for _ in range(2400):
        done = cl.batches.retrieve(b.id)
        if done.status in ('completed', 'failed', 'expired', 'cancelled'):
            break
        time.sleep(0.25)
    assert done.status == 'completed', done
    assert (done.request_counts.total, done.request_counts.completed, done.request_counts.failed) == (N, N, 0), done
    out = [json.loads(ln) for ln in cl.files.content(done.output_file_id).text.splitlines()]
    assert sorted(o['custom_id'] for o in out) == [r['custom_id'] for r in reqs], 'each custom_id once'
    by_id = {o['custom_id']: o for o in out}
    for r in reqs[:3] + reqs[-2:]:
        o = by_id[r['custom_id']]
        alone = cl.completions.create(**r['body'])
        assert o['response']['status_code'] == 200 and \
            o['response']['body']['choices'][0]['text'] == alone.choices[0].text, (o, alone)
    for _ in range(100):
        if storage_status() == 'ok':
            break
        time.sleep(0.1)
    assert storage_status() == 'ok'
    h = json.loads(srv.request('GET', '/healthz')[2])
    assert h['kv_blocks']['used'] == 0 and h['requests']['running'] == {'interactive': 0, 'background': 0}, h
finally:
    rc, err = srv.stop()
assert rc == 0, err
print('diskfull: %.1f s of a full disk under a %d-line batch: the upload refused (%s), %d line results could not '
      'be recorded and ran again; then the files directory unusable at its end: %d tries to write the output in '
      '%.1f s, finalizing; after: the upload taken, the batch completed, each line once' %
      (held, N, upload_error[:80], fails, tries, fin_held))
