/* nmse.c — compare two raw float32 files: prints the normalised mean squared
 * error sum((a-b)^2)/sum(b^2) (b is the reference) and, given a limit, exits 0
 * when NMSE < limit, 1 otherwise, 2 on bad input.
 * With --rows V FRAC (mixture-of-experts logits, rows of V values): row by
 * row instead, as ../shared/README.md asks of MoE goldens — a router
 * near-tie that the reference's rounding decides sends a token to another
 * expert and moves its row far while the others agree — the median row's
 * NMSE must be below the limit and at most FRAC of the rows beyond 100x it. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp_double(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return a < b ? -1 : a > b;
}

static float *load(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "nmse: %s: cannot open\n", path);
        return NULL;
    }
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    float *v = malloc(sz > 0 ? (size_t)sz : 1);
    *n = (size_t)sz / sizeof(float);
    if (!v || fread(v, sizeof(float), *n, f) != *n) {
        fprintf(stderr, "nmse: %s: read failed\n", path);
        free(v);
        v = NULL;
    }
    fclose(f);
    return v;
}

int main(int argc, char **argv)
{
    if (argc != 3 && argc != 4 && argc != 7) {
        fprintf(stderr, "usage: nmse A REF [LIMIT [--rows V FRAC]]\n");
        return 2;
    }
    size_t row = 0;
    double frac = 0;
    if (argc == 7) {
        row = (size_t)strtoul(argv[5], NULL, 10);
        frac = atof(argv[6]);
        if (strcmp(argv[4], "--rows") != 0 || row == 0 || !(frac >= 0 && frac < 1)) {
            fprintf(stderr, "nmse: --rows V FRAC: V positive, FRAC in [0, 1)\n");
            return 2;
        }
    }
    size_t na, nb;
    float *a = load(argv[1], &na), *b = load(argv[2], &nb);
    if (!a || !b)
        return 2;
    if (na != nb || na == 0) {
        fprintf(stderr, "nmse: sizes differ: %zu vs %zu floats\n", na, nb);
        return 1;
    }
    double num = 0, den = 0;
    for (size_t i = 0; i < na; i++) {
        if (!isfinite(a[i])) {
            fprintf(stderr, "nmse: %s: non-finite value at %zu\n", argv[1], i);
            return 1;
        }
        double d = (double)a[i] - b[i];
        num += d * d;
        den += (double)b[i] * b[i];
    }
    double nmse = den > 0 ? num / den : num;
    printf("nmse %.3e over %zu values\n", nmse, na);
    int ok = argc < 4 || nmse < atof(argv[3]);
    if (row) {
        if (na % row) {
            fprintf(stderr, "nmse: %zu values are not rows of %zu\n", na, row);
            return 2;
        }
        size_t nr = na / row, beyond = 0, worst = 0;
        double limit = atof(argv[3]), *r = malloc(nr * sizeof *r), *sorted = malloc(nr * sizeof *sorted);
        if (!r || !sorted)
            return 2;
        for (size_t i = 0; i < nr; i++) {
            double rn = 0, rd = 0;
            for (size_t k = i * row; k < (i + 1) * row; k++) {
                double d = (double)a[k] - b[k];
                rn += d * d;
                rd += (double)b[k] * b[k];
            }
            r[i] = sorted[i] = rd > 0 ? rn / rd : rn;
            beyond += r[i] >= 100 * limit;
            worst = r[i] > r[worst] ? i : worst;
        }
        qsort(sorted, nr, sizeof *sorted, cmp_double);
        double median = nr % 2 ? sorted[nr / 2] : (sorted[nr / 2 - 1] + sorted[nr / 2]) / 2;
        printf("rows of %zu: median nmse %.3e, worst %.3e (row %zu), %zu of %zu beyond 100x the limit "
               "(at most %.0f%% allowed)\n", row, median, r[worst], worst, beyond, nr, frac * 100);
        ok = median < limit && (double)beyond <= frac * (double)nr;
        free(r);
        free(sorted);
    }
    free(a);
    free(b);
    return ok ? 0 : 1;
}
