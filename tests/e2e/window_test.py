#!/usr/bin/env python3
# window_test.py — a sliding-window model (gemma3) through a real `ember
# serve`: its windowed layers keep their K/V in a pool of their own, each
# sequence holding only its last window there (core/run/kv.h). Checked on
# the synth gemma3 (window 16: its 913-token prompt crosses it many times;
# q8_0 KV, whose scales live apart in each pool) and on the real Gemma 3
# 270M (window 512, f16 KV; fetched by set-up, skipped without it; a
# 701-token prompt):
#  - /metrics shows the window pool: its capacity is the sequences times the
#    blocks of one window and a step (`ember vram`'s figure), and once the
#    requests are done none of its blocks is in use, some are cached;
#  - the same prompt again (the response cache bypassed) is found in the
#    prefix cache — its main-pool blocks and its last window's blocks — and
#    its greedy answer is the fresh one's, token for token;
#  - a follow-up that extends the prompt finds it too, and its answer equals
#    the same prompt computed from nothing (another server, prefix cache
#    off).
import os
import sys
import time

sys.path.insert(0, __file__.rsplit('/', 1)[0])
from serve_util import SHARED, Server  # noqa: E402

REAL = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'models', 'extra',
                    'gemma-3-270m-Q4_K_M.gguf')


def words(n, seed):
    """n words of plain English-ish text, deterministic."""
    vocab = ('the river ran past a quiet town where people kept old boats and told long stories about '
             'winter storms and summer fairs').split()
    out, x = [], seed
    for _ in range(n):
        x = (x * 1103515245 + 12345) % (1 << 31)
        out.append(vocab[x % len(vocab)])
    return ' '.join(out)


def window_pool(srv):
    """The window pool's figures once the last request's sequence gave its blocks back (the server
    releases them after the answer is sent: a bounded wait, 10 s at most)."""
    for _ in range(100):
        m = srv.metrics()
        pool = {k: v for k, v in m.items() if k.startswith('ember_kv_window')}
        if pool.get('ember_kv_window_blocks{state="used"}') == 0:
            break
        time.sleep(0.1)
    return pool


def check_model(path, n_words, window, parallel, step, kv='f16'):
    prompt = words(n_words, 7)
    follow = prompt + ' ' + words(n_words // 4, 11)
    args = ('--parallel', str(parallel), '--step-tokens', str(step), '--kv-type', kv)
    srv = Server(path, *args)
    try:
        cap = srv.metric('ember_kv_window_capacity_blocks')
        per_seq = min((window - 1 + step + 15) // 16 + 1, (srv.healthz()[2]['context'] + 15) // 16)
        assert cap == parallel * per_seq, (cap, parallel, per_seq)
        q = {'prompt': prompt, 'max_tokens': 24, 'temperature': 0}
        a = srv.complete(**q)
        n_prompt = a['usage']['prompt_tokens']
        assert n_prompt > window + 16, (n_prompt, window)   # the windows moved on
        assert a['usage']['prompt_tokens_details']['cached_tokens'] == 0, a['usage']
        b = srv.complete(**dict(q, cache=False))
        hit = b['usage']['prompt_tokens_details']['cached_tokens']
        # every whole block but the one holding the last token (it gives the logits)
        assert hit == (n_prompt - 1) // 16 * 16, (hit, n_prompt)
        assert b['choices'][0]['text'] == a['choices'][0]['text'], (a['choices'], b['choices'])
        c = srv.complete(prompt=follow, max_tokens=24, temperature=0)
        assert c['usage']['prompt_tokens_details']['cached_tokens'] >= n_prompt // 16 * 16 - 16, c['usage']
        pool = window_pool(srv)
        assert pool['ember_kv_window_blocks{state="used"}'] == 0, pool
        assert pool['ember_kv_window_blocks{state="cached"}'] > 0, pool
        assert sum(v for k, v in pool.items() if k.startswith('ember_kv_window_blocks')) == cap, pool
    finally:
        rc, err = srv.stop()
    assert rc == 0, err
    # the follow-up computed from nothing: the same answer
    srv = Server(path, *args, '--no-prefix-cache')
    try:
        d = srv.complete(prompt=follow, max_tokens=24, temperature=0)
        assert d['usage']['prompt_tokens_details']['cached_tokens'] == 0, d['usage']
        assert d['choices'][0]['text'] == c['choices'][0]['text'], (c['choices'], d['choices'])
    finally:
        rc, err = srv.stop()
    assert rc == 0, err
    print('%s (%s KV): %d-token prompt, window %d: %d tokens from the prefix cache, the same answers; window '
          'pool of %d blocks' % (os.path.basename(path), kv, n_prompt, window, hit, cap))


synth = os.path.join(SHARED, 'models', 'synth', 'synth-gemma3-256-Q4_K_M.gguf')
if not os.path.exists(synth):
    print('SKIP: %s is absent' % synth)
    sys.exit(77)
check_model(synth, 300, 16, 4, 64, 'q8_0')
if os.path.exists(REAL):
    check_model(REAL, 700, 512, 2, 256)
else:
    print('(the real Gemma 3 270M is absent: scripts/fetch-model.sh gemma3-270m fetches it)')
