// bench_fma.comp — arithmetic peak: every invocation runs `iters` rounds of
// CHAINS independent vec4 FMA chains (x = x * a + b), 8 * CHAINS flops per
// round, and writes one float so that nothing is optimized away. With
// a < 1 the chains converge to b / (1 - a): no overflow, no denormals.
// Independent chains hide the FMA latency on CPUs (llvmpipe runs 8 lanes
// per vector register) as well as on GPUs.
#version 450

#ifndef CHAINS
#define CHAINS 4
#endif

layout(local_size_x = 256, local_size_x_id = 0) in;   // spec constant 0

layout(std430, set = 0, binding = 0) writeonly buffer Out { float o[]; };

layout(push_constant) uniform Push {
    float a;
    float b;
    uint iters;      // rounds (a multiple of 4)
    uint pad;
} pc;

void main()
{
    vec4 va = vec4(pc.a), vb = vec4(pc.b);
    vec4 x[CHAINS];
    float seed = float(gl_GlobalInvocationID.x & 1023u) * (1.0 / 1024.0);
    for (int c = 0; c < CHAINS; c++)
        x[c] = vec4(seed) + vec4(0.0, 0.25, 0.5, 0.75) + float(c);
    for (uint i = 0u; i < pc.iters; i += 4u) {
        for (int u = 0; u < 4; u++)
            for (int c = 0; c < CHAINS; c++)
                x[c] = fma(x[c], va, vb);
    }
    vec4 s = x[0];
    for (int c = 1; c < CHAINS; c++)
        s += x[c];
    o[gl_GlobalInvocationID.x] = dot(s, vec4(1.0));
}
