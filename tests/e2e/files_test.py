#!/usr/bin/env python3
# files_test.py — the Files API (the Batch API's uploads) through a real
# `ember serve`:
#  - the official openai SDK's files.create / retrieve / list / content /
#    delete, unchanged: the bytes come back exactly (binary too), the row is
#    in the SQLite file and the bytes on disk under "<db>.files/";
#  - files belong to the key that made them: another key gets 404, an admin
#    key sees every key's;
#  - listing pages with limit/after, both orders, by purpose;
#  - bad uploads get a 400 naming what is wrong (not multipart, malformed
#    multipart, no file, no or another purpose, an unknown field, a field
#    twice), an upload past --max-upload a 413, and nothing is stored.
import io
import json
import os
import sqlite3
import sys

sys.path.insert(0, __file__.rsplit('/', 1)[0])
from serve_util import Server, shared_model  # noqa: E402

import openai  # noqa: E402

srv = Server(shared_model('stories260K.gguf'), '--max-upload', '65536', '--require-key',
             keys=(('alice', ()), ('bob', ()), ('root', ('--admin',))))
try:
    def client(name):
        return openai.OpenAI(base_url=srv.base + '/v1', api_key=srv.keys[name], max_retries=0, timeout=120)
    alice, bob, root = client('alice'), client('bob'), client('root')

    lines = b''.join(json.dumps({'custom_id': 'r%d' % i, 'method': 'POST', 'url': '/v1/chat/completions',
                                 'body': {'model': 'm', 'messages': [{'role': 'user', 'content': 'hi %d' % i}]}}
                                ).encode() + b'\n' for i in range(20))
    f1 = alice.files.create(file=('requests.jsonl', io.BytesIO(lines)), purpose='batch')
    assert f1.object == 'file' and f1.id.startswith('file-') and f1.bytes == len(lines), f1
    assert f1.filename == 'requests.jsonl' and f1.purpose == 'batch' and f1.status == 'processed', f1
    binary = bytes(range(256)) * 40 + b'\r\n--not-a-boundary\r\n'
    f2 = alice.files.create(file=('blob.bin', binary), purpose='batch')
    f3 = bob.files.create(file=('bob.jsonl', b'{}\n'), purpose='batch')

    got = alice.files.retrieve(f1.id)
    assert (got.id, got.bytes, got.filename, got.created_at) == (f1.id, f1.bytes, f1.filename, f1.created_at), got
    assert alice.files.content(f1.id).content == lines
    assert alice.files.content(f2.id).content == binary
    assert [f.id for f in alice.files.list()] == [f2.id, f1.id]
    assert [f.id for f in alice.files.list(order='asc')] == [f1.id, f2.id]
    page = alice.files.list(limit=1)
    assert [f.id for f in page.data] == [f2.id] and page.has_more, page
    assert [f.id for f in alice.files.list(limit=1, after=f2.id).data] == [f1.id]
    assert [f.id for f in alice.files.list(purpose='batch')] == [f2.id, f1.id]
    assert list(alice.files.list(purpose='batch_output')) == []

    # ownership: bob cannot see alice's files; the admin key sees all
    for call in (lambda: bob.files.retrieve(f1.id), lambda: bob.files.content(f1.id),
                 lambda: bob.files.delete(f1.id)):
        try:
            call()
            raise AssertionError('another key reached alice\'s file')
        except openai.NotFoundError as e:
            assert f1.id in str(e), e
    assert [f.id for f in bob.files.list()] == [f3.id]
    assert {f.id for f in root.files.list()} == {f1.id, f2.id, f3.id}
    assert root.files.content(f1.id).content == lines

    # the row and the bytes
    db = sqlite3.connect(srv.db)
    rows = dict(db.execute('SELECT id, bytes FROM files').fetchall())
    db.close()
    assert rows == {f1.id: len(lines), f2.id: len(binary), f3.id: 3}, rows
    assert open(os.path.join(srv.db + '.files', f2.id), 'rb').read() == binary

    d = alice.files.delete(f2.id)
    assert d.deleted and d.id == f2.id, d
    assert not os.path.exists(os.path.join(srv.db + '.files', f2.id))
    try:
        alice.files.retrieve(f2.id)
        raise AssertionError('a deleted file is still there')
    except openai.NotFoundError:
        pass

    # bad uploads, byte for byte
    auth = {'Authorization': 'Bearer ' + srv.keys['alice']}

    def upload(parts, ctype=None, raw=None):
        b = 'xYz123'
        body = raw if raw is not None else b''.join(
            b'--' + b.encode() + b'\r\nContent-Disposition: form-data; name="' + n.encode() + b'"' +
            (b'; filename="' + fn.encode() + b'"' if fn else b'') + b'\r\n\r\n' + v + b'\r\n'
            for n, fn, v in parts) + b'--' + b.encode() + b'--\r\n'
        h = dict(auth)
        h['Content-Type'] = ctype or 'multipart/form-data; boundary=' + b
        st, _, out = srv.request('POST', '/v1/files', headers=h, raw=body)
        return st, json.loads(out) if out.startswith(b'{') else out

    ok = [('purpose', None, b'batch'), ('file', 'a.jsonl', b'{}\n')]
    st, r = upload(ok)
    assert st == 200 and r['bytes'] == 3, (st, r)
    alice.files.delete(r['id'])
    cases = [
        (upload([('purpose', None, b'batch')]), 400, 'file'),
        (upload([('file', 'a.jsonl', b'{}')]), 400, 'purpose'),
        (upload([('purpose', None, b'fine-tune'), ('file', 'a.jsonl', b'{}')]), 400, 'purpose'),
        (upload(ok + [('expires_after', None, b'3600')]), 400, 'expires_after'),
        (upload(ok + [('purpose', None, b'batch')]), 400, 'purpose'),
        (upload([('purpose', None, b'batch'), ('file', None, b'{}')]), 400, 'file'),
        (upload(ok, ctype='application/json'), 400, None),
        (upload(ok, raw=b'--xYz123\r\nContent-Disposition: form-data; name="file"; filename="a"\r\n\r\nno end'),
         400, None),
        (upload(ok, raw=b'garbage'), 400, None),
    ]
    for (st, r), want, param in cases:
        assert st == want and r['error']['param'] == param, (st, r, want, param)
    st, r = upload([('purpose', None, b'batch'), ('file', 'big.jsonl', b'x' * 70000)])
    assert st == 413 and '65536' in r['error']['message'], (st, r)
    assert [f.id for f in alice.files.list()] == [f1.id], 'a refused upload left a file behind'
    st, _, out = srv.request('GET', '/v1/files/file-../../etc/passwd', headers=auth)
    assert st == 404, (st, out)
    st, _, out = srv.request('PATCH', '/v1/files/' + f1.id, headers=auth, body={})
    assert st == 405, (st, out)
    print('files: SDK round trip of %d and %d bytes, ownership, pages, %d refusals' %
          (len(lines), len(binary), len(cases) + 1))
finally:
    rc, err = srv.stop()
assert rc == 0, err
