// common.glsl — small helpers shared by ember's kernels: unpacking of
// quantized words and packed halves. Bindings named `sc` (packed f16 pairs)
// must be declared by the including shader before use of half_at().

// the four bytes of q as floats 0..255 (byte 0 in .x)
vec4 u8x4(uint q)
{
    return vec4(float(q & 0xFFu), float((q >> 8) & 0xFFu), float((q >> 16) & 0xFFu), float(q >> 24));
}

// the low nibbles of the four bytes of q as floats 0..15
vec4 u4x4(uint q)
{
    return u8x4(q & 0x0F0F0F0Fu);
}

// the four bytes of q as signed floats -128..127
vec4 i8x4(uint q)
{
    ivec4 v = ivec4(int(q << 24), int(q << 16), int(q << 8), int(q)) >> 24;
    return vec4(v);
}

// signed byte i (0..7) of the 8 bytes in (w0, w1)
float i8_at(uint w0, uint w1, uint i)
{
    uint w = i < 4u ? w0 : w1;
    return float(int(w << (24u - 8u * (i & 3u))) >> 24);
}

// (scale, min) of Q4_K/Q5_K sub-blocks j and j+1 (j even) as (sc_j, m_j,
// sc_j1, m_j1), from the three scale words as core/gpu/wpack.c repacks them: the
// low 4 bits of the scales in the nibbles of s0, of the mins in s1, the top
// 2 bits in s2 (scale k at bit 2k, min k at 16 + 2k). (The GGUF packing
// needed byte selects per sub-block: 12% of a decode product's time.)
vec4 k4_scale_min(uint j, uint s0, uint s1, uint s2)
{
    const uint a = s0 >> (4u * j), b = s1 >> (4u * j), h = s2 >> (2u * j);
    return vec4(float((a & 15u) | ((h & 3u) << 4)), float((b & 15u) | (((h >> 16) & 3u) << 4)),
                float(((a >> 4) & 15u) | (((h >> 2) & 3u) << 4)), float(((b >> 4) & 15u) | (((h >> 18) & 3u) << 4)));
}

#define half_at(i) (unpackHalf2x16(sc[(i) >> 1])[(i) & 1u])

#if defined(TYPE_IQ4_NL) || defined(TYPE_IQ4_XS) || defined(TYPE_MXFP4)
// the values of the nibbles of IQ4_NL and IQ4_XS, or of MXFP4 (E2M1
// doubled) (core/model/quant.c)
#if defined(TYPE_MXFP4)
const float NIB[16] = float[16](0.0, 1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0,
                                0.0, -1.0, -2.0, -3.0, -4.0, -6.0, -8.0, -12.0);
#else
const float NIB[16] = float[16](-127.0, -104.0, -83.0, -65.0, -49.0, -35.0, -22.0, -10.0,
                                1.0, 13.0, 25.0, 38.0, 53.0, 69.0, 89.0, 113.0);
#endif
// the table values of the low nibbles of the four bytes of q
vec4 nib4(uint q)
{
    return vec4(NIB[q & 15u], NIB[(q >> 8) & 15u], NIB[(q >> 16) & 15u], NIB[(q >> 24) & 15u]);
}
#endif

// MXFP4's block scale from its E8M0 byte e: 2^(e - 128) (subnormal below e = 2)
float e8m0_half(uint e)
{
    return uintBitsToFloat(e < 2u ? 0x00200000u << e : (e - 1u) << 23);
}

// The RMS norm's factor 1 / sqrt(ms + eps) for the mean square ms, or NaN
// when ms overflowed to infinity: the factor would be 0 and silently zero a
// row of huge but finite activations, where NaN reaches the logits check
// ("non-finite logit": broken weights). As core/run/ref.c em_ref_rmsnorm.
float rms_scale(float ms, float eps)
{
    // by its bits: without the float-controls execution mode an implementation
    // may assume no infinities and fold isinf() to false
    return (floatBitsToUint(ms) & 0x7FFFFFFFu) >= 0x7F800000u ? uintBitsToFloat(0x7FC00000u)
                                                                : inversesqrt(ms + eps);
}

// The gate of a gated FFN: SiLU g * sigmoid(g), or (gelu) GELU in its tanh
// form, 0.5 g (1 + tanh(c (g + 0.044715 g^3))) = g * sigmoid(2 c (...)),
// written with exp so that large |g| cannot make inf / inf (as
// core/run/ref.c em_ref_swiglu and em_ref_geglu).
float ffn_gate(float g, bool gelu)
{
    const float z = gelu ? 1.5957691216057308 * g * (1.0 + 0.044715 * g * g) : g;
    return g / (1.0 + exp(-z));
}
