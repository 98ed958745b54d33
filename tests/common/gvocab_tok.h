/* gvocab_tok.h — the grammar vocabulary (core/grammar.h em_gvocab) of a
 * GGUF tokenizer, for the grammar tests and benchmark: each token's decoded
 * bytes (em_tokenizer_piece), control tokens as special, end-of-generation
 * ids as EOG. */
#ifndef EM_GVOCAB_TOK_H
#define EM_GVOCAB_TOK_H

#include "core/grammar.h"
#include "core/tokenizer.h"

/* *out is the caller's (em_gvocab_destroy); t borrowed. */
int gvocab_from_tokenizer(const em_tokenizer *t, em_gvocab **out, em_err *err);

/* Open a GGUF vocabulary file and build its tokenizer and grammar
 * vocabulary (all three the caller's; close/destroy them). */
int gvocab_open(const char *path, em_gguf **g, em_tokenizer **t, em_gvocab **v, em_err *err);

#endif
