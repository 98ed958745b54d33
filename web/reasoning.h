/* reasoning.h — reasoning kept apart from the answer (web/reasoning.c): the
 * tags a model thinks between (Qwen3's and DeepSeek-R1's <think>…</think>),
 * read off its chat template, and the split of an answer that begins with
 * such a block into its reasoning and its answer, piece by piece as it
 * streams. (gpt-oss's harmony channels are core/text/harmony.c's.) Private
 * to web/ and its unit test. */
#ifndef EM_WEB_REASONING_H
#define EM_WEB_REASONING_H

#include <stddef.h>

#include "web/web_int.h"

#define WEB_THINK_TAG_MAX 32

typedef struct web_thinkfmt {
    char open[WEB_THINK_TAG_MAX], close[WEB_THINK_TAG_MAX];   /* "<think>", "</think>" */
    int  from_template;   /* the template renders them (else the customary tags) */
} web_thinkfmt;

/* Render the template (src, len; NULL: the ChatML fallback) with an
 * assistant message carrying reasoning_content and read the tags around
 * it; a template that writes "<think>" (its generation prompt opens the
 * block) or strips "</think>" from history names them too.
 * Otherwise <think> and </think>, the convention: an answer that begins
 * with <think> is reasoning until </think> whatever the template. */
void web_thinkfmt_detect(const char *src, size_t len, const char *bos, const char *eos, web_thinkfmt *f);

/* The split of one answer. */
typedef struct {
    const web_thinkfmt *f;
    int    state;
    int    emitted;   /* reasoning text went out */
    em_buf hold;
} web_think;

/* f borrowed (outlives t). inside: the prompt ends with the open tag, so
 * the answer begins inside the block (DeepSeek-R1's template opens it). */
void web_think_init(web_think *t, const web_thinkfmt *f, int inside);
/* Feed n bytes: the reasoning's onto reasoning, the answer's onto answer
 * (either may get nothing). Returns 1 when these bytes were (in part) the
 * reasoning's or its tags: a token that counts as reasoning. */
int  web_think_feed(web_think *t, const char *s, size_t n, em_buf *reasoning, em_buf *answer);
/* Whether t is inside the think block now. */
int  web_think_inside(const web_think *t);
/* The answer ended: what is held back goes out (an unclosed block is all
 * reasoning). */
void web_think_finish(web_think *t, em_buf *reasoning, em_buf *answer);
void web_think_free(web_think *t);

/* Whether the rendered prompt (len bytes) ends with f's open tag (white
 * space after it aside). */
int  web_think_prompt_opens(const web_thinkfmt *f, const char *prompt, size_t len);

#endif
