// topk.comp — what the host needs of a row of logits to choose a token,
// without reading the row: one workgroup per row (gl_WorkGroupID.x) steers
// the row in place (the penalties and logit_bias as sparse entries
// {id, rep, sub}: x = (x > 0 ? x / rep : x * rep) - sub; then a grammar's
// bitmask, outside of which x = -inf), and writes its maximum and argmax
// (lowest id on ties), the sums of exp(x - max) and exp((x - max) / T), and
// the K largest values with their ids (ties at the K-th value: the lowest
// ids), found by a radix select over order-preserving keys: four passes of
// 256-bin histograms, then one pass that writes each candidate into a slot
// fixed by counts (so the output does not depend on thread timing).
//
// Steer buffer (uint words): per row r at 4 r: temperature (float bits; 0:
// greedy, no sum at T), the number of entries, the word offset of its
// entries (3 words each; one per id), the word offset of its mask
// ((V + 31) / 32 words) or 0xffffffff for none.
// Output per row at r * out_stride: max, argmax, sum1, sumT, n (the
// candidates written: min(K, V)), 3 unused, then K ids, then K values.
#version 450

#define WG 256
#define K 64

layout(local_size_x = WG) in;

layout(std430, binding = 0) buffer Logits { float x[]; };
layout(std430, binding = 1) readonly buffer Steer { uint st[]; };
layout(std430, binding = 2) writeonly buffer Out { uint o[]; };

layout(push_constant) uniform Push {
    uint V, out_stride;
} pc;

shared uint hist[256];
shared uint s_prefix, s_mask, s_rem;
shared float s_max[WG];
shared uint s_arg[WG];
shared float s_sum1[WG], s_sumT[WG];
shared uint s_above[WG], s_tie[WG];

uint key_of(float v)
{
    if (isnan(v))
        return 0u;
    uint u = floatBitsToUint(v);
    return (u & 0x80000000u) != 0u ? ~u : (u | 0x80000000u);
}

void main()
{
    const uint r = gl_WorkGroupID.x, t = gl_LocalInvocationID.x, V = pc.V;
    const uint base = r * V;
    const float temp = uintBitsToFloat(st[4 * r]);
    const uint n_adj = st[4 * r + 1], adj = st[4 * r + 2], mask = st[4 * r + 3];

    // steer in place: the sparse entries (distinct ids), then the mask
    for (uint a = t; a < n_adj; a += WG) {
        uint id = st[adj + 3 * a];
        float rep = uintBitsToFloat(st[adj + 3 * a + 1]), sub = uintBitsToFloat(st[adj + 3 * a + 2]);
        float v = x[base + id];
        if (rep != 1.0)
            v = v > 0.0 ? v / rep : v * rep;
        x[base + id] = v - sub;
    }
    memoryBarrierBuffer();
    barrier();
    if (mask != 0xffffffffu) {
        for (uint i = t; i < V; i += WG)
            if (((st[mask + i / 32u] >> (i % 32u)) & 1u) == 0u)
                x[base + i] = uintBitsToFloat(0xff800000u);   // -inf
        memoryBarrierBuffer();
        barrier();
    }

    // max and argmax (lowest id on ties; NaN never wins)
    float m = uintBitsToFloat(0xff800000u);
    uint am = 0xffffffffu;
    for (uint i = t; i < V; i += WG) {
        float v = x[base + i];
        if (v > m || (am == 0xffffffffu && !isnan(v))) {
            m = v;
            am = i;
        }
    }
    s_max[t] = m;
    s_arg[t] = am;
    barrier();
    for (uint w = WG / 2; w > 0; w >>= 1) {
        if (t < w) {
            float m2 = s_max[t + w];
            uint a2 = s_arg[t + w];
            if (a2 != 0xffffffffu && (s_arg[t] == 0xffffffffu || m2 > s_max[t] || (m2 == s_max[t] && a2 < s_arg[t]))) {
                s_max[t] = m2;
                s_arg[t] = a2;
            }
        }
        barrier();
    }
    const float mx = s_max[0];
    const uint amx = s_arg[0];

    // sums of exp(x - max) and exp((x - max) / T), in a fixed order
    float s1 = 0.0, sT = 0.0;
    bool finite_max = !isinf(mx) && !isnan(mx);
    for (uint i = t; i < V && finite_max; i += WG) {
        float d = x[base + i] - mx;
        s1 += exp(d);
        if (temp > 0.0)
            sT += exp(d / temp);
    }
    s_sum1[t] = s1;
    s_sumT[t] = sT;
    barrier();
    for (uint w = WG / 2; w > 0; w >>= 1) {
        if (t < w) {
            s_sum1[t] += s_sum1[t + w];
            s_sumT[t] += s_sumT[t + w];
        }
        barrier();
    }

    // radix select: the key of the K-th largest, and how many of it to take
    const uint k_eff = V < K ? V : K;
    if (t == 0) {
        s_prefix = 0u;
        s_mask = 0u;
        s_rem = k_eff;
    }
    barrier();
    for (int pass = 3; pass >= 0; pass--) {
        hist[t] = 0u;   // WG == 256 bins
        barrier();
        uint pre = s_prefix, msk = s_mask, sh = uint(pass) * 8u;
        for (uint i = t; i < V; i += WG) {
            uint k = key_of(x[base + i]);
            if ((k & msk) == pre)
                atomicAdd(hist[(k >> sh) & 255u], 1u);
        }
        barrier();
        if (t == 0) {
            uint cum = 0u, rem = s_rem;
            int b = 255;
            for (; b > 0; b--) {
                if (cum + hist[b] >= rem)
                    break;
                cum += hist[b];
            }
            s_prefix = pre | (uint(b) << sh);
            s_mask = msk | (255u << sh);
            s_rem = rem - cum;
        }
        barrier();
    }
    const uint thr = s_prefix, n_tie = s_rem, n_above = k_eff - n_tie;

    // the candidates: contiguous chunks per thread, slots from the counts
    // before it (ties: the lowest ids first)
    const uint chunk = (V + WG - 1) / WG, lo = t * chunk, hi = min(V, lo + chunk);
    uint ca = 0u, ct = 0u;
    for (uint i = lo; i < hi; i++) {
        uint k = key_of(x[base + i]);
        ca += k > thr ? 1u : 0u;
        ct += k == thr ? 1u : 0u;
    }
    s_above[t] = ca;
    s_tie[t] = ct;
    barrier();
    uint pa = 0u, pt = 0u;
    for (uint j = 0; j < t; j++) {
        pa += s_above[j];
        pt += s_tie[j];
    }
    const uint ob = r * pc.out_stride;
    for (uint i = lo; i < hi; i++) {
        float v = x[base + i];
        uint k = key_of(v);
        uint slot = 0xffffffffu;
        if (k > thr)
            slot = pa++;
        else if (k == thr) {
            if (pt < n_tie)
                slot = n_above + pt;
            pt++;
        }
        if (slot < k_eff) {
            o[ob + 8u + slot] = i;
            o[ob + 8u + K + slot] = floatBitsToUint(v);
        }
    }
    if (t == 0) {
        o[ob + 0u] = floatBitsToUint(mx);
        o[ob + 1u] = amx;
        o[ob + 2u] = floatBitsToUint(s_sum1[0]);
        o[ob + 3u] = floatBitsToUint(s_sumT[0]);
        o[ob + 4u] = k_eff;
    }
}
