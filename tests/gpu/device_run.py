#!/usr/bin/env python3
"""device_run.py PACK OUT [--budget SECONDS] — on a lent GPU machine, from the
repository root: run the `gpu` suite packed by tests/gpu/device_pack.py and
then `ember bench` on the 155M benchmark models (generated there) and the
shared models, against whatever Vulkan driver the machine has (the NVIDIA ICD
under /usr/local/nvidia when no other is named). Writes OUT/devices.txt,
OUT/tests.txt (one line per test: PASS / FAIL / SKIP / TIMEOUT, seconds,
name; the output of every failure below it), OUT/bench.md (the table of
tests/bench/run.sh) and OUT/bench.json; prints the summary. Stops starting
tests once the budget (default 420 s) is spent, leaving the rest as NOT RUN,
so that the whole call ends inside the device tool's limit.
"""
import gzip
import json
import os
import shutil
import subprocess
import sys
import time

NVIDIA_ICD = '/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json'


def main():
    args = sys.argv[1:]
    budget = 420.0
    if '--budget' in args:
        i = args.index('--budget')
        budget = float(args[i + 1])
        del args[i:i + 2]
    if len(args) != 2:
        sys.exit('usage: device_run.py PACK OUT [--budget SECONDS]')
    pack, out = (os.path.abspath(a) for a in args)
    os.makedirs(out, exist_ok=True)
    start = time.monotonic()
    env = dict(os.environ)
    env['LD_LIBRARY_PATH'] = os.path.join(pack, 'lib') + (':' + env['LD_LIBRARY_PATH'] if env.get('LD_LIBRARY_PATH') else '')
    if not env.get('VK_DRIVER_FILES') and not env.get('VK_ICD_FILENAMES') and os.path.isfile(NVIDIA_ICD):
        env['VK_DRIVER_FILES'] = NVIDIA_ICD
    ember = os.path.join(pack, 'bin', 'ember')
    # the validation layer device_pack.py carried: the tests set
    # EMBER_VK_VALIDATE=1, as in the suite here
    layer = os.path.join(pack, 'layer')
    for f in os.listdir(layer) if os.path.isdir(layer) else ():
        if f.endswith('.so.gz') and not os.path.exists(os.path.join(layer, f[:-3])):
            with gzip.open(os.path.join(layer, f), 'rb') as src, open(os.path.join(layer, f[:-3]), 'wb') as dst:
                shutil.copyfileobj(src, dst)
    env['VK_LAYER_PATH'] = layer + (':' + env['VK_LAYER_PATH'] if env.get('VK_LAYER_PATH') else '')

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    work = os.path.join(pack, 'work')   # the tests' working folder (meson's: the build folder)
    os.makedirs(work, exist_ok=True)

    def sub(s):
        return s.replace('@DEST@', pack).replace('@ROOT@', root)

    dev = subprocess.run([ember, 'devices'], env=env, capture_output=True, text=True)
    with open(os.path.join(out, 'devices.txt'), 'w') as f:
        f.write(dev.stdout + dev.stderr)
    print(dev.stdout + dev.stderr, end='')

    tests = json.load(open(os.path.join(pack, 'tests.json')))
    counts = {}
    tests_until = budget * 0.7   # the rest of the budget is the benchmark's
    with open(os.path.join(out, 'tests.txt'), 'w') as log:
        for t in tests:
            spent = time.monotonic() - start
            if spent > tests_until:
                status, dt, text = 'NOT RUN', 0.0, ''
            else:
                tenv = dict(env)
                tenv.update({k: sub(v) for k, v in t['env'].items()})
                t0 = time.monotonic()
                try:
                    p = subprocess.run([sub(a) for a in t['cmd']], env=tenv, cwd=work, capture_output=True, text=True,
                                       timeout=min(t['timeout'], max(10.0, tests_until - spent)))
                    status = {0: 'PASS', 77: 'SKIP'}.get(p.returncode, 'FAIL')
                    text = p.stdout + p.stderr
                except subprocess.TimeoutExpired as e:
                    status = 'TIMEOUT'
                    text = (e.stdout or b'').decode(errors='replace') + (e.stderr or b'').decode(errors='replace')
                dt = time.monotonic() - t0
            counts[status] = counts.get(status, 0) + 1
            log.write('%-7s %7.2f %s\n' % (status, dt, t['name']))
            if status in ('FAIL', 'TIMEOUT'):
                log.write(''.join('    ' + l + '\n' for l in text.splitlines()[-40:]))
            log.flush()
    print('tests: ' + ', '.join('%s %d' % kv for kv in sorted(counts.items())))

    models = os.path.join(pack, 'models')
    os.makedirs(models, exist_ok=True)
    rows, results = [], []
    for typ in ('Q4_0', 'Q8_0', 'Q4_K_M'):
        f = os.path.join(models, 'bench155M-%s.gguf' % typ)
        if not os.path.exists(f):
            g = subprocess.run([os.path.join(pack, 'bin', 'genmodel'), f, typ, '--dim', '1024', '--layers', '8',
                                '--heads', '16', '--kv-heads', '4', '--ffn', '2816', '--vocab', '32000'],
                               env=env, capture_output=True, text=True)
            if g.returncode:
                print('genmodel %s failed: %s' % (typ, g.stderr.strip()[:200]))
                continue
        rows.append(f)
    for m in ('stories260K.gguf', 'TinyStories-656K-F32.gguf', 'TinyStories-656K-Q8_0.gguf'):
        rows.append(os.path.join(pack, 'shared', 'models', m))
    table = ['| model | weights MB | prefill tok/s | prefill GFLOP/s | prefill eff. | decode tok/s | '
             'decode GB/s | decode eff. | read GB/s | FMA GFLOP/s | dispatches/step |',
             '|---|---|---|---|---|---|---|---|---|---|---|']
    for f in rows:
        if time.monotonic() - start > budget:
            break
        p = subprocess.run([ember, 'bench', '--model', f, '--prompt-tokens', '512', '--gen-tokens', '128',
                            '--json'], env=env, capture_output=True, text=True)
        if p.returncode:
            table.append('| %s | failed: %s |' % (os.path.basename(f), p.stderr.strip()[:200]))
            continue
        j = json.loads(p.stdout)
        j['file'] = os.path.basename(f)
        results.append(j)
        table.append('| %s | %.1f | %.0f | %.1f | %.2f | %.0f | %.1f | %.2f | %.1f | %.0f | %d |' % (
            j['file'], j['weight_bytes'] / 1e6, j['prefill_tokens_per_s'], j['prefill_gflops'],
            j['prefill_efficiency'], j['decode_tokens_per_s'], j['decode_gbps'], j['decode_efficiency'],
            j['read_bandwidth_gbps'], j['fma_peak_gflops'], j['dispatches_per_decode_step']))
    with open(os.path.join(out, 'bench.md'), 'w') as f:
        f.write('\n'.join(table) + '\n')
    with open(os.path.join(out, 'bench.json'), 'w') as f:
        json.dump(results, f, indent=1)
    print('\n'.join(table))
    print('device_run: %.0f s' % (time.monotonic() - start))
    return 1 if counts.get('FAIL') or counts.get('TIMEOUT') else 0


if __name__ == '__main__':
    sys.exit(main())
