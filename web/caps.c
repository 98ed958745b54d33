/* caps.c — a model's capabilities read once from its file (caps.h): the
 * template copied, the tool-call format and reasoning tags read off it
 * with the end-of-turn texts the tokenizer names, the pooling and any
 * classification head. */
#include "web/caps.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/tmpl/chat_tmpl.h"
#include "web/reasoning.h"
#include "web/tools.h"

int web_caps_read(const em_model *m, em_tokenizer *tok, web_caps *c, em_err *err)
{
    const em_hparams *hp = em_model_hparams(m);
    memset(c, 0, sizeof *c);
    c->pooling = hp->pooling;
    c->classifier = em_model_encoder(m)->cls_out != NULL || hp->pooling == EM_POOL_RANK;
    c->harmony = em_tokenizer_harmony(tok);
    const char *src = NULL;
    size_t len = 0;
    em_chat_gguf_template(em_model_gguf(m), &src, &len);
    if (src) {
        if (!(c->tmpl = malloc(len + 1)))
            goto oom;
        memcpy(c->tmpl, src, len);
        c->tmpl[len] = 0;
        c->tmpl_len = len;
    }
    c->generates = !hp->encoder;
    if (!c->generates)
        return 0;   /* (no template, tools nor reasoning to read) */
    if (!(c->toolfmt = calloc(1, sizeof *c->toolfmt)) || !(c->thinkfmt = calloc(1, sizeof *c->thinkfmt)))
        goto oom;
    int32_t bos = em_tokenizer_bos(tok), eos = em_tokenizer_eos(tok), eot = em_tokenizer_eot(tok);
    const char *bt = bos >= 0 ? em_tokenizer_token_text(tok, bos) : "";
    /* what ends a turn: EOS, EOT, then the other end-of-generation tokens (harmony's <|call|>) */
    const char *stops[8] = { eos >= 0 ? em_tokenizer_token_text(tok, eos) : NULL,
                             eot >= 0 ? em_tokenizer_token_text(tok, eot) : NULL };
    size_t n_stops = 2;
    for (int32_t id = 0; id < (int32_t)em_tokenizer_n_vocab(tok) && n_stops < 8; id++)
        if (em_tokenizer_is_eog(tok, id) && id != eos && id != eot)
            stops[n_stops++] = em_tokenizer_token_text(tok, id);
    web_toolfmt_detect(c->tmpl, c->tmpl_len, bt, stops[0] ? stops[0] : "", stops, n_stops, c->toolfmt);
    if (c->toolfmt->ok) {
        /* markers the format writes that are control tokens ([TOOL_CALLS]):
         * decoded as their text, so that the grammar may allow them and the
         * answer's parser sees them */
        const web_toolfmt *f = c->toolfmt;
        const char *pieces[4] = { f->open, f->mid, f->sep ? f->sep : "", f->close };
        for (int i = 0; i < 4; i++)
            em_tokenizer_show(tok, pieces[i]);
    }
    web_thinkfmt_detect(c->tmpl, c->tmpl_len, bt, stops[0] ? stops[0] : "", c->thinkfmt);
    return 0;
oom:
    web_caps_free(c);
    return em_err_set(err, EM_ENOMEM, "out of memory");
}

void web_caps_free(web_caps *c)
{
    free(c->tmpl);
    if (c->toolfmt)
        web_toolfmt_free(c->toolfmt);
    free(c->toolfmt);
    free(c->thinkfmt);
    memset(c, 0, sizeof *c);
}

unsigned web_caps_can(const web_caps *c)
{
    unsigned can = WEB_CAN_EMBEDDINGS;
    if (c->generates)
        can |= WEB_CAN_CHAT;
    if (c->toolfmt && c->toolfmt->ok)
        can |= WEB_CAN_TOOLS;
    if (c->harmony || (c->thinkfmt && c->thinkfmt->from_template))
        can |= WEB_CAN_REASONING;
    if (!c->generates || c->classifier)
        can |= WEB_CAN_RERANK;
    return can;
}

void web_caps_describe(const web_caps *c, char *out, size_t cap)
{
    static const char *const pool[] = { "mean of hidden states", "mean", "first token", "last token", "rank" };
    unsigned can = web_caps_can(c);
    size_t n = 0;
    out[0] = 0;
#define ADD(...) (n += n < cap ? (size_t)snprintf(out + n, cap - n, __VA_ARGS__) : 0)
    if (can & WEB_CAN_CHAT)
        ADD("chat%s, ", c->tmpl ? "" : " (no template: ChatML)");
    if (can & WEB_CAN_TOOLS)
        ADD("tools, ");
    if (can & WEB_CAN_REASONING)
        ADD("reasoning, ");
    ADD("embeddings (%s)", c->pooling == EM_POOL_RANK ? "first token" : pool[c->pooling]);
    if (can & WEB_CAN_RERANK)
        ADD(", rerank (%s)", c->classifier ? "classifier" : "cosine");
#undef ADD
}
