/* cmd_models.c — `ember models`: the model library (firmware/library.h), a
 * folder of GGUF files each of which is a model named by its file. `list`
 * shows every model with its architecture, size, weight type, context and
 * what it can do (web/caps.h: chat, tools, reasoning, embeddings,
 * rerank); `info` one in full; `add` checks a file whole (it opens, its
 * tokenizer builds, its template's formats read) before it copies or links
 * it in, then prints `ember vram`'s fit for this box; `rm` takes one out.
 * The folder: --dir, else [models] dir of a --config file, else ./models. */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/model/gguf.h"
#include "core/model/model.h"
#include "core/text/tokenizer.h"
#include "firmware/cli.h"
#include "firmware/commands.h"
#include "firmware/config.h"
#include "firmware/library.h"
#include "web/caps.h"
#include "web/reasoning.h"
#include "web/tools.h"

static const char usage[] =
    "usage: ember models [--dir D | --config F] list [--json]\n"
    "       ember models [--dir D | --config F] info NAME|FILE [--json]\n"
    "       ember models [--dir D | --config F] add FILE [--name N] [--link]\n"
    "       ember models [--dir D | --config F] rm NAME\n"
    "  The model library: every NAME.gguf in a folder is the model NAME (ember serve\n"
    "  --model NAME serves it). The folder: --dir, else [models] dir of the --config\n"
    "  file, else ./models.\n"
    "  list   every model: architecture, parameters, weight type, file size, context,\n"
    "         and what it can do (chat, tools, reasoning, embeddings, rerank)\n"
    "  info   one model in full (a library name or a file's path)\n"
    "  add    check FILE whole (it opens, its tokenizer builds, its template reads),\n"
    "         then copy it in as NAME (default: its file name), or with --link make a\n"
    "         symbolic link to it; then print `ember vram`'s fit on this box\n"
    "  rm     take NAME out of the library (the file, or the link)\n";

/* One model of the library, open with what it can do. */
typedef struct {
    em_model     *m;
    em_tokenizer *tok;
    web_caps      caps;
    uint64_t      file_bytes;
    uint32_t      main_type;     /* the weight type holding the most bytes */
} entry;

static void entry_close(entry *e)
{
    web_caps_free(&e->caps);
    em_tokenizer_destroy(e->tok);
    em_model_close(e->m);
    memset(e, 0, sizeof *e);
}

/* Open path whole: the model (its tensors' bounds), the tokenizer, the
 * template's formats. 0, or the error's code with err set. */
static int entry_open(const char *path, entry *e, em_err *err)
{
    memset(e, 0, sizeof *e);
    int rc = em_model_open(path, &e->m, err);
    if (!rc)
        rc = em_tokenizer_create(em_model_gguf(e->m), &e->tok, err);
    if (!rc && em_tokenizer_n_vocab(e->tok) > em_model_hparams(e->m)->n_vocab)
        rc = em_err_set(err, EM_EFORMAT, "%s: the tokenizer has %u tokens but the model only %u", path,
                        em_tokenizer_n_vocab(e->tok), em_model_hparams(e->m)->n_vocab);
    if (!rc)
        rc = web_caps_read(e->m, e->tok, &e->caps, err);
    if (rc) {
        entry_close(e);
        return rc;
    }
    struct stat st;
    e->file_bytes = stat(path, &st) == 0 ? (uint64_t)st.st_size : 0;
    uint64_t by[EM_T_COUNT] = { 0 };
    const em_gguf *g = em_model_gguf(e->m);
    for (size_t i = 0; i < em_gguf_n_tensors(g); i++) {
        const em_gguf_tensor *t = em_gguf_tensor_at(g, i);
        if (t->type < EM_T_COUNT && t->n_dims >= 2)   /* (matrices: vectors are F32 in every file) */
            by[t->type] += t->nbytes;
    }
    for (uint32_t t = 0; t < EM_T_COUNT; t++)
        if (by[t] > by[e->main_type])
            e->main_type = t;
    return 0;
}

/* A parameter count: "135M", "7.2B". */
static void count(char *out, size_t cap, double v)
{
    static const char *const unit[] = { "", "K", "M", "B", "T" };
    int u = 0;
    while (v >= 1000 && u < 4) {
        v /= 1000;
        u++;
    }
    snprintf(out, cap, v < 10 && u ? "%.1f%s" : "%.0f%s", v, unit[u]);
}

static json_t *entry_json(const char *name, const char *path, const entry *e)
{
    const em_hparams *hp = em_model_hparams(e->m);
    char can[160];
    web_caps_describe(&e->caps, can, sizeof can);
    json_t *o = json_pack("{s:s, s:s, s:s, s:s, s:I, s:I, s:s, s:I, s:b, s:s}", "name", name, "path", path,
                          "architecture", hp->arch_name, "model_name", hp->name, "parameters",
                          (json_int_t)em_model_n_params(e->m), "file_bytes", (json_int_t)e->file_bytes,
                          "weight_type", em_ttype_name(e->main_type), "context",
                          (json_int_t)(hp->encoder ? hp->n_pos : hp->n_ctx_train), "generates_text",
                          e->caps.generates, "can", can);
    if (!o)
        return NULL;
    static const char *const names[] = { "chat", "tools", "reasoning", "embeddings", "rerank" };
    unsigned can_bits = web_caps_can(&e->caps);
    json_t *caps = json_array();
    for (unsigned i = 0; caps && i < sizeof names / sizeof names[0]; i++)
        if (can_bits & (1u << i))
            json_array_append_new(caps, json_string(names[i]));
    if (caps)
        json_object_set_new(o, "capabilities", caps);
    return o;
}

static int cmd_list(const char *dir, int json)
{
    char **names;
    size_t n;
    em_err err = { 0 };
    if (em_library_names(dir, &names, &n, &err))
        return em_cli_fail_err(&err);
    json_t *arr = json ? json_array() : NULL;
    if (!json)
        printf("%-28s %-10s %7s %-7s %10s %7s  %s\n", "NAME", "ARCH", "PARAMS", "TYPE", "SIZE", "CONTEXT", "CAN");
    int status = 0;
    for (size_t i = 0; i < n; i++) {
        char path[PATH_MAX];
        snprintf(path, sizeof path, "%s/%s.gguf", dir, names[i]);
        entry e;
        em_err ee = { 0 };
        if (entry_open(path, &e, &ee)) {   /* a broken file is listed with why, the others still */
            if (json)
                json_array_append_new(arr, json_pack("{s:s, s:s, s:s}", "name", names[i], "path", path, "error",
                                                     ee.msg));
            else
                printf("%-28s error: %s\n", names[i], ee.msg);
            status = 1;
            continue;
        }
        if (json) {
            json_array_append_new(arr, entry_json(names[i], path, &e));
        } else {
            const em_hparams *hp = em_model_hparams(e.m);
            char p[16], b[24], can[160];
            count(p, sizeof p, (double)em_model_n_params(e.m));
            em_cli_bytes(b, sizeof b, e.file_bytes);
            web_caps_describe(&e.caps, can, sizeof can);
            printf("%-28s %-10s %7s %-7s %10s %7u  %s\n", names[i], hp->arch_name, p, em_ttype_name(e.main_type), b,
                   hp->encoder ? hp->n_pos : hp->n_ctx_train, can);
        }
        entry_close(&e);
    }
    if (json) {
        json_t *o = json_pack("{s:s, s:o}", "dir", dir, "models", arr);   /* (takes arr) */
        char *s = o ? json_dumps(o, JSON_INDENT(2)) : NULL;
        printf("%s\n", s ? s : "{}");
        free(s);
        json_decref(o);
    } else if (!n) {
        printf("(no models in %s: `ember models add FILE`)\n", dir);
    }
    em_library_names_free(names, n);
    return status;
}

static int cmd_info(const char *dir, const char *what, int json)
{
    char path[PATH_MAX];
    em_err err = { 0 };
    if (em_library_resolve(dir, what, path, sizeof path, &err))
        return em_cli_fail(2, "models: %s", err.msg);
    entry e;
    if (entry_open(path, &e, &err))
        return em_cli_fail(2, "models: %s", err.msg);
    const char *slash = strrchr(path, '/');
    char name[EM_LIBRARY_NAME_MAX + 1];
    snprintf(name, sizeof name, "%.*s", (int)strcspn(slash ? slash + 1 : path, "."), slash ? slash + 1 : path);
    if (em_library_name_ok(what))
        snprintf(name, sizeof name, "%s", what);
    const em_hparams *hp = em_model_hparams(e.m);
    if (json) {
        json_t *o = entry_json(name, path, &e);
        json_object_set_new(o, "layers", json_integer(hp->n_layer));
        json_object_set_new(o, "embedding_length", json_integer(hp->n_embd));
        json_object_set_new(o, "vocabulary", json_integer(hp->n_vocab));
        json_object_set_new(o, "chat_template", json_boolean(e.caps.tmpl != NULL));
        char *s = json_dumps(o, JSON_INDENT(2));
        printf("%s\n", s ? s : "{}");
        free(s);
        json_decref(o);
        entry_close(&e);
        return 0;
    }
    char real[PATH_MAX], p[16], b[24], can[160];
    count(p, sizeof p, (double)em_model_n_params(e.m));
    em_cli_bytes(b, sizeof b, e.file_bytes);
    web_caps_describe(&e.caps, can, sizeof can);
    printf("name          %s\n", name);
    int linked = realpath(path, real) && strcmp(real, path) != 0;
    printf("file          %s%s%s\n", path, linked ? " -> " : "", linked ? real : "");
    printf("model         %s (%s), %s parameters, %s (%s matrices mostly)\n", hp->name, hp->arch_name, p, b,
           em_ttype_name(e.main_type));
    printf("shape         %u layers, width %u, %u heads / %u KV heads of %u, vocabulary %u\n", hp->n_layer,
           hp->n_embd, hp->n_head, hp->n_head_kv, hp->head_dim, hp->n_vocab);
    if (hp->encoder)
        printf("context       %u positions (an encoder: each input whole in one step)\n", hp->n_pos);
    else
        printf("context       %u tokens (trained)%s\n", hp->n_ctx_train, hp->n_swa ? ", sliding-window layers" : "");
    printf("can           %s\n", can);
    if (e.caps.generates) {
        printf("template      %s\n", e.caps.tmpl ? "the file's chat template" : "none (ChatML)");
        if (e.caps.toolfmt->ok)
            printf("tool calls    written as %s...%s\n", e.caps.toolfmt->trigger,
                   e.caps.toolfmt->id_len ? " (with the call's id)" : "");
        else
            printf("tool calls    none (%s)\n", e.caps.toolfmt->why);
        printf("reasoning     %s\n", e.caps.harmony ? "harmony channels (analysis apart from the answer)"
                                     : e.caps.thinkfmt->from_template ? e.caps.thinkfmt->open
                                                                      : "none in the template");
    }
    entry_close(&e);
    return 0;
}

/* Copy src to dst through a temporary file beside dst, renamed at the end
 * (a stop midway leaves no half model in the library). */
static int copy_file(const char *src, const char *dst, em_err *err)
{
    char tmp[PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s.partial", dst);
    int in = open(src, O_RDONLY), out = in < 0 ? -1 : open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int rc = in < 0 || out < 0 ? em_err_set(err, EM_EIO, "cannot copy %s to %s: %s", src, tmp, strerror(errno)) : 0;
    static char buf[1 << 20];
    while (!rc) {
        ssize_t r = read(in, buf, sizeof buf);
        if (r == 0)
            break;
        if (r < 0) {
            rc = em_err_set(err, EM_EIO, "cannot read %s: %s", src, strerror(errno));
            break;
        }
        for (ssize_t off = 0; off < r && !rc;) {
            ssize_t w = write(out, buf + off, (size_t)(r - off));
            if (w <= 0)
                rc = em_err_set(err, EM_EIO, "cannot write %s: %s", tmp, strerror(errno));
            else
                off += w;
        }
    }
    if (!rc && fsync(out) != 0)
        rc = em_err_set(err, EM_EIO, "cannot write %s: %s", tmp, strerror(errno));
    if (in >= 0)
        close(in);
    if (out >= 0 && close(out) != 0 && !rc)
        rc = em_err_set(err, EM_EIO, "cannot write %s: %s", tmp, strerror(errno));
    if (!rc && rename(tmp, dst) != 0)
        rc = em_err_set(err, EM_EIO, "cannot rename %s to %s: %s", tmp, dst, strerror(errno));
    if (rc)
        unlink(tmp);
    return rc;
}

static int cmd_add(const char *dir, const char *file, const char *name_opt, int link_it)
{
    char name[EM_LIBRARY_NAME_MAX + 8];
    const char *base = strrchr(file, '/');
    base = base ? base + 1 : file;
    size_t bl = strlen(base);
    if (name_opt)
        snprintf(name, sizeof name, "%s", name_opt);
    else
        snprintf(name, sizeof name, "%.*s", (int)(bl > 5 && !strcmp(base + bl - 5, ".gguf") ? bl - 5 : bl), base);
    if (!em_library_name_ok(name))
        return em_cli_fail(2, "models: '%s' cannot name a model: use letters, digits, '.', '_' and '-' (--name N)",
                           name);
    em_err err = { 0 };
    entry e;
    if (entry_open(file, &e, &err))   /* whole, before anything is copied */
        return em_cli_fail(2, "models: %s is refused: %s", file, err.msg);
    char can[160];
    web_caps_describe(&e.caps, can, sizeof can);
    entry_close(&e);
    char dst[PATH_MAX], real[PATH_MAX];
    struct stat st;
    snprintf(dst, sizeof dst, "%s/%s.gguf", dir, name);
    if (lstat(dst, &st) == 0)
        return em_cli_fail(2, "models: the library already has a model '%s' (%s): `ember models rm %s` first, or "
                           "--name", name, dst, name);
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return em_cli_fail(1, "models: cannot make the folder %s: %s", dir, strerror(errno));
    if (link_it) {
        if (!realpath(file, real) || symlink(real, dst) != 0)
            return em_cli_fail(1, "models: cannot link %s to %s: %s", dst, file, strerror(errno));
    } else if (copy_file(file, dst, &err)) {
        return em_cli_fail(1, "models: %s", err.msg);
    }
    printf("added %s: %s (%s); can: %s\n", name, dst, link_it ? "a link" : "a copy", can);
    fflush(stdout);
    char *vargv[] = { "vram", "--model", dst, NULL };
    int vs = em_cmd_vram(3, vargv);   /* the fit on this box (its own error line when no device) */
    return vs == 0 || vs == 1 ? 0 : vs;
}

static int cmd_rm(const char *dir, const char *name)
{
    if (!em_library_name_ok(name))
        return em_cli_fail(2, "models: '%s' is not a model's name", name);
    char dst[PATH_MAX];
    snprintf(dst, sizeof dst, "%s/%s.gguf", dir, name);
    em_err err = { 0 };
    if (unlink(dst) != 0) {
        char out[8];
        em_library_resolve(dir, name, out, sizeof out, &err);   /* (its message lists what there is) */
        return em_cli_fail(2, "models: %s", errno == ENOENT ? err.msg : strerror(errno));
    }
    printf("removed %s (%s)\n", name, dst);
    return 0;
}

int em_cmd_models(int argc, char **argv)
{
    const char *dir_opt = NULL, *config = NULL, *name = NULL;
    int json = 0, link_it = 0;
    em_cli_opt opts[] = {
        { "--dir", NULL, EM_OPT_STR, &dir_opt, 0, 0 },
        { "--config", NULL, EM_OPT_STR, &config, 0, 0 },
        { "--json", NULL, EM_OPT_FLAG, &json, 0, 0 },
        { "--name", NULL, EM_OPT_STR, &name, 0, 0 },
        { "--link", NULL, EM_OPT_FLAG, &link_it, 0, 0 },
        { NULL, NULL, 0, NULL, 0, 0 },
    };
    const char *pos[3];
    int n_pos = 0;
    int rc = em_cli_parse("models", argc, argv, opts, pos, 3, &n_pos, usage);
    if (rc)
        return rc < 0 ? 0 : rc;
    if (dir_opt && config)
        return em_cli_fail(2, "models: give --dir or --config, not both");
    const char *sub = n_pos ? pos[0] : "list";
    int want = !strcmp(sub, "list") ? 1 : !strcmp(sub, "info") || !strcmp(sub, "add") || !strcmp(sub, "rm") ? 2 : 0;
    if (!want)
        return em_cli_fail(2, "models: '%s' is not a models command (list, info, add, rm)", sub);
    if (n_pos != (n_pos ? want : 0))
        return em_cli_fail(2, "models %s: %s", sub, want == 1 ? "takes no argument" : "needs one argument");
    if ((name || link_it) && strcmp(sub, "add"))
        return em_cli_fail(2, "models: --name and --link go with add");
    if (json && strcmp(sub, "list") && strcmp(sub, "info"))
        return em_cli_fail(2, "models: --json goes with list and info");
    em_config *cfg = NULL;
    char dir[PATH_MAX];
    if (config) {   /* the file's [models] dir (read as ember serve reads it) */
        char *cargv[] = { "serve", "--config", (char *)config, NULL };
        int print = 0;
        if ((rc = em_config_load(3, cargv, NULL, &cfg, &print)))
            return rc < 0 ? 2 : rc;
    }
    snprintf(dir, sizeof dir, "%s", dir_opt ? dir_opt : cfg ? em_config_str(cfg, EM_CFG_MODELS_DIR) : "models");
    em_config_free(cfg);
    if (!strcmp(sub, "list"))
        return cmd_list(dir, json);
    if (!strcmp(sub, "info"))
        return cmd_info(dir, pos[1], json);
    if (!strcmp(sub, "add"))
        return cmd_add(dir, pos[1], name, link_it);
    return cmd_rm(dir, pos[1]);
}
