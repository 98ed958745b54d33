#!/usr/bin/env python3
# bench_cli_test.py MODEL — `ember bench` as a tool: the single-user form's
# JSON has every figure, consistent with itself (efficiencies are the ratios
# they claim to be, the KV pool holds the run); the --users form reports one
# level per user count with exactly the requests the users made (each
# interactive user sends --requests-per-user requests, background users run
# alongside), the KV waste as a fraction, the prefix-cache pair; bad lists
# are input errors. No speed is asserted: these machines are shared.
# Exit 77 (SKIP) without a Vulkan device or without ../shared.
import json
import os
import re
import subprocess
import sys

# the one failure that is a SKIP: no Vulkan device on this machine at all
# (EM_ENODEV); a lost device or validation errors fail the test
NO_DEVICE = re.compile(r'ember: vulkan: no (usable )?Vulkan device')

ember = os.environ['EMBER_BIN']
model = os.path.join(os.environ.get('EMBER_SHARED', '../shared'), sys.argv[1])
if not os.path.exists(model):
    print('SKIP: %s not found' % model)
    sys.exit(77)


def bench(*args, expect=0):
    r = subprocess.run([ember, 'bench', '--model', model] + list(args), stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=600)
    if r.returncode != 0 and NO_DEVICE.match(r.stderr):
        print('SKIP: ' + r.stderr.strip())
        sys.exit(77)
    assert r.returncode == expect, 'bench %s: exit %d, expected %d: %s' % (
        ' '.join(args), r.returncode, expect, r.stderr)
    return r


# single user
j = json.loads(bench('--prompt-tokens', '32', '--gen-tokens', '8', '--contexts', '64,128',
                     '--json').stdout)
for key in ('device', 'model', 'params', 'weight_bytes', 'kv_blocks', 'kv_bytes', 'kv_type',
            'prefill_tokens_per_s', 'prefill_gflops', 'decode_tokens_per_s',
            'decode_bytes_per_token', 'decode_gbps', 'read_bandwidth_gbps', 'fma_peak_gflops',
            'decode_efficiency', 'prefill_efficiency', 'dispatches_per_decode_step',
            'decode_step_us', 'decode_host_us_per_step', 'decode_at_context'):
    assert key in j, 'single-user JSON lacks %s' % key
for key in ('prefill_tokens_per_s', 'decode_tokens_per_s', 'read_bandwidth_gbps',
            'fma_peak_gflops', 'decode_bytes_per_token', 'dispatches_per_decode_step'):
    assert j[key] > 0, '%s = %r' % (key, j[key])
assert abs(j['decode_efficiency'] - j['decode_gbps'] / j['read_bandwidth_gbps']) < 1e-9
assert abs(j['prefill_efficiency'] - j['prefill_gflops'] / j['fma_peak_gflops']) < 1e-9
assert abs(j['decode_gbps'] - j['decode_bytes_per_token'] * j['decode_tokens_per_s'] / 1e9) < 1e-9
assert j['kv_type'] == 'f16'
assert j['kv_blocks'] * 16 >= 128 + 64, 'KV pool of %d blocks cannot hold context 128 + 64' % j['kv_blocks']
ctx = j['decode_at_context']
assert [c['context'] for c in ctx] == [64, 128], ctx
assert all(c['tokens_per_s'] > 0 for c in ctx), ctx

# many users: 1 and 2 interactive users alone, then 1 beside 1 background user
j = json.loads(bench('--users', '1,2', '--prompt-tokens', '16', '--gen-tokens', '8',
                     '--requests-per-user', '2', '--prefix-tokens', '48', '--gpu-cost-per-hour', '2',
                     '--slo-tpot-ms', '100000', '--json').stdout)
jb = json.loads(bench('--users', '1', '--background', '1', '--prompt-tokens', '16',
                      '--gen-tokens', '8', '--requests-per-user', '2', '--prefix-tokens', '0',
                      '--json').stdout)
levels = j['levels'] + jb['levels']
assert [(lv['users'], lv['background']) for lv in levels] == [(1, 0), (2, 0), (1, 1)], levels
for lv in levels:
    # every interactive user made exactly its requests, no more
    assert lv['requests'] == 2 * lv['users'], lv
    assert lv['tokens_per_s'] > 0, lv
    assert 0 < lv['ttft_p50_ms'] <= lv['ttft_p99_ms'], lv
    assert 0 < lv['tpot_p50_ms'], lv
    # prompts of 8-24 ids and 4-12 generated: consecutive decode steps cannot
    # all end on a 16-position block boundary, so some allocated KV is empty
    assert 0 < lv['kv_waste'] < 1, lv
for lv in j['levels']:
    # cost per 1M output tokens at $2/hour
    want = 2.0 / (lv['tokens_per_s'] * 3600) * 1e6
    assert abs(lv['cost_per_1m_tokens'] - want) < 1e-6 * want, lv
for lv in jb['levels']:
    # no --gpu-cost-per-hour: no cost, rather than a cost of 0
    assert lv['cost_per_1m_tokens'] is None, lv
assert jb['levels'][0]['unloaded_ttft_p99_ms'] > 0, jb
assert j['max_users_within_slo'] == 2, j
assert jb['max_users_within_slo'] is None, jb
# a p99 TPOT SLO that no decode step can meet: no level is within it
jt = json.loads(bench('--users', '1,2', '--prompt-tokens', '16', '--gen-tokens', '8',
                      '--requests-per-user', '1', '--prefix-tokens', '0', '--slo-tpot-ms', '0.001',
                      '--json').stdout)
assert all(lv['tpot_p99_ms'] > 0.001 for lv in jt['levels']), jt
assert jt['max_users_within_slo'] == 0, jt
assert j['prefix_tokens'] == 48 and j['ttft_cold_ms'] > 0 and j['ttft_cached_prefix_ms'] > 0, j
assert 'ttft_cold_ms' not in jb, jb

# the text form says the same things in words
out = bench('--users', '1', '--prompt-tokens', '8', '--gen-tokens', '4', '--requests-per-user', '1',
            '--prefix-tokens', '0').stdout
for word in ('KV cache', 'tok/s', 'TTFT', 'TPOT', 'KV waste', 'not given'):
    assert word in out, 'text form lacks %r:\n%s' % (word, out)

# bad input is an input error (exit 2) naming the flag
for bad in (['--users', '0'], ['--users', '1,,2'], ['--users', 'x'], ['--kv-type', 'q3']):
    r = bench(*bad, expect=2)
    assert r.stderr.startswith('ember: bench:'), r.stderr
print('bench-cli: ok')
