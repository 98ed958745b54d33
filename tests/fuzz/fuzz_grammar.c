/* fuzz_grammar.c — GBNF grammars (the `grammar` request field and
 * --grammar-file are outside bytes): the compiler on any source, then,
 * for a grammar it accepts, a matcher fed bytes the input carries after a
 * NUL (in pieces of 1..7 bytes, as tokens arrive), with clones and the
 * end checks along the way. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/grammar/grammar.h"
#include "tests/fuzz/fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *src = (const char *)data;
    const char *nul = memchr(src, 0, size);
    size_t glen = nul ? (size_t)(nul - src) : size;
    em_grammar *g = NULL;
    em_err e = { 0 };
    if (em_grammar_compile(src, glen, "root", &g, &e)) {
        FUZZ_ASSERT(!g && e.msg[0]);
        return 0;
    }
    em_gmatch *m = NULL;
    if (em_gmatch_create(g, &m, &e) == 0) {
        const char *text = nul ? nul + 1 : "";
        size_t left = nul ? size - glen - 1 : 0;
        for (size_t i = 0; left; i++) {
            size_t k = 1 + (i * 5 + left) % 7;
            k = k < left ? k : left;
            int rc = em_gmatch_accept(m, text, k);
            FUZZ_ASSERT(rc == 0 || rc == EM_EINVAL || rc == EM_ERANGE || rc == EM_ENOMEM);
            if (rc == 0 && em_gmatch_done(m))
                FUZZ_ASSERT(em_gmatch_can_end(m));
            if (i % 4 == 3) {   /* a clone goes on exactly as the original */
                em_gmatch *c = NULL;
                if (em_gmatch_clone(m, &c, &e) == 0) {
                    FUZZ_ASSERT(em_gmatch_can_end(c) == em_gmatch_can_end(m));
                    em_gmatch_destroy(c);
                }
            }
            text += k;
            left -= k;
        }
        em_gmatch_destroy(m);
    }
    em_grammar_destroy(g);
    return 0;
}
