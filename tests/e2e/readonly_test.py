#!/usr/bin/env python3
# readonly_test.py — the ledger's files made read-only under a live `ember
# serve`: the database and its WAL get the immutable attribute (chattr +i),
# which refuses every write even through the descriptors SQLite already
# holds open, and even to root (whom file modes do not stop). Promised, as
# for the other ledger faults (faults_test.py): every request is still
# answered; /healthz says storage "degraded" with the reason and /metrics
# ember_ledger_degraded 1; once the files are writable again (chattr -i)
# the writer catches up — every request one ledger row, completed — and
# health is back. Skipped where the file system or the capabilities do not
# allow the attribute (CAP_LINUX_IMMUTABLE; ext4, xfs, btrfs have it).
# Then the database corrupted under the live server (its pages past the
# first two overwritten, as a failing disk or a stray dd would): requests
# are still answered, /healthz says degraded ("malformed"), and when the
# server stops (exit 0) the rows it could not write are in its log, one
# line per request with its tokens — the billing record is not lost.
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, __file__.rsplit('/', 1)[0])
from serve_util import Server, shared_model, skip  # noqa: E402

CHATTR = shutil.which('chattr') or shutil.which('chattr', path='/usr/bin:/bin:/sbin:/usr/sbin')
if not CHATTR:
    skip('chattr is absent (e2fsprogs)')

srv = Server(shared_model('stories260K.gguf'))
FILES = [srv.db, srv.db + '-wal']


def chattr(flag):
    return subprocess.run([CHATTR, flag] + FILES, capture_output=True, text=True)


def degraded_storage():
    h = srv.healthz()[2]
    return h['storage'] if isinstance(h.get('storage'), dict) and h['storage'].get('status') == 'degraded' else None


def ask(i):
    r = srv.complete(prompt='Once upon a time %d' % i, max_tokens=4, temperature=0)
    assert r['usage']['completion_tokens'] == 4, r


immutable = False
corrupted = []
try:
    for i in range(3):
        ask(i)
    assert len(srv.ledger_settled(3)) == 3 and degraded_storage() is None
    r = chattr('+i')
    if r.returncode != 0:
        chattr('-i')
        srv.stop()
        skip('the immutable attribute is not allowed here: ' + r.stderr.strip())
    immutable = True
    t0 = time.monotonic()
    n, degraded = 3, None
    for _ in range(100):   # bounded: each request's row is a write that cannot land
        ask(n)
        n += 1
        degraded = degraded_storage()
        if degraded:
            break
        time.sleep(0.1)
    assert degraded and degraded['reason'], (degraded, n)
    to_degraded = n - 3
    assert srv.metric('ember_ledger_degraded') == 1
    for _ in range(3):   # still answering everyone while degraded
        ask(n)
        n += 1
    assert srv.p.poll() is None
    assert chattr('-i').returncode == 0
    immutable = False
    ro_s = time.monotonic() - t0
    rows = []
    for _ in range(300):   # bounded: until the writer caught up and health is back
        rows = srv.ledger('SELECT request_id, status FROM requests')
        if len(rows) >= n and degraded_storage() is None:
            break
        time.sleep(0.1)
    assert len(rows) == n and len({r['request_id'] for r in rows}) == n, (len(rows), n)
    assert all(r['status'] == 'completed' for r in rows), rows
    assert degraded_storage() is None and srv.metric('ember_ledger_degraded') == 0

    # corrupted: everything committed into the main file, then its pages past the first two overwritten
    assert srv.ledger('PRAGMA wal_checkpoint(TRUNCATE)')
    size = os.path.getsize(srv.db)
    with open(srv.db, 'r+b') as f:
        f.seek(8192)
        f.write(b'\xab' * (size - 8192))
    bad = None
    for i in range(100):   # bounded: until a write meets the damage and says so
        st, _, r = srv.post('/v1/completions', {'prompt': 'Later %d' % i, 'max_tokens': 3, 'temperature': 0})
        assert st == 200 and r['usage']['completion_tokens'] == 3, (st, r)
        corrupted.append(r['id'])
        bad = degraded_storage()
        if bad:
            break
        time.sleep(0.1)
    assert bad and 'malformed' in bad['reason'], bad
    for i in range(3):   # answered while the ledger cannot take their rows
        st, _, r = srv.post('/v1/completions', {'prompt': 'Still %d' % i, 'max_tokens': 3, 'temperature': 0})
        assert st == 200, (st, r)
        corrupted.append(r['id'])
finally:
    if immutable:
        chattr('-i')
    rc, err = srv.stop()
assert rc == 0, err
lost = [ln for ln in err.splitlines() if 'ledger: row not written' in ln]
logged = [rid for rid in corrupted if any(rid in ln and ', completed, ' in ln and '3 completion tokens' in ln for ln in lost)]
assert len(logged) == len(corrupted) and len(lost) == len(corrupted), (corrupted, lost)
print('readonly: the ledger read-only for %.1f s (%s; degraded after %d requests): %d requests answered, every '
      'row written once it was writable again' % (ro_s, degraded['reason'][:70], to_degraded, n))
print('readonly: the database corrupted under the server: %d requests answered, degraded (%s), their %d rows in '
      'the log at exit' % (len(corrupted), bad['reason'][-60:], len(lost)))
