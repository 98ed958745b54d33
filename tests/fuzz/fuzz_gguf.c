/* fuzz_gguf.c — hostile GGUF files: the reader (header, metadata of every
 * type, nested arrays, tensor infos, alignment, the data section) on any
 * bytes; for a file it accepts, every key and tensor read back, the model
 * description (em_model_open: architecture, hyperparameters, tensor
 * shapes), the tokenizer built from its vocabulary and its chat template
 * looked up — what `ember serve --model FILE` does before anything runs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/model/gguf.h"
#include "core/model/model.h"
#include "core/text/tokenizer.h"
#include "core/tmpl/chat_tmpl.h"
#include "tests/fuzz/fuzz.h"

static void touch_value(const em_gguf_value *v, unsigned *sum)
{
    switch (v->type) {
    case EM_GGUF_STRING:
        for (uint64_t i = 0; i < v->v.str.len; i++)
            *sum += (unsigned char)v->v.str.ptr[i];
        break;
    case EM_GGUF_ARRAY:
        if (v->v.arr.items)
            for (uint64_t i = 0; i < v->v.arr.n; i++)
                touch_value(&v->v.arr.items[i], sum);
        break;
    default:
        *sum += (unsigned)v->v.u;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    em_gguf *g = NULL;
    em_err e = { 0 };
    if (em_gguf_open_mem(data, size, "fuzz.gguf", &g, &e)) {
        FUZZ_ASSERT(g == NULL && e.msg[0]);   /* a refusal says why */
        return 0;
    }
    unsigned sum = 0;
    for (size_t i = 0; i < em_gguf_n_kv(g); i++) {
        const em_gguf_kv *kv = em_gguf_kv_at(g, i);
        FUZZ_ASSERT(kv && kv->key && em_gguf_get(g, kv->key));
        touch_value(&kv->value, &sum);
    }
    for (size_t i = 0; i < em_gguf_n_tensors(g); i++) {
        const em_gguf_tensor *t = em_gguf_tensor_at(g, i);
        FUZZ_ASSERT(t->n_dims >= 1 && t->n_dims <= 4);
        const uint8_t *p = t->data;   /* inside the input: ASan says if not */
        if (t->nbytes)
            sum += p[0] + p[t->nbytes - 1];
    }
    em_tokenizer *tok = NULL;
    if (em_tokenizer_create(g, &tok, &e) == 0) {
        int32_t *ids = NULL;
        size_t n = 0;
        if (em_tokenizer_encode(tok, "Hello, world! <|im_start|>", 26, 1, 1, &ids, &n, &e) == 0) {
            char *text = NULL;
            if (em_tokenizer_decode(tok, ids, n, &text, &e) == 0)
                free(text);
            free(ids);
        }
        em_tokenizer_destroy(tok);
    }
    const char *src = NULL;
    size_t len = 0;
    em_chat_gguf_template(g, &src, &len);
    em_gguf_close(g);
    /* the model loader reads a file: the same bytes through a memory file */
    int fd = memfd_create("fuzz.gguf", MFD_CLOEXEC);
    if (fd >= 0) {
        if (write(fd, data, size) == (ssize_t)size) {
            char path[64];
            snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
            em_model *m = NULL;
            if (em_model_open(path, &m, &e) == 0) {
                sum += (unsigned)em_model_n_params(m);
                em_model_close(m);
            }
        }
        close(fd);
    }
    (void)sum;
    return 0;
}
