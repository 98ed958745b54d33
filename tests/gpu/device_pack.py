#!/usr/bin/env python3
"""device_pack.py BUILD DEST — pack what the `gpu` suite and `ember bench`
need to run on a lent GPU machine that has no compiler toolchain, no -dev
packages and no network (docs/vulkan.md, "On a lent GPU"): run here, after a
normal build, into a folder that git ignores; the device tool carries it.

DEST gets:
  bin/     the suite's executables, ember, nmse and genmodel (stripped)
  lib/     the shared libraries they need beyond glibc, the Vulkan loader too
  shared/  ../shared without the tokenizer vocabularies and the largest
           models (a carried tree is limited to 64 MiB); tests whose files are
           left out are skipped there
  layer/   the Khronos validation layer (gzipped, with its manifest and the
           C++ runtime it needs): the suite runs under it there as it does
           here; device_run.py unpacks it and points VK_LAYER_PATH at it
  tests.json  the suite's tests with every path under DEST or the repository
           root written @DEST@/... or @ROOT@/..., for tests/gpu/device_run.py

Tests that only make llvmpipe behave like a GPU (EMBER_VK_AS_GPU,
LP_NATIVE_VECTOR_WIDTH) and the shader validators (spirv-val,
glslangValidator: not GPU work, and not installed there) are left out.
"""
import gzip
import json
import os
import shutil
import subprocess
import sys

# left out of shared/: vocabularies only the unit suite reads, and the
# qwen F32 models (13 MB; their F16 twins and the llama F32 model stay)
# (and, to make room for the validation layer, the chat templates, which only
# the unit suite reads, and the qwen Q5_K_M / Q6_K models: the llama ones
# cover those kernels there)
SKIP_SHARED = ('golden/tokenizer/', 'golden/templates/', 'models/synth/synth-qwen2-256-F32.gguf',
               'models/synth/synth-qwen3-256-F32.gguf', 'models/synth/synth-qwen2-256-Q5_K_M.gguf',
               'models/synth/synth-qwen3-256-Q5_K_M.gguf', 'models/synth/synth-qwen2-256-Q6_K.gguf',
               'models/synth/synth-qwen3-256-Q6_K.gguf')
LAYER_JSON = '/usr/share/vulkan/explicit_layer.d/VkLayer_khronos_validation.json'
# quantize-vulkan quantizes the qwen F32 models left out above (and is the
# model tools' test more than the GPU's)
SKIP_TESTS = ('quantize-vulkan',)
GLIBC = ('linux-vdso', 'libc.so', 'libm.so', 'ld-linux', 'libpthread', 'libdl.so', 'librt.so')
LIMIT = 60 << 20   # bytes of DEST, below the tool's 64 MiB with the repository


def main():
    if len(sys.argv) != 3:
        sys.exit('usage: device_pack.py BUILD DEST')
    build, dest = (os.path.realpath(a) for a in sys.argv[1:])
    root = os.path.dirname(build)
    shared = os.path.realpath(os.environ.get('EMBER_SHARED', os.path.join(root, '..', 'shared')))
    if os.path.exists(dest):
        shutil.rmtree(dest)
    for d in ('bin', 'lib', 'shared', 'layer'):
        os.makedirs(os.path.join(dest, d))

    out = subprocess.run(['meson', 'introspect', build, '--tests'], check=True,
                         capture_output=True, text=True).stdout
    tests, bins = [], {os.path.join(build, 'firmware', 'ember'),
                       os.path.join(build, 'tests', 'golden', 'nmse'),
                       os.path.join(build, 'tests', 'bench', 'genmodel')}

    def rel(s):
        """A path or a NAME=path argument, relative to DEST or the root."""
        s = s.replace(os.path.join(root, '..', 'shared'), '@DEST@/shared')
        s = s.replace(shared, '@DEST@/shared')
        if build in s:
            p = s[s.index(build):]
            real = os.path.realpath(p)
            if real.startswith(build + '/') and os.path.isfile(real) and os.access(real, os.X_OK) \
                    and not real.endswith('.py'):
                bins.add(real)
                return s[:s.index(build)] + '@DEST@/bin/' + os.path.basename(real)
            s = s.replace(p, real)
        return s.replace(root + '/', '@ROOT@/')

    for t in json.loads(out):
        if 'ember:gpu' not in t['suite']:
            continue
        env = t['env']
        if 'EMBER_VK_AS_GPU' in env or 'LP_NATIVE_VECTOR_WIDTH' in env:
            continue
        exe = os.path.basename(t['cmd'][0])
        if exe in ('spirv-val',) or any('check_glslang' in a for a in t['cmd']):
            continue
        if t['name'] in SKIP_TESTS:
            continue
        # meson runs a test in the build folder: relative arguments name files there
        cmd = [os.path.join(build, a) if not os.path.isabs(a) and os.path.exists(os.path.join(build, a))
               else a for a in t['cmd']]
        if os.path.basename(cmd[0]).startswith('python3'):
            cmd = ['python3'] + cmd[1:]
        tests.append({'name': t['name'], 'cmd': [rel(a) for a in cmd],
                      'env': {k: rel(v) for k, v in env.items()},
                      'timeout': t['timeout']})

    # the validation layer: its manifest names the library by a path relative
    # to itself ("./"; a bare file name would go to dlopen's search path)
    if not os.path.isfile(LAYER_JSON):
        sys.exit('device_pack: %s is missing (Debian: vulkan-validationlayers)' % LAYER_JSON)
    with open(LAYER_JSON) as f:
        manifest = json.load(f)
    lib_name = manifest['layer']['library_path']
    layer_lib = lib_name if os.path.isabs(lib_name) else next(
        (os.path.join(d, lib_name) for d in ('/usr/lib/x86_64-linux-gnu', '/usr/lib')
         if os.path.isfile(os.path.join(d, lib_name))), None)
    if not layer_lib:
        sys.exit('device_pack: the validation layer library %s is not found' % lib_name)
    manifest['layer']['library_path'] = './' + os.path.basename(layer_lib)
    with open(os.path.join(dest, 'layer', os.path.basename(LAYER_JSON)), 'w') as f:
        json.dump(manifest, f, indent=1)
    with open(layer_lib, 'rb') as src, gzip.open(os.path.join(dest, 'layer', os.path.basename(layer_lib) + '.gz'),
                                                 'wb', compresslevel=9) as dst:
        shutil.copyfileobj(src, dst)

    for b in sorted(bins) + [layer_lib]:
        if b != layer_lib:
            d = os.path.join(dest, 'bin', os.path.basename(b))
            shutil.copy2(b, d)
            subprocess.run(['strip', d], check=True)
        for line in subprocess.run(['ldd', b], check=True, capture_output=True, text=True).stdout.splitlines():
            parts = line.split()
            if '=>' not in parts or any(g in parts[0] for g in GLIBC):
                continue
            lib = parts[parts.index('=>') + 1]
            target = os.path.join(dest, 'lib', parts[0])
            if os.path.isfile(lib) and not os.path.exists(target):
                shutil.copy2(os.path.realpath(lib), target)

    for dirpath, _, files in os.walk(shared):
        for f in files:
            src = os.path.join(dirpath, f)
            r = os.path.relpath(src, shared)
            if any(r.startswith(s) for s in SKIP_SHARED):
                continue
            os.makedirs(os.path.join(dest, 'shared', os.path.dirname(r)), exist_ok=True)
            shutil.copy2(src, os.path.join(dest, 'shared', r))

    with open(os.path.join(dest, 'tests.json'), 'w') as f:
        json.dump(tests, f, indent=1)
    total = sum(os.path.getsize(os.path.join(p, f)) for p, _, fs in os.walk(dest) for f in fs)
    print('device_pack: %d tests, %d executables, %.1f MiB in %s' % (len(tests), len(bins), total / 2**20, dest))
    if total > LIMIT:
        sys.exit('device_pack: %.1f MiB is over the %d MiB a carried tree may take with the '
                 'repository' % (total / 2**20, LIMIT >> 20))


if __name__ == '__main__':
    main()
