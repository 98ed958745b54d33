/* reasoning.c — reasoning apart from the answer (reasoning.h): the think
 * tags read off the chat template, and the streaming split of an answer
 * into the block it begins with and the rest. */
#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "core/tmpl/chat_tmpl.h"
#include "web/reasoning.h"

#define PROBE_THINK  "Ember probe reasoning."
#define PROBE_ANSWER "Ember probe answer."

/* The tags around the probe's reasoning in what the template rendered:
 * the last <...> before it, and the text between it and the answer. */
static int tags_around(const char *a, size_t n, web_thinkfmt *f)
{
    const char *r = memmem(a, n, PROBE_THINK, strlen(PROBE_THINK));
    const char *ans = r ? memmem(r, n - (size_t)(r - a), PROBE_ANSWER, strlen(PROBE_ANSWER)) : NULL;
    if (!r || !ans)
        return 0;
    const char *e = r;
    while (e > a && isspace((unsigned char)e[-1]))
        e--;
    const char *b = e;
    while (b > a && b[-1] != '<' && e - b < WEB_THINK_TAG_MAX)
        b--;
    if (b == a || b[-1] != '<' || e[-1] != '>')
        return 0;
    b--;
    const char *c = r + strlen(PROBE_THINK), *ce = ans;
    while (c < ce && isspace((unsigned char)*c))
        c++;
    while (ce > c && isspace((unsigned char)ce[-1]))
        ce--;
    if (ce == c || ce - c >= WEB_THINK_TAG_MAX || e - b >= WEB_THINK_TAG_MAX)
        return 0;
    snprintf(f->open, sizeof f->open, "%.*s", (int)(e - b), b);
    snprintf(f->close, sizeof f->close, "%.*s", (int)(ce - c), c);
    return 1;
}

void web_thinkfmt_detect(const char *src, size_t len, const char *bos, const char *eos, web_thinkfmt *f)
{
    memset(f, 0, sizeof *f);
    snprintf(f->open, sizeof f->open, "<think>");
    snprintf(f->close, sizeof f->close, "</think>");
    if (!src)
        return;
    json_t *msgs = json_pack("[{s:s, s:s}, {s:s, s:s, s:s}]", "role", "user", "content", "What is the probe?", "role",
                             "assistant", "content", PROBE_ANSWER, "reasoning_content", PROBE_THINK);
    char *out = NULL;
    size_t n = 0;
    em_err err = { 0 };
    web_thinkfmt got = { 0 };
    if (!em_chat_render(src, len, msgs, 0, bos, eos, NULL, NULL, &out, &n, &err) && tags_around(out, n, &got)) {
        *f = got;
        f->from_template = 1;
    } else if (memmem(src, len, "<think>", 7) || memmem(src, len, "</think>", 8)) {
        f->from_template = 1;   /* it opens the block, or strips past </think> from history: the customary tags */
    }
    free(out);
    json_decref(msgs);
}

enum { T_START, T_IN, T_AFTER, T_OUT };

void web_think_init(web_think *t, const web_thinkfmt *f, int inside)
{
    memset(t, 0, sizeof *t);
    t->f = f;
    t->state = inside ? T_IN : T_START;
}

void web_think_free(web_think *t)
{
    em_buf_free(&t->hold);
}

static void drop(em_buf *b, size_t n)
{
    memmove(b->s, b->s + n, b->n - n);
    b->n -= n;
    b->s[b->n] = 0;
}

int web_think_feed(web_think *t, const char *s, size_t n, em_buf *reasoning, em_buf *answer)
{
    int was = t->state;
    if (t->state == T_OUT) {
        em_buf_add(answer, s, n);
        return 0;
    }
    em_buf_add(&t->hold, s, n);
    em_buf *h = &t->hold;
    size_t on = strlen(t->f->open), cn = strlen(t->f->close);
    for (int moved = 1; moved && h->n;) {
        moved = 0;
        if (t->state == T_START) {   /* the answer begins with the block, or is all answer */
            size_t w = 0;
            while (w < h->n && isspace((unsigned char)h->s[w]))
                w++;
            size_t k = h->n - w < on ? h->n - w : on;
            if (memcmp(h->s + w, t->f->open, k)) {
                t->state = T_OUT;
                em_buf_add(answer, h->s, h->n);
                drop(h, h->n);
            } else if (k == on) {
                drop(h, w + on);
                t->state = T_IN;
                moved = 1;
            }
        } else if (t->state == T_IN) {   /* reasoning until the close tag */
            const char *c = memmem(h->s, h->n, t->f->close, cn);
            size_t limit = h->n;
            if (!c)   /* a close tag may be starting at the end: held back */
                for (size_t k = cn - 1; k > 0 && limit == h->n; k--)
                    if (h->n >= k && !memcmp(h->s + h->n - k, t->f->close, k))
                        limit = h->n - k;
            if (c)
                limit = (size_t)(c - h->s);
            /* the block's white space at its start and end is not the reasoning's:
             * trailing white space waits for more */
            size_t b0 = 0, e0 = limit;
            while (!t->emitted && b0 < limit && isspace((unsigned char)h->s[b0]))
                b0++;
            while (e0 > b0 && isspace((unsigned char)h->s[e0 - 1]))
                e0--;
            if (e0 > b0) {
                em_buf_add(reasoning, h->s + b0, e0 - b0);
                t->emitted = 1;
            }
            if (c) {
                drop(h, limit + cn);
                t->state = T_AFTER;
                moved = 1;
            } else {
                drop(h, e0 > b0 ? e0 : b0);
            }
        } else {   /* T_AFTER: the white space between the block and the answer */
            size_t w = 0;
            while (w < h->n && isspace((unsigned char)h->s[w]))
                w++;
            drop(h, w);
            if (h->n) {
                t->state = T_OUT;
                em_buf_add(answer, h->s, h->n);
                drop(h, h->n);
            }
        }
    }
    return was == T_IN || t->state == T_IN || t->state == T_AFTER;
}

int web_think_inside(const web_think *t)
{
    return t->state == T_IN;
}

void web_think_finish(web_think *t, em_buf *reasoning, em_buf *answer)
{
    if (t->state == T_IN)
        em_buf_add(reasoning, t->hold.s, t->hold.n);
    else if (t->state == T_START)
        em_buf_add(answer, t->hold.s, t->hold.n);
    em_buf_reset(&t->hold);
}

int web_think_prompt_opens(const web_thinkfmt *f, const char *prompt, size_t len)
{
    while (len && isspace((unsigned char)prompt[len - 1]))
        len--;
    size_t on = strlen(f->open);
    return len >= on && !memcmp(prompt + len - on, f->open, on);
}
