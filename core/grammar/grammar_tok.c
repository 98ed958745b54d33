/* grammar_tok.c — a tokenizer's vocabulary as a grammar vocabulary
 * (grammar.h em_gvocab_from_tokenizer): each token's decoded bytes, control
 * tokens as special, end-of-generation ids as EOG. */
#include <stdlib.h>

#include "core/grammar/grammar.h"
#include "core/text/tokenizer.h"

int em_gvocab_from_tokenizer(const em_tokenizer *t, em_gvocab **out, em_err *err)
{
    uint32_t n = em_tokenizer_n_vocab(t);
    em_gvocab_token *toks = calloc(n ? n : 1, sizeof *toks);
    char *buf = NULL;
    size_t used = 0, cap = 0;
    int rc = EM_ENOMEM;
    *out = NULL;
    if (!toks)
        goto done;
    /* two passes: sizes, then bytes into one buffer */
    for (uint32_t i = 0; i < n; i++) {
        int len = em_tokenizer_piece(t, (int32_t)i, 0, NULL, 0);
        if (len < 0) {
            rc = em_err_set(err, len, "token %u: no piece", i);
            goto done;
        }
        cap += (size_t)len;
    }
    buf = malloc(cap + 1);
    if (!buf)
        goto done;
    for (uint32_t i = 0; i < n; i++) {
        int len = em_tokenizer_piece(t, (int32_t)i, 0, buf + used, cap - used);
        toks[i].len = (uint32_t)len;
        used += (size_t)len;
        if (em_tokenizer_is_eog(t, (int32_t)i))
            toks[i].flags |= EM_GTOK_EOG;
        if (em_tokenizer_is_special(t, (int32_t)i))
            toks[i].flags |= EM_GTOK_SPECIAL;
    }
    used = 0;
    for (uint32_t i = 0; i < n; i++) {
        toks[i].bytes = buf + used;
        used += toks[i].len;
    }
    rc = em_gvocab_create(toks, n, out, err);
done:
    if (rc == EM_ENOMEM && !*out)
        em_err_set(err, EM_ENOMEM, "out of memory");
    free(toks);
    free(buf);
    return rc;
}

