/* bench_grammar.c — token mask timings (core/grammar/grammar.h) over real
 * vocabularies: for a JSON grammar and a JSON Schema grammar, at states
 * along a document, the cold mask (a fresh matcher: nothing memoized), the
 * uncached mask again (transitions memoized), and the cached one (an
 * em_gcache hit), each the median of REPS runs (the host is shared). Built,
 * not run by the test suites:
 *   bench_grammar [VOCAB.gguf ...]   (default: the shared llama-spm and
 *                                     starcoder vocabularies) */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/grammar/grammar.h"
#include "core/grammar/json_schema.h"
#include "tests/common/gvocab_tok.h"

#define REPS 5

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v)
{
    qsort(v, REPS, sizeof *v, cmp_double);
    return v[REPS / 2];
}

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static const char SCHEMA[] =
    "{\"type\":\"object\",\"properties\":{"
    "\"name\":{\"type\":\"string\",\"maxLength\":40},"
    "\"age\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":150},"
    "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\"},\"maxItems\":8},"
    "\"kind\":{\"enum\":[\"cat\",\"dog\",\"bird\"]},"
    "\"owner\":{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"string\",\"format\":\"uuid\"}},"
    "\"required\":[\"id\"],\"additionalProperties\":false}},"
    "\"required\":[\"name\",\"age\",\"kind\"],\"additionalProperties\":false}";

typedef struct {
    const char *name;
    const char *const *steps;   /* prefixes fed one after another */
    size_t      n_steps;
} doc;

static const char *const json_steps[] = { "", "{\"", "name", "\": \"", "Ada Lo", "vel", "ace\", \"",
                                          "age\": ", "3", "6, \"tags\": [", "\"x\"", "]}" };
static const char *const schema_steps[] = { "", "{\"name\": \"", "Ada", "\", \"age\": ", "3", "6",
                                            ", \"tags\": [\"", "x\"", "], \"kind\": \"", "cat\"", "}" };

static int bench_one(const char *label, const em_grammar *g, const em_gvocab *v, const doc *d)
{
    size_t words = em_gvocab_mask_words(v);
    uint32_t *mask = malloc(words * sizeof *mask);
    em_gcache *cache = NULL;
    em_gmatch *walker = NULL;
    em_err err = { 0 };
    double cold_sum = 0, again_sum = 0, warm_sum = 0, cold_max = 0;
    int n = 0, rc = 1;
    if (!mask || em_gcache_create(g, v, 64u << 20, &cache, &err) || em_gmatch_create(g, &walker, &err))
        goto done;
    printf("%s, %s (%u tokens, %u trie nodes):\n", label, d->name, em_gvocab_n_vocab(v), em_gvocab_n_nodes(v));
    printf("  %-24s %8s %8s %8s %8s\n", "after", "allowed", "cold ms", "again ms", "warm us");
    char prefix[512] = "";
    for (size_t i = 0; i < d->n_steps; i++) {
        if (em_gmatch_accept(walker, d->steps[i], strlen(d->steps[i]))) {
            fprintf(stderr, "bench_grammar: step %zu refused\n", i);
            goto done;
        }
        strncat(prefix, d->steps[i], sizeof prefix - strlen(prefix) - 1);
        double cold[REPS], again[REPS], warm[REPS];
        for (int r = 0; r < REPS; r++) {
            /* cold: a fresh matcher brought to the same state */
            em_gmatch *m = NULL;
            if (em_gmatch_create(g, &m, &err) || em_gmatch_accept(m, prefix, strlen(prefix)))
                goto done;
            double t0 = now_us();
            em_gmatch_allowed(m, v, NULL, mask, &err);
            double t1 = now_us();
            em_gmatch_allowed(m, v, NULL, mask, &err);
            double t2 = now_us();
            em_gmatch_allowed(m, v, cache, mask, &err);        /* fills the cache (once) */
            double t3 = now_us();
            em_gmatch_allowed(walker, v, cache, mask, &err);   /* another matcher: a hit */
            double t4 = now_us();
            cold[r] = t1 - t0;
            again[r] = t2 - t1;
            warm[r] = t4 - t3;
            em_gmatch_destroy(m);
        }
        double tc = median(cold), ta = median(again), tw = median(warm);
        uint32_t allowed = 0;
        for (size_t w = 0; w < words; w++)
            allowed += (uint32_t)__builtin_popcount(mask[w]);
        const char *shown = strlen(prefix) > 22 ? prefix + strlen(prefix) - 22 : prefix;
        char show[32];
        size_t k = 0;
        for (; *shown && k < sizeof show - 1; shown++)
            show[k++] = *shown == '\n' ? ' ' : *shown;
        show[k] = 0;
        printf("  %-24s %8u %8.2f %8.2f %8.1f\n", show, allowed, tc / 1e3, ta / 1e3, tw);
        cold_sum += tc;
        again_sum += ta;
        warm_sum += tw;
        if (tc > cold_max)
            cold_max = tc;
        n++;
    }
    em_gcache_stats st;
    em_gcache_get_stats(cache, &st);
    printf("  mean: cold %.2f ms (max %.2f), again %.2f ms, warm %.1f us; cache %zu entries, %zu bytes, "
           "%llu hits\n\n", cold_sum / n / 1e3, cold_max / 1e3, again_sum / n / 1e3, warm_sum / n, st.entries,
           st.bytes, (unsigned long long)st.hits);
    rc = 0;
done:
    if (rc)
        fprintf(stderr, "bench_grammar: %s\n", err.msg);
    em_gmatch_destroy(walker);
    em_gcache_destroy(cache);
    free(mask);
    return rc;
}

int main(int argc, char **argv)
{
    const char *shared = getenv("EMBER_SHARED") ? getenv("EMBER_SHARED") : "../shared";
    char def1[1024], def2[1024];
    snprintf(def1, sizeof def1, "%s/golden/tokenizer/ggml-vocab-llama-spm.gguf", shared);
    snprintf(def2, sizeof def2, "%s/golden/tokenizer/ggml-vocab-starcoder.gguf", shared);
    const char *defaults[] = { def1, def2 };
    const char **paths = argc > 1 ? (const char **)argv + 1 : defaults;
    int n_paths = argc > 1 ? argc - 1 : 2;

    static const char json_gbnf[] =
        "root   ::= object\n"
        "value  ::= object | array | string | number | (\"true\" | \"false\" | \"null\")\n"
        "object ::= \"{\" ws ( member (\",\" ws member)* )? \"}\"\n"
        "member ::= string ws \":\" ws value ws\n"
        "array  ::= \"[\" ws ( value ws (\",\" ws value ws)* )? \"]\"\n"
        "string ::= \"\\\"\" ( [^\"\\\\\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4}) )* \"\\\"\"\n"
        "number ::= \"-\"? (\"0\" | [1-9] [0-9]{0,15}) (\".\" [0-9]+)? ([eE] [-+]? [0-9]{1,3})?\n"
        "ws     ::= | \" \" | \"\\n\" [ \\t]{0,20}\n";
    em_err err = { 0 };
    em_grammar *gj = NULL, *gs = NULL;
    json_error_t jerr;
    json_t *schema = json_loads(SCHEMA, 0, &jerr);
    char *sg = NULL;
    size_t sg_len = 0;
    if (em_grammar_compile(json_gbnf, strlen(json_gbnf), NULL, &gj, &err) || !schema ||
        em_json_schema_to_gbnf(schema, NULL, &sg, &sg_len, &err) ||
        em_grammar_compile(sg, sg_len, NULL, &gs, &err)) {
        fprintf(stderr, "bench_grammar: %s\n", err.msg);
        return 1;
    }
    json_decref(schema);
    free(sg);
    doc dj = { "JSON grammar", json_steps, sizeof json_steps / sizeof json_steps[0] };
    doc ds = { "JSON Schema grammar", schema_steps, sizeof schema_steps / sizeof schema_steps[0] };
    int rc = 0;
    for (int i = 0; i < n_paths; i++) {
        em_gguf *gg = NULL;
        em_tokenizer *t = NULL;
        em_gvocab *v = NULL;
        double t0 = now_us();
        if (gvocab_open(paths[i], &gg, &t, &v, &err)) {
            fprintf(stderr, "bench_grammar: %s: %s\n", paths[i], err.msg);
            rc = 1;
        } else {
            printf("%s: vocabulary trie built in %.1f ms (tokenizer included)\n\n", paths[i],
                   (now_us() - t0) / 1e3);
            const char *base = strrchr(paths[i], '/') ? strrchr(paths[i], '/') + 1 : paths[i];
            rc |= bench_one(base, gj, v, &dj);
            rc |= bench_one(base, gs, v, &ds);
        }
        em_gvocab_destroy(v);
        em_tokenizer_destroy(t);
        em_gguf_close(gg);
    }
    em_grammar_destroy(gj);
    em_grammar_destroy(gs);
    return rc;
}
