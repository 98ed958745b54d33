/* test_tools.c — unit tests of web/tools.c, tool calling: the call format
 * read off real chat templates (../shared/golden/templates: the formats
 * found are the table below; a template whose calls ember cannot generate
 * says why), the request's tools and tool_choice checked, the grammar of
 * the calls (compiled, a valid call accepted, a call that breaks its
 * schema or names no tool refused), and the split of an answer into text
 * and calls fed in every chunking (the same result from one byte at a time
 * as from the whole); and web/reasoning.c: the think tags read off real
 * templates, and the split of an answer into the block it begins with and
 * the rest, in every chunking. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/grammar/grammar.h"
#include "tests/common/testutil.h"
#include "web/reasoning.h"
#include "web/tools.h"


static const char *const stops[] = { "<|im_end|>", "<|eot_id|>", "<|eom_id|>", "</s>", "<|end_of_text|>",
                                     "<|end|>", "<|endoftext|>", "<end_of_turn>", "<|end_of_role|>",
                                     "<|return|>", "<|call|>" };

static int detect(const char *name, web_toolfmt *f)
{
    char path[512];
    snprintf(path, sizeof path, "golden/templates/%s.jinja", name);
    size_t n;
    char *src = test_read_file(test_shared(path), &n);
    REQUIRE(src);
    web_toolfmt_detect(src, n, "<s>", "</s>", stops, sizeof stops / sizeof stops[0], f);
    free(src);
    return 0;
}

static void esc(const char *s)
{
    for (; s && *s; s++)
        if (*s == '\n')
            printf("\\n");
        else
            putchar(*s);
}

/* A request body's tools parsed: 0, or the HTTP status and its param. */
static int tools_of(const char *body, web_tools *t, char *param)
{
    json_t *req = json_loads(body, 0, NULL);
    em_web_error e = { 0 };
    int rc = web_tools_parse(req, t, &e);
    snprintf(param, 64, "%s", e.param);
    json_decref(req);   /* (the tools borrow from it: tests look at counts only) */
    return rc ? e.status : 0;
}

#define WEATHER "{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"parameters\": " \
                "{\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}, \"days\": " \
                "{\"type\": \"integer\", \"minimum\": 1, \"maximum\": 7}}, \"required\": [\"city\"]}}}"
#define CLOCK "{\"type\": \"function\", \"function\": {\"name\": \"get_time\"}}"

static void check_requests(void)
{
    web_tools t;
    char param[64];
    CHECK(tools_of("{}", &t, param) == 0 && t.n == 0);
    CHECK(tools_of("{\"tools\": []}", &t, param) == 0 && t.n == 0);
    CHECK(tools_of("{\"tools\": [" WEATHER ", " CLOCK "]}", &t, param) == 0 && t.n == 2 &&
          t.choice == WEB_TOOL_AUTO && t.parallel == 1);
    /* a tool without parameters is rendered with an empty object schema */
    CHECK(json_object_get(json_object_get(json_array_get(t.render, 1), "function"), "parameters") != NULL);
    web_tools_free(&t);
    CHECK(tools_of("{\"tools\": [" WEATHER "], \"tool_choice\": {\"type\": \"function\", \"function\": "
                   "{\"name\": \"get_weather\"}}, \"parallel_tool_calls\": false}", &t, param) == 0 &&
          t.choice == WEB_TOOL_NAMED && t.named == 0 && !t.parallel);
    web_tools_free(&t);
    CHECK(tools_of("{\"tools\": [" WEATHER ", " CLOCK "], \"tool_choice\": {\"type\": \"function\", "
                   "\"function\": {\"name\": \"get_weather\"}}}", &t, param) == 0 && t.named == 0);
    web_tools_free(&t);
    CHECK(tools_of("{\"tools\": [" WEATHER ", " CLOCK "], \"tool_choice\": {\"type\": \"function\", "
                   "\"function\": {\"name\": \"get_time\"}}}", &t, param) == 0 && t.named == 1);
    web_tools_free(&t);
    CHECK(tools_of("{\"tools\": [" WEATHER "], \"tool_choice\": \"required\"}", &t, param) == 0 &&
          t.choice == WEB_TOOL_REQUIRED);
    web_tools_free(&t);
    CHECK(tools_of("{\"tools\": [" WEATHER "], \"tool_choice\": \"none\"}", &t, param) == 0 &&
          t.choice == WEB_TOOL_NONE);
    web_tools_free(&t);
    /* refused, naming the parameter */
    CHECK(tools_of("{\"tools\": [" WEATHER "], \"tool_choice\": {\"type\": \"function\", \"function\": "
                   "{\"name\": \"nope\"}}}", &t, param) == 400 && !strcmp(param, "tool_choice"));
    CHECK(tools_of("{\"tools\": [" WEATHER "], \"tool_choice\": \"sometimes\"}", &t, param) == 400 &&
          !strcmp(param, "tool_choice"));
    CHECK(tools_of("{\"tool_choice\": \"required\"}", &t, param) == 400 && !strcmp(param, "tool_choice"));
    CHECK(tools_of("{\"tools\": [" WEATHER ", " WEATHER "]}", &t, param) == 400 && !strcmp(param, "tools[1]"));
    CHECK(tools_of("{\"tools\": [{\"type\": \"web_search\"}]}", &t, param) == 400 && !strcmp(param, "tools[0]"));
    CHECK(tools_of("{\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"a b\"}}]}", &t,
                   param) == 400);
    CHECK(tools_of("{\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": "
                   "{\"type\": \"string\"}}}]}", &t, param) == 400 && !strcmp(param, "tools[0]"));
    CHECK(tools_of("{\"tools\": {}}", &t, param) == 400 && !strcmp(param, "tools"));
    CHECK(tools_of("{\"tools\": [" WEATHER "], \"parallel_tool_calls\": 1}", &t, param) == 400);
    /* more tools than the bound */
    em_buf b = { 0 };
    em_buf_addf(&b, "{\"tools\": [");
    for (int i = 0; i <= WEB_TOOLS_MAX; i++)
        em_buf_addf(&b, "%s{\"type\": \"function\", \"function\": {\"name\": \"f%d\"}}", i ? ", " : "", i);
    em_buf_addf(&b, "]}");
    CHECK(tools_of(b.s, &t, param) == 400 && !strcmp(param, "tools"));
    em_buf_free(&b);
}

/* Whether the grammar text accepts s whole. */
static int accepts(const char *gbnf, size_t len, const char *s)
{
    em_grammar *g = NULL;
    em_gmatch *m = NULL;
    em_err err = { 0 };
    if (em_grammar_compile(gbnf, len, NULL, &g, &err)) {
        printf("grammar: %s\n", err.msg);
        return -1;
    }
    int ok = !em_gmatch_create(g, &m, &err) && !em_gmatch_accept(m, s, strlen(s)) && em_gmatch_can_end(m);
    em_gmatch_destroy(m);
    em_grammar_destroy(g);
    return ok;
}

static void check_grammar(const web_toolfmt *f)
{
    json_t *req = json_loads("{\"tools\": [" WEATHER ", " CLOCK "]}", 0, NULL);
    web_tools t;
    em_web_error e = { 0 };
    REQUIRE_V(!web_tools_parse(req, &t, &e));
    char *g;
    size_t n;
    REQUIRE_V(!web_tools_gbnf(f, &t, &g, &n, &e));
    const char *one = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
    CHECK(accepts(g, n, one) == 1);
    CHECK(accepts(g, n, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\", \"days\": 3}}"
                        "\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>") == 1);
    /* auto: the bare call (no tag) too, pretty-printed, in a code fence */
    CHECK(accepts(g, n, "{\"name\": \"get_time\", \"arguments\": {}}") == 1);
    CHECK(accepts(g, n, "```json\n{\n  \"name\": \"get_weather\",\n  \"arguments\": {\n    \"city\": \"Paris\"\n  }\n}\n```") == 1);
    CHECK(accepts(g, n, "\n{\"name\":\"get_time\",\"arguments\":{}}") == 1);
    CHECK(accepts(g, n, "```json\n{\"name\": \"get_weather\", \"arguments\": {}}\n```") == 0);   /* still its schema */
    /* what breaks the schema or names no tool is refused */
    CHECK(accepts(g, n, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}\n</tool_call>") == 0);
    CHECK(accepts(g, n, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"P\", \"days\": 9}}"
                        "\n</tool_call>") == 0);
    CHECK(accepts(g, n, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": 3}}\n</tool_call>") == 0);
    CHECK(accepts(g, n, "<tool_call>\n{\"name\": \"rm_rf\", \"arguments\": {}}\n</tool_call>") == 0);
    CHECK(accepts(g, n, "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}") == 0);   /* not closed */
    free(g);
    /* a named choice, one call: only that tool, once, and no bare form */
    t.choice = WEB_TOOL_NAMED;
    t.named = 1;
    t.parallel = 0;
    REQUIRE_V(!web_tools_gbnf(f, &t, &g, &n, &e));
    CHECK(accepts(g, n, "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>") == 1);
    CHECK(accepts(g, n, one) == 0);
    CHECK(accepts(g, n, "{\"name\": \"get_time\", \"arguments\": {}}") == 0);
    CHECK(accepts(g, n, "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n"
                        "{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>") == 0);
    free(g);
    web_tools_free(&t);
    json_decref(req);
    /* a schema the grammar cannot enforce: 400 naming the tool and the pointer */
    req = json_loads("{\"tools\": [" CLOCK ", {\"type\": \"function\", \"function\": {\"name\": \"tag\", "
                     "\"parameters\": {\"type\": \"object\", \"properties\": {\"t\": {\"type\": \"array\", "
                     "\"uniqueItems\": true}}}}}]}", 0, NULL);
    REQUIRE_V(!web_tools_parse(req, &t, &e));
    CHECK(web_tools_gbnf(f, &t, &g, &n, &e) == -1 && e.status == 400 && !strcmp(e.param, "tools[1]") &&
          strstr(e.message, "tool 'tag'") && strstr(e.message, "#/properties/t"));
    web_tools_free(&t);
    json_decref(req);
}

/* What the split gave: the text, and each call as name(args). */
typedef struct {
    em_buf text, calls;
    int    open;   /* a call's arguments are coming */
} split;

static void on_text(void *ctx, const char *s, size_t n)
{
    em_buf_add(&((split *)ctx)->text, s, n);
}

static void on_call(void *ctx, uint32_t index, const char *name, const char *id)
{
    split *o = ctx;
    em_buf_addf(&o->calls, "%s#%u %s%s%s%s(", o->open ? ")" : "", index, name, id ? "[" : "", id ? id : "",
                id ? "]" : "");
    o->open = 1;
}

static void on_args(void *ctx, uint32_t index, const char *s, size_t n)
{
    (void)index;
    em_buf_add(&((split *)ctx)->calls, s, n);
}

static const web_toolsink sink = { on_text, on_call, on_args };

/* s fed in pieces of `step` bytes (0: whole): "text|calls|whole". */
static void run_split(const web_toolfmt *f, int text_first, const char *s, size_t step, em_buf *out)
{
    split o = { 0 };
    web_toolparse p;
    web_toolparse_init(&p, f, text_first);
    size_t n = strlen(s);
    for (size_t i = 0; i < n; i += step ? step : n)
        web_toolparse_feed(&p, s + i, step && step < n - i ? step : n - i, &sink, &o);
    int whole = web_toolparse_finish(&p, &sink, &o);
    web_toolparse_free(&p);
    em_buf_reset(out);
    em_buf_addf(out, "%s|%s%s|%d", o.text.s ? o.text.s : "", o.calls.s ? o.calls.s : "", o.open ? ")" : "", whole);
    em_buf_free(&o.text);
    em_buf_free(&o.calls);
}

typedef struct {
    int         text_first;
    const char *in, *want;
} split_case;

/* Each case whole and in pieces of 1..8 bytes: the same split. */
static void run_cases(const web_toolfmt *f, const char *label, const split_case *cases, size_t n)
{
    em_buf whole = { 0 }, piece = { 0 };
    for (size_t i = 0; i < n; i++) {
        run_split(f, cases[i].text_first, cases[i].in, 0, &whole);
        CHECKF(!strcmp(whole.s, cases[i].want), "%s case %zu: [%s]", label, i, whole.s);
        for (size_t step = 1; step < 9; step++) {
            run_split(f, cases[i].text_first, cases[i].in, step, &piece);
            CHECKF(!strcmp(piece.s, whole.s), "%s case %zu step %zu: [%s]", label, i, step, piece.s);
        }
    }
    em_buf_free(&whole);
    em_buf_free(&piece);
}

static void check_parser(const web_toolfmt *f)
{
    static const split_case cases[] = {
        { 1, "Just text, no call.\n\n", "Just text, no call.\n\n||0" },
        { 1, "Let me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
          "Let me look.|#0 get_weather({\"city\": \"Paris\"})|1" },
        { 1, "<tool_call>\n{\"name\": \"a\", \"arguments\": {\"s\": \"}\\\"{\"}}\n</tool_call>\n<tool_call>\n"
             "{\"name\": \"b\", \"arguments\": {\"x\": [1, {\"y\": 2}]}}\n</tool_call>",
          "|#0 a({\"s\": \"}\\\"{\"})#1 b({\"x\": [1, {\"y\": 2}]})|1" },
        /* the bare form at the start, in any white space, fenced or not */
        { 1, "  {\"name\": \"get_time\", \"arguments\": {}}", "|#0 get_time({})|1" },
        { 1, "```json\n{\n  \"name\": \"w\",\n  \"arguments\": {\n    \"c\": \"P\"\n  }\n}\n```",
          "|#0 w({\n    \"c\": \"P\"\n  })|1" },
        { 1, "```python\nprint(1)\n```", "```python\nprint(1)\n```||0" },
        /* ... but not later, and not when the answer does not begin with it */
        { 1, "Here: {\"name\": \"x\"}", "Here: {\"name\": \"x\"}||0" },
        { 1, "{\"nam", "{\"nam||0" },
        /* cut off inside the arguments: the call is not whole */
        { 1, "<tool_call>\n{\"name\": \"a\", \"arguments\": {\"s\": \"ab", "|#0 a({\"s\": \"ab)|0" },
        /* a text with a '<' that is not the trigger */
        { 1, "a < b and <tool>", "a < b and <tool>||0" },
        /* required: the answer is the call from its first byte */
        { 0, "<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>", "|#0 a({})|1" },
    };
    run_cases(f, "hermes", cases, sizeof cases / sizeof cases[0]);
}

/* Mistral's formats: the id the model writes, in the grammar and read back
 * (after the arguments: the call given whole once its id has come). */
static void check_ids(void)
{
    json_t *req = json_loads("{\"tools\": [" WEATHER ", " CLOCK "]}", 0, NULL);
    web_tools t;
    em_web_error e = { 0 };
    REQUIRE_V(!web_tools_parse(req, &t, &e));
    web_toolfmt f;
    REQUIRE_V(!detect("mistralai-Mistral-Nemo-Instruct-2407", &f) && f.ok && f.id_len == 9);
    char *g;
    size_t n;
    REQUIRE_V(!web_tools_gbnf(&f, &t, &g, &n, &e));
    const char *two = "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}, \"id\": "
                      "\"Ab3dE6gH9\"}, {\"name\": \"get_time\", \"arguments\": {}, \"id\": \"zz00zz00z\"}]";
    CHECK(accepts(g, n, two) == 1);
    CHECK(accepts(g, n, "[TOOL_CALLS][{\"name\": \"get_time\", \"arguments\": {}, \"id\": \"abc\"}]") == 0);
    CHECK(accepts(g, n, "[TOOL_CALLS][{\"name\": \"get_time\", \"arguments\": {}, \"id\": \"abc-efghi\"}]") == 0);
    free(g);
    static const split_case nemo[] = {
        { 1, "Sure. [TOOL_CALLS][{\"name\": \"a\", \"arguments\": {\"s\": \"}\"}, \"id\": \"Ab3dE6gH9\"}, "
             "{\"name\": \"b\", \"arguments\": {}, \"id\": \"zz00zz00z\"}]",
          "Sure.|#0 a[Ab3dE6gH9]({\"s\": \"}\"})#1 b[zz00zz00z]({})|1" },
        /* cut off before the id: the call is not given */
        { 0, "[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {}, \"id\": \"Ab3", "||0" },
        { 1, "No call.", "No call.||0" },
    };
    run_cases(&f, "nemo", nemo, sizeof nemo / sizeof nemo[0]);
    web_toolfmt_free(&f);
    REQUIRE_V(!detect("Mistral-Small-3.2-24B-Instruct-2506", &f) && f.ok && f.id_len == 9);
    REQUIRE_V(!web_tools_gbnf(&f, &t, &g, &n, &e));
    CHECK(accepts(g, n, "[TOOL_CALLS]get_time[CALL_ID]a1b2c3d4e[ARGS]{}") == 1);
    CHECK(accepts(g, n, "[TOOL_CALLS]get_time[CALL_ID]a1b2c3d4e[ARGS]{}[TOOL_CALLS]get_weather[CALL_ID]"
                        "000000000[ARGS]{\"city\": \"Rome\"}") == 1);
    CHECK(accepts(g, n, "[TOOL_CALLS]get_time[ARGS]{}") == 0);
    free(g);
    static const split_case small[] = {
        { 1, "Let me check.[TOOL_CALLS]get_time[CALL_ID]a1b2c3d4e[ARGS]{}[TOOL_CALLS]get_weather[CALL_ID]"
             "000000000[ARGS]{\"city\": \"Rome\"}",
          "Let me check.|#0 get_time[a1b2c3d4e]({})#1 get_weather[000000000]({\"city\": \"Rome\"})|1" },
        { 0, "[TOOL_CALLS]get_time[CALL_ID]a1b2c3d4e[ARGS]{\"x\": [1", "|#0 get_time[a1b2c3d4e]({\"x\": [1)|0" },
    };
    run_cases(&f, "small", small, sizeof small / sizeof small[0]);
    web_toolfmt_free(&f);
    web_tools_free(&t);
    json_decref(req);
}

/* A harmony template (gpt-oss's layout, written here): a call is a message
 * of its own, `<|start|>assistant to=functions.NAME<|channel|>commentary
 * json<|message|>ARGS<|call|>`, one per turn, after the generation prompt
 * `<|start|>assistant`. */
#define HARMONY_TMPL                                                                                                  \
    "{%- set ns = namespace(last='') -%}{%- for m in messages -%}{%- if m.role == 'user' -%}"                        \
    "<|start|>user<|message|>{{ m.content }}<|end|>{%- elif m.role == 'assistant' and m.tool_calls -%}"               \
    "{%- set c = m.tool_calls[0].function -%}{%- set ns.last = c.name -%}"                                             \
    "<|start|>assistant to=functions.{{ c.name }}<|channel|>commentary json<|message|>{{ c.arguments | tojson }}"     \
    "<|call|>{%- elif m.role == 'assistant' -%}<|start|>assistant<|channel|>final<|message|>{{ m.content }}<|end|>"   \
    "{%- elif m.role == 'tool' -%}<|start|>functions.{{ ns.last }} to=assistant<|channel|>commentary<|message|>"     \
    "{{ m.content | tojson }}<|end|>{%- endif -%}{%- endfor -%}{%- if add_generation_prompt -%}<|start|>assistant"   \
    "{%- endif -%}"

/* Harmony's calls: the recipient in the header, the arguments the message,
 * one call per answer; what comes before it (the reasoning's message and
 * the next header) is text for the channels' split. */
static void check_harmony(void)
{
    web_toolfmt f;
    web_toolfmt_detect(HARMONY_TMPL, strlen(HARMONY_TMPL), "", "<|return|>", stops, sizeof stops / sizeof stops[0],
                       &f);
    REQUIRE_V(f.ok);
    CHECKF(!strcmp(f.open, "to=functions.") && !strcmp(f.mid, "<|channel|>commentary json<|message|>") &&
           !strcmp(f.close, "") && !f.sep && !strcmp(f.trigger, "to=functions.") && f.lead && !strcmp(f.lead, " ") &&
           !f.id_len && !f.bare_open, "harmony: open [%s] mid [%s] close [%s] trigger [%s]", f.open, f.mid, f.close,
           f.trigger);
    json_t *req = json_loads("{\"tools\": [" WEATHER ", " CLOCK "], \"tool_choice\": \"required\"}", 0, NULL);
    web_tools t;
    em_web_error e = { 0 };
    REQUIRE_V(!web_tools_parse(req, &t, &e));
    char *g;
    size_t n;
    REQUIRE_V(!web_tools_gbnf(&f, &t, &g, &n, &e));
    CHECK(accepts(g, n, " to=functions.get_time<|channel|>commentary json<|message|>{}") == 1);
    CHECK(accepts(g, n, "to=functions.get_time<|channel|>commentary json<|message|>{}") == 0);   /* the lead */
    CHECK(accepts(g, n, " to=functions.get_time<|channel|>commentary json<|message|>{}to=functions.get_time"
                        "<|channel|>commentary json<|message|>{}") == 0);   /* one call */
    free(g);
    static const split_case cases[] = {
        { 1, "<|channel|>analysis<|message|>The user wants the time.<|end|><|start|>assistant to=functions.get_time"
             "<|channel|>commentary json<|message|>{\"tz\": \"UTC\"}",
          "<|channel|>analysis<|message|>The user wants the time.<|end|><|start|>assistant|#0 get_time("
          "{\"tz\": \"UTC\"})|1" },
        { 0, " to=functions.get_weather<|channel|>commentary json<|message|>{\"city\": \"Oslo\"}",
          "|#0 get_weather({\"city\": \"Oslo\"})|1" },
        { 1, "<|channel|>final<|message|>It is noon.", "<|channel|>final<|message|>It is noon.||0" },
    };
    run_cases(&f, "harmony", cases, sizeof cases / sizeof cases[0]);
    web_toolfmt_free(&f);
    web_tools_free(&t);
    json_decref(req);
}

static long bare(const char *s)
{
    return web_tools_bare_start(s, strlen(s), "{\"name\":");
}

static void check_bare_start(void)
{
    CHECK(bare("") == -1);
    CHECK(bare("  \n") == -1);
    CHECK(bare("{\"na") == -1);
    CHECK(bare("{ \"name\" :") == 10);
    CHECK(bare("```json\n{\"name\": \"") == 16);
    CHECK(bare("``") == -1);
    CHECK(bare("```json") == -1);
    CHECK(bare("```json x") == -2);
    CHECK(bare("Sure") == -2);
    CHECK(bare("{\"city\"") == -2);
}

/* s split by the think block it may begin with (in pieces of step bytes;
 * 0: whole): "reasoning|answer|tokens that were reasoning". */
static void run_think(const web_thinkfmt *f, int inside, const char *s, size_t step, em_buf *out)
{
    web_think t;
    web_think_init(&t, f, inside);
    em_buf r = { 0 }, a = { 0 };
    size_t n = strlen(s);
    int in = 0;
    for (size_t i = 0; i < n; i += step ? step : n)
        in += web_think_feed(&t, s + i, step && step < n - i ? step : n - i, &r, &a);
    web_think_finish(&t, &r, &a);
    web_think_free(&t);
    em_buf_reset(out);
    em_buf_addf(out, "%s|%s|%d", r.s ? r.s : "", a.s ? a.s : "", step == 0 ? in : -1);
    em_buf_free(&r);
    em_buf_free(&a);
}

static void check_reasoning(void)
{
    static const struct { const char *name, *open, *close; int from_template; } want[] = {
        { "Qwen-Qwen3-0.6B", "<think>", "</think>", 1 },                        /* renders reasoning_content */
        { "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", "<think>", "</think>", 1 }, /* strips it from history */
        { "HuggingFaceTB-SmolLM2-135M-Instruct", "<think>", "</think>", 0 },     /* none: the convention */
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        char path[512];
        snprintf(path, sizeof path, "golden/templates/%s.jinja", want[i].name);
        size_t n;
        char *src = test_read_file(test_shared(path), &n);
        REQUIRE_V(src);
        web_thinkfmt f;
        web_thinkfmt_detect(src, n, "<s>", "</s>", &f);
        CHECKF(!strcmp(f.open, want[i].open) && !strcmp(f.close, want[i].close) &&
               f.from_template == want[i].from_template, "%s: %s %s %d", want[i].name, f.open, f.close,
               f.from_template);
        free(src);
    }
    web_thinkfmt f;
    web_thinkfmt_detect(NULL, 0, "", "", &f);
    CHECK(!strcmp(f.open, "<think>") && !f.from_template);
    const char *opens = "<|im_start|>assistant\n<think>\n", *closed = "<|im_start|>assistant\n<think>\n\n</think>\n\n";
    CHECK(web_think_prompt_opens(&f, opens, strlen(opens)));
    CHECK(!web_think_prompt_opens(&f, closed, strlen(closed)));
    static const struct { int inside; const char *in, *want; } cases[] = {
        { 0, "<think>\nLet me see.\nSeven.\n</think>\n\nIt is prime.", "Let me see.\nSeven.|It is prime.|" },
        { 0, "  <think>x</think>y", "x|y|" },
        { 0, "No block here. <think>not at the start</think>", "|No block here. <think>not at the start</think>|" },
        { 0, "<thin", "|<thin|" },
        { 0, "<think>cut off before the end", "cut off before the end||" },
        { 0, "<think>\n\n</think>\n\nJust the answer.", "|Just the answer.|" },
        { 0, "<think>a </ b </thin c</think>d", "a </ b </thin c|d|" },
        { 1, "Already inside.\n</think>\n\nAnswer", "Already inside.|Answer|" },
        { 0, "", "||" },
    };
    em_buf whole = { 0 }, piece = { 0 };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        run_think(&f, cases[i].inside, cases[i].in, 0, &whole);
        char *bar = strrchr(whole.s, '|');
        CHECKF(!strncmp(whole.s, cases[i].want, (size_t)(bar - whole.s) + 1), "think case %zu: [%s]", i, whole.s);
        for (size_t step = 1; step < 9; step++) {
            run_think(&f, cases[i].inside, cases[i].in, step, &piece);
            CHECKF(!strncmp(piece.s, whole.s, (size_t)(bar - whole.s) + 1), "think case %zu step %zu: [%s]", i,
                   step, piece.s);
        }
    }
    em_buf_free(&whole);
    em_buf_free(&piece);
}

int main(int argc, char **argv)
{
    if (argc > 1) {   /* a survey: test_tools NAME... prints what each template gives */
        for (int i = 1; i < argc; i++) {
            web_toolfmt f;
            if (detect(argv[i], &f))
                return 1;
            printf("%s: ", argv[i]);
            if (!f.ok) {
                printf("none: %s\n", f.why);
                continue;
            }
            printf("trigger [");
            esc(f.trigger);
            printf("] open [");
            esc(f.open);
            printf("] mid [");
            esc(f.mid);
            printf("] sep [");
            esc(f.sep ? f.sep : "(none)");
            printf("] close [");
            esc(f.close);
            printf("] bare [");
            esc(f.bare_open ? f.bare_open : "(none)");
            printf("|");
            esc(f.bare_close ? f.bare_close : "(none)");
            printf("]\n");
            web_toolfmt_free(&f);
        }
        return 0;
    }
    /* the formats of the corpus's templates */
    static const struct { const char *name, *open, *mid, *sep, *close, *trigger, *why; } want[] = {
        { "Qwen-Qwen2.5-7B-Instruct", "<tool_call>\n{\"name\": \"", "\", \"arguments\": ",
          "}\n</tool_call>\n<tool_call>\n{\"name\": \"", "}\n</tool_call>", "<tool_call>", NULL },
        /* the empty think block before the last assistant turn is not the call's */
        { "Qwen-Qwen3-0.6B", "<tool_call>\n{\"name\": \"", "\", \"arguments\": ",
          "}\n</tool_call>\n<tool_call>\n{\"name\": \"", "}\n</tool_call>", "<tool_call>", NULL },
        { "meta-llama-Llama-3.1-8B-Instruct", "{\"name\": \"", "\", \"parameters\": ", NULL, "}",
          "{\"name\": \"", NULL },
        { "meta-llama-Llama-3.2-3B-Instruct", "{\"name\": \"", "\", \"parameters\": ", NULL, "}",
          "{\"name\": \"", NULL },
        /* Mistral's: each call's id after its arguments (Nemo, Large) or
         * after its name (Small 3.2), [TOOL_CALLS] the control token */
        { "mistralai-Mistral-Nemo-Instruct-2407", "[TOOL_CALLS][{\"name\": \"", "\", \"arguments\": ",
          ", \"id\": \"\x01\"}, {\"name\": \"", ", \"id\": \"\x01\"}]", "[TOOL_CALLS]", NULL },
        { "test-Mistral-Large-2407-v3", "[TOOL_CALLS] [{\"name\": \"", "\", \"arguments\": ",
          ", \"id\": \"\x01\"}, {\"name\": \"", ", \"id\": \"\x01\"}]", "[TOOL_CALLS]", NULL },
        { "Mistral-Small-3.2-24B-Instruct-2506", "[TOOL_CALLS]", "[CALL_ID]\x01[ARGS]", "[TOOL_CALLS]", "",
          "[TOOL_CALLS]", NULL },
        { "Qwen3-Coder", NULL, NULL, NULL, NULL, NULL, "arguments as a JSON object" },
        { "HuggingFaceTB-SmolLM2-135M-Instruct", NULL, NULL, NULL, NULL, NULL, "does not render" },
        { "ibm-granite-granite-3.3-2B-Instruct", NULL, NULL, NULL, NULL, NULL, "does not render" },
    };
    if (!test_shared_dir()) {
        printf("SKIP: no shared folder\n");
        return 77;
    }
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        web_toolfmt f;
        if (detect(want[i].name, &f))
            return 1;
        if (want[i].why) {
            CHECKF(!f.ok && strstr(f.why, want[i].why), "%s: %s", want[i].name, f.why);
            continue;
        }
        CHECKF(f.ok, "%s: %s", want[i].name, f.why);
        if (!f.ok)
            continue;
        CHECKF(!strcmp(f.open, want[i].open), "%s open [%s]", want[i].name, f.open);
        CHECKF(!strcmp(f.mid, want[i].mid), "%s mid [%s]", want[i].name, f.mid);
        CHECKF(want[i].sep ? f.sep && !strcmp(f.sep, want[i].sep) : !f.sep, "%s sep [%s]", want[i].name,
               f.sep ? f.sep : "(none)");
        CHECKF(!strcmp(f.close, want[i].close), "%s close [%s]", want[i].name, f.close);
        CHECKF(!strcmp(f.trigger, want[i].trigger), "%s trigger [%s]", want[i].name, f.trigger);
        web_toolfmt_free(&f);
    }
    web_toolfmt none;
    web_toolfmt_detect(NULL, 0, "", "", stops, 1, &none);
    CHECK(!none.ok && strstr(none.why, "no chat template"));

    /* the request's tools */
    web_toolfmt f;
    REQUIRE(!detect("Qwen-Qwen2.5-7B-Instruct", &f) && f.ok);
    check_requests();
    check_bare_start();
    check_grammar(&f);
    check_parser(&f);
    check_reasoning();
    web_toolfmt_free(&f);
    check_ids();
    check_harmony();
    return test_summary("tools");
}
