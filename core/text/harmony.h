/* harmony.h — the channels of OpenAI's harmony format (gpt-oss) in a
 * generated text stream. The model writes messages
 *   <|channel|>analysis<|message|>...<|end|><|start|>assistant<|channel|>final<|message|>...
 * (the prompt's generation prompt ends with "<|start|>assistant"; the
 * tokenizer renders these markers as text for a harmony vocabulary, and
 * <|return|> / <|call|> end the generation). em_harmony_feed takes the text
 * as it comes, in pieces split anywhere (a marker split across pieces is
 * held back until it is whole), and hands each run of message text to a
 * sink with its channel: the answer ("final"; a message without a channel
 * counts as one), reasoning ("analysis"), or another channel's ("commentary":
 * tool calls; unknown names). Headers and markers are never handed on.
 * Text before any marker is the first message's header. Not thread-safe;
 * one per generated choice; no allocation. */
#ifndef EM_HARMONY_H
#define EM_HARMONY_H

#include <stddef.h>

typedef enum { EM_HARMONY_FINAL, EM_HARMONY_ANALYSIS, EM_HARMONY_OTHER } em_harmony_channel;

/* Receives a run of message text (borrowed for the call). */
typedef void (*em_harmony_sink)(void *ctx, em_harmony_channel ch, const char *s, size_t n);

typedef struct {
    int      state;        /* header, body, between messages */
    int      in_channel;   /* header: reading the channel's name */
    em_harmony_channel ch; /* body: the message's channel */
    char     name[24];     /* the channel's name as read (cut at 23 bytes) */
    size_t   name_n;
    char     pend[16];     /* a marker's beginning not yet whole */
    size_t   pend_n;
} em_harmony;

/* Start at the first message's header (after "<|start|>assistant"). */
void em_harmony_init(em_harmony *h);
/* Take n bytes of generated text. */
void em_harmony_feed(em_harmony *h, const char *s, size_t n, em_harmony_sink sink, void *ctx);
/* The generation ended: a held beginning of a marker that never completed
 * is text of the message it is in. */
void em_harmony_finish(em_harmony *h, em_harmony_sink sink, void *ctx);

#endif
