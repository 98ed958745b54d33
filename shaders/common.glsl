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

// byte i (0..11) of the 12 bytes in (s0, s1, s2)
uint byte_at(uint s0, uint s1, uint s2, uint i)
{
    uint w = i < 4u ? s0 : (i < 8u ? s1 : s2);
    return (w >> (8u * (i & 3u))) & 0xFFu;
}

// (scale, min) of Q4_K/Q5_K sub-blocks j and j+1 as (sc_j, m_j, sc_j1, m_j1)
vec4 k4_scale_min(uint j, uint s0, uint s1, uint s2)
{
    vec4 r;
    for (uint k = 0u; k < 2u; k++) {
        uint jj = j + k, sc, m;
        if (jj < 4u) {
            sc = byte_at(s0, s1, s2, jj) & 63u;
            m = byte_at(s0, s1, s2, jj + 4u) & 63u;
        } else {
            sc = (byte_at(s0, s1, s2, jj + 4u) & 0xFu) | ((byte_at(s0, s1, s2, jj - 4u) >> 6) << 4);
            m = (byte_at(s0, s1, s2, jj + 4u) >> 4) | ((byte_at(s0, s1, s2, jj) >> 6) << 4);
        }
        if (k == 0u) { r.x = float(sc); r.y = float(m); } else { r.z = float(sc); r.w = float(m); }
    }
    return r;
}

#define half_at(i) (unpackHalf2x16(sc[(i) >> 1])[(i) & 1u])
