/* cmd_vram.c — `ember vram`: capacity planning. For a GGUF model (or a
 * model's published shape, to size a box before buying it) prints the
 * weight bytes by tensor type, the KV cache per token and per sequence, the
 * scratch and overhead ember's own allocation needs, and how many sequences
 * of a context fit in a memory — the selected Vulkan device's largest
 * device-local heap, or --mem-gb — with the largest context at which
 * --users sequences fit. Every figure comes from core/gpu/fwd_plan.c, the plan
 * em_fwd_create and `ember serve` size their buffers and KV pool with.
 * Exit 0 when the plan fits, 1 when it does not (the numbers say why), 2
 * for bad input. */
#include <ctype.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/gpu/forward.h"
#include "core/gpu/fwd_plan.h"
#include "core/gpu/variants.h"
#include "core/model/model.h"
#include "core/run/kv.h"
#include "core/vk/vk.h"
#include "firmware/cli.h"

static const char usage[] =
    "usage: ember vram --model PATH [--ctx N] [--mem-gb G] [--kv-type f16|q8_0] [--users N] [--json]\n"
    "       ember vram --layers L --kv-heads H --head-dim D --params P --bits B --ctx N\n"
    "                  [--heads N --embd N --ff N --vocab N] [--mem-gb G] [--kv-type T] [--users N] [--json]\n"
    "  Capacity planning: weights by tensor type, KV cache per token and per sequence of\n"
    "  --ctx tokens (default: the model's context_length), the scratch and overhead ember\n"
    "  allocates, and how many such sequences fit in G GiB (default: the device-local heap\n"
    "  of the Vulkan device ember picks; EMBER_DEVICE=N picks another) as `ember serve`\n"
    "  sizes its KV pool: 80% of the memory less weights, scratch, staging and a 256 MiB\n"
    "  margin. --users N: the largest context at which N sequences fit (and the scratch\n"
    "  for N at once, as `ember serve --parallel N`). Without a file, a published shape:\n"
    "  P parameters (8e9, 8B, 135M) at B bits each (4.5 for Q4_K_M, 16 for F16); the\n"
    "  scratch is counted only with --heads, --embd, --ff and --vocab. Exit 1 when the\n"
    "  model or the sequences do not fit, 2 for bad input.\n";

#define CTX_MAX (1u << 20)   /* ember serve's --ctx bound */

typedef struct {
    em_hparams hp;
    int        scratch_known;   /* the shape has n_embd, n_ff, n_head, n_vocab */
    em_fwd_mem mem;             /* weights and vectors; scratch per call */
    uint64_t   heap;
    uint64_t   range;           /* one binding's bytes (K or V of a layer); 0: unknown */
    uint32_t   kv_type;
    uint32_t   step_tokens, parallel;
    uint64_t   block_bytes;     /* a main-pool block: every layer, or a sliding-window model's global ones */
    uint64_t   window_bytes;    /* a window-pool block (the windowed layers); 0: no window */
} plan;

/* The window pool's blocks per sequence (0 without sliding windows). */
static uint64_t window_blocks(const plan *p, uint32_t ctx)
{
    return em_fwd_window_blocks(&p->hp, p->step_tokens, ctx);
}

/* KV pool blocks `ember serve` would make for sequences of ctx positions,
 * with mem's scratch filled for that context. */
static uint64_t pool_blocks(const plan *p, uint32_t ctx, em_fwd_mem *mem, int *range_bound)
{
    *mem = p->mem;
    if (p->scratch_known) {
        em_fwd_plan_scratch(&p->hp, p->step_tokens, p->parallel, ctx, p->parallel, p->range, mem);
    } else {   /* staging and margin only */
        mem->staging = EM_FWD_STAGING_BYTES;
        mem->margin = EM_FWD_MARGIN_BYTES;
    }
    /* the window pool first (every sequence's windows), the main pool the rest */
    uint64_t budget = em_fwd_plan_kv_budget(p->heap, mem), win = p->parallel * window_blocks(p, ctx) * p->window_bytes;
    if (!p->block_bytes)   /* an encoder keeps no K/V: every sequence fits, when the rest does */
        return budget ? (uint64_t)p->parallel * (((uint64_t)ctx + EM_KV_BLOCK - 1) / EM_KV_BLOCK) : 0;
    uint64_t n = (budget > win ? budget - win : 0) / p->block_bytes;
    *range_bound = 0;
    if (p->range) {
        uint32_t d = p->hp.head_dim > p->hp.head_dim_v ? p->hp.head_dim : p->hp.head_dim_v;
        uint64_t cap = p->range / (em_fwd_kv_row_bytes(p->kv_type, (uint64_t)p->hp.n_head_kv * d) * EM_KV_BLOCK);
        if (n > cap) {
            n = cap;
            *range_bound = 1;
        }
    }
    return n;
}

static uint64_t blocks_of(uint32_t ctx) { return ((uint64_t)ctx + EM_KV_BLOCK - 1) / EM_KV_BLOCK; }

/* The largest context (a multiple of EM_KV_BLOCK, at most CTX_MAX) at which
 * users sequences fit; 0 when not even one block each does. */
static uint32_t max_ctx_for(const plan *p, uint32_t users)
{
    uint64_t lo = 0, hi = CTX_MAX / EM_KV_BLOCK;   /* blocks per sequence */
    while (lo < hi) {
        uint64_t mid = (lo + hi + 1) / 2;
        em_fwd_mem mem;
        int rb;
        if ((uint64_t)users * mid <= pool_blocks(p, (uint32_t)(mid * EM_KV_BLOCK), &mem, &rb))
            lo = mid;
        else
            hi = mid - 1;
    }
    return (uint32_t)(lo * EM_KV_BLOCK);
}

/* "8e9", "8B", "135M", "1.5T", "7000000" -> a count of parameters. */
static int parse_params(const char *s, double *out)
{
    char *end;
    double v = strtod(s, &end);
    if (end == s || isspace((unsigned char)s[0]))
        return -1;
    static const struct { char c; double mul; } suf[] = {
        { 'k', 1e3 }, { 'm', 1e6 }, { 'b', 1e9 }, { 'g', 1e9 }, { 't', 1e12 },
    };
    if (*end) {
        int found = 0;
        for (size_t i = 0; i < sizeof suf / sizeof suf[0]; i++)
            if (tolower((unsigned char)*end) == suf[i].c && end[1] == 0) {
                v *= suf[i].mul;
                found = 1;
            }
        if (!found)
            return -1;
    }
    if (!isfinite(v) || v < 1e3 || v > 1e15)
        return -1;
    *out = round(v);
    return 0;
}

/* 8e9 -> "8 billion", 1.35e8 -> "135 million". */
static void count_words(char *buf, size_t cap, double v)
{
    if (v >= 1e12)
        snprintf(buf, cap, "%.4g trillion", v / 1e12);
    else if (v >= 1e9)
        snprintf(buf, cap, "%.4g billion", v / 1e9);
    else
        snprintf(buf, cap, "%.4g million", v / 1e6);
}

typedef struct {
    uint32_t tensors;
    uint64_t params, file_bytes;
} type_row;

int em_cmd_vram(int argc, char **argv)
{
    const char *model_path = NULL, *kv_name = "f16", *params_s = NULL;
    long ctx = 0, users = 0, layers = 0, kv_heads = 0, head_dim = 0, heads = 0, embd = 0, ff = 0,
         vocab = 0;
    double mem_gb = 0, bits = 0;
    int as_json = 0;
    em_cli_opt opts[] = {
        { "--model", "-m", EM_OPT_STR, &model_path, 0, 0 },
        { "--ctx", NULL, EM_OPT_INT, &ctx, 1, CTX_MAX },
        { "--mem-gb", NULL, EM_OPT_FLOAT, &mem_gb, 0.001, 1e6 },
        { "--kv-type", NULL, EM_OPT_STR, &kv_name, 0, 0 },
        { "--users", NULL, EM_OPT_INT, &users, 1, 1024 },   /* serve's --parallel */
        { "--json", NULL, EM_OPT_FLAG, &as_json, 0, 0 },
        { "--layers", NULL, EM_OPT_INT, &layers, 1, 4096 },
        { "--kv-heads", NULL, EM_OPT_INT, &kv_heads, 1, 4096 },
        { "--head-dim", NULL, EM_OPT_INT, &head_dim, 1, 65536 },
        { "--params", NULL, EM_OPT_STR, &params_s, 0, 0 },
        { "--bits", NULL, EM_OPT_FLOAT, &bits, 0.5, 64 },
        { "--heads", NULL, EM_OPT_INT, &heads, 1, 4096 },
        { "--embd", NULL, EM_OPT_INT, &embd, 1, 1 << 20 },
        { "--ff", NULL, EM_OPT_INT, &ff, 1, 1 << 24 },
        { "--vocab", NULL, EM_OPT_INT, &vocab, 1, 1 << 24 },
        { NULL, NULL, 0, NULL, 0, 0 },
    };
    int rc = em_cli_parse("vram", argc, argv, opts, NULL, 0, NULL, usage);
    if (rc)
        return rc;
    em_err err = { 0 };
    plan p;
    memset(&p, 0, sizeof p);
    if (em_fwd_kv_type_parse(kv_name, &p.kv_type, &err))
        return em_cli_fail(2, "vram: %s", err.msg);
    int shape_given = layers || kv_heads || head_dim || params_s || bits;
    int extra_given = heads || embd || ff || vocab;
    if (model_path && (shape_given || extra_given))
        return em_cli_fail(2, "vram: give either --model or a shape (--layers ...), not both");
    if (!model_path && !shape_given)
        return em_cli_fail(2, "vram: give --model PATH, or a shape: --layers L --kv-heads H --head-dim D "
                              "--params P --bits B --ctx N");
    double n_params = 0;
    em_model *m = NULL;
    em_vk_dev_info *devs = NULL;
    json_t *root = NULL;
    int status = 0;
    type_row rows[EM_T_COUNT];
    memset(rows, 0, sizeof rows);
    char dev_desc[512] = "";
    int dev_index = -1;
    const em_vk_dev_info *di = NULL;
    em_err unsupported = { 0 };   /* the forward pass's refusal of the model, if any */

    if (!model_path) {
        const char *missing = !layers ? "--layers" : !kv_heads ? "--kv-heads" : !head_dim ? "--head-dim"
                              : !params_s ? "--params" : !bits ? "--bits" : !ctx ? "--ctx" : NULL;
        if (missing)
            return em_cli_fail(2, "vram: a shape needs %s (all of --layers --kv-heads --head-dim --params "
                                  "--bits --ctx)", missing);
        if (parse_params(params_s, &n_params))
            return em_cli_fail(2, "vram: --params: '%s' is not a parameter count from 1e3 to 1e15 "
                                  "(8e9, 8B, 135M)", params_s);
        if (extra_given && !(heads && embd && ff && vocab))
            return em_cli_fail(2, "vram: the scratch needs all of --heads, --embd, --ff and --vocab");
        if (heads && heads % kv_heads)
            return em_cli_fail(2, "vram: --heads %ld is not a multiple of --kv-heads %ld", heads, kv_heads);
        p.hp.n_layer = (uint32_t)layers;
        p.hp.n_head_kv = (uint32_t)kv_heads;
        p.hp.head_dim = p.hp.head_dim_v = (uint32_t)head_dim;
        p.hp.n_head = (uint32_t)heads;
        p.hp.n_embd = (uint32_t)embd;
        p.hp.n_ff = (uint32_t)ff;
        p.hp.n_vocab = (uint32_t)vocab;
        p.scratch_known = extra_given;
        p.mem.weights = (uint64_t)ceil(n_params * bits / 8);
    } else {
        if ((rc = em_model_open(model_path, &m, &err))) {
            status = em_cli_fail(em_err_is_input(rc) ? 2 : 1, "vram: %s", err.msg);
            goto done;
        }
        p.hp = *em_model_hparams(m);
        p.scratch_known = 1;
        em_fwd_model_supported(&p.hp, &unsupported);
        if (!ctx)   /* the model's, within ember's bound on a context */
            ctx = p.hp.n_ctx_train < CTX_MAX ? p.hp.n_ctx_train : CTX_MAX;
        if (!ctx) {
            status = em_cli_fail(2, "vram: %s has no context_length: give --ctx", model_path);
            goto done;
        }
        const em_gguf *g = em_model_gguf(m);
        for (size_t i = 0; i < em_gguf_n_tensors(g); i++) {
            const em_gguf_tensor *t = em_gguf_tensor_at(g, i);
            type_row *r = &rows[t->type < EM_T_COUNT ? t->type : 0];
            r->tensors++;
            r->params += t->nelem;
            r->file_bytes += t->nbytes;
        }
    }
    /* what ember's kernels take (em_fwd_create refuses the rest) */
    if (p.hp.head_dim > 256 || p.hp.head_dim_v > 256 || p.hp.head_dim % 8 || p.hp.head_dim_v % 8) {
        status = em_cli_fail(2, "vram: head size %u: ember's GPU kernels need multiples of 8 up to 256",
                             p.hp.head_dim);
        goto done;
    }
    if (p.kv_type == EM_KV_Q8_0 && (p.hp.head_dim % 32 || p.hp.head_dim_v % 32)) {
        status = em_cli_fail(2, "vram: a q8_0 KV cache needs head sizes that are multiples of 32 "
                                "(this model: %u)", p.hp.head_dim);
        goto done;
    }

    /* the memory: --mem-gb, or the device ember would pick */
    int cpu_device = 0;
    if (mem_gb > 0) {
        p.heap = (uint64_t)(mem_gb * (double)(1ull << 30));
    } else {
        int n = 0;
        if ((rc = em_vk_enumerate(&devs, &n, &dev_index, &err))) {
            status = em_cli_fail(em_err_is_input(rc) ? 2 : 1, "vram: %s (give --mem-gb G to plan for a "
                                 "memory size)", err.msg);
            goto done;
        }
        if (dev_index < 0) {
            status = em_cli_fail(1, "vram: no usable Vulkan device (`ember devices` says why; give "
                                    "--mem-gb G to plan for a memory size)");
            goto done;
        }
        di = &devs[dev_index];
        p.heap = di->device_local_bytes;
        p.range = di->max_storage_range;
        cpu_device = di->type == VK_PHYSICAL_DEVICE_TYPE_CPU;
        snprintf(dev_desc, sizeof dev_desc, "%s (%s)", di->name, di->type_name);
    }
    p.step_tokens = EM_SERVE_STEP_TOKENS;
    p.parallel = users ? (uint32_t)users : cpu_device ? EM_SERVE_PARALLEL_CPU : EM_SERVE_PARALLEL_GPU;
    em_fwd_kv_split_bytes(&p.hp, p.kv_type, &p.block_bytes, &p.window_bytes);
    if (m) {
        /* packed as on the device: its rows per workgroup (GPU kernels: 8) */
        em_vk_dev_info gpu = { .subgroup_size = 32 };
        const em_vk_dev_info *kd = di ? di : &gpu;
        if ((rc = em_fwd_plan_weights(m, em_fwd_mm_rows(kd, em_model_weight_bytes(m)), em_fwd_mm_lanes(kd),
                                      &p.mem, &err))) {
            status = em_cli_fail(2, "vram: %s: %s", model_path, err.msg);
            goto done;
        }
    }

    uint32_t n_ctx = (uint32_t)ctx;
    em_fwd_mem mem;
    int range_bound = 0;
    uint64_t blocks = pool_blocks(&p, n_ctx, &mem, &range_bound);
    uint64_t seq_blocks = blocks_of(n_ctx);
    uint64_t seqs = blocks / seq_blocks;
    uint64_t per_token = p.block_bytes / EM_KV_BLOCK;
    /* a sliding-window model: its windowed layers' pool, and what a
     * sequence would take with every layer kept for the whole context */
    uint64_t win_blocks = window_blocks(&p, n_ctx), win_seq = win_blocks * p.window_bytes;
    uint64_t seq_bytes = seq_blocks * p.block_bytes + win_seq;
    uint64_t seq_bytes_full = seq_blocks * (p.block_bytes + p.window_bytes);
    uint32_t n_win_layers = 0;
    for (uint32_t il = 0; il < p.hp.n_layer; il++)
        n_win_layers += em_hparams_window(&p.hp, il) != 0;
    uint64_t budget = em_fwd_plan_kv_budget(p.heap, &mem);
    uint64_t scratch = em_fwd_mem_scratch(&mem);
    uint64_t reserve = p.heap - p.heap * 8 / 10;
    uint64_t weights_total = mem.weights + mem.vecs;
    uint32_t users_ctx = users ? max_ctx_for(&p, (uint32_t)users) : 0;
    uint64_t file_total = 0;
    for (int t = 0; t < EM_T_COUNT; t++)
        file_total += rows[t].file_bytes;

    char a[32], b[32], c[32], d[32];
    if (as_json) {
        json_t *types = json_array();
        for (int t = 0; t < EM_T_COUNT; t++)
            if (rows[t].tensors)
                json_array_append_new(types, json_pack("{s:s, s:i, s:I, s:I, s:I}", "type", em_ttype_name((uint32_t)t),
                                                       "tensors", (int)rows[t].tensors, "params",
                                                       (json_int_t)rows[t].params, "file_bytes",
                                                       (json_int_t)rows[t].file_bytes, "device_bytes",
                                                       (json_int_t)p.mem.weights_by_type[t]));
        json_t *memory = json_pack("{s:I, s:s}", "bytes", (json_int_t)p.heap, "source",
                                   di ? "device" : "--mem-gb");
        if (di)
            json_object_set_new(memory, "device", json_pack("{s:i, s:s, s:s}", "index", dev_index, "name",
                                                            di->name, "type", di->type_name));
        json_t *weights = json_pack("{s:o, s:I, s:I, s:I}", "types", types, "file_bytes",
                                    (json_int_t)file_total, "device_bytes", (json_int_t)mem.weights,
                                    "vector_bytes", (json_int_t)mem.vecs);
        if (m && p.hp.n_expert)
            json_object_set_new(weights, "experts", json_pack("{s:i, s:i, s:I, s:I}", "count", (int)p.hp.n_expert,
                                                              "used", (int)p.hp.n_expert_used, "params",
                                                              (json_int_t)em_model_n_params(m), "active_params",
                                                              (json_int_t)em_model_n_params_active(m)));
        if (!m) {
            json_object_set_new(weights, "params", json_real(n_params));
            json_object_set_new(weights, "bits", json_real(bits));
        }
        json_t *sc = p.scratch_known
            ? json_pack("{s:I, s:I, s:I, s:I, s:i, s:i}", "bytes", (json_int_t)scratch, "activation_bytes",
                        (json_int_t)(scratch - mem.logits - mem.step), "logits_bytes", (json_int_t)mem.logits,
                        "step_bytes", (json_int_t)mem.step, "step_tokens", (int)p.step_tokens, "sequences",
                        (int)p.parallel)
            : json_null();
        root = json_pack("{s:s, s:o, s:o, s:{s:s, s:I, s:i, s:I, s:i, s:I, s:i}, s:o,"
                         " s:{s:I, s:I, s:I}, s:{s:I, s:I, s:I, s:b}, s:b}",
                         "model", m ? model_path : "shape", "memory", memory, "weights", weights,
                         "kv", "type", em_fwd_kv_type_name(p.kv_type), "bytes_per_token", (json_int_t)per_token,
                         "block_tokens", EM_KV_BLOCK, "block_bytes", (json_int_t)p.block_bytes, "ctx",
                         (int)n_ctx, "bytes_per_sequence", (json_int_t)seq_bytes,
                         "blocks_per_sequence", (int)seq_blocks, "scratch", sc, "overhead", "staging_bytes",
                         (json_int_t)mem.staging, "margin_bytes", (json_int_t)mem.margin, "reserve_bytes",
                         (json_int_t)reserve, "pool", "bytes", (json_int_t)budget, "blocks",
                         (json_int_t)blocks, "sequences", (json_int_t)seqs, "range_bound", range_bound,
                         "fits", seqs > 0 && (!users || users_ctx > 0));
        if (root && m)
            json_object_set_new(root, "context_length", json_integer(p.hp.n_ctx_train));
        if (root && p.window_bytes)   /* (bytes_per_token: the global layers') */
            json_object_set_new(json_object_get(root, "kv"), "window",
                                json_pack("{s:i, s:i, s:i, s:I, s:i, s:I, s:I, s:I}", "window", (int)p.hp.n_swa,
                                          "layers", (int)n_win_layers, "global_layers",
                                          (int)(p.hp.n_layer - n_win_layers), "block_bytes",
                                          (json_int_t)p.window_bytes, "blocks_per_sequence", (int)win_blocks,
                                          "bytes_per_sequence", (json_int_t)win_seq, "pool_bytes",
                                          (json_int_t)(p.parallel * win_seq), "bytes_per_sequence_without",
                                          (json_int_t)seq_bytes_full));
        if (root && unsupported.msg[0])   /* the figures are what it will take once it runs */
            json_object_set_new(root, "unsupported", json_string(unsupported.msg));
        if (root && users)
            json_object_set_new(root, "users", json_pack("{s:i, s:i}", "n", (int)users, "max_ctx", (int)users_ctx));
        char *s = root ? json_dumps(root, JSON_INDENT(2)) : NULL;
        if (!s) {
            status = em_cli_fail(1, "vram: out of memory");
            goto done;
        }
        puts(s);
        free(s);
    } else {
        if (m) {
            printf("model     %s: %s, %u layers, %u heads / %u KV heads of %u, context_length %u\n", model_path,
                   p.hp.arch_name, p.hp.n_layer, p.hp.n_head, p.hp.n_head_kv, p.hp.head_dim, p.hp.n_ctx_train);
            if (unsupported.msg[0])   /* the figures are what it will take once it runs */
                printf("note      %s\n", unsupported.msg);
        } else {
            count_words(a, sizeof a, n_params);
            printf("model     shape: %u layers, %u KV heads of %u, %s parameters at %g bits\n", p.hp.n_layer,
                   p.hp.n_head_kv, p.hp.head_dim, a, bits);
        }
        em_cli_bytes(a, sizeof a, p.heap);
        if (di)
            printf("memory    %s: device-local heap of device %d, %s\n", a, dev_index, dev_desc);
        else
            printf("memory    %s (--mem-gb)\n", a);
        if (m) {
            printf("weights   %-8s %7s %14s %16s %16s\n", "type", "tensors", "parameters", "file bytes",
                   "device bytes");
            for (int t = 0; t < EM_T_COUNT; t++)
                if (rows[t].tensors)
                    printf("          %-8s %7u %14llu %16llu %16llu%s\n", em_ttype_name((uint32_t)t),
                           rows[t].tensors, (unsigned long long)rows[t].params,
                           (unsigned long long)rows[t].file_bytes,
                           (unsigned long long)p.mem.weights_by_type[t],
                           t == EM_T_F32 && !p.mem.weights_by_type[t] ? "  (vectors, below)" : "");
            em_cli_bytes(a, sizeof a, file_total);
            em_cli_bytes(b, sizeof b, mem.weights);
            em_cli_bytes(c, sizeof c, mem.vecs);
            printf("          file %s; on the device %s of matrices (BF16 as F16) "
                   "+ %s of f32 vectors\n", a, b, c);
            if (p.hp.n_expert)
                printf("          a mixture of experts: %u of %u per token, %llu of %llu parameters active\n",
                       p.hp.n_expert_used, p.hp.n_expert, (unsigned long long)em_model_n_params_active(m),
                       (unsigned long long)em_model_n_params(m));
        } else {
            em_cli_bytes(a, sizeof a, mem.weights);
            count_words(b, sizeof b, n_params);
            printf("weights   %s (%s parameters x %g bits / 8)\n", a, b, bits);
        }
        uint32_t es = p.kv_type == EM_KV_Q8_0 ? 34 : 2;
        if (p.hp.encoder)
            printf("KV cache  none: an encoder keeps no K and V (each sequence is whole in its step)\n");
        else
            printf("KV cache  %s: %llu B per token (%u layers x %u KV heads x %u x 2 (K and V) x %s), "
                   "blocks of %u tokens\n", em_fwd_kv_type_name(p.kv_type), (unsigned long long)per_token,
                   p.hp.n_layer - n_win_layers, p.hp.n_head_kv, p.hp.head_dim, es == 2 ? "2 B" : "34/32 B",
                   EM_KV_BLOCK);
        if (p.window_bytes) {
            em_cli_bytes(a, sizeof a, win_seq);
            printf("          the %u sliding-window layers keep the last %u positions: %llu blocks, %s per "
                   "sequence\n", n_win_layers, p.hp.n_swa, (unsigned long long)win_blocks, a);
        }
        em_cli_bytes(a, sizeof a, seq_bytes);
        em_cli_bytes(b, sizeof b, seq_bytes_full);
        if (!p.hp.encoder)
            printf("          per sequence of %u tokens: %llu B (%s, %llu blocks)%s%s\n", n_ctx,
                   (unsigned long long)seq_bytes, a, (unsigned long long)seq_blocks,
                   p.window_bytes ? "; every layer for the whole context: " : "", p.window_bytes ? b : "");
        if (p.scratch_known) {
            em_cli_bytes(a, sizeof a, scratch - mem.logits - mem.step);
            em_cli_bytes(b, sizeof b, mem.logits);
            em_cli_bytes(c, sizeof c, mem.step);
            em_cli_bytes(d, sizeof d, scratch);
            printf("scratch   %s: activations of %u-token steps %s, logits of %u sequences %s, step "
                   "buffer %s\n", d, p.step_tokens, a, p.parallel, b, c);
        } else {
            printf("scratch   not counted: give --heads, --embd, --ff and --vocab\n");
        }
        em_cli_bytes(a, sizeof a, mem.staging);
        em_cli_bytes(b, sizeof b, mem.margin);
        em_cli_bytes(c, sizeof c, reserve);
        printf("overhead  staging %s, margin %s, reserve %s (the 20%% ember serve leaves free)\n", a, b, c);
        em_cli_bytes(a, sizeof a, budget);
        if (p.hp.encoder)
            printf("free      %s beside steps of %u sequences of up to %u tokens\n", a, p.parallel, n_ctx);
        else
            printf("KV pool   %s: %llu blocks = %llu sequences of %u tokens%s\n", a, (unsigned long long)blocks,
                   (unsigned long long)seqs, n_ctx,
                   range_bound ? " (bound by the device's storage-buffer range per layer)" : "");
        if (p.window_bytes) {
            em_cli_bytes(a, sizeof a, p.parallel * win_seq);
            printf("          of it the sliding-window layers' pool: %s (%u sequences x %llu blocks)\n", a,
                   p.parallel, (unsigned long long)win_blocks);
        }
        if (seqs > p.parallel && !users)
            printf("          (ember serve runs %u at once unless --parallel says more)\n", p.parallel);
        if (users) {
            if (users_ctx)
                printf("users     %ld sequences fit up to %u tokens each%s\n", users, users_ctx,
                       m && users_ctx > p.hp.n_ctx_train ? " (beyond the model's context_length)" : "");
            else
                printf("users     %ld sequences do not fit even at %u tokens each\n", users, EM_KV_BLOCK);
        }
    }
    fflush(stdout);
    if (budget < p.block_bytes + p.parallel * win_seq) {
        em_cli_bytes(a, sizeof a, weights_total);
        em_cli_bytes(b, sizeof b, scratch + mem.staging + mem.margin);
        em_cli_bytes(c, sizeof c, p.heap * 8 / 10);
        status = em_cli_fail(1, "vram: the model does not fit: weights %s + scratch and overhead %s leave "
                                "no room for the KV cache in the %s (80%%) of memory ember serve uses",
                             a, b, c);
    } else if (!seqs) {
        em_cli_bytes(a, sizeof a, seq_bytes);
        em_cli_bytes(b, sizeof b, budget);
        status = em_cli_fail(1, "vram: one sequence of %u tokens does not fit: it needs %s of KV cache, "
                                "%s is left", n_ctx, a, b);
    } else if (users && !users_ctx) {
        em_cli_bytes(a, sizeof a, budget);
        status = em_cli_fail(1, "vram: %ld sequences do not fit: %s of KV cache holds %llu blocks of %u "
                                "tokens", users, a, (unsigned long long)blocks, EM_KV_BLOCK);
    }
done:
    json_decref(root);
    free(devs);
    em_model_close(m);
    return status;
}
