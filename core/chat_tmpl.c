/* chat_tmpl.c — the chat-template module's public face: parse a template
 * (normalise, lex, parse), render it with JSON variables, destroy it; the
 * ChatML fallback; reading tokenizer.chat_template from a GGUF; and
 * em_chat_render, which renders a chat prompt the way transformers'
 * apply_chat_template does. */
#include <stdlib.h>
#include <string.h>

#include "core/chat_tmpl_int.h"

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
    rc = em_tmpl_render(t, vars, opts, out, out_len, err);
done:
    json_decref(vars);
    em_tmpl_destroy(t);
    return rc;
}
