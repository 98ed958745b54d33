/* test_harmony.c — core/text/harmony.c: a gpt-oss answer in the harmony
 * format split into its channels, the same for every way of cutting the
 * stream into pieces (every cut point, and random cuts into many pieces):
 * the answer ("final", or a message without a channel), the reasoning
 * ("analysis"), other channels (commentary with a constraint), headers and
 * markers dropped; text with '<' and "<|" that is not a marker kept; a
 * marker's beginning at the end of the stream given back as text. */
#include <stdint.h>
#include <string.h>

#include "core/text/harmony.h"
#include "tests/common/testutil.h"

typedef struct {
    char out[3][512];
    size_t n[3];
} outs;

static void sink(void *ctx, em_harmony_channel ch, const char *s, size_t n)
{
    outs *o = ctx;
    if (o->n[ch] + n < sizeof o->out[ch]) {
        memcpy(o->out[ch] + o->n[ch], s, n);
        o->n[ch] += n;
        o->out[ch][o->n[ch]] = 0;
    }
}

/* Feed s cut at the offsets cuts[0..nc) (ascending), then finish. */
static void run(const char *s, const size_t *cuts, size_t nc, outs *o)
{
    em_harmony h;
    em_harmony_init(&h);
    memset(o, 0, sizeof *o);
    size_t at = 0, len = strlen(s);
    for (size_t i = 0; i <= nc; i++) {
        size_t to = i < nc ? cuts[i] : len;
        em_harmony_feed(&h, s + at, to - at, sink, o);
        at = to;
    }
    em_harmony_finish(&h, sink, o);
}

static void expect(const char *what, const char *s, const char *final, const char *analysis, const char *other)
{
    size_t len = strlen(s);
    outs o;
    int bad = 0;
    run(s, NULL, 0, &o);
    const char *want[3] = { final, analysis, other };
    for (int c = 0; c < 3; c++)
        bad |= strcmp(o.out[c], want[c]) != 0;
    CHECKF(!bad, "%s whole: final '%s' analysis '%s' other '%s'", what, o.out[0], o.out[1], o.out[2]);
    for (size_t cut = 1; cut < len; cut++) {   /* two pieces, every cut */
        run(s, &cut, 1, &o);
        for (int c = 0; c < 3; c++)
            if (strcmp(o.out[c], want[c]) != 0) {
                CHECKF(0, "%s cut at %zu: channel %d '%s', want '%s'", what, cut, c, o.out[c], want[c]);
                return;
            }
    }
    unsigned long long seed = 7;
    for (int round = 0; round < 200; round++) {   /* many pieces, some of one byte */
        size_t cuts[64], nc = 0, at = 0;
        while (nc < 64) {
            at += 1 + test_rand(&seed) % 5;
            if (at >= len)
                break;
            cuts[nc++] = at;
        }
        run(s, cuts, nc, &o);
        for (int c = 0; c < 3; c++)
            if (strcmp(o.out[c], want[c]) != 0) {
                CHECKF(0, "%s round %d: channel %d '%s', want '%s'", what, round, c, o.out[c], want[c]);
                return;
            }
    }
}

int main(void)
{
    expect("reasoning then answer",
           "<|channel|>analysis<|message|>The user asks 2+2. Easy.<|end|><|start|>assistant<|channel|>final"
           "<|message|>2 + 2 = 4.",
           "2 + 2 = 4.", "The user asks 2+2. Easy.", "");
    expect("answer only, no channel", "<|message|>Hello there", "Hello there", "", "");
    expect("a tool call on commentary",
           "<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant<|channel|>commentary "
           "to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Paris\"}",
           "", "Need the weather.", "{\"city\":\"Paris\"}");
    expect("not markers kept as text",
           "<|channel|>final<|message|>a < b, x<|y, <<|end is not <| a marker <|",
           "a < b, x<|y, <<|end is not <| a marker <|", "", "");
    expect("a marker begun twice", "<|channel|>final<|message|>x <<|end|> after",
           "x <", "", "");
    expect("header text dropped", "assistant<|channel|>final<|message|>ok", "ok", "", "");
    expect("between messages dropped", "<|channel|>final<|message|>one<|end|>junk<|start|>assistant<|message|> two",
           "one two", "", "");
    expect("a long channel name", "<|channel|>averyveryveryverylongchannelname<|message|>hidden", "", "", "hidden");
    return test_summary("harmony");
}
