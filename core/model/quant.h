/* quant.h — scalar conversion of GGUF tensor blocks to float, and back.
 *
 * Block layouts are the GGUF/ggml ones (see core/model/quant.c for each). These
 * routines are the reference every GPU kernel is checked against; they are
 * plain and not optimized. All pointers are borrowed. */
#ifndef EM_QUANT_H
#define EM_QUANT_H

#include <stddef.h>
#include <stdint.h>

float    em_f16_to_f32(uint16_t h);
uint16_t em_f32_to_f16(float f);          /* round to nearest even */
float    em_bf16_to_f32(uint16_t h);

/* The 16 values of the IQ4_NL / IQ4_XS nibbles, and of MXFP4's (E2M1 doubled). */
extern const int8_t em_iq4nl_values[16];
extern const int8_t em_mxfp4_values[16];
/* MXFP4's block scale: half of the E8M0 power 2^(e - 127). */
float em_e8m0_half(uint8_t e);

/* The 16 6-bit scales (0..63; the value is scale - 32) of a Q3_K block
 * from its 12 packed bytes. */
void em_q3k_scales(const uint8_t *packed, uint8_t out[16]);

/* 1 if em_dequant_row handles this tensor type. */
int em_quant_supported(uint32_t type);

/* The 6-bit scale and min of sub-block j (0..7) of a Q4_K/Q5_K block whose
 * 12 packed scale bytes are at q. */
void em_k4_scale_min(int j, const uint8_t *q, uint8_t *sc, uint8_t *m);

/* Convert n elements (a multiple of the type's block size) starting at the
 * block at src into dst[n]. */
void em_dequant_row(uint32_t type, const void *src, float *dst, int64_t n);

/* Quantize n floats (multiple of 32) to Q8_0 blocks in dst, the way the
 * reference quantizer does (d = max|x| / 127, round to nearest). Shorthands
 * for em_quantize_row (core/model/quantize.h), which has every output type. */
void em_quant_q8_0(const float *src, void *dst, int64_t n);
/* Same for Q4_0 (d = signed max / -8). */
void em_quant_q4_0(const float *src, void *dst, int64_t n);

#endif
