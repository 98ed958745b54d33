/* fuzz_regex.c — the `regex` request field on any bytes: translated to
 * GBNF; a translation that succeeds must compile as a grammar (or be
 * refused by the grammar's limits). */
#include <stdio.h>
#include <stdlib.h>

#include "core/grammar/grammar.h"
#include "tests/fuzz/fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *gbnf = NULL;
    size_t len = 0;
    em_err e = { 0 };
    if (em_regex_to_gbnf((const char *)data, size, &gbnf, &len, &e)) {
        FUZZ_ASSERT(e.msg[0]);
        return 0;
    }
    em_grammar *g = NULL;
    em_err ge = { 0 };
    int rc = em_grammar_compile(gbnf, len, "root", &g, &ge);
    if (rc)
        FUZZ_ASSERT(rc == EM_ERANGE || rc == EM_ENOMEM);
    em_grammar_destroy(g);
    free(gbnf);
    return 0;
}
