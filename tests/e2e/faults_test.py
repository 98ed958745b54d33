#!/usr/bin/env python3
# faults_test.py — the ledger failing under a live `ember serve`: another
# process holds the database's write lock (what a backup tool, a stuck
# sqlite3 shell or a full disk's retry loop looks like to SQLite) while
# clients keep asking:
#  - every request is still answered (the ledger is degraded, not dead);
#  - /healthz says storage "degraded" with the reason, /metrics
#    ember_ledger_degraded 1;
#  - once the lock goes the writer catches up: every request is one ledger
#    row, /healthz and /metrics back to ok, no KV block held.
import json
import sqlite3
import sys
import time

sys.path.insert(0, __file__.rsplit('/', 1)[0])
from serve_util import Server, shared_model  # noqa: E402

srv = Server(shared_model('stories260K.gguf'))


def healthz():
    return json.loads(srv.request('GET', '/healthz')[2])


def metric(name):
    for line in srv.request('GET', '/metrics')[2].decode().splitlines():
        if line.startswith(name + ' ') or line.startswith(name + '{'):
            return float(line.rsplit(' ', 1)[1])
    return None


def ask(i):
    st, _, r = srv.post('/v1/completions', {'prompt': 'Once upon a time %d' % i, 'max_tokens': 4, 'temperature': 0})
    assert st == 200 and r['usage']['completion_tokens'] == 4, (st, r)


try:
    for i in range(3):
        ask(i)
    assert len(srv.ledger_settled(3)) == 3
    assert healthz()['storage'] is None or healthz()['storage'].get('status') != 'degraded'
    # another process takes the write lock and keeps it
    locker = sqlite3.connect(srv.db, timeout=30, isolation_level=None)
    locker.execute('BEGIN EXCLUSIVE')
    t0 = time.monotonic()
    n = 3
    degraded = None
    for _ in range(60):   # bounded: requests keep coming until the writer gives up waiting and says so
        ask(n)
        n += 1
        h = healthz()
        if isinstance(h.get('storage'), dict) and h['storage'].get('status') == 'degraded':
            degraded = h['storage']
            break
        time.sleep(0.25)
    assert degraded and degraded['reason'], degraded
    assert metric('ember_ledger_degraded') == 1
    for _ in range(3):   # still answering everyone while degraded
        ask(n)
        n += 1
    held = time.monotonic() - t0
    locker.execute('COMMIT')
    locker.close()
    # caught up: every request one row, health back
    rows = []
    for _ in range(200):
        rows = srv.ledger('SELECT request_id, status FROM requests')
        h = healthz()
        if len(rows) >= n and not (isinstance(h.get('storage'), dict) and h['storage'].get('status') == 'degraded'):
            break
        time.sleep(0.1)
    assert len(rows) == n and len({r['request_id'] for r in rows}) == n, (len(rows), n)
    assert all(r['status'] == 'completed' for r in rows), rows
    assert metric('ember_ledger_degraded') == 0
    assert metric('ember_kv_blocks{state="used"}') in (0, None) or \
        'ember_kv_blocks{state="used"} 0' in srv.request('GET', '/metrics')[2].decode()
finally:
    rc, err = srv.stop()
assert rc == 0, err
print('faults: the ledger locked by another process for %.1f s: %d requests answered, degraded said so (%s), '
      'every row written once the lock went' % (held, n, degraded['reason'][:60]))
print('faults: ok')
