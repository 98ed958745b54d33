/* test_perplexity.c — `ember perplexity` on tests/data/story.txt:
 *   - the perplexity (and its standard error) of the story models equals
 *     what this test computes itself with core/run/ref.c over the same windows
 *     (BOS first in each window of 128, the second half scored);
 *   - KL of a model against itself is exactly 0 with 100% top-token
 *     agreement;
 *   - ember's own Q8_0 and Q4_0 of TinyStories-656K order as expected
 *     against the F32 model (KL, top-token agreement, perplexity gap);
 *   - --save-logits / --base-logits give the same figures as --compare;
 *   - --report prints the table and writes the CSV and the SVG;
 *   - bad inputs fail with one line and exit status 2.
 * usage: test_perplexity BACKEND STORY.txt */
#include <math.h>
#include <stdint.h>

#include "core/model/model.h"
#include "core/run/ref.h"
#include "core/text/tokenizer.h"
#include "tests/common/testutil.h"

enum { CTX = 128 };

static const char *bin, *backend, *story;
static char model_path[3][1024];

/* Perplexity over the windows, through the reference forward pass. */
static int ref_ppl(const char *path, double *ppl, double *se)
{
    em_model *m = NULL;
    em_tokenizer *tok = NULL;
    em_ref *r = NULL;
    int32_t *ids = NULL;
    float *logits = NULL;
    size_t len = 0, n = 0;
    char *text = test_read_file(story, &len);
    int rc = -1;
    if (!text || em_model_open(path, &m, NULL) || em_tokenizer_create(em_model_gguf(m), &tok, NULL) ||
        em_tokenizer_encode(tok, text, len, 1, 0, &ids, &n, NULL) || em_ref_create(m, CTX, &r, NULL))
        goto done;
    uint32_t V = em_model_hparams(m)->n_vocab;
    logits = malloc(V * sizeof *logits);
    int32_t bos = em_tokenizer_add_bos(tok) ? em_tokenizer_bos(tok) : -1;
    double sum = 0, sum2 = 0;
    uint64_t count = 0;
    for (size_t w = 0; w < n / CTX; w++) {
        const int32_t *win = ids + w * CTX;
        for (uint32_t j = 0; j + 1 < CTX; j++) {
            int32_t t = j == 0 && bos >= 0 ? bos : win[j];
            int scored = j >= CTX / 2;
            if (em_ref_forward(r, t, j, scored ? logits : NULL, NULL))
                goto done;
            if (!scored)
                continue;
            double mx = logits[0], s = 0;
            for (uint32_t v = 1; v < V; v++)
                mx = logits[v] > mx ? logits[v] : mx;
            for (uint32_t v = 0; v < V; v++)
                s += exp(logits[v] - mx);
            double nll = mx + log(s) - logits[win[j + 1]];
            sum += nll;
            sum2 += nll * nll;
            count++;
        }
    }
    double mean = sum / (double)count;
    *ppl = exp(mean);
    *se = *ppl * sqrt((sum2 / (double)count - mean * mean) / (double)(count - 1));
    printf("%s: %llu positions scored by core/run/ref.c: perplexity %.6f ± %.6f\n", path,
           (unsigned long long)count, *ppl, *se);
    rc = 0;
done:
    free(logits);
    free(ids);
    free(text);
    em_ref_destroy(r);
    em_tokenizer_destroy(tok);
    em_model_close(m);
    return rc;
}

/* Run `ember perplexity ARGS... --file STORY --backend B`; *out gets stdout. */
static int ember_ppl(char **out, char **err, const char *a0, const char *a1, const char *a2, const char *a3,
                     const char *a4, const char *a5, const char *a6, const char *a7)
{
    char *argv[24] = { (char *)bin, "perplexity", "--file", (char *)story, "--backend", (char *)backend };
    int n = 6;
    const char *extra[] = { a0, a1, a2, a3, a4, a5, a6, a7 };
    for (int i = 0; i < 8 && extra[i]; i++)
        argv[n++] = (char *)extra[i];
    argv[n] = NULL;
    return test_run(argv, out, err);
}

/* The numbers after "prefix" on its line of out (sscanf format fmt). */
static int field(const char *out, const char *prefix, const char *fmt, double *a, double *b)
{
    const char *p = out ? strstr(out, prefix) : NULL;
    return p ? sscanf(p + strlen(prefix), fmt, a, b) : 0;
}

static void line_of(const char *out, const char *prefix, char *dst, size_t cap)
{
    const char *p = out ? strstr(out, prefix) : NULL;
    const char *e = p ? strchr(p, '\n') : NULL;
    size_t n = p ? (e ? (size_t)(e - p) : strlen(p)) : 0;
    n = n < cap - 1 ? n : cap - 1;
    memcpy(dst, p ? p : "", n);
    dst[n] = 0;
}

static void test_against_ref(void)
{
    int cpu = strcmp(backend, "cpu") == 0;
    for (int i = 0; i < 3; i++) {
        double want = 0, want_se = 0, got = 0, got_se = 0;
        CHECK(ref_ppl(model_path[i], &want, &want_se) == 0);
        char *out = NULL, *err = NULL;
        int st = ember_ppl(&out, &err, "--model", model_path[i], "--ctx", "128", NULL, NULL, NULL, NULL);
        CHECKF(st == 0, "exit %d: %s", st, err);
        CHECK(field(out, "perplexity: ", "%lf ± %lf", &got, &got_se) == 2);
        /* cpu: the same numbers to the 4 printed decimals; vulkan: close */
        double tol = cpu ? 2e-4 + 1e-6 * want : 2e-3 * want;
        printf("ember perplexity (%s): %.4f ± %.4f\n", backend, got, got_se);
        CHECKF(fabs(got - want) < tol, "%s: perplexity %.6f, core/run/ref.c says %.6f", model_path[i], got, want);
        CHECKF(fabs(got_se - want_se) < tol, "%s: standard error %.6f, expected %.6f", model_path[i], got_se, want_se);
        CHECK(out && strstr(out, "windows of 128, scoring the last 63 of each"));
        free(out);
        free(err);
    }
}

static void test_self_kl(void)
{
    char *out = NULL, *err = NULL;
    double mean = -1, se = -1, p99 = -1, mx = -1, top = 0, top_se = 0;
    int st = ember_ppl(&out, &err, "--model", model_path[1], "--compare", model_path[1], "--ctx", "128", NULL, NULL);
    CHECKF(st == 0, "exit %d: %s", st, err);
    CHECK(field(out, "KL divergence: mean ", "%lf ± %lf", &mean, &se) == 2);
    CHECK(field(out, ", p99 ", "%lf, max %lf", &p99, &mx) == 2);
    CHECK(field(out, "top token agrees: ", "%lf%% ± %lf", &top, &top_se) == 2);
    CHECKF(mean == 0 && p99 == 0 && mx == 0 && top == 100, "self KL: mean %g p99 %g max %g top %g%%", mean, p99, mx, top);
    free(out);
    free(err);
}

typedef struct { double ppl, kl, top; char kl_line[256]; } cmp_result;

static void compare(const char *model, const char *base_flag, const char *base, cmp_result *r)
{
    char *out = NULL, *err = NULL;
    double se;
    memset(r, 0, sizeof *r);
    int st = ember_ppl(&out, &err, "--model", model, base_flag, base, "--ctx", "128", NULL, NULL);
    CHECKF(st == 0, "exit %d: %s", st, err);
    CHECK(field(out, "perplexity: ", "%lf ± %lf", &r->ppl, &se) == 2);
    CHECK(field(out, "KL divergence: mean ", "%lf ± %lf", &r->kl, &se) == 2);
    CHECK(field(out, "top token agrees: ", "%lf%% ± %lf", &r->top, &se) == 2);
    line_of(out, "KL divergence:", r->kl_line, sizeof r->kl_line);
    free(out);
    free(err);
}

static void test_order_and_files(const char *tmp)
{
    char q8[1200], q4[1200], lp[1200], csv[1200], svg[1200];
    snprintf(q8, sizeof q8, "%s/656K-Q8_0.gguf", tmp);
    snprintf(q4, sizeof q4, "%s/656K-Q4_0.gguf", tmp);
    snprintf(lp, sizeof lp, "%s/base.lp", tmp);
    snprintf(csv, sizeof csv, "%s/report.csv", tmp);
    snprintf(svg, sizeof svg, "%s/report.svg", tmp);
    char *qa[] = { (char *)bin, "quantize", model_path[1], q8, "Q8_0", NULL };
    char *qb[] = { (char *)bin, "quantize", model_path[1], q4, "Q4_0", NULL };
    CHECK(test_run(qa, NULL, NULL) == 0 && test_run(qb, NULL, NULL) == 0);

    double f32_ppl = 0, se;
    char *out = NULL, *err = NULL;
    int st = ember_ppl(&out, &err, "--model", model_path[1], "--ctx", "128", "--save-logits", lp, NULL, NULL);
    CHECKF(st == 0, "exit %d: %s", st, err);
    CHECK(field(out, "perplexity: ", "%lf ± %lf", &f32_ppl, &se) == 2);
    free(out);
    free(err);

    cmp_result r8, r4, r4b;
    compare(q8, "--compare", model_path[1], &r8);
    compare(q4, "--compare", model_path[1], &r4);
    printf("656K against F32: Q8_0 ppl %.4f KL %.6f top %.2f%%; Q4_0 ppl %.4f KL %.6f top %.2f%%; F32 ppl %.4f\n",
           r8.ppl, r8.kl, r8.top, r4.ppl, r4.kl, r4.top, f32_ppl);
    CHECKF(r8.kl > 0 && r8.kl < r4.kl / 5, "KL: Q8_0 %g, Q4_0 %g", r8.kl, r4.kl);
    CHECKF(r8.top >= r4.top && r8.top > 95, "top-1: Q8_0 %g%%, Q4_0 %g%%", r8.top, r4.top);
    CHECKF(fabs(r8.ppl - f32_ppl) < fabs(r4.ppl - f32_ppl), "perplexity gaps: Q8_0 %g, Q4_0 %g",
           r8.ppl - f32_ppl, r4.ppl - f32_ppl);

    /* saved base logits: the same figures as the live comparison (no --ctx: taken from the file) */
    out = err = NULL;
    st = ember_ppl(&out, &err, "--model", q4, "--base-logits", lp, NULL, NULL, NULL, NULL);
    CHECKF(st == 0, "exit %d: %s", st, err);
    free(out);
    free(err);
    compare(q4, "--base-logits", lp, &r4b);
    CHECKF(strcmp(r4.kl_line, r4b.kl_line) == 0 && r4.top == r4b.top, "saved: '%s' live: '%s'",
           r4b.kl_line, r4.kl_line);

    /* report */
    out = err = NULL;
    char *argv[] = { (char *)bin, "perplexity", "--model", model_path[1], "--file", (char *)story,
                     "--backend", (char *)backend, "--ctx", "128", "--report", q8, q4,
                     "--csv", csv, "--svg", svg, NULL };
    st = test_run(argv, &out, &err);
    CHECKF(st == 0, "report exit %d: %s", st, err);
    CHECK(out && strstr(out, "tok/s") && strstr(out, "(base)") && strstr(out, "656K-Q4_0.gguf"));
    char *c = test_read_file(csv, NULL), *s = test_read_file(svg, NULL);
    CHECK(c && strncmp(c, "type,file,size_bytes,", 21) == 0);
    int lines = test_count_lines(c);
    CHECKF(lines == 4, "CSV has %d lines", lines);
    CHECK(c && strstr(c, "\nF32,") && strstr(c, "\nQ8_0,") && strstr(c, "\nQ4_0,"));
    CHECK(s && strncmp(s, "<?xml", 5) == 0 && strstr(s, "</svg>") && strstr(s, ">Q4_0<") && strstr(s, ">Q8_0<"));
    free(c);
    free(s);
    free(out);
    free(err);
}

static void test_errors(void)
{
    char *a1[] = { (char *)bin, "perplexity", "--model", model_path[1], "--file", (char *)story, "--ctx", "4096",
                   "--backend", (char *)backend, NULL };
    test_expect_cli_error("text shorter than a window", a1, NULL);
    char *a2[] = { (char *)bin, "perplexity", "--model", model_path[1], "--file", (char *)story,
                   "--base-logits", (char *)story, "--backend", (char *)backend, NULL };
    test_expect_cli_error("not a base-logits file", a2, NULL);
    char *a3[] = { (char *)bin, "perplexity", "--model", model_path[1], "--file", (char *)story, "--ctx", "128",
                   "--compare", model_path[0], "--backend", (char *)backend, NULL };
    test_expect_cli_error("another vocabulary", a3, NULL);
    char *a4[] = { (char *)bin, "perplexity", "--model", model_path[1], NULL };
    test_expect_cli_error("no --file", a4, NULL);
    char *a5[] = { (char *)bin, "perplexity", "--model", model_path[1], "--file", (char *)story, "--report", NULL };
    test_expect_cli_error("--report without models", a5, NULL);
    char *a6[] = { (char *)bin, "perplexity", "--model", "/nonexistent.gguf", "--file", (char *)story, NULL };
    test_expect_cli_error("missing model", a6, NULL);
    /* outputs are checked before the evaluation, not after it */
    char *a7[] = { (char *)bin, "perplexity", "--model", model_path[1], "--file", (char *)story, "--ctx", "128",
                   "--save-logits", "/", "--backend", (char *)backend, NULL };
    test_expect_cli_error("--save-logits a directory", a7, "is a directory");
    char *a8[] = { (char *)bin, "perplexity", "--model", model_path[1], "--file", (char *)story, "--ctx", "128",
                   "--report", model_path[1], "--csv", "/nonexistent-ember-dir/r.csv", "--backend", (char *)backend,
                   NULL };
    test_expect_cli_error("--csv in a missing directory", a8, "no such directory");
    char *a9[] = { (char *)bin, "perplexity", "--model", model_path[1], "--file", (char *)story, "--ctx", "128",
                   "--report", model_path[1], "--csv", "r.csv", "--svg", "r.csv", "--backend", (char *)backend,
                   NULL };
    test_expect_cli_error("--csv and --svg the same file", a9, "the same file");
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: test_perplexity BACKEND STORY.txt\n");
        return 2;
    }
    backend = argv[1];
    story = argv[2];
    bin = getenv("EMBER_BIN");
    if (!test_shared_dir() || !bin) {
        printf("SKIP: shared folder or EMBER_BIN absent\n");
        return 77;
    }
    static const char *names[3] = { "stories260K", "TinyStories-656K-F32", "TinyStories-656K-Q8_0" };
    for (int i = 0; i < 3; i++) {
        char rel[128];
        snprintf(rel, sizeof rel, "models/%s.gguf", names[i]);
        snprintf(model_path[i], sizeof model_path[i], "%s", test_shared(rel));
    }
    char *tmp = test_tmpdir();
    test_against_ref();
    test_self_kl();
    test_order_and_files(tmp);
    test_errors();
    test_rmtree(tmp);
    free(tmp);
    return test_summary("perplexity");
}
