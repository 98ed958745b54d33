/* cmd_run.c — `ember run`: tokenize a prompt, feed it, and stream generated
 * text to stdout (greedy or sampled), with a summary on stderr. */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/gpu/engine.h"
#include "core/gpu/forward.h"
#include "core/grammar/grammar.h"
#include "core/grammar/json_schema.h"
#include "core/grow.h"
#include "core/model/model.h"
#include "core/run/sample.h"
#include "core/text/tokenizer.h"
#include "firmware/cli.h"

static const char usage[] =
    "usage: ember run [--model PATH] [--prompt TEXT] [-n N] [sampling flags] [--ctx N]\n"
    "                 [--backend vulkan|cpu] [--kv-type f16|q8_0] [--ids-out FILE] [--special]\n"
    "                 [--grammar-file F.gbnf | --json-schema F.json] [--draft-model PATH] [--speculate N]\n"
    "  Generates up to N tokens (default 256) after the prompt (default \"Once upon a time\")\n"
    "  and prints prompt + continuation. --temp 0 is greedy. Without --model: the first\n"
    "  *.gguf in ./models, else the demo model in ../shared/models.\n"
    "  --ids-out writes \"tokens: <prompt ids>\" and \"greedy: <generated ids>\" lines.\n"
    "  --special prints control tokens (such as the end-of-text token) as their text.\n"
    "  --grammar-file / --json-schema: the continuation follows that GBNF grammar or JSON\n"
    "  Schema (docs/grammar.md) and stops once it is complete.\n"
    "  --speculate N: speculative decoding, drafts of up to N (1..8) tokens checked in one\n"
    "  step, the output distributed as without (greedy: the same tokens); drafts from\n"
    "  --draft-model (a smaller model with the same vocabulary; N defaults to 4) or, without\n"
    "  one, by prompt lookup. Not with penalties or a grammar.\n"
    EM_CLI_SAMPLING_USAGE;

#define EM_RUN_MAX_DRAFT 8   /* --speculate at most */

typedef struct {
    int32_t *v;
    size_t   n, cap;
} idvec;

static int push_id(idvec *iv, int32_t id)
{
    if (em_grow((void **)&iv->v, &iv->cap, iv->n, sizeof *iv->v, 256))
        return EM_ENOMEM;
    iv->v[iv->n++] = id;
    return 0;
}

static int write_ids(const char *path, const int32_t *prompt, size_t np, const idvec *gen)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return em_cli_fail(1, "run: %s: %s", path, strerror(errno));
    fputs("tokens:", f);
    for (size_t i = 0; i < np; i++)
        fprintf(f, " %d", prompt[i]);
    fputs("\ngreedy:", f);
    for (size_t i = 0; i < gen->n; i++)
        fprintf(f, " %d", gen->v[i]);
    fputc('\n', f);
    if (fclose(f) != 0)
        return em_cli_fail(1, "run: %s: write failed", path);
    return 0;
}

/* A grammar the output follows (--grammar-file, --json-schema). */
typedef struct {
    em_grammar *g;
    em_gmatch  *m;
    em_gvocab  *v;
    uint32_t   *allow;   /* [(n_vocab + 31) / 32] */
} run_grammar;

static int grammar_open(const char *gfile, const char *sfile, const em_tokenizer *tok, uint32_t n_vocab,
                        run_grammar *rg)
{
    em_err err = { 0 };
    const char *path = gfile ? gfile : sfile;
    char *text = NULL;
    size_t len = 0;
    int rc = 0;
    if (gfile) {
        if ((rc = em_cli_read_file(gfile, &text, &len, &err)))
            return em_cli_fail(2, "run: --grammar-file: %s", err.msg);
    } else {
        json_error_t je;
        json_t *schema = json_load_file(sfile, JSON_REJECT_DUPLICATES, &je);
        if (!schema)
            return em_cli_fail(2, "run: %s:%d:%d: %s", sfile, je.line, je.column, je.text);
        rc = em_json_schema_to_gbnf(schema, NULL, &text, &len, &err);
        json_decref(schema);
        if (rc)
            return em_cli_fail(2, "run: %s: %s", sfile, err.msg);
    }
    rc = em_grammar_compile(text, len, NULL, &rg->g, &err);
    free(text);
    if (rc)
        return em_cli_fail(2, "run: %s: %s", path, err.msg);
    if ((rc = em_gmatch_create(rg->g, &rg->m, &err)) || (rc = em_gvocab_from_tokenizer(tok, &rg->v, &err)))
        return em_cli_fail(1, "run: %s", err.msg);
    if (em_gvocab_mask_words(rg->v) > (n_vocab + 31) / 32)
        return em_cli_fail(2, "run: the tokenizer has more tokens than the model's %u logits", n_vocab);
    if (!(rg->allow = calloc((n_vocab + 31) / 32, sizeof *rg->allow)))
        return em_cli_fail(1, "run: out of memory");
    return 0;
}

static void grammar_close(run_grammar *rg)
{
    free(rg->allow);
    em_gvocab_destroy(rg->v);
    em_gmatch_destroy(rg->m);
    em_grammar_destroy(rg->g);
}

/* Speculative decoding (--speculate, --draft-model): drafts from a draft
 * model (its own engine, kept caught up on the sequence) or by prompt
 * lookup, checked in one target step with all positions' logits. */
typedef struct {
    const char *path;        /* the draft model's file, or NULL: prompt lookup */
    em_engine  *deng;
    em_sampler *dsmp;        /* the draft's draws: the run's parameters, a PRNG stream of its own */
    uint32_t    max, k;      /* draft length: at most, next (adapts to what is accepted) */
    uint32_t    d_done;      /* positions the draft engine holds of the sequence */
    float      *q, *rows;    /* [max][n_vocab] the draft's distributions; [max + 1][n_vocab] the target's */
    uint64_t    drafted, accepted;
} run_spec;

static int vet_logits(const char *path, float *logits, uint32_t n_vocab, uint32_t n_tok, uint32_t pos);

/* seq[0..n): the sequence, its last token not yet fed to the target (it
 * goes at position n - 1). Draft up to limit tokens, feed the last token
 * and the drafts to the target at once, check them by the rejection rule:
 * chosen[0..*n_chosen) the accepted drafts (already in the target's cache)
 * and one token from the target (not yet fed). 0 or the exit status. */
static int spec_round(run_spec *sp, em_engine *eng, em_sampler *smp, const char *path, const int32_t *seq,
                      uint32_t n, uint32_t limit, uint32_t n_vocab, uint32_t n_tok, int32_t *chosen,
                      uint32_t *n_chosen)
{
    em_err err = { 0 };
    int32_t feed[EM_RUN_MAX_DRAFT + 1];
    uint32_t k = sp->k < limit ? sp->k : limit, nd = 0;
    int st;
    if (k && sp->deng) {
        float *dl = sp->rows;   /* the draft's logits pass through the target's first row */
        for (uint32_t j = 0; j < k; j++) {
            uint32_t at = j ? n + j - 1 : sp->d_done;
            int rc = j ? em_engine_eval(sp->deng, &feed[j], 1, at, dl, 0, &err)
                       : em_engine_eval(sp->deng, seq + sp->d_done, n - sp->d_done, at, dl, 0, &err);
            if (rc)
                return em_cli_fail(1, "run: the draft model: %s", err.msg);
            if ((st = vet_logits(sp->path, dl, n_vocab, n_tok, j ? at : n - 1)))
                return st;
            float *q = sp->q + (size_t)j * n_vocab;
            em_sampler_dist(sp->dsmp, dl, 0, q);
            feed[j + 1] = em_sampler_draw_dist(sp->dsmp, q);
            nd++;
        }
        sp->d_done = n;
    } else if (k) {
        nd = em_prompt_lookup(seq, n, k, feed + 1);
    }
    feed[0] = seq[n - 1];
    if (em_engine_eval(eng, feed, nd + 1, n - 1, sp->rows, 1, &err))
        return em_cli_fail_err(&err);
    uint32_t acc = 0, nc = 0;
    for (uint32_t j = 0; j <= nd; j++) {
        float *row = sp->rows + (size_t)j * n_vocab;
        if ((st = vet_logits(path, row, n_vocab, n_tok, n - 1 + j)))
            return st;
        int ok = 0;
        int32_t id = j == nd ? em_sampler_sample(smp, row)
                   : sp->deng ? em_sampler_verify_dist(smp, row, 0, feed[j + 1], sp->q + (size_t)j * n_vocab, &ok)
                              : em_sampler_verify(smp, row, 0, feed[j + 1], &ok);
        chosen[nc++] = id;
        if (!ok)
            break;
        acc++;
    }
    if (sp->deng && nd)   /* the draft holds the drafts it was fed that were accepted */
        sp->d_done = n + (acc < nd - 1 ? acc : nd - 1);
    if (nd)
        sp->k = acc == nd ? (sp->k < sp->max ? sp->k + 1 : sp->max) : acc + 1;
    sp->drafted += nd;
    sp->accepted += acc;
    *n_chosen = nc;
    return 0;
}

/* Logits as the sampler may see them: a NaN or infinity means the weights
 * are broken (a model file of NaNs ran to "stop: length" printing nothing):
 * one error line, status 2; ids past the tokenizer's vocabulary (an
 * embedding padded beyond it) can never be chosen, since they have no text. */
static int vet_logits(const char *path, float *logits, uint32_t n_vocab, uint32_t n_tok, uint32_t pos)
{
    int st = em_cli_finite_logits("run", path, logits, 1, n_vocab, pos);
    for (uint32_t i = n_tok; !st && i < n_vocab; i++)
        logits[i] = -INFINITY;
    return st;
}

int em_cmd_run(int argc, char **argv)
{
    const char *model_path = NULL, *prompt = "Once upon a time", *backend_name = "vulkan", *kv_name = "f16";
    const char *ids_out = NULL, *grammar_file = NULL, *schema_file = NULL, *draft_path = NULL;
    long n_gen = 256, ctx = 0, speculate = -1;
    int special = 0;
    em_cli_sampling smp_o = EM_CLI_SAMPLING_INIT;
    em_cli_opt opts[] = {
        { "--model", "-m", EM_OPT_STR, &model_path, 0, 0 },
        { "--prompt", "-p", EM_OPT_STR, &prompt, 0, 0 },
        { "--n-predict", "-n", EM_OPT_INT, &n_gen, 0, 1 << 20 },
        EM_CLI_SAMPLING_OPTS(smp_o),
        { "--ctx", NULL, EM_OPT_INT, &ctx, 0, 1 << 20 },
        { "--backend", NULL, EM_OPT_STR, &backend_name, 0, 0 },
        { "--kv-type", NULL, EM_OPT_STR, &kv_name, 0, 0 },
        { "--ids-out", NULL, EM_OPT_STR, &ids_out, 0, 0 },
        { "--special", NULL, EM_OPT_FLAG, &special, 0, 0 },
        { "--grammar-file", NULL, EM_OPT_STR, &grammar_file, 0, 0 },
        { "--json-schema", NULL, EM_OPT_STR, &schema_file, 0, 0 },
        { "--draft-model", NULL, EM_OPT_STR, &draft_path, 0, 0 },
        { "--speculate", NULL, EM_OPT_INT, &speculate, 0, EM_RUN_MAX_DRAFT },
        { NULL, NULL, 0, NULL, 0, 0 },
    };
    int rc = em_cli_parse("run", argc, argv, opts, NULL, 0, NULL, usage);
    if (rc)
        return rc;

    em_err err = { 0 };
    em_backend backend;
    em_engine_opts eo = { 0 };
    if (em_backend_parse(backend_name, &backend, &err) || em_fwd_kv_type_parse(kv_name, &eo.kv_type, &err) ||
        (ids_out && em_cli_check_out_path("--ids-out", ids_out, &err)))
        return em_cli_fail(2, "run: %s", err.msg);
    char default_path[4096];
    if (!model_path) {
        if (em_cli_default_model(default_path, sizeof default_path, &err))
            return em_cli_fail(2, "run: %s", err.msg);
        model_path = default_path;
        em_cli_note("using model %s", model_path);
    }

    em_model *m = NULL;
    em_tokenizer *tok = NULL;
    em_engine *eng = NULL;
    em_sampler *smp = NULL;
    int32_t *pids = NULL;
    size_t n_pids = 0;
    float *logits = NULL;
    char *piece = NULL;
    idvec gen = { 0 };
    run_grammar rg = { 0 };
    run_spec spec = { .path = draft_path };
    em_model *dm = NULL;
    em_tokenizer *dtok = NULL;
    idvec seq = { 0 };
    int status = 0;
    if (grammar_file && schema_file)
        return em_cli_fail(2, "run: give --grammar-file or --json-schema, not both");
    spec.max = speculate >= 0 ? (uint32_t)speculate : draft_path ? 4 : 0;
    em_sample_params sp = em_cli_sample_params(&smp_o);
    if (spec.max && (grammar_file || schema_file || sp.presence_penalty != 0 || sp.frequency_penalty != 0 ||
                     (sp.repetition_penalty != 0 && sp.repetition_penalty != 1)))
        return em_cli_fail(2, "run: speculative decoding (--speculate, --draft-model) does not go with penalties "
                           "or a grammar");
    spec.k = spec.max < 4 ? spec.max : 4;

    if ((status = em_cli_open_model("run", model_path, &m, &tok)))
        goto done;
    if (draft_path && spec.max) {
        if ((status = em_cli_open_model("run", draft_path, &dm, &dtok)))
            goto done;
        if ((rc = em_cli_same_vocab(tok, dtok, &err)) ||
            (em_model_hparams(dm)->n_vocab != em_model_hparams(m)->n_vocab &&
             (rc = em_err_set(&err, EM_EINVAL, "it scores %u tokens, the model %u", em_model_hparams(dm)->n_vocab,
                              em_model_hparams(m)->n_vocab)))) {
            status = em_cli_fail(2, "run: the draft model %s cannot draft for %s: %s", draft_path, model_path,
                                 err.msg);
            goto done;
        }
    }
    if ((grammar_file || schema_file) &&
        (status = grammar_open(grammar_file, schema_file, tok, em_model_hparams(m)->n_vocab, &rg)))
        goto done;
    if ((rc = em_tokenizer_encode(tok, prompt, strlen(prompt), 1, 0, &pids, &n_pids, &err))) {
        status = em_cli_fail_err(&err);
        goto done;
    }
    const em_hparams *hp = em_model_hparams(m);
    if (n_pids == 0) {
        status = em_cli_fail(2, "run: the prompt is empty and the model adds no BOS token");
        goto done;
    }
    uint32_t n_ctx = ctx > 0 ? (uint32_t)ctx : (hp->n_ctx_train < 4096 ? hp->n_ctx_train : 4096);
    if (n_pids >= n_ctx) {
        status = em_cli_fail(2, "run: the prompt has %zu tokens, which does not fit the %u-token context",
                             n_pids, n_ctx);
        goto done;
    }
    if ((rc = em_sampler_create(&sp, hp->n_vocab, &smp, &err)) ||
        (rc = em_engine_create(m, backend, n_ctx, &eo, &eng, &err))) {
        status = em_cli_fail_err(&err);
        goto done;
    }
    if (dm) {
        em_sample_params dp = sp;
        dp.seed ^= 0xd1b54a32d192ed03ull;
        if ((rc = em_sampler_create(&dp, hp->n_vocab, &spec.dsmp, &err)) ||
            (rc = em_engine_create(dm, backend, n_ctx, &eo, &spec.deng, &err))) {
            status = em_cli_fail(1, "run: the draft model %s: %s", draft_path, err.msg);
            goto done;
        }
    }
    if (spec.max) {
        spec.q = malloc((size_t)spec.max * hp->n_vocab * sizeof *spec.q);
        spec.rows = malloc((size_t)(spec.max + 1) * hp->n_vocab * sizeof *spec.rows);
        if (!spec.q || !spec.rows) {
            status = em_cli_fail(1, "run: out of memory");
            goto done;
        }
    }
    for (size_t i = 0; i < n_pids; i++)
        if (push_id(&seq, pids[i])) {
            status = em_cli_fail(1, "run: out of memory");
            goto done;
        }
    for (size_t i = 0; i < n_pids; i++)   /* the repetition penalty sees the prompt */
        if (em_sampler_accept(smp, pids[i], 0)) {
            status = em_cli_fail(1, "run: out of memory");
            goto done;
        }
    size_t cap = em_tokenizer_detok_cap(tok);
    logits = malloc((size_t)hp->n_vocab * sizeof *logits);
    piece = malloc(cap);
    if (!logits || !piece) {
        status = em_cli_fail(1, "run: out of memory");
        goto done;
    }

    em_cli_warn_ctx("run", n_ctx, hp->n_ctx_train);   /* once it will run: an error stays one line */
    fputs(prompt, stdout);
    fflush(stdout);
    double t0 = em_cli_now();
    if ((rc = em_engine_eval(eng, pids, (uint32_t)n_pids, 0, logits, 0, &err))) {
        status = em_cli_fail_err(&err);
        goto done;
    }
    if ((status = vet_logits(model_path, logits, hp->n_vocab, em_tokenizer_n_vocab(tok), (uint32_t)n_pids - 1)))
        goto done;
    double t1 = em_cli_now();
    em_detok dt;
    em_detok_init(&dt, 0);
    uint32_t pos = (uint32_t)n_pids;
    const char *stop = "length";
    int32_t pend[EM_RUN_MAX_DRAFT + 1];   /* tokens speculation has chosen, not yet printed */
    uint32_t n_pend = 0, at_pend = 0;
    for (long i = 0; i < n_gen; i++) {
        int32_t id;
        if (at_pend < n_pend) {
            id = pend[at_pend++];
        } else if (rg.m) {   /* only what keeps the output inside the grammar */
            uint32_t words = (hp->n_vocab + 31) / 32, any = 0;
            memset(rg.allow, 0, words * sizeof *rg.allow);
            if ((rc = em_gmatch_allowed(rg.m, rg.v, NULL, rg.allow, &err))) {
                status = em_cli_fail_err(&err);
                goto done;
            }
            for (uint32_t w = 0; w < words; w++)
                any |= rg.allow[w];
            if (!any) {
                status = em_cli_fail(1, "run: the grammar allows no token of the vocabulary here (after %zu)",
                                     gen.n);
                goto done;
            }
            id = em_sampler_sample_lp(smp, logits, rg.allow, 0, NULL);
            if (id < 0 || (!em_tokenizer_is_eog(tok, id) && em_gmatch_accept_token(rg.m, rg.v, (uint32_t)id))) {
                status = em_cli_fail(1, "run: the grammar refused the token its mask allowed (%d)", id);
                goto done;
            }
        } else {
            id = em_sampler_sample(smp, logits);
        }
        if (push_id(&gen, id) || push_id(&seq, id) || em_sampler_accept(smp, id, 1)) {
            status = em_cli_fail(1, "run: out of memory");
            goto done;
        }
        int eog = em_tokenizer_is_eog(tok, id);
        int k;
        if (special && em_tokenizer_is_special(tok, id)) {
            if ((k = em_detok_flush(tok, &dt, piece, cap)) > 0)
                fwrite(piece, 1, (size_t)k, stdout);
            k = em_tokenizer_piece(tok, id, 1, piece, cap);
            if (k > (int)cap) {   /* a control token's text can be longer than any piece */
                char *np = realloc(piece, (size_t)k);
                if (!np) {
                    status = em_cli_fail(1, "run: out of memory");
                    goto done;
                }
                piece = np;
                cap = (size_t)k;
                k = em_tokenizer_piece(tok, id, 1, piece, cap);
            }
        } else {
            k = eog ? 0 : em_detok_push(tok, &dt, id, piece, cap);
        }
        if (k > 0) {
            fwrite(piece, 1, (size_t)k, stdout);
            fflush(stdout);
        }
        if (eog) {
            stop = "end of text";
            break;
        }
        if (rg.m && em_gmatch_done(rg.m)) {
            stop = "grammar complete";
            break;
        }
        if (i + 1 == n_gen)
            break;
        if (at_pend < n_pend)
            continue;   /* chosen already, and in the target's cache */
        if (pos >= n_ctx) {
            stop = "context full";
            break;
        }
        if (spec.max) {   /* feed id with drafts after it */
            uint32_t left = (uint32_t)(n_gen - i - 2), room = n_ctx - pos - 1;
            if ((status = spec_round(&spec, eng, smp, model_path, seq.v, (uint32_t)seq.n, left < room ? left : room,
                                     hp->n_vocab, em_tokenizer_n_vocab(tok), pend, &n_pend)))
                goto done;
            at_pend = 0;
            pos += n_pend;   /* id and the accepted drafts */
            continue;
        }
        if ((rc = em_engine_eval(eng, &id, 1, pos, logits, 0, &err))) {
            status = em_cli_fail_err(&err);
            goto done;
        }
        if ((status = vet_logits(model_path, logits, hp->n_vocab, em_tokenizer_n_vocab(tok), pos)))
            goto done;
        pos++;
    }
    int k = em_detok_flush(tok, &dt, piece, cap);
    if (k > 0)
        fwrite(piece, 1, (size_t)k, stdout);
    fputc('\n', stdout);
    fflush(stdout);
    double t2 = em_cli_now();
    em_cli_note("%s | %s | prompt %zu tokens %.1f tok/s | generated %zu tokens %.1f tok/s | stop: %s | seed %llu",
                hp->name, em_engine_describe(eng), n_pids, (double)n_pids / (t1 - t0 + 1e-9), gen.n,
                gen.n > 1 ? (double)(gen.n - 1) / (t2 - t1 + 1e-9) : 0.0, stop, (unsigned long long)sp.seed);
    if (spec.max)
        em_cli_note("speculation (%s): %llu tokens drafted, %llu accepted (%.0f%%)",
                    draft_path ? "draft model" : "prompt lookup", (unsigned long long)spec.drafted,
                    (unsigned long long)spec.accepted, spec.drafted ? 100.0 * spec.accepted / spec.drafted : 0.0);
    if ((rc = em_engine_check(eng, &err))) {
        status = em_cli_fail_err(&err);
        goto done;
    }
    if (ids_out)
        status = write_ids(ids_out, pids, n_pids, &gen);
done:
    grammar_close(&rg);
    free(seq.v);
    free(spec.q);
    free(spec.rows);
    em_sampler_destroy(spec.dsmp);
    em_engine_destroy(spec.deng);
    em_tokenizer_destroy(dtok);
    em_model_close(dm);
    free(gen.v);
    free(piece);
    free(logits);
    free(pids);
    em_sampler_destroy(smp);
    em_engine_destroy(eng);
    em_tokenizer_destroy(tok);
    em_model_close(m);
    return status;
}
