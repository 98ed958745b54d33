#!/usr/bin/env python3
# rerank_head_test.py — /v1/rerank with a cross-encoder on a real `ember
# serve`: all-MiniLM-L6-v2 made into a reranker as llama.cpp's converter
# writes one (pooling_type rank, a cls.output head of one label; here a
# known head: the weight picks hidden dimension K, the bias is B, so the
# score of a pair is its [CLS] state's K-th value plus B, and token type 1's
# row is type 0's, so the pair's state is what /v1/embeddings gives for the
# pair's ids with cls pooling, unnormalised). Checked: the response says
# "score": "classifier"; every document's relevance_score equals that
# oracle (|diff| < 1e-4); the results sorted, top_n and return_documents as
# asked; a pair past the 512 positions is a 400 naming documents[i] unless
# truncate; the ledger's row says rerank. SKIP without the model.
import os
import struct
import subprocess
import sys
import tempfile

sys.path.insert(0, __file__.rsplit('/', 1)[0])
from serve_util import EMBER, Server, gguf_layout, gguf_string, shared_model  # noqa: E402

K, B = 7, 0.5


def reranker(src, dst):
    """src (a bert GGUF) copied to dst with pooling_type 4 (rank), token type 1's row set to type 0's, and
    cls.output.weight [E, 1] (one-hot at K) and cls.output.bias [1] (B) appended, both F32."""
    with open(src, 'rb') as f:
        version, layout, align, tensors, _, data_at = gguf_layout(f)
        kvs, arch = [], b''
        for key, t, start, at, end in layout:
            f.seek(start)
            raw = f.read(end - start)
            if key == b'general.architecture':
                f.seek(at)
                arch = gguf_string(f)
            if not key.endswith(b'.pooling_type'):
                kvs.append(raw)
        f.seek(data_at)
        body = bytearray(f.read())
    key = arch + b'.pooling_type'
    kvs.append(struct.pack('<Q', len(key)) + key + struct.pack('<II', 4, 4))
    infos = [list(t) for t in tensors]
    tt = [i for i in infos if i[0] == b'token_types.weight'][0]
    E = tt[1][0]
    row = E * (4 if tt[2] == 0 else 2)   # F32 or F16 rows
    body[tt[3] + row:tt[3] + 2 * row] = body[tt[3]:tt[3] + row]
    off = len(body) + (-len(body)) % align
    w = struct.pack('<%df' % E, *[1.0 if i == K else 0.0 for i in range(E)])
    infos.append([b'cls.output.weight', (E, 1), 0, off])
    infos.append([b'cls.output.bias', (1,), 0, off + len(w) + (-len(w)) % align])
    with open(dst, 'wb') as o:
        o.write(struct.pack('<4sIQQ', b'GGUF', version, len(infos), len(kvs)))
        for kv in kvs:
            o.write(kv)
        for name, dims, typ, toff in infos:
            o.write(struct.pack('<Q', len(name)) + name + struct.pack('<I', len(dims)))
            o.write(struct.pack('<%dQ' % len(dims), *dims) + struct.pack('<IQ', typ, toff))
        o.write(b'\0' * ((-o.tell()) % align))
        o.write(body + b'\0' * (off - len(body)))
        o.write(w + b'\0' * ((-len(w)) % align))
        o.write(struct.pack('<f', B))


def ids_of(model, text):
    r = subprocess.run([EMBER, 'tokenize', '--model', model, '--text', text], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    return [int(x) for x in r.stdout.split()]


src = shared_model('all-MiniLM-L6-v2-F16.gguf')
tmp = tempfile.mkdtemp(prefix='ember-rerank-')
model = os.path.join(tmp, 'minilm-reranker.gguf')
reranker(src, model)
QUERY = 'Where does the cat sleep?'
DOCS = ['The cat sleeps on the warm mat by the fire.', 'Stock markets fell sharply on Monday.',
        'A kitten naps in a sunny window.', 'The recipe needs two cups of flour.']
srv = Server(model)
try:
    st, _, body = srv.post('/v1/rerank', {'query': QUERY, 'documents': DOCS, 'return_documents': True})
    assert st == 200, body
    res = body
    assert res['score'] == 'classifier', res
    got = {r['index']: r['relevance_score'] for r in res['results']}
    assert sorted(got) == list(range(len(DOCS))), res
    scores = [r['relevance_score'] for r in res['results']]
    assert scores == sorted(scores, reverse=True), scores
    assert all(r['document']['text'] == DOCS[r['index']] for r in res['results']), res
    # the oracle: the pair's [CLS] state through /v1/embeddings (types do not matter in this model)
    q = ids_of(model, QUERY)
    worst = 0.0
    for i, d in enumerate(DOCS):
        pair = q + ids_of(model, d)[1:]   # [CLS] query [SEP] document [SEP]
        st, _, eb = srv.post('/v1/embeddings', {'input': [pair], 'pooling': 'cls', 'normalize': False})
        assert st == 200, eb
        h = eb['data'][0]['embedding']
        want = h[K] + B
        worst = max(worst, abs(got[i] - want))
        assert abs(got[i] - want) < 1e-4, (i, got[i], want)
    assert len(set(round(s, 6) for s in scores)) == len(DOCS), scores   # (a head that ignores its input fails)
    st, _, body = srv.post('/v1/rerank', {'query': QUERY, 'documents': DOCS, 'top_n': 2})
    top = body['results']
    assert st == 200 and [r['index'] for r in top] == [r['index'] for r in res['results'][:2]], body
    assert all('document' not in r for r in top), top
    long_doc = 'word ' * 600
    st, _, body = srv.post('/v1/rerank', {'query': QUERY, 'documents': ['a', long_doc]})
    err = body['error']
    assert st == 400 and err['param'] == 'documents[1]', body
    st, _, body = srv.post('/v1/rerank', {'query': QUERY, 'documents': ['a', long_doc], 'truncate': True})
    assert st == 200 and len(body['results']) == 2, body
    rows = srv.ledger_settled(4 + len(DOCS) + 1)
    ends = [r['endpoint'] for r in srv.ledger('SELECT endpoint FROM requests ORDER BY received_ms, rowid')]
    assert ends.count('rerank') == 4 and ends.count('embeddings') == len(DOCS), ends
    print('rerank-head: 4 documents, worst |score - oracle| %.2e; order %s' %
          (worst, [r['index'] for r in res['results']]))
finally:
    rc, err = srv.stop()
assert rc == 0, err
print('rerank-head: ok')
