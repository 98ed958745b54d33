/* gvocab_tok.h — a GGUF file's tokenizer and grammar vocabulary
 * (core/grammar/grammar.h em_gvocab_from_tokenizer) in one call, for the grammar
 * tests and benchmark. */
#ifndef EM_GVOCAB_TOK_H
#define EM_GVOCAB_TOK_H

#include "core/grammar/grammar.h"
#include "core/text/tokenizer.h"

/* Open a GGUF vocabulary file and build its tokenizer and grammar
 * vocabulary (all three the caller's; close/destroy them). */
int gvocab_open(const char *path, em_gguf **g, em_tokenizer **t, em_gvocab **v, em_err *err);

#endif
