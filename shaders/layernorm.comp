// layernorm.comp — an encoder's LayerNorm in place, with its bias:
// x[t] = (x[t] - mean) / sqrt(var + eps) * w + b (bert's norms after each
// sub-block, the residual already added by the matrix kernel). With
// pos_off set (the embeddings' norm) the row first gets the learned
// position row of its token's position and the token-type row of its
// type added, both tables in vecs. One workgroup per token: the mean and
// then the variance through shared memory (two passes over the row, as
// core/run/encode.c em_ref_layernorm, so that a large mean does not eat the
// variance's digits). Grid: (1, T).
#version 450

layout(local_size_x = 64) in;

layout(std430, binding = 0) buffer XV { float x[]; };
layout(std430, binding = 1) readonly buffer Vecs { float vecs[]; };
layout(std430, binding = 2) readonly buffer PV { int step[]; };

layout(push_constant) uniform Push {
    uint E, T;        // row length, tokens
    uint x_stride;
    uint w_off, b_off;          // float offsets of the norm's weight and bias in vecs
    uint pos_off;               // position table [n_pos][E] in vecs; 0xFFFFFFFF: no embeddings added
    uint type_off;              // token-type table [n_types][E] in vecs
    uint step_pos, step_type;   // int offsets in step of the positions and the token types
    float eps;
} pc;

shared float red[64];

float row_sum(float v, uint lane)
{
    red[lane] = v;
    barrier();
    for (uint s = 32u; s > 0u; s >>= 1) {
        if (lane < s)
            red[lane] += red[lane + s];
        barrier();
    }
    const float r = red[0];
    barrier();   // (red is reused by the next sum)
    return r;
}

void main()
{
    const uint t = gl_WorkGroupID.y, lane = gl_LocalInvocationID.x;
    if (t >= pc.T)
        return;   // (the whole workgroup: the barriers below stay uniform)
    const uint r = t * pc.x_stride;
    if (pc.pos_off != 0xFFFFFFFFu) {
        const uint p = uint(step[pc.step_pos + t]) * pc.E + pc.pos_off;
        const uint ty = uint(step[pc.step_type + t]) * pc.E + pc.type_off;
        for (uint i = lane; i < pc.E; i += 64u)
            x[r + i] += vecs[p + i] + vecs[ty + i];   // (each lane reads back only its own columns)
    }
    float s = 0.0;
    for (uint i = lane; i < pc.E; i += 64u)
        s += x[r + i];
    const float mean = row_sum(s, lane) / float(pc.E);
    float v = 0.0;
    for (uint i = lane; i < pc.E; i += 64u) {
        const float d = x[r + i] - mean;
        v += d * d;
    }
    const float sc = inversesqrt(row_sum(v, lane) / float(pc.E) + pc.eps);
    for (uint i = lane; i < pc.E; i += 64u)
        x[r + i] = (x[r + i] - mean) * sc * vecs[pc.w_off + i] + vecs[pc.b_off + i];
}
