/* test_attn.c — the paged attention kernels against core/run/ref.c attention:
 * random K/V in a block pool, fragmented and shared block tables, context
 * lengths that are not multiples of the block size, GQA ratios 1, 2, 4 and 8,
 * head sizes 64 and 128 (and small ones); decode queries with and without
 * split-K (+ the reduce pass), and prefill tiles over a cached prefix; and
 * sliding windows (a query sees its last `window` positions) in each. */
#include <math.h>
#include <stdint.h>

#include "core/gpu/forward.h"
#include "core/gpu/kparams.h"
#include "core/gpu/variants.h"
#include "core/model/quant.h"
#include "core/run/ref.h"
#include "shaders/em_kernels.h"
#include "tests/gpu/gpu_util.h"

static unsigned long long seed = 11;
static int kv_q8;   /* test the Q8_0 KV variants */
static uint32_t dec_lanes = 16;   /* workgroup width of attn_dec (ember: 8 on CPUs, >= 16 on GPUs) */
static int dec_grouped;           /* attn_dec_g.comp: one workgroup per KV head (ember: GQA on CPUs) */
static int pre_shuf;              /* attn_pre.comp with SHUF: rows shared by subgroupShuffle (ember: CPUs);
                                     2: and all the query heads of a KV head in one workgroup (ember: CPUs) */
static uint32_t window;           /* a sliding-window layer: positions a query sees (0: all) */
static int sinks;                 /* gpt-oss's attention sinks: one more logit per head */
static float frand(void) { return (float)((double)(test_rand(&seed) >> 11) / 9007199254740992.0) * 2 - 1; }

static em_vk_buf mkbuf(em_vk *vk, const void *data, size_t n)
{
    em_vk_buf b = { 0 };
    em_err err = { 0 };
    int rc = em_vk_alloc(vk, EM_VK_MEM_DEVICE, n < 16 ? 16 : n, &b, &err);
    CHECK_OK(rc, err);
    if (!rc && data) {
        rc = em_vk_upload(vk, &b, 0, data, n, NULL, &err);
        CHECK_OK(rc, err);
    }
    return b;
}

/* One scenario: n_seq sequences with context lengths ctx[s]; the step holds
 * n_q query tokens per sequence at the last positions (n_q = 1: decode). */
static void scenario(em_vk *vk, uint32_t H, uint32_t Hk, uint32_t D, uint32_t Dv, uint32_t n_seq,
                     const uint32_t *ctx, uint32_t n_q, uint32_t nsplit, int share_prefix)
{
    em_err err = { 0 };
    const uint32_t BLK = EM_KV_BLOCK, max_ctx = 4096, bt_stride = max_ctx / BLK;
    uint32_t n_blocks = n_seq * bt_stride + 3;
    /* block tables: a random permutation of the pool (fragmented); with
     * share_prefix, every sequence shares sequence 0's first blocks */
    int32_t *perm = malloc(n_blocks * sizeof *perm);
    for (uint32_t i = 0; i < n_blocks; i++)
        perm[i] = (int32_t)i;
    for (uint32_t i = n_blocks - 1; i > 0; i--) {
        uint32_t j = (uint32_t)(test_rand(&seed) % (i + 1));
        int32_t t = perm[i]; perm[i] = perm[j]; perm[j] = t;
    }
    int32_t *tables = malloc((size_t)n_seq * bt_stride * sizeof *tables);
    for (uint32_t s = 0; s < n_seq; s++)
        for (uint32_t b = 0; b < bt_stride; b++)
            tables[s * bt_stride + b] = perm[s * bt_stride + b];
    uint32_t shared = share_prefix ? (ctx[0] / BLK) / 2 : 0;
    for (uint32_t s = 1; s < n_seq; s++)
        for (uint32_t b = 0; b < shared && (b + 1) * BLK <= ctx[s]; b++)
            tables[s * bt_stride + b] = tables[b];
    /* K/V pool, f16, layout [blk][hk][16][d] */
    size_t kn = (size_t)n_blocks * Hk * D * BLK, vn = (size_t)n_blocks * Hk * Dv * BLK;
    /* values as the kernels will see them (kf/vf, for the reference) and as
     * stored: f16 rows, or int8 rows + f16 scales per 32 after all rows */
    float *kf = malloc(kn * sizeof *kf), *vf = malloc(vn * sizeof *vf);
    size_t kbytes = kv_q8 ? kn + kn / 32 * 2 : kn * 2, vbytes = kv_q8 ? vn + vn / 32 * 2 : vn * 2;
    uint8_t *kh = malloc(kbytes), *vh = malloc(vbytes);
    for (int which = 0; which < 2; which++) {
        size_t n = which ? vn : kn;
        float *f = which ? vf : kf;
        uint8_t *st = which ? vh : kh;
        for (size_t i = 0; i < n; i++)
            f[i] = frand();
        if (!kv_q8) {
            for (size_t i = 0; i < n; i++) {
                uint16_t h = em_f32_to_f16(f[i]);
                memcpy(st + 2 * i, &h, 2);
                f[i] = em_f16_to_f32(h);
            }
            continue;
        }
        for (size_t b = 0; b < n / 32; b++) {
            float amax = 0;
            for (int i = 0; i < 32; i++)
                amax = fmaxf(amax, fabsf(f[b * 32 + i]));
            uint16_t hd = em_f32_to_f16(amax / 127);
            float d = em_f16_to_f32(hd);
            memcpy(st + n + 2 * b, &hd, 2);
            for (int i = 0; i < 32; i++) {
                int q = d > 0 ? (int)lrintf(f[b * 32 + i] / d) : 0;
                q = q > 127 ? 127 : q < -127 ? -127 : q;
                st[b * 32 + i] = (uint8_t)(int8_t)q;
                f[b * 32 + i] = (float)q * d;
            }
        }
    }
    /* tokens */
    uint32_t T = n_seq * n_q, qkv_st = H * D + 2 * Hk * D + 64, out_st = H * Dv + 8;
    float *qkv = malloc((size_t)T * qkv_st * sizeof *qkv);
    for (size_t i = 0; i < (size_t)T * qkv_st; i++)
        qkv[i] = 2 * frand();
    uint32_t off_pos = 0, off_seq = T, off_list = 2 * T, off_bt = 4 * T + 8;   /* lists: pairs */
    int32_t *step = calloc(off_bt + n_seq * bt_stride, sizeof *step);
    uint32_t n_list = 0;
    for (uint32_t s = 0; s < n_seq; s++) {
        for (uint32_t i = 0; i < n_q; i++) {
            uint32_t t = s * n_q + i;
            step[off_pos + t] = (int32_t)(ctx[s] - n_q + i);
            step[off_seq + t] = (int32_t)s;
        }
        if (n_q == 1) {
            /* (token, splits): every token its own split count, at most nsplit */
            step[off_list + 2 * n_list] = (int32_t)s;
            step[off_list + 2 * n_list + 1] = (int32_t)(nsplit > 1 ? 1 + (s + 1) % nsplit : 1);
            n_list++;
        } else {
            for (uint32_t i = 0; i < n_q; i += EM_ATTN_TILE) {
                step[off_list + 2 * n_list] = (int32_t)(s * n_q + i);
                step[off_list + 2 * n_list + 1] = (int32_t)(n_q - i < EM_ATTN_TILE ? n_q - i : EM_ATTN_TILE);
                n_list++;
            }
        }
    }
    memcpy(step + off_bt, tables, (size_t)n_seq * bt_stride * sizeof *step);

    em_vk_buf bq = mkbuf(vk, qkv, (size_t)T * qkv_st * 4), bs = mkbuf(vk, step, (off_bt + n_seq * bt_stride) * 4);
    em_vk_buf bk = mkbuf(vk, kh, kbytes), bv = mkbuf(vk, vh, vbytes);
    uint32_t kso = kv_q8 ? (uint32_t)(kn / 2) : 0, vso = kv_q8 ? (uint32_t)(vn / 2) : 0;
    em_vk_buf bo = mkbuf(vk, NULL, (size_t)T * out_st * 4);
    em_vk_buf bp = mkbuf(vk, NULL, (size_t)T * H * EM_ATTN_MAX_SPLIT * (Dv + 2) * 4);
    /* the sinks at vecs offset 4 (after four unused floats), of either sign */
    float vecs[4 + 64] = { 0 }, *sk = sinks ? vecs + 4 : NULL;
    for (uint32_t h = 0; h < H && sinks; h++)
        sk[h] = 3 * frand();
    uint32_t sink_off = sinks ? 4 : EM_NO_SINKS;
    em_vk_buf bvec = mkbuf(vk, vecs, sizeof vecs);
    float scale = 1.0f / sqrtf((float)D);
    em_vk_pipe *p = NULL, *pr = NULL;
    em_vk_dset *ds = NULL, *dr = NULL;
    em_vk_cmd *cmd = NULL;
    em_vk_buf b7[7] = { bq, bs, bk, bv, bo, bp, bvec }, bpre[6] = { bq, bs, bk, bv, bo, bvec };
    int rc;
    uint32_t spec[4] = { dec_lanes, D, Dv, H / Hk };
    em_hparams hp = { .n_head = H, .n_head_kv = Hk, .head_dim = D, .head_dim_v = Dv };
    uint32_t pre_heads = pre_shuf == 2 ? em_fwd_pre_heads(&hp) : 1;
    if (n_q == 1 && dec_grouped)
        rc = em_vk_pipe_create(vk, &em_kernels[kv_q8 ? EM_K_ATTN_DEC_G_Q8 : EM_K_ATTN_DEC_G], spec, 4, 0, &p, &err);
    else if (n_q == 1)
        rc = em_vk_pipe_create(vk, &em_kernels[kv_q8 ? EM_K_ATTN_DEC_Q8 : EM_K_ATTN_DEC], spec, 3, 0, &p, &err);
    else if (pre_shuf) {
        uint32_t sp[4] = { D, Dv, em_vk_info(vk)->subgroup_size, pre_heads };
        rc = em_vk_pipe_create(vk, &em_kernels[kv_q8 ? EM_K_ATTN_PRE_S_Q8 : EM_K_ATTN_PRE_S], sp, 4, 0, &p, &err);
    } else
        rc = em_vk_pipe_create(vk, &em_kernels[kv_q8 ? EM_K_ATTN_PRE_Q8 : EM_K_ATTN_PRE], spec + 1, 2, 0, &p, &err);
    CHECK_OK(rc, err);
    if (!rc)
        rc = em_vk_dset_create(vk, p, n_q == 1 ? b7 : bpre, &ds, &err);
    if (!rc && n_q == 1 && nsplit > 1) {
        em_vk_buf b3[4] = { bs, bp, bo, bvec };
        if (!(rc = em_vk_pipe_create(vk, &em_kernels[EM_K_ATTN_REDUCE], NULL, 0, 0, &pr, &err)))
            rc = em_vk_dset_create(vk, pr, b3, &dr, &err);
    }
    if (!rc && !(rc = em_vk_cmd_create(vk, 0, &cmd, &err)) && !(rc = em_vk_cmd_begin(cmd, &err))) {
        if (n_q == 1) {
            em_pc_attn_dec pc = { H, Hk, D, Dv, qkv_st, out_st, off_pos, off_seq, off_bt, bt_stride,
                                  off_list, nsplit, scale, kso, vso, window, sink_off };
            em_vk_cmd_dispatch(cmd, p, ds, &pc, dec_grouped ? Hk : H, nsplit, n_list);
            if (nsplit > 1) {
                em_pc_attn_reduce pcr = { H, Dv, nsplit, out_st, off_list, sink_off };
                em_vk_cmd_barrier(cmd);
                em_vk_cmd_dispatch(cmd, pr, dr, &pcr, H, n_list, 1);
            }
        } else {
            em_pc_attn_pre pc = { H, Hk, D, Dv, qkv_st, out_st, off_pos, off_seq, off_bt, bt_stride,
                                  off_list, scale, kso, vso, window, sink_off };
            em_vk_cmd_dispatch(cmd, p, ds, &pc, H / pre_heads, n_list, 1);
        }
        rc = em_vk_cmd_end(cmd, &err);
        if (!rc)
            rc = em_vk_cmd_submit_wait(cmd, &err);
    }
    CHECK_OK(rc, err);
    float *out = calloc((size_t)T * out_st, 4);
    if (!rc) {
        rc = em_vk_download(vk, &bo, 0, out, (size_t)T * out_st * 4, NULL, &err);
        CHECK_OK(rc, err);
    }

    /* reference: K/V rows gathered through the table, f16 -> f32 */
    uint32_t kd = Hk * D, vd = Hk * Dv;
    float *kr = malloc((size_t)max_ctx * kd * 4), *vr = malloc((size_t)max_ctx * vd * 4);
    float *ref = malloc((size_t)H * Dv * 4), *q = malloc((size_t)H * D * 4);
    double worst = 0;
    uint32_t bad = 0;   /* NaN or infinite outputs: never "within" any limit */
    for (uint32_t t = 0; t < T && !rc; t++) {
        uint32_t s = (uint32_t)step[off_seq + t], n_kv = (uint32_t)step[off_pos + t] + 1;
        for (uint32_t p2 = 0; p2 < n_kv; p2++) {
            uint32_t blk = (uint32_t)tables[s * bt_stride + p2 / BLK], j = p2 % BLK;
            for (uint32_t hk = 0; hk < Hk; hk++) {
                for (uint32_t d = 0; d < D; d++)
                    kr[p2 * kd + hk * D + d] = kf[((size_t)(blk * Hk + hk) * BLK + j) * D + d];
                for (uint32_t d = 0; d < Dv; d++)
                    vr[p2 * vd + hk * Dv + d] = vf[((size_t)(blk * Hk + hk) * BLK + j) * Dv + d];
            }
        }
        for (uint32_t i = 0; i < H * D; i++)
            q[i] = qkv[(size_t)t * qkv_st + i];
        uint32_t first = window && n_kv > window ? n_kv - window : 0;
        em_ref_attention(q, kr + (size_t)first * kd, vr + (size_t)first * vd, (int)(n_kv - first), (int)H, (int)Hk,
                         (int)D, (int)Dv, (int)kd, (int)vd, scale, sk, ref);
        for (uint32_t i = 0; i < H * Dv; i++) {
            double e = fabs((double)out[(size_t)t * out_st + i] - ref[i]);
            if (!isfinite(e))
                bad++;
            else if (e > worst)
                worst = e;
        }
    }
    CHECKF(!rc && bad == 0 && worst < 2e-5,
           "%s H=%u Hk=%u D=%u Dv=%u seqs=%u ctx0=%u q=%u split=%u shared=%d lanes=%u grouped=%d shuf=%d "
           "window=%u sinks=%d: max error %.3e, %u values not finite%s",
           kv_q8 ? "q8_0" : "f16", H, Hk, D, Dv, n_seq, ctx[0], n_q, nsplit, share_prefix, dec_lanes,
           dec_grouped, pre_shuf, window, sinks, worst, bad, rc ? " (not run)" : "");
    em_vk_buf *bufs[] = { &bq, &bs, &bk, &bv, &bo, &bp, &bvec };
    for (size_t i = 0; i < 7; i++)
        em_vk_free(vk, bufs[i]);
    em_vk_cmd_destroy(cmd);
    free(perm); free(tables); free(kh); free(vh); free(kf); free(vf); free(qkv); free(step); free(out);
    free(kr); free(vr); free(ref); free(q);
}

/* The decode (per head and grouped, unsplit and split) and prefill (all
 * three variants) scenarios of the sliding-window cases, at the current
 * window and sinks. */
static void window_cases(em_vk *vk)
{
    uint32_t ctx3[3] = { 37, 1, 300 }, ctx2[2] = { 1000, 517 }, ctx1[2] = { 600, 95 };
    for (dec_grouped = 0; dec_grouped < 2; dec_grouped++) {
        dec_lanes = 8;
        scenario(vk, 8, 2, 64, 64, 3, ctx3, 1, 1, 0);
        scenario(vk, 8, 2, 64, 64, 2, ctx2, 1, 5, 1);
    }
    dec_grouped = 0;
    dec_lanes = 16;
    for (pre_shuf = 0; pre_shuf < 3; pre_shuf++)
        scenario(vk, 8, 2, 64, 64, 2, ctx1, 40, 1, 1);
    pre_shuf = 0;
}

int main(int argc, char **argv)
{
    em_vk *vk = gpu_open("attn", NULL);
    if (argc > 2) {
        uint32_t c0[1] = { (uint32_t)atoi(argv[1]) };
        scenario(vk, 1, 1, (uint32_t)atoi(argv[2]), (uint32_t)atoi(argv[2]), 1, c0, 16, 1, 0);
        gpu_close(vk);
        return test_summary("attn");
    }
    static const uint32_t gqa[][2] = { { 4, 4 }, { 8, 4 }, { 8, 2 }, { 8, 1 } };   /* ratios 1 2 4 8 */
    static const uint32_t dims[] = { 64, 128 };
    for (kv_q8 = 0; kv_q8 < 2; kv_q8++) {
        for (size_t g = 0; g < 4; g++) {
            for (size_t di = 0; di < 2; di++) {
                uint32_t H = gqa[g][0], Hk = gqa[g][1], D = dims[di];
                for (dec_lanes = 8; dec_lanes <= 32; dec_lanes *= 2) {
                    uint32_t ctx3[3] = { 37, 1, 300 };
                    scenario(vk, H, Hk, D, D, 3, ctx3, 1, 1, 0);         /* decode, ragged lengths */
                    uint32_t ctx2[2] = { 1000, 517 };
                    scenario(vk, H, Hk, D, D, 2, ctx2, 1, 5, 1);         /* split-K + shared prefix */
                }
                /* by KV head (GQA groups; lanes split the head) with 8
                 * lanes as on CPUs, and with 16 where the head and the
                 * subgroup (the kernel adds across one subgroup) allow */
                for (dec_lanes = 8; H > Hk && dec_lanes <= 16 && dec_lanes <= em_vk_info(vk)->subgroup_size &&
                                    D % (8 * dec_lanes) == 0;
                     dec_lanes *= 2) {
                    dec_grouped = 1;
                    uint32_t ctx3[3] = { 37, 1, 300 };
                    scenario(vk, H, Hk, D, D, 3, ctx3, 1, 1, 0);
                    uint32_t ctx2[2] = { 1000, 517 };
                    scenario(vk, H, Hk, D, D, 2, ctx2, 1, 5, 1);
                    dec_grouped = 0;
                }
                dec_lanes = 16;
                uint32_t ctx1[2] = { 600, 95 };
                for (pre_shuf = 0; pre_shuf < 3; pre_shuf++)            /* prefill tiles after a prefix */
                    scenario(vk, H, Hk, D, D, 2, ctx1, 40, 1, 1);
                pre_shuf = 0;
            }
        }
        uint32_t c[1] = { 33 };
        for (pre_shuf = 0; pre_shuf < 3; pre_shuf++)
            if (!kv_q8)
                scenario(vk, 8, 4, 8, 8, 1, c, 33, 1, 0);                /* tiny heads, whole prompt */
        for (pre_shuf = 1; pre_shuf < 3; pre_shuf++) {
            scenario(vk, 2, 1, 32, 64, 1, c, 33, 1, 0);                  /* Dv != D, fewer chunks than lanes */
            scenario(vk, 8, 1, 32, 32, 1, c, 33, 1, 0);                  /* MQA: 8 heads per workgroup */
        }
        pre_shuf = 0;
        scenario(vk, 2, 1, 32, 64, 1, c, 1, 3, 0);                       /* Dv != D, more splits than blocks */
        scenario(vk, 2, 1, 32, 64, 1, c, 33, 1, 0);
        /* sliding windows: inside one block, across blocks, longer than
         * some contexts; split (some splits then see nothing), grouped,
         * and prefill tiles whose queries' windows start apart (a window
         * of a whole block, 16, is gemma3's synth model's: the goldens) */
        static const uint32_t windows[] = { 5, 40, 512 };
        for (size_t wi = 0; wi < sizeof windows / sizeof windows[0]; wi++) {
            window = windows[wi];
            /* and with sinks (gpt-oss's, windowed and not): unsplit,
             * split (the reduce adds them), grouped, prefill tiles */
            for (sinks = 0; sinks <= (wi > 0); sinks++)
                window_cases(vk);
            sinks = 0;
        }
        window = 0;
    }
    gpu_close(vk);
    return test_summary("attn");
}
