#!/usr/bin/env python3
# batchdown_test.py — the device failing under a running batch
# (EMBER_VK_FAULT=lost:60@1,alloc:1@2: the first device loses itself at its 60th
# wait, mid-batch, and the rebuild that follows cannot allocate, so the
# device is down until the scheduler's retry 5 s later brings it back):
#  - the lines in flight when it failed, and any that would have started
#    while it was down, are not recorded as failures: the log says each
#    runs again when the device is back, and no line starts while
#    /healthz says device_down;
#  - once the device is back the batch completes by itself with every line
#    succeeded — each custom_id once in the output, no error file, each
#    answer the text its request gives alone — and no KV block is held.
import io
import json
import os
import sys
import time

sys.path.insert(0, __file__.rsplit('/', 1)[0])
from serve_util import Server, completion_lines, jsonl, shared_model  # noqa: E402

import openai  # noqa: E402

N = 12
env = dict(os.environ, EMBER_VK_FAULT='lost:60@1,alloc:1@2')
srv = Server(shared_model('stories260K.gguf'), '--parallel', '2', '--ctx', '256', env=env, keys=(('alice', ()),))
try:
    cl = openai.OpenAI(base_url=srv.base + '/v1', api_key=srv.keys['alice'], max_retries=0, timeout=120)
    model = cl.models.list().data[0].id
    reqs = completion_lines(model, N, 24)
    f = cl.files.create(file=('job.jsonl', io.BytesIO(jsonl(reqs))), purpose='batch')
    b = cl.batches.create(input_file_id=f.id, endpoint='/v1/completions', completion_window='24h')
    saw_down = False
    started_while_down = []
    done = b
    for _ in range(2400):   # bounded: the batch ends (the device comes back by itself)
        done = cl.batches.retrieve(b.id)
        h = json.loads(srv.request('GET', '/healthz')[2])
        if h['status'] == 'device_down':
            saw_down = True
            running = h['requests']['running']['background']
            if running:
                started_while_down.append(running)
        if done.status in ('completed', 'failed', 'expired', 'cancelled'):
            break
        time.sleep(0.1)
    log = open(srv.err_path).read()
    again = log.count('the device failed under it; it runs again when the device is back')
    assert saw_down and 'could not be rebuilt' in log, log[-3000:]
    assert again >= 1, log[-3000:]
    assert not started_while_down, started_while_down
    assert done.status == 'completed', done
    errors = cl.files.content(done.error_file_id).text if done.error_file_id else ''
    assert (done.request_counts.total, done.request_counts.completed, done.request_counts.failed) == (N, N, 0), \
        (done, errors[:1500], [ln for ln in log.splitlines() if 'device' in ln or 'batch' in ln][-20:])
    assert done.error_file_id is None, done.error_file_id
    out = [json.loads(ln) for ln in cl.files.content(done.output_file_id).text.splitlines()]
    assert sorted(o['custom_id'] for o in out) == [r['custom_id'] for r in reqs], 'each custom_id once'
    by_id = {o['custom_id']: o for o in out}
    for r in reqs:
        o = by_id[r['custom_id']]
        alone = cl.completions.create(**r['body'])
        assert o['response']['status_code'] == 200 and \
            o['response']['body']['choices'][0]['text'] == alone.choices[0].text, (o, alone)
    h = json.loads(srv.request('GET', '/healthz')[2])
    assert h['status'] == 'ok' and h['kv_blocks']['used'] == 0, h
finally:
    rc, err = srv.stop()
assert rc == 0, err
print('batchdown: the device lost under a %d-line batch and down until rebuilt: %d line(s) ran again, none '
      'started while down, the batch completed %d/%d/0 with the answers of each request alone' % (N, again, N, N))
