/* gvocab_tok.c — a tokenizer's vocabulary as a grammar vocabulary (for the
 * grammar tests and benchmark; see gvocab_tok.h). */
#include "gvocab_tok.h"


int gvocab_open(const char *path, em_gguf **g, em_tokenizer **t, em_gvocab **v, em_err *err)
{
    *g = NULL;
    *t = NULL;
    *v = NULL;
    int rc = em_gguf_open(path, g, err);
    if (!rc)
        rc = em_tokenizer_create(*g, t, err);
    if (!rc)
        rc = em_gvocab_from_tokenizer(*t, v, err);
    return rc;
}
