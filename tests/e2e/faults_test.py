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
# Then the disk full: the server's file-size limit (RLIMIT_FSIZE, lowered
# from outside with prlimit(2) to below where SQLite writes) makes every
# ledger write fail with EFBIG, as writes on a full disk fail — the same
# promises hold: answered throughout, degraded with the reason, every row
# written once the limit is lifted. (SIGXFSZ, which would end a process
# reaching the limit, is ignored by ember serve.)
import os
import resource
import sqlite3
import sys
import time

sys.path.insert(0, __file__.rsplit('/', 1)[0])
from serve_util import Server, shared_model  # noqa: E402

srv = Server(shared_model('stories260K.gguf'))


def caught_up(n):
    """Wait (bounded) until the writer caught up: n rows, one per request, all completed, health back."""
    rows = []
    for _ in range(300):
        rows = srv.ledger('SELECT request_id, status FROM requests')
        h = srv.healthz()[2]
        if len(rows) >= n and not (isinstance(h.get('storage'), dict) and h['storage'].get('status') == 'degraded'):
            break
        time.sleep(0.1)
    assert len(rows) == n and len({r['request_id'] for r in rows}) == n, (len(rows), n)
    assert all(r['status'] == 'completed' for r in rows), rows
    assert srv.metric('ember_ledger_degraded') == 0


def ask(i):
    r = srv.complete(prompt='Once upon a time %d' % i, max_tokens=4, temperature=0)
    assert r['usage']['completion_tokens'] == 4, r


try:
    for i in range(3):
        ask(i)
    assert len(srv.ledger_settled(3)) == 3
    assert srv.healthz()[2]['storage'] is None or srv.healthz()[2]['storage'].get('status') != 'degraded'
    # another process takes the write lock and keeps it
    locker = sqlite3.connect(srv.db, timeout=30, isolation_level=None)
    locker.execute('BEGIN EXCLUSIVE')
    t0 = time.monotonic()
    n = 3
    degraded = None
    for _ in range(60):   # bounded: requests keep coming until the writer gives up waiting and says so
        ask(n)
        n += 1
        h = srv.healthz()[2]
        if isinstance(h.get('storage'), dict) and h['storage'].get('status') == 'degraded':
            degraded = h['storage']
            break
        time.sleep(0.25)
    assert degraded and degraded['reason'], degraded
    assert srv.metric('ember_ledger_degraded') == 1
    for _ in range(3):   # still answering everyone while degraded
        ask(n)
        n += 1
    held = time.monotonic() - t0
    lock_reason = degraded['reason']
    locker.execute('COMMIT')
    locker.close()
    # caught up: every request one row, health back
    caught_up(n)
    assert srv.metric('ember_kv_blocks', state='used') == 0

    # the disk full: no file of the server may grow past LIMIT bytes from
    # now on. The log (serve.err) stays below it; the database and its WAL
    # are past it or soon get there.
    LIMIT = 32768
    assert os.path.getsize(srv.err_path) < LIMIT // 2
    soft, hard = resource.prlimit(srv.p.pid, resource.RLIMIT_FSIZE)
    resource.prlimit(srv.p.pid, resource.RLIMIT_FSIZE, (LIMIT, hard))
    before = n
    degraded = None
    for _ in range(100):   # bounded: each request's row is a write that cannot land
        ask(n)
        n += 1
        h = srv.healthz()[2]
        if isinstance(h.get('storage'), dict) and h['storage'].get('status') == 'degraded':
            degraded = h['storage']
            break
        time.sleep(0.1)
    assert degraded and degraded['reason'], (degraded, n - before)
    fsize_to_degraded = n - before
    assert srv.metric('ember_ledger_degraded') == 1
    for _ in range(3):
        ask(n)
        n += 1
    assert srv.p.poll() is None   # SIGXFSZ did not end it
    resource.prlimit(srv.p.pid, resource.RLIMIT_FSIZE, (soft, hard))
    caught_up(n)
    full_reason = degraded['reason']
finally:
    rc, err = srv.stop()
assert rc == 0, err
print('faults: the ledger locked by another process for %.1f s (%s), then a %d-byte file-size limit (%s, after %d '
      'requests): %d requests answered, degraded said so each time, every row written once the fault went' %
      (held, lock_reason[:60], LIMIT, full_reason[:60], fsize_to_degraded, n))
