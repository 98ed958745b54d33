// kvread.glsl — the K and V cache bindings (2 and 3) and reading one
// position's K or V row from the paged cache in 8-value chunks: f16 rows, or
// with -DKV_Q8 int8 rows with one f16 scale per 32 values stored after all
// rows (see rope_kv.comp). With -DKV_TEXEL (f16 rows only) the cache is read
// through uniform texel buffers of uvec4 texels, which llvmpipe fetches at
// about half the cost of storage-buffer words. Needs pc.kscale_off /
// pc.vscale_off for KV_Q8.

#if defined(KV_TEXEL)
layout(binding = 2) uniform usamplerBuffer kct;
layout(binding = 3) uniform usamplerBuffer vct;
#else
layout(std430, binding = 2) readonly buffer KC { uvec4 kc4[]; };
layout(std430, binding = 2) readonly buffer KCW { uint kcw[]; };
layout(std430, binding = 3) readonly buffer VC { uvec4 vc4[]; };
layout(std430, binding = 3) readonly buffer VCW { uint vcw[]; };
#endif

#if defined(KV_Q8)
vec4 i8v(uint q)
{
    ivec4 v = ivec4(int(q << 24), int(q << 16), int(q << 8), int(q)) >> 24;
    return vec4(v);
}

// values 8*c .. 8*c+7 of row r (n values per row) of K (is_v false) or V
void kv_chunk(bool is_v, uint r, uint n, uint c, out vec4 a, out vec4 b)
{
    const uint w = (r * n) / 4u + 2u * c;             // first word of the chunk
    const uint sidx = (is_v ? pc.vscale_off : pc.kscale_off) + r * (n / 32u) + c / 4u;
    const uint sw = is_v ? vcw[sidx >> 1] : kcw[sidx >> 1];
    const float d = unpackHalf2x16(sw)[sidx & 1u];
    const uint w0 = is_v ? vcw[w] : kcw[w], w1 = is_v ? vcw[w + 1u] : kcw[w + 1u];
    a = d * i8v(w0);
    b = d * i8v(w1);
}
#else
void kv_chunk(bool is_v, uint r, uint n, uint c, out vec4 a, out vec4 b)
{
#if defined(KV_TEXEL)
    const int i = int(r * (n / 8u) + c);
    const uvec4 k = is_v ? texelFetch(vct, i) : texelFetch(kct, i);
#else
    const uvec4 k = is_v ? vc4[r * (n / 8u) + c] : kc4[r * (n / 8u) + c];
#endif
    a = vec4(unpackHalf2x16(k.x), unpackHalf2x16(k.y));
    b = vec4(unpackHalf2x16(k.z), unpackHalf2x16(k.w));
}
#endif
