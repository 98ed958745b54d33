/* test_grammar.c — GBNF grammars (core/grammar/grammar.h): parse errors name what
 * and where (line:col); the matcher accepts exactly the strings a grammar
 * describes (JSON, arithmetic, repetition bounds, Unicode classes, UTF-8
 * split across calls), refuses what exceeds its limits and is unchanged by
 * a refusal; token masks equal brute force (clone, feed the token, compare)
 * on a handmade vocabulary and, when ../shared is here, on real 32000-token
 * SentencePiece and 49152-token byte-level BPE vocabularies; the mask cache
 * hits for equal states of different matchers and stays within its bound;
 * mutated grammars and regexes and random bytes never crash (run under
 * ASan/UBSan in the sanitized build). */
#include <stdint.h>

#include "core/grammar/grammar.h"
#include "tests/common/gvocab_tok.h"
#include "tests/common/testutil.h"

static em_grammar *compile(const char *src)
{
    em_grammar *g = NULL;
    em_err err = { 0 };
    int rc = em_grammar_compile(src, strlen(src), NULL, &g, &err);
    CHECKF(rc == 0, "compile failed: %s\n--- grammar:\n%s", err.msg, src);
    return g;
}

/* The grammar must be refused with a message starting with want. */
static void expect_error(const char *src, size_t len, const char *want)
{
    em_grammar *g = NULL;
    em_err err = { 0 };
    int rc = em_grammar_compile(src, len, NULL, &g, &err);
    CHECKF(rc != 0 && g == NULL, "compiled but should fail with \"%s\"", want);
    CHECKF(rc == 0 || strncmp(err.msg, want, strlen(want)) == 0, "got \"%s\", want \"%s...\"", err.msg, want);
    em_grammar_destroy(g);
}
#define EXPECT_ERROR(src, want) expect_error(src, strlen(src), want)

/* 1 when the whole of s is a complete match. */
static int matches(const em_grammar *g, const char *s)
{
    em_gmatch *m = NULL;
    if (em_gmatch_create(g, &m, NULL))
        return -1;
    int ok = em_gmatch_accept(m, s, strlen(s)) == 0 && em_gmatch_can_end(m);
    em_gmatch_destroy(m);
    return ok;
}

/* 1 when s is a prefix of some match (every byte accepted). */
static int prefix_ok(const em_grammar *g, const char *s)
{
    em_gmatch *m = NULL;
    if (em_gmatch_create(g, &m, NULL))
        return -1;
    int ok = em_gmatch_accept(m, s, strlen(s)) == 0;
    em_gmatch_destroy(m);
    return ok;
}

#define YES(g, s) CHECKF(matches(g, s) == 1, "should match: \"%s\"", s)
#define NO(g, s)  CHECKF(matches(g, s) == 0, "should not match: \"%s\"", s)

static const char JSON_GBNF[] =
    "# any JSON value, compact or with bounded whitespace\n"
    "root   ::= value\n"
    "value  ::= object | array | string | number | (\"true\" | \"false\" | \"null\")\n"
    "object ::= \"{\" ws ( member (\",\" ws member)* )? \"}\"\n"
    "member ::= string ws \":\" ws value ws\n"
    "array  ::= \"[\" ws ( value ws (\",\" ws value ws)* )? \"]\"\n"
    "string ::= \"\\\"\" (\n"
    "    [^\"\\\\\\x00-\\x1F] |\n"
    "    \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4})\n"
    "  )* \"\\\"\"\n"
    "number ::= \"-\"? (\"0\" | [1-9] [0-9]{0,15}) (\".\" [0-9]+)? ([eE] [-+]? [0-9]{1,3})?\n"
    "ws     ::= | \" \" | \"\\n\" [ \\t]{0,20}\n";

static void test_errors(void)
{
    EXPECT_ERROR("root ::= foo\n", "grammar:1:10: undefined rule 'foo'");
    EXPECT_ERROR("root ::= \"a\"\n  | \"b\" other\n", "grammar:2:9: undefined rule 'other'");
    EXPECT_ERROR("root ::= \"abc", "grammar:1:10: unterminated string");
    EXPECT_ERROR("root ::= \"ab\ncd\"\n", "grammar:1:10: unterminated string");
    EXPECT_ERROR("root ::= \"a\\q\"\n", "grammar:1:12: bad escape '\\q'");
    EXPECT_ERROR("root ::= \"\\x4\"\n", "grammar:1:11: bad escape: \\x needs 2 hex digits");
    EXPECT_ERROR("root ::= \"\\uD800\"\n", "grammar:1:11: bad escape: U+D800 is a surrogate");
    EXPECT_ERROR("root ::= \"\\U00110000\"\n", "grammar:1:11: bad escape: U+110000 is beyond U+10FFFF");
    EXPECT_ERROR("a ::= \"x\"\n", "grammar:2:1: no rule 'root'");
    EXPECT_ERROR("root ::= [a-z\n", "grammar:1:10: unterminated character class");
    EXPECT_ERROR("root ::= []\n", "grammar:1:10: empty character class");
    EXPECT_ERROR("root ::= [z-a]\n", "grammar:1:11: bad range");
    EXPECT_ERROR("root ::= [^\\x00-\\U0010FFFF]\n", "grammar:1:10: character class matches no character");
    EXPECT_ERROR("root ::= * \"a\"\n", "grammar:1:10: '*' repeats nothing");
    EXPECT_ERROR("root ::= \"a\"{3,2}\n", "grammar:1:13: repetition {3,2}");
    EXPECT_ERROR("root ::= \"a\"{2\n", "grammar:1:13: expecting '}'");
    EXPECT_ERROR("root ::= (\"a\" | \"b\"\n", "grammar:1:10: unclosed group");
    EXPECT_ERROR("root ::= \"a\" )\n", "grammar:1:14: unexpected ')'");
    EXPECT_ERROR("root ::=\n", "grammar:2:1: empty rule");
    EXPECT_ERROR("root ::= \"a\" ()\n", "grammar:1:14: empty group");
    EXPECT_ERROR("root ::= \"a\"\nroot ::= \"b\"\n", "grammar:2:1: rule 'root' defined twice (first at 1:1)");
    EXPECT_ERROR("root ::= <think>\n", "grammar:1:10: token references");
    EXPECT_ERROR("root ::= \"a\"\n\"b\"\n", "grammar:2:1: expecting a rule name");
    EXPECT_ERROR("root ::= \"a\" b ::= \"c\"\n", "grammar:1:14: expecting a newline before the next rule");
    EXPECT_ERROR("root \"a\"\n", "grammar:1:6: expecting ::=");
    EXPECT_ERROR("root ::= \"\xC3(\"\n", "grammar:1:11: invalid UTF-8");
    /* no finite derivation: named where the user's cycle is */
    EXPECT_ERROR("root ::= \"a\" x\nx ::= \"b\" x\n", "grammar:2:1: rule 'x' can never finish");
    EXPECT_ERROR("root ::= \"a\" | y\ny ::= \"(\" y \")\"\n", "grammar:2:1: rule 'y' can never finish");
    /* left recursion that grows the stack */
    EXPECT_ERROR("root ::= root \"a\" | \"b\"\n", "grammar:1:10: left recursion: rule 'root'");
    EXPECT_ERROR("root ::= e\ne ::= t | e \"+\" t\nt ::= [0-9]\n", "grammar:2:11: left recursion: rule 'e'");
    EXPECT_ERROR("root ::= ws root \"x\" | \"y\"\nws ::= \" \"?\n", "grammar:1:13: left recursion");
    /* limits */
    EXPECT_ERROR("root ::= \"a\"{1,20000}\n", "grammar:1:13: repetition bound exceeds the limit of 10000");
    EXPECT_ERROR("root ::= \"a\"{0,9000} \"b\"{0,9000} \"c\"{0,9000} \"d\"{0,9000}\n",
                 "grammar:1:49: grammar too large: more than 32768 rules");
    {
        /* 110 x 10000 elements after expansion */
        size_t cap = 110 * 16 + 32, n = 0;
        char *s = malloc(cap);
        n += (size_t)snprintf(s + n, cap - n, "root ::=");
        for (int i = 0; i < 110; i++)
            n += (size_t)snprintf(s + n, cap - n, " \"a\"{10000}");
        snprintf(s + n, cap - n, "\n");
        expect_error(s, strlen(s), "grammar:1:");
        em_err err = { 0 };
        em_grammar *g = NULL;
        CHECK(em_grammar_compile(s, strlen(s), NULL, &g, &err) == EM_ERANGE);
        CHECKF(strstr(err.msg, "more than 1048576 elements"), "%s", err.msg);
        free(s);
    }
    {
        size_t len = EM_GRAMMAR_MAX_SRC + 1;
        char *s = malloc(len);
        memset(s, ' ', len);
        memcpy(s, "root ::= \"a\"\n", 13);
        expect_error(s, len, "grammar:1:1: grammar too large: 1048577 bytes");
        free(s);
    }
    /* a caller's root that does not exist */
    {
        em_grammar *g = NULL;
        em_err err = { 0 };
        CHECK(em_grammar_compile("a ::= \"x\"\n", 10, "start", &g, &err) == EM_EFORMAT);
        CHECKF(strstr(err.msg, "no rule 'start'"), "%s", err.msg);
        CHECK(em_grammar_compile("a ::= \"x\"\n", 10, "a", &g, &err) == 0);
        em_grammar_destroy(g);
    }
}

static void test_syntax(void)
{
    /* comments, multi-line rules (after ::=, after |, inside groups, and
     * ember's continuation line that starts with |), names with - and _ */
    em_grammar *g = compile("# a comment\n"
                            "root ::=   # trailing comment\n"
                            "  greeting \" \" who-is_it   # more\n"
                            "greeting ::= \"hi\" |\n"
                            "   \"hello\"\n"
                            "  | \"hey\"\n"
                            "who-is_it ::= (\n"
                            "   \"world\"   # inside a group\n"
                            "   | \"you\"\n"
                            ")\n");
    if (g) {
        YES(g, "hi world");
        YES(g, "hello you");
        YES(g, "hey world");
        NO(g, "hey  world");
        NO(g, "hi");
        em_grammar_destroy(g);
    }
    /* escapes in literals and classes; empty literal; optional literal */
    g = compile("root ::= \"\\x41\\u00e9\\U0001F600\\t\\n\\\\\\\"\" [\\]\\-\\[] \"\" \"ab\"?\n");
    if (g) {
        YES(g, "A\xC3\xA9\xF0\x9F\x98\x80\t\n\\\"]");
        YES(g, "A\xC3\xA9\xF0\x9F\x98\x80\t\n\\\"-ab");
        NO(g, "A\xC3\xA9\xF0\x9F\x98\x80\t\n\\\"[a");
        em_grammar_destroy(g);
    }
    /* tail recursion through a cycle is fine: the stack does not grow */
    g = compile("root ::= a\na ::= root | \"x\"\n");
    if (g) {
        YES(g, "x");
        NO(g, "xx");
        em_grammar_destroy(g);
    }
    /* a repetition of something that can be empty still terminates */
    g = compile("root ::= (\"a\"?)* (\"b\" | \"\")+ \"c\"\n");
    if (g) {
        YES(g, "c");
        YES(g, "aabbc");
        NO(g, "ca");
        em_grammar_destroy(g);
    }
    /* a literal quantified as a whole, as llama.cpp does */
    g = compile("root ::= \"ab\"+\n");
    if (g) {
        YES(g, "abab");
        NO(g, "abb");
        em_grammar_destroy(g);
    }
}

static void test_json(void)
{
    em_grammar *g = compile(JSON_GBNF);
    if (!g)
        return;
    YES(g, "{}");
    YES(g, "{\"a\":1}");
    YES(g, "{\"a\": [1, -2.5e3, \"x\\\"y\\u00e9\", true, null, {}], \"b\" : {\"c\":false}}");
    YES(g, "[\n  1,\n  2\n]");
    YES(g, "\"caf\xC3\xA9\"");
    YES(g, "0");
    NO(g, "{\"a\":}");
    NO(g, "{\"a\" 1}");
    NO(g, "{\"a\":1,}");
    NO(g, "[01]");
    NO(g, "\"tab\there\"");
    NO(g, "\"\\x\"");
    NO(g, "tru");
    NO(g, "{\"a\":1}}");
    CHECK(prefix_ok(g, "{\"a\": [1, 2") == 1);
    CHECK(prefix_ok(g, "{\"a\": [1, 2}") == 0);
    /* whitespace is bounded: 21 blanks after a newline are refused */
    CHECK(prefix_ok(g, "[\n                    1]") == 1);
    CHECK(prefix_ok(g, "[\n                     1]") == 0);
    em_gmatch *m = NULL;
    CHECK(em_gmatch_create(g, &m, NULL) == 0);
    CHECK(!em_gmatch_can_end(m));
    CHECK(em_gmatch_accept(m, "{\"k\":", 5) == 0);
    CHECK(!em_gmatch_can_end(m));
    CHECK(em_gmatch_accept(m, "1}", 2) == 0);
    CHECK(em_gmatch_can_end(m));
    CHECK(em_gmatch_done(m));
    em_gmatch_destroy(m);
    em_grammar_destroy(g);
}

static void test_arith_and_bounds(void)
{
    em_grammar *g = compile("root ::= expr\n"
                            "expr ::= term ((\"+\" | \"-\") term)*\n"
                            "term ::= factor ((\"*\" | \"/\") factor)*\n"
                            "factor ::= [0-9]+ | \"(\" expr \")\"\n");
    if (g) {
        YES(g, "1+2*(3-4)/5");
        YES(g, "((((7))))");
        YES(g, "12*34");
        NO(g, "1+");
        NO(g, "(1");
        NO(g, "1++2");
        NO(g, "()");
        em_grammar_destroy(g);
    }
    g = compile("root ::= \"a\"{2,4} \"-\" [0-9]{3} \"-\" \"b\"{2,} \"-\" [xy]{0,2} \"-\" \"c\"{0}\n");
    if (g) {
        YES(g, "aa-123-bb--");
        YES(g, "aaaa-000-bbbbbbb-xy-");
        NO(g, "a-123-bb--");
        NO(g, "aaaaa-123-bb--");
        NO(g, "aa-12-bb--");
        NO(g, "aa-1234-bb--");
        NO(g, "aa-123-b--");
        NO(g, "aa-123-bb-xyx-");
        NO(g, "aa-123-bb--c");
        em_grammar_destroy(g);
    }
    /* a bounded repetition of a group, and a large bound */
    g = compile("root ::= (\"ab\" | \"c\"){1,3} [0-9]{0,500}\n");
    if (g) {
        YES(g, "abcab");
        YES(g, "c");
        NO(g, "abcabc");
        NO(g, "");
        char s[600];
        memset(s, '7', 500);
        s[0] = 'c';
        s[501] = 0;
        s[500] = '7';
        YES(g, s);           /* c + 500 digits */
        s[501] = '7';
        s[502] = 0;
        NO(g, s);            /* 501 */
        em_grammar_destroy(g);
    }
}

static void test_unicode(void)
{
    em_grammar *g = compile("root ::= [\xCE\xB1-\xCF\x89]+ \"\xE2\x9C\x93\" [^a-z] .\n");
    if (!g)
        return;
    YES(g, "\xCE\xB1\xCE\xB2\xCE\xB3\xE2\x9C\x93" "A" "\xF0\x9F\x98\x80");   /* αβγ✓A😀 */
    YES(g, "\xCF\x89\xE2\x9C\x93\xC3\xA9z");                                /* ω✓éz */
    NO(g, "abc\xE2\x9C\x93" "Az");
    NO(g, "\xCE\xB1\xE2\x9C\x93qz");                                        /* [^a-z] refuses q */
    /* a character split across calls, one byte at a time */
    em_gmatch *m = NULL;
    CHECK(em_gmatch_create(g, &m, NULL) == 0);
    CHECK(em_gmatch_accept(m, "\xCE", 1) == 0);
    CHECK(!em_gmatch_can_end(m));
    CHECK(em_gmatch_accept(m, "\xB1\xE2", 2) == 0);
    CHECK(em_gmatch_accept(m, "\x9C", 1) == 0);
    CHECK(em_gmatch_accept(m, "\x41", 1) == EM_EINVAL);   /* not a continuation byte */
    CHECK(em_gmatch_accept(m, "\x93", 1) == 0);
    CHECK(em_gmatch_accept(m, "B\xF0\x9F", 3) == 0);
    CHECK(!em_gmatch_can_end(m));
    CHECK(em_gmatch_accept(m, "\x98\x80", 2) == 0);
    CHECK(em_gmatch_can_end(m));
    em_gmatch_destroy(m);
    /* a lead byte whose characters the class cannot hold is refused at once */
    CHECK(prefix_ok(g, "\xCE") == 1);
    CHECK(prefix_ok(g, "\xE4") == 0);        /* U+4000..U+4FFF: not Greek */
    /* invalid UTF-8: overlong, surrogate, beyond U+10FFFF, stray continuation */
    em_grammar_destroy(g);
    g = compile("root ::= .*\n");
    if (g) {
        YES(g, "\xC3\xA9\xE2\x82\xAC\xF4\x8F\xBF\xBF");
        CHECK(prefix_ok(g, "\xC0\x80") == 0);
        CHECK(prefix_ok(g, "\xE0\x80\x80") == 0);
        CHECK(prefix_ok(g, "\xED\xA0\x80") == 0);
        CHECK(prefix_ok(g, "\xF4\x90\x80\x80") == 0);
        CHECK(prefix_ok(g, "\x80") == 0);
        CHECK(prefix_ok(g, "\xF5") == 0);
        NO(g, "\xC3");                        /* incomplete at the end */
        em_grammar_destroy(g);
    }
}

static void test_state(void)
{
    em_grammar *g = compile("root ::= \"ab\" [0-9]* \"!\"\n");
    if (!g)
        return;
    em_gmatch *m = NULL, *c = NULL;
    CHECK(em_gmatch_create(g, &m, NULL) == 0);
    CHECK(em_gmatch_accept(m, "ab1", 3) == 0);
    CHECK(em_gmatch_accept(m, "2x", 2) == EM_EINVAL);   /* refused whole: state unchanged */
    CHECK(em_gmatch_accept(m, "", 0) == 0);
    CHECK(em_gmatch_clone(m, &c, NULL) == 0);
    CHECK(em_gmatch_accept(m, "2!", 2) == 0);
    CHECK(em_gmatch_done(m));
    CHECK(em_gmatch_accept(m, "!", 1) == EM_EINVAL);
    CHECK(!em_gmatch_can_end(c));                        /* the clone stayed at "ab1" */
    CHECK(em_gmatch_accept(c, "!", 1) == 0);
    CHECK(em_gmatch_done(c));
    em_gmatch_destroy(m);
    em_gmatch_destroy(c);
    em_grammar_destroy(g);

    /* can_end without done: more may follow */
    g = compile("root ::= \"a\"+\n");
    if (g) {
        CHECK(em_gmatch_create(g, &m, NULL) == 0);
        CHECK(em_gmatch_accept(m, "aa", 2) == 0);
        CHECK(em_gmatch_can_end(m) && !em_gmatch_done(m));
        em_gmatch_destroy(m);
        em_grammar_destroy(g);
    }

    /* the stack-set cap: every 'a' doubles the distinct stacks */
    g = compile("root ::= x\nx ::= \"a\" x \"b\" | \"a\" x \"c\" | \"\"\n");
    if (g) {
        CHECK(em_gmatch_create(g, &m, NULL) == 0);
        int rc = 0, i;
        for (i = 0; i < 30 && rc == 0; i++)
            rc = em_gmatch_accept(m, "a", 1);
        CHECKF(rc == EM_ERANGE && i > 10, "rc %d after %d", rc, i);
        CHECK(em_gmatch_n_stacks(m) <= EM_GMATCH_MAX_STACKS);
        CHECK(em_gmatch_accept(m, "b", 1) == 0);          /* still usable */
        em_gmatch_destroy(m);
        em_grammar_destroy(g);
    }
    /* the depth cap */
    g = compile("root ::= \"(\" root \")\" | \"x\"\n");
    if (g) {
        CHECK(em_gmatch_create(g, &m, NULL) == 0);
        int rc = 0, i;
        for (i = 0; i < 5000 && rc == 0; i++)
            rc = em_gmatch_accept(m, "(", 1);
        CHECKF(rc != 0 && i > 1000 && i < 5000, "rc %d after %d", rc, i);
        em_gmatch_destroy(m);
        em_grammar_destroy(g);
    }
}

/* ---- masks --------------------------------------------------------------- */

/* The mask of m against brute force: for every token, a clone of m
 * accepts the token's bytes or not. Returns the number of allowed tokens. */
static uint32_t check_mask(em_gmatch *m, const em_gvocab *v, em_gcache *cache, const char *what)
{
    uint32_t n = em_gvocab_n_vocab(v), allowed = 0, bad = 0;
    size_t words = em_gvocab_mask_words(v);
    uint32_t *mask = calloc(words, sizeof *mask);
    em_err err = { 0 };
    CHECKF(em_gmatch_allowed(m, v, cache, mask, &err) == 0, "%s: %s", what, err.msg);
    for (uint32_t i = 0; i < n; i++) {
        em_gmatch *c = NULL;
        if (em_gmatch_clone(m, &c, NULL)) {
            CHECK(!"clone");
            break;
        }
        int brute = em_gmatch_accept_token(c, v, i) == 0;
        int bit = (int)((mask[i >> 5] >> (i & 31)) & 1);
        if (brute != bit && bad++ < 5)
            CHECKF(brute == bit, "%s: token %u: mask %d, brute force %d", what, i, bit, brute);
        allowed += (uint32_t)bit;
        em_gmatch_destroy(c);
    }
    CHECKF(bad == 0, "%s: %u tokens differ", what, bad);
    for (size_t i = n; i < words * 32; i++)   /* bits past n_vocab stay clear */
        CHECK(((mask[i >> 5] >> (i & 31)) & 1) == 0);
    free(mask);
    return allowed;
}

static void test_masks_small(void)
{
    static const em_gvocab_token toks[] = {
        { "{", 1, 0 },          { "\"", 1, 0 },           { "\"a", 2, 0 },      { "a", 1, 0 },
        { "ab", 2, 0 },         { "\":", 2, 0 },          { ":", 1, 0 },        { "1", 1, 0 },
        { "12", 2, 0 },         { "}", 1, 0 },            { "\"}", 2, 0 },      { " ", 1, 0 },
        { "\xCE", 1, 0 },       { "\xB1", 1, 0 },         { "\xCE\xB1", 2, 0 }, { "\xCE\xB1\xCE", 3, 0 },
        { "\xE2\x9C", 2, 0 },   { "\x93", 1, 0 },         { "", 0, 0 },         { "<s>", 3, EM_GTOK_SPECIAL },
        { "", 0, EM_GTOK_SPECIAL | EM_GTOK_EOG },         { "a", 1, 0 },        { "1}", 2, 0 },
        { "\xFF", 1, 0 },       { ",", 1, 0 },            { ",\"", 2, 0 },      { "tru", 3, 0 },
        { "true", 4, 0 },       { "e", 1, 0 },            { "\n", 1, 0 },       { "\\", 1, 0 },
        { "\\\"", 2, 0 },       { "\\u00", 4, 0 },        { "e9", 2, 0 },
    };
    uint32_t n = (uint32_t)(sizeof toks / sizeof toks[0]);
    em_gvocab *v = NULL;
    em_err err = { 0 };
    CHECKF(em_gvocab_create(toks, n, &v, &err) == 0, "%s", err.msg);
    em_grammar *g = compile(JSON_GBNF);
    if (!g || !v) {
        em_grammar_destroy(g);
        em_gvocab_destroy(v);
        return;
    }
    CHECK(em_gvocab_mask_words(v) == (n + 31) / 32);
    em_gmatch *m = NULL;
    CHECK(em_gmatch_create(g, &m, NULL) == 0);
    /* walk a document token by token, checking the mask before each */
    static const char *const steps[] = { "{", "\"a", "\xCE", "\xB1", "\xCE\xB1\xCE", "\xB1", "\\u00", "e9",
                                         "\"", ":", " ", "12", "}" };
    char what[64];
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        snprintf(what, sizeof what, "small vocab, step %zu", i);
        uint32_t allowed = check_mask(m, v, NULL, what);
        CHECKF(allowed > 0, "%s: nothing allowed", what);
        CHECKF(em_gmatch_accept(m, steps[i], strlen(steps[i])) == 0, "%s: '%s' refused", what, steps[i]);
    }
    /* at the end only the EOG token (id 20) */
    uint32_t mask[2] = { 0xFFFFFFFFu, 0xFFFFFFFFu };
    CHECK(em_gmatch_allowed(m, v, NULL, mask, NULL) == 0);
    CHECKF(mask[0] == (1u << 20) && mask[1] == 0, "final mask %08x %08x", mask[0], mask[1]);
    CHECK(em_gmatch_accept_token(m, v, 20) == 0);
    CHECK(em_gmatch_accept_token(m, v, 19) == EM_EINVAL);   /* special */
    CHECK(em_gmatch_accept_token(m, v, 18) == EM_EINVAL);   /* empty */
    CHECK(em_gmatch_accept_token(m, v, n) == EM_ERANGE);
    em_gmatch_destroy(m);

    /* mid-character: after "\xCE" only continuations that make Greek-or-any
     * text are allowed; in a grammar of Greek letters only */
    em_grammar *gr = compile("root ::= [\xCE\xB1-\xCF\x89]+\n");
    if (gr) {
        CHECK(em_gmatch_create(gr, &m, NULL) == 0);
        check_mask(m, v, NULL, "greek start");
        CHECK(em_gmatch_accept(m, "\xCE", 1) == 0);
        check_mask(m, v, NULL, "greek mid-character");
        uint32_t mk[2];
        CHECK(em_gmatch_allowed(m, v, NULL, mk, NULL) == 0);
        CHECK((mk[0] >> 13) & 1);    /* \xB1 completes α */
        CHECK(!((mk[0] >> 12) & 1)); /* another lead byte does not */
        em_gmatch_destroy(m);
        em_grammar_destroy(gr);
    }
    /* a cache made for another grammar is refused */
    em_gcache *other = NULL;
    em_grammar *g2 = compile("root ::= \"x\"\n");
    CHECK(em_gcache_create(g2, v, 1 << 20, &other, NULL) == 0);
    CHECK(em_gmatch_create(g, &m, NULL) == 0);
    CHECK(em_gmatch_allowed(m, v, other, mask, &err) == EM_EINVAL);
    em_gmatch_destroy(m);
    em_gcache_destroy(other);
    em_grammar_destroy(g2);
    em_grammar_destroy(g);
    em_gvocab_destroy(v);
}

static void test_cache(void)
{
    static const em_gvocab_token toks[] = {
        { "a", 1, 0 }, { "b", 1, 0 }, { "ab", 2, 0 }, { "ba", 2, 0 }, { "c", 1, 0 }, { "", 0, EM_GTOK_EOG },
    };
    em_gvocab *v = NULL;
    CHECK(em_gvocab_create(toks, 6, &v, NULL) == 0);
    em_grammar *g = compile("root ::= (\"a\" | \"b\")* \"c\"\n");
    em_gcache *c = NULL;
    if (!v || !g)
        goto done;
    CHECK(em_gcache_create(g, v, 1 << 20, &c, NULL) == 0);
    em_gmatch *m1 = NULL, *m2 = NULL;
    CHECK(em_gmatch_create(g, &m1, NULL) == 0);
    CHECK(em_gmatch_create(g, &m2, NULL) == 0);
    uint32_t a[1], b[1];
    CHECK(em_gmatch_allowed(m1, v, c, a, NULL) == 0);
    CHECK(a[0] == 0x1F);                     /* a b ab ba c */
    em_gcache_stats st;
    em_gcache_get_stats(c, &st);
    CHECK(st.misses == 1 && st.hits == 0 && st.entries == 1);
    /* another matcher in the same state (a different arena): a hit */
    CHECK(em_gmatch_accept(m2, "abba", 4) == 0);   /* (a|b)* loops back to the start state */
    CHECK(em_gmatch_allowed(m2, v, c, b, NULL) == 0);
    em_gcache_get_stats(c, &st);
    CHECKF(st.hits == 1 && st.misses == 1, "hits %llu misses %llu", (unsigned long long)st.hits,
           (unsigned long long)st.misses);
    CHECK(b[0] == a[0]);
    /* a new state: a miss; then the end state allows only EOG */
    CHECK(em_gmatch_accept(m1, "c", 1) == 0);
    CHECK(em_gmatch_allowed(m1, v, c, a, NULL) == 0);
    CHECK(a[0] == (1u << 5));
    em_gcache_get_stats(c, &st);
    CHECK(st.misses == 2 && st.entries == 2);
    em_gmatch_destroy(m1);
    em_gmatch_destroy(m2);
    em_gcache_destroy(c);
    c = NULL;

    /* a cache of one entry's size evicts the older state */
    CHECK(em_gcache_create(g, v, 1, &c, NULL) == 0);
    CHECK(em_gmatch_create(g, &m1, NULL) == 0);
    CHECK(em_gmatch_allowed(m1, v, c, a, NULL) == 0);
    CHECK(em_gmatch_accept(m1, "c", 1) == 0);
    CHECK(em_gmatch_allowed(m1, v, c, a, NULL) == 0);
    em_gcache_get_stats(c, &st);
    CHECK(st.entries == 1 && st.evictions == 1 && st.misses == 2);
    em_gmatch_destroy(m1);
done:
    em_gcache_destroy(c);
    em_grammar_destroy(g);
    em_gvocab_destroy(v);
}

/* Real vocabularies: masks along a JSON document against brute force. */
static void test_masks_real(const char *rel, uint32_t want_n)
{
    if (!test_shared_dir()) {
        fprintf(stderr, "skip %s: no shared folder\n", rel);
        return;
    }
    em_gguf *gg = NULL;
    em_tokenizer *t = NULL;
    em_gvocab *v = NULL;
    em_err err = { 0 };
    if (gvocab_open(test_shared(rel), &gg, &t, &v, &err)) {
        CHECKF(0, "%s: %s", rel, err.msg);
        goto done;
    }
    CHECKF(em_gvocab_n_vocab(v) == want_n, "%s: %u tokens", rel, em_gvocab_n_vocab(v));
    em_grammar *g = compile(JSON_GBNF);
    em_gcache *c = NULL;
    CHECK(em_gcache_create(g, v, 64u << 20, &c, NULL) == 0);
    em_gmatch *m = NULL;
    CHECK(em_gmatch_create(g, &m, NULL) == 0);
    static const char *const steps[] = { "{\"", "na", "m\xC3", "\xA9", "\": [", "12", ".5", ", tr", "ue], \"",
                                         "k\"", ":", "{}" };
    char what[128];
    uint32_t allowed_in_string = 0;
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        snprintf(what, sizeof what, "%s step %zu", rel, i);
        uint32_t n = check_mask(m, v, c, what);
        if (i == 1)
            allowed_in_string = n;
        CHECKF(em_gmatch_accept(m, steps[i], strlen(steps[i])) == 0, "%s: refused", what);
    }
    /* inside a string most of the vocabulary is allowed */
    CHECKF(allowed_in_string > want_n / 2, "%s: %u allowed inside a string", rel, allowed_in_string);
    snprintf(what, sizeof what, "%s end", rel);
    check_mask(m, v, c, what);
    em_gmatch_destroy(m);
    em_gcache_destroy(c);
    em_grammar_destroy(g);
done:
    em_gvocab_destroy(v);
    em_tokenizer_destroy(t);
    em_gguf_close(gg);
}

/* Hostile input: the JSON grammar with random bytes changed, cut or
 * duplicated; random regexes of metacharacters; random bytes to matchers. */
static void test_hostile(void)
{
    unsigned long long rng = 12345;
    size_t base_len = strlen(JSON_GBNF);
    char *buf = malloc(base_len * 2 + 16);
    static const char meta[] = "()[]{}|*+?.^$\\-,0129azAZ\"#: \n";
    int compiled = 0;
    for (int it = 0; it < 1500; it++) {
        size_t len = base_len;
        memcpy(buf, JSON_GBNF, len);
        int edits = 1 + (int)(test_rand(&rng) % 4);
        for (int e = 0; e < edits; e++) {
            size_t at = (size_t)(test_rand(&rng) % len);
            switch (test_rand(&rng) % 4) {
            case 0: buf[at] = meta[test_rand(&rng) % (sizeof meta - 1)]; break;
            case 1: buf[at] = (char)(test_rand(&rng) & 0xFF); break;
            case 2: len = at + 1; break;
            default:
                if (len + 8 < base_len * 2) {   /* duplicate a short run */
                    size_t n = 1 + (size_t)(test_rand(&rng) % 8);
                    if (at + n > len)
                        n = len - at;
                    memmove(buf + at + n, buf + at, len - at);
                    len += n;
                }
            }
        }
        em_grammar *g = NULL;
        em_err err = { 0 };
        if (em_grammar_compile(buf, len, NULL, &g, &err) == 0) {
            compiled++;
            em_gmatch *m = NULL;
            if (em_gmatch_create(g, &m, NULL) == 0) {
                char in[64];
                for (size_t k = 0; k < sizeof in; k++)
                    in[k] = meta[test_rand(&rng) % (sizeof meta - 1)];
                for (size_t k = 0; k < sizeof in; k++)
                    em_gmatch_accept(m, in + k, 1);
                em_gmatch_destroy(m);
            }
            em_grammar_destroy(g);
        } else {
            CHECKF(strncmp(err.msg, "grammar:", 8) == 0, "message \"%s\"", err.msg);
        }
    }
    CHECKF(compiled > 10, "only %d mutated grammars compiled", compiled);
    for (int it = 0; it < 3000; it++) {
        char re[24];
        size_t n = 1 + (size_t)(test_rand(&rng) % (sizeof re - 1));
        for (size_t k = 0; k < n; k++)
            re[k] = meta[test_rand(&rng) % (sizeof meta - 1)];
        char *gbnf = NULL;
        size_t glen = 0;
        em_err err = { 0 };
        if (em_regex_to_gbnf(re, n, &gbnf, &glen, &err) == 0) {
            /* whatever the translator writes must compile, unless it can
             * match nothing at all (e.g. a class of no characters) */
            em_grammar *g = NULL;
            int rc = em_grammar_compile(gbnf, glen, NULL, &g, &err);
            CHECKF(rc == 0 || strstr(err.msg, "never finish") || strstr(err.msg, "left recursion"),
                   "regex %.*s -> %s: %s", (int)n, re, gbnf, err.msg);
            em_grammar_destroy(g);
            free(gbnf);
        }
    }
    free(buf);
}

int main(void)
{
    test_errors();
    test_syntax();
    test_json();
    test_arith_and_bounds();
    test_unicode();
    test_state();
    test_masks_small();
    test_cache();
    test_hostile();
    test_masks_real("golden/tokenizer/ggml-vocab-llama-spm.gguf", 32000);
    test_masks_real("golden/tokenizer/ggml-vocab-starcoder.gguf", 49152);
    return test_summary("grammar");
}
