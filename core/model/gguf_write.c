/* gguf_write.c — write GGUF v3 files: metadata and tensor infos are
 * serialized into memory, then the header and each tensor's data stream out
 * in order (used by `ember quantize`, the benchmark model generator and the
 * tests' corpus of broken files). */
#include <stdlib.h>
#include <string.h>

#include "core/grow.h"
#include "core/model/gguf.h"

typedef struct {
    uint8_t *p;
    size_t   n, cap;
    int      oom;
} bytes;

static void put(bytes *b, const void *src, size_t n)
{
    if (b->oom)
        return;
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n)
            cap *= 2;
        uint8_t *np = realloc(b->p, cap);
        if (!np) {
            b->oom = 1;
            return;
        }
        b->p = np;
        b->cap = cap;
    }
    memcpy(b->p + b->n, src, n);
    b->n += n;
}

static void put_u32(bytes *b, uint32_t v) { put(b, &v, 4); }
static void put_u64(bytes *b, uint64_t v) { put(b, &v, 8); }

static void put_str(bytes *b, const char *s, uint64_t len)
{
    put_u64(b, len);
    put(b, s, len);
}

typedef struct {
    char  *key;
    bytes  val;      /* type u32 + value */
} wkv;

typedef struct {
    char    *name;
    uint32_t type, n_dims;
    uint64_t ne[4], nbytes, offset;
} wtensor;

struct em_gguf_writer {
    uint32_t alignment;
    wkv     *kv;
    size_t   n_kv, cap_kv;
    wtensor *t;
    size_t   n_t, cap_t;
    uint64_t data_size;
    size_t   cur;          /* tensor being written */
    uint64_t cur_written;
    int      oom;
};

int em_gguf_writer_create(uint32_t alignment, em_gguf_writer **out, em_err *err)
{
    *out = NULL;
    if (alignment == 0 || (alignment & (alignment - 1)))
        return em_err_set(err, EM_EINVAL, "gguf writer: alignment %u is not a power of two", alignment);
    em_gguf_writer *w = calloc(1, sizeof *w);
    if (!w)
        return em_err_set(err, EM_ENOMEM, "gguf writer: out of memory");
    w->alignment = alignment;
    *out = w;
    return 0;
}

void em_gguf_writer_destroy(em_gguf_writer *w)
{
    if (!w)
        return;
    for (size_t i = 0; i < w->n_kv; i++) {
        free(w->kv[i].key);
        free(w->kv[i].val.p);
    }
    for (size_t i = 0; i < w->n_t; i++)
        free(w->t[i].name);
    free(w->kv);
    free(w->t);
    free(w);
}

/* New (or replaced) entry for key; returns its value buffer, or NULL on OOM. */
static bytes *entry(em_gguf_writer *w, const char *key)
{
    for (size_t i = 0; i < w->n_kv; i++) {
        if (strcmp(w->kv[i].key, key) == 0) {
            w->kv[i].val.n = 0;
            return &w->kv[i].val;
        }
    }
    if (em_grow((void **)&w->kv, &w->cap_kv, w->n_kv, sizeof *w->kv, 32))
        return NULL;
    wkv *e = &w->kv[w->n_kv];
    memset(e, 0, sizeof *e);
    if (!(e->key = strdup(key)))
        return NULL;
    w->n_kv++;
    return &e->val;
}

static int done(em_gguf_writer *w, bytes *b)
{
    if (!b || b->oom) {
        w->oom = 1;
        return EM_ENOMEM;
    }
    return 0;
}

static int scalar(em_gguf_writer *w, const char *key, em_gguf_type t, const void *v, size_t n)
{
    bytes *b = entry(w, key);
    if (b) {
        put_u32(b, t);
        put(b, v, n);
    }
    return done(w, b);
}

int em_gguf_w_u32(em_gguf_writer *w, const char *key, uint32_t v) { return scalar(w, key, EM_GGUF_U32, &v, 4); }
int em_gguf_w_i32(em_gguf_writer *w, const char *key, int32_t v) { return scalar(w, key, EM_GGUF_I32, &v, 4); }
int em_gguf_w_f32(em_gguf_writer *w, const char *key, float v) { return scalar(w, key, EM_GGUF_F32, &v, 4); }
int em_gguf_w_set_u32(em_gguf_writer *w, const char *key, uint32_t v) { return em_gguf_w_u32(w, key, v); }

int em_gguf_w_bool(em_gguf_writer *w, const char *key, int v)
{
    uint8_t b = v != 0;
    return scalar(w, key, EM_GGUF_BOOL, &b, 1);
}

int em_gguf_w_str(em_gguf_writer *w, const char *key, const char *v)
{
    bytes *b = entry(w, key);
    if (b) {
        put_u32(b, EM_GGUF_STRING);
        put_str(b, v, strlen(v));
    }
    return done(w, b);
}

int em_gguf_w_arr(em_gguf_writer *w, const char *key, em_gguf_type elem, const void *data, uint64_t n)
{
    if (!em_gguf_type_size(elem))
        return EM_EINVAL;
    bytes *b = entry(w, key);
    if (b) {
        put_u32(b, EM_GGUF_ARRAY);
        put_u32(b, elem);
        put_u64(b, n);
        put(b, data, (size_t)n * em_gguf_type_size(elem));
    }
    return done(w, b);
}

int em_gguf_w_arr_str(em_gguf_writer *w, const char *key, const char *const *v, uint64_t n)
{
    bytes *b = entry(w, key);
    if (b) {
        put_u32(b, EM_GGUF_ARRAY);
        put_u32(b, EM_GGUF_STRING);
        put_u64(b, n);
        for (uint64_t i = 0; i < n; i++)
            put_str(b, v[i], strlen(v[i]));
    }
    return done(w, b);
}

/* Serialize a parsed value (without its leading type for array elements of
 * scalar type, which are packed). */
static void put_value(bytes *b, const em_gguf_value *v)
{
    switch (v->type) {
    case EM_GGUF_STRING:
        put_str(b, v->v.str.ptr, v->v.str.len);
        return;
    case EM_GGUF_ARRAY:
        put_u32(b, v->v.arr.type);
        put_u64(b, v->v.arr.n);
        if (em_gguf_type_size(v->v.arr.type)) {
            put(b, v->v.arr.raw, (size_t)v->v.arr.n * em_gguf_type_size(v->v.arr.type));
        } else {
            for (uint64_t i = 0; i < v->v.arr.n; i++)
                put_value(b, &v->v.arr.items[i]);
        }
        return;
    case EM_GGUF_F32: {
        float f = (float)v->v.f;
        put(b, &f, 4);
        return;
    }
    case EM_GGUF_F64:
        put(b, &v->v.f, 8);
        return;
    default:   /* integers: the low bytes of the 64-bit value (little-endian) */
        put(b, &v->v.u, em_gguf_type_size(v->type));
        return;
    }
}

int em_gguf_w_kv_copy(em_gguf_writer *w, const em_gguf_kv *kv)
{
    bytes *b = entry(w, kv->key);
    if (b) {
        put_u32(b, kv->value.type);
        put_value(b, &kv->value);
    }
    return done(w, b);
}

int em_gguf_w_tensor(em_gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                     const uint64_t *ne, uint64_t *nbytes)
{
    const em_ttype_info *ti = em_ttype_get(type);
    if (!ti || n_dims == 0 || n_dims > 4 || ne[0] % ti->blck)
        return EM_EINVAL;
    if (em_grow((void **)&w->t, &w->cap_t, w->n_t, sizeof *w->t, 64))
        return EM_ENOMEM;
    wtensor *t = &w->t[w->n_t];
    memset(t, 0, sizeof *t);
    if (!(t->name = strdup(name)))
        return EM_ENOMEM;
    t->type = type;
    t->n_dims = n_dims;
    uint64_t nel = 1;
    for (uint32_t d = 0; d < 4; d++) {
        t->ne[d] = d < n_dims ? ne[d] : 1;
        nel *= t->ne[d];
    }
    t->nbytes = nel / ti->blck * ti->bytes;
    t->offset = w->data_size;
    w->data_size += (t->nbytes + w->alignment - 1) / w->alignment * w->alignment;
    w->n_t++;
    if (nbytes)
        *nbytes = t->nbytes;
    return 0;
}

static int wr(FILE *f, const void *p, size_t n, em_err *err)
{
    if (n && fwrite(p, 1, n, f) != n)
        return em_err_set(err, EM_EIO, "gguf writer: write failed");
    return 0;
}

int em_gguf_w_header(em_gguf_writer *w, FILE *f, em_err *err)
{
    if (w->oom)
        return em_err_set(err, EM_ENOMEM, "gguf writer: out of memory");
    bytes h = { 0 };
    put_u32(&h, 0x46554747u);
    put_u32(&h, 3);
    put_u64(&h, w->n_t);
    put_u64(&h, w->n_kv);
    for (size_t i = 0; i < w->n_kv; i++) {
        put_str(&h, w->kv[i].key, strlen(w->kv[i].key));
        put(&h, w->kv[i].val.p, w->kv[i].val.n);
    }
    for (size_t i = 0; i < w->n_t; i++) {
        const wtensor *t = &w->t[i];
        put_str(&h, t->name, strlen(t->name));
        put_u32(&h, t->n_dims);
        for (uint32_t d = 0; d < t->n_dims; d++)
            put_u64(&h, t->ne[d]);
        put_u32(&h, t->type);
        put_u64(&h, t->offset);
    }
    static const uint8_t zeros[64] = { 0 };
    size_t pad = (w->alignment - h.n % w->alignment) % w->alignment;
    while (pad > 0 && !h.oom) {
        size_t k = pad > sizeof zeros ? sizeof zeros : pad;
        put(&h, zeros, k);
        pad -= k;
    }
    int rc = h.oom ? em_err_set(err, EM_ENOMEM, "gguf writer: out of memory") : wr(f, h.p, h.n, err);
    free(h.p);
    w->cur = 0;
    w->cur_written = 0;
    return rc;
}

int em_gguf_w_data(em_gguf_writer *w, FILE *f, const void *data, uint64_t n, em_err *err)
{
    const uint8_t *p = data;
    while (n > 0) {
        if (w->cur >= w->n_t)
            return em_err_set(err, EM_ESTATE, "gguf writer: more data than the tensors declared");
        wtensor *t = &w->t[w->cur];
        uint64_t take = t->nbytes - w->cur_written;
        if (take > n)
            take = n;
        int rc = wr(f, p, (size_t)take, err);
        if (rc)
            return rc;
        p += take;
        n -= take;
        w->cur_written += take;
        if (w->cur_written == t->nbytes) {
            static const uint8_t zeros[64] = { 0 };
            uint64_t pad = (w->alignment - t->nbytes % w->alignment) % w->alignment;
            while (pad > 0) {
                size_t k = pad > 64 ? 64 : (size_t)pad;
                if ((rc = wr(f, zeros, k, err)))
                    return rc;
                pad -= k;
            }
            w->cur++;
            w->cur_written = 0;
        }
    }
    return 0;
}

int em_gguf_w_finish(em_gguf_writer *w, em_err *err)
{
    if (w->cur != w->n_t)
        return em_err_set(err, EM_ESTATE, "gguf writer: tensor '%s' has no data yet",
                          w->t[w->cur].name);
    return 0;
}
