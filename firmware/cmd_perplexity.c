/* cmd_perplexity.c — `ember perplexity`: what a model (or a quantization of
 * it) makes of the operator's own text.
 *
 * The text is tokenized once and cut into windows of --ctx tokens; each
 * window starts a fresh sequence with BOS in its first position, and only
 * its second half is scored (every scored token then has at least ctx/2
 * tokens of context), as is conventional. Perplexity is exp(mean NLL) with
 * its standard error. Against a base (--compare M2, --base-logits FILE, or
 * --model itself under --report) it also measures KL(base || model) per
 * position (mean, 99th percentile) and how often the top token agrees; the
 * base is kept as top-K log-probs plus the lumped rest (firmware/ppl.h),
 * which is also what --save-logits writes. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/gpu/engine.h"
#include "core/model/model.h"
#include "core/model/quantize.h"
#include "core/run/sample.h"
#include "core/text/tokenizer.h"
#include "firmware/cli.h"
#include "firmware/ppl.h"

static const char usage[] =
    "usage: ember perplexity --model M --file TEXT [--ctx N] [--backend vulkan|cpu]\n"
    "                        [--compare M2 | --base-logits FILE] [--save-logits FILE]\n"
    "                        [--kl-top-k K] [--report M2 M3 ... [--csv OUT] [--svg OUT]]\n"
    "  Perplexity of M on TEXT in windows of N tokens (default 512), scoring the\n"
    "  second half of each window; prints the figure and its standard error.\n"
    "  --compare M2       also KL(M2 || M) per position (mean, 99th percentile) and\n"
    "                     the share of positions where the top token agrees\n"
    "  --save-logits F    write M's distributions (top-K log-probs) for later runs\n"
    "  --base-logits F    compare against distributions saved by --save-logits\n"
    "  --kl-top-k K       log-probs kept per position (default 256; 0: the whole\n"
    "                     vocabulary, exact KL but large files)\n"
    "  --report M2 M3 ... table of M (the base) and each Mi: type, size, perplexity,\n"
    "                     KL, top-token agreement, decode tokens/s on this device;\n"
    "                     --csv and --svg write it as CSV and as a chart\n"
    "  See docs/QUANTIZATION.md.\n";

enum { DEFAULT_CTX = 512, DEFAULT_TOP_K = 256, MAX_REPORT = 15, SPEED_PREFILL = 16, SPEED_DECODE = 64 };

typedef struct {
    em_backend      backend;
    uint32_t        ctx, n_windows, n_scored, first, k;
    const int32_t  *win;          /* [n_windows][ctx] window tokens, BOS first */
    const char     *text_path;
    const char     *text;         /* borrowed */
    size_t          text_len;
    const int32_t  *ids;          /* the text's ids (for tokenizer checks) */
    size_t          n_ids;
    char            device[256];  /* the engine's description */
    /* progress over every window of every model */
    int             tty;
    uint32_t        done, total;
    double          t0;
} run;

static void show_progress(run *r, const char *what)
{
    if (!r->tty)
        return;
    double el = em_cli_now() - r->t0, eta = r->done ? el / r->done * (r->total - r->done) : 0;
    char fill[31];
    int k = (int)(30.0 * r->done / (r->total ? r->total : 1));
    for (int i = 0; i < 30; i++)
        fill[i] = i < k ? '#' : '.';
    fill[30] = 0;
    fprintf(stderr, "\r[%s] %u/%u windows  %-24.24s ETA %4.0fs ", fill, r->done, r->total, what, eta);
    if (r->done == r->total)
        fputc('\n', stderr);
    fflush(stderr);
}

static const char *base_name(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

/* The file type's name ("Q4_K_M"), else the commonest matrix type. */
static void model_type(const em_model *m, char *out, size_t cap)
{
    const em_gguf *g = em_model_gguf(m);
    uint32_t ft;
    const char *name = em_gguf_get_u32(g, "general.file_type", &ft, NULL) == 0 ? em_ftype_name(ft) : NULL;
    if (!name) {
        uint64_t bytes[EM_T_COUNT] = { 0 };
        uint32_t best = 0;
        for (size_t i = 0; i < em_gguf_n_tensors(g); i++) {
            const em_gguf_tensor *t = em_gguf_tensor_at(g, i);
            if (t->n_dims >= 2 && t->type < EM_T_COUNT && (bytes[t->type] += t->nbytes) > bytes[best])
                best = t->type;
        }
        name = em_ttype_name(best);
    }
    snprintf(out, cap, "%s", name);
}

/* Fail unless m tokenizes the text exactly as the base model did. */
static int same_vocab(const run *r, const em_model *m, const char *path, uint32_t n_vocab, em_err *err)
{
    em_tokenizer *tok = NULL;
    int32_t *ids = NULL;
    size_t n = 0;
    int rc = em_tokenizer_create(em_model_gguf(m), &tok, err);
    if (!rc && !(rc = em_tokenizer_encode(tok, r->text, r->text_len, 1, 0, &ids, &n, err)) &&
        (em_model_hparams(m)->n_vocab != n_vocab || n != r->n_ids ||
         memcmp(ids, r->ids, n * sizeof *ids) != 0))
        rc = em_err_set(err, EM_EINVAL, "%s: its vocabulary differs from the base model's (the text "
                        "tokenizes differently); comparisons need the same tokenizer", path);
    free(ids);
    em_tokenizer_destroy(tok);
    return rc;
}

/* Decode speed at batch 1: SPEED_PREFILL tokens of the text and one
 * untimed step (the first decode step builds its pipelines), then up to
 * SPEED_DECODE greedy steps, timed. */
static int decode_speed(const run *r, em_engine *e, uint32_t n_vocab, float *logits, double *tok_s, em_err *err)
{
    uint32_t np = r->ctx / 4 < SPEED_PREFILL ? r->ctx / 4 : SPEED_PREFILL;
    uint32_t nd = r->ctx - np - 2 < SPEED_DECODE ? r->ctx - np - 2 : SPEED_DECODE;
    int rc = em_engine_eval(e, r->win, np, 0, logits, 0, err);
    if (rc)
        return rc;
    int32_t id = em_argmax(logits, n_vocab);
    if ((rc = em_engine_eval(e, &id, 1, np, logits, 0, err)))
        return rc;
    double t0 = em_cli_now();
    for (uint32_t i = 0; i < nd; i++) {
        id = em_argmax(logits, n_vocab);
        if ((rc = em_engine_eval(e, &id, 1, np + 1 + i, logits, 0, err)))
            return rc;
    }
    double dt = em_cli_now() - t0;
    *tok_s = dt > 0 ? nd / dt : 0;
    return 0;
}

/* Evaluate m over every window: perplexity into st; with save, m's records;
 * with cmp, KL against the base's records; with tok_s, the decode speed. */
static int eval_model(run *r, const em_model *m, const char *path, em_ppl_base *save,
                      const em_ppl_base *cmp, em_ppl_stats *st, double *tok_s, em_err *err)
{
    const em_hparams *hp = em_model_hparams(m);
    uint32_t V = hp->n_vocab;
    uint32_t chunk = (uint32_t)((64u << 20) / ((uint64_t)V * 4));
    chunk = chunk < 1 ? 1 : chunk > 64 ? 64 : chunk;
    em_engine *e = NULL;
    float *logits = malloc((size_t)chunk * V * sizeof *logits);
    float *lq = malloc((size_t)(cmp ? cmp->k : 1) * sizeof *lq);
    int rc = logits && lq ? 0 : em_err_set(err, EM_ENOMEM, "perplexity: out of memory");
    if (rc || (rc = em_engine_create(m, r->backend, r->ctx, NULL, &e, err)))
        goto done;
    snprintf(r->device, sizeof r->device, "%s", em_engine_describe(e));
    for (uint32_t w = 0; w < r->n_windows; w++) {
        const int32_t *tk = r->win + (size_t)w * r->ctx;
        if ((rc = em_engine_eval(e, tk, r->first, 0, NULL, 0, err)))
            goto done;
        for (uint32_t c0 = r->first; c0 < r->ctx - 1; c0 += chunk) {
            uint32_t n = r->ctx - 1 - c0 < chunk ? r->ctx - 1 - c0 : chunk;
            if ((rc = em_engine_eval(e, tk + c0, n, c0, logits, 1, err)))
                goto done;
            for (uint32_t j = 0; j < n; j++) {
                const float *l = logits + (size_t)j * V;
                int32_t target = tk[c0 + j + 1];
                size_t ri = (size_t)w * r->n_scored + (c0 + j - r->first);
                em_ppl_add_nll(st, em_ppl_logsumexp(l, V) - l[target]);
                if (save)
                    em_ppl_base_set(save, ri, l, target);
                if (cmp) {
                    const int32_t *ids = em_ppl_rec_ids(cmp, ri);
                    double kl = em_ppl_kl(ids, em_ppl_rec_lp(cmp, ri), em_ppl_rec_tail(cmp, ri), cmp->k, l, V, lq);
                    if (em_ppl_add_kl(st, kl, em_argmax(l, V) == ids[0])) {
                        rc = em_err_set(err, EM_ENOMEM, "perplexity: out of memory");
                        goto done;
                    }
                }
            }
        }
        r->done++;
        show_progress(r, base_name(path));
    }
    if (tok_s && (rc = decode_speed(r, e, V, logits, tok_s, err)))
        goto done;
    rc = em_engine_check(e, err);
done:
    em_engine_destroy(e);
    free(logits);
    free(lq);
    return rc;
}

static void print_result(const em_ppl_result *res, const char *base_label, double base_ppl, double base_se)
{
    printf("perplexity: %.4f ± %.4f\n", res->ppl, res->ppl_se);
    if (!res->has_kl)
        return;
    printf("base perplexity (%s): %.4f ± %.4f\n", base_label, base_ppl, base_se);
    printf("KL divergence: mean %.6f ± %.6f, p99 %.6f, max %.6f\n", res->kl_mean, res->kl_se, res->kl_p99,
           res->kl_max);
    printf("top token agrees: %.2f%% ± %.2f%%\n", 100 * res->top1, 100 * res->top1_se);
}

/* Fill a report row for model m at path. */
static void row_of(em_ppl_row *row, const em_model *m, const char *path)
{
    struct stat sb;
    row->path = path;
    row->size = stat(path, &sb) == 0 ? (uint64_t)sb.st_size : 0;
    uint64_t np = em_model_n_params(m);
    row->bpw = np ? 8.0 * (double)em_model_weight_bytes(m) / (double)np : 0;
    model_type(m, row->type, sizeof row->type);
}

/* The line saying what is scored. */
static void print_text(const run *r)
{
    printf("text: %s: %zu tokens; %u windows of %u, scoring the last %u of each (%llu positions)\n",
           r->text_path, r->n_ids, r->n_windows, r->ctx, r->n_scored,
           (unsigned long long)r->n_windows * r->n_scored);
    fflush(stdout);
}

/* --report: the base (m) and each other model against it. */
static int do_report(run *r, const em_model *m, const char *model_path, const char *const *others, int n_others,
                     const char *save_path, const char *csv_path, const char *svg_path, em_err *err)
{
    uint32_t V = em_model_hparams(m)->n_vocab;
    em_ppl_row rows[MAX_REPORT + 1];
    em_ppl_base base = { 0 };
    em_ppl_stats st = { 0 };
    em_model *m2 = NULL;
    memset(rows, 0, sizeof rows);
    print_text(r);
    int rc = em_ppl_base_init(&base, V, r->ctx, r->n_windows, r->k, err);
    if (rc)
        goto done;
    memcpy(base.tokens, r->win, (size_t)r->n_windows * r->ctx * sizeof *r->win);
    row_of(&rows[0], m, model_path);
    if ((rc = eval_model(r, m, model_path, &base, NULL, &st, &rows[0].tok_s, err)) ||
        (save_path && (rc = em_ppl_base_save(&base, save_path, err))))
        goto done;
    em_ppl_result_of(&st, &rows[0].r);
    for (int i = 0; i < n_others; i++) {
        em_ppl_stats_free(&st);
        memset(&st, 0, sizeof st);
        if ((rc = em_model_open(others[i], &m2, err)) || (rc = same_vocab(r, m2, others[i], V, err)))
            goto done;
        row_of(&rows[i + 1], m2, others[i]);
        if ((rc = eval_model(r, m2, others[i], NULL, &base, &st, &rows[i + 1].tok_s, err)))
            goto done;
        em_ppl_result_of(&st, &rows[i + 1].r);
        em_model_close(m2);
        m2 = NULL;
    }
    em_ppl_report_table(stdout, rows, n_others + 1, r->device);
    char title[200];
    snprintf(title, sizeof title, "%s on %s (%u windows of %u tokens)", base_name(model_path),
             base_name(r->text_path), r->n_windows, r->ctx);
    if (csv_path && (rc = em_ppl_report_csv(csv_path, rows, n_others + 1, err)))
        goto done;
    if (svg_path)
        rc = em_ppl_report_svg(svg_path, rows, n_others + 1, title, err);
done:
    em_model_close(m2);
    em_ppl_stats_free(&st);
    em_ppl_base_free(&base);
    return rc;
}

/* One model, against a base when compare_path or base_path is given. */
static int do_single(run *r, const em_model *m, const char *model_path, const char *compare_path,
                     const char *base_path, const char *save_path, em_err *err)
{
    uint32_t V = em_model_hparams(m)->n_vocab;
    em_ppl_base base = { 0 }, mine = { 0 };
    em_ppl_stats st = { 0 }, st_base = { 0 };
    em_model *m2 = NULL;
    const char *base_label = compare_path ? compare_path : base_path;
    int rc = 0;
    if (base_path) {
        if ((rc = em_ppl_base_load(base_path, &base, err)))
            goto done;
        if (base.n_vocab != V || base.n_ctx != r->ctx || base.n_windows != r->n_windows ||
            memcmp(base.tokens, r->win, (size_t)r->n_windows * r->ctx * sizeof *r->win) != 0) {
            rc = em_err_set(err, EM_EINVAL, "perplexity: %s was saved for another text, --ctx or "
                            "vocabulary (its windows hold other tokens)", base_path);
            goto done;
        }
        for (size_t i = 0; i < (size_t)base.n_windows * base.n_scored; i++)
            em_ppl_add_nll(&st_base, -(double)em_ppl_rec_target(&base, i));
    } else if (compare_path) {
        if ((rc = em_model_open(compare_path, &m2, err)) || (rc = same_vocab(r, m2, compare_path, V, err)) ||
            (rc = em_ppl_base_init(&base, V, r->ctx, r->n_windows, r->k, err)) ||
            (rc = eval_model(r, m2, compare_path, &base, NULL, &st_base, NULL, err)))
            goto done;
    }
    print_text(r);
    if (save_path) {
        if ((rc = em_ppl_base_init(&mine, V, r->ctx, r->n_windows, r->k, err)))
            goto done;
        memcpy(mine.tokens, r->win, (size_t)r->n_windows * r->ctx * sizeof *r->win);
    }
    if ((rc = eval_model(r, m, model_path, save_path ? &mine : NULL, base_label ? &base : NULL, &st, NULL, err)) ||
        (save_path && (rc = em_ppl_base_save(&mine, save_path, err))))
        goto done;
    em_ppl_result res, rb;
    em_ppl_result_of(&st, &res);
    em_ppl_result_of(&st_base, &rb);
    printf("backend: %s\n", r->device);
    if (base_label)
        printf("KL over the base's top %u tokens and the rest lumped together%s\n", base.k,
               base.k == V ? " (the whole vocabulary: exact)" : "");
    print_result(&res, base_label, rb.ppl, rb.ppl_se);
done:
    em_model_close(m2);
    em_ppl_stats_free(&st);
    em_ppl_stats_free(&st_base);
    em_ppl_base_free(&base);
    em_ppl_base_free(&mine);
    return rc;
}

/* Peek at a base-logits file's window length (0 if unreadable: the full
 * load reports the error). */
static uint32_t saved_ctx(const char *path)
{
    em_ppl_base b;
    if (em_ppl_base_load(path, &b, NULL))
        return 0;
    uint32_t c = b.n_ctx;
    em_ppl_base_free(&b);
    return c;
}

int em_cmd_perplexity(int argc, char **argv)
{
    const char *model_path = NULL, *text_path = NULL, *backend_name = "vulkan", *compare_path = NULL;
    const char *base_path = NULL, *save_path = NULL, *csv_path = NULL, *svg_path = NULL;
    long ctx = 0, top_k = DEFAULT_TOP_K;
    int report = 0;
    em_cli_opt opts[] = {
        { "--model", "-m", EM_OPT_STR, &model_path, 0, 0 },
        { "--file", "-f", EM_OPT_STR, &text_path, 0, 0 },
        { "--ctx", "-c", EM_OPT_INT, &ctx, 8, 1 << 20 },
        { "--backend", NULL, EM_OPT_STR, &backend_name, 0, 0 },
        { "--compare", NULL, EM_OPT_STR, &compare_path, 0, 0 },
        { "--base-logits", NULL, EM_OPT_STR, &base_path, 0, 0 },
        { "--save-logits", NULL, EM_OPT_STR, &save_path, 0, 0 },
        { "--kl-top-k", NULL, EM_OPT_INT, &top_k, 0, 1 << 24 },
        { "--report", NULL, EM_OPT_FLAG, &report, 0, 0 },
        { "--csv", NULL, EM_OPT_STR, &csv_path, 0, 0 },
        { "--svg", NULL, EM_OPT_STR, &svg_path, 0, 0 },
        { NULL, NULL, 0, NULL, 0, 0 },
    };
    const char *others[MAX_REPORT + 1];
    int n_others = 0;
    int rc = em_cli_parse("perplexity", argc, argv, opts, others, MAX_REPORT + 1, &n_others, usage);
    if (rc)
        return rc;
    if (!model_path || !text_path)
        return em_cli_fail(2, "perplexity: --model and --file are required");
    if (compare_path && base_path)
        return em_cli_fail(2, "perplexity: --compare and --base-logits both give a base; use one");
    if (n_others && !report)
        return em_cli_fail(2, "perplexity: unexpected argument '%s' (models to compare go after --report)", others[0]);
    if (report && (compare_path || base_path))
        return em_cli_fail(2, "perplexity: --report uses --model as the base; drop --compare/--base-logits");
    if (report && n_others == 0)
        return em_cli_fail(2, "perplexity: --report needs the models to compare with %s", model_path);
    if (n_others > MAX_REPORT)
        return em_cli_fail(2, "perplexity: --report takes at most %d models", MAX_REPORT);
    if ((csv_path || svg_path) && !report)
        return em_cli_fail(2, "perplexity: --csv and --svg go with --report");
    em_err err = { 0 };
    run r;
    memset(&r, 0, sizeof r);
    if (csv_path && svg_path && strcmp(csv_path, svg_path) == 0)
        return em_cli_fail(2, "perplexity: --csv and --svg name the same file %s", csv_path);
    /* outputs that cannot be written are refused before minutes of evaluation */
    if (em_backend_parse(backend_name, &r.backend, &err) ||
        (save_path && em_cli_check_out_path("--save-logits", save_path, &err)) ||
        (csv_path && em_cli_check_out_path("--csv", csv_path, &err)) ||
        (svg_path && em_cli_check_out_path("--svg", svg_path, &err)))
        return em_cli_fail(2, "perplexity: %s", err.msg);
    if (base_path && !ctx)
        ctx = saved_ctx(base_path);      /* the window length the base was saved with */

    em_model *m = NULL;
    em_tokenizer *tok = NULL;
    char *text = NULL;
    int32_t *ids = NULL, *win = NULL;
    size_t text_len = 0, n_ids = 0;
    if ((rc = em_cli_read_file(text_path, &text, &text_len, &err)) ||
        (rc = em_model_open(model_path, &m, &err)) ||
        (rc = em_tokenizer_create(em_model_gguf(m), &tok, &err)) ||
        (rc = em_tokenizer_encode(tok, text, text_len, 1, 0, &ids, &n_ids, &err)))
        goto done;
    uint32_t V = em_model_hparams(m)->n_vocab;
    r.ctx = ctx ? (uint32_t)ctx : DEFAULT_CTX;
    r.first = r.ctx / 2;
    r.n_scored = r.ctx - 1 - r.first;
    r.n_windows = (uint32_t)(n_ids / r.ctx);
    r.k = top_k == 0 || (uint64_t)top_k > V ? V : (uint32_t)top_k;
    if (r.n_windows == 0) {
        rc = em_err_set(&err, EM_EINVAL, "perplexity: %s has %zu tokens, fewer than one window of %u "
                        "(use a longer text or a smaller --ctx)", text_path, n_ids, r.ctx);
        goto done;
    }
    em_cli_warn_ctx("perplexity", r.ctx, em_model_hparams(m)->n_ctx_train);   /* once it will run */
    if (!(win = malloc((size_t)r.n_windows * r.ctx * sizeof *win))) {
        rc = em_err_set(&err, EM_ENOMEM, "perplexity: out of memory");
        goto done;
    }
    int32_t bos = em_tokenizer_add_bos(tok) ? em_tokenizer_bos(tok) : -1;
    for (uint32_t w = 0; w < r.n_windows; w++) {
        memcpy(win + (size_t)w * r.ctx, ids + (size_t)w * r.ctx, r.ctx * sizeof *win);
        if (bos >= 0)
            win[(size_t)w * r.ctx] = bos;
    }
    r.win = win;
    r.text_path = text_path;
    r.text = text;
    r.text_len = text_len;
    r.ids = ids;
    r.n_ids = n_ids;
    r.tty = isatty(2);
    r.t0 = em_cli_now();
    r.total = r.n_windows * (uint32_t)(1 + (compare_path != NULL) + n_others);
    if (report)
        rc = do_report(&r, m, model_path, others, n_others, save_path, csv_path, svg_path, &err);
    else
        rc = do_single(&r, m, model_path, compare_path, base_path, save_path, &err);
done:
    em_tokenizer_destroy(tok);
    em_model_close(m);
    free(win);
    free(ids);
    free(text);
    return rc ? em_cli_fail_err(&err) : 0;
}
