#!/usr/bin/env python3
# metrics_test.py — GET /metrics and GET /healthz of a real `ember serve`
# (--require-key, the tiny stories260K model under a file name that needs
# escaping in a label value), read with a strict parser of the Prometheus
# text exposition format 0.0.4 written here (HELP and TYPE once each, before
# the samples, samples of a family together, names, label syntax and
# escapes, no duplicate series, one label set per family, histograms with
# ascending le, cumulative buckets, +Inf = _count). Scrape, make a known set
# of requests (completions plain and streamed, one background, a 400, a 401,
# a stream the client drops), scrape again:
#  - ember_requests_total moved by exactly those requests, by class and
#    status, and nothing else moved; the same counts as the ledger's rows;
#  - the token counters by the usage the responses reported (the dropped
#    stream's from its ledger row), cached ones included, and the prefix
#    cache's hit blocks agree with the cached tokens; reasoning tokens and
#    tool calls by the ledger rows' sums;
#  - ember_requests_by_endpoint_total moved by the ledger rows' endpoints
#    (unknown where a row names none), every door there from the start;
#  - the TTFT / TPOT / queue-time histograms: _count is the number of
#    requests that completed, _sum and every bucket agree with the ledger's
#    values of those requests;
#  - the gauges back to idle: nothing running or queued, no KV block used
#    (the dropped stream's blocks went back to the pool); blocks add up;
#  - ledger rows written by exactly the rows the requests made, none dropped;
#  - the busy seconds grew, by no more than the wall time between the
#    scrapes; tokens/s is above 0 right after the requests and falls back
#    to 0 within a few seconds of idling;
#  - ember_info has the model (escaped) and the device /healthz names;
#  - /metrics needs a key under --require-key; /healthz never does.
import json
import math
import os
import re
import sys
import tempfile
import time

sys.path.insert(0, __file__.rsplit('/', 1)[0])
from serve_util import Server, shared_model, sse_events  # noqa: E402

# ---- a strict parser of the text format 0.0.4 -------------------------------------

NAME = re.compile(r'[a-zA-Z_:][a-zA-Z0-9_:]*')
LABEL = re.compile(r'[a-zA-Z_][a-zA-Z0-9_]*')
FLOAT = re.compile(r'[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?|[+-]?Inf|NaN')
TYPES = ('counter', 'gauge', 'histogram', 'summary', 'untyped')
ESC = {'\\': '\\', '"': '"', 'n': '\n'}


def parse_float(s, where):
    assert FLOAT.fullmatch(s), '%s: %r is not a float' % (where, s)
    return float(s.replace('Inf', 'inf').replace('NaN', 'nan'))


def parse_sample(line, where):
    m = NAME.match(line)
    assert m, '%s: no metric name' % where
    name, i, labels = m.group(), m.end(), {}
    if i < len(line) and line[i] == '{':
        i += 1
        while line[i] != '}':
            m = LABEL.match(line, i)
            assert m, '%s: bad label name at %d' % (where, i)
            lname, i = m.group(), m.end()
            assert line[i:i + 2] == '="', '%s: label %s: no ="' % (where, lname)
            i += 2
            val = []
            while line[i] != '"':
                if line[i] == '\\':
                    assert line[i + 1] in ESC, '%s: bad escape \\%s' % (where, line[i + 1])
                    val.append(ESC[line[i + 1]])
                    i += 2
                else:
                    val.append(line[i])
                    i += 1
            i += 1
            assert lname not in labels, '%s: label %s twice' % (where, lname)
            labels[lname] = ''.join(val)
            if line[i] == ',':
                i += 1
            else:
                assert line[i] == '}', '%s: expected , or } at %d' % (where, i)
        i += 1
    assert line[i:i + 1] == ' ' and line[i + 1:i + 2] != ' ', '%s: expected one space before the value' % where
    rest = line[i + 1:].split(' ')
    assert 1 <= len(rest) <= 2, '%s: trailing text' % where
    if len(rest) == 2:
        assert re.fullmatch(r'-?\d+', rest[1]), '%s: bad timestamp' % where
    return name, labels, parse_float(rest[0], where)


def parse(text):
    """{family: {'type', 'help', 'samples': [(name, labels, value)]}}; AssertionError on anything the
    format does not allow (and on blank lines, which ember never writes)."""
    assert text.endswith('\n'), 'the exposition does not end with a line feed'
    fams, cur, closed, series = {}, None, set(), set()
    for ln, line in enumerate(text[:-1].split('\n'), 1):
        where = 'line %d %r' % (ln, line)
        assert line, '%s: blank line' % where
        if line.startswith('#'):
            parts = line.split(' ', 3)
            if len(parts) < 3 or parts[0] != '#' or parts[1] not in ('HELP', 'TYPE'):
                continue   # a plain comment
            kind, name = parts[1], parts[2]
            assert NAME.fullmatch(name), '%s: bad name' % where
            assert name not in closed, '%s: %s again after other families' % (where, name)
            if cur != name:
                if cur:
                    closed.add(cur)
                cur = name
            f = fams.setdefault(name, {'type': None, 'help': None, 'samples': []})
            assert not f['samples'], '%s: %s after the samples' % (where, kind)
            if kind == 'TYPE':
                assert f['type'] is None, '%s: TYPE twice' % where
                assert len(parts) == 4 and parts[3] in TYPES, '%s: bad type' % where
                f['type'] = parts[3]
            else:
                assert f['help'] is None, '%s: HELP twice' % where
                h = parts[3] if len(parts) == 4 else ''
                assert not re.search(r'\\[^\\n]', h), '%s: bad escape in HELP' % where
                f['help'] = h.replace('\\n', '\n').replace('\\\\', '\\')
            continue
        name, labels, value = parse_sample(line, where)
        fam = name
        if fam not in fams:
            for suffix in ('_bucket', '_sum', '_count'):
                if name.endswith(suffix) and fams.get(name[:-len(suffix)], {}).get('type') == 'histogram':
                    fam = name[:-len(suffix)]
        assert fam in fams, '%s: no HELP/TYPE for %s' % (where, name)
        assert fam == cur, '%s: a sample of %s among %s\'s' % (where, fam, cur)
        key = (name, tuple(sorted(labels.items())))
        assert key not in series, '%s: duplicate series' % where
        series.add(key)
        fams[fam]['samples'].append((name, labels, value))
    for name, f in fams.items():
        assert f['type'] and f['help'], '%s: HELP and TYPE needed' % name
        assert name.startswith('ember_'), '%s: not ember_' % name
        assert f['samples'], '%s: no samples' % name
        sets = {tuple(sorted(k for k in labels if k != 'le')) for _, labels, _ in f['samples']}
        assert len(sets) == 1, '%s: label sets differ: %s' % (name, sets)
        if f['type'] == 'counter':
            assert name.endswith('_total'), name
            # counts are whole; a counter of seconds need not be
            assert all(n == name and v >= 0 and (v == int(v) or name.endswith('_seconds_total'))
                       for n, _, v in f['samples']), name
        elif f['type'] == 'gauge':
            assert all(n == name for n, _, _ in f['samples']), name
            assert not name.endswith('_total'), name
        elif f['type'] == 'histogram':
            check_histogram(name, f['samples'])
    return fams


def check_histogram(name, samples):
    groups = {}
    for n, labels, v in samples:
        rest = tuple(sorted((k, x) for k, x in labels.items() if k != 'le'))
        g = groups.setdefault(rest, {'buckets': [], 'sum': None, 'count': None})
        if n == name + '_bucket':
            assert 'le' in labels, '%s: a bucket without le' % name
            g['buckets'].append((parse_float(labels['le'], name), v))
        else:
            assert 'le' not in labels, '%s: le on %s' % (name, n)
            g['sum' if n == name + '_sum' else 'count'] = v
    for rest, g in groups.items():
        les = [le for le, _ in g['buckets']]
        counts = [c for _, c in g['buckets']]
        assert les and les[-1] == math.inf, '%s%s: no +Inf bucket' % (name, rest)
        assert les == sorted(set(les)), '%s%s: le not ascending: %s' % (name, rest, les)
        assert counts == sorted(counts), '%s%s: buckets not cumulative: %s' % (name, rest, counts)
        assert g['count'] is not None and g['sum'] is not None, '%s%s: no _sum or _count' % (name, rest)
        assert counts[-1] == g['count'], '%s%s: +Inf bucket %s != _count %s' % (name, rest, counts[-1], g['count'])


def val(fams, name, **labels):
    fam = name
    for suffix in ('_bucket', '_sum', '_count'):
        if fam not in fams and name.endswith(suffix):
            fam = name[:-len(suffix)]
    hits = [v for n, lb, v in fams[fam]['samples'] if n == name and lb == labels]
    assert len(hits) == 1, (name, labels, hits)
    return hits[0]


# ---- the server ------------------------------------------------------------------------

CLASSES = ('interactive', 'background')
STATUSES = ('completed', 'preempted_completed', 'cancelled', 'failed', 'rejected')
FAMILIES = {
    'ember_info': ('gauge', {'model', 'device'}),
    'ember_requests_total': ('counter', {'class', 'status'}),
    'ember_prompt_tokens_total': ('counter', {'class'}),
    'ember_prompt_tokens_cached_total': ('counter', {'class'}),
    'ember_generation_tokens_total': ('counter', {'class'}),
    'ember_reasoning_tokens_total': ('counter', {'class'}),
    'ember_tool_calls_total': ('counter', {'class'}),
    'ember_requests_by_endpoint_total': ('counter', {'endpoint'}),
    'ember_time_to_first_token_seconds': ('histogram', {'class'}),
    'ember_time_per_output_token_seconds': ('histogram', {'class'}),
    'ember_queue_time_seconds': ('histogram', {'class'}),
    'ember_requests_running': ('gauge', {'class'}),
    'ember_requests_queued': ('gauge', {'class'}),
    'ember_kv_blocks': ('gauge', {'state'}),
    'ember_kv_capacity_blocks': ('gauge', set()),
    'ember_prefix_cache_lookups_total': ('counter', set()),
    'ember_prefix_cache_hit_blocks_total': ('counter', set()),
    'ember_preemptions_total': ('counter', set()),
    'ember_device_failures_total': ('counter', set()),
    'ember_device_resets_total': ('counter', set()),
    'ember_device_up': ('gauge', set()),
    'ember_busy_seconds_total': ('counter', set()),
    'ember_generation_tokens_per_second': ('gauge', set()),
    'ember_ledger_degraded': ('gauge', set()),
    'ember_ledger_rows_written_total': ('counter', set()),
    'ember_ledger_rows_dropped_total': ('counter', set()),
    'ember_ledger_queue_depth': ('gauge', set()),
    'ember_draining': ('gauge', set()),
    'ember_boot_stage_seconds': ('gauge', {'stage'}),
    'ember_selftest_passed': ('gauge', set()),
    'ember_selftest_nmse': ('gauge', {'stage'}),
    'ember_selftest_kernel_nmse': ('gauge', {'kernel', 'tn', 'flags'}),
    'ember_batch_lines_total': ('counter', set()),
    'ember_response_cache_hits_total': ('counter', set()),
    'ember_response_cache_misses_total': ('counter', set()),
    'ember_response_cache_stores_total': ('counter', set()),
    'ember_response_cache_evictions_total': ('counter', set()),
    'ember_response_cache_entries': ('gauge', set()),
    'ember_response_cache_bytes': ('gauge', set()),   # ember_batch_requests only while a batch runs (batch_test)
    'ember_speculative_drafted_tokens_total': ('counter', set()),
    'ember_speculative_accepted_tokens_total': ('counter', set()),
    'ember_tokens_chosen_on_device_total': ('counter', set()),
    'ember_tokens_chosen_from_row_total': ('counter', set()),
}
HISTS = {'ember_time_to_first_token_seconds': 'ttft_ms', 'ember_time_per_output_token_seconds': 'tpot_mean_ms',
         'ember_queue_time_seconds': 'queue_ms'}

real = shared_model('stories260K.gguf')
srv = None
tmp_model = None
try:
    # a model id with a quote, a backslash and a space: ember_info must escape them
    d = tempfile.mkdtemp(prefix='ember-metrics-')
    tmp_model = os.path.join(d, 'st"ories\\260K x.gguf')
    os.symlink(os.path.abspath(real), tmp_model)
    model_id = 'st"ories\\260K x'
    srv = Server(tmp_model, '--ctx', '256', '--require-key', keys=[('alice', ()), ('batch', ('--class', 'background'))])
    A = {'Authorization': 'Bearer ' + srv.keys['alice']}
    B = {'Authorization': 'Bearer ' + srv.keys['batch']}

    def scrape():
        st, h, body = srv.request('GET', '/metrics', headers=A)
        assert st == 200, (st, body)
        assert h['content-type'] == 'text/plain; version=0.0.4; charset=utf-8', h
        fams = parse(body.decode('utf-8'))
        for name, (typ, labels) in FAMILIES.items():
            assert name in fams, 'no %s' % name
            assert fams[name]['type'] == typ, (name, fams[name]['type'])
            got = {k for _, lb, _ in fams[name]['samples'] for k in lb if k != 'le'}
            assert got == labels, (name, got, labels)
        assert set(fams) == set(FAMILIES), set(fams) ^ set(FAMILIES)
        return fams

    def idle(fams):
        return (all(val(fams, 'ember_requests_running', **{'class': c}) == 0 and
                    val(fams, 'ember_requests_queued', **{'class': c}) == 0 for c in CLASSES) and
                val(fams, 'ember_kv_blocks', state='used') == 0)

    # ---- the doors ------------------------------------------------------------------------
    st, h, body = srv.request('GET', '/metrics')
    assert st == 401 and json.loads(body)['error']['code'] == 'missing_api_key', (st, body)
    st, h, body = srv.request('POST', '/metrics', raw=b'', headers=A)
    assert st == 405, (st, body)
    st, h, body = srv.request('GET', '/healthz')
    hz = json.loads(body)
    assert st == 200 and hz['status'] == 'ok' and hz['model'] == model_id and hz['context'] == 256, hz
    assert hz['storage'] == {'status': 'ok'}, hz
    assert hz['requests'] == {'running': {'interactive': 0, 'background': 0},
                              'queued': {'interactive': 0, 'background': 0}}, hz
    kv = hz['kv_blocks']
    assert kv['used'] == 0 and kv['used'] + kv['cached'] + kv['free'] == kv['total'] > 0, kv

    m0 = scrape()
    info = [lb for _, lb, v in m0['ember_info']['samples'] if v == 1]
    assert info == [{'model': model_id, 'device': hz['device']}], info
    assert idle(m0)
    assert val(m0, 'ember_draining') == 0 and val(m0, 'ember_ledger_degraded') == 0
    written0 = val(m0, 'ember_ledger_rows_written_total')
    t_m0 = time.monotonic()

    # ---- the requests ------------------------------------------------------------------------
    # a prompt of several full KV blocks, asked twice: the second finds them in the prefix cache
    long_prompt = 'Once upon a time there was a little girl named Lily. ' * 4
    usage = {c: {'prompt': 0, 'cached': 0, 'completion': 0} for c in CLASSES}
    ids = {}

    def count(cls, u):
        usage[cls]['prompt'] += u['prompt_tokens']
        usage[cls]['cached'] += u['prompt_tokens_details']['cached_tokens']
        usage[cls]['completion'] += u['completion_tokens']

    st, h, r1 = srv.post('/v1/completions', {'prompt': long_prompt, 'max_tokens': 8, 'temperature': 0}, headers=A)
    assert st == 200 and r1['usage']['completion_tokens'] == 8, r1
    count('interactive', r1['usage'])
    st, h, raw = srv.request('POST', '/v1/completions', {'prompt': long_prompt, 'max_tokens': 8, 'temperature': 0,
                                                         'stream': True, 'stream_options': {'include_usage': True}},
                             headers=A)
    assert st == 200, raw
    chunks = sse_events(raw)
    assert chunks[-1] == '[DONE]', chunks[-2:]
    u2 = chunks[-2]['usage']
    assert u2['completion_tokens'] == 8 and u2['prompt_tokens_details']['cached_tokens'] >= 32, u2
    count('interactive', u2)
    st, h, r3 = srv.post('/v1/completions', {'prompt': 'The dog', 'max_tokens': 4}, headers=B)
    assert st == 200 and r3['usage']['completion_tokens'] == 4, r3
    count('background', r3['usage'])
    st, h, body = srv.post('/v1/completions', {'prompt': 7}, headers=A)
    assert st == 400, body
    st, h, body = srv.post('/v1/completions', {'prompt': 'x'})
    assert st == 401, body
    # a stream the client drops after three events
    srv.drop_stream({'prompt': 'Once', 'max_tokens': 200, 'stream': True, 'ignore_eos': True}, key=srv.keys['alice'])

    rows = srv.ledger_settled(6)
    full = srv.ledger('SELECT class, status, prompt_tokens, cached_tokens, completion_tokens, ttft_ms, '
                      'tpot_mean_ms, queue_ms, endpoint, reasoning_tokens, tool_calls FROM requests')
    assert len(full) == 6, full
    dropped = [r for r in full if r['status'] == 'cancelled']
    assert len(dropped) == 1 and dropped[0]['completion_tokens'] >= 3, full
    for k in ('prompt', 'cached', 'completion'):
        usage['interactive'][k] += dropped[0][k + '_tokens']

    # the gauges go back to idle: the dropped stream's blocks return to the pool
    deadline = time.monotonic() + 30
    while True:
        m1 = scrape()
        if idle(m1) and val(m1, 'ember_ledger_rows_written_total') - written0 >= 10:
            break
        assert time.monotonic() < deadline, 'not idle: %s' % [
            (n, lb, v) for f in ('ember_requests_running', 'ember_requests_queued', 'ember_kv_blocks')
            for n, lb, v in m1[f]['samples']]
        time.sleep(0.1)

    # ---- busy time and the rate ---------------------------------------------------------------------
    busy = val(m1, 'ember_busy_seconds_total') - val(m0, 'ember_busy_seconds_total')
    assert 0 < busy <= time.monotonic() - t_m0, (busy, time.monotonic() - t_m0)
    assert val(m1, 'ember_generation_tokens_per_second') > 0, m1['ember_generation_tokens_per_second']
    deadline = time.monotonic() + 30
    while True:
        m2 = scrape()
        if val(m2, 'ember_generation_tokens_per_second') == 0:
            break
        assert time.monotonic() < deadline, 'tokens/s still %s when idle' % val(m2, 'ember_generation_tokens_per_second')
        time.sleep(0.5)
    assert val(m2, 'ember_busy_seconds_total') == val(m1, 'ember_busy_seconds_total'), 'busy while idle'

    # ---- the counters moved by exactly these requests -------------------------------------------
    want = {('interactive', 'completed'): 2, ('background', 'completed'): 1, ('interactive', 'failed'): 1,
            ('interactive', 'rejected'): 1, ('interactive', 'cancelled'): 1}
    ledger_counts = {}
    for r in full:
        ledger_counts[(r['class'], r['status'])] = ledger_counts.get((r['class'], r['status']), 0) + 1
    assert ledger_counts == want, ledger_counts
    for c in CLASSES:
        for s_ in STATUSES:
            d = val(m1, 'ember_requests_total', **{'class': c, 'status': s_}) - \
                val(m0, 'ember_requests_total', **{'class': c, 'status': s_})
            assert d == want.get((c, s_), 0), (c, s_, d)
        for fam, k in (('ember_prompt_tokens_total', 'prompt'), ('ember_prompt_tokens_cached_total', 'cached'),
                       ('ember_generation_tokens_total', 'completion')):
            d = val(m1, fam, **{'class': c}) - val(m0, fam, **{'class': c})
            assert d == usage[c][k], (fam, c, d, usage[c][k])
        for fam, col in (('ember_reasoning_tokens_total', 'reasoning_tokens'), ('ember_tool_calls_total', 'tool_calls')):
            d = val(m1, fam, **{'class': c}) - val(m0, fam, **{'class': c})
            assert d == sum(r[col] for r in full if r['class'] == c), (fam, c, d)
    assert usage['interactive']['cached'] >= 32, usage
    # by front door, as the ledger rows name it (none named: unknown); the doors seen from the start
    def by_door(fams):
        return {lb['endpoint']: v for _, lb, v in fams['ember_requests_by_endpoint_total']['samples']}
    doors0, doors1 = by_door(m0), by_door(m1)
    assert set(doors0) >= {'chat.completions', 'completions', 'responses', 'messages', 'ws.chat', 'unknown'}, doors0
    assert set(doors1) >= set(doors0), (doors0, doors1)
    want_doors = {}
    for r in full:
        want_doors[r['endpoint'] or 'unknown'] = want_doors.get(r['endpoint'] or 'unknown', 0) + 1
    moved = {e: v - doors0.get(e, 0) for e, v in doors1.items() if v != doors0.get(e, 0)}
    assert moved == want_doors and set(moved) <= {'completions', 'unknown'}, (moved, want_doors)
    hits = val(m1, 'ember_prefix_cache_hit_blocks_total') - val(m0, 'ember_prefix_cache_hit_blocks_total')
    assert hits * 16 == usage['interactive']['cached'] + usage['background']['cached'], (hits, usage)
    assert val(m1, 'ember_prefix_cache_lookups_total') - val(m0, 'ember_prefix_cache_lookups_total') >= 4
    assert val(m1, 'ember_preemptions_total') == val(m0, 'ember_preemptions_total')

    # ---- the histograms: the completed requests, value for value as in the ledger -----------------
    for fam, col in HISTS.items():
        for c in CLASSES:
            vals = [r[col] / 1e3 for r in full if r['class'] == c and r['status'] == 'completed' and r[col] is not None]
            n_done = sum(1 for r in full if r['class'] == c and r['status'] == 'completed')
            assert len(vals) == n_done, (fam, c, vals)
            dc = val(m1, fam + '_count', **{'class': c}) - val(m0, fam + '_count', **{'class': c})
            assert dc == n_done, (fam, c, dc, n_done)
            ds = val(m1, fam + '_sum', **{'class': c}) - val(m0, fam + '_sum', **{'class': c})
            assert abs(ds - sum(vals)) <= 1e-6 * max(1, sum(vals)), (fam, c, ds, sum(vals))
            for n, lb, v in m1[fam]['samples']:
                if n == fam + '_bucket' and lb['class'] == c:
                    le = float(lb['le'].replace('Inf', 'inf'))
                    before = val(m0, fam + '_bucket', **lb)
                    assert v - before == sum(1 for x in vals if x <= le), (fam, lb, v - before, vals)

    # ---- the rest ---------------------------------------------------------------------------------------
    kvb = {s_: val(m1, 'ember_kv_blocks', state=s_) for s_ in ('used', 'cached', 'free')}
    assert sum(kvb.values()) == val(m1, 'ember_kv_capacity_blocks') == kv['total'], kvb
    assert kvb['cached'] > 0, kvb   # the finished prompts stay for reuse
    # 4 requests admitted (a row when admitted, one when ended) + 2 refused (one row)
    assert val(m1, 'ember_ledger_rows_written_total') - written0 == 10
    assert val(m1, 'ember_ledger_rows_dropped_total') == 0 and val(m1, 'ember_ledger_degraded') == 0
    assert val(m1, 'ember_ledger_queue_depth') == 0
    st, h, body = srv.request('GET', '/healthz')
    hz = json.loads(body)
    assert st == 200 and hz['kv_blocks']['used'] == 0 and hz['requests']['running']['interactive'] == 0, hz
    print('metrics: %d families; requests %s; tokens %s' % (len(m1), want, usage))
finally:
    if srv:
        rc, err = srv.stop()
        assert rc == 0, (rc, err)
    if tmp_model:
        os.unlink(tmp_model)
        os.rmdir(os.path.dirname(tmp_model))
print('metrics: ok')
