/* quantize.h — float rows to GGUF blocks the way the reference quantizer
 * rounds them, the per-tensor type choice of the usual file types (Q8_0,
 * Q4_0, Q4_K_M, Q5_K_M, Q6_K), and a streaming whole-file converter.
 *
 * Block rounding (core/model/quantize.c) follows the reference rules of each
 * layout, including the K-quant scale/min searches, so that a file quantized
 * by ember and by the reference tool from the same input is near-identical
 * (byte-identical for almost every block). The type choice and the file
 * conversion live in core/model/quantize_model.c. No importance matrix is used. */
#ifndef EM_QUANTIZE_H
#define EM_QUANTIZE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/err.h"
#include "core/model/gguf.h"

/* ---- blocks ---------------------------------------------------------------- */

/* 1 if em_quantize_row can produce this type: F32 F16 BF16 Q4_0 Q5_0 Q5_1
 * Q8_0 Q4_K Q5_K Q6_K. */
int em_quantize_can(uint32_t type);

/* Quantize n floats at src (borrowed; n a multiple of the type's block size,
 * finite values) into n / blck blocks at dst (borrowed, caller-sized).
 * Returns the bytes written, 0 for a type em_quantize_can refuses. */
size_t em_quantize_row(uint32_t type, const float *src, void *dst, int64_t n);

/* float -> bf16, round to nearest even (NaN stays NaN). */
uint16_t em_f32_to_bf16(float f);

/* ---- file types ------------------------------------------------------------ */

typedef struct {
    const char *name;     /* "Q4_K_M" */
    uint32_t    ftype;    /* the general.file_type number (ggml's llama_ftype) */
    uint32_t    base;     /* the type most weight matrices get (EM_T_Q4_K) */
    const char *summary;  /* one line for --help and the docs */
} em_qftype;

/* The output types `ember quantize` offers, by name (case-insensitive);
 * NULL if unknown. Static data. */
const em_qftype *em_qftype_find(const char *name);
/* "Q8_0 Q4_0 Q4_K_M Q5_K_M Q6_K" (static). */
const char *em_qftype_names(void);
/* Name of a general.file_type number ("Q4_K_M", "F16", ...); NULL if unknown.
 * Static. */
const char *em_ftype_name(uint32_t ftype);

/* ---- per-tensor types ------------------------------------------------------ */

/* Why a tensor gets its output type. */
typedef enum {
    EM_QWHY_COPY,       /* not a weight matrix (norm, bias, ...): kept as is (BF16 -> F32) */
    EM_QWHY_BASE,       /* the file type's base type */
    EM_QWHY_MIX,        /* more bits by the K_M convention (attn_v, ffn_down, output) */
    EM_QWHY_FALLBACK,   /* the row length is not a multiple of the chosen block */
} em_qwhy;

/* The output type of every tensor of in (borrowed) for file type ft
 * (borrowed): types[i] and why[i] (caller-owned arrays of
 * em_gguf_n_tensors(in) entries; why may be NULL). EM_EUNSUPPORTED when a
 * tensor must be converted but its type cannot be read (IQ types...). */
int em_quantize_plan(const em_gguf *in, const em_qftype *ft, uint32_t *types,
                     em_qwhy *why, em_err *err);

/* ---- whole file ------------------------------------------------------------ */

typedef struct {
    int   threads;     /* worker threads; 0: one per online CPU */
    /* Called after each piece of work (may be NULL): parameters done of
     * total, and the tensor being written (borrowed for the call). */
    void (*progress)(void *ctx, uint64_t done, uint64_t total, const char *tensor);
    void *progress_ctx;
    /* Polled between pieces of work (may be NULL): nonzero stops the
     * conversion with EM_ECANCELED. */
    int  (*cancel)(void *ctx);
    void *cancel_ctx;
} em_quantize_opts;

typedef struct {
    uint64_t n_params;              /* elements of all tensors */
    uint64_t in_bytes, out_bytes;   /* tensor data, without padding */
    uint32_t n_tensors;
    uint32_t n_requant;             /* already-quantized inputs dequantized first */
    uint32_t n_fallback;            /* tensors that got a fallback type */
    uint32_t n_by_type[EM_T_COUNT]; /* output tensors per type */
} em_quantize_stats;

/* Write in (borrowed) as a GGUF v3 file of type ft to out (borrowed, an
 * open file positioned at 0): every metadata entry copied,
 * general.file_type and general.quantization_version set, tensors in the
 * input's order, each converted in pieces of bounded size (the model is never
 * held twice in memory). opts and st may be NULL. Errors: EM_EFORMAT for
 * non-finite weights, EM_EUNSUPPORTED for unreadable types, EM_EIO for write
 * failures, EM_ECANCELED when opts->cancel asked. */
int em_quantize_gguf(const em_gguf *in, const em_qftype *ft, FILE *out,
                     const em_quantize_opts *opts, em_quantize_stats *st, em_err *err);

#endif
