#!/usr/bin/env python3
# cache_test.py — the response cache through a real `ember serve
# --response-cache-mb 1`:
#  - a greedy request asked twice: the second answer is the first's, byte for
#    byte in its choices and usage (marked "cached_response"), streamed too;
#    its ledger row says response_cached and counts no tokens; the server
#    time of the answer is measured (the row's TTFT) and printed;
#  - a sampled request with a seed is cached; without one it never is;
#    "cache": false computes afresh; a body that differs in what shapes the
#    answer misses, one that differs only in stream/user does not;
#  - a streamed miss is kept too: the plain request after it is a hit with
#    the text the stream sent;
#  - a key made with --no-response-cache is never answered from the cache
#    nor adds to it; another key shares the loopback's answers;
#  - /metrics counts hits, misses, stores, entries and bytes;
#  - restarted with another model, the old model's answers are gone.
import sqlite3
import sys
import time

sys.path.insert(0, __file__.rsplit('/', 1)[0])
from serve_util import Server, shared_model, sse_events  # noqa: E402

srv = Server(shared_model('stories260K.gguf'), '--response-cache-mb', '1',
             keys=[('plain', ()), ('nocache', ('--no-response-cache',))])
try:
    q = {'prompt': 'Once upon a time', 'max_tokens': 16, 'temperature': 0}
    a = srv.complete(**q)
    b = srv.complete(**q)
    assert b['choices'] == a['choices'] and b['id'] != a['id'], (a, b)
    ua, ub = dict(a['usage']), dict(b['usage'])
    assert ub.pop('cached_response') is True and ub == ua, (ua, ub)
    m = srv.metrics()
    assert (m['ember_response_cache_hits_total'], m['ember_response_cache_misses_total'],
            m['ember_response_cache_stores_total'], m['ember_response_cache_entries']) == (1, 1, 1, 1), m
    assert m['ember_response_cache_bytes'] > 100, m

    # streamed from the cache, and a body that differs only in stream/user is the same key
    st, _, raw = srv.request('POST', '/v1/completions', dict(q, stream=True, user='someone'))
    text = raw.decode()
    ev = sse_events(text)
    parts = ev[:-1]
    assert st == 200 and ev[-1] == '[DONE]', text
    assert ''.join(p['choices'][0]['text'] for p in parts) == a['choices'][0]['text'], parts
    assert parts[-1]['choices'][0]['finish_reason'] == a['choices'][0]['finish_reason'], parts
    assert srv.metrics()['ember_response_cache_hits_total'] == 2

    # what shapes the answer misses; cache:false computes afresh; a bad value is refused
    c = srv.complete(**dict(q, max_tokens=15))
    assert 'cached_response' not in c['usage'] and srv.metrics()['ember_response_cache_misses_total'] == 2
    d = srv.complete(**dict(q, cache=False))
    assert 'cached_response' not in d['usage'] and d['choices'] == a['choices']
    assert srv.metrics()['ember_response_cache_hits_total'] == 2
    e = srv.complete(400, **dict(q, cache='yes'))['error']
    assert e['param'] == 'cache', e

    # sampled: with a seed it is deterministic, so cached; without, never
    s1 = srv.complete(prompt='The dog', max_tokens=12, temperature=1.0, seed=42)
    s2 = srv.complete(prompt='The dog', max_tokens=12, temperature=1.0, seed=42)
    assert s2['choices'] == s1['choices'] and s2['usage'].get('cached_response') is True, (s1, s2)
    before = srv.metrics()
    srv.complete(prompt='The dog', max_tokens=12, temperature=1.0)
    srv.complete(prompt='The dog', max_tokens=12, temperature=1.0)
    after = srv.metrics()
    assert after['ember_response_cache_hits_total'] == before['ember_response_cache_hits_total'] and \
        after['ember_response_cache_misses_total'] == before['ember_response_cache_misses_total'], (before, after)

    # a streamed miss is stored as the whole answer it streamed
    sq = {'prompt': 'The little bird', 'max_tokens': 10, 'temperature': 0}
    before = srv.metrics()
    st, _, raw = srv.request('POST', '/v1/completions', dict(sq, stream=True))
    parts = sse_events(raw)[:-1]
    streamed = ''.join(p['choices'][0]['text'] for p in parts if p['choices'])
    after = srv.metrics()
    assert st == 200 and after['ember_response_cache_stores_total'] == before['ember_response_cache_stores_total'] + 1
    h = srv.complete(**sq)
    assert h['usage'].get('cached_response') is True and h['choices'][0]['text'] == streamed, (h, streamed)
    assert h['choices'][0]['finish_reason'] == parts[-1]['choices'][0]['finish_reason'], (h, parts[-1])

    # per key: "nocache" neither reads nor adds; "plain" gets the answer the loopback left
    def keyed(key, body):
        return srv.complete(headers={'Authorization': 'Bearer ' + srv.keys[key]}, **body)
    before = srv.metrics()
    n1 = keyed('nocache', q)
    n2 = keyed('nocache', dict(q, prompt='A new prompt'))
    after = srv.metrics()
    assert 'cached_response' not in n1['usage'] and n1['choices'] == a['choices'], n1
    assert 'cached_response' not in n2['usage'], n2
    assert all(after[k] == before[k] for k in ('ember_response_cache_hits_total', 'ember_response_cache_misses_total',
                                              'ember_response_cache_stores_total')), (before, after)
    assert keyed('plain', q)['usage'].get('cached_response') is True

    # the ledger: cached rows run no tokens; their server time is the lookup
    rows = []
    for _ in range(100):
        rows = srv.ledger('SELECT request_id, status, prompt_tokens, completion_tokens, response_cached, ttft_ms '
                          'FROM requests ORDER BY received_ms, rowid')
        if len(rows) >= 15 and all(r['status'] != 'admitted' for r in rows):
            break
        time.sleep(0.1)
    # fifteen requests: a, b, the stream, c, d, the refused one, s1, s2, two unseeded,
    # the streamed miss, h, n1, n2 and plain's hit (rows land after the answer is sent)
    assert len(rows) == 15, rows
    hits = [r for r in rows if r['response_cached']]
    assert len(hits) == 5 and all(r['prompt_tokens'] == 0 and r['completion_tokens'] == 0 and
                                  r['status'] == 'completed' for r in hits), rows
    assert [r['request_id'] for r in hits][0] == b['id'], (hits, b['id'])
    server_ms = sorted(r['ttft_ms'] for r in hits)
finally:
    rc, err = srv.stop()
assert rc == 0, err

# another model on the same database: the old answers are dropped
srv2 = Server(shared_model('TinyStories-656K-F32.gguf'), '--response-cache-mb', '1', db=srv.db)
try:
    assert srv2.metric('ember_response_cache_entries') == 0
    r = srv2.complete(**q)
    assert 'cached_response' not in r['usage'], r
finally:
    rc, err = srv2.stop()
assert rc == 0, err
db = sqlite3.connect(srv.db)
assert db.execute('SELECT count(*) FROM response_cache').fetchone()[0] == 1   # the new model's one
db.close()
print('cache: repeated greedy and seeded requests answered from the cache in %s ms of server time; '
      'streamed too; cleared for another model' % ', '.join('%.3f' % x for x in server_ms))
