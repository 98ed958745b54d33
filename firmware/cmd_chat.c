/* cmd_chat.c — `ember chat`: a conversation in the terminal. Each user turn
 * is appended to the history, the whole conversation is rendered through the
 * model's chat template (core/tmpl/chat_tmpl.h; the ChatML fallback when the model
 * has none), tokenized, and only what the KV cache does not already hold is
 * fed: the longest common prefix with the tokens fed so far is reused. The
 * answer streams until an end-of-generation token (every token the GGUF
 * marks so: <|im_end|> for SmolLM2), -n tokens, the context's end or Ctrl-C
 * (which stops the answer, not the program). Commands: /reset, /system TEXT,
 * /save FILE, /help, /quit. On a terminal it prompts; with stdin a pipe it
 * reads one user turn per line and prints one answer per line. */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "core/gpu/engine.h"
#include "core/gpu/forward.h"
#include "core/grow.h"
#include "core/model/model.h"
#include "core/run/sample.h"
#include "core/text/tokenizer.h"
#include "core/tmpl/chat_tmpl.h"
#include "firmware/cli.h"

static const char usage[] =
    "usage: ember chat [--model PATH] [--system TEXT] [--load FILE] [-n N] [sampling flags]\n"
    "                  [--ctx N] [--backend vulkan|cpu] [--kv-type f16|q8_0]\n"
    "  A conversation with the model through its chat template. Type a message and press\n"
    "  Enter; the answer streams. Commands: /reset (forget the conversation, keep the\n"
    "  system prompt), /system TEXT (set it), /save FILE (the conversation as JSON\n"
    "  messages, for --load and `ember template --messages`), /help, /quit. Ctrl-C stops\n"
    "  an answer; Ctrl-D or /quit ends. With stdin not a terminal: one user turn per line,\n"
    "  one answer per line on stdout. -n caps each answer (default: until the model ends\n"
    "  its turn or the context is full). Sampling flags as for `ember run`; --temp 0 is\n"
    "  greedy; the penalties count each answer's own tokens. Statistics go to stderr.\n"
    EM_CLI_SAMPLING_USAGE;

#define MAX_LINE ((size_t)1 << 20)   /* one user turn */

static volatile sig_atomic_t interrupted;

static void on_sigint(int sig)
{
    (void)sig;
    interrupted = 1;
}

typedef struct {
    int32_t *v;
    size_t   n, cap;
} idvec;

static int push_id(idvec *iv, int32_t id)
{
    if (em_grow((void **)&iv->v, &iv->cap, iv->n, sizeof *iv->v, 1024))
        return EM_ENOMEM;
    iv->v[iv->n++] = id;
    return 0;
}

/* A growable text buffer (the answer being generated). */
typedef struct {
    char  *s;
    size_t n, cap;
} text;

static int text_add(text *t, const char *s, size_t n)
{
    if (em_grow((void **)&t->s, &t->cap, t->n + n, 1, 4096))
        return EM_ENOMEM;
    memcpy(t->s + t->n, s, n);
    t->n += n;
    t->s[t->n] = 0;
    return 0;
}

typedef struct {
    const char   *model_path;
    em_model     *m;
    em_tokenizer *tok;
    em_engine    *eng;
    em_sampler   *smp;
    const char   *tmpl;        /* the model's template (into the mapping), NULL: fallback */
    size_t        tmpl_len;
    const char   *bos_text, *eos_text;
    json_t       *messages;    /* the conversation */
    idvec         fed;         /* tokens in the KV cache, positions 0..n-1 */
    uint32_t      n_ctx, n_vocab, n_tok;
    long          n_gen;       /* -1: no cap */
    float        *logits;
    char         *piece;
    size_t        piece_cap;
    int           tty;
} chat;

static void message_add(json_t *msgs, const char *role, const char *content, size_t len)
{
    json_array_append_new(msgs, json_pack("{s:s, s:s%}", "role", role, "content", content, len));
}

/* The system message: replace the first one, or put one first. */
static void system_set(json_t *msgs, const char *content)
{
    json_t *first = json_array_get(msgs, 0);
    const char *role = json_string_value(json_object_get(first, "role"));
    json_t *m = json_pack("{s:s, s:s}", "role", "system", "content", content);
    if (role && strcmp(role, "system") == 0)
        json_array_set_new(msgs, 0, m);
    else
        json_array_insert_new(msgs, 0, m);
}

/* Keep only the system message, if any. */
static void history_reset(json_t *msgs)
{
    json_t *first = json_array_get(msgs, 0);
    const char *role = json_string_value(json_object_get(first, "role"));
    size_t keep = role && strcmp(role, "system") == 0 ? 1 : 0;
    while (json_array_size(msgs) > keep)
        json_array_remove(msgs, json_array_size(msgs) - 1);
}

/* A messages file: a JSON array of {role, content} objects, or an object
 * with such an array under "messages". */
static int load_messages(const char *path, json_t **out)
{
    em_err err = { 0 };
    char *data = NULL;
    size_t len = 0;
    *out = NULL;
    if (em_cli_read_file(path, &data, &len, &err))
        return em_cli_fail(2, "chat: --load: %s", err.msg);
    json_error_t je;
    json_t *doc = json_loadb(data, len, 0, &je);
    free(data);
    if (!doc)
        return em_cli_fail(2, "chat: --load: %s: line %d: %s", path, je.line, je.text);
    json_t *msgs = json_is_object(doc) ? json_object_get(doc, "messages") : doc;
    if (!json_is_array(msgs)) {
        json_decref(doc);
        return em_cli_fail(2, "chat: --load: %s: not a JSON array of messages (or an object with "
                           "\"messages\")", path);
    }
    size_t i;
    json_t *mv;
    json_array_foreach(msgs, i, mv) {
        if (!json_is_string(json_object_get(mv, "role")) || !json_is_string(json_object_get(mv, "content"))) {
            json_decref(doc);
            return em_cli_fail(2, "chat: --load: %s: message %zu needs a string \"role\" and \"content\"",
                               path, i);
        }
    }
    *out = json_incref(msgs);
    json_decref(doc);
    return 0;
}

static int save_messages(const json_t *msgs, const char *path)
{
    em_err err = { 0 };
    if (em_cli_check_out_path("/save", path, &err)) {
        em_cli_note("chat: %s", err.msg);
        return 1;
    }
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    if (json_dump_file(msgs, tmp, JSON_INDENT(2) | JSON_PRESERVE_ORDER) != 0 ||
        rename(tmp, path) != 0) {
        em_cli_note("chat: /save: cannot write %s: %s", path, strerror(errno));
        remove(tmp);
        return 1;
    }
    em_cli_note("chat: saved %zu messages to %s", json_array_size(msgs), path);
    return 0;
}

/* Write n bytes of answer text to stdout and to the answer buffer. */
static int emit(text *answer, const char *s, int n)
{
    if (n <= 0)
        return 0;
    fwrite(s, 1, (size_t)n, stdout);
    fflush(stdout);
    return text_add(answer, s, (size_t)n);
}

/* One turn: the conversation (ending with the user's message) rendered,
 * tokenized, fed from where the cache stops matching, and answered. The
 * answer is appended to the conversation. Returns 0, or 1 when the turn
 * failed (the error printed; the user's message is taken back). A device
 * failure is fatal: *fatal is set. */
static int turn(chat *c, int *fatal)
{
    em_err err = { 0 };
    char *prompt = NULL;
    size_t plen = 0;
    int32_t *ids = NULL;
    size_t n_ids = 0;
    text answer = { 0 };
    int rc, status = 1;
    *fatal = 0;
    double t0 = em_cli_now();   /* the turn's start: TTFT counts from here */

    if ((rc = em_chat_render(c->tmpl, c->tmpl_len, c->messages, 1, c->bos_text, c->eos_text, NULL,
                             NULL, &prompt, &plen, &err))) {
        em_cli_note("chat: %s", err.msg);
        goto done;
    }
    if ((rc = em_chat_tokenize(c->tok, prompt, plen, &ids, &n_ids, &err))) {
        em_cli_note("chat: %s", err.msg);
        goto done;
    }
    if (n_ids == 0 || n_ids + 1 >= c->n_ctx) {
        em_cli_note("chat: the conversation is %zu tokens, which does not fit the %u-token context "
                    "(with room to answer): /reset, or start with a larger --ctx", n_ids, c->n_ctx);
        goto done;
    }
    /* reuse the cache: the longest common prefix with what was fed, less
     * one token when it covers the whole prompt (its logits are needed) */
    size_t k = 0;
    while (k < n_ids && k < c->fed.n && ids[k] == c->fed.v[k])
        k++;
    if (k == n_ids)
        k--;
    c->fed.n = k;
    if ((rc = em_engine_eval(c->eng, ids + k, (uint32_t)(n_ids - k), (uint32_t)k, c->logits, 0, &err))) {
        em_cli_note("chat: %s", err.msg);
        *fatal = 1;
        goto done;
    }
    for (size_t i = k; i < n_ids; i++)
        if (push_id(&c->fed, ids[i]))
            goto oom;
    if (em_cli_finite_logits("chat", c->model_path, c->logits, 1, c->n_vocab, n_ids - 1)) {
        *fatal = 1;
        goto done;
    }
    for (uint32_t i = c->n_tok; i < c->n_vocab; i++)   /* ids without text are never chosen */
        c->logits[i] = -INFINITY;
    em_sampler_forget(c->smp);   /* the penalties count this answer, the prompt for repetition */
    for (size_t i = 0; i < n_ids; i++)
        if (em_sampler_accept(c->smp, ids[i], 0))
            goto oom;
    double t1 = 0;   /* when the first token was chosen */

    em_detok dt;
    em_detok_init(&dt, 0);
    const char *stop = "length";
    long n_out = 0;
    interrupted = 0;
    for (;;) {
        if (interrupted) {
            stop = "interrupted";
            break;
        }
        int32_t id = em_sampler_sample(c->smp, c->logits);
        if (em_sampler_accept(c->smp, id, 1))
            goto oom;
        if (n_out++ == 0)
            t1 = em_cli_now();
        if (em_tokenizer_is_eog(c->tok, id)) {
            stop = "end of turn";
            break;
        }
        int n = em_detok_push(c->tok, &dt, id, c->piece, c->piece_cap);
        if (n < 0 || emit(&answer, c->piece, n))
            goto oom;
        if (c->n_gen >= 0 && n_out >= c->n_gen)
            break;
        if (c->fed.n + 1 >= c->n_ctx) {
            stop = "context full";
            break;
        }
        if ((rc = em_engine_eval(c->eng, &id, 1, (uint32_t)c->fed.n, c->logits, 0, &err))) {
            em_cli_note("chat: %s", err.msg);
            *fatal = 1;
            goto done;
        }
        if (push_id(&c->fed, id))
            goto oom;
        if (em_cli_finite_logits("chat", c->model_path, c->logits, 1, c->n_vocab, c->fed.n - 1)) {
            *fatal = 1;
            goto done;
        }
        for (uint32_t i = c->n_tok; i < c->n_vocab; i++)
            c->logits[i] = -INFINITY;
    }
    int n = em_detok_flush(c->tok, &dt, c->piece, c->piece_cap);
    if (n < 0 || emit(&answer, c->piece, n))
        goto oom;
    fputc('\n', stdout);
    fflush(stdout);
    double t2 = em_cli_now();
    message_add(c->messages, "assistant", answer.s ? answer.s : "", answer.n);
    if (!t1)
        t1 = t2;
    em_cli_note("prompt %zu tokens, %zu cached (%.0f%%) | first token %.0f ms | answer %ld tokens, "
                "%.1f tok/s | stop: %s | context %zu/%u", n_ids, k, 100.0 * (double)k / (double)n_ids,
                1000 * (t1 - t0), n_out, n_out > 1 ? (double)(n_out - 1) / (t2 - t1 + 1e-9) : 0.0, stop,
                c->fed.n, c->n_ctx);
    status = 0;
    goto done;
oom:
    em_cli_note("chat: out of memory");
    *fatal = 1;
done:
    if (status)   /* take the user's message back: the history stays as it was */
        json_array_remove(c->messages, json_array_size(c->messages) - 1);
    free(answer.s);
    free(ids);
    free(prompt);
    return status;
}

/* Read one line (without its newline) into a malloc'd string; NULL at end of
 * input. An interrupted read (Ctrl-C at the prompt) gives "" . Lines longer
 * than MAX_LINE are cut there, with a note. */
static char *read_line(int *eof)
{
    char *line = NULL;
    size_t cap = 0;
    *eof = 0;
    errno = 0;
    ssize_t n = getline(&line, &cap, stdin);
    if (n < 0) {
        if (errno == EINTR) {
            clearerr(stdin);
            free(line);
            return strdup("");
        }
        free(line);
        *eof = 1;
        return NULL;
    }
    if (n > 0 && line[n - 1] == '\n')
        line[--n] = 0;
    if (n > 0 && line[n - 1] == '\r')
        line[--n] = 0;
    if ((size_t)n > MAX_LINE) {
        em_cli_note("chat: the line is %zd bytes; only the first %zu are used", n, MAX_LINE);
        line[MAX_LINE] = 0;
    }
    return line;
}

int em_cmd_chat(int argc, char **argv)
{
    const char *model_path = NULL, *system = NULL, *load = NULL, *backend_name = "vulkan", *kv_name = "f16";
    long n_gen = -1, ctx = 0;
    em_cli_sampling smp_o = EM_CLI_SAMPLING_INIT;
    em_cli_opt opts[] = {
        { "--model", "-m", EM_OPT_STR, &model_path, 0, 0 },
        { "--system", NULL, EM_OPT_STR, &system, 0, 0 },
        { "--load", NULL, EM_OPT_STR, &load, 0, 0 },
        { "--n-predict", "-n", EM_OPT_INT, &n_gen, 1, 1 << 20 },
        EM_CLI_SAMPLING_OPTS(smp_o),
        { "--ctx", NULL, EM_OPT_INT, &ctx, 0, 1 << 20 },
        { "--backend", NULL, EM_OPT_STR, &backend_name, 0, 0 },
        { "--kv-type", NULL, EM_OPT_STR, &kv_name, 0, 0 },
        { NULL, NULL, 0, NULL, 0, 0 },
    };
    int rc = em_cli_parse("chat", argc, argv, opts, NULL, 0, NULL, usage);
    if (rc)
        return rc;

    em_err err = { 0 };
    em_backend backend;
    em_engine_opts eo = { 0 };
    if (em_backend_parse(backend_name, &backend, &err) || em_fwd_kv_type_parse(kv_name, &eo.kv_type, &err))
        return em_cli_fail(2, "chat: %s", err.msg);
    chat c = { .n_gen = n_gen, .tty = isatty(0) && isatty(1) };
    if (load && (rc = load_messages(load, &c.messages)))
        return rc;
    if (!c.messages)
        c.messages = json_array();
    if (system)
        system_set(c.messages, system);

    char default_path[4096];
    if (!model_path) {
        if (em_cli_default_model(default_path, sizeof default_path, &err)) {
            json_decref(c.messages);
            return em_cli_fail(2, "chat: %s", err.msg);
        }
        model_path = default_path;
        em_cli_note("using model %s", model_path);
    }
    c.model_path = model_path;
    int status = 0;
    struct sigaction sa, old_int;
    int handler = 0;
    if ((status = em_cli_open_model("chat", model_path, &c.m, &c.tok)))
        goto done;
    const em_hparams *hp = em_model_hparams(c.m);
    c.n_vocab = hp->n_vocab;
    c.n_tok = em_tokenizer_n_vocab(c.tok);
    em_chat_gguf_template(em_model_gguf(c.m), &c.tmpl, &c.tmpl_len);
    if (!c.tmpl)
        em_cli_note("chat: %s has no chat template: using the ChatML fallback (docs/templates.md)",
                    model_path);
    int32_t bos = em_tokenizer_bos(c.tok), eos = em_tokenizer_eos(c.tok);
    c.bos_text = bos >= 0 ? em_tokenizer_token_text(c.tok, bos) : "";
    c.eos_text = eos >= 0 ? em_tokenizer_token_text(c.tok, eos) : "";
    c.n_ctx = ctx > 0 ? (uint32_t)ctx : (hp->n_ctx_train < 4096 ? hp->n_ctx_train : 4096);
    em_sample_params sp = em_cli_sample_params(&smp_o);
    uint64_t seed_v = sp.seed;
    if ((rc = em_sampler_create(&sp, c.n_vocab, &c.smp, &err)) ||
        (rc = em_engine_create(c.m, backend, c.n_ctx, &eo, &c.eng, &err))) {
        status = em_cli_fail_err(&err);
        goto done;
    }
    c.piece_cap = em_tokenizer_detok_cap(c.tok);
    c.logits = malloc((size_t)c.n_vocab * sizeof *c.logits);
    c.piece = malloc(c.piece_cap);
    if (!c.logits || !c.piece) {
        status = em_cli_fail(1, "chat: out of memory");
        goto done;
    }
    em_cli_warn_ctx("chat", c.n_ctx, hp->n_ctx_train);
    em_cli_note("chat: %s | %s | context %u | seed %llu%s", hp->name, em_engine_describe(c.eng), c.n_ctx,
                (unsigned long long)seed_v, c.tty ? " | /help for commands, Ctrl-D to quit" : "");

    /* Ctrl-C stops an answer; no SA_RESTART, so it also ends a read at the prompt */
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int);
    handler = 1;

    for (;;) {
        if (c.tty) {
            fputs("> ", stdout);
            fflush(stdout);
        }
        int eof;
        char *line = read_line(&eof);
        if (!line)
            break;
        if (line[0] == '/') {
            const char *arg = strchr(line, ' ');
            size_t cmd_len = arg ? (size_t)(arg - line) : strlen(line);
            arg = arg ? arg + 1 : "";
            if (cmd_len == 5 && strncmp(line, "/quit", 5) == 0) {
                free(line);
                break;
            } else if (cmd_len == 6 && strncmp(line, "/reset", 6) == 0) {
                history_reset(c.messages);
                em_cli_note("chat: conversation cleared");
            } else if (cmd_len == 7 && strncmp(line, "/system", 7) == 0) {
                if (*arg) {
                    system_set(c.messages, arg);
                    em_cli_note("chat: system prompt set");
                } else {
                    em_cli_note("chat: /system needs a text");
                }
            } else if (cmd_len == 5 && strncmp(line, "/save", 5) == 0) {
                if (*arg)
                    save_messages(c.messages, arg);
                else
                    em_cli_note("chat: /save needs a file name");
            } else if (cmd_len == 5 && strncmp(line, "/help", 5) == 0) {
                fputs("commands: /reset, /system TEXT, /save FILE, /help, /quit (Ctrl-C stops an "
                      "answer, Ctrl-D quits)\n", stderr);
            } else {
                em_cli_note("chat: unknown command %.*s (commands: /reset, /system TEXT, /save FILE, "
                            "/help, /quit)", (int)cmd_len, line);
            }
            free(line);
            continue;
        }
        if (!line[0] && c.tty) {   /* an empty line, or Ctrl-C at the prompt */
            if (interrupted)
                fputc('\n', stdout);
            interrupted = 0;
            free(line);
            continue;
        }
        message_add(c.messages, "user", line, strlen(line));
        free(line);
        int fatal = 0;
        if (turn(&c, &fatal)) {
            if (fatal) {
                status = 1;
                break;
            }
            if (!c.tty)   /* scripted: one output line per input line, even for a failed turn */
                fputc('\n', stdout);
        }
    }
    if (!status && (rc = em_engine_check(c.eng, &err)))
        status = em_cli_fail_err(&err);
done:
    if (handler)
        sigaction(SIGINT, &old_int, NULL);
    free(c.fed.v);
    free(c.piece);
    free(c.logits);
    json_decref(c.messages);
    em_sampler_destroy(c.smp);
    em_engine_destroy(c.eng);
    em_tokenizer_destroy(c.tok);
    em_model_close(c.m);
    return status;
}
