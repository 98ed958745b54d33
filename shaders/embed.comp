// embed.comp — embedding lookup: x[t][k] = scale * token_embd[tok[t]][k] for every
// weight type, reading the row-interleaved layout through dequant.glsl.
// One invocation per 4 elements; grid (ceil(E/4 / 64), T). A table larger
// than one binding is bound in chunks of rows [row0, row0 + rows), one
// dispatch each: a token whose row another chunk holds is left alone.
#version 450

#include "common.glsl"

layout(local_size_x = 64) in;
layout(constant_id = 0) const uint R = 8;     // rows per group of the packed table
layout(constant_id = 1) const uint C = 1;     // blocks per chunk of the packed table

layout(std430, binding = 0) readonly buffer QW { uint qw[]; };
layout(std430, binding = 1) readonly buffer SC { uint sc[]; };
layout(std430, binding = 2) readonly buffer PV { int step[]; };
layout(std430, binding = 3) writeonly buffer XV { vec4 x4[]; };

layout(push_constant) uniform Push {
    uint E;          // row length (elements, multiple of 4)
    uint T;          // tokens
    uint x_stride;   // floats between rows of x
    uint tok_off;    // int offset of the token ids in step
    uint row0;       // the first row of the table this chunk holds (a multiple of R)
    uint rows;       // rows it holds
    float scale;     // the rows times this (Gemma: sqrt(E); else 1)
} pc;

#include "dequant.glsl"

void main()
{
    uint j4 = gl_GlobalInvocationID.x, t = gl_WorkGroupID.y;
    if (j4 >= pc.E / 4u || t >= pc.T)
        return;
    uint row = uint(step[pc.tok_off + t]);
    if (row < pc.row0 || row - pc.row0 >= pc.rows)
        return;   // another chunk's row
    row -= pc.row0;
    uint nb = (pc.E + BS - 1u) / BS;
    x4[t * (pc.x_stride / 4u) + j4] = pc.scale * dq4(row / R, nb, (j4 * 4u) / BS, row % R, (j4 * 4u % BS) / 4u);
}
