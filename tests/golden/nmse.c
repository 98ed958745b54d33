/* nmse.c — compare two raw float32 files: prints the normalised mean squared
 * error sum((a-b)^2)/sum(b^2) (b is the reference) and, given a limit, exits 0
 * when NMSE < limit, 1 otherwise, 2 on bad input. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    if (argc < 3) {
        fprintf(stderr, "usage: nmse A REF [LIMIT]\n");
        return 2;
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
    free(a);
    free(b);
    if (argc > 3)
        return nmse < atof(argv[3]) ? 0 : 1;
    return 0;
}
