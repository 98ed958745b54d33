/* test_tmpl.c — core/chat_tmpl as a language: the table tmpl_cases.json
 * (argv[1]; 280 small templates whose expected outputs Jinja2 3.1 rendered
 * in transformers' configuration, 96 of them errors), error messages with
 * line and column, raise_exception's message, unknown filters and tests in
 * Jinja's soft frames (errors only when run), hostile templates stopped by
 * each bound with EM_ERANGE (fast, no crash), the ChatML fallback,
 * em_chat_render and em_chat_gguf_template, renders from several threads,
 * and random mutations and truncations of the corpus templates that must
 * never crash (bounded count; those need ../shared and are skipped
 * without it). */
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/model/gguf.h"
#include "core/tmpl/chat_tmpl.h"
#include "tests/common/testutil.h"

static struct tm fixed_now = { .tm_year = 125, .tm_mon = 2, .tm_mday = 14, .tm_hour = 9, .tm_min = 26,
                               .tm_sec = 53, .tm_wday = 5, .tm_yday = 72 };
static const em_tmpl_opts opts = { .now = &fixed_now };

/* Parse and render src with vars (a JSON text, may be NULL); returns the
 * code, *out the text (caller frees) or NULL. */
static int render(const char *src, const char *vars_json, char **out, size_t *out_len, em_err *err)
{
    json_t *vars = NULL;
    if (vars_json) {
        json_error_t je;
        vars = json_loads(vars_json, 0, &je);
        if (!vars) {
            fprintf(stderr, "bad vars in the test: %s\n", je.text);
            return -100;
        }
    }
    em_tmpl *t = NULL;
    *out = NULL;
    *out_len = 0;
    int rc = em_tmpl_parse(src, strlen(src), &t, err);
    if (!rc)
        rc = em_tmpl_render(t, vars, &opts, out, out_len, err);
    em_tmpl_destroy(t);
    json_decref(vars);
    return rc;
}

static void check_out(const char *what, const char *src, const char *vars, const char *want)
{
    char *out;
    size_t len;
    em_err err = { 0 };
    int rc = render(src, vars, &out, &len, &err);
    CHECKF(rc == 0, "%s: failed: %s", what, err.msg);
    if (!rc)
        CHECKF(len == strlen(want) && !memcmp(out, want, len), "%s: got [%.*s], expected [%s]", what, (int)len,
               out, want);
    free(out);
}

/* src must fail with code (0: any) and a message containing each needle. */
static void check_err(const char *what, const char *src, const char *vars, int code, const char *needle,
                      const char *needle2)
{
    char *out;
    size_t len;
    em_err err = { 0 };
    double t0 = (double)clock() / CLOCKS_PER_SEC;
    int rc = render(src, vars, &out, &len, &err);
    double dt = (double)clock() / CLOCKS_PER_SEC - t0;
    CHECKF(rc != 0, "%s: rendered [%.60s]", what, out ? out : "");
    CHECKF(out == NULL, "%s: output on error", what);
    if (code)
        CHECKF(rc == code, "%s: code %d (%s), expected %d: %s", what, rc, em_err_str(rc), code, err.msg);
    if (needle)
        CHECKF(strstr(err.msg, needle) != NULL, "%s: message [%s] lacks [%s]", what, err.msg, needle);
    if (needle2)
        CHECKF(strstr(err.msg, needle2) != NULL, "%s: message [%s] lacks [%s]", what, err.msg, needle2);
    CHECKF(!strncmp(err.msg, "template: ", 10), "%s: message [%s] does not start with 'template: '", what, err.msg);
    CHECKF(dt < 20, "%s: took %.1f s", what, dt);
    free(out);
}

static void table(const char *path)
{
    json_error_t je;
    json_t *cases = json_load_file(path, 0, &je);
    CHECKF(cases && json_is_array(cases), "cannot read %s: %s", path, je.text);
    size_t n = json_array_size(cases), ok = 0, errors = 0;
    for (size_t i = 0; i < n; i++) {
        json_t *cs = json_array_get(cases, i);
        const char *src = json_string_value(json_object_get(cs, "template"));
        json_t *vars = json_object_get(cs, "vars");
        json_t *want = json_object_get(cs, "expected");
        em_tmpl *t = NULL;
        em_err err = { 0 };
        char *out = NULL;
        size_t len = 0;
        int rc = em_tmpl_parse(src, strlen(src), &t, &err);
        if (!rc)
            rc = em_tmpl_render(t, vars, &opts, &out, &len, &err);
        if (!want) {
            errors++;
            CHECKF(rc != 0, "case %zu [%s]: rendered [%s], Jinja2 raised %s", i, src, out ? out : "",
                   json_string_value(json_object_get(cs, "error")));
            CHECKF(rc == 0 || !strncmp(err.msg, "template: line ", 15), "case %zu: message [%s]", i, err.msg);
            ok += rc != 0;
        } else if (rc) {
            CHECKF(0, "case %zu [%s]: failed: %s", i, src, err.msg);
        } else {
            const char *w = json_string_value(want);
            int same = len == json_string_length(want) && !memcmp(out, w, len);
            CHECKF(same, "case %zu [%s]:\n  got      [%.*s]\n  expected [%s]", i, src, (int)len, out, w);
            ok += same;
        }
        free(out);
        em_tmpl_destroy(t);
    }
    printf("tmpl: table: %zu/%zu cases as Jinja2 (%zu of them errors)\n", ok, n, errors);
    CHECKF(n > 200, "the table has only %zu cases", n);
    json_decref(cases);
}

static void messages_and_locations(void)
{
    check_err("unknown filter", "ab\n{{ x | foo }}", NULL, EM_EFORMAT, "line 2, col 8", "unknown filter 'foo'");
    check_err("unknown test", "{{ x is bar }}", NULL, EM_EFORMAT, "line 1, col 9", "unknown test 'bar'");
    check_err("unknown tag", "\n\n  {% frobnicate %}", NULL, EM_EFORMAT, "line 3, col 6", "unknown tag 'frobnicate'");
    check_err("unclosed for", "{% for m in messages %}\nx", NULL, EM_EFORMAT, "line 2, col 2", "'endfor' or 'else'");
    check_err("unclosed string", "{{ 'abc }}", NULL, EM_EFORMAT, "line 1, col 4", "unterminated string");
    check_err("bad char", "{{ a ! b }}", NULL, EM_EFORMAT, "line 1, col 6", "unexpected character '!'");
    check_err("unexpected end", "{{ 1 +", NULL, EM_EFORMAT, "line 1, col 7", "unexpected end of template");
    check_err("col counts characters", "é€😀{{ 1 + }}", NULL, EM_EFORMAT, "line 1, col 11", NULL);
    check_err("CRLF lines", "a\r\nb\r\n{{ x|nope }}", NULL, EM_EFORMAT, "line 3", NULL);
    check_err("break outside loop", "{% if true %}{% break %}{% endif %}", NULL, EM_EFORMAT, "line 1, col 17",
              "'break' outside of a loop");
    check_err("str + int", "{% for i in [1] %}\n  {{ 'a' + i }}\n{% endfor %}", NULL, EM_EINVAL, "line 2",
              "can only concatenate str (not \"int\") to str");
    check_err("undefined attribute", "{{ messages[0].content.x }}", "{\"messages\": []}", EM_EINVAL, "line 1",
              "has no element 0");
    check_err("attribute of undefined", "{{ nothing.here }}", NULL, EM_EINVAL, "line 1, col", "'nothing' is undefined");
    check_err("call non-callable", "{{ messages() }}", "{\"messages\": []}", EM_EINVAL, NULL, "'list' object is not callable");
    check_err("raise_exception", "{%- if messages[0].role == 'system' %}\n  {{- raise_exception('System role not supported') }}\n{%- endif %}",
              "{\"messages\": [{\"role\": \"system\", \"content\": \"x\"}]}", EM_EINVAL, "line 2, col",
              "System role not supported");
    check_err("raise_exception with newline", "{{ raise_exception('two\\nlines') }}", NULL, EM_EINVAL,
              "two\\x0alines", NULL);
    check_err("mutating method", "{{ messages.append(1) }}", "{\"messages\": []}", EM_EINVAL, NULL,
              "access to attribute 'append' of 'list' object is unsafe");
    check_err("not UTF-8", "ok\n{{ '\xff' }}", NULL, EM_EFORMAT, "line 2, col 5", "not valid UTF-8");
    check_err("vars not an object", "x", "[1]", EM_EINVAL, "variables must be a JSON object", NULL);
    check_err("\\N escapes", "{{ '\\N{BULLET}' }}", NULL, EM_EFORMAT, "line 1, col 5", "not supported");
    check_err("unsupported filter", "{{ x|groupby('a') }}", NULL, EM_EFORMAT, "line 1, col 6",
              "filter 'groupby' is not supported");
    check_err("include", "{% include 'other.jinja' %}", NULL, EM_EFORMAT, "line 1, col 4", "'include' is not supported");
    check_out("no variables", "{{ messages|length }}|{{ bos_token }}|", NULL, "0||");
}

/* An unknown filter or test in what Jinja's compiler calls a soft frame (an
 * if statement's conditions and branches, a whole conditional expression)
 * parses, and fails with EM_EINVAL at its own line and column only when it
 * runs; the bodies of for, macro, call, filter, set and with blocks are not
 * soft again (Frame.inner()). The table holds these rules as Jinja2 renders
 * them; here the codes and locations. */
static void soft_frames(void)
{
    const char *branch = "{% if c %}\n  {{ x | from_json }}\n{% endif %}ok";
    check_out("unknown filter in an if, not run", branch, NULL, "ok");
    check_err("unknown filter in an if, run", branch, "{\"c\": 1}", EM_EINVAL, "line 2, col 10",
              "unknown filter 'from_json'");
    check_err("unknown test in an if's condition", "{% if x is bar %}{% endif %}", NULL, EM_EINVAL, "line 1, col 12",
              "unknown test 'bar'");
    check_out("unknown test in an elif, not run", "{% if c %}a{% elif x is not bar(1) %}b{% endif %}", "{\"c\": 1}",
              "a");
    const char *refused = "{% if c %}{{ x|groupby('a') }}{% endif %}";
    check_out("refused filter in an if, not run", refused, NULL, "");
    check_err("refused filter in an if, run", refused, "{\"c\": 1}", EM_EINVAL, "line 1, col 16",
              "filter 'groupby' is not supported by ember");
    check_err("operand before the unknown filter", "{% if c %}{{ (1 / 0)|nope }}{% endif %}", "{\"c\": 1}",
              EM_EINVAL, NULL, "division by zero");
    check_out("if inside a for",
              "{% for i in [1, 2] %}{% if i is string %}{{ i|from_json }}{% endif %}{{ i }}{% endfor %}", NULL, "12");
    check_err("for body inside an if", "{% if c %}\n{% for i in y %}{{ i|nope }}{% endfor %}{% endif %}", NULL,
              EM_EFORMAT, "line 2, col 22", "unknown filter 'nope'");
    check_err("for filter inside an if", "{% if c %}{% for i in y if i is nope %}{% endfor %}{% endif %}", NULL,
              EM_EFORMAT, "line 1, col 33", "unknown test 'nope'");
    check_out("for iterable inside an if", "{% if c %}{% for i in y|nope %}{% endfor %}{% endif %}ok", NULL, "ok");
    check_err("macro body inside an if", "{% if c %}{% macro m() %}{{ 1 is nope }}{% endmacro %}{% endif %}", NULL,
              EM_EFORMAT, "line 1, col 34", "unknown test 'nope'");
    check_err("call body inside an if",
              "{% macro m() %}{% endmacro %}{% if c %}{% call m() %}{{ 1|nope }}{% endcall %}{% endif %}", NULL,
              EM_EFORMAT, NULL, "unknown filter 'nope'");
    check_err("filter block inside an if", "{% if c %}{% filter groupby('a') %}{% endfilter %}{% endif %}", NULL,
              EM_EFORMAT, "line 1, col 21", "filter 'groupby' is not supported by ember");
    check_out("inline conditional, not run", "{{ x|nope if c else 'no' }}", NULL, "no");
    check_err("inline conditional, run", "{{ 'a' if c else\n x|from_json }}", NULL, EM_EINVAL, "line 2, col 4",
              "unknown filter 'from_json'");
    check_err("filter of a conditional", "{{ (1 if c else 2)|nope }}", NULL, EM_EFORMAT, "line 1, col 20",
              "unknown filter 'nope'");
    check_err("call argument, no conditional", "{{ f(x|nope) }}{{ 1 if c else 2 }}", NULL, EM_EFORMAT,
              "line 1, col 8", "unknown filter 'nope'");
    check_err("the unknown one outside the conditional", "{{ [x|nope if c else 1, y|nope2] }}", NULL, EM_EFORMAT,
              "line 1, col 27", "unknown filter 'nope2'");
    check_err("a syntax error first, as Jinja parses before it compiles", "{{ x|nope + }}", NULL, EM_EFORMAT, NULL,
              "unexpected end of print statement");
    /* DeepSeek-V3.2's pattern: from_json for arguments given as a string */
    const char *ds = "{%- for tool in tool_calls %}\n{%- set args = tool.function.arguments %}\n"
                     "{%- if args is string %}\n{%- set args = args | from_json %}\n{%- endif %}\n"
                     "{{ tool.function.name }}({{ args | tojson }})\n{%- endfor %}";
    check_out("from_json not run", ds,
              "{\"tool_calls\": [{\"function\": {\"name\": \"f\", \"arguments\": {\"a\": 1}}},"
              " {\"function\": {\"name\": \"g\", \"arguments\": {}}}]}",
              "f({\"a\": 1})g({})");
    check_err("from_json run", ds, "{\"tool_calls\": [{\"function\": {\"name\": \"f\", \"arguments\": \"{}\"}}]}",
              EM_EINVAL, "line 4, col 23", "unknown filter 'from_json'");
}

/* A string of n copies of piece between head and tail (malloc'd). */
static char *repeat(const char *head, const char *piece, size_t n, const char *tail)
{
    size_t hl = strlen(head), pl = strlen(piece), tl = strlen(tail);
    char *s = malloc(hl + pl * n + tl + 1);
    memcpy(s, head, hl);
    for (size_t i = 0; i < n; i++)
        memcpy(s + hl + i * pl, piece, pl);
    memcpy(s + hl + pl * n, tail, tl + 1);
    return s;
}

static void hostile(void)
{
    char *s;
    s = repeat("{{ ", "(", 100000, "1 }}");
    check_err("100000 parentheses", s, NULL, EM_ERANGE, "EM_TMPL_MAX_NESTING", NULL);
    free(s);
    s = repeat("{{ ", "[", 100000, "");
    check_err("100000 brackets", s, NULL, EM_ERANGE, "EM_TMPL_MAX_NESTING", NULL);
    free(s);
    s = repeat("", "{%if 1%}", 100000, "x");
    check_err("100000 ifs", s, NULL, EM_ERANGE, "EM_TMPL_MAX_NESTING", NULL);
    free(s);
    s = repeat("{{ ", "not ", 100000, "x }}");
    check_err("100000 nots", s, NULL, EM_ERANGE, "EM_TMPL_MAX_NESTING", NULL);
    free(s);
    s = repeat("{{ ", "-", 100000, "1 }}");
    check_err("100000 minus signs", s, NULL, EM_ERANGE, "EM_TMPL_MAX_NESTING", NULL);
    free(s);
    s = repeat("{{ 1", " + 1", 100000, " }}");
    check_err("100000 additions", s, NULL, EM_ERANGE, "EM_TMPL_MAX_DEPTH", NULL);
    free(s);
    s = repeat("{{ 'x'", "|upper", 100000, " }}");
    check_err("100000 filters", s, NULL, EM_ERANGE, "EM_TMPL_MAX_DEPTH", NULL);
    free(s);
    s = repeat("{{ x", ".a", 100000, " }}");
    check_err("100000 attributes", s, "{\"x\": {}}", 0, NULL, NULL);
    free(s);
    s = repeat("{{ 1 if x else ", "2 if x else ", 80000, "3 }}");
    check_err("100000 conditionals", s, NULL, EM_ERANGE, "EM_TMPL_MAX_NESTING", NULL);
    free(s);
    s = repeat("", "{% for i in [1] %}", 1000, "");
    check_err("1000 unclosed fors", s, NULL, EM_ERANGE, "EM_TMPL_MAX_NESTING", NULL);
    free(s);
    check_err("range(100000000)", "{% for i in range(100000000) %}x{% endfor %}", NULL, EM_ERANGE, "MAX_RANGE", NULL);
    check_err("nested loops", "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
              NULL, EM_ERANGE, "EM_TMPL_MAX_STEPS", NULL);
    check_err("string doubling", "{% set ns = namespace(s='x') %}{% for i in range(100) %}{% set ns.s = ns.s ~ ns.s %}"
              "{% endfor %}", NULL, EM_ERANGE, "EM_TMPL_MAX_STRING", NULL);
    check_err("string repetition", "{{ 'x' * 100000000 }}", NULL, EM_ERANGE, "EM_TMPL_MAX_STRING", NULL);
    check_err("list repetition", "{{ [1] * 100000000 }}", NULL, EM_ERANGE, "EM_TMPL_MAX_ITEMS", NULL);
    check_err("recursive macro", "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", NULL, EM_ERANGE,
              "EM_TMPL_MAX_CALL_DEPTH", NULL);
    check_err("mutually recursive macros", "{% macro a() %}{{ b() }}{% endmacro %}{% macro b() %}{{ a() }}{% endmacro %}"
              "{{ a() }}", NULL, EM_ERANGE, "EM_TMPL_MAX_CALL_DEPTH", NULL);
    check_err("huge output", "{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}", NULL, EM_ERANGE, "16 MiB", NULL);
    check_err("quadratic list", "{% set ns = namespace(l=[]) %}{% for i in range(100000) %}{% set ns.l = ns.l + [i] %}"
              "{% endfor %}", NULL, EM_ERANGE, "EM_TMPL_MAX_STEPS", NULL);
    check_err("memory", "{% set ns = namespace(l=[]) %}{% for i in range(100) %}{% set ns.l = ns.l + ['x' * 4000000 ~ i] %}"
              "{% endfor %}", NULL, EM_ERANGE, "EM_TMPL_MAX_MEMORY", NULL);
    check_err("deep value", "{% set ns = namespace(l=[]) %}{% for i in range(1000) %}{% set ns.l = [ns.l] %}{% endfor %}",
              NULL, EM_ERANGE, "EM_TMPL_MAX_VALUE_DEPTH", NULL);
    check_err("namespace cycle printed", "{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}", NULL, EM_ERANGE,
              "EM_TMPL_MAX_DEPTH", NULL);
    check_out("namespace cycle freed", "{% set ns = namespace() %}{% set ns.me = ns %}{% set ns.l = [ns, ns] %}ok",
              NULL, "ok");
    check_out("macro in its own scope", "{% macro m() %}{% endmacro %}{% set ns = namespace(m=m) %}{% set ns.ns = ns %}ok",
              NULL, "ok");
    /* a large template within the source limit parses and renders */
    s = repeat("", "{{ 'ab' }}{% if true %}c{% endif %}\n", 20000, "");
    char *out;
    size_t len;
    em_err err = { 0 };
    CHECKF(render(s, NULL, &out, &len, &err) == 0 && len == 60000, "large template: %s", err.msg);
    free(out);
    free(s);
    s = malloc(EM_TMPL_MAX_SOURCE + 2);
    memset(s, 'a', EM_TMPL_MAX_SOURCE + 1);
    s[EM_TMPL_MAX_SOURCE + 1] = '\0';
    check_err("source limit", s, NULL, EM_ERANGE, "EM_TMPL_MAX_SOURCE", NULL);
    free(s);

    /* max_output: a render that would write more stops there (a string built
     * inside may be longer: only the output counts) */
    em_tmpl *t = NULL;
    const char *src = "{% set x = 'abcdefgh' * 100 %}{{ x | length }}{% for i in range(n) %}<{{ i }}>{% endfor %}";
    CHECK(em_tmpl_parse(src, strlen(src), &t, NULL) == 0);
    json_t *small = json_pack("{s:i}", "n", 10), *large = json_pack("{s:i}", "n", 100000);
    em_tmpl_opts capped = { .now = &fixed_now, .max_output = 64 };
    char *o = NULL;
    size_t n = 0;
    em_err e = { 0 };
    CHECK(em_tmpl_render(t, small, &capped, &o, &n, &e) == 0);
    CHECK(n == 3 + 10 * 3 && o && strncmp(o, "800<0><1>", 9) == 0);
    free(o);
    o = NULL;
    CHECK(em_tmpl_render(t, large, &capped, &o, &n, &e) == EM_ERANGE);
    CHECK(!o && strstr(e.msg, EM_TMPL_OUTPUT_CAPPED) && strstr(e.msg, "64 bytes"));
    json_decref(small);
    json_decref(large);
    em_tmpl_destroy(t);
}

static void fallback_and_chat(void)
{
    json_error_t je;
    json_t *msgs = json_loads("[{\"role\": \"system\", \"content\": \"S\"}, {\"role\": \"user\", \"content\": \"Hi é\"}]",
                              0, &je);
    char *out = NULL;
    size_t len = 0;
    em_err err = { 0 };
    int rc = em_chat_render(NULL, 0, msgs, 1, "<s>", "</s>", NULL, &opts, &out, &len, &err);
    const char *want = "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nHi é<|im_end|>\n<|im_start|>assistant\n";
    CHECKF(rc == 0 && out && !strcmp(out, want), "ChatML fallback: %s [%s]", err.msg, out ? out : "");
    free(out);
    rc = em_chat_render(NULL, 0, msgs, 0, NULL, NULL, NULL, &opts, &out, &len, &err);
    CHECKF(rc == 0 && out && len == strlen(want) - strlen("<|im_start|>assistant\n"), "fallback without prompt");
    free(out);
    const char *tm = "{{ bos_token }}{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}{{ eos_token }}"
                     "{{ tools|length }}{{ documents is none }}{{ add_generation_prompt }}";
    json_t *tools = json_loads("[{\"name\": \"f\"}]", 0, &je);
    rc = em_chat_render(tm, strlen(tm), msgs, 1, "<B>", "<E>", tools, &opts, &out, &len, &err);
    CHECKF(rc == 0 && out && !strcmp(out, "<B>[system]S[user]Hi é<E>1TrueTrue"), "em_chat_render: %s [%s]", err.msg,
           out ? out : "");
    free(out);
    rc = em_chat_render(tm, strlen(tm), tools, 1, "\xff", "", NULL, &opts, &out, &len, &err);
    CHECKF(rc == EM_EINVAL && !out, "bad BOS text refused");
    json_t *notarr = json_object();
    rc = em_chat_render(tm, strlen(tm), notarr, 1, "", "", NULL, &opts, &out, &len, &err);
    CHECKF(rc == EM_EINVAL && !out, "messages must be an array");
    json_decref(notarr);
    json_decref(tools);
    /* default clock: the current year */
    em_tmpl *t = NULL;
    const char *y = "{{ strftime_now('%Y') }}";
    rc = em_tmpl_parse(y, strlen(y), &t, &err);
    if (!rc)
        rc = em_tmpl_render(t, NULL, NULL, &out, &len, &err);
    CHECKF(rc == 0 && len == 4 && out[0] == '2', "strftime_now with the real clock: [%s]", out ? out : "");
    free(out);
    em_tmpl_destroy(t);
    em_tmpl_destroy(NULL);
    json_decref(msgs);
    /* tokenizer.chat_template from a GGUF */
    em_gguf_writer *w = NULL;
    char *buf = NULL;
    size_t blen = 0;
    FILE *f = open_memstream(&buf, &blen);
    CHECK(f && em_gguf_writer_create(32, &w, NULL) == 0);
    em_gguf_w_str(w, "general.architecture", "llama");
    em_gguf_w_str(w, "tokenizer.chat_template", "{{ 'T' }}");
    CHECK(em_gguf_w_header(w, f, NULL) == 0 && em_gguf_w_finish(w, NULL) == 0);
    fclose(f);
    em_gguf *g = NULL;
    CHECKF(em_gguf_open_mem(buf, blen, "mem.gguf", &g, &err) == 0, "open: %s", err.msg);
    const char *src = NULL;
    size_t slen = 0;
    CHECK(em_chat_gguf_template(g, &src, &slen) == 0 && src && slen == 9 && !memcmp(src, "{{ 'T' }}", 9));
    em_gguf_close(g);
    em_gguf_writer_destroy(w);
    free(buf);
    CHECK(em_chat_gguf_template(NULL, &src, &slen) == 0 && src == NULL && slen == 0);
}

typedef struct {
    const em_tmpl *t;
    const json_t  *vars;
    const char    *want;
    int            bad;
} thread_job;

static void *thread_main(void *arg)
{
    thread_job *j = arg;
    for (int i = 0; i < 40; i++) {
        char *out = NULL;
        size_t len;
        if (em_tmpl_render(j->t, j->vars, &opts, &out, &len, NULL) || strcmp(out, j->want))
            j->bad++;
        free(out);
    }
    return NULL;
}

static void threads(void)
{
    const char *src = "{% set ns = namespace(n=0) %}{% macro m(x) %}<{{ x|upper }}>{% endmacro %}"
                      "{% for v in vals %}{{ m(v) }}{% set ns.n = ns.n + 1 %}{% endfor %}{{ ns.n }}{{ 'k'|tojson }}";
    em_tmpl *t = NULL;
    json_t *vars = json_loads("{\"vals\": [\"a\", \"b\", \"c\"]}", 0, NULL);
    CHECK(em_tmpl_parse(src, strlen(src), &t, NULL) == 0);
    thread_job jobs[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        jobs[i] = (thread_job){ t, vars, "<A><B><C>3\"k\"", 0 };
        CHECK(pthread_create(&th[i], NULL, thread_main, &jobs[i]) == 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        CHECKF(jobs[i].bad == 0, "thread %d: %d bad renders", i, jobs[i].bad);
    }
    em_tmpl_destroy(t);
    json_decref(vars);
}

/* Random mutations of the corpus: byte flips, Jinja fragments spliced in,
 * truncations, repeats. Any result is fine except a crash or a hang. */
static void fuzz(void)
{
    if (!test_shared_dir()) {
        printf("tmpl: fuzz: no shared folder: skipped\n");
        return;
    }
    static const char *const names[] = {
        "Qwen-Qwen3-0.6B", "meta-llama-Llama-3.1-8B-Instruct", "Mistral-Small-3.2-24B-Instruct-2506",
        "HuggingFaceTB-SmolLM3-3B", "ibm-granite-granite-3.3-2B-Instruct", "Qwen3-Coder",
        "test-c4ai-command-r-plus", "google-gemma-2-2b-it", "test-granite-4.1-tool-call",
        "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B",
    };
    static const char *const frags[] = {
        "{{", "}}", "{%", "%}", "{#", "#}", "{%-", "-%}", "(", ")", "[", "]", "'", "\"", "|", ".", ",",
        "{% for x in messages %}", "{% endfor %}", "{% if x %}", "{% endif %}", "{% else %}", "loop",
        "{{ loop.index }}", " is defined", "|tojson", "~", "+", "*", "**", "not ", " and ", " if ",
        "{% raw %}", "{% endraw %}", "{% macro m() %}", "{% endmacro %}", "{{ m() }}", "namespace(",
        "\\", "\xc3\xa9", "{% set ns.x = 1 %}", "{% break %}", "{% call m() %}", "{% endcall %}",
    };
    json_t *vars = json_loads("{\"messages\": [{\"role\": \"system\", \"content\": \"s\"}, {\"role\": \"user\", "
                              "\"content\": \"u\"}, {\"role\": \"assistant\", \"content\": \"a\", \"tool_calls\": "
                              "[{\"function\": {\"name\": \"f\", \"arguments\": {\"x\": 1}}}]}], "
                              "\"add_generation_prompt\": true, \"bos_token\": \"<s>\", \"eos_token\": \"</s>\", "
                              "\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": "
                              "{\"type\": \"object\", \"properties\": {\"x\": {\"type\": \"int\"}}}}}]}", 0, NULL);
    unsigned long long seed = 12345;
    int runs = 0, rendered = 0;
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
        char path[4200];
        snprintf(path, sizeof path, "%s", test_shared("golden/templates/"));
        strncat(path, names[k], sizeof path - strlen(path) - 16);
        strcat(path, ".jinja");
        size_t len = 0;
        char *src = test_read_file(path, &len);
        if (!src)
            continue;
        for (int m = 0; m < 60; m++) {
            char *mut = malloc(len * 2 + 256);
            size_t n = len;
            memcpy(mut, src, len);
            int edits = 1 + (int)(test_rand(&seed) % 4);
            for (int e = 0; e < edits && n; e++) {
                size_t at = (size_t)(test_rand(&seed) % n);
                switch (test_rand(&seed) % 4) {
                case 0: mut[at] = (char)(test_rand(&seed) & 0xff); break;
                case 1: {
                    const char *f = frags[test_rand(&seed) % (sizeof frags / sizeof frags[0])];
                    size_t fl = strlen(f);
                    if (n + fl < len * 2 + 200) {
                        memmove(mut + at + fl, mut + at, n - at);
                        memcpy(mut + at, f, fl);
                        n += fl;
                    }
                    break;
                }
                case 2: n = at; break;   /* truncate */
                default: {               /* drop a run */
                    size_t l = (size_t)(test_rand(&seed) % 40);
                    if (at + l > n)
                        l = n - at;
                    memmove(mut + at, mut + at + l, n - at - l);
                    n -= l;
                }
                }
            }
            em_tmpl *t = NULL;
            em_err err = { 0 };
            runs++;
            if (em_tmpl_parse(mut, n, &t, &err) == 0) {
                char *out = NULL;
                size_t ol;
                if (em_tmpl_render(t, vars, &opts, &out, &ol, &err) == 0)
                    rendered++;
                else
                    CHECKF(out == NULL && err.msg[0], "fuzz: an error without a message or with output");
                free(out);
            } else {
                CHECKF(t == NULL && !strncmp(err.msg, "template: ", 10), "fuzz: parse error [%s]", err.msg);
            }
            em_tmpl_destroy(t);
            free(mut);
        }
        free(src);
    }
    /* garbage */
    for (int m = 0; m < 200; m++) {
        char g[300];
        size_t n = (size_t)(test_rand(&seed) % sizeof g);
        for (size_t i = 0; i < n; i++) {
            unsigned long long r = test_rand(&seed);
            g[i] = r % 3 ? "{}%#-+()[]'\"|.,~ abc\n1"[r % 23] : (char)(r >> 8);
        }
        em_tmpl *t = NULL;
        runs++;
        if (em_tmpl_parse(g, n, &t, NULL) == 0) {
            char *out = NULL;
            size_t ol;
            rendered += em_tmpl_render(t, vars, &opts, &out, &ol, NULL) == 0;
            free(out);
        }
        em_tmpl_destroy(t);
    }
    /* every template of the corpus with odd variables: contents that are
     * lists, numbers or missing, unknown roles, tool calls, no messages */
    static const char *const odd[] = {
        "{\"messages\": []}",
        "{\"messages\": [{\"role\": \"user\"}]}",
        "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"hi\"}, "
        "{\"type\": \"image\"}]}], \"add_generation_prompt\": true}",
        "{\"messages\": [{\"role\": \"tool\", \"content\": 42, \"tool_call_id\": \"abcdefghi\"}, "
        "{\"role\": \"robot\", \"content\": null}]}",
        "{\"messages\": [{\"role\": \"assistant\", \"content\": \"\", \"tool_calls\": [{\"id\": \"abcdefghi\", "
        "\"type\": \"function\", \"function\": {\"name\": \"f\", \"arguments\": {\"a\": [1, 2.5, null]}}}]}], "
        "\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"description\": \"d\", "
        "\"parameters\": {\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"array\", \"items\": "
        "{\"type\": \"number\"}}}, \"required\": [\"a\"]}}}], \"bos_token\": 1, \"eos_token\": null}",
        "{\"messages\": {\"role\": \"user\"}, \"add_generation_prompt\": \"yes\"}",
        "{\"messages\": [1, \"x\", null, [], {}]}",
        "{}",
    };
    char *dirp = strdup(test_shared("golden/templates"));
    for (size_t k = 0; k < sizeof odd / sizeof odd[0]; k++) {
        json_t *ov = json_loads(odd[k], 0, NULL);
        CHECKF(ov != NULL, "odd vars %zu do not parse", k);
        for (size_t i = 0; i < 60; i++) {
            static const char *const all[] = {
                "HuggingFaceTB-SmolLM2-135M-Instruct", "HuggingFaceTB-SmolLM3-3B", "Mistral-Small-3.2-24B-Instruct-2506",
                "Qwen-Qwen2.5-7B-Instruct", "Qwen-Qwen3-0.6B", "Qwen3-Coder", "deepseek-ai-DeepSeek-R1-Distill-Llama-8B",
                "google-gemma-2-2b-it", "ibm-granite-granite-3.3-2B-Instruct", "meta-llama-Llama-3.1-8B-Instruct",
                "meta-llama-Llama-3.2-3B-Instruct", "microsoft-Phi-3.5-mini-instruct", "mistralai-Mistral-Nemo-Instruct-2407",
                "test-c4ai-command-r-plus", "test-granite-3.x-tool-call", "test-granite-4.0-tool-call",
                "test-granite-4.1-tool-call", "test-Mistral-Large-2411-v7", "test-ChatGLM4", "test-Seed-OSS-36B-Instruct",
                "test-phi-4", "test-DeepSeek-V2", "test-Ling-lite", "test-Phi-3-vision",
            };
            if (i >= sizeof all / sizeof all[0])
                break;
            char path[4200];
            snprintf(path, sizeof path, "%s/%s.jinja", dirp, all[i]);
            size_t len = 0;
            char *src = test_read_file(path, &len);
            em_tmpl *t = NULL;
            if (src && em_tmpl_parse(src, len, &t, NULL) == 0) {
                char *out = NULL;
                size_t ol;
                em_err err = { 0 };
                runs++;
                if (em_tmpl_render(t, ov, &opts, &out, &ol, &err) == 0)
                    rendered++;
                else
                    CHECKF(out == NULL && !strncmp(err.msg, "template: ", 10), "odd vars: [%s]", err.msg);
                free(out);
            }
            em_tmpl_destroy(t);
            free(src);
        }
        json_decref(ov);
    }
    free(dirp);
    printf("tmpl: fuzz: %d mutated templates or odd variables, %d rendered, no crash\n", runs, rendered);
    json_decref(vars);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: test_tmpl tmpl_cases.json\n");
        return 2;
    }
    table(argv[1]);
    messages_and_locations();
    soft_frames();
    hostile();
    fallback_and_chat();
    threads();
    fuzz();
    return test_summary("tmpl");
}
