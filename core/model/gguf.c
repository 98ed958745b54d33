/* gguf.c — parse and validate GGUF v2/v3 files before anything trusts them.
 *
 * Layout (little-endian):
 *   header  : magic "GGUF" u32, version u32, n_tensors u64, n_kv u64
 *   metadata: n_kv x { key: str, type: u32, value }     str = u64 len + bytes
 *             array = elem type u32, count u64, elements (may nest)
 *   tensors : n_tensors x { name: str, n_dims u32, ne[n_dims] u64, type u32, offset u64 }
 *   padding to general.alignment (default 32), then the data section.
 * Every read is bounds-checked against the mapping; every count is checked
 * against the bytes that remain before anything is allocated for it. */
#include "core/model/gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <xxhash.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "ember reads GGUF data in place and needs a little-endian host"
#endif

#define GGUF_MAGIC        0x46554747u  /* "GGUF" */
#define GGUF_MAX_DIMS     4
#define GGUF_MAX_NAME     256          /* tensor names (ggml uses 64) */
#define GGUF_MAX_KEY      65536
#define GGUF_MAX_DEPTH    8            /* nested arrays */
#define GGUF_DEF_ALIGN    32

struct em_gguf {
    char           *path;
    const uint8_t  *base;
    uint64_t        size;
    int             mapped;        /* 1: munmap at close */
    struct stat     st;            /* the file when it was opened (em_gguf_unchanged) */
    uint64_t        sum;           /* the sampled checksum of its bytes then (sampled_sum) */
    uint32_t        version;
    uint32_t        alignment;
    uint64_t        data_offset;
    uint64_t        sections[5];
    em_gguf_kv     *kv;
    size_t          n_kv;
    em_gguf_tensor *tensors;
    size_t          n_tensors;
};

/* ---- tensor type table ---------------------------------------------------- */

static const em_ttype_info ttypes[EM_T_COUNT] = {
    [EM_T_F32]     = { "F32",     1,   4 },
    [EM_T_F16]     = { "F16",     1,   2 },
    [EM_T_Q4_0]    = { "Q4_0",    32,  18 },
    [EM_T_Q4_1]    = { "Q4_1",    32,  20 },
    [EM_T_Q5_0]    = { "Q5_0",    32,  22 },
    [EM_T_Q5_1]    = { "Q5_1",    32,  24 },
    [EM_T_Q8_0]    = { "Q8_0",    32,  34 },
    [EM_T_Q8_1]    = { "Q8_1",    32,  36 },
    [EM_T_Q2_K]    = { "Q2_K",    256, 84 },
    [EM_T_Q3_K]    = { "Q3_K",    256, 110 },
    [EM_T_Q4_K]    = { "Q4_K",    256, 144 },
    [EM_T_Q5_K]    = { "Q5_K",    256, 176 },
    [EM_T_Q6_K]    = { "Q6_K",    256, 210 },
    [EM_T_Q8_K]    = { "Q8_K",    256, 292 },
    [EM_T_IQ2_XXS] = { "IQ2_XXS", 256, 66 },
    [EM_T_IQ2_XS]  = { "IQ2_XS",  256, 74 },
    [EM_T_IQ3_XXS] = { "IQ3_XXS", 256, 98 },
    [EM_T_IQ1_S]   = { "IQ1_S",   256, 50 },
    [EM_T_IQ4_NL]  = { "IQ4_NL",  32,  18 },
    [EM_T_IQ3_S]   = { "IQ3_S",   256, 110 },
    [EM_T_IQ2_S]   = { "IQ2_S",   256, 82 },
    [EM_T_IQ4_XS]  = { "IQ4_XS",  256, 136 },
    [EM_T_I8]      = { "I8",      1,   1 },
    [EM_T_I16]     = { "I16",     1,   2 },
    [EM_T_I32]     = { "I32",     1,   4 },
    [EM_T_I64]     = { "I64",     1,   8 },
    [EM_T_F64]     = { "F64",     1,   8 },
    [EM_T_IQ1_M]   = { "IQ1_M",   256, 56 },
    [EM_T_BF16]    = { "BF16",    1,   2 },
    [EM_T_TQ1_0]   = { "TQ1_0",   256, 54 },
    [EM_T_TQ2_0]   = { "TQ2_0",   256, 66 },
    [EM_T_MXFP4]   = { "MXFP4",   32,  17 },
};

const em_ttype_info *em_ttype_get(uint32_t type)
{
    if (type >= EM_T_COUNT || !ttypes[type].name)
        return NULL;
    return &ttypes[type];
}

const char *em_ttype_name(uint32_t type)
{
    static _Thread_local char buf[24];
    const em_ttype_info *ti = em_ttype_get(type);
    if (ti)
        return ti->name;
    snprintf(buf, sizeof buf, "type %u", type);
    return buf;
}

const char *em_gguf_type_name(em_gguf_type t)
{
    static const char *names[EM_GGUF_NTYPES] = {
        "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string",
        "array", "u64", "i64", "f64",
    };
    return (unsigned)t < EM_GGUF_NTYPES ? names[t] : "unknown";
}

uint32_t em_gguf_type_size(uint32_t t)
{
    switch (t) {
    case EM_GGUF_U8: case EM_GGUF_I8: case EM_GGUF_BOOL: return 1;
    case EM_GGUF_U16: case EM_GGUF_I16: return 2;
    case EM_GGUF_U32: case EM_GGUF_I32: case EM_GGUF_F32: return 4;
    case EM_GGUF_U64: case EM_GGUF_I64: case EM_GGUF_F64: return 8;
    default: return 0;
    }
}

/* ---- bounded reader ------------------------------------------------------- */

typedef struct {
    const uint8_t *p;
    uint64_t       size;
    uint64_t       pos;
    const char    *name;
    em_err        *err;
} rd;

static int rd_need(rd *r, uint64_t n, const char *what)
{
    if (n > r->size - r->pos)
        return em_err_set(r->err, EM_EFORMAT,
                          "%s: truncated file: %s needs %llu bytes at offset %llu, %llu remain",
                          r->name, what, (unsigned long long)n,
                          (unsigned long long)r->pos,
                          (unsigned long long)(r->size - r->pos));
    return 0;
}

static int rd_u32(rd *r, uint32_t *v, const char *what)
{
    int rc = rd_need(r, 4, what);
    if (rc)
        return rc;
    memcpy(v, r->p + r->pos, 4);
    r->pos += 4;
    return 0;
}

static int rd_u64(rd *r, uint64_t *v, const char *what)
{
    int rc = rd_need(r, 8, what);
    if (rc)
        return rc;
    memcpy(v, r->p + r->pos, 8);
    r->pos += 8;
    return 0;
}

static int rd_str(rd *r, em_gguf_str *s, uint64_t max_len, const char *what)
{
    uint64_t len;
    int rc = rd_u64(r, &len, what);
    if (rc)
        return rc;
    if (len > r->size - r->pos)
        return em_err_set(r->err, EM_EFORMAT,
                          "%s: %s has length %llu at offset %llu, past the end of the file",
                          r->name, what, (unsigned long long)len,
                          (unsigned long long)(r->pos - 8));
    if (len > max_len)
        return em_err_set(r->err, EM_EFORMAT, "%s: %s has length %llu, limit %llu",
                          r->name, what, (unsigned long long)len,
                          (unsigned long long)max_len);
    s->ptr = (const char *)r->p + r->pos;
    s->len = len;
    r->pos += len;
    return 0;
}

static char *str_dup(em_gguf_str s)
{
    char *c = malloc(s.len + 1);
    if (c) {
        memcpy(c, s.ptr, s.len);
        c[s.len] = 0;
    }
    return c;
}

int em_gguf_str_eq(em_gguf_str s, const char *c)
{
    size_t n = strlen(c);
    return s.len == n && memcmp(s.ptr, c, n) == 0;
}

/* ---- values --------------------------------------------------------------- */

static void value_free(em_gguf_value *v)
{
    if (v->type != EM_GGUF_ARRAY || !v->v.arr.items)
        return;
    for (uint64_t i = 0; i < v->v.arr.n; i++)
        value_free(&v->v.arr.items[i]);
    free(v->v.arr.items);
    v->v.arr.items = NULL;
}

static int read_value(rd *r, uint32_t type, em_gguf_value *out, int depth, const char *key)
{
    memset(out, 0, sizeof *out);
    out->type = (em_gguf_type)type;
    uint32_t sz = em_gguf_type_size(type);
    if (sz) {
        int rc = rd_need(r, sz, key);
        if (rc)
            return rc;
        const uint8_t *p = r->p + r->pos;
        uint8_t u8; int8_t i8; uint16_t u16; int16_t i16; uint32_t u32; int32_t i32;
        float f32; double f64;
        switch (type) {
        case EM_GGUF_U8:   memcpy(&u8, p, 1);  out->v.u = u8; break;
        case EM_GGUF_BOOL: memcpy(&u8, p, 1);  out->v.u = u8 != 0; break;
        case EM_GGUF_I8:   memcpy(&i8, p, 1);  out->v.i = i8; break;
        case EM_GGUF_U16:  memcpy(&u16, p, 2); out->v.u = u16; break;
        case EM_GGUF_I16:  memcpy(&i16, p, 2); out->v.i = i16; break;
        case EM_GGUF_U32:  memcpy(&u32, p, 4); out->v.u = u32; break;
        case EM_GGUF_I32:  memcpy(&i32, p, 4); out->v.i = i32; break;
        case EM_GGUF_F32:  memcpy(&f32, p, 4); out->v.f = f32; break;
        case EM_GGUF_U64:  memcpy(&out->v.u, p, 8); break;
        case EM_GGUF_I64:  memcpy(&out->v.i, p, 8); break;
        case EM_GGUF_F64:  memcpy(&f64, p, 8); out->v.f = f64; break;
        }
        r->pos += sz;
        return 0;
    }
    if (type == EM_GGUF_STRING)
        return rd_str(r, &out->v.str, UINT64_MAX, key);
    if (type != EM_GGUF_ARRAY)
        return em_err_set(r->err, EM_EFORMAT, "%s: key '%s' has unknown value type %u",
                          r->name, key, type);
    if (depth >= GGUF_MAX_DEPTH)
        return em_err_set(r->err, EM_EFORMAT, "%s: key '%s' nests arrays deeper than %d",
                          r->name, key, GGUF_MAX_DEPTH);
    uint32_t et;
    uint64_t n;
    int rc = rd_u32(r, &et, key);
    if (!rc)
        rc = rd_u64(r, &n, key);
    if (rc)
        return rc;
    if (et >= EM_GGUF_NTYPES)
        return em_err_set(r->err, EM_EFORMAT, "%s: key '%s' is an array of unknown type %u",
                          r->name, key, et);
    out->v.arr.type = (em_gguf_type)et;
    /* Every element takes at least min bytes: check the count before allocating. */
    uint64_t min = em_gguf_type_size(et) ? em_gguf_type_size(et) : (et == EM_GGUF_STRING ? 8 : 12);
    uint64_t remain = r->size - r->pos;
    if (n > remain / min)
        return em_err_set(r->err, EM_EFORMAT,
                          "%s: key '%s' claims %llu array elements, more than the %llu bytes left can hold",
                          r->name, key, (unsigned long long)n, (unsigned long long)remain);
    out->v.arr.n = n;
    if (em_gguf_type_size(et)) {
        out->v.arr.raw = r->p + r->pos;
        r->pos += n * min;
        return 0;
    }
    out->v.arr.raw = r->p + r->pos;
    out->v.arr.items = calloc(n ? n : 1, sizeof(em_gguf_value));
    if (!out->v.arr.items)
        return em_err_set(r->err, EM_ENOMEM, "%s: out of memory for key '%s'", r->name, key);
    for (uint64_t i = 0; i < n; i++) {
        uint32_t sub = et;
        if (et == EM_GGUF_ARRAY) {
            /* nested: each element is itself { type, count, data } */
            rc = read_value(r, EM_GGUF_ARRAY, &out->v.arr.items[i], depth + 1, key);
        } else {
            rc = read_value(r, sub, &out->v.arr.items[i], depth + 1, key);
        }
        if (rc) {
            out->v.arr.n = i + 1;   /* free what was parsed */
            return rc;
        }
    }
    return 0;
}

/* ---- open ----------------------------------------------------------------- */

static int parse(em_gguf *g, em_err *err)
{
    rd r = { g->base, g->size, 0, g->path, err };
    uint32_t magic, version;
    uint64_t n_tensors, n_kv;
    int rc;

    if (g->size < 4 || (memcpy(&magic, g->base, 4), magic != GGUF_MAGIC)) {
        if (g->size == 0)
            return em_err_set(err, EM_EFORMAT, "%s: empty file, not a GGUF model", g->path);
        return em_err_set(err, EM_EFORMAT, "%s: not a GGUF file (bad magic)", g->path);
    }
    r.pos = 4;
    if ((rc = rd_u32(&r, &version, "version")))
        return rc;
    if (version == 1)
        return em_err_set(err, EM_EUNSUPPORTED,
                          "%s: GGUF version 1 is obsolete; convert the model to version 3", g->path);
    if (version != 2 && version != 3)
        return em_err_set(err, EM_EFORMAT, "%s: unknown GGUF version %u", g->path, version);
    g->version = version;
    if ((rc = rd_u64(&r, &n_tensors, "tensor count")) || (rc = rd_u64(&r, &n_kv, "metadata count")))
        return rc;
    g->sections[0] = r.pos;

    /* each kv is at least key len (8) + 1 byte + type (4) + 1 byte; each tensor
     * info at least name len (8) + n_dims (4) + type (4) + offset (8) */
    uint64_t remain = g->size - r.pos;
    if (n_kv > remain / 14)
        return em_err_set(err, EM_EFORMAT, "%s: metadata count %llu is impossible for a %llu-byte file",
                          g->path, (unsigned long long)n_kv, (unsigned long long)g->size);
    if (n_tensors > remain / 24)
        return em_err_set(err, EM_EFORMAT, "%s: tensor count %llu is impossible for a %llu-byte file",
                          g->path, (unsigned long long)n_tensors, (unsigned long long)g->size);

    g->kv = calloc(n_kv ? n_kv : 1, sizeof *g->kv);
    g->tensors = calloc(n_tensors ? n_tensors : 1, sizeof *g->tensors);
    if (!g->kv || !g->tensors)
        return em_err_set(err, EM_ENOMEM, "%s: out of memory", g->path);

    g->alignment = GGUF_DEF_ALIGN;
    for (uint64_t i = 0; i < n_kv; i++) {
        em_gguf_str key;
        uint32_t type;
        if ((rc = rd_str(&r, &key, GGUF_MAX_KEY, "metadata key")))
            return rc;
        if (key.len == 0)
            return em_err_set(err, EM_EFORMAT, "%s: metadata entry %llu has an empty key",
                              g->path, (unsigned long long)i);
        em_gguf_kv *kv = &g->kv[i];
        kv->key = str_dup(key);
        if (!kv->key)
            return em_err_set(err, EM_ENOMEM, "%s: out of memory", g->path);
        g->n_kv = i + 1;
        if (memchr(key.ptr, 0, key.len))
            return em_err_set(err, EM_EFORMAT, "%s: metadata key %llu contains a NUL byte",
                              g->path, (unsigned long long)i);
        for (uint64_t j = 0; j < i; j++)
            if (strcmp(g->kv[j].key, kv->key) == 0)
                return em_err_set(err, EM_EFORMAT, "%s: duplicate metadata key '%s'",
                                  g->path, kv->key);
        if ((rc = rd_u32(&r, &type, kv->key)))
            return rc;
        if (type >= EM_GGUF_NTYPES)
            return em_err_set(err, EM_EFORMAT, "%s: key '%s' has unknown value type %u",
                              g->path, kv->key, type);
        if ((rc = read_value(&r, type, &kv->value, 0, kv->key)))
            return rc;
        if (strcmp(kv->key, "general.alignment") == 0) {
            const em_gguf_value *v = &kv->value;
            if (v->type != EM_GGUF_U32)
                return em_err_set(err, EM_EFORMAT, "%s: general.alignment must be u32, not %s",
                                  g->path, em_gguf_type_name(v->type));
            if (v->v.u == 0 || (v->v.u & (v->v.u - 1)) || v->v.u > (1u << 20))
                return em_err_set(err, EM_EFORMAT,
                                  "%s: general.alignment %llu is not a power of two up to 1 MiB",
                                  g->path, (unsigned long long)v->v.u);
            g->alignment = (uint32_t)v->v.u;
        }
    }
    g->sections[1] = r.pos;

    for (uint64_t i = 0; i < n_tensors; i++) {
        em_gguf_tensor *t = &g->tensors[i];
        em_gguf_str name;
        if ((rc = rd_str(&r, &name, GGUF_MAX_NAME, "tensor name")))
            return rc;
        t->name = str_dup(name);
        if (!t->name)
            return em_err_set(err, EM_ENOMEM, "%s: out of memory", g->path);
        g->n_tensors = i + 1;
        if (name.len == 0 || memchr(name.ptr, 0, name.len))
            return em_err_set(err, EM_EFORMAT, "%s: tensor %llu has an empty or invalid name",
                              g->path, (unsigned long long)i);
        if ((rc = rd_u32(&r, &t->n_dims, t->name)))
            return rc;
        if (t->n_dims == 0 || t->n_dims > GGUF_MAX_DIMS)
            return em_err_set(err, EM_EFORMAT, "%s: tensor '%s' has %u dimensions (1..%d allowed)",
                              g->path, t->name, t->n_dims, GGUF_MAX_DIMS);
        uint64_t nelem = 1;
        for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++) {
            t->ne[d] = 1;
            if (d >= t->n_dims)
                continue;
            if ((rc = rd_u64(&r, &t->ne[d], t->name)))
                return rc;
            if (t->ne[d] == 0)
                return em_err_set(err, EM_EFORMAT, "%s: tensor '%s' has a zero dimension",
                                  g->path, t->name);
            if (t->ne[d] > (uint64_t)INT64_MAX / nelem)
                return em_err_set(err, EM_EFORMAT, "%s: tensor '%s' element count overflows",
                                  g->path, t->name);
            nelem *= t->ne[d];
        }
        t->nelem = nelem;
        if ((rc = rd_u32(&r, &t->type, t->name)) || (rc = rd_u64(&r, &t->offset, t->name)))
            return rc;
        const em_ttype_info *ti = em_ttype_get(t->type);
        if (!ti)
            return em_err_set(err, EM_EFORMAT, "%s: tensor '%s' has unknown type %u",
                              g->path, t->name, t->type);
        if (t->ne[0] % ti->blck)
            return em_err_set(err, EM_EFORMAT,
                              "%s: tensor '%s' row of %llu elements is not a multiple of the %s block size %u",
                              g->path, t->name, (unsigned long long)t->ne[0], ti->name, ti->blck);
        if (nelem / ti->blck > UINT64_MAX / ti->bytes)
            return em_err_set(err, EM_EFORMAT, "%s: tensor '%s' byte size overflows", g->path, t->name);
        t->nbytes = nelem / ti->blck * ti->bytes;
        if (t->offset % g->alignment)
            return em_err_set(err, EM_EFORMAT,
                              "%s: tensor '%s' offset %llu is not aligned to %u bytes",
                              g->path, t->name, (unsigned long long)t->offset, g->alignment);
        for (uint64_t j = 0; j < i; j++)
            if (strcmp(g->tensors[j].name, t->name) == 0)
                return em_err_set(err, EM_EFORMAT, "%s: duplicate tensor name '%s'",
                                  g->path, t->name);
    }
    g->sections[2] = r.pos;

    uint64_t data = (r.pos + g->alignment - 1) / g->alignment * g->alignment;
    if (n_tensors > 0 && data > g->size)
        return em_err_set(err, EM_EFORMAT, "%s: truncated file: the data section starts past the end",
                          g->path);
    g->data_offset = data;
    g->sections[3] = data;
    g->sections[4] = g->size;
    uint64_t avail = g->size > data ? g->size - data : 0;
    for (uint64_t i = 0; i < n_tensors; i++) {
        em_gguf_tensor *t = &g->tensors[i];
        if (t->offset > avail || t->nbytes > avail - t->offset)
            return em_err_set(err, EM_EFORMAT,
                              "%s: tensor '%s' (%llu bytes at data offset %llu) extends past the end of the file",
                              g->path, t->name, (unsigned long long)t->nbytes,
                              (unsigned long long)t->offset);
        t->data = g->base + data + t->offset;
    }
    return 0;
}

static int finish_open(em_gguf *g, em_gguf **out, em_err *err)
{
    int rc = parse(g, err);
    if (rc) {
        em_gguf_close(g);
        *out = NULL;
        return rc;
    }
    *out = g;
    return 0;
}

int em_gguf_open_mem(const void *data, size_t size, const char *name,
                     em_gguf **out, em_err *err)
{
    *out = NULL;
    em_gguf *g = calloc(1, sizeof *g);
    if (!g)
        return em_err_set(err, EM_ENOMEM, "%s: out of memory", name);
    g->path = strdup(name ? name : "<memory>");
    g->base = data;
    g->size = size;
    if (!g->path) {
        free(g);
        return em_err_set(err, EM_ENOMEM, "%s: out of memory", name);
    }
    return finish_open(g, out, err);
}

/* ---- the file's sampled checksum ------------------------------------------ */

/* SAMPLE_BLOCKS blocks of SAMPLE_BYTES spread evenly over the file, the
 * first at its start and the last at its end (the header, then pieces of
 * every region of the weights): a file written over in place with its size
 * and times kept — another model copied over this one with cp -p, a tool
 * that restores mtime — differs in them, while reading them costs a few
 * hundred KiB, not the whole file. A change confined to bytes between the
 * blocks is not seen. */
#define SAMPLE_BLOCKS 64
#define SAMPLE_BYTES  4096

static uint64_t sample_at(uint64_t size, uint64_t i)
{
    return size <= SAMPLE_BYTES ? 0 : (size - SAMPLE_BYTES) * i / (SAMPLE_BLOCKS - 1);
}

/* From the mapping (at open) when fd < 0, else read from fd; 0 ok. */
static int sampled_sum(const uint8_t *base, int fd, uint64_t size, uint64_t *out)
{
    XXH3_state_t *s = XXH3_createState();
    if (!s || XXH3_64bits_reset(s) == XXH_ERROR) {
        XXH3_freeState(s);
        return -1;
    }
    uint8_t buf[SAMPLE_BYTES];
    for (uint64_t i = 0; i < SAMPLE_BLOCKS; i++) {
        uint64_t at = sample_at(size, i), n = size - at < SAMPLE_BYTES ? size - at : SAMPLE_BYTES;
        const uint8_t *p = base ? base + at : buf;
        if (!base) {
            ssize_t got = pread(fd, buf, (size_t)n, (off_t)at);
            if (got < 0 || (uint64_t)got != n) {
                XXH3_freeState(s);
                return -1;
            }
        }
        XXH3_64bits_update(s, p, (size_t)n);
    }
    *out = XXH3_64bits_digest(s);
    XXH3_freeState(s);
    return 0;
}

int em_gguf_open(const char *path, em_gguf **out, em_err *err)
{
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        return em_err_set(err, e == ENOENT ? EM_ENOENT : EM_EIO, "%s: %s", path, strerror(e));
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return em_err_set(err, EM_EIO, "%s: %s", path, strerror(e));
    }
    if (S_ISDIR(st.st_mode)) {
        close(fd);
        return em_err_set(err, EM_EINVAL, "%s: is a directory, not a GGUF file", path);
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return em_err_set(err, EM_EINVAL, "%s: not a regular file", path);
    }
    em_gguf *g = calloc(1, sizeof *g);
    if (!g || !(g->path = strdup(path))) {
        free(g);
        close(fd);
        return em_err_set(err, EM_ENOMEM, "%s: out of memory", path);
    }
    g->size = (uint64_t)st.st_size;
    g->st = st;
    if (g->size > 0) {
        void *m = mmap(NULL, g->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            int e = errno;
            close(fd);
            free(g->path);
            free(g);
            return em_err_set(err, EM_EIO, "%s: mmap failed: %s", path, strerror(e));
        }
        g->base = m;
        g->mapped = 1;
        sampled_sum(g->base, -1, g->size, &g->sum);   /* from memory: cannot fail but for allocation */
    } else {
        g->base = (const uint8_t *)"";
    }
    close(fd);
    return finish_open(g, out, err);
}

void em_gguf_close(em_gguf *g)
{
    if (!g)
        return;
    for (size_t i = 0; i < g->n_kv; i++) {
        free(g->kv[i].key);
        value_free(&g->kv[i].value);
    }
    for (size_t i = 0; i < g->n_tensors; i++)
        free(g->tensors[i].name);
    free(g->kv);
    free(g->tensors);
    if (g->mapped)
        munmap((void *)g->base, g->size);
    free(g->path);
    free(g);
}

/* ---- accessors ------------------------------------------------------------ */

const char *em_gguf_path(const em_gguf *g) { return g->path; }
uint32_t em_gguf_version(const em_gguf *g) { return g->version; }
uint32_t em_gguf_alignment(const em_gguf *g) { return g->alignment; }
uint64_t em_gguf_data_offset(const em_gguf *g) { return g->data_offset; }
int em_gguf_unchanged(const em_gguf *g, em_err *err)
{
    if (!g->mapped)
        return 0;
    struct stat now;
    if (stat(g->path, &now) != 0)
        return em_err_set(err, EM_ESTATE, "%s: the model file is gone from the disk since it was loaded (%s)", g->path,
                          strerror(errno));
    if (now.st_dev != g->st.st_dev || now.st_ino != g->st.st_ino)
        return em_err_set(err, EM_ESTATE, "%s: the model file was replaced on disk since it was loaded", g->path);
    if ((uint64_t)now.st_size != g->size)
        return em_err_set(err, EM_ESTATE, "%s: the model file changed size on disk since it was loaded "
                          "(%llu bytes, now %llu)", g->path, (unsigned long long)g->size,
                          (unsigned long long)now.st_size);
    if (now.st_mtim.tv_sec != g->st.st_mtim.tv_sec || now.st_mtim.tv_nsec != g->st.st_mtim.tv_nsec)
        return em_err_set(err, EM_ESTATE, "%s: the model file was written to since it was loaded", g->path);
    int fd = open(g->path, O_RDONLY | O_CLOEXEC);
    uint64_t sum = 0;
    int rc = fd < 0 ? -1 : sampled_sum(NULL, fd, g->size, &sum);
    int e = errno;
    if (fd >= 0)
        close(fd);
    if (rc)
        return em_err_set(err, EM_ESTATE, "%s: the model file cannot be read again to check it (%s)", g->path,
                          strerror(e));
    if (sum != g->sum)
        return em_err_set(err, EM_ESTATE, "%s: the model file's contents changed on disk since it was loaded "
                          "(written in place, its size and times kept)", g->path);
    return 0;
}

const void *em_gguf_base(const em_gguf *g) { return g->base; }
uint64_t em_gguf_size(const em_gguf *g) { return g->size; }
size_t em_gguf_n_kv(const em_gguf *g) { return g->n_kv; }
const em_gguf_kv *em_gguf_kv_at(const em_gguf *g, size_t i) { return i < g->n_kv ? &g->kv[i] : NULL; }
size_t em_gguf_n_tensors(const em_gguf *g) { return g->n_tensors; }

const em_gguf_tensor *em_gguf_tensor_at(const em_gguf *g, size_t i)
{
    return i < g->n_tensors ? &g->tensors[i] : NULL;
}

void em_gguf_sections(const em_gguf *g, uint64_t out[5])
{
    memcpy(out, g->sections, sizeof g->sections);
}

const em_gguf_value *em_gguf_get(const em_gguf *g, const char *key)
{
    for (size_t i = 0; i < g->n_kv; i++)
        if (strcmp(g->kv[i].key, key) == 0)
            return &g->kv[i].value;
    return NULL;
}

const em_gguf_tensor *em_gguf_find_tensor(const em_gguf *g, const char *name)
{
    for (size_t i = 0; i < g->n_tensors; i++)
        if (strcmp(g->tensors[i].name, name) == 0)
            return &g->tensors[i];
    return NULL;
}

static int is_uint(em_gguf_type t)
{
    return t == EM_GGUF_U8 || t == EM_GGUF_U16 || t == EM_GGUF_U32 || t == EM_GGUF_U64;
}

static int is_sint(em_gguf_type t)
{
    return t == EM_GGUF_I8 || t == EM_GGUF_I16 || t == EM_GGUF_I32 || t == EM_GGUF_I64;
}

static int lookup(const em_gguf *g, const char *key, const em_gguf_value **v, em_err *err)
{
    *v = em_gguf_get(g, key);
    if (!*v)
        return em_err_set(err, EM_ENOENT, "%s: missing metadata key '%s'", g->path, key);
    return 0;
}

static int bad_type(const em_gguf *g, const char *key, const em_gguf_value *v,
                    const char *want, em_err *err)
{
    return em_err_set(err, EM_EFORMAT, "%s: metadata key '%s' is %s, expected %s",
                      g->path, key, em_gguf_type_name(v->type), want);
}

int em_gguf_get_u64(const em_gguf *g, const char *key, uint64_t *out, em_err *err)
{
    const em_gguf_value *v;
    int rc = lookup(g, key, &v, err);
    if (rc)
        return rc;
    if (is_uint(v->type)) {
        *out = v->v.u;
        return 0;
    }
    if (is_sint(v->type) && v->v.i >= 0) {
        *out = (uint64_t)v->v.i;
        return 0;
    }
    return bad_type(g, key, v, "a non-negative integer", err);
}

int em_gguf_get_u32(const em_gguf *g, const char *key, uint32_t *out, em_err *err)
{
    uint64_t u;
    int rc = em_gguf_get_u64(g, key, &u, err);
    if (rc)
        return rc;
    if (u > UINT32_MAX)
        return em_err_set(err, EM_EFORMAT, "%s: metadata key '%s' value %llu is too large",
                          g->path, key, (unsigned long long)u);
    *out = (uint32_t)u;
    return 0;
}

int em_gguf_get_i64(const em_gguf *g, const char *key, int64_t *out, em_err *err)
{
    const em_gguf_value *v;
    int rc = lookup(g, key, &v, err);
    if (rc)
        return rc;
    if (is_sint(v->type)) {
        *out = v->v.i;
        return 0;
    }
    if (is_uint(v->type) && v->v.u <= (uint64_t)INT64_MAX) {
        *out = (int64_t)v->v.u;
        return 0;
    }
    return bad_type(g, key, v, "an integer", err);
}

int em_gguf_get_f32(const em_gguf *g, const char *key, float *out, em_err *err)
{
    const em_gguf_value *v;
    int rc = lookup(g, key, &v, err);
    if (rc)
        return rc;
    if (v->type == EM_GGUF_F32 || v->type == EM_GGUF_F64)
        *out = (float)v->v.f;
    else if (is_uint(v->type))
        *out = (float)v->v.u;
    else if (is_sint(v->type))
        *out = (float)v->v.i;
    else
        return bad_type(g, key, v, "a number", err);
    return 0;
}

int em_gguf_get_bool(const em_gguf *g, const char *key, int *out, em_err *err)
{
    const em_gguf_value *v;
    int rc = lookup(g, key, &v, err);
    if (rc)
        return rc;
    if (v->type == EM_GGUF_BOOL || is_uint(v->type))
        *out = v->v.u != 0;
    else if (is_sint(v->type))
        *out = v->v.i != 0;
    else
        return bad_type(g, key, v, "a bool", err);
    return 0;
}

int em_gguf_get_str(const em_gguf *g, const char *key, em_gguf_str *out, em_err *err)
{
    const em_gguf_value *v;
    int rc = lookup(g, key, &v, err);
    if (rc)
        return rc;
    if (v->type != EM_GGUF_STRING)
        return bad_type(g, key, v, "a string", err);
    *out = v->v.str;
    return 0;
}

int em_gguf_get_arr(const em_gguf *g, const char *key, em_gguf_type elem_type,
                    const em_gguf_value **out, em_err *err)
{
    const em_gguf_value *v;
    int rc = lookup(g, key, &v, err);
    if (rc)
        return rc;
    if (v->type != EM_GGUF_ARRAY)
        return bad_type(g, key, v, "an array", err);
    if (elem_type != EM_GGUF_NTYPES && v->v.arr.type != elem_type)
        return em_err_set(err, EM_EFORMAT, "%s: metadata key '%s' is an array of %s, expected %s",
                          g->path, key, em_gguf_type_name(v->v.arr.type),
                          em_gguf_type_name(elem_type));
    *out = v;
    return 0;
}

double em_gguf_arr_f64(const em_gguf_value *arr, uint64_t i)
{
    const uint8_t *p = (const uint8_t *)arr->v.arr.raw + i * em_gguf_type_size(arr->v.arr.type);
    switch (arr->v.arr.type) {
    case EM_GGUF_F32: { float f; memcpy(&f, p, 4); return f; }
    case EM_GGUF_F64: { double d; memcpy(&d, p, 8); return d; }
    default: return (double)em_gguf_arr_i64(arr, i);
    }
}

int64_t em_gguf_arr_i64(const em_gguf_value *arr, uint64_t i)
{
    const uint8_t *p = (const uint8_t *)arr->v.arr.raw + i * em_gguf_type_size(arr->v.arr.type);
    switch (arr->v.arr.type) {
    case EM_GGUF_U8: case EM_GGUF_BOOL: return *p;
    case EM_GGUF_I8:  { int8_t v; memcpy(&v, p, 1); return v; }
    case EM_GGUF_U16: { uint16_t v; memcpy(&v, p, 2); return v; }
    case EM_GGUF_I16: { int16_t v; memcpy(&v, p, 2); return v; }
    case EM_GGUF_U32: { uint32_t v; memcpy(&v, p, 4); return v; }
    case EM_GGUF_I32: { int32_t v; memcpy(&v, p, 4); return v; }
    case EM_GGUF_U64: { uint64_t v; memcpy(&v, p, 8); return (int64_t)v; }
    case EM_GGUF_I64: { int64_t v; memcpy(&v, p, 8); return v; }
    case EM_GGUF_F32: { float f; memcpy(&f, p, 4); return (int64_t)f; }
    case EM_GGUF_F64: { double d; memcpy(&d, p, 8); return (int64_t)d; }
    default: return 0;
    }
}
