#!/usr/bin/env python3
# check_glslang.py — compiles one kernel variant with glslang's
# glslangValidator (the second GLSL front end; glslc builds the embedded
# SPIR-V) and validates the result with spirv-val. glslangValidator only
# honours #include when the shader requests GL_GOOGLE_include_directive, which
# glslc does not need; the line is added here after #version (with a #line so
# that messages keep the file's line numbers), in a copy compiled from a
# temporary folder, instead of in every kernel.
#
# usage: check_glslang.py GLSLANG SPIRV_VAL SOURCE INCLUDE_DIR [-DNAME=VALUE...]
import os
import re
import subprocess
import sys
import tempfile


def main():
    if len(sys.argv) < 5:
        sys.stderr.write(__doc__ or 'usage: check_glslang.py GLSLANG SPIRV_VAL SRC INC [-D...]\n')
        return 2
    glslang, spirv_val, src, inc = sys.argv[1:5]
    defines = sys.argv[5:]
    text = open(src).read()
    if 'GL_GOOGLE_include_directive' not in text:
        lines = text.split('\n')
        for i, line in enumerate(lines):
            if re.match(r'\s*#\s*version\b', line):
                lines[i + 1:i + 1] = ['#extension GL_GOOGLE_include_directive : require',
                                      '#line %d' % (i + 2)]
                break
        text = '\n'.join(lines)
    with tempfile.TemporaryDirectory() as tmp:
        copy = os.path.join(tmp, os.path.basename(src))
        with open(copy, 'w') as f:
            f.write(text)
        out = os.path.join(tmp, 'out.spv')
        cmd = [glslang, '-V', '--target-env', 'vulkan1.2', '-S', 'comp',
               '-I' + os.path.dirname(os.path.abspath(src)), '-I' + inc] + defines + \
              ['-o', out, copy]
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        msg = r.stdout.replace(copy, src)
        if r.returncode != 0:
            sys.stderr.write('glslangValidator rejects %s %s:\n%s\n' % (src, ' '.join(defines), msg))
            return 1
        r = subprocess.run([spirv_val, '--target-env', 'vulkan1.2', out],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if r.returncode != 0:
            sys.stderr.write('spirv-val rejects glslang\'s output for %s %s:\n%s\n'
                             % (src, ' '.join(defines), r.stdout))
            return 1
    return 0


if __name__ == '__main__':
    sys.exit(main())
