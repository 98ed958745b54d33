#!/usr/bin/env python3
# utilization_test.py — the busy time a real `ember serve` remembers, and
# the usage by hour, against what the server itself reports:
#  - GET /api/utilization: a key needed under --require-key (401), GET only
#    (405), each bad parameter a 400 naming it;
#  - after requests (ignore_eos, so every sampled token is a completion
#    token): generated tokens = the ledger's completion tokens = the
#    ember_generation_tokens_total counters; busy seconds = the scheduler's
#    ember_busy_seconds_total at that moment; up time = the time the server
#    has served (within the start-up and the query); utilization, tokens
#    per busy second and both costs as docs/api.md defines them, the
#    measured cost above the full-load one on this mostly idle box; day and
#    hour buckets add up to the same total; a window before the server ran
#    is empty;
#  - the ledger's `utilization` rows after the server stopped hold its whole
#    run (the last span is recorded at the stop), and a second run in the
#    same hour adds to the same row;
#  - GET /api/usage?group_by=hour: each hour's requests and tokens equal the
#    ledger's rows received in that hour; queue-time percentiles present.
import datetime
import json
import sys
import time
import urllib.parse

sys.path.insert(0, __file__.rsplit('/', 1)[0])
from serve_util import Server, shared_model  # noqa: E402

model = shared_model('stories260K.gguf')


def get(srv, path, headers, **q):
    st, h, body = srv.request('GET', path + ('?' + urllib.parse.urlencode(q) if q else ''), headers=headers)
    return st, (json.loads(body) if h.get('content-type', '').startswith('application/json') else body)


def close(a, b, rel=1e-6, abs_=1e-6):
    return abs(a - b) <= max(abs_, rel * max(abs(a), abs(b)))


t_start = time.time()
srv = Server(model, '--ctx', '256', '--require-key', keys=[('alice', ()), ('root', ('--admin',))])
t_ready = time.time()
srv2 = None
try:
    A = {'Authorization': 'Bearer ' + srv.keys['alice']}
    R = {'Authorization': 'Bearer ' + srv.keys['root']}

    # ---- the doors ----------------------------------------------------------------
    st, body = get(srv, '/api/utilization', None)
    assert st == 401 and body['error']['code'] == 'missing_api_key', body
    st, h, body = srv.request('POST', '/api/utilization', raw=b'', headers=A)
    assert st == 405, (st, body)
    for q, param in ((dict(bucket='week'), 'bucket'), (dict(gpu_cost_per_hour='-1'), 'gpu_cost_per_hour'),
                     (dict(gpu_cost_per_hour='two'), 'gpu_cost_per_hour'), (dict(gpu_cost_per_hour='nan'), 'gpu_cost_per_hour'),
                     (dict(since='2024-13-01'), 'since'), (dict(since='2024-05-02', until='2024-05-01'), 'until'),
                     (dict(colour='red'), 'colour')):
        st, body = get(srv, '/api/utilization', A, **q)
        assert st == 400 and body['error']['param'] == param and body['error']['message'], (q, st, body)
    st, h, body = srv.request('GET', '/api/utilization?bucket=day&bucket=hour', headers=A)
    assert st == 400 and json.loads(body)['error']['param'] == 'bucket', body

    # ---- requests -------------------------------------------------------------------
    n = 0
    for who, prompt, mt in ((A, 'Once upon a time', 40), (A, 'The cat sat', 30), (R, 'A dog', 50),
                            (A, 'Lily went to the park', 60)):
        st, h, body = srv.post('/v1/completions', {'prompt': prompt, 'max_tokens': mt, 'ignore_eos': True},
                               headers=who)
        assert st == 200 and body['usage']['completion_tokens'] == mt, body
        n += 1
    rows = srv.ledger_settled(n)
    completion = sum(r['completion_tokens'] for r in rows)
    prompt_computed = sum(r['prompt_tokens'] - r['cached_tokens'] for r in rows)

    busy_before = srv.metric_sum(headers=R, name='ember_busy_seconds_total')
    gen_metric = srv.metric_sum(headers=R, name='ember_generation_tokens_total')
    t_q0 = time.time()
    st, u = get(srv, '/api/utilization', A, gpu_cost_per_hour='2')
    t_query = time.time()
    busy_after = srv.metric_sum(headers=R, name='ember_busy_seconds_total')
    assert st == 200, u
    assert u['bucket'] == 'hour' and u['gpu_cost_per_hour'] == 2.0 and u['since_ms'] is None, u
    tot = u['total']
    assert tot['period'] == 'total' and tot['start_ms'] is None, tot
    assert tot['generated_tokens'] == completion == gen_metric, (tot, completion, gen_metric)
    # the scheduler counts a prompt's last position with the token it produces
    assert prompt_computed - n <= tot['prefilled_tokens'] <= prompt_computed, (tot, prompt_computed)
    assert tot['steps'] >= completion / 4, tot   # one sequence at a time here, mostly
    assert busy_before - 1e-6 <= tot['busy_s'] <= busy_after + 1e-6, (tot, busy_before, busy_after)
    assert 0 < tot['busy_s'] < tot['up_s'], tot
    # up time: from the server's start (before it printed its URL) to the query
    assert t_q0 - t_ready - 0.05 <= tot['up_s'] <= t_query - t_start + 0.05, \
        (tot['up_s'], t_ready - t_start, t_q0 - t_start, t_query - t_start)
    assert close(tot['utilization'], tot['busy_s'] / tot['up_s'], 1e-5), tot
    assert close(tot['busy_tokens_per_s'], tot['generated_tokens'] / tot['busy_s'], 1e-5), tot
    full = 2 * tot['busy_s'] / 3600 / tot['generated_tokens'] * 1e6
    measured = 2 * tot['up_s'] / 3600 / tot['generated_tokens'] * 1e6
    assert close(tot['cost_per_1m_full_load'], full, 1e-4), (tot, full)
    assert close(tot['cost_per_1m_measured'], measured, 1e-4), (tot, measured)
    assert close(tot['cost_per_1m_measured'] * tot['utilization'], tot['cost_per_1m_full_load'], 1e-4), tot
    assert tot['cost_per_1m_measured'] > tot['cost_per_1m_full_load'], tot   # mostly idle
    hours = u['buckets']
    assert 1 <= len(hours) <= 2, hours   # the run may straddle an hour boundary
    for b in hours:
        start = datetime.datetime.fromtimestamp(b['start_ms'] / 1000, datetime.timezone.utc)
        assert b['period'] == start.strftime('%Y-%m-%dT%H:00Z') and start.minute == 0 and start.second == 0, b
        assert b['busy_s'] <= b['up_s'] + 1e-6, b
    assert close(sum(b['up_s'] for b in hours), tot['up_s'], 1e-6, 2e-3), hours
    assert sum(b['generated_tokens'] for b in hours) == tot['generated_tokens'], hours

    # without a price: no costs; by day: the same total
    st, d = get(srv, '/api/utilization', A, bucket='day')
    assert st == 200 and d['bucket'] == 'day' and d['gpu_cost_per_hour'] is None, d
    assert d['total']['cost_per_1m_full_load'] is None and d['total']['cost_per_1m_measured'] is None, d
    assert 1 <= len(d['buckets']) <= 2 and len(d['buckets'][0]['period']) == 10, d
    assert d['total']['generated_tokens'] == tot['generated_tokens'], d
    assert d['total']['up_s'] >= tot['up_s'], (d['total'], tot)   # asked later
    # a window before the server ran: nothing
    st, old = get(srv, '/api/utilization', A, since='2020-01-01', until='2020-01-02')
    assert st == 200 and old['buckets'] == [] and old['total']['up_s'] == 0, old
    assert old['total']['utilization'] is None and old['since_ms'] == 1577836800000, old

    # ---- usage by hour against the ledger ---------------------------------------------
    full_rows = srv.ledger('SELECT received_ms, prompt_tokens, cached_tokens, completion_tokens, queue_ms '
                           'FROM requests')
    want = {}
    for r in full_rows:
        h = datetime.datetime.fromtimestamp(r['received_ms'] / 1000, datetime.timezone.utc).strftime('%Y-%m-%dT%H:00Z')
        g = want.setdefault(h, {'requests': 0, 'prompt_tokens': 0, 'cached_tokens': 0, 'completion_tokens': 0})
        g['requests'] += 1
        for k in ('prompt_tokens', 'cached_tokens', 'completion_tokens'):
            g[k] += r[k]
    st, us = get(srv, '/api/usage', R, group_by='hour')
    assert st == 200 and us['group_by'] == 'hour', us
    got = {g['group']: {k: g[k] for k in ('requests', 'prompt_tokens', 'cached_tokens', 'completion_tokens')}
           for g in us['groups']}
    assert got == want, (got, want)
    qs = sorted(r['queue_ms'] for r in full_rows)
    assert close(us['total']['queue_p99_ms'], qs[-1], 1e-3, 1e-3), (us['total'], qs)
    st, h, csv = srv.request('GET', '/api/usage?group_by=hour&format=csv', headers=R)
    assert st == 200 and csv.decode().split('\r\n')[0].endswith(',queue_p50_ms,queue_p99_ms'), csv

    # ---- the ledger after the stop: the whole run, and a second run adds ------------------------
    rc, err = srv.stop()
    t_stop = time.time()
    assert rc == 0, err
    db_rows = srv.ledger('SELECT hour_ms, up_ms, busy_ms, generated_tokens FROM utilization ORDER BY hour_ms')
    up1 = sum(r['up_ms'] for r in db_rows) / 1e3
    assert tot['up_s'] <= up1 <= t_stop - t_start + 0.5, (db_rows, tot, t_stop - t_start)
    assert sum(r['generated_tokens'] for r in db_rows) == completion, db_rows
    assert close(sum(r['busy_ms'] for r in db_rows) / 1e3, busy_after, 1e-6, 1e-3), (db_rows, busy_after)
    srv2 = Server(model, '--ctx', '256', db=srv.db)
    st, h, body = srv2.post('/v1/completions', {'prompt': 'Tom', 'max_tokens': 10, 'ignore_eos': True})
    assert st == 200, body
    # the scheduler counts a step's tokens when the step ends, which may be just after the
    # answer's last token reached the client: ask again (bounded) until the step is in
    for _ in range(100):
        st, u2 = get(srv2, '/api/utilization', None)   # loopback, no key needed without --require-key
        assert st == 200, u2
        if u2['total']['generated_tokens'] >= completion + 10:
            break
        time.sleep(0.05)
    assert u2['total']['generated_tokens'] == completion + 10, u2['total']
    assert u2['total']['up_s'] > up1, (u2['total'], up1)
    rc, err = srv2.stop()
    assert rc == 0, err
    srv2 = None
    db_rows2 = srv.ledger('SELECT hour_ms FROM utilization')
    assert len(db_rows2) <= len(db_rows) + 1, (db_rows, db_rows2)   # the same hour's row, unless a new hour began
    print('utilization: %d tokens, busy %.3f s of %.1f s up (%.2f%%), $%.2f vs $%.2f per 1M at $2/h' %
          (tot['generated_tokens'], tot['busy_s'], tot['up_s'], 100 * tot['utilization'],
           tot['cost_per_1m_full_load'], tot['cost_per_1m_measured']))
finally:
    if srv2:
        srv2.stop()
    if srv.p.poll() is None:
        srv.stop()
print('utilization: ok')
