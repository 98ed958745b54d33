/* test_json_schema.c — JSON Schema and regular expressions to GBNF
 * (core/grammar/json_schema.h, em_regex_to_gbnf): each schema's grammar, compiled
 * and run by the matcher, accepts valid documents and refuses invalid ones
 * (nested objects, optional and required properties in schema order,
 * additionalProperties, arrays with bounds, enums and const, integer ranges
 * checked value by value, number bounds, strings with patterns, lengths and
 * formats, type arrays, anyOf, $ref recursion, json_object); keywords and
 * regex features outside the subset are errors that name them. */
#include <jansson.h>
#include <stdint.h>

#include "core/grammar/grammar.h"
#include "core/grammar/json_schema.h"
#include "tests/common/testutil.h"

static em_grammar *from_gbnf(const char *src, size_t len, const char *what)
{
    em_grammar *g = NULL;
    em_err err = { 0 };
    int rc = em_grammar_compile(src, len, NULL, &g, &err);
    CHECKF(rc == 0, "%s: compile: %s\n--- grammar:\n%s", what, err.msg, src);
    return g;
}

static em_grammar *schema_grammar_opts(const char *schema, int compact)
{
    json_error_t jerr;
    json_t *s = json_loads(schema, JSON_DECODE_ANY, &jerr);
    CHECKF(s != NULL, "bad test schema: %s: %s", schema, jerr.text);
    if (!s)
        return NULL;
    em_json_schema_opts opts = { .compact = compact };
    char *gbnf = NULL;
    size_t len = 0;
    em_err err = { 0 };
    int rc = em_json_schema_to_gbnf(s, &opts, &gbnf, &len, &err);
    json_decref(s);
    CHECKF(rc == 0, "schema %s: %s", schema, err.msg);
    if (rc)
        return NULL;
    em_grammar *g = from_gbnf(gbnf, len, schema);
    free(gbnf);
    return g;
}

static em_grammar *schema_grammar(const char *schema) { return schema_grammar_opts(schema, 0); }

/* The schema must be refused with a message containing want. */
static void schema_error(const char *schema, const char *want)
{
    json_error_t jerr;
    json_t *s = json_loads(schema, JSON_DECODE_ANY, &jerr);
    CHECKF(s != NULL, "bad test schema: %s: %s", schema, jerr.text);
    if (!s)
        return;
    char *gbnf = NULL;
    size_t len = 0;
    em_err err = { 0 };
    int rc = em_json_schema_to_gbnf(s, NULL, &gbnf, &len, &err);
    json_decref(s);
    CHECKF(rc != 0, "schema %s: accepted, want an error with \"%s\"", schema, want);
    CHECKF(rc == 0 || strstr(err.msg, want), "schema %s: got \"%s\", want \"%s\"", schema, err.msg, want);
    free(gbnf);
}

static int matches(const em_grammar *g, const char *s)
{
    em_gmatch *m = NULL;
    if (!g || em_gmatch_create(g, &m, NULL))
        return -1;
    int ok = em_gmatch_accept(m, s, strlen(s)) == 0 && em_gmatch_can_end(m);
    em_gmatch_destroy(m);
    return ok;
}

#define YES(g, s) CHECKF(matches(g, s) == 1, "should match: %s", s)
#define NO(g, s)  CHECKF(matches(g, s) == 0, "should not match: %s", s)

static void test_objects(void)
{
    em_grammar *g = schema_grammar(
        "{\"type\":\"object\",\"properties\":{"
        "\"name\":{\"type\":\"string\"},"
        "\"address\":{\"type\":\"object\",\"properties\":{"
        "  \"city\":{\"type\":\"string\"},\"zip\":{\"type\":\"string\",\"pattern\":\"^[0-9]{5}$\"}},"
        "  \"required\":[\"city\",\"zip\"],\"additionalProperties\":false}},"
        "\"required\":[\"name\",\"address\"],\"additionalProperties\":false}");
    YES(g, "{\"name\":\"Ada\",\"address\":{\"city\":\"Paris\",\"zip\":\"75001\"}}");
    YES(g, "{ \"name\": \"Ada\", \"address\": { \"city\": \"P\", \"zip\": \"12345\" } }");
    YES(g, "{\n  \"name\": \"Ada\",\n  \"address\": {\n    \"city\": \"P\",\n    \"zip\": \"12345\"\n  }\n}");
    NO(g, "{\"name\":\"Ada\",\"address\":{\"city\":\"Paris\"}}");
    NO(g, "{\"name\":\"Ada\",\"address\":{\"city\":\"Paris\",\"zip\":\"7500\"}}");
    NO(g, "{\"name\":\"Ada\",\"address\":{\"city\":\"Paris\",\"zip\":\"75001\",\"x\":1}}");
    NO(g, "{\"address\":{\"city\":\"Paris\",\"zip\":\"75001\"},\"name\":\"Ada\"}");   /* schema order */
    NO(g, "{\"name\":\"Ada\",\"address\":{\"city\":\"Paris\",\"zip\":\"75001\"}} ");   /* nothing after */
    NO(g, " {\"name\":\"Ada\",\"address\":{\"city\":\"Paris\",\"zip\":\"75001\"}}");
    em_grammar_destroy(g);

    /* optional properties between required ones */
    g = schema_grammar("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"integer\"},"
                       "\"c\":{\"type\":\"integer\"},\"d\":{\"type\":\"integer\"}},\"required\":[\"a\",\"d\"],"
                       "\"additionalProperties\":false}");
    YES(g, "{\"a\":1,\"d\":2}");
    YES(g, "{\"a\":1,\"b\":2,\"d\":3}");
    YES(g, "{\"a\":1,\"c\":3,\"d\":4}");
    YES(g, "{\"a\":1,\"b\":2,\"c\":3,\"d\":4}");
    NO(g, "{\"a\":1}");
    NO(g, "{\"a\":1,\"d\":2,\"b\":3}");
    NO(g, "{\"b\":1,\"d\":2}");
    NO(g, "{\"a\":1,,\"d\":2}");
    NO(g, "{}");
    em_grammar_destroy(g);

    /* all optional */
    g = schema_grammar("{\"type\":\"object\",\"properties\":{\"b\":{\"type\":\"boolean\"},\"c\":{\"type\":\"null\"}}}");
    YES(g, "{}");
    YES(g, "{\"c\":null}");
    YES(g, "{\"b\":true, \"c\":null}");
    NO(g, "{,}");
    NO(g, "{\"b\":true,}");
    NO(g, "{\"x\":1}");              /* absent additionalProperties beside properties: no others */
    em_grammar_destroy(g);

    /* additionalProperties: a schema; and a required name not listed */
    g = schema_grammar("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},"
                       "\"additionalProperties\":{\"type\":\"string\"}}");
    YES(g, "{\"a\":1,\"x\":\"y\"}");
    YES(g, "{\"x\":\"y\",\"z\":\"w\"}");
    YES(g, "{}");
    NO(g, "{\"a\":1,\"x\":2}");
    em_grammar_destroy(g);
    g = schema_grammar("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"required\":[\"id\"],"
                       "\"additionalProperties\":true}");
    YES(g, "{\"a\":1,\"id\":[1,2]}");
    YES(g, "{\"id\":\"x\",\"more\":{}}");
    NO(g, "{\"a\":1}");
    em_grammar_destroy(g);

    /* property names that need escaping, and non-ASCII ones */
    g = schema_grammar("{\"type\":\"object\",\"properties\":{\"a\\\"b\":{\"type\":\"integer\"},"
                       "\"\u00e9\\\\\":{\"type\":\"null\"}},\"required\":[\"a\\\"b\"]}");
    YES(g, "{\"a\\\"b\":1,\"\xC3\xA9\\\\\":null}");
    NO(g, "{\"ab\":1}");
    em_grammar_destroy(g);

    /* no properties: any object; compact output refuses whitespace */
    g = schema_grammar("{\"type\":\"object\"}");
    YES(g, "{\"k\": [1, {\"z\": null}], \"j\": \"v\"}");
    NO(g, "[]");
    em_grammar_destroy(g);
    g = schema_grammar_opts("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}}}", 1);
    YES(g, "{\"a\":1}");
    NO(g, "{ \"a\":1}");
    NO(g, "{\"a\": 1}");
    em_grammar_destroy(g);
}

static void test_arrays_enums(void)
{
    em_grammar *g = schema_grammar("{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":2,\"maxItems\":3}");
    YES(g, "[1,2]");
    YES(g, "[1, 2, 3]");
    NO(g, "[1]");
    NO(g, "[]");
    NO(g, "[1,2,3,4]");
    NO(g, "[\"a\",\"b\"]");
    em_grammar_destroy(g);
    g = schema_grammar("{\"type\":\"array\",\"items\":{\"type\":\"string\"}}");
    YES(g, "[]");
    YES(g, "[\"a\",\"b\",\"c\",\"d\",\"e\"]");
    NO(g, "[\"a\",]");
    em_grammar_destroy(g);
    g = schema_grammar("{\"type\":\"array\",\"maxItems\":0}");
    YES(g, "[]");
    NO(g, "[1]");
    em_grammar_destroy(g);
    g = schema_grammar("{\"type\":\"array\",\"minItems\":1}");
    YES(g, "[1,\"x\",null]");
    NO(g, "[]");
    em_grammar_destroy(g);

    g = schema_grammar("{\"enum\":[\"red\",\"gr\\\"een\",3,null,{\"a\":[1]}]}");
    YES(g, "\"red\"");
    YES(g, "\"gr\\\"een\"");
    YES(g, "3");
    YES(g, "null");
    YES(g, "{\"a\":[1]}");
    NO(g, "\"blue\"");
    NO(g, "4");
    NO(g, "\"re\"");
    em_grammar_destroy(g);
    /* enum values of another type than the schema's are dropped */
    g = schema_grammar("{\"type\":\"string\",\"enum\":[\"a\",1]}");
    YES(g, "\"a\"");
    NO(g, "1");
    em_grammar_destroy(g);
    /* an enum whose rule is longer than a formatting buffer (it was "out of
     * memory" past about 40 short strings) */
    char big[8192] = "{\"type\":\"string\",\"enum\":[";
    for (int i = 0; i < 300; i++)
        snprintf(big + strlen(big), sizeof big - strlen(big), "%s\"value%03d\"", i ? "," : "", i);
    strcat(big, "]}");
    g = schema_grammar(big);
    YES(g, "\"value000\"");
    YES(g, "\"value299\"");
    NO(g, "\"value300\"");
    em_grammar_destroy(g);
    g = schema_grammar("{\"const\":\"fixed\"}");
    YES(g, "\"fixed\"");
    NO(g, "\"fixe\"");
    em_grammar_destroy(g);
    g = schema_grammar("{\"type\":[\"string\",\"null\"]}");
    YES(g, "\"x\"");
    YES(g, "null");
    NO(g, "1");
    em_grammar_destroy(g);
    g = schema_grammar("{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"boolean\"}],\"title\":\"t\"}");
    YES(g, "12");
    YES(g, "true");
    NO(g, "\"x\"");
    em_grammar_destroy(g);
    g = schema_grammar("{\"oneOf\":[{\"const\":1},{\"const\":\"one\"}]}");
    YES(g, "1");
    YES(g, "\"one\"");
    NO(g, "2");
    em_grammar_destroy(g);
}

/* Integer ranges, every value of [-1200, 1200] against the bounds. */
static void test_integers(void)
{
    static const struct { const char *kw; long lo, hi; } cases[] = {
        { "\"minimum\":-17,\"maximum\":250", -17, 250 },
        { "\"minimum\":3,\"maximum\":3", 3, 3 },
        { "\"minimum\":0,\"maximum\":9", 0, 9 },
        { "\"minimum\":10,\"maximum\":99", 10, 99 },
        { "\"minimum\":-100,\"maximum\":-7", -100, -7 },
        { "\"minimum\":95,\"maximum\":1005", 95, 1005 },
        { "\"exclusiveMinimum\":-5,\"exclusiveMaximum\":120", -4, 119 },
        { "\"minimum\":1", 1, 100000 },
        { "\"maximum\":-3", -100000, -3 },
        { "\"minimum\":0.5,\"maximum\":7.5", 1, 7 },
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char schema[256];
        snprintf(schema, sizeof schema, "{\"type\":\"integer\",%s}", cases[c].kw);
        em_grammar *g = schema_grammar(schema);
        if (!g)
            continue;
        int bad = 0;
        for (long v = -1200; v <= 1200; v++) {
            char s[32];
            snprintf(s, sizeof s, "%ld", v);
            int want = v >= cases[c].lo && v <= cases[c].hi;
            if (matches(g, s) != want && bad++ < 3)
                CHECKF(0, "%s: %ld should %smatch", schema, v, want ? "" : "not ");
        }
        CHECKF(bad == 0, "%s: %d values wrong", schema, bad);
        NO(g, "007");
        NO(g, "-0");
        NO(g, "1.0");
        em_grammar_destroy(g);
    }
    schema_error("{\"type\":\"integer\",\"minimum\":5,\"maximum\":4}", "no integer lies within the bounds");
}

static void test_numbers(void)
{
    em_grammar *g = schema_grammar("{\"type\":\"number\",\"minimum\":0,\"maximum\":10}");
    YES(g, "0");
    YES(g, "10");
    YES(g, "10.000");
    YES(g, "5.5");
    YES(g, "0.001");
    NO(g, "10.5");
    NO(g, "10.01");
    NO(g, "-0.5");
    NO(g, "11");
    NO(g, "1e3");
    em_grammar_destroy(g);
    g = schema_grammar("{\"type\":\"number\",\"exclusiveMinimum\":0,\"exclusiveMaximum\":10}");
    YES(g, "0.1");
    YES(g, "9.999");
    NO(g, "0");
    NO(g, "0.0");
    NO(g, "10");
    NO(g, "10.0");
    em_grammar_destroy(g);
    g = schema_grammar("{\"type\":\"number\",\"minimum\":-2,\"maximum\":-1}");
    YES(g, "-1");
    YES(g, "-1.5");
    YES(g, "-2.0");
    NO(g, "-2.5");
    NO(g, "-0.5");
    NO(g, "0");
    em_grammar_destroy(g);
    g = schema_grammar("{\"type\":\"number\"}");
    YES(g, "-12.5e+3");
    YES(g, "0.25");
    NO(g, "01");
    NO(g, ".5");
    em_grammar_destroy(g);
    schema_error("{\"type\":\"number\",\"minimum\":0.5}", "number bounds must be whole numbers");
    schema_error("{\"type\":\"number\",\"minimum\":3,\"exclusiveMaximum\":3}", "no number lies within the bounds");
}

static void test_strings(void)
{
    em_grammar *g = schema_grammar("{\"type\":\"string\",\"pattern\":\"^[A-Z]{2}-\\\\d{3}$\"}");
    YES(g, "\"AB-123\"");
    NO(g, "\"AB-12\"");
    NO(g, "\"ab-123\"");
    em_grammar_destroy(g);
    /* unanchored: the pattern may match anywhere in the string */
    g = schema_grammar("{\"type\":\"string\",\"pattern\":\"abc\"}");
    YES(g, "\"abc\"");
    YES(g, "\"xx abc yy\"");
    NO(g, "\"ab c\"");
    em_grammar_destroy(g);
    /* the pattern sees the decoded string: a quote is \" in the JSON text */
    g = schema_grammar("{\"type\":\"string\",\"pattern\":\"^a\\\"b\\\\\\\\c\\\\n$\"}");
    YES(g, "\"a\\\"b\\\\c\\n\"");
    NO(g, "\"a\"b\\c\\n\"");
    em_grammar_destroy(g);
    g = schema_grammar("{\"type\":\"string\",\"pattern\":\"^[^a]+$\"}");
    YES(g, "\"\\\"\\t\\u001fbc\"");
    NO(g, "\"bab\"");
    em_grammar_destroy(g);
    g = schema_grammar("{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}");
    YES(g, "\"ab\"");
    YES(g, "\"a\\nb\"");
    YES(g, "\"\xC3\xA9t\xC3\xA9\"");
    NO(g, "\"a\"");
    NO(g, "\"abcd\"");
    em_grammar_destroy(g);
    g = schema_grammar("{\"type\":\"string\",\"format\":\"date\"}");
    YES(g, "\"2024-02-29\"");
    NO(g, "\"2024-13-01\"");
    NO(g, "\"2024-1-01\"");
    em_grammar_destroy(g);
    g = schema_grammar("{\"type\":\"string\",\"format\":\"date-time\"}");
    YES(g, "\"2024-01-31T23:59:59Z\"");
    YES(g, "\"2024-01-31T08:00:00.123+02:00\"");
    NO(g, "\"2024-01-31 08:00:00Z\"");
    em_grammar_destroy(g);
    g = schema_grammar("{\"type\":\"string\",\"format\":\"uuid\"}");
    YES(g, "\"123e4567-e89b-12d3-a456-426614174000\"");
    NO(g, "\"123e4567e89b12d3a456426614174000\"");
    em_grammar_destroy(g);
    g = schema_grammar("{\"type\":\"string\",\"format\":\"time\"}");
    YES(g, "\"12:30:00Z\"");
    NO(g, "\"24:00:00Z\"");
    em_grammar_destroy(g);
}

static void test_refs(void)
{
    em_grammar *g = schema_grammar(
        "{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"value\":{\"type\":\"integer\"},"
        "\"children\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/node\"}}},"
        "\"required\":[\"value\"],\"additionalProperties\":false}},"
        "\"$ref\":\"#/$defs/node\"}");
    YES(g, "{\"value\":1}");
    YES(g, "{\"value\":1,\"children\":[{\"value\":2},{\"value\":3,\"children\":[{\"value\":4}]}]}");
    NO(g, "{\"value\":1,\"children\":[{\"v\":2}]}");
    NO(g, "{\"children\":[]}");
    em_grammar_destroy(g);
    /* definitions, a pointer with an escaped name, and the whole document */
    g = schema_grammar("{\"definitions\":{\"a/b\":{\"type\":\"integer\"}},\"type\":\"object\","
                       "\"properties\":{\"x\":{\"$ref\":\"#/definitions/a~1b\"},"
                       "\"next\":{\"$ref\":\"#\"}},\"additionalProperties\":false}");
    YES(g, "{\"x\":1,\"next\":{\"next\":{\"x\":3}}}");
    NO(g, "{\"x\":\"1\"}");
    em_grammar_destroy(g);
    schema_error("{\"$ref\":\"#/$defs/missing\"}", "does not resolve");
    schema_error("{\"$ref\":\"http://example.com/s.json\"}", "does not resolve");
    schema_error("{\"$defs\":{\"a\":{}},\"$ref\":\"#/$defs/a\",\"type\":\"object\"}", "'$ref' beside 'type'");
    /* a reference to itself with nothing else never finishes: refused, no crash */
    json_t *s = json_loads("{\"$ref\":\"#\"}", 0, NULL);
    char *gbnf = NULL;
    size_t len = 0;
    em_err err = { 0 };
    CHECK(em_json_schema_to_gbnf(s, NULL, &gbnf, &len, &err) == 0);
    em_grammar *bad = NULL;
    CHECK(gbnf && em_grammar_compile(gbnf, len, NULL, &bad, &err) != 0 && strstr(err.msg, "never finish"));
    em_grammar_destroy(bad);
    free(gbnf);
    json_decref(s);
}

static void test_unsupported(void)
{
    schema_error("{\"type\":\"object\",\"properties\":{\"tags\":{\"type\":\"array\",\"uniqueItems\":true}}}",
                 "json_schema: #/properties/tags: unsupported keyword 'uniqueItems'");
    schema_error("{\"type\":\"object\",\"patternProperties\":{\"^x\":{}}}", "unsupported keyword 'patternProperties'");
    schema_error("{\"type\":\"object\",\"minProperties\":1}", "unsupported keyword 'minProperties'");
    schema_error("{\"type\":\"integer\",\"multipleOf\":3}", "unsupported keyword 'multipleOf'");
    schema_error("{\"not\":{\"type\":\"string\"}}", "unsupported keyword 'not'");
    schema_error("{\"if\":{},\"then\":{}}", "unsupported keyword 'if'");
    schema_error("{\"type\":\"array\",\"prefixItems\":[{}]}", "unsupported keyword 'prefixItems'");
    schema_error("{\"type\":\"array\",\"items\":[{},{}]}", "'items' as an array (tuples) is not supported");
    schema_error("{\"type\":\"string\",\"format\":\"email\"}", "format 'email' is not supported");
    schema_error("{\"allOf\":[{},{}]}", "'allOf' with more than one schema");
    schema_error("{\"type\":\"string\",\"nullable\":true}", "unsupported keyword 'nullable'");
    schema_error("{\"type\":\"string\",\"pattern\":\"a(?=b)\"}", "lookahead");
    schema_error("{\"type\":\"string\",\"pattern\":\"(a)\\\\1\"}", "backreferences");
    schema_error("{\"type\":\"string\",\"pattern\":\"^a\",\"maxLength\":3}", "combining 'pattern'");
    schema_error("{\"type\":\"string\",\"maxLength\":100000}", "'maxLength' 100000 exceeds the supported 10000");
    schema_error("{\"type\":\"array\",\"minItems\":3,\"maxItems\":2}", "minItems is above maxItems");
    schema_error("{\"type\":\"date\"}", "unknown type 'date'");
    schema_error("false", "matches nothing");
    schema_error("[1]", "a schema must be an object or a boolean");
    /* keywords of the wrong shape */
    static const char *const bad_shape[][2] = {
        { "{\"properties\":5}", "'properties' must be an object" },
        { "{\"required\":[1]}", "'required' must hold strings" },
        { "{\"type\":\"array\",\"items\":\"x\"}", "'items' as an array" },
        { "{\"minItems\":-1}", "'minItems' must be a non-negative integer" },
        { "{\"enum\":[]}", "'enum' must be a non-empty array" },
        { "{\"type\":5}", "'type' must be a string or an array" },
        { "{\"type\":[]}", "'type' is an empty array" },
        { "{\"anyOf\":[]}", "'anyOf' must be a non-empty array" },
        { "{\"pattern\":5}", "'pattern' must be a string" },
        { "{\"$ref\":5}", "'$ref' must be a string" },
        { "{\"format\":1}", "'format' must be a string" },
        { "{\"minimum\":\"a\"}", "'minimum' must be a number" },
        { "{\"type\":\"object\",\"additionalProperties\":5}", "'additionalProperties' must be a boolean" },
        { "{\"type\":\"object\",\"required\":[\"x\"],\"additionalProperties\":false}",
          "required property 'x' is not in 'properties'" },
        { "{\"type\":\"integer\",\"minimum\":1e300}", "bounds beyond" },
    };
    for (size_t i = 0; i < sizeof bad_shape / sizeof bad_shape[0]; i++)
        schema_error(bad_shape[i][0], bad_shape[i][1]);
    /* nesting bound */
    char deep[4096] = "";
    for (int i = 0; i < 150; i++)
        strcat(deep, "{\"type\":\"array\",\"items\":");
    strcat(deep, "{}");
    for (int i = 0; i < 150; i++)
        strcat(deep, "}");
    schema_error(deep, "nested deeper than 100");
    /* annotations are fine */
    em_grammar *g = schema_grammar("{\"$schema\":\"https://json-schema.org/draft/2020-12/schema\",\"title\":\"t\","
                                   "\"description\":\"d\",\"type\":\"boolean\",\"default\":true,\"examples\":[false],"
                                   "\"$comment\":\"c\",\"uniqueItems\":false}");
    YES(g, "false");
    em_grammar_destroy(g);
}

static void test_json_object(void)
{
    char *gbnf = NULL;
    size_t len = 0;
    em_err err = { 0 };
    CHECKF(em_json_object_gbnf(NULL, &gbnf, &len, &err) == 0, "%s", err.msg);
    em_grammar *g = gbnf ? from_gbnf(gbnf, len, "json_object") : NULL;
    YES(g, "{}");
    YES(g, "{\"a\": [1, {\"b\": null}, \"\\u00e9\", -0.5e-3, true]}");
    NO(g, "[]");
    NO(g, "\"x\"");
    NO(g, "{\"a\"}");
    NO(g, "{\"a\":1");
    em_grammar_destroy(g);
    free(gbnf);
}

static em_grammar *regex_grammar(const char *re)
{
    char *gbnf = NULL;
    size_t len = 0;
    em_err err = { 0 };
    int rc = em_regex_to_gbnf(re, strlen(re), &gbnf, &len, &err);
    CHECKF(rc == 0, "regex %s: %s", re, err.msg);
    if (rc)
        return NULL;
    em_grammar *g = from_gbnf(gbnf, len, re);
    free(gbnf);
    return g;
}

static void regex_error(const char *re, const char *want)
{
    char *gbnf = NULL;
    size_t len = 0;
    em_err err = { 0 };
    int rc = em_regex_to_gbnf(re, strlen(re), &gbnf, &len, &err);
    CHECKF(rc != 0, "regex %s accepted, want \"%s\"", re, want);
    CHECKF(rc == 0 || strstr(err.msg, want), "regex %s: got \"%s\", want \"%s\"", re, err.msg, want);
    free(gbnf);
}

static void test_regex(void)
{
    static const struct { const char *re, *yes[4], *no[4]; } cases[] = {
        { "^a|b*c$", { "a", "ab", "bbc", "xxbc" }, { "", "ba", "bca", NULL } },
        { "^(ab)+$", { "ab", "abab", NULL }, { "", "aba", "ba", NULL } },
        { "^[^0-9]x?$", { "a", "ax", "-", NULL }, { "1", "axx", "", NULL } },
        { "^\\d{2,3}$", { "12", "123", NULL }, { "1", "1234", "ab", NULL } },
        { "^colou?r$", { "color", "colour", NULL }, { "colouur", NULL } },
        { "^(?:foo|bar)(?<n>\\.txt)?$", { "foo", "bar.txt", NULL }, { "baz", "foo.", NULL } },
        { "^x.y$", { "x-y", "x\xC3\xA9y", NULL }, { "x\ny", "xy", NULL } },
        { "^\\u00e9\\x41\\t$", { "\xC3\xA9" "A\t", NULL }, { "eA\t", NULL } },
        { "foo", { "foo", "xxfooyy", "\nfoo\n", NULL }, { "fo", "f o o", NULL } },
        { "^a{,3}$", { "a{,3}", NULL }, { "aaa", NULL } },
        { "^[\\w.-]+@[a-z]+\\.(com|org)$", { "a.b-c@x.com", "_@y.org", NULL }, { "a@b.net", "@x.com", NULL } },
        { "^\\s*\\S+$", { " \tx", "yz", NULL }, { " ", "a b", NULL } },
        { "^[a-c\\d]*?$", { "", "a1b2c3", NULL }, { "d", NULL } },
        { "^\\$\\^\\.\\[$", { "$^.[", NULL }, { "x", NULL } },
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        em_grammar *g = regex_grammar(cases[c].re);
        if (!g)
            continue;
        for (int k = 0; k < 4 && cases[c].yes[k]; k++)
            CHECKF(matches(g, cases[c].yes[k]) == 1, "/%s/ should match \"%s\"", cases[c].re, cases[c].yes[k]);
        for (int k = 0; k < 4 && cases[c].no[k]; k++)
            CHECKF(matches(g, cases[c].no[k]) == 0, "/%s/ should not match \"%s\"", cases[c].re, cases[c].no[k]);
        em_grammar_destroy(g);
    }
    regex_error("a(?=b)", "lookahead (?=...) is not supported");
    regex_error("(?<!a)b", "lookbehind");
    regex_error("(a)\\1", "backreferences (\\1)");
    regex_error("(?<x>a)\\k<x>", "backreferences (\\k<name>)");
    regex_error("\\bword", "word boundaries");
    regex_error("a++", "possessive quantifiers");
    regex_error("a**", "nothing to repeat");
    regex_error("*a", "nothing to repeat");
    regex_error("a^b", "anchor '^' is only supported at the start");
    regex_error("(a$)", "anchor '$'");
    regex_error("[z-a]", "range out of order");
    regex_error("[abc", "unterminated character class");
    regex_error("(ab", "missing ')'");
    regex_error("ab)", "unmatched ')'");
    regex_error("\\p{L}", "Unicode property escapes");
    regex_error("(?i)abc", "group flags");
    regex_error("a{5,2}", "maximum is below the minimum");
    regex_error("a{20000}", "exceeds the limit");
    regex_error("abc\\", "ends in a backslash");
    regex_error("\\q", "unknown escape \\q");
}

int main(void)
{
    test_objects();
    test_arrays_enums();
    test_integers();
    test_numbers();
    test_strings();
    test_refs();
    test_unsupported();
    test_json_object();
    test_regex();
    return test_summary("json_schema");
}
