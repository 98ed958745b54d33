/* caps.h — what a model can do, read off its file once (web/caps.c): its
 * chat template (copied, so that nothing later reads the file's mapping),
 * how the template writes a tool call and the tags the model reasons
 * between (read by rendering the template with probe conversations),
 * whether it generates text at all, and what vectors it gives. The server
 * reads them at start; `ember models` prints them. */
#ifndef EM_WEB_CAPS_H
#define EM_WEB_CAPS_H

#include <stddef.h>

#include "core/err.h"
#include "core/model/model.h"
#include "core/text/tokenizer.h"

struct web_toolfmt;
struct web_thinkfmt;

typedef struct web_caps {
    int                  generates;  /* a decoder: text (an encoder gives vectors only) */
    char                *tmpl;       /* the GGUF's chat template, NUL-terminated (NULL: none; ChatML then) */
    size_t               tmpl_len;
    struct web_toolfmt  *toolfmt;    /* a decoder's: how its template writes a tool call (->ok 0: none) */
    struct web_thinkfmt *thinkfmt;   /* a decoder's: the tags it reasons between */
    int                  harmony;    /* gpt-oss's channels (reasoning apart from the answer) */
    em_pooling           pooling;    /* the model's own pooling (EM_POOL_NONE: unsaid; a decoder then
                                      * gives the mean of its hidden states, which it was not trained for) */
    int                  classifier; /* a cross-encoder's head: rerank scores of its own */
} web_caps;

/* c filled from m and tok (both borrowed; tok gets the tool format's
 * control-token markers shown as text, em_tokenizer_show, as serving needs).
 * 0, or EM_ENOMEM with err set (c then holds nothing). web_caps_free
 * releases what c owns; it accepts a zeroed c. */
int  web_caps_read(const em_model *m, em_tokenizer *tok, web_caps *c, em_err *err);
void web_caps_free(web_caps *c);

/* What c can do: WEB_CAN_* bits (embeddings always: a decoder gives the
 * mean of its hidden states). */
enum { WEB_CAN_CHAT = 1, WEB_CAN_TOOLS = 2, WEB_CAN_REASONING = 4, WEB_CAN_EMBEDDINGS = 8, WEB_CAN_RERANK = 16 };
unsigned web_caps_can(const web_caps *c);

/* Short words for what c can do into out[cap]: "chat, tools, reasoning",
 * "embeddings (mean), rerank (cosine)" (a decoder's embeddings: "(mean of
 * hidden states)"). */
void web_caps_describe(const web_caps *c, char *out, size_t cap);

#endif
