#!/usr/bin/env python3
# usage_api_test.py — GET /api/usage on a real `ember serve`, its numbers
# checked against the ledger's rows (serve_util.ledger):
#  - under --require-key: two ordinary keys and an admin key make requests
#    (one a failed 400, and a 401 without a key); each ordinary key's totals
#    are its own requests exactly, never the other's, even grouped by key;
#    it may name itself with key= but not the other (403); the admin sees
#    every key's, grouped by key each group equal to the ledger, and picks
#    one with key=ID, key=NAME or key=0 (the requests without a key);
#  - since/until windows, CSV (header, one total row, text/csv);
#  - bad query parameters: one 400 each naming the parameter; no key or a
#    bad key: 401; POST: 405;
#  - the loopback rule without --require-key: a client without a key sees
#    only the requests made without one while the database holds keys, and
#    everything when it holds none.
import csv
import io
import json
import sys
import time
import urllib.parse

sys.path.insert(0, __file__.rsplit('/', 1)[0])
from serve_util import Server, add_key, shared_model  # noqa: E402

model = shared_model('stories260K.gguf')
TOKENS = ('prompt_tokens', 'cached_tokens', 'completion_tokens')


def usage(srv, headers=None, **q):
    st, h, body = srv.request('GET', '/api/usage' + ('?' + urllib.parse.urlencode(q) if q else ''), headers=headers)
    if h.get('content-type', '').startswith('application/json'):
        body = json.loads(body)
    return st, h, body


def sums(rows):
    out = {'requests': len(rows)}
    for k in TOKENS:
        out[k] = sum(r[k] for r in rows)
    return out


def figures(g):
    return {k: g[k] for k in ('requests',) + TOKENS}


def bad(srv, headers, status, param, **q):
    st, h, body = usage(srv, headers, **q)
    assert st == status, (q, st, body)
    e = body['error']
    assert set(e) == {'message', 'type', 'param', 'code'} and e['message'], e
    if param is not None:
        assert e['param'] == param, (q, e)
    return e


def key_ids(srv):
    return {r['name']: r['id'] for r in srv.ledger('SELECT id, name FROM api_keys')}


srv = Server(model, '--ctx', '256', '--require-key', keys=[('alice', ()), ('bob', ()), ('root', ('--admin',))])
try:
    H = {name: {'Authorization': 'Bearer ' + k} for name, k in srv.keys.items()}
    ids = key_ids(srv)
    n = 0
    for who, prompt, mt in (('alice', 'Once upon a time', 6), ('alice', 'The cat', 3), ('bob', 'A dog', 5),
                            ('root', 'Lily', 2)):
        st, h, body = srv.post('/v1/completions', {'prompt': prompt, 'max_tokens': mt}, headers=H[who])
        assert st == 200, body
        n += 1
    st, h, body = srv.post('/v1/completions', {'prompt': 'x', 'temperature': 9}, headers=H['bob'])
    assert st == 400, body
    st, h, body = srv.post('/v1/completions', {'prompt': 'x'})
    assert st == 401, body
    n += 2
    rows = srv.ledger_settled(n)
    assert len(rows) == n, rows
    by_key = {}
    for r in rows:
        by_key.setdefault(r['key_id'], []).append(r)
    assert set(by_key) == {ids['alice'], ids['bob'], ids['root'], None}, by_key.keys()

    # ---- an ordinary key sees its own, only ------------------------------------------
    for who, other in (('alice', 'bob'), ('bob', 'alice')):
        want = sums(by_key[ids[who]])
        st, h, rep = usage(srv, H[who])
        assert st == 200 and h['content-type'] == 'application/json', (st, rep)
        assert rep['key_id'] == ids[who] and rep['group_by'] == 'none' and rep['groups'] == [], rep
        assert figures(rep['total']) == want, (who, rep['total'], want)
        st, h, rep = usage(srv, H[who], group_by='key')
        assert st == 200 and [g['group'] for g in rep['groups']] == [who], rep
        assert figures(rep['groups'][0]) == want, rep
        for k in (who, str(ids[who])):
            st, h, rep = usage(srv, H[who], key=k)
            assert st == 200 and figures(rep['total']) == want, (k, rep)
        for k in (other, str(ids[other]), '0'):
            e = bad(srv, H[who], 403, 'key', key=k)
            assert e['code'] == 'admin_key_required', e
    assert sums(by_key[ids['bob']])['requests'] == 2   # the failed 400 is bob's too

    # ---- the admin sees every key's ------------------------------------------------------
    st, h, rep = usage(srv, H['root'])
    assert st == 200 and 'key_id' not in rep and figures(rep['total']) == sums(rows), rep
    st, h, rep = usage(srv, H['root'], group_by='key')
    groups = {g['group']: figures(g) for g in rep['groups']}
    names = {v: k for k, v in ids.items()}
    assert groups == {names.get(k, '-') if k else '-': sums(v) for k, v in by_key.items()}, groups
    assert figures(rep['total']) == sums(rows), rep
    for k in ('bob', str(ids['bob'])):
        st, h, rep = usage(srv, H['root'], key=k)
        assert st == 200 and rep['key_id'] == ids['bob'] and figures(rep['total']) == sums(by_key[ids['bob']]), rep
    st, h, rep = usage(srv, H['root'], key='0')
    assert st == 200 and rep['key_id'] == 0 and figures(rep['total']) == sums(by_key[None]), rep
    st, h, rep = usage(srv, H['root'], group_by='class')
    assert [g['group'] for g in rep['groups']] == ['interactive'], rep

    # ---- windows and CSV ------------------------------------------------------------------
    today = time.strftime('%Y-%m-%d', time.gmtime())
    st, h, rep = usage(srv, H['alice'], since=today, until=today)
    assert st == 200 and figures(rep['total']) == sums(by_key[ids['alice']]), rep
    assert rep['until_ms'] - rep['since_ms'] == 86400000, rep
    st, h, rep = usage(srv, H['alice'], since='2999-01-01')
    assert st == 200 and rep['total']['requests'] == 0, rep
    st, h, rep = usage(srv, H['root'], until='2000-01-01T00:00:00Z')
    assert st == 200 and rep['total']['requests'] == 0, rep
    st, h, body = usage(srv, H['alice'], format='csv')
    assert st == 200 and h['content-type'] == 'text/csv; charset=utf-8', (st, h)
    table = list(csv.DictReader(io.StringIO(body.decode())))
    assert len(table) == 1 and table[0]['group'] == 'total', table
    assert int(table[0]['requests']) == 2 and int(table[0]['completion_tokens']) == \
        sums(by_key[ids['alice']])['completion_tokens'], table
    st, h, body = usage(srv, H['root'], format='csv', group_by='key')
    table = list(csv.DictReader(io.StringIO(body.decode())))
    assert {r['group']: int(r['requests']) for r in table} == {g: v['requests'] for g, v in groups.items()}, table

    # ---- bad requests ----------------------------------------------------------------------
    A = H['alice']
    bad(srv, A, 400, 'group_by', group_by='user')
    bad(srv, A, 400, 'format', format='table')
    bad(srv, A, 400, 'format', format='xml')
    bad(srv, A, 400, 'since', since='yesterday')
    bad(srv, A, 400, 'until', until='2024-02-30')
    bad(srv, A, 400, 'until', since='2024-05-02', until='2024-05-01')
    bad(srv, A, 400, 'frobnicate', frobnicate='1')
    bad(srv, H['root'], 400, 'key', key='nobody')
    bad(srv, H['root'], 400, 'key', key='12345')
    st, h, body = srv.request('GET', '/api/usage?since=2024-05-01&since=2024-05-02', headers=A)
    assert st == 400 and json.loads(body)['error']['param'] == 'since', body
    st, h, body = srv.request('GET', '/api/usage?since', headers=A)
    assert st == 400 and json.loads(body)['error']['param'] == 'since', body
    st, h, body = srv.request('GET', '/api/usage?since=' + 'x' * 300, headers=A)
    assert st == 400, body
    e = bad(srv, None, 401, None)
    assert e['code'] == 'missing_api_key', e
    e = bad(srv, {'Authorization': 'Bearer em_' + 'A' * 43}, 401, None)
    assert e['code'] == 'invalid_api_key', e
    st, h, body = srv.request('POST', '/api/usage', raw=b'{}', headers=A)
    assert st == 405, body
    print('usage-api: %d requests over %d keys' % (n, len(ids)))
finally:
    rc, err = srv.stop()
assert rc == 0, (rc, err)

# ---- the loopback rule (no --require-key) ---------------------------------------------------
srv = Server(model, '--ctx', '256')
try:
    st, h, body = srv.post('/v1/completions', {'prompt': 'Once', 'max_tokens': 2})
    assert st == 200, body
    srv.ledger_settled(1)
    # no key in the database at all: the loopback client is the box's only user
    st, h, rep = usage(srv)
    assert st == 200 and 'key_id' not in rep and rep['total']['requests'] == 1, rep
    key = add_key(srv.db, 'alice')
    st, h, body = srv.post('/v1/completions', {'prompt': 'Once', 'max_tokens': 2},
                           headers={'Authorization': 'Bearer ' + key})
    assert st == 200, body
    srv.ledger_settled(2)
    # keys exist: without a key, only the requests made without one
    st, h, rep = usage(srv)
    assert st == 200 and rep['key_id'] == 0 and rep['total']['requests'] == 1, rep
    st, h, rep = usage(srv, group_by='key')
    assert [g['group'] for g in rep['groups']] == ['-'], rep
    bad(srv, None, 403, 'key', key='alice')
    st, h, rep = usage(srv, {'Authorization': 'Bearer ' + key})
    assert st == 200 and rep['total']['requests'] == 1 and rep['key_id'] == 1, rep
    print('usage-api: loopback rule ok')
finally:
    rc, err = srv.stop()
assert rc == 0, (rc, err)
print('usage-api: ok')
