/* harmony.c — splits a harmony-format text stream (gpt-oss) into its
 * messages' channels (harmony.h): a marker scanner that holds a marker's
 * beginning across pieces, and a three-state parser (header, body, between
 * messages). */
#include "core/text/harmony.h"

#include <string.h>

enum { S_HEADER, S_BODY, S_BETWEEN };
enum { M_START, M_CHANNEL, M_MESSAGE, M_END, M_CONSTRAIN, M_RETURN, M_CALL, M_COUNT };

static const char *const markers[M_COUNT] = {
    "<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|constrain|>", "<|return|>", "<|call|>",
};

void em_harmony_init(em_harmony *h)
{
    memset(h, 0, sizeof *h);
    h->state = S_HEADER;
}

/* Text of the current state: a body's goes to the sink, a header's channel
 * name is kept, the rest is dropped. */
static void text(em_harmony *h, const char *s, size_t n, em_harmony_sink sink, void *ctx)
{
    if (!n)
        return;
    if (h->state == S_BODY) {
        sink(ctx, h->ch, s, n);
    } else if (h->state == S_HEADER && h->in_channel) {
        for (size_t i = 0; i < n && h->name_n + 1 < sizeof h->name; i++)
            h->name[h->name_n++] = s[i];
    }
}

static void marker(em_harmony *h, int m)
{
    switch (m) {
    case M_START:
        h->state = S_HEADER;
        h->in_channel = 0;
        h->name_n = 0;
        break;
    case M_CHANNEL:
        if (h->state == S_HEADER) {
            h->in_channel = 1;
            h->name_n = 0;
        }
        break;
    case M_CONSTRAIN:
        h->in_channel = 0;
        break;
    case M_MESSAGE:
        if (h->state == S_HEADER) {
            h->name[h->name_n] = 0;
            h->ch = h->name_n == 0 || strcmp(h->name, "final") == 0 ? EM_HARMONY_FINAL
                    : strcmp(h->name, "analysis") == 0              ? EM_HARMONY_ANALYSIS
                                                                    : EM_HARMONY_OTHER;
            h->state = S_BODY;
            h->in_channel = 0;
        }
        break;
    default:   /* end, return, call: the message is over */
        h->state = S_BETWEEN;
        h->in_channel = 0;
        break;
    }
}

/* Which marker pend is (M_COUNT: none), and whether it is the beginning of one. */
static int which(const char *p, size_t n, int *prefix)
{
    *prefix = 0;
    for (int m = 0; m < M_COUNT; m++) {
        size_t ml = strlen(markers[m]);
        if (n == ml && memcmp(p, markers[m], n) == 0)
            return m;
        if (n < ml && memcmp(p, markers[m], n) == 0)
            *prefix = 1;
    }
    return M_COUNT;
}

/* Add byte c to the held marker beginning: a whole marker is acted on; what
 * can no longer become one gives its bytes up as text up to the next '<',
 * which is scanned again. */
static void push(em_harmony *h, char c, em_harmony_sink sink, void *ctx)
{
    h->pend[h->pend_n++] = c;
    while (h->pend_n) {
        int prefix, m = which(h->pend, h->pend_n, &prefix);
        if (m < M_COUNT) {
            h->pend_n = 0;
            marker(h, m);
            return;
        }
        if (prefix)
            return;
        size_t k = 1;   /* the text up to the next '<' after the first byte */
        while (k < h->pend_n && h->pend[k] != '<')
            k++;
        text(h, h->pend, k, sink, ctx);
        memmove(h->pend, h->pend + k, h->pend_n - k);
        h->pend_n -= k;
    }
}

void em_harmony_feed(em_harmony *h, const char *s, size_t n, em_harmony_sink sink, void *ctx)
{
    size_t run = 0;   /* s[run .. i) is plain text not yet handed on */
    for (size_t i = 0; i < n; i++) {
        if (!h->pend_n && s[i] != '<')
            continue;
        text(h, s + run, i - run, sink, ctx);
        run = i + 1;
        push(h, s[i], sink, ctx);
    }
    text(h, s + run, n - run, sink, ctx);
}

void em_harmony_finish(em_harmony *h, em_harmony_sink sink, void *ctx)
{
    text(h, h->pend, h->pend_n, sink, ctx);
    h->pend_n = 0;
}
