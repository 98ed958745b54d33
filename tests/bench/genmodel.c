/* genmodel.c — write a random-weight llama GGUF of any size for benchmarks
 * (never committed: models are generated into the build tree). Weights are
 * random blocks of the chosen type with sane scales, so speed is realistic
 * while the text it produces is noise. The vocabulary is a valid SPM one
 * (<unk> <s> </s>, 256 byte tokens, then filler pieces).
 *
 * usage: genmodel OUT.gguf TYPE [--dim 1024] [--layers 8] [--heads 16] [--kv-heads 4]
 *                 [--ffn 2816] [--vocab 32000] [--ctx 4096] [--seed 1]
 * TYPE: F32 F16 Q8_0 Q4_0 Q4_K_M Q5_K_M Q6_K */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/model/gguf.h"
#include "core/model/quant.h"

static unsigned long long rng = 1;

static uint64_t next(void)
{
    uint64_t z = (rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static float frand(void) { return (float)((double)(next() >> 11) / 9007199254740992.0) * 2 - 1; }

/* Random data for n elements of a type (n a multiple of its block). */
static void fill(uint32_t type, uint8_t *p, uint64_t n, float scale)
{
    const em_ttype_info *ti = em_ttype_get(type);
    uint64_t nb = n / ti->blck;
    if (type == EM_T_F32) {
        for (uint64_t i = 0; i < n; i++) {
            float v = scale * frand();
            memcpy(p + 4 * i, &v, 4);
        }
        return;
    }
    if (type == EM_T_F16) {
        for (uint64_t i = 0; i < n; i++) {
            uint16_t h = em_f32_to_f16(scale * frand());
            memcpy(p + 2 * i, &h, 2);
        }
        return;
    }
    for (uint64_t i = 0; i < nb * ti->bytes; i += 8) {
        uint64_t r = next();
        memcpy(p + i, &r, i + 8 <= nb * ti->bytes ? 8 : nb * ti->bytes - i);
    }
    uint16_t d = em_f32_to_f16(scale / 16), dm = em_f32_to_f16(scale / 64);
    for (uint64_t b = 0; b < nb; b++) {
        uint8_t *blk = p + b * ti->bytes;
        switch (type) {
        case EM_T_Q8_0: d = em_f32_to_f16(scale / 127); memcpy(blk, &d, 2); break;
        case EM_T_Q4_0: memcpy(blk, &d, 2); break;
        case EM_T_Q4_K: case EM_T_Q5_K: memcpy(blk, &d, 2); memcpy(blk + 2, &dm, 2); break;
        case EM_T_Q6_K: memcpy(blk + 208, &d, 2); break;
        }
    }
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: genmodel OUT.gguf TYPE [--dim N] [--layers N] [--heads N] [--kv-heads N] "
                        "[--ffn N] [--vocab N] [--ctx N] [--seed N]\n");
        return 2;
    }
    const char *out = argv[1], *tname = argv[2];
    long dim = 1024, layers = 8, heads = 16, kv = 4, ffn = 2816, vocab = 32000, ctx = 4096;
    for (int i = 3; i + 1 < argc; i += 2) {
        long v = atol(argv[i + 1]);
        if (!strcmp(argv[i], "--dim")) dim = v;
        else if (!strcmp(argv[i], "--layers")) layers = v;
        else if (!strcmp(argv[i], "--heads")) heads = v;
        else if (!strcmp(argv[i], "--kv-heads")) kv = v;
        else if (!strcmp(argv[i], "--ffn")) ffn = v;
        else if (!strcmp(argv[i], "--vocab")) vocab = v;
        else if (!strcmp(argv[i], "--ctx")) ctx = v;
        else if (!strcmp(argv[i], "--seed")) rng = (unsigned long long)v;
        else { fprintf(stderr, "genmodel: unknown option %s\n", argv[i]); return 2; }
    }
    /* per-tensor types: plain types everywhere, or the K_M mixes (more bits
     * for attn_v and ffn_down in every other layer, Q6_K output) */
    uint32_t base, hi, outt;
    int km = 0;
    if (!strcmp(tname, "F32")) base = hi = outt = EM_T_F32;
    else if (!strcmp(tname, "F16")) base = hi = outt = EM_T_F16;
    else if (!strcmp(tname, "Q8_0")) base = hi = outt = EM_T_Q8_0;
    else if (!strcmp(tname, "Q4_0")) { base = hi = EM_T_Q4_0; outt = EM_T_Q6_K; }
    else if (!strcmp(tname, "Q4_K_M")) { base = EM_T_Q4_K; hi = outt = EM_T_Q6_K; km = 1; }
    else if (!strcmp(tname, "Q5_K_M")) { base = EM_T_Q5_K; hi = outt = EM_T_Q6_K; km = 1; }
    else if (!strcmp(tname, "Q6_K")) base = hi = outt = EM_T_Q6_K;
    else { fprintf(stderr, "genmodel: unknown type %s\n", tname); return 2; }
    if ((outt == EM_T_Q6_K && dim % 256) || (km && ffn % 256)) {
        fprintf(stderr, "genmodel: K-quant rows need dims that are multiples of 256\n");
        return 2;
    }

    em_gguf_writer *w = NULL;
    em_gguf_writer_create(32, &w, NULL);
    em_gguf_w_str(w, "general.architecture", "llama");
    em_gguf_w_str(w, "general.name", "ember-bench");
    em_gguf_w_u32(w, "llama.context_length", (uint32_t)ctx);
    em_gguf_w_u32(w, "llama.embedding_length", (uint32_t)dim);
    em_gguf_w_u32(w, "llama.block_count", (uint32_t)layers);
    em_gguf_w_u32(w, "llama.feed_forward_length", (uint32_t)ffn);
    em_gguf_w_u32(w, "llama.attention.head_count", (uint32_t)heads);
    em_gguf_w_u32(w, "llama.attention.head_count_kv", (uint32_t)kv);
    em_gguf_w_u32(w, "llama.rope.dimension_count", (uint32_t)(dim / heads));
    em_gguf_w_f32(w, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
    em_gguf_w_f32(w, "llama.rope.freq_base", 10000.0f);
    em_gguf_w_u32(w, "llama.vocab_size", (uint32_t)vocab);
    em_gguf_w_str(w, "tokenizer.ggml.model", "llama");
    char **toks = malloc((size_t)vocab * sizeof *toks);
    float *scores = malloc((size_t)vocab * sizeof *scores);
    int32_t *types = malloc((size_t)vocab * sizeof *types);
    for (long i = 0; i < vocab; i++) {
        char buf[32];
        if (i < 3) snprintf(buf, sizeof buf, "%s", i == 0 ? "<unk>" : i == 1 ? "<s>" : "</s>");
        else if (i < 259) snprintf(buf, sizeof buf, "<0x%02X>", (unsigned)(i - 3));
        else snprintf(buf, sizeof buf, "\xe2\x96\x81t%ld", i);
        toks[i] = strdup(buf);
        scores[i] = -(float)i;
        types[i] = i == 0 ? 2 : i < 3 ? 3 : i < 259 ? 6 : 1;
    }
    em_gguf_w_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)toks, (uint64_t)vocab);
    em_gguf_w_arr(w, "tokenizer.ggml.scores", EM_GGUF_F32, scores, (uint64_t)vocab);
    em_gguf_w_arr(w, "tokenizer.ggml.token_type", EM_GGUF_I32, types, (uint64_t)vocab);
    em_gguf_w_u32(w, "tokenizer.ggml.bos_token_id", 1);
    em_gguf_w_u32(w, "tokenizer.ggml.eos_token_id", 2);

    typedef struct { char name[64]; uint32_t type; uint64_t ne[2]; int n_dims; float scale; } tinfo;
    tinfo *t = calloc((size_t)(layers * 9 + 3), sizeof *t);
    int nt = 0;
    long hd = dim / heads;
#define ADD(nm, ty, a, b, nd, sc) do { snprintf(t[nt].name, 64, "%s", nm); t[nt].type = (ty); \
        t[nt].ne[0] = (uint64_t)(a); t[nt].ne[1] = (uint64_t)(b); t[nt].n_dims = (nd); t[nt].scale = (sc); nt++; } while (0)
    ADD("token_embd.weight", base == EM_T_Q4_0 ? EM_T_Q4_0 : base, dim, vocab, 2, 1.0f);
    ADD("output_norm.weight", EM_T_F32, dim, 1, 1, 1.0f);
    ADD("output.weight", outt, dim, vocab, 2, 1.0f / sqrtf((float)dim));
    for (long l = 0; l < layers; l++) {
        char nm[64];
        uint32_t vt = km && l % 2 == 0 ? hi : base;
        float s = 1.0f / sqrtf((float)dim);
#define L(suffix, ty, a, b, nd, sc) do { snprintf(nm, 64, "blk.%ld." suffix, l); ADD(nm, ty, a, b, nd, sc); } while (0)
        L("attn_norm.weight", EM_T_F32, dim, 1, 1, 1.0f);
        L("attn_q.weight", base, dim, heads * hd, 2, s);
        L("attn_k.weight", base, dim, kv * hd, 2, s);
        L("attn_v.weight", vt, dim, kv * hd, 2, s);
        L("attn_output.weight", base, heads * hd, dim, 2, s);
        L("ffn_norm.weight", EM_T_F32, dim, 1, 1, 1.0f);
        L("ffn_gate.weight", base, dim, ffn, 2, s);
        L("ffn_up.weight", base, dim, ffn, 2, s);
        L("ffn_down.weight", vt, ffn, dim, 2, 1.0f / sqrtf((float)ffn));
    }
    uint64_t *sizes = malloc((size_t)nt * sizeof *sizes);
    for (int i = 0; i < nt; i++) {
        if (em_gguf_w_tensor(w, t[i].name, t[i].type, (uint32_t)t[i].n_dims, t[i].ne, &sizes[i])) {
            fprintf(stderr, "genmodel: bad shape for %s\n", t[i].name);
            return 2;
        }
    }
    FILE *f = fopen(out, "wb");
    em_err err = { 0 };
    if (!f || em_gguf_w_header(w, f, &err)) {
        fprintf(stderr, "genmodel: %s: cannot write: %s\n", out, err.msg);
        return 1;
    }
    for (int i = 0; i < nt; i++) {
        uint8_t *buf = malloc(sizes[i]);
        if (!strcmp(t[i].name + strlen(t[i].name) - 11, "norm.weight")) {
            for (uint64_t k = 0; k < t[i].ne[0]; k++) {
                float one = 1.0f + 0.1f * frand();
                memcpy(buf + 4 * k, &one, 4);
            }
        } else {
            fill(t[i].type, buf, t[i].ne[0] * t[i].ne[1], t[i].scale);
        }
        if (em_gguf_w_data(w, f, buf, sizes[i], &err)) {
            fprintf(stderr, "genmodel: %s: %s\n", out, err.msg);
            return 1;
        }
        free(buf);
    }
    if (fclose(f) != 0 || em_gguf_w_finish(w, &err)) {
        fprintf(stderr, "genmodel: %s: write failed\n", out);
        return 1;
    }
    em_gguf_writer_destroy(w);
    for (long i = 0; i < vocab; i++)
        free(toks[i]);
    free(toks); free(scores); free(types); free(t); free(sizes);
    return 0;
}
