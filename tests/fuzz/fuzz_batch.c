/* fuzz_batch.c — a Batch API input file (JSONL uploaded by a client) as the
 * validator checks it before any work (web_batch_check_lines): any bytes,
 * for either endpoint. Accepted: every line kept is a compact JSON object
 * body with a unique custom_id, in order; refused: at least one error, each
 * with a code, a message and its line, no lines kept. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/fuzz/fuzz.h"
#include "web/web_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *ep = size && (data[0] & 1) ? "/v1/chat/completions" : "/v1/completions";
    web_batch_errors v = { json_array(), 0 };
    em_batch_line *lines = NULL;
    size_t n = 0;
    size_t bad = web_batch_check_lines((const char *)data, size, ep, "stories260K", &lines, &n, &v);
    if (bad) {
        FUZZ_ASSERT(!lines && !n && json_array_size(v.errors) >= 1 && json_array_size(v.errors) <= 100);
        size_t i;
        json_t *e;
        json_array_foreach(v.errors, i, e)
            FUZZ_ASSERT(json_is_string(json_object_get(e, "code")) && json_is_string(json_object_get(e, "message")) &&
                        json_is_integer(json_object_get(e, "line")));
    } else {
        FUZZ_ASSERT(n >= 1 && n <= 50000);
        for (size_t i = 0; i < n; i++) {
            FUZZ_ASSERT(lines[i].line == (int64_t)i && lines[i].custom_id[0]);
            for (size_t k = 0; k < i && k < 8; k++)
                FUZZ_ASSERT(strcmp(lines[k].custom_id, lines[i].custom_id) != 0);
            json_t *b = json_loads(lines[i].body, 0, NULL);
            FUZZ_ASSERT(json_is_object(b) && !json_is_true(json_object_get(b, "stream")));
            json_decref(b);
        }
    }
    em_batch_lines_free(lines, n);
    json_decref(v.errors);
    return 0;
}
