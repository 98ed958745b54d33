/* quantize_model.c — which type each tensor of a model gets for a file type
 * (the Q4_K_M / Q5_K_M conventions), and the streaming whole-file converter
 * behind `ember quantize`.
 *
 * Type choice, as the reference tool makes it for dense models:
 *   - only weight matrices are quantized: names ending in "weight" with two
 *     or more dimensions, except norms (*_norm.weight), MoE router
 *     (ffn_gate_inp), position/token-type embeddings; everything else is
 *     copied as is (BF16 becomes F32, which ember's vector kernels read);
 *   - the output matrix (token_embd when the output is tied) gets Q6_K,
 *     unless the file type is Q8_0 (or the row does not fit the base block:
 *     Q8_0);
 *   - Q4_K_M and Q5_K_M give Q6_K to attn_v and ffn_down in the layers
 *     where use_more_bits() holds: the first eighth, the last eighth, and
 *     every third layer in between; attn_qkv (fused) gets one step more;
 *     the attn_v of 80-layer GQA models (70B shapes) gets at least Q5_K;
 *     8-expert models keep attn_k/attn_v at Q8_0;
 *   - a row length that is not a multiple of the chosen block falls back:
 *     Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0, and to F16 when even 32
 *     does not divide it.
 * The layer index of attn_v and ffn_down is the tensor's rank among its kind
 * in the reference's processing order (non-block tensors, then by layer
 * number, then by name), so the choice does not depend on the input's order. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "core/model/quant.h"
#include "core/model/quantize.h"

/* ---- file types -------------------------------------------------------------- */

static const em_qftype qftypes[] = {
    { "Q8_0",   7,  EM_T_Q8_0, "8.5 bits/weight; indistinguishable from F16 in practice" },
    { "Q6_K",   18, EM_T_Q6_K, "6.6 bits/weight; near-lossless" },
    { "Q5_K_M", 17, EM_T_Q5_K, "5.5-5.7 bits/weight; Q5_K with Q6_K for attn_v/ffn_down/output in a share of layers" },
    { "Q4_K_M", 15, EM_T_Q4_K, "4.5-4.9 bits/weight; Q4_K with Q6_K for attn_v/ffn_down/output in a share of layers" },
    { "Q4_0",   2,  EM_T_Q4_0, "4.5 bits/weight; the simplest 4-bit format, lower quality than Q4_K_M" },
};

const em_qftype *em_qftype_find(const char *name)
{
    for (size_t i = 0; i < sizeof qftypes / sizeof qftypes[0]; i++)
        if (strcasecmp(name, qftypes[i].name) == 0)
            return &qftypes[i];
    return NULL;
}

const char *em_qftype_names(void) { return "Q8_0 Q6_K Q5_K_M Q4_K_M Q4_0"; }

const char *em_ftype_name(uint32_t ftype)
{
    static const struct { uint32_t id; const char *name; } names[] = {
        { 0, "F32" }, { 1, "F16" }, { 2, "Q4_0" }, { 3, "Q4_1" }, { 7, "Q8_0" }, { 8, "Q5_0" },
        { 9, "Q5_1" }, { 10, "Q2_K" }, { 11, "Q3_K_S" }, { 12, "Q3_K_M" }, { 13, "Q3_K_L" },
        { 14, "Q4_K_S" }, { 15, "Q4_K_M" }, { 16, "Q5_K_S" }, { 17, "Q5_K_M" }, { 18, "Q6_K" },
        { 32, "BF16" },
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (names[i].id == ftype)
            return names[i].name;
    return NULL;
}

/* ---- per-tensor types ------------------------------------------------------------ */

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

static int is_weight_matrix(const em_gguf_tensor *t)
{
    const char *n = t->name;
    return ends_with(n, "weight") && t->n_dims >= 2 && !strstr(n, "_norm.weight") &&
           !strstr(n, "ffn_gate_inp.weight") && strcmp(n, "position_embd.weight") != 0 &&
           strcmp(n, "token_types.weight") != 0 && !strstr(n, "ssm_conv1d.weight") &&
           !strstr(n, "attn_rel_b.weight");
}

/* "blk.<n>." -> n, else -1 */
static long block_of(const char *name)
{
    if (strncmp(name, "blk.", 4) != 0)
        return -1;
    char *end;
    long v = strtol(name + 4, &end, 10);
    return end == name + 4 ? -1 : v;
}

/* The reference's processing order: non-block tensors first, then by layer, then by name. */
static int order_less(const char *a, const char *b)
{
    long la = block_of(a), lb = block_of(b);
    if (la != lb)
        return la < lb;
    return strcmp(a, b) < 0;
}

/* Rank of tensor i among the weight matrices whose name contains kind. */
static int rank_of(const em_gguf *g, size_t i, const char *kind)
{
    const char *me = em_gguf_tensor_at(g, i)->name;
    int r = 0;
    for (size_t j = 0; j < em_gguf_n_tensors(g); j++) {
        const em_gguf_tensor *t = em_gguf_tensor_at(g, j);
        if (j != i && is_weight_matrix(t) && strstr(t->name, kind) && order_less(t->name, me))
            r++;
    }
    return r;
}

static int use_more_bits(int i, int n)
{
    return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

typedef struct {
    const em_qftype *ft;
    int  has_output;
    int  n_layer;        /* block_count (else the number of ffn_down matrices) */
    int  n_attn_v;       /* attn_v / attn_qkv / attn_kv_b matrices */
    int  n_expert;
    int  is_70b;         /* 80-layer GQA llama / 80-layer qwen2 */
} plan_ctx;

static uint32_t arch_u32(const em_gguf *g, const char *arch, const char *key, uint32_t dflt)
{
    char full[160];
    uint32_t v;
    snprintf(full, sizeof full, "%s.%s", arch, key);
    return em_gguf_get_u32(g, full, &v, NULL) == 0 ? v : dflt;
}

static void plan_init(const em_gguf *g, const em_qftype *ft, plan_ctx *c)
{
    memset(c, 0, sizeof *c);
    c->ft = ft;
    int n_down = 0;
    for (size_t i = 0; i < em_gguf_n_tensors(g); i++) {
        const char *n = em_gguf_tensor_at(g, i)->name;
        if (strstr(n, "attn_v.weight") || strstr(n, "attn_qkv.weight") || strstr(n, "attn_kv_b.weight"))
            c->n_attn_v++;
        else if (strcmp(n, "output.weight") == 0)
            c->has_output = 1;
        if (strstr(n, "ffn_down") && is_weight_matrix(em_gguf_tensor_at(g, i)))
            n_down++;
    }
    char arch[64] = "";
    em_gguf_str s;
    if (em_gguf_get_str(g, "general.architecture", &s, NULL) == 0 && s.len < sizeof arch) {
        memcpy(arch, s.ptr, s.len);
        arch[s.len] = 0;
    }
    c->n_layer = (int)arch_u32(g, arch, "block_count", (uint32_t)n_down);
    c->n_expert = (int)arch_u32(g, arch, "expert_count", 0);
    uint32_t n_head = arch_u32(g, arch, "attention.head_count", 0);
    uint32_t n_head_kv = arch_u32(g, arch, "attention.head_count_kv", n_head);
    c->is_70b = c->n_layer == 80 && ((strcmp(arch, "llama") == 0 && n_head != n_head_kv) ||
                                     strcmp(arch, "qwen2") == 0);
}

/* The fallback when the row length ne0 does not fit the block of type. */
static uint32_t fallback(uint32_t type, uint64_t ne0)
{
    switch (type) {
    case EM_T_Q4_K: type = EM_T_Q5_0; break;
    case EM_T_Q5_K: type = EM_T_Q5_1; break;
    case EM_T_Q6_K: type = EM_T_Q8_0; break;
    default:        type = EM_T_F16; break;
    }
    return ne0 % em_ttype_get(type)->blck ? EM_T_F16 : type;
}

static uint32_t choose(const em_gguf *g, size_t i, const plan_ctx *c, em_qwhy *why)
{
    const em_gguf_tensor *t = em_gguf_tensor_at(g, i);
    const char *n = t->name;
    uint32_t base = c->ft->base, type = base;
    int k_m = c->ft->ftype == 15 || c->ft->ftype == 17;     /* Q4_K_M, Q5_K_M */
    if (strcmp(n, "output.weight") == 0 || (!c->has_output && strcmp(n, "token_embd.weight") == 0)) {
        if (t->ne[0] % em_ttype_get(base)->blck)
            type = EM_T_Q8_0;
        else if (base != EM_T_Q8_0)
            type = EM_T_Q6_K;
    } else if (strcmp(n, "token_embd.weight") == 0) {
        /* follows the base type */
    } else if (strstr(n, "attn_v.weight")) {
        if (k_m && use_more_bits(rank_of(g, i, "attn_v.weight"), c->n_attn_v))
            type = EM_T_Q6_K;
        if (c->is_70b && type == EM_T_Q4_K)
            type = EM_T_Q5_K;
        if (c->n_expert == 8)
            type = EM_T_Q8_0;
    } else if (strstr(n, "attn_k.weight")) {
        if (c->n_expert == 8)
            type = EM_T_Q8_0;
    } else if (strstr(n, "ffn_down")) {
        if (k_m && use_more_bits(rank_of(g, i, "ffn_down"), c->n_layer))
            type = EM_T_Q6_K;
    } else if (strstr(n, "attn_output.weight")) {
        if (c->n_expert == 8 && c->ft->ftype == 15)
            type = EM_T_Q5_K;
    } else if (strstr(n, "attn_qkv.weight")) {
        if (c->ft->ftype == 15)
            type = EM_T_Q5_K;
        else if (c->ft->ftype == 17)
            type = EM_T_Q6_K;
    }
    *why = type == base ? EM_QWHY_BASE : EM_QWHY_MIX;
    if (t->ne[0] % em_ttype_get(type)->blck) {
        type = fallback(type, t->ne[0]);
        *why = EM_QWHY_FALLBACK;
    }
    return type;
}

int em_quantize_plan(const em_gguf *in, const em_qftype *ft, uint32_t *types,
                     em_qwhy *why, em_err *err)
{
    plan_ctx c;
    plan_init(in, ft, &c);
    for (size_t i = 0; i < em_gguf_n_tensors(in); i++) {
        const em_gguf_tensor *t = em_gguf_tensor_at(in, i);
        em_qwhy w = EM_QWHY_COPY;
        uint32_t type = t->type == EM_T_BF16 ? EM_T_F32 : t->type;
        if (is_weight_matrix(t))
            type = choose(in, i, &c, &w);
        if (type != t->type && !em_quant_supported(t->type))
            return em_err_set(err, EM_EUNSUPPORTED, "%s: tensor '%s' is %s, which ember cannot read back to convert it",
                              em_gguf_path(in), t->name, em_ttype_name(t->type));
        types[i] = type;
        if (why)
            why[i] = w;
    }
    return 0;
}

/* ---- conversion ------------------------------------------------------------------- */

enum { MAX_THREADS = 64, PIECE_BYTES = 8 << 20 };

typedef struct {
    const em_gguf_tensor *t;
    uint32_t  out_type;
    uint64_t  row0, nrows;      /* rows of this worker */
    size_t    in_row, out_row;  /* bytes per row */
    uint8_t  *dst;              /* output of row row0 */
    float    *scratch;          /* [ne0] */
    uint64_t  bad_row;          /* first row holding a non-finite value, or UINT64_MAX */
} work;

static void *convert_rows(void *arg)
{
    work *w = arg;
    const uint8_t *src = (const uint8_t *)w->t->data + w->row0 * w->in_row;
    int64_t ne0 = (int64_t)w->t->ne[0];
    for (uint64_t r = 0; r < w->nrows; r++) {
        em_dequant_row(w->t->type, src + r * w->in_row, w->scratch, ne0);
        for (int64_t j = 0; j < ne0; j++) {
            if (!isfinite(w->scratch[j])) {
                w->bad_row = w->row0 + r;
                return NULL;
            }
        }
        em_quantize_row(w->out_type, w->scratch, w->dst + r * w->out_row, ne0);
    }
    return NULL;
}

typedef struct {
    const em_quantize_opts *o;
    int       threads;
    float    *scratch;      /* [threads][max_ne0] */
    uint64_t  max_ne0;
    uint8_t  *buf;          /* one piece of output */
    size_t    buf_cap;
    uint64_t  done, total;  /* parameters */
} conv;

static int step(conv *c, const em_gguf_tensor *t, uint64_t n_params, em_err *err)
{
    c->done += n_params;
    if (c->o && c->o->progress)
        c->o->progress(c->o->progress_ctx, c->done, c->total, t->name);
    if (c->o && c->o->cancel && c->o->cancel(c->o->cancel_ctx))
        return em_err_set(err, EM_ECANCELED, "quantize: interrupted");
    return 0;
}

/* Stream tensor t converted to out_type through the writer. */
static int convert_tensor(conv *c, const em_gguf_tensor *t, uint32_t out_type,
                          em_gguf_writer *w, FILE *f, em_err *err)
{
    const em_ttype_info *ti = em_ttype_get(t->type), *to = em_ttype_get(out_type);
    uint64_t ne0 = t->ne[0], rows = t->nelem / ne0;
    size_t in_row = (size_t)(ne0 / ti->blck * ti->bytes), out_row = (size_t)(ne0 / to->blck * to->bytes);
    if (out_type == t->type) {       /* same type: the bytes as they are */
        const uint8_t *p = t->data;
        for (uint64_t off = 0; off < t->nbytes; off += PIECE_BYTES) {
            uint64_t k = t->nbytes - off < PIECE_BYTES ? t->nbytes - off : PIECE_BYTES;
            int rc = em_gguf_w_data(w, f, p + off, k, err);
            if (rc || (rc = step(c, t, t->nelem * k / t->nbytes, err)))
                return rc;
        }
        return 0;
    }
    uint64_t piece_rows = c->buf_cap / out_row;
    for (uint64_t r0 = 0; r0 < rows; r0 += piece_rows) {
        uint64_t n = rows - r0 < piece_rows ? rows - r0 : piece_rows;
        int nt = (uint64_t)c->threads < n ? c->threads : (int)n;
        work jobs[MAX_THREADS];
        pthread_t tid[MAX_THREADS];
        int started[MAX_THREADS] = { 0 };
        for (int k = 0; k < nt; k++) {
            uint64_t a = n * (uint64_t)k / (uint64_t)nt, b = n * (uint64_t)(k + 1) / (uint64_t)nt;
            jobs[k] = (work){ t, out_type, r0 + a, b - a, in_row, out_row, c->buf + a * out_row,
                              c->scratch + (size_t)k * c->max_ne0, UINT64_MAX };
            if (k > 0)
                started[k] = pthread_create(&tid[k], NULL, convert_rows, &jobs[k]) == 0;
        }
        convert_rows(&jobs[0]);
        for (int k = 1; k < nt; k++) {
            if (started[k])
                pthread_join(tid[k], NULL);
            else
                convert_rows(&jobs[k]);   /* no thread: do it here */
        }
        for (int k = 0; k < nt; k++)
            if (jobs[k].bad_row != UINT64_MAX)
                return em_err_set(err, EM_EFORMAT, "tensor '%s': row %llu holds a value that is not finite",
                                  t->name, (unsigned long long)jobs[k].bad_row);
        int rc = em_gguf_w_data(w, f, c->buf, n * out_row, err);
        if (rc || (rc = step(c, t, n * ne0, err)))
            return rc;
    }
    return 0;
}

static int online_cpus(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > MAX_THREADS ? MAX_THREADS : (int)n;
}

int em_quantize_gguf(const em_gguf *in, const em_qftype *ft, FILE *out,
                     const em_quantize_opts *opts, em_quantize_stats *st, em_err *err)
{
    size_t nt = em_gguf_n_tensors(in);
    em_quantize_stats s;
    memset(&s, 0, sizeof s);
    conv c = { .o = opts };
    c.threads = opts && opts->threads > 0 ? (opts->threads > MAX_THREADS ? MAX_THREADS : opts->threads)
                                          : online_cpus();
    em_gguf_writer *w = NULL;
    uint32_t *types = malloc((nt ? nt : 1) * sizeof *types);
    em_qwhy *why = malloc((nt ? nt : 1) * sizeof *why);
    int rc = types && why ? 0 : em_err_set(err, EM_ENOMEM, "quantize: out of memory");
    if (rc || (rc = em_quantize_plan(in, ft, types, why, err)) ||
        (rc = em_gguf_writer_create(em_gguf_alignment(in), &w, err)))
        goto done;
    for (size_t i = 0; i < em_gguf_n_kv(in) && !rc; i++)
        rc = em_gguf_w_kv_copy(w, em_gguf_kv_at(in, i));
    if (rc || (rc = em_gguf_w_u32(w, "general.quantization_version", 2)) ||
        (rc = em_gguf_w_set_u32(w, "general.file_type", ft->ftype))) {
        rc = em_err_set(err, rc, "quantize: out of memory");
        goto done;
    }
    size_t max_out_row = 1;
    for (size_t i = 0; i < nt; i++) {
        const em_gguf_tensor *t = em_gguf_tensor_at(in, i);
        uint64_t nbytes = 0;
        if ((rc = em_gguf_w_tensor(w, t->name, types[i], t->n_dims, t->ne, &nbytes))) {
            rc = em_err_set(err, rc, "quantize: tensor '%s': cannot declare it as %s",
                            t->name, em_ttype_name(types[i]));
            goto done;
        }
        c.total += t->nelem;
        c.max_ne0 = t->ne[0] > c.max_ne0 ? t->ne[0] : c.max_ne0;
        size_t row = (size_t)(nbytes / (t->nelem / t->ne[0]));
        max_out_row = row > max_out_row ? row : max_out_row;
        s.n_params += t->nelem;
        s.in_bytes += t->nbytes;
        s.out_bytes += nbytes;
        s.n_by_type[types[i]]++;
        s.n_fallback += why[i] == EM_QWHY_FALLBACK;
        s.n_requant += types[i] != t->type && t->type != EM_T_F32 && t->type != EM_T_F16 &&
                       t->type != EM_T_BF16;
    }
    s.n_tensors = (uint32_t)nt;
    c.buf_cap = max_out_row > PIECE_BYTES ? max_out_row : PIECE_BYTES;
    c.buf = malloc(c.buf_cap);
    c.scratch = malloc((size_t)c.threads * (c.max_ne0 ? c.max_ne0 : 1) * sizeof(float));
    if (!c.buf || !c.scratch) {
        rc = em_err_set(err, EM_ENOMEM, "quantize: out of memory");
        goto done;
    }
    if ((rc = em_gguf_w_header(w, out, err)))
        goto done;
    for (size_t i = 0; i < nt && !rc; i++)
        rc = convert_tensor(&c, em_gguf_tensor_at(in, i), types[i], w, out, err);
    if (!rc)
        rc = em_gguf_w_finish(w, err);
done:
    if (!rc && st)
        *st = s;
    free(c.buf);
    free(c.scratch);
    free(types);
    free(why);
    em_gguf_writer_destroy(w);
    return rc;
}
