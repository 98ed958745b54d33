/* fuzz_json_schema.c — JSON Schemas (response_format json_schema) on any
 * bytes: parsed as JSON, translated to GBNF; a translation that succeeds
 * must compile as a grammar (or be refused by the grammar's limits with
 * a message), in both whitespace modes. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/grammar/grammar.h"
#include "core/grammar/json_schema.h"
#include "tests/fuzz/fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_t *schema = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, NULL);
    if (!schema)
        return 0;
    em_json_schema_opts o = { (int)(size & 1) };
    char *gbnf = NULL;
    size_t len = 0;
    em_err e = { 0 };
    if (em_json_schema_to_gbnf(schema, &o, &gbnf, &len, &e) == 0) {
        em_grammar *g = NULL;
        em_err ge = { 0 };
        int rc = em_grammar_compile(gbnf, len, "root", &g, &ge);
        if (rc)   /* a schema that translates compiles, unless it is too big */
            FUZZ_ASSERT(rc == EM_ERANGE || rc == EM_ENOMEM);
        em_grammar_destroy(g);
        free(gbnf);
    } else {
        FUZZ_ASSERT(e.msg[0]);
    }
    json_decref(schema);
    return 0;
}
