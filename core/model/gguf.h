/* gguf.h — a GGUF (v2/v3) reader that validates everything before use.
 *
 * The file is mmap'd read-only. Every pointer handed out by this module
 * (strings, array data, tensor data) points into that mapping or into memory
 * owned by the em_gguf and stays valid until em_gguf_close(). Strings in the
 * file are not NUL-terminated: they come as em_gguf_str {ptr, len}; keys and
 * tensor names are copied and NUL-terminated for convenience.
 *
 * Multi-byte values are little-endian in the file; ember only builds for
 * little-endian hosts (checked at compile time). */
#ifndef EM_GGUF_H
#define EM_GGUF_H

#include <stddef.h>
#include <stdint.h>

#include <stdio.h>

#include "core/err.h"

/* Metadata value types (the GGUF numbering). */
typedef enum {
    EM_GGUF_U8 = 0, EM_GGUF_I8 = 1, EM_GGUF_U16 = 2, EM_GGUF_I16 = 3,
    EM_GGUF_U32 = 4, EM_GGUF_I32 = 5, EM_GGUF_F32 = 6, EM_GGUF_BOOL = 7,
    EM_GGUF_STRING = 8, EM_GGUF_ARRAY = 9, EM_GGUF_U64 = 10, EM_GGUF_I64 = 11,
    EM_GGUF_F64 = 12,
    EM_GGUF_NTYPES
} em_gguf_type;

/* Tensor element types (the ggml numbering). All of these are understood by
 * the reader (block size and bytes); which ones can be computed with is the
 * model's business (see core/model/quant.h). */
typedef enum {
    EM_T_F32 = 0, EM_T_F16 = 1, EM_T_Q4_0 = 2, EM_T_Q4_1 = 3,
    EM_T_Q5_0 = 6, EM_T_Q5_1 = 7, EM_T_Q8_0 = 8, EM_T_Q8_1 = 9,
    EM_T_Q2_K = 10, EM_T_Q3_K = 11, EM_T_Q4_K = 12, EM_T_Q5_K = 13,
    EM_T_Q6_K = 14, EM_T_Q8_K = 15, EM_T_IQ2_XXS = 16, EM_T_IQ2_XS = 17,
    EM_T_IQ3_XXS = 18, EM_T_IQ1_S = 19, EM_T_IQ4_NL = 20, EM_T_IQ3_S = 21,
    EM_T_IQ2_S = 22, EM_T_IQ4_XS = 23, EM_T_I8 = 24, EM_T_I16 = 25,
    EM_T_I32 = 26, EM_T_I64 = 27, EM_T_F64 = 28, EM_T_IQ1_M = 29,
    EM_T_BF16 = 30, EM_T_TQ1_0 = 34, EM_T_TQ2_0 = 35, EM_T_MXFP4 = 39,
    EM_T_COUNT = 40
} em_ttype;

typedef struct {
    const char *name;     /* "Q4_K" */
    uint32_t    blck;     /* elements per block (1 for plain types) */
    uint32_t    bytes;    /* bytes per block */
} em_ttype_info;

/* Block geometry of a tensor type; NULL if the id is unknown. */
const em_ttype_info *em_ttype_get(uint32_t type);
/* Name of a type id, "type <n>" style for unknown ids (static/thread buffer). */
const char *em_ttype_name(uint32_t type);

typedef struct { const char *ptr; uint64_t len; } em_gguf_str;

typedef struct em_gguf_value em_gguf_value;
struct em_gguf_value {
    em_gguf_type type;
    union {
        uint64_t u;    /* U8 U16 U32 U64 BOOL */
        int64_t  i;    /* I8 I16 I32 I64 */
        double   f;    /* F32 F64 */
        em_gguf_str str;
        struct {
            em_gguf_type   type;   /* element type */
            uint64_t       n;      /* element count */
            const void    *raw;    /* scalar elements: packed LE data in the file */
            em_gguf_value *items;  /* STRING or ARRAY elements: n parsed values */
        } arr;
    } v;
};

typedef struct {
    char          *key;      /* NUL-terminated copy */
    em_gguf_value  value;
} em_gguf_kv;

typedef struct {
    char        *name;       /* NUL-terminated copy */
    uint32_t     n_dims;     /* 1..4 */
    uint64_t     ne[4];      /* ne[0] is the contiguous (row) dimension; unused dims are 1 */
    uint32_t     type;       /* em_ttype */
    uint64_t     offset;     /* relative to the data section */
    uint64_t     nbytes;
    uint64_t     nelem;
    const void  *data;       /* into the mapping */
} em_gguf_tensor;

typedef struct em_gguf em_gguf;

/* Open and fully validate a GGUF file. On failure *out is NULL and err says
 * "<path>: <what is wrong>" (EM_ENOENT, EM_EIO, EM_EFORMAT). */
int em_gguf_open(const char *path, em_gguf **out, em_err *err);

/* Same, over a caller-owned buffer (borrowed: must outlive the em_gguf).
 * name is used in error messages. */
int em_gguf_open_mem(const void *data, size_t size, const char *name,
                     em_gguf **out, em_err *err);

void em_gguf_close(em_gguf *g);   /* accepts NULL */

const char *em_gguf_path(const em_gguf *g);
uint32_t    em_gguf_version(const em_gguf *g);
uint32_t    em_gguf_alignment(const em_gguf *g);
uint64_t    em_gguf_data_offset(const em_gguf *g);   /* file offset of the data section */
/* Whether the file g was opened from is still the one it mapped (same
 * device, inode, size and modification time, and the same bytes in 64
 * blocks of 4 KiB spread over it — a checksum taken at open, read again
 * from the file: a file written over in place with its size and times
 * kept is caught, a change confined to bytes between the blocks is not):
 * 0, or EM_ESTATE saying what changed (gone, replaced, resized, written
 * to, contents changed, unreadable). A file that changed under
 * the mapping must not be read again: pages past a truncation raise
 * SIGBUS, and the others may hold new bytes. Always 0 for em_gguf_open_mem. */
int em_gguf_unchanged(const em_gguf *g, em_err *err);
const void *em_gguf_base(const em_gguf *g);          /* start of the mapping */
uint64_t    em_gguf_size(const em_gguf *g);          /* file size */

size_t            em_gguf_n_kv(const em_gguf *g);
const em_gguf_kv *em_gguf_kv_at(const em_gguf *g, size_t i);
const em_gguf_value *em_gguf_get(const em_gguf *g, const char *key); /* NULL if absent */

size_t                em_gguf_n_tensors(const em_gguf *g);
const em_gguf_tensor *em_gguf_tensor_at(const em_gguf *g, size_t i);
const em_gguf_tensor *em_gguf_find_tensor(const em_gguf *g, const char *name); /* NULL if absent */

/* Typed getters. Return EM_ENOENT if the key is absent, EM_EFORMAT if it has
 * an incompatible type or its value does not fit (err names the key). Integer
 * getters accept any integer type whose value fits. */
int em_gguf_get_u32(const em_gguf *g, const char *key, uint32_t *out, em_err *err);
int em_gguf_get_u64(const em_gguf *g, const char *key, uint64_t *out, em_err *err);
int em_gguf_get_i64(const em_gguf *g, const char *key, int64_t *out, em_err *err);
int em_gguf_get_f32(const em_gguf *g, const char *key, float *out, em_err *err);
int em_gguf_get_bool(const em_gguf *g, const char *key, int *out, em_err *err);
int em_gguf_get_str(const em_gguf *g, const char *key, em_gguf_str *out, em_err *err);
/* Array getter: *out points at the value; elem_type must match unless it is
 * EM_GGUF_NTYPES (any). */
int em_gguf_get_arr(const em_gguf *g, const char *key, em_gguf_type elem_type,
                    const em_gguf_value **out, em_err *err);

/* Element i of a scalar array, converted. No bounds or type check beyond an
 * assert-free clamp: callers check arr.n and arr.type first. */
double  em_gguf_arr_f64(const em_gguf_value *arr, uint64_t i);
int64_t em_gguf_arr_i64(const em_gguf_value *arr, uint64_t i);

/* Compare a file string with a C string. */
int em_gguf_str_eq(em_gguf_str s, const char *c);

/* Bytes of one scalar metadata value of type t; 0 for STRING, ARRAY, unknown. */
uint32_t em_gguf_type_size(uint32_t t);

/* Name of a metadata value type ("u32", "array", ...). */
const char *em_gguf_type_name(em_gguf_type t);

/* Byte offsets of the section boundaries, for tests and diagnostics:
 * [0] end of header, [1] end of metadata, [2] end of tensor infos,
 * [3] start of data section, [4] end of file. */
void em_gguf_sections(const em_gguf *g, uint64_t out[5]);

/* ---- writer ----------------------------------------------------------------
 * Builds a GGUF v3 file: add metadata and tensor infos first, then stream
 * each tensor's bytes in the order the tensors were added. Strings and keys
 * passed in are copied. */
typedef struct em_gguf_writer em_gguf_writer;

int  em_gguf_writer_create(uint32_t alignment, em_gguf_writer **out, em_err *err);
void em_gguf_writer_destroy(em_gguf_writer *w);   /* accepts NULL */

int em_gguf_w_u32(em_gguf_writer *w, const char *key, uint32_t v);
int em_gguf_w_i32(em_gguf_writer *w, const char *key, int32_t v);
int em_gguf_w_f32(em_gguf_writer *w, const char *key, float v);
int em_gguf_w_bool(em_gguf_writer *w, const char *key, int v);
int em_gguf_w_str(em_gguf_writer *w, const char *key, const char *v);
/* Arrays of scalars: n elements of type elem (packed little-endian data, copied). */
int em_gguf_w_arr(em_gguf_writer *w, const char *key, em_gguf_type elem, const void *data, uint64_t n);
int em_gguf_w_arr_str(em_gguf_writer *w, const char *key, const char *const *v, uint64_t n);
/* Copy a metadata entry from a file being read (any type, nested arrays too). */
int em_gguf_w_kv_copy(em_gguf_writer *w, const em_gguf_kv *kv);
/* Replace or add a u32 entry (e.g. general.file_type when copying). */
int em_gguf_w_set_u32(em_gguf_writer *w, const char *key, uint32_t v);

/* Declare a tensor: ne[0..n_dims) with ne[0] the row length. Returns its byte size in *nbytes. */
int em_gguf_w_tensor(em_gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                     const uint64_t *ne, uint64_t *nbytes);

/* Write the header (metadata + tensor infos + padding) to f (borrowed). */
int em_gguf_w_header(em_gguf_writer *w, FILE *f, em_err *err);
/* Write the next tensor's data (exactly its nbytes, possibly over several
 * calls) and the padding after it. */
int em_gguf_w_data(em_gguf_writer *w, FILE *f, const void *data, uint64_t n, em_err *err);
/* Check that every tensor's data was written. */
int em_gguf_w_finish(em_gguf_writer *w, em_err *err);

#endif
