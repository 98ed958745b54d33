/* fuzz_tokenizer.c — the tokenizers on arbitrary bytes: every vocabulary
 * type ember reads (SentencePiece-style llama-spm, byte-level BPE with the
 * gpt-2, starcoder, deepseek-coder and falcon pre-tokenizers, BERT WordPiece
 * with bert-bge; the vocabularies of ../shared/golden/tokenizer) encodes any text, valid UTF-8
 * or not, with and without special tokens; the ids decode back, whole and
 * token by token through the streaming detokenizer, to the same text.
 * Arbitrary ids (also out of range) are decoded too. The first input byte
 * picks the vocabulary and the flags. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/model/gguf.h"
#include "core/text/tokenizer.h"
#include "tests/fuzz/fuzz.h"

static const char *const vocabs[] = { "llama-spm", "gpt-2", "starcoder", "deepseek-coder", "falcon", "bert-bge" };
#define N_VOCABS (sizeof vocabs / sizeof vocabs[0])
static em_tokenizer *toks[N_VOCABS];
static em_gguf *ggufs[N_VOCABS];
static size_t n_loaded;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    const char *shared = getenv("EMBER_SHARED");
    for (size_t i = 0; i < N_VOCABS; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/golden/tokenizer/ggml-vocab-%s.gguf", shared ? shared : "../shared",
                 vocabs[i]);
        em_err e = { 0 };
        if (em_gguf_open(path, &ggufs[i], &e) || em_tokenizer_create(ggufs[i], &toks[i], &e)) {
            fprintf(stderr, "fuzz_tokenizer: %s: %s (skipped)\n", path, e.msg);
            continue;
        }
        n_loaded++;
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!size || !n_loaded)
        return 0;
    em_tokenizer *t = toks[data[0] % N_VOCABS];
    if (!t)
        return 0;
    int add_special = (data[0] >> 3) & 1, parse_special = (data[0] >> 4) & 1, ids_mode = (data[0] >> 5) & 1;
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    em_err e = { 0 };
    if (ids_mode) {   /* the rest as token ids, in range or not */
        size_t n = len / 4;
        int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
        if (!ids)
            return 0;
        memcpy(ids, text, n * 4);
        char *out = NULL;
        if (em_tokenizer_decode(t, ids, n, &out, &e) == 0)
            free(out);
        free(ids);
        return 0;
    }
    int32_t *ids = NULL;
    size_t n = 0;
    if (em_tokenizer_encode(t, text, len, add_special, parse_special, &ids, &n, &e)) {
        FUZZ_ASSERT(e.msg[0]);
        return 0;
    }
    char *whole = NULL;
    FUZZ_ASSERT(em_tokenizer_decode(t, ids, n, &whole, &e) == 0);
    /* token by token through the streaming detokenizer: the same text */
    size_t cap = em_tokenizer_detok_cap(t), got = 0;
    char *piece = malloc(cap), *stream = malloc(len * 4 + cap * (n + 2) + 1);
    if (piece && stream && !memchr(text, 0, len)) {   /* (a NUL would end the decoded string early) */
        em_detok d;
        em_detok_init(&d, 1);
        for (size_t i = 0; i < n; i++) {
            int k = em_detok_push(t, &d, ids[i], piece, cap);
            FUZZ_ASSERT(k >= 0 && (size_t)k <= cap);
            memcpy(stream + got, piece, (size_t)k);
            got += (size_t)k;
        }
        int k = em_detok_flush(t, &d, piece, cap);
        FUZZ_ASSERT(k >= 0 && (size_t)k <= cap);
        memcpy(stream + got, piece, (size_t)k);
        got += (size_t)k;
        FUZZ_ASSERT(got == strlen(whole) && memcmp(stream, whole, got) == 0);
    }
    free(piece);
    free(stream);
    free(whole);
    free(ids);
    return 0;
}
