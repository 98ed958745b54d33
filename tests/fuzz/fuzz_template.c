/* fuzz_template.c — hostile chat templates: the Jinja subset's lexer,
 * parser and evaluator on any source (a GGUF's tokenizer.chat_template is
 * outside bytes), rendered with a conversation of every role, a tool list,
 * and add_generation_prompt, as `ember serve` renders one. The limits of
 * core/tmpl/chat_tmpl.h (nesting, steps, output, memory) must turn every
 * runaway into an error, never a crash or a hang. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "core/tmpl/chat_tmpl.h"
#include "tests/fuzz/fuzz.h"

static json_t *messages, *tools;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    messages = json_loads("[{\"role\": \"system\", \"content\": \"You are terse.\"},"
                          " {\"role\": \"user\", \"content\": \"Hi \\u00e9\\u4e16 {{ x }}\"},"
                          " {\"role\": \"assistant\", \"content\": \"Hello.\", \"tool_calls\": [{\"type\": \"function\","
                          "   \"function\": {\"name\": \"f\", \"arguments\": {\"a\": 1}}}]},"
                          " {\"role\": \"tool\", \"content\": \"42\"},"
                          " {\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"more\"}]}]", 0, NULL);
    tools = json_loads("[{\"type\": \"function\", \"function\": {\"name\": \"f\", \"description\": \"d\","
                       " \"parameters\": {\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"integer\"}}}}}]",
                       0, NULL);
    return messages && tools ? 0 : -1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!messages)
        LLVMFuzzerInitialize(NULL, NULL);
    em_tmpl *t = NULL;
    em_err e = { 0 };
    if (em_tmpl_parse((const char *)data, size, &t, &e)) {
        FUZZ_ASSERT(!t && e.msg[0]);
        return 0;
    }
    em_tmpl_destroy(t);
    struct tm fixed = { .tm_year = 126, .tm_mon = 11, .tm_mday = 2 };
    em_tmpl_opts o = { .now = &fixed, .max_output = size % 3 ? 0 : 4096 };   /* a third with a small cap */
    char *out = NULL;
    size_t n = 0;
    int rc = em_chat_render((const char *)data, size, messages, 1, "<s>", "</s>", size % 2 ? tools : NULL, &o, &out,
                            &n, &e);
    if (rc == 0) {
        FUZZ_ASSERT(out && n <= (o.max_output ? o.max_output : EM_TMPL_MAX_OUTPUT));
        free(out);
    } else {
        FUZZ_ASSERT(e.msg[0]);
    }
    return 0;
}
