/* wpack.h — repack weight matrices into the layout the GPU kernels read
 * (shaders/mm.comp, shaders/dequant.glsl).
 *
 * Rows are grouped by R (the rows one workgroup owns); within a group the
 * blocks come in chunks of C consecutive blocks (the last chunk may be
 * shorter: c = min(C, nb - b0) blocks from b0 = b - b % C) and, within a
 * chunk, row by row, the c blocks' copies of that row follow each other:
 * the 32-bit word w of block b of row r of group g is at
 *   qw[(g * nb * R + b0 * R + r * c + (b - b0)) * W + w]
 * C is the number of lanes of mm.comp that take consecutive blocks (its
 * workgroup width over the units per block: lanes / 1 for 32-element
 * blocks, lanes / 4 for the K-quants), so at each step of its row loop a
 * workgroup's lanes read adjacent words: one stream instead of C streams a
 * block's R rows apart (decode product streaming from memory on llvmpipe,
 * 1024 x 65536 Q4_0: 3.06-3.42 -> 2.76-2.85 ms). With C = 1 a lane that
 * takes block b for all R rows reads R * W words in a row. The f16 block
 * scale of Q4_0, Q8_0 and Q6_K (whose blocks are not whole 16-byte words)
 * goes to the halves sc[] in the same chunks, S = min(R, 8) rows (one
 * 16-byte word) at a time:
 *   sc[g * nb * R + b0 * R + ((r / S) * c + (b - b0)) * S + r % S]
 * Q4_K and Q5_K blocks are all words and are copied, but for their 12
 * scale bytes, which become three words that unpack with fixed shifts
 * (core/gpu/wpack.c k4_scales). Q4_0 rows go in pairs (R >= 2) that take the
 * place of two rows: the 32 bytes of rows 2p and 2p+1 of a block are 8 words at
 *   qw[(g * nb * R + b0 * R + 2 * (p * c + (b - b0))) * 4 + w]
 * word w holding elements 4w..4w+3 of row 2p in bits 4i..4i+3 and of row
 * 2p+1 in bits 16+4i..16+4i+3, so that one 32-bit multiply by an integer
 * activation gives both rows' products (mm.comp).
 * The other 32-element types keep their 16 bytes of nibbles in qw (W = 4,
 * GGUF order: byte j holds element j low and j + 16 high) and the rest of
 * the block in sc, has_sc halves per row and block in the same chunks
 * (row r's at sc[em_wpack_scale * has_sc ...], so eight rows' fill
 * has_sc 16-byte words): IQ4_NL d (1); MXFP4 its E8M0 byte (1: 18 bytes
 * on the device for the file's 17); Q4_1 d, m (2); Q5_0 d, 0 and Q5_1
 * d, m, then the 32 fifth bits qh (4). Q5_0 thus takes 24 bytes per block
 * on the device for the file's 22; the others take the file's bytes.
 * IQ4_XS keeps its 128 bytes of nibbles in qw (W = 32) and d, scales_h and
 * the four bytes scales_l as its 4 side halves. Q2_K keeps scales and qs
 * (80 bytes, W = 20) and d, dmin as 2 side halves; Q3_K hmask and qs (96
 * bytes) and its 16 six-bit scales unpacked to bytes (W = 28: 114 bytes on
 * the device for the file's 110), d as 1 side half.
 * Every W is a multiple of 4 (blocks are whole 16-byte words). Types
 * without a kernel (BF16) are converted to
 * F16; F32/F16 rows are zero-padded to a multiple of 32. Rows past N in the
 * last group are zero. All pointers are borrowed. */
#ifndef EM_WPACK_H
#define EM_WPACK_H

#include <stdint.h>

#include "core/err.h"

typedef struct {
    uint32_t src_type;   /* GGUF type of the source rows */
    uint32_t type;       /* kernel type: F32 F16 or the quantized source type (BF16 -> F16) */
    uint32_t K;          /* source row length */
    uint32_t K_pad;      /* padded row length (multiple of BS) */
    uint32_t N;          /* rows */
    uint32_t R;          /* rows per group */
    uint32_t C;          /* blocks per chunk */
    uint32_t BS;         /* elements per block */
    uint32_t W;          /* words per block */
    uint32_t nb;         /* blocks per row (K_pad / BS) */
    uint32_t n_groups;   /* ceil(N / R) */
    int      has_sc;     /* halves per row and block in sc[] (0: none; 1, 2 or 4) */
    uint64_t group_qw_bytes;  /* bytes of qw per row group */
    uint64_t group_sc_bytes;  /* bytes of sc per row group (0 without sc) */
} em_wpack_layout;

/* The layout for an N x K matrix of src_type grouped by R (a power of two,
 * 1..256) for a matrix kernel of `lanes` lanes per workgroup (1..256; the C
 * above follows from it). EM_EUNSUPPORTED for a type that cannot be
 * packed. */
int em_wpack_layout_for(uint32_t src_type, uint32_t K, uint32_t N, uint32_t R, uint32_t lanes,
                        em_wpack_layout *out, em_err *err);

/* Index in qw (32-bit words, within the group) of word 0 of row r's copy
 * of block b; for Q4_0 the start of the 8 words of the pair r & ~1, r | 1
 * (the same index for both rows). */
uint64_t em_wpack_word(const em_wpack_layout *L, uint32_t b, uint32_t r);

/* Index in sc (within the group, in units of has_sc halves) of row r's
 * side halves of block b. */
uint64_t em_wpack_scale(const em_wpack_layout *L, uint32_t b, uint32_t r);

/* Pack one row group. rows[r] points at the source row for lane r (in
 * src_type encoding, K elements) or is NULL for a padding row. qw receives
 * group_qw_bytes, sc (when has_sc) group_sc_bytes. tmp is scratch of at
 * least K_pad floats (for conversions). */
void em_wpack_group(const em_wpack_layout *L, const void *const *rows, uint32_t *qw,
                    uint16_t *sc, float *tmp);

#endif
