/* test_encode.c — the CPU reference encoder (core/run/encode.c) on the real
 * all-MiniLM-L6-v2 (bert, F16, ../shared/models) against the sentence
 * embeddings sentence-transformers computes from the original F32 weights
 * (../shared/golden/embeddings/all-MiniLM-L6-v2.json: the Hugging Face
 * tokenizer's ids, mean pooling, L2 normalisation): cosine >= 0.999 for
 * every text. And the model's metadata as read (an encoder, 512
 * positions, 2 token types, mean pooling), the building blocks against
 * values worked by hand, and what the encoder refuses (a decoder, no
 * tokens, more tokens than positions, an id past the vocabulary); a
 * decoder's hidden state (em_ref_hidden) is what its logits come from. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "core/model/model.h"
#include "core/run/encode.h"
#include "core/run/ref.h"
#include "tests/common/testutil.h"

/* MiniLM copied to path with a classification head (cls, cls.output: small
 * deterministic weights) and pooling rank, as a reranker's file has it
 * (head 0: none, rank pooling all the same). */
static int with_head(const char *src, const char *path, int head)
{
    em_gguf *g;
    em_err e = { 0 };
    em_gguf_writer *w;
    FILE *f = fopen(path, "wb");
    if (!f || em_gguf_open(src, &g, &e) || em_gguf_writer_create(32, &w, &e))
        return -1;
    for (size_t i = 0; i < em_gguf_n_kv(g); i++)
        if (em_gguf_w_kv_copy(w, em_gguf_kv_at(g, i)))
            return -1;
    em_gguf_w_set_u32(w, "bert.pooling_type", EM_POOL_RANK);
    uint64_t nb, E = 384;
    for (size_t i = 0; i < em_gguf_n_tensors(g); i++) {
        const em_gguf_tensor *t = em_gguf_tensor_at(g, i);
        if (em_gguf_w_tensor(w, t->name, t->type, t->n_dims, t->ne, &nb))
            return -1;
    }
    uint64_t ne_w[2] = { E, E }, ne_b[1] = { E }, ne_o[2] = { E, 1 }, ne_ob[1] = { 1 };
    float *wt = malloc(E * E * sizeof *wt);
    uint32_t x = 12345;
    for (uint64_t i = 0; i < E * E; i++) {
        x = x * 1103515245u + 12345u;
        wt[i] = ((float)(x >> 8) / 16777216.0f - 0.5f) * 0.2f;
    }
    if (head && (em_gguf_w_tensor(w, "cls.weight", EM_T_F32, 2, ne_w, &nb) ||
                 em_gguf_w_tensor(w, "cls.bias", EM_T_F32, 1, ne_b, &nb) ||
                 em_gguf_w_tensor(w, "cls.output.weight", EM_T_F32, 2, ne_o, &nb) ||
                 em_gguf_w_tensor(w, "cls.output.bias", EM_T_F32, 1, ne_ob, &nb)))
        return -1;
    int rc = em_gguf_w_header(w, f, &e);
    for (size_t i = 0; !rc && i < em_gguf_n_tensors(g); i++)
        rc = em_gguf_w_data(w, f, em_gguf_tensor_at(g, i)->data, em_gguf_tensor_at(g, i)->nbytes, &e);
    float ob = 0.25f;
    if (!rc && head)   /* cls, its bias (row 0 of wt), cls.output (row 1), its bias */
        rc = em_gguf_w_data(w, f, wt, E * E * 4, &e) || em_gguf_w_data(w, f, wt, E * 4, &e) ||
             em_gguf_w_data(w, f, wt + E, E * 4, &e) || em_gguf_w_data(w, f, &ob, 4, &e);
    if (!rc)
        rc = em_gguf_w_finish(w, &e);
    free(wt);
    em_gguf_writer_destroy(w);
    em_gguf_close(g);
    return fclose(f) || rc ? -1 : 0;
}

/* A reranker's score: the head by hand on the encoder's first hidden state;
 * the document's tokens of type 1 count; pooling rank needs a head. */
static void check_head(const em_model *base)
{
    char path[] = "/tmp/ember-test-head-XXXXXX";
    int fd = mkstemp(path);
    REQUIRE_V(fd >= 0 && close(fd) == 0 && with_head(test_shared("models/all-MiniLM-L6-v2-F16.gguf"), path, 1) == 0);
    em_model *m;
    em_err e = { 0 };
    REQUIRE_V(em_model_open(path, &m, &e) == 0);
    const em_encoder_weights *ew = em_model_encoder(m);
    CHECK(em_model_hparams(m)->pooling == EM_POOL_RANK && ew->cls && ew->cls_out && ew->cls_out->ne[1] == 1);
    int32_t ids[6] = { 101, 2158, 102, 4937, 1012, 102 };   /* [CLS] q [SEP] d . [SEP] */
    uint8_t types[6] = { 0, 0, 0, 1, 1, 1 }, zeros[6] = { 0 };
    float h[6 * 384], h0[6 * 384], score = 0, t[384], wrow[384];
    CHECK(em_ref_encode(m, ids, types, 6, h, &e) == 0 && em_ref_encode(base, ids, NULL, 6, h0, &e) == 0);
    CHECK(memcmp(h, h0, sizeof h) != 0);   /* type 1 is another row */
    CHECK(em_ref_encode(base, ids, zeros, 6, h, &e) == 0 && !memcmp(h, h0, sizeof h));
    uint8_t bad[6] = { 0, 0, 0, 2, 2, 2 };
    CHECK(em_ref_encode(m, ids, bad, 6, h, &e) == EM_ERANGE && strstr(e.msg, "type 2"));
    CHECK(em_ref_encode(m, ids, types, 6, h, &e) == 0 && em_ref_score(m, ids, types, 6, &score, &e) == 0);
    const em_gguf_tensor *cw = ew->cls;
    for (int i = 0; i < 384; i++) {   /* tanh(W h + b), then w . + 0.25 */
        em_tensor_row(cw, (uint64_t)i, wrow);
        double acc = 0;
        for (int k = 0; k < 384; k++)
            acc += (double)wrow[k] * h[k];
        em_tensor_row(cw, 0, wrow);
        t[i] = tanhf((float)acc + wrow[i]);
    }
    em_tensor_row(cw, 1, wrow);
    double want = 0.25;
    for (int k = 0; k < 384; k++)
        want += (double)wrow[k] * t[k];
    CHECKF(fabs(score - want) < 1e-4, "head score %g, by hand %g", score, want);
    CHECK(em_ref_score(base, ids, types, 6, &score, &e) == EM_EUNSUPPORTED);
    float emb[384];
    CHECK(em_ref_embed(m, ids, 6, EM_POOL_NONE, 1, emb, &e) == EM_EUNSUPPORTED);   /* rank gives no vector */
    em_model_close(m);
    /* pooling rank without a head: refused at open */
    REQUIRE_V(with_head(test_shared("models/all-MiniLM-L6-v2-F16.gguf"), path, 0) == 0);
    CHECK(em_model_open(path, &m, &e) == EM_EFORMAT && strstr(e.msg, "classification head"));
    unlink(path);
}

/* A JSON array held in a string ("[1, 2]") as a new array. */
static json_t *array_in(const json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    return json_is_string(v) ? json_loads(json_string_value(v), 0, NULL) : json_incref(v);
}

static void check_blocks(void)
{
    float x[4] = { 1, 2, 3, 4 }, w[4] = { 1, 1, 2, 1 }, b[4] = { 0, 0, 0, 1 }, y[4];
    em_ref_layernorm(y, x, w, b, 4, 0);   /* mean 2.5, var 1.25 */
    float s = 1.0f / sqrtf(1.25f);
    CHECK(fabsf(y[0] + 1.5f * s) < 1e-6f && fabsf(y[2] - 2 * 0.5f * s) < 1e-6f && fabsf(y[3] - (1.5f * s + 1)) < 1e-6f);
    float g[3] = { 1, 0, -1 };
    em_ref_gelu_erf(g, g, 3);
    CHECK(fabsf(g[0] - 0.8413447f) < 1e-6f && g[1] == 0 && fabsf(g[2] + 0.1586553f) < 1e-6f);
    float h[6] = { 1, 2, 3, 4, 5, 6 }, p[2];   /* 3 tokens of 2 */
    em_pool(EM_POOL_MEAN, h, 3, 2, p);
    CHECK(p[0] == 3 && p[1] == 4);
    em_pool(EM_POOL_CLS, h, 3, 2, p);
    CHECK(p[0] == 1 && p[1] == 2);
    em_pool(EM_POOL_LAST, h, 3, 2, p);
    CHECK(p[0] == 5 && p[1] == 6);
    uint32_t first = 9;   /* the rows each chunk of a 10-token sequence (chunks 0..6, 6..10) adds */
    CHECK(em_pool_rows(EM_POOL_MEAN, 6, 4, 10, &first) == 4 && first == 0);
    CHECK(em_pool_rows(EM_POOL_CLS, 0, 6, 10, &first) == 1 && first == 0);
    CHECK(em_pool_rows(EM_POOL_CLS, 6, 4, 10, &first) == 0 && em_pool_rows(EM_POOL_RANK, 0, 6, 10, &first) == 1);
    CHECK(em_pool_rows(EM_POOL_LAST, 0, 6, 10, &first) == 0);
    CHECK(em_pool_rows(EM_POOL_LAST, 6, 4, 10, &first) == 1 && first == 3);
    em_hparams hpm = { .pooling = EM_POOL_CLS };
    em_pooling md = EM_POOL_NONE;
    em_err pe = { 0 };
    CHECK(em_pool_resolve(&hpm, &md, &pe) == 0 && md == EM_POOL_CLS);
    hpm.pooling = EM_POOL_NONE;
    md = EM_POOL_NONE;
    CHECK(em_pool_resolve(&hpm, &md, &pe) == 0 && md == EM_POOL_MEAN);
    md = EM_POOL_RANK;
    CHECK(em_pool_resolve(&hpm, &md, &pe) == EM_EUNSUPPORTED && strstr(pe.msg, "rank"));
    float u[2] = { 3, 4 }, z[2] = { 0, 0 };
    em_l2_normalize(u, 2);
    em_l2_normalize(z, 2);
    CHECK(fabsf(u[0] - 0.6f) < 1e-7f && fabsf(u[1] - 0.8f) < 1e-7f && z[0] == 0 && z[1] == 0);
}

int main(void)
{
    check_blocks();
    em_err e = { 0 };
    em_model *m;
    if (!test_shared_dir()) {
        printf("SKIP: no shared folder\n");
        return 77;
    }
    REQUIRE(em_model_open(test_shared("models/all-MiniLM-L6-v2-F16.gguf"), &m, &e) == 0);
    const em_hparams *hp = em_model_hparams(m);
    CHECKF(hp->arch == EM_ARCH_BERT && hp->encoder && hp->n_pos == 512 && hp->n_token_types == 2 &&
           hp->pooling == EM_POOL_MEAN && hp->n_embd == 384 && hp->n_layer == 6 && hp->n_head == 12 &&
           fabsf(hp->rms_eps - 1e-12f) < 1e-15f && em_model_output(m) == NULL && em_model_out_norm(m) == NULL,
           "bert hparams: arch %d pos %u types %u pooling %d eps %g", (int)hp->arch, hp->n_pos, hp->n_token_types,
           (int)hp->pooling, hp->rms_eps);
    /* it gives no text */
    em_ref *r = NULL;
    CHECK(em_ref_create(m, 16, &r, &e) == EM_EUNSUPPORTED && strstr(e.msg, "encoder") && !r);

    json_error_t je;
    json_t *gold = json_load_file(test_shared("golden/embeddings/all-MiniLM-L6-v2.json"), 0, &je);
    REQUIRE(json_is_array(gold) && json_array_size(gold) == 12);
    size_t i;
    json_t *c;
    double worst = 1;
    json_array_foreach(gold, i, c) {
        json_t *ids = array_in(c, "ids"), *want = array_in(c, "embedding");
        REQUIRE(json_is_array(ids) && json_array_size(want) == hp->n_embd);
        uint32_t n = (uint32_t)json_array_size(ids);
        int32_t tok[128];
        REQUIRE(n <= 128);
        for (uint32_t j = 0; j < n; j++)
            tok[j] = (int32_t)json_integer_value(json_array_get(ids, j));
        float *h = malloc((size_t)n * hp->n_embd * sizeof *h), vec[384];
        REQUIRE(h);
        CHECK(em_ref_encode(m, tok, NULL, n, h, &e) == 0);
        em_pool(hp->pooling, h, n, hp->n_embd, vec);
        em_l2_normalize(vec, hp->n_embd);
        double dot = 0, nw = 0;
        for (uint32_t d = 0; d < hp->n_embd; d++) {
            double g = json_number_value(json_array_get(want, d));
            dot += g * vec[d];
            nw += g * g;
        }
        double cosine = dot / sqrt(nw);
        CHECKF(cosine >= 0.999, "text %zu (%s): cosine %.6f", i, json_string_value(json_object_get(c, "text")),
               cosine);
        worst = cosine < worst ? cosine : worst;
        free(h);
        json_decref(ids);
        json_decref(want);
    }
    printf("encode: all-MiniLM-L6-v2 F16 on the CPU reference, 12 texts: worst cosine %.6f to sentence-transformers'\n",
           worst);
    json_decref(gold);

    check_head(m);

    /* what it refuses */
    int32_t ids[2] = { 101, 102 }, bad[2] = { 101, 30522 };
    float out[2 * 384];
    CHECK(em_ref_encode(m, ids, NULL, 0, out, &e) == EM_ERANGE);
    CHECK(em_ref_encode(m, bad, NULL, 2, out, &e) == EM_ERANGE && strstr(e.msg, "30522"));
    CHECK(em_ref_encode(m, ids, NULL, 513, out, &e) == EM_ERANGE && strstr(e.msg, "512"));
    em_model_close(m);
    REQUIRE(em_model_open(test_shared("models/stories260K.gguf"), &m, &e) == 0);
    CHECK(em_ref_encode(m, ids, NULL, 2, out, &e) == EM_EUNSUPPORTED);
    /* a decoder's hidden state is what its logits are computed from, and
     * its embedding (last-token pooling, unnormalised) is that state */
    hp = em_model_hparams(m);
    REQUIRE(em_ref_create(m, 8, &r, &e) == 0);
    int32_t seq[3] = { 1, 300, 400 };
    float *logits = malloc(hp->n_vocab * sizeof *logits), *again = malloc(hp->n_vocab * sizeof *again);
    float hid[512], emb[512];
    REQUIRE(logits && again && hp->n_embd <= 512);
    CHECK(em_ref_hidden(r, hid, &e) == EM_EINVAL);
    for (uint32_t j = 0; j < 3; j++)
        CHECK(em_ref_forward(r, seq[j], j, logits, &e) == 0);
    CHECK(em_ref_hidden(r, hid, &e) == 0);
    const em_gguf_tensor *ot = em_model_output(m);
    em_ref_matvec(ot->type, ot->data, ot->ne[0], ot->ne[1], hid, again);
    float diff = 0;
    for (uint32_t t = 0; t < hp->n_vocab; t++)
        diff = fmaxf(diff, fabsf(again[t] - logits[t]));
    CHECKF(diff < 1e-4f, "logits from the hidden state differ by %g", diff);
    CHECK(em_ref_embed(m, seq, 3, EM_POOL_LAST, 0, emb, &e) == 0 && !memcmp(emb, hid, hp->n_embd * sizeof *emb));
    CHECK(em_ref_embed(m, seq, 3, EM_POOL_RANK, 1, emb, &e) == EM_EUNSUPPORTED);
    free(logits);
    free(again);
    em_ref_destroy(r);
    em_model_close(m);
    return test_summary("encode");
}
