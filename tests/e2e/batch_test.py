#!/usr/bin/env python3
# batch_test.py — the Batch API through a real `ember serve`, driven by the
# official openai SDK unchanged:
#  - files.create + batches.create + batches.retrieve (polled, bounded) +
#    files.content: 200 greedy /v1/completions requests complete, each
#    custom_id once in the output file, each answer identical to the same
#    request sent alone; the counts and times in OpenAI's shape;
#  - every line is a ledger row naming its batch; `ember usage --group-by
#    batch` sums the job;
#  - a line refused when it runs (a bad parameter) lands in the error file
#    with its status and counts as failed;
#  - validation: a file with bad lines fails the batch before any work, with
#    an error naming each line; a missing file, endpoint or window is a 400;
#  - batches belong to their key (another gets 404), and list in pages;
#  - /metrics shows a running batch's counts and the lines run;
#  - cancel: a running batch stops, keeps what finished, ends cancelled;
#  - `ember batch` submit --wait, status, results, list, cancel;
#  - SIGKILL of the server mid-batch, three times: after each restart the
#    batch goes on, and in the end every line is in the output exactly once
#    and as it is alone.
import io
import json
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, __file__.rsplit('/', 1)[0])
from serve_util import EMBER, Server, jsonl, shared_model  # noqa: E402

import openai  # noqa: E402



def wait(client, bid, want, tries=1200):
    for _ in range(tries):
        b = client.batches.retrieve(bid)
        if b.status in want:
            return b
        time.sleep(0.25)
    raise AssertionError('batch %s stayed %s' % (bid, b.status))


srv = Server(shared_model('stories260K.gguf'), '--parallel', '4', '--require-key',
             keys=(('alice', ()), ('bob', ())))
try:
    def client(name):
        return openai.OpenAI(base_url=srv.base + '/v1', api_key=srv.keys[name], max_retries=0, timeout=120)
    alice, bob = client('alice'), client('bob')
    model = alice.models.list().data[0].id
    words = ['Once upon a time', 'The little dog', 'Lily and Ben', 'One day, a bird', 'The sun was']
    reqs = [{'custom_id': 'req-%03d' % i, 'method': 'POST', 'url': '/v1/completions',
             'body': {'model': model, 'prompt': '%s %d' % (words[i % 5], i), 'max_tokens': 8, 'temperature': 0}}
            for i in range(200)]
    f = alice.files.create(file=('job.jsonl', io.BytesIO(jsonl(reqs))), purpose='batch')
    t0 = time.monotonic()
    b = alice.batches.create(input_file_id=f.id, endpoint='/v1/completions', completion_window='24h',
                             metadata={'job': 'nightly'})
    # answered at once as validating (the file is checked on a thread of its own), then in progress
    assert b.object == 'batch' and b.id.startswith('batch_') and \
        b.status in ('validating', 'in_progress', 'completed'), b
    b = wait(alice, b.id, ('in_progress', 'completed'))
    assert b.metadata == {'job': 'nightly'} and b.input_file_id == f.id and b.request_counts.total == 200, b
    done = wait(alice, b.id, ('completed', 'failed'))
    dt = time.monotonic() - t0
    assert done.status == 'completed', done
    assert (done.request_counts.total, done.request_counts.completed, done.request_counts.failed) == (200, 200, 0)
    assert done.in_progress_at and done.finalizing_at and done.completed_at and done.expires_at, done
    assert done.error_file_id is None and done.output_file_id, done
    out = [json.loads(ln) for ln in alice.files.content(done.output_file_id).text.splitlines()]
    assert sorted(o['custom_id'] for o in out) == [r['custom_id'] for r in reqs], 'each custom_id once'
    by_id = {o['custom_id']: o for o in out}
    for r in reqs:
        o = by_id[r['custom_id']]
        assert o['response']['status_code'] == 200 and o['error'] is None, o
        alone = alice.completions.create(**r['body'])
        got = o['response']['body']
        assert got['object'] == 'text_completion' and got['choices'][0]['text'] == alone.choices[0].text, (o, alone)
        assert got['usage']['completion_tokens'] == alone.usage.completion_tokens
    assert alice.files.retrieve(done.output_file_id).purpose == 'batch_output'
    # every line a ledger row with its batch; `ember usage --group-by batch` sums the job
    for _ in range(100):
        rows = srv.ledger('SELECT status, class, completion_tokens FROM requests WHERE batch_id = \'%s\'' % b.id)
        if len(rows) == 200 and all(r['status'] == 'completed' for r in rows):
            break
        time.sleep(0.1)
    assert len(rows) == 200 and all(r['class'] == 'background' and r['status'] == 'completed' for r in rows), rows[:3]
    tokens = sum(r['completion_tokens'] for r in rows)
    use = subprocess.run([EMBER, 'usage', '--group-by', 'batch', '--format', 'json', '--db', srv.db],
                         capture_output=True, text=True, timeout=60)
    groups = {g['group']: g for g in json.loads(use.stdout)['groups']}
    assert groups[b.id]['requests'] == 200 and groups[b.id]['completion_tokens'] == tokens, (use.stdout, tokens)

    # a line refused as it runs: the error file, counted failed
    mixed = [{'custom_id': 'ok-1', 'method': 'POST', 'url': '/v1/completions',
              'body': {'prompt': 'Once', 'max_tokens': 4, 'temperature': 0}},
             {'custom_id': 'bad-1', 'method': 'POST', 'url': '/v1/completions',
              'body': {'prompt': 'Once', 'max_tokens': 4, 'temperature': 7}}]
    f2 = alice.files.create(file=('mixed.jsonl', jsonl(mixed)), purpose='batch')
    m = wait(alice, alice.batches.create(input_file_id=f2.id, endpoint='/v1/completions',
                                         completion_window='24h').id, ('completed', 'failed'))
    assert m.status == 'completed' and (m.request_counts.completed, m.request_counts.failed) == (1, 1), m
    errs = [json.loads(ln) for ln in alice.files.content(m.error_file_id).text.splitlines()]
    assert len(errs) == 1 and errs[0]['custom_id'] == 'bad-1' and errs[0]['response']['status_code'] == 400, errs
    assert errs[0]['response']['body']['error']['param'] == 'temperature', errs

    # validation: every bad line named, nothing run
    bad = [{'custom_id': 'a', 'method': 'POST', 'url': '/v1/completions', 'body': {'prompt': 'x'}},
           {'custom_id': 'a', 'method': 'POST', 'url': '/v1/completions', 'body': {'prompt': 'x'}},
           {'custom_id': 'c', 'method': 'GET', 'url': '/v1/completions', 'body': {'prompt': 'x'}},
           {'custom_id': 'd', 'method': 'POST', 'url': '/v1/chat/completions', 'body': {'prompt': 'x'}},
           {'custom_id': 'e', 'method': 'POST', 'url': '/v1/completions', 'body': {'model': 'gpt-4o'}},
           {'custom_id': 'f', 'method': 'POST', 'url': '/v1/completions', 'body': {'prompt': 'x', 'stream': True}}]
    f3 = alice.files.create(file=('bad.jsonl', jsonl(bad) + b'{not json\n'), purpose='batch')
    v = wait(alice, alice.batches.create(input_file_id=f3.id, endpoint='/v1/completions',
                                         completion_window='24h').id, ('failed', 'in_progress', 'completed'))
    assert v.status == 'failed' and v.failed_at and v.request_counts.total == 0, v
    lines = sorted((e.line, e.code) for e in v.errors.data)
    assert lines == [(2, 'duplicate_custom_id'), (3, 'invalid_method'), (4, 'invalid_url'), (5, 'model_not_found'),
                     (6, 'invalid_request'), (7, 'invalid_json_line')], lines
    for kw, param in (({'input_file_id': 'file-000000000000000000000000'}, 'input_file_id'),
                      ({'endpoint': '/v1/embeddings'}, 'endpoint'), ({'completion_window': '1h'}, 'completion_window')):
        args = dict(input_file_id=f.id, endpoint='/v1/completions', completion_window='24h')
        args.update(kw)
        try:
            alice.batches.create(**args)
            raise AssertionError('accepted %r' % kw)
        except (openai.BadRequestError, openai.NotFoundError) as e:
            assert e.body['param'] == param, e.body
    try:   # another key's file
        bob.batches.create(input_file_id=f.id, endpoint='/v1/completions', completion_window='24h')
        raise AssertionError('bob used alice\'s file')
    except openai.NotFoundError:
        pass

    # ownership and lists
    try:
        bob.batches.retrieve(b.id)
        raise AssertionError('bob saw alice\'s batch')
    except openai.NotFoundError:
        pass
    assert list(bob.batches.list()) == []
    mine = [x.id for x in alice.batches.list()]
    assert mine[-1] == b.id and len(mine) == 3, mine
    page = alice.batches.list(limit=1)
    assert len(page.data) == 1 and page.has_more and alice.batches.list(limit=1, after=page.data[0].id).data

    # cancel: stops, keeps the finished lines
    long = [{'custom_id': 'l-%d' % i, 'method': 'POST', 'url': '/v1/completions',
             'body': {'prompt': 'Once upon a time %d' % i, 'max_tokens': 4 if i < 2 else 400, 'temperature': 0,
                      'ignore_eos': True}} for i in range(60)]
    f4 = alice.files.create(file=('long.jsonl', jsonl(long)), purpose='batch')
    lb = wait(alice, alice.batches.create(input_file_id=f4.id, endpoint='/v1/completions',
                                          completion_window='24h').id, ('in_progress',))
    text = srv.request('GET', '/metrics', headers={'Authorization': 'Bearer ' + srv.keys['alice']})[2].decode()
    assert 'ember_batch_requests{batch="%s",state="total"} 60\n' % lb.id in text, text
    assert int(re.search(r'^ember_batch_lines_total (\d+)$', text, re.M).group(1)) >= 200, text
    for _ in range(1200):   # the two short lines finish first
        if alice.batches.retrieve(lb.id).request_counts.completed >= 2:
            break
        time.sleep(0.05)
    c = alice.batches.cancel(lb.id)
    assert c.status in ('cancelling', 'cancelled') and c.cancelling_at, c
    c = wait(alice, lb.id, ('cancelled',))
    assert c.cancelled_at and 2 <= c.request_counts.completed < 60, c
    kept = alice.files.content(c.output_file_id).text.splitlines() if c.output_file_id else []
    assert len(kept) == c.request_counts.completed, (len(kept), c.request_counts)
    try:
        alice.batches.cancel(b.id)
        raise AssertionError('a completed batch was cancelled')
    except openai.ConflictError:
        pass
    # `ember batch`: submit --wait, status, results, list, cancel, a refused file
    def cli(*args):
        return subprocess.run([EMBER, 'batch'] + list(args) + ['--url', srv.base, '--api-key', srv.keys['alice']],
                              capture_output=True, text=True, timeout=600)
    path = os.path.join(srv.dir, 'cli.jsonl')
    open(path, 'wb').write(jsonl(reqs[:10]))
    sub = cli('submit', path, '--wait')
    assert sub.returncode == 0, (sub.returncode, sub.stderr)
    cid = sub.stdout.split('\n')[0]
    assert cid.startswith('batch_') and ' completed  10/10 done, 0 failed' in sub.stdout, sub.stdout
    assert '[##############################] 10/10 completed' in sub.stderr, sub.stderr
    res = cli('results', cid)
    assert res.returncode == 0 and sorted(json.loads(ln)['custom_id'] for ln in res.stdout.splitlines()) == \
        [r['custom_id'] for r in reqs[:10]], res
    assert cli('results', cid, '--errors').stdout == ''
    st = cli('status', cid)
    assert st.returncode == 0 and st.stdout.startswith(cid + '  completed'), st
    assert cid in cli('list').stdout
    cc = cli('cancel', cid)
    assert cc.returncode == 1 and '409' in cc.stderr and 'completed' in cc.stderr, cc
    open(path, 'wb').write(jsonl(bad[:2]))
    refused = cli('submit', path)
    assert refused.returncode == 1 and 'line 2: duplicate_custom_id' in refused.stdout, refused
    gone = cli('status', 'batch_000000000000000000000000')
    assert gone.returncode == 1 and '404' in gone.stderr, gone
    print('batch: 200 lines in %.1f s (%.0f lines/s), identical to alone; validation, errors, cancel (%d of 60 kept)'
          % (dt, 200 / dt, c.request_counts.completed))
finally:
    rc, err = srv.stop()
assert rc == 0, err

# SIGKILL mid-batch, three times at different points, then let it finish:
# every line in the output exactly once, each as it is alone
db, keys = srv.db, srv.keys
reqs = [{'custom_id': 'k-%03d' % i, 'method': 'POST', 'url': '/v1/completions',
         'body': {'prompt': '%s %d' % (words[i % 5], i), 'max_tokens': 24, 'temperature': 0, 'ignore_eos': True}}
        for i in range(120)]
srv = Server(shared_model('stories260K.gguf'), '--parallel', '4', '--require-key', db=db)
srv.keys = keys
cl = client('alice')
f = cl.files.create(file=('kill.jsonl', jsonl(reqs)), purpose='batch')
bid = cl.batches.create(input_file_id=f.id, endpoint='/v1/completions', completion_window='24h').id
seen = []
for kill_at in (15, 50, 85):
    for _ in range(2400):
        n = cl.batches.retrieve(bid).request_counts.completed
        if n >= kill_at:
            break
        time.sleep(0.02)
    srv.p.kill()
    srv.p.wait()
    srv.errf.close()
    seen.append(n)
    srv = Server(shared_model('stories260K.gguf'), '--parallel', '4', '--require-key', db=db)
    srv.keys = keys
    cl = client('alice')
    after = cl.batches.retrieve(bid)
    assert after.request_counts.completed >= n and after.status in ('in_progress', 'completed'), (n, after)
try:
    done = wait(cl, bid, ('completed', 'failed'))
    assert done.status == 'completed' and done.request_counts.completed == 120 and done.request_counts.failed == 0, done
    out = [json.loads(ln) for ln in cl.files.content(done.output_file_id).text.splitlines()]
    assert sorted(o['custom_id'] for o in out) == [r['custom_id'] for r in reqs], 'a line lost or run twice'
    by_id = {o['custom_id']: o['response']['body']['choices'][0]['text'] for o in out}
    for r in reqs:
        b = r['body']
        alone = cl.completions.create(model=model, prompt=b['prompt'], max_tokens=b['max_tokens'], temperature=0,
                                      extra_body={'ignore_eos': True})
        assert by_id[r['custom_id']] == alone.choices[0].text, r
    print('batch: killed at %s of 120 lines done; resumed each time, every line once' % seen)
finally:
    rc, err = srv.stop()
assert rc == 0, err
