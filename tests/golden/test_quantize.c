/* test_quantize.c — `ember quantize` against the reference tool: each F32
 * synth model quantized by ember to Q8_0, Q4_0, Q4_K_M, Q5_K_M and Q6_K must
 * choose exactly the reference file's type for every tensor, round (nearly)
 * every block to the same bytes, keep the metadata, and give logits within
 * NMSE 1e-3 of the golden logits of that type (../shared/golden/logits,
 * which the reference made from its own quantized files).
 * usage: test_quantize BACKEND (cpu | vulkan) */
#include <math.h>
#include <stdint.h>

#include "core/model/gguf.h"
#include "tests/common/testutil.h"

static float *load_f32(const char *path, size_t *n)
{
    size_t len = 0;
    char *p = test_read_file(path, &len);
    *n = len / 4;
    return (float *)(void *)p;
}

/* Types, block bytes and metadata of ours against the reference's. */
static void compare_files(const char *ours_path, const char *ref_path, const char *in_path, const char *label)
{
    em_gguf *ours = NULL, *ref = NULL, *in = NULL;
    em_err err = { 0 };
    if (em_gguf_open(ours_path, &ours, &err) || em_gguf_open(ref_path, &ref, &err) ||
        em_gguf_open(in_path, &in, &err)) {
        CHECKF(0, "%s: %s", label, err.msg);
        goto done;
    }
    CHECKF(em_gguf_n_tensors(ours) == em_gguf_n_tensors(ref), "%s: tensor count", label);
    uint64_t blocks = 0, same = 0;
    for (size_t i = 0; i < em_gguf_n_tensors(ref); i++) {
        const em_gguf_tensor *r = em_gguf_tensor_at(ref, i), *o = em_gguf_find_tensor(ours, r->name);
        if (!o) {
            CHECKF(0, "%s: %s missing", label, r->name);
            continue;
        }
        CHECKF(o->type == r->type, "%s: %s is %s, the reference chose %s", label, r->name,
               em_ttype_name(o->type), em_ttype_name(r->type));
        if (o->type != r->type || o->nbytes != r->nbytes)
            continue;
        const em_ttype_info *ti = em_ttype_get(r->type);
        uint64_t bytes = ti->blck == 1 ? ti->bytes * 32u : ti->bytes;   /* plain types: 32 at a time */
        for (uint64_t off = 0; off < r->nbytes; off += bytes) {
            uint64_t k = r->nbytes - off < bytes ? r->nbytes - off : bytes;
            blocks++;
            same += memcmp((const uint8_t *)o->data + off, (const uint8_t *)r->data + off, k) == 0;
        }
    }
    double share = blocks ? (double)same / (double)blocks : 0;
    printf("%-26s blocks identical to the reference: %llu/%llu (%.2f%%)\n", label, (unsigned long long)same,
           (unsigned long long)blocks, 100 * share);
    CHECKF(share >= 0.99, "%s: only %.2f%% of blocks match the reference", label, 100 * share);
    /* metadata: every input key is there; the file type is the reference's */
    for (size_t i = 0; i < em_gguf_n_kv(in); i++) {
        const em_gguf_kv *kv = em_gguf_kv_at(in, i);
        const em_gguf_value *v = em_gguf_get(ours, kv->key);
        CHECKF(v && v->type == kv->value.type, "%s: metadata %s lost", label, kv->key);
    }
    uint32_t fo = 0, fr = 1, qv = 0;
    CHECK(em_gguf_get_u32(ours, "general.file_type", &fo, NULL) == 0 &&
          em_gguf_get_u32(ref, "general.file_type", &fr, NULL) == 0 && fo == fr);
    CHECK(em_gguf_get_u32(ours, "general.quantization_version", &qv, NULL) == 0 && qv == 2);
done:
    em_gguf_close(ours);
    em_gguf_close(ref);
    em_gguf_close(in);
}

static void check_logits(const char *bin, const char *model, const char *backend, const char *golden,
                         const char *tmp, const char *label)
{
    char out[1200];
    snprintf(out, sizeof out, "%s/logits.f32", tmp);
    char tokens[1200];
    snprintf(tokens, sizeof tokens, "%s", test_shared("golden/logits/tokens-64.txt"));
    char *argv[] = { (char *)bin, "logits", "--model", (char *)model, "--tokens-file", tokens,
                     "--output", out, "--backend", (char *)backend, NULL };
    char *err = NULL;
    int st = test_run(argv, NULL, &err);
    CHECKF(st == 0, "%s: ember logits exit %d: %s", label, st, err ? err : "");
    free(err);
    size_t na = 0, nb = 0;
    float *a = load_f32(out, &na), *b = load_f32(golden, &nb);
    if (st == 0 && a && b && na == nb && na > 0) {
        double num = 0, den = 0;
        for (size_t i = 0; i < na; i++) {
            num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
            den += (double)b[i] * b[i];
        }
        double nmse = num / den;
        printf("%-26s logits NMSE against the golden file: %.3e\n", label, nmse);
        CHECKF(nmse < 1e-3, "%s: NMSE %.3e", label, nmse);
    } else if (st == 0) {
        CHECKF(0, "%s: logits files unreadable or of different sizes (%zu, %zu)", label, na, nb);
    }
    free(a);
    free(b);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: test_quantize BACKEND\n");
        return 2;
    }
    const char *bin = getenv("EMBER_BIN");
    if (!test_shared_dir() || !bin) {
        printf("SKIP: shared folder or EMBER_BIN absent\n");
        return 77;
    }
    static const char *archs[] = { "llama", "qwen2", "qwen3" };
    static const char *types[] = { "Q8_0", "Q4_0", "Q4_K_M", "Q5_K_M", "Q6_K" };
    char *tmp = test_tmpdir();
    for (size_t a = 0; a < 3; a++) {
        for (size_t t = 0; t < 5; t++) {
            char label[64], rel[256], in[1200], ref[1200], golden[1200], out[1200];
            snprintf(label, sizeof label, "%s %s", archs[a], types[t]);
            snprintf(rel, sizeof rel, "models/synth/synth-%s-256-F32.gguf", archs[a]);
            snprintf(in, sizeof in, "%s", test_shared(rel));
            snprintf(rel, sizeof rel, "models/synth/synth-%s-256-%s.gguf", archs[a], types[t]);
            snprintf(ref, sizeof ref, "%s", test_shared(rel));
            snprintf(rel, sizeof rel, "golden/logits/synth-%s-256-%s.t64.f32", archs[a], types[t]);
            snprintf(golden, sizeof golden, "%s", test_shared(rel));
            snprintf(out, sizeof out, "%s/%s-%s.gguf", tmp, archs[a], types[t]);
            char *qargv[] = { (char *)bin, "quantize", in, out, (char *)types[t], NULL };
            char *err = NULL;
            int st = test_run(qargv, NULL, &err);
            CHECKF(st == 0, "%s: ember quantize exit %d: %s", label, st, err ? err : "");
            free(err);
            if (st != 0)
                continue;
            compare_files(out, ref, in, label);
            check_logits(bin, out, argv[1], golden, tmp, label);
            remove(out);
        }
    }
    test_rmtree(tmp);
    free(tmp);
    return test_summary("quantize-golden");
}
