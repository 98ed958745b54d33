/* chat_tmpl.c — the chat-template module's public face: parse a template
 * (normalise, lex, parse), render it with JSON variables, destroy it; the
 * ChatML fallback; reading tokenizer.chat_template from a GGUF; and
 * em_chat_render, which renders a chat prompt the way transformers'
 * apply_chat_template does. Also what a parsed template owns: its arena,
 * its atom table (interned names) and error locations. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/grow.h"
#include "core/text/tokenizer.h"
#include "core/tmpl/chat_tmpl_int.h"

/* ------------------------------------------------------ arena, atoms */

void *tmpl_arena_alloc(em_tmpl *t, size_t bytes)
{
    bytes = (bytes + sizeof(max_align_t) - 1) / sizeof(max_align_t) * sizeof(max_align_t);
    tarena *a = t->arena;
    if (!a || a->cap - a->used < bytes) {
        size_t cap = bytes > 65536 ? bytes : 65536;
        tarena *na = malloc(sizeof *na + cap);
        if (!na)
            return NULL;
        na->next = a;
        na->used = 0;
        na->cap = cap;
        t->arena = a = na;
    }
    void *p = (char *)a->data + a->used;
    a->used += bytes;
    memset(p, 0, bytes);
    return p;
}

static uint64_t name_hash(const char *s, size_t len)
{
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < len; i++)
        h = (h ^ (unsigned char)s[i]) * 1099511628211ULL;
    return h;
}

/* The atom table is an array of names plus an open-addressing index kept
 * in t->atoms[cap_atoms..]: see tmpl_atom. */
typedef struct atom_index {
    uint32_t *slot;   /* atom id + 1, 0 = empty */
    size_t    cap;
} atom_index;

static atom_index *index_of(const em_tmpl *t)
{
    return (atom_index *)t->atoms_index;
}

static long atom_lookup(const em_tmpl *t, const char *s, size_t len, size_t *slot_out)
{
    atom_index *ix = index_of(t);
    if (!ix || !ix->cap)
        return -1;
    size_t m = ix->cap - 1, i = (size_t)name_hash(s, len) & m;
    for (;; i = (i + 1) & m) {
        uint32_t v = ix->slot[i];
        if (!v) {
            if (slot_out)
                *slot_out = i;
            return -1;
        }
        const char *a = t->atoms[v - 1];
        if (strlen(a) == len && memcmp(a, s, len) == 0)
            return (long)(v - 1);
    }
}

long tmpl_atom_find(const em_tmpl *t, const char *s, size_t len)
{
    return atom_lookup(t, s, len, NULL);
}

int tmpl_atom(em_tmpl *t, const char *s, size_t len, uint32_t *id)
{
    long found = atom_lookup(t, s, len, NULL);
    if (found >= 0) {
        *id = (uint32_t)found;
        return 0;
    }
    atom_index *ix = index_of(t);
    if (!ix) {
        ix = calloc(1, sizeof *ix);
        if (!ix)
            return EM_ENOMEM;
        t->atoms_index = ix;
    }
    if ((t->n_atoms + 1) * 2 > ix->cap) {   /* rehash at half full */
        size_t nc = ix->cap ? ix->cap * 2 : 64;
        uint32_t *ns = calloc(nc, sizeof *ns);
        if (!ns)
            return EM_ENOMEM;
        for (uint32_t a = 0; a < t->n_atoms; a++) {
            size_t i = (size_t)name_hash(t->atoms[a], strlen(t->atoms[a])) & (nc - 1);
            while (ns[i])
                i = (i + 1) & (nc - 1);
            ns[i] = a + 1;
        }
        free(ix->slot);
        ix->slot = ns;
        ix->cap = nc;
    }
    if (em_grow((void **)&t->atoms, &t->cap_atoms, t->n_atoms, sizeof *t->atoms, 64))
        return EM_ENOMEM;
    char *copy = tmpl_arena_alloc(t, len + 1);
    if (!copy)
        return EM_ENOMEM;
    memcpy(copy, s, len);
    size_t slot = 0;
    atom_lookup(t, s, len, &slot);
    t->atoms[t->n_atoms] = copy;
    ix->slot[slot] = t->n_atoms + 1;
    *id = t->n_atoms++;
    return 0;
}

void tmpl_free_atoms(em_tmpl *t)
{
    atom_index *ix = index_of(t);
    if (ix)
        free(ix->slot);
    free(ix);
    t->atoms_index = NULL;
    free(t->atoms);
    t->atoms = NULL;
}

void tmpl_line_col(const char *src, size_t len, size_t off, unsigned *line, unsigned *col)
{
    unsigned l = 1, c = 1;
    if (off > len)
        off = len;
    for (size_t i = 0; i < off; i++) {
        if (src[i] == '\n') {
            l++;
            c = 1;
        } else if (((unsigned char)src[i] & 0xC0) != 0x80) {
            c++;
        }
    }
    *line = l;
    *col = c;
}

int tmpl_fail_va(const em_tmpl *t, em_err *err, int code, size_t off, const char *fmt, va_list ap)
{
    if (!err)
        return code;
    char msg[400];
    vsnprintf(msg, sizeof msg, fmt, ap);
    unsigned line, col;
    tmpl_line_col(t->src, t->src_len, off, &line, &col);
    return em_err_set(err, code, "template: line %u, col %u: %s", line, col, msg);
}

int tmpl_fail_at(const em_tmpl *t, em_err *err, int code, size_t off, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = tmpl_fail_va(t, err, code, off, fmt, ap);
    va_end(ap);
    return rc;
}


static const char chatml[] =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
    "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
    "{% endif %}";

const char *em_chat_fallback_template(void)
{
    return chatml;
}

void em_tmpl_destroy(em_tmpl *t)
{
    if (!t)
        return;
    for (size_t i = 0; i < t->n_consts; i++)
        free(t->consts[i]);
    free(t->consts);
    tmpl_free_atoms(t);
    while (t->arena) {
        tarena *next = t->arena->next;
        free(t->arena);
        t->arena = next;
    }
    free(t->src);
    free(t);
}

int em_tmpl_parse(const char *src, size_t len, em_tmpl **out, em_err *err)
{
    int rc;
    ttok *toks = NULL;
    size_t n_toks = 0, bad = 0;
    *out = NULL;
    if (!src && len)
        return em_err_set(err, EM_EINVAL, "template: no source");
    if (len > EM_TMPL_MAX_SOURCE)
        return em_err_set(err, EM_ERANGE, "template: %zu bytes, more than the %zu MiB allowed "
                          "(EM_TMPL_MAX_SOURCE)", len, EM_TMPL_MAX_SOURCE >> 20);
    if (!tu_valid(src ? src : "", len, &bad)) {
        unsigned line = 1, col = 1;
        tmpl_line_col(src, len, bad, &line, &col);
        return em_err_set(err, EM_EFORMAT, "template: line %u, col %u: not valid UTF-8 (byte %zu)",
                          line, col, bad);
    }
    em_tmpl *t = calloc(1, sizeof *t);
    if (!t)
        return em_err_set(err, EM_ENOMEM, "template: out of memory");
    if ((rc = tmpl_normalize(src ? src : "", len, &t->src, &t->src_len, err)) ||
        (rc = tmpl_lex(t, &toks, &n_toks, err)) || (rc = tmpl_parse_tokens(t, toks, n_toks, err)))
        goto fail;
    free(toks);
    *out = t;
    return 0;
fail:
    free(toks);
    em_tmpl_destroy(t);
    return rc;
}

int em_tmpl_render(const em_tmpl *t, const json_t *vars, const em_tmpl_opts *opts, char **out,
                   size_t *out_len, em_err *err)
{
    *out = NULL;
    *out_len = 0;
    if (!t)
        return em_err_set(err, EM_EINVAL, "template: no template");
    return te_render(t, vars, opts, out, out_len, err);
}

int em_chat_gguf_template(const em_gguf *g, const char **src, size_t *len)
{
    *src = NULL;
    *len = 0;
    const em_gguf_value *v = g ? em_gguf_get(g, "tokenizer.chat_template") : NULL;
    if (!v || v->type != EM_GGUF_STRING)
        return 0;
    *src = v->v.str.ptr;
    *len = (size_t)v->v.str.len;
    return 0;
}

int em_chat_render(const char *src, size_t len, const json_t *messages, int add_generation_prompt,
                   const char *bos_token, const char *eos_token, const json_t *tools,
                   const em_tmpl_opts *opts, char **out, size_t *out_len, em_err *err)
{
    em_tmpl *t = NULL;
    json_t *vars = NULL;
    int rc;
    *out = NULL;
    *out_len = 0;
    if (!src) {
        src = chatml;
        len = strlen(chatml);
    }
    if (!messages || !json_is_array(messages))
        return em_err_set(err, EM_EINVAL, "template: the messages must be a JSON array");
    if ((bos_token && !tu_valid(bos_token, strlen(bos_token), NULL)) ||
        (eos_token && !tu_valid(eos_token, strlen(eos_token), NULL)))
        return em_err_set(err, EM_EINVAL, "template: the BOS or EOS token text is not valid UTF-8");
    if ((rc = em_tmpl_parse(src, len, &t, err)))
        return rc;
    vars = json_object();
    if (!vars || json_object_set(vars, "messages", (json_t *)messages) ||
        json_object_set(vars, "tools", tools ? (json_t *)tools : json_null()) ||
        json_object_set_new(vars, "documents", json_null()) ||
        json_object_set_new(vars, "add_generation_prompt", json_boolean(add_generation_prompt)) ||
        json_object_set_new(vars, "bos_token", json_string(bos_token ? bos_token : "")) ||
        json_object_set_new(vars, "eos_token", json_string(eos_token ? eos_token : ""))) {
        rc = em_err_set(err, EM_ENOMEM, "template: out of memory");
        goto done;
    }
    const char *k;
    json_t *v;
    json_object_foreach(opts && json_is_object(opts->extra_vars) ? (json_t *)opts->extra_vars : NULL, k, v)
        if (!json_object_get(vars, k) && json_object_set(vars, k, v)) {
            rc = em_err_set(err, EM_ENOMEM, "template: out of memory");
            goto done;
        }
    rc = em_tmpl_render(t, vars, opts, out, out_len, err);
done:
    json_decref(vars);
    em_tmpl_destroy(t);
    return rc;
}

int em_chat_tokenize(const em_tokenizer *tok, const char *prompt, size_t len, int32_t **ids, size_t *n,
                     em_err *err)
{
    *ids = NULL;
    *n = 0;
    int32_t bos = em_tokenizer_bos(tok);
    const char *bos_text = bos >= 0 ? em_tokenizer_token_text(tok, bos) : NULL;
    size_t bl = bos_text ? strlen(bos_text) : 0;
    int add_bos = em_tokenizer_add_bos(tok) && bos >= 0 && !(bl && len >= bl && memcmp(prompt, bos_text, bl) == 0);
    int rc = em_tokenizer_encode(tok, prompt, len, 0, 1, ids, n, err);
    if (rc || !add_bos)
        return rc;
    int32_t *w = realloc(*ids, (*n + 1) * sizeof **ids);
    if (!w) {
        free(*ids);
        *ids = NULL;
        *n = 0;
        return em_err_set(err, EM_ENOMEM, "chat: out of memory");
    }
    memmove(w + 1, w, *n * sizeof *w);
    w[0] = bos;
    *ids = w;
    (*n)++;
    return 0;
}
