/* test_tmpl_golden.c — every case of every chat template in
 * ../shared/golden/templates rendered by core/chat_tmpl and compared byte
 * for byte with what Jinja2 rendered (README.md there says how); an
 * "error": true case must fail to render. Prints a pass count per template
 * and, for a mismatch, the first differing byte with both texts around it.
 * Skips (77) without the shared folder; fails if no case ran. */
#include <dirent.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/tmpl/chat_tmpl.h"
#include "tests/common/testutil.h"

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Print up to 60 bytes of s from off, escaped, on one line. */
static void snippet(const char *label, const char *s, size_t len, size_t off)
{
    size_t a = off > 30 ? off - 30 : 0, b = off + 30 < len ? off + 30 : len;
    fprintf(stderr, "    %s [%zu..%zu]: \"", label, a, b);
    for (size_t i = a; i < b; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (i == off)
            fputs("\xc2\xbb", stderr);   /* » marks the first difference */
        if (ch == '\n')
            fputs("\\n", stderr);
        else if (ch == '\t')
            fputs("\\t", stderr);
        else if (ch == '"' || ch == '\\')
            fprintf(stderr, "\\%c", ch);
        else if (ch < 0x20 || ch == 0x7f)
            fprintf(stderr, "\\x%02x", ch);
        else
            fputc(ch, stderr);
    }
    fputs("\"\n", stderr);
}

int main(void)
{
    if (!test_shared_dir()) {
        printf("tmpl-golden: no shared folder: skipped\n");
        return 77;
    }
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", test_shared("golden/templates"));
    DIR *d = opendir(dir);
    if (!d) {
        printf("tmpl-golden: no %s: skipped\n", dir);
        return 77;
    }
    char *names[512];
    size_t n_names = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n_names < 512) {
        size_t l = strlen(e->d_name);
        if (l > 6 && !strcmp(e->d_name + l - 6, ".jinja"))
            names[n_names++] = strndup(e->d_name, l - 6);
    }
    closedir(d);
    qsort(names, n_names, sizeof *names, cmp_names);

    struct tm now = { .tm_year = 125, .tm_mon = 2, .tm_mday = 14, .tm_hour = 9, .tm_min = 26,
                      .tm_sec = 53, .tm_wday = 5, .tm_yday = 72, .tm_isdst = 0 };
    em_tmpl_opts opts = { .now = &now };
    int total = 0, passed = 0, templates_ok = 0;
    for (size_t t = 0; t < n_names; t++) {
        char path[4200];
        snprintf(path, sizeof path, "%s/%s.jinja", dir, names[t]);
        size_t src_len = 0;
        char *src = test_read_file(path, &src_len);
        snprintf(path, sizeof path, "%s/%s.cases.json", dir, names[t]);
        json_error_t jerr;
        json_t *cases = json_load_file(path, 0, &jerr);
        CHECKF(src && cases && json_is_array(cases), "%s: cannot read the template or its cases", names[t]);
        if (!src || !cases) {
            free(src);
            json_decref(cases);
            continue;
        }
        em_tmpl *tm = NULL;
        em_err err = { 0 };
        int prc = em_tmpl_parse(src, src_len, &tm, &err);
        CHECKF(prc == 0, "%s: does not parse: %s", names[t], err.msg);
        size_t n_cases = json_array_size(cases);
        int ok_here = 0;
        for (size_t i = 0; i < n_cases; i++) {
            json_t *cs = json_array_get(cases, i);
            const char *cname = json_string_value(json_object_get(cs, "name"));
            int want_error = json_is_true(json_object_get(cs, "error"));
            json_t *want = json_object_get(cs, "expected");
            json_t *vars = json_object();
            json_object_set(vars, "messages", json_object_get(cs, "messages"));
            json_object_set_new(vars, "tools", json_null());
            json_object_set_new(vars, "documents", json_null());
            json_object_set(vars, "add_generation_prompt", json_object_get(cs, "add_generation_prompt"));
            json_object_set(vars, "bos_token", json_object_get(cs, "bos_token"));
            json_object_set(vars, "eos_token", json_object_get(cs, "eos_token"));
            total++;
            char *out = NULL;
            size_t out_len = 0;
            em_err rerr = { 0 };
            int rc = tm ? em_tmpl_render(tm, vars, &opts, &out, &out_len, &rerr) : -1;
            if (want_error) {
                CHECKF(rc != 0, "%s/%s: rendered, but Jinja2 raised %s", names[t], cname,
                       json_string_value(json_object_get(cs, "error_message")));
                if (rc != 0) {
                    ok_here++;
                    passed++;
                }
            } else if (rc != 0) {
                CHECKF(0, "%s/%s: render failed: %s", names[t], cname, rerr.msg);
            } else {
                const char *w = json_string_value(want);
                size_t wl = json_string_length(want);
                if (w && wl == out_len && memcmp(w, out, wl) == 0) {
                    ok_here++;
                    passed++;
                } else {
                    size_t off = 0;
                    while (w && off < wl && off < out_len && w[off] == out[off])
                        off++;
                    CHECKF(0, "%s/%s: differs at byte %zu (expected %zu bytes, got %zu)", names[t], cname,
                           off, wl, out_len);
                    if (w) {
                        snippet("expected", w, wl, off);
                        snippet("rendered", out, out_len, off);
                    }
                }
            }
            free(out);
            json_decref(vars);
        }
        printf("%-48s %d/%zu\n", names[t], ok_here, n_cases);
        if ((size_t)ok_here == n_cases)
            templates_ok++;
        em_tmpl_destroy(tm);
        json_decref(cases);
        free(src);
    }
    for (size_t t = 0; t < n_names; t++)
        free(names[t]);
    printf("tmpl-golden: %d/%d cases byte-exact, %d/%zu templates fully\n", passed, total, templates_ok,
           n_names);
    CHECKF(total > 0, "no case ran");
    return test_summary("tmpl-golden");
}
