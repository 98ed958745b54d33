#!/usr/bin/env python3
# embed.py — turns the SPIR-V modules compiled from shaders/meson.build into
# em_kernels.c / em_kernels.h: one uint32_t array per kernel variant and the
# table em_kernels[] (enum EM_K_<NAME>) of em_vk_kernel rows (core/vk/vk.h).
#
# It also reads each module and fails the build when the table and the
# shader disagree: bindings outside set 0 / 0..n_bindings-1 or neither
# storage buffers nor uniform texel buffers (usamplerBuffer), a binding the
# shader uses as the other kind than declared (the declared texel bindings
# become the row's `texel` mask, whether the shader reads them or not), a
# push_constant block whose size differs from the declared push size, or a
# capability ember does not know how to enable. The features a
# module's capabilities need become the row's `needs` mask, and its
# specialization constant ids its `n_spec`.
#
# usage: embed.py --c OUT.c --h OUT.h --meta NAME:BINDINGS:PUSH:TEXELS... --spv FILE...
import argparse
import re
import struct
import sys

MAGIC = 0x07230203

# SPIR-V opcodes / enums used here
OP_CAPABILITY, OP_TYPE_INT, OP_TYPE_FLOAT, OP_TYPE_VECTOR = 17, 21, 22, 23
OP_TYPE_MATRIX, OP_TYPE_ARRAY, OP_TYPE_RUNTIME_ARRAY, OP_TYPE_STRUCT = 24, 28, 29, 30
OP_TYPE_POINTER, OP_CONSTANT, OP_SPEC_CONSTANT, OP_VARIABLE = 32, 43, 50, 59
OP_DECORATE, OP_MEMBER_DECORATE = 71, 72
OP_TYPE_IMAGE, OP_TYPE_SAMPLED_IMAGE, DIM_BUFFER = 25, 27, 5
DEC_SPEC_ID, DEC_BLOCK, DEC_BUFFER_BLOCK, DEC_ARRAY_STRIDE = 1, 2, 3, 6
DEC_BINDING, DEC_SET, DEC_OFFSET = 33, 34, 35
SC_UNIFORM_CONSTANT, SC_UNIFORM, SC_PUSH_CONSTANT, SC_STORAGE_BUFFER = 0, 2, 9, 12
SC_IGNORED = {1, 3, 4, 5, 6, 7, 8}   # Input, Output, Workgroup, CrossWorkgroup,
                                      # Private, Function, Generic

# capability -> EM_VK_F_* it needs ('' : nothing to enable)
CAPS = {
    0: '', 1: '',                                # Matrix, Shader
    46: '',                                      # SampledBuffer (texel buffers: core)
    9: 'EM_VK_F_FLOAT16', 10: 'EM_VK_F_FLOAT64', 11: 'EM_VK_F_INT64',
    22: 'EM_VK_F_INT16', 39: 'EM_VK_F_INT8',
    61: 'EM_VK_F_SG_BASIC', 62: 'EM_VK_F_SG_VOTE', 63: 'EM_VK_F_SG_ARITH',
    64: 'EM_VK_F_SG_BALLOT', 65: 'EM_VK_F_SG_SHUFFLE', 66: 'EM_VK_F_SG_SHUFREL',
    67: 'EM_VK_F_SG_CLUSTER', 68: 'EM_VK_F_SG_QUAD',
    4433: 'EM_VK_F_STORAGE16',                   # StorageBuffer16BitAccess
    4448: 'EM_VK_F_STORAGE8',                    # StorageBuffer8BitAccess
    6016: 'EM_VK_F_DOT', 6017: 'EM_VK_F_DOT',    # DotProductInput*
    6018: 'EM_VK_F_DOT', 6019: 'EM_VK_F_DOT',    # DotProduct
}
CAP_NAMES = {
    4434: 'UniformAndStorageBuffer16BitAccess', 4435: 'StoragePushConstant16',
    4436: 'StorageInputOutput16', 4449: 'UniformAndStorageBuffer8BitAccess',
    4450: 'StoragePushConstant8', 5345: 'VulkanMemoryModel',
    5347: 'PhysicalStorageBufferAddresses', 12: 'Int64Atomics',
}


def fail(msg):
    sys.stderr.write('embed.py: %s\n' % msg)
    sys.exit(1)


def words_of(path):
    data = open(path, 'rb').read()
    if len(data) % 4 or len(data) < 20:
        fail('%s: not a SPIR-V module (size %d)' % (path, len(data)))
    w = list(struct.unpack('<%dI' % (len(data) // 4), data))
    if w[0] != MAGIC:
        fail('%s: bad SPIR-V magic 0x%08x' % (path, w[0]))
    return w


def analyse(name, path, words):
    """Return (needs list, n_spec, bindings set, push bytes) of one module."""
    caps, spec_ids = [], []
    dec = {}        # id -> {decoration: [operands]}
    mdec = {}       # (struct id, member) -> {decoration: [operands]}
    types = {}      # id -> (opcode, operands)
    consts = {}     # id -> value (first word)
    variables = []  # (pointer type id, id, storage class)
    i = 5
    while i < len(words):
        n, op = words[i] >> 16, words[i] & 0xFFFF
        if n == 0 or i + n > len(words):
            fail('%s: truncated instruction at word %d' % (path, i))
        a = words[i + 1:i + n]
        if op == OP_CAPABILITY:
            caps.append(a[0])
        elif op == OP_DECORATE:
            dec.setdefault(a[0], {})[a[1]] = a[2:]
            if a[1] == DEC_SPEC_ID:
                spec_ids.append(a[2])
        elif op == OP_MEMBER_DECORATE:
            mdec.setdefault((a[0], a[1]), {})[a[2]] = a[3:]
        elif op in (OP_TYPE_INT, OP_TYPE_FLOAT, OP_TYPE_VECTOR, OP_TYPE_MATRIX,
                    OP_TYPE_ARRAY, OP_TYPE_RUNTIME_ARRAY, OP_TYPE_STRUCT, OP_TYPE_POINTER,
                    OP_TYPE_IMAGE, OP_TYPE_SAMPLED_IMAGE):
            types[a[0]] = (op, a[1:])
        elif op in (OP_CONSTANT, OP_SPEC_CONSTANT):
            consts[a[1]] = a[2] if len(a) > 2 else 0
        elif op == OP_VARIABLE:
            variables.append((a[0], a[1], a[2]))
        i += n

    needs = []
    for c in caps:
        if c not in CAPS:
            fail('kernel %s (%s): SPIR-V capability %s is not one ember enables on the device'
                 % (name, path, CAP_NAMES.get(c, str(c))))
        if CAPS[c] and CAPS[c] not in needs:
            needs.append(CAPS[c])

    def size_of(tid):
        op, a = types[tid]
        if op in (OP_TYPE_INT, OP_TYPE_FLOAT):
            return a[0] // 8
        if op == OP_TYPE_VECTOR:
            return size_of(a[0]) * a[1]
        if op == OP_TYPE_MATRIX:
            return size_of(a[0]) * a[1]
        if op == OP_TYPE_ARRAY:
            stride = dec.get(tid, {}).get(DEC_ARRAY_STRIDE, [size_of(a[0])])[0]
            return stride * consts.get(a[1], 0)
        if op == OP_TYPE_STRUCT:
            end = 0
            for m, mt in enumerate(a):
                off = mdec.get((tid, m), {}).get(DEC_OFFSET, [0])[0]
                end = max(end, off + size_of(mt))
            return end
        fail('kernel %s: unsupported type in the push_constant block' % name)

    bindings, texel, push = set(), set(), 0
    for ptype, vid, sc in variables:
        if sc in SC_IGNORED:
            continue
        pointee = types[ptype][1][1]
        d = dec.get(vid, {})
        if sc == SC_PUSH_CONSTANT:
            push = size_of(pointee)
            continue
        is_ssbo = sc == SC_STORAGE_BUFFER or (
            sc == SC_UNIFORM and DEC_BUFFER_BLOCK in dec.get(pointee, {}))
        # a usamplerBuffer: sampled image of a Dim=Buffer, Sampled=1 image
        is_texel = False
        if sc == SC_UNIFORM_CONSTANT and types.get(pointee, (None,))[0] == OP_TYPE_SAMPLED_IMAGE:
            img = types.get(types[pointee][1][0], (None, []))
            is_texel = img[0] == OP_TYPE_IMAGE and img[1][1] == DIM_BUFFER and img[1][5] == 1
        if is_texel:
            dset = d.get(DEC_SET, [0])[0]
            b = d.get(DEC_BINDING, [None])[0]
            if dset != 0 or b is None:
                fail('kernel %s: texel buffer %%%d is at set %d binding %s; use set 0'
                     % (name, vid, dset, b))
            bindings.add(b)
            texel.add(b)
            continue
        if not is_ssbo:
            fail('kernel %s: variable %%%d is a %s; ember kernels bind storage buffers only'
                 % (name, vid, 'uniform buffer' if sc == SC_UNIFORM else
                    'image/sampler' if sc == SC_UNIFORM_CONSTANT else
                    'storage class %d' % sc))
        dset = d.get(DEC_SET, [0])[0]
        b = d.get(DEC_BINDING, [None])[0]
        if dset != 0 or b is None:
            fail('kernel %s: storage buffer %%%d is at set %d binding %s; use set 0'
                 % (name, vid, dset, b))
        if b in texel:
            fail('kernel %s: binding %d is both a texel buffer and a storage buffer' % (name, b))
        if b in bindings:
            continue   # an alias: another view of the same storage buffer
        bindings.add(b)
    n_spec = max(spec_ids) + 1 if spec_ids else 0
    return needs, n_spec, bindings, push, sum(1 << b for b in texel)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--c', required=True)
    ap.add_argument('--h', required=True)
    ap.add_argument('--meta', nargs='+', required=True,
                    help='NAME:BINDINGS:PUSH:TEXELS per module (TEXELS: comma-separated, may be empty)')
    ap.add_argument('--spv', nargs='+', required=True)
    args = ap.parse_args()
    if len(args.meta) != len(args.spv):
        fail('%d --meta entries for %d modules' % (len(args.meta), len(args.spv)))

    rows, seen = [], set()
    for meta, path in zip(args.meta, args.spv):
        try:
            name, nb, push, texels = meta.split(':')
            nb, push = int(nb), int(push)
            declared = {int(b) for b in texels.split(',') if b}
        except ValueError:
            fail('bad --meta %r (want NAME:BINDINGS:PUSH:TEXELS)' % meta)
        if not re.fullmatch(r'[a-z][a-z0-9_]*', name):
            fail('kernel name %r: use lower_case letters, digits and _' % name)
        if name in seen:
            fail('kernel %s listed twice in shaders/meson.build' % name)
        seen.add(name)
        words = words_of(path)
        needs, n_spec, bindings, push_real, used_texel = analyse(name, path, words)
        for b in range(nb):
            used = 'a texel buffer' if used_texel >> b & 1 else 'a storage buffer' if b in bindings else None
            if used and (b in declared) != (used_texel >> b & 1 == 1):
                fail('kernel %s: binding %d is %s in the shader but %s in shaders/meson.build'
                     % (name, b, used, 'a texel binding' if b in declared else 'not a texel binding'))
        if any(b >= nb for b in declared):
            fail('kernel %s: texel binding past its %d bindings in shaders/meson.build' % (name, nb))
        texel = sum(1 << b for b in declared)
        extra = sorted(b for b in bindings if b >= nb)
        if extra:
            fail('kernel %s: shaders/meson.build says %d bindings but the shader uses '
                 'binding %d' % (name, nb, extra[0]))
        if push_real and (push_real + 3) // 4 * 4 != push:
            fail('kernel %s: shaders/meson.build says %d push-constant bytes but the '
                 "shader's push_constant block is %d bytes" % (name, push, push_real))
        if push % 4:
            fail('kernel %s: push size %d is not a multiple of 4' % (name, push))
        rows.append((name, words, nb, push, n_spec, needs, texel))

    guard = 'EM_KERNELS_H'
    h = ['/* em_kernels.h — generated by shaders/embed.py from the variant list in',
         ' * shaders/meson.build; do not edit. The table of embedded SPIR-V kernels:',
         ' * em_kernels[EM_K_<NAME>] is the em_vk_kernel for em_vk_pipe_create(). */',
         '#ifndef ' + guard, '#define ' + guard, '', '#include "core/vk/vk.h"', '', 'enum {']
    for name, *_ in rows:
        h.append('    EM_K_%s,' % name.upper())
    h += ['    EM_K_COUNT', '};', '']
    for name, words, nb, push, n_spec, needs, texel in rows:
        h.append('#define EM_K_%s_BINDINGS %d' % (name.upper(), nb))
        h.append('#define EM_K_%s_PUSH %d' % (name.upper(), push))
    h += ['', 'extern const em_vk_kernel em_kernels[EM_K_COUNT];', '', '#endif', '']

    c = ['/* em_kernels.c — generated by shaders/embed.py; do not edit. SPIR-V of every',
         ' * kernel variant listed in shaders/meson.build, and the kernel table. */',
         '#include "shaders/em_kernels.h"', '']
    for name, words, *_ in rows:
        c.append('static const uint32_t spv_%s[%d] = {' % (name, len(words)))
        for k in range(0, len(words), 8):
            c.append('    ' + ' '.join('0x%08x,' % x for x in words[k:k + 8]))
        c += ['};', '']
    c.append('const em_vk_kernel em_kernels[EM_K_COUNT] = {')
    for name, words, nb, push, n_spec, needs, texel in rows:
        c.append('    [EM_K_%s] = { "%s", spv_%s, sizeof spv_%s, %d, %d, %d, %s, 0x%x },'
                 % (name.upper(), name, name, name, nb, push, n_spec,
                    ' | '.join(needs) if needs else '0', texel))
    c += ['};', '']

    for path, lines in ((args.h, h), (args.c, c)):
        with open(path, 'w') as f:
            f.write('\n'.join(lines))


if __name__ == '__main__':
    main()
