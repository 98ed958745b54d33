/* vk.h — ember's Vulkan layer: instance and device selection, the features
 * and limits that kernel variants are chosen by, device memory (suballocated
 * blocks, upload/download through a staging buffer), compute pipelines built
 * from the embedded SPIR-V kernel table, descriptor sets, and command buffers
 * that are recorded once and replayed. docs/vulkan.md explains the design.
 *
 * Conventions (as everywhere in ember): functions return 0 or a negative
 * EM_E* code and fill the optional caller-owned em_err with
 * "vulkan: <what>: <why>". Pointer parameters are borrowed unless a comment
 * says otherwise. Destroy functions accept NULL. A lost device
 * (VK_ERROR_DEVICE_LOST) is reported as EM_EDEVICE from the call that saw it
 * and from every later call that needs the device; allocation failures are
 * EM_ENOMEM. Nothing here exits or aborts.
 *
 * Threads: allocation, freeing, pipeline and descriptor-set creation and
 * queue submission are internally locked and may be called from any thread.
 * One em_vk_cmd must be recorded/submitted by one thread at a time. */
#ifndef EM_VK_H
#define EM_VK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <vulkan/vulkan.h>

#include "core/err.h"

typedef struct em_vk      em_vk;       /* instance + device + queue + allocator */
typedef struct em_vk_pipe em_vk_pipe;  /* one compute pipeline */
typedef struct em_vk_dset em_vk_dset;  /* one descriptor set (buffer ranges) */
typedef struct em_vk_cmd  em_vk_cmd;   /* one command buffer + fence */

/* ---- features -------------------------------------------------------- */

/* Features ember uses, as a bit mask. Subgroup bits mean "supported in the
 * compute stage". em_vk_feature_name() gives the Vulkan name of one bit,
 * em_vk_feature_key() its short key (used by EMBER_VK_DISABLE and JSON). */
enum {
    EM_VK_F_STORAGE16    = 1u << 0,  /* storageBuffer16BitAccess              */
    EM_VK_F_STORAGE8     = 1u << 1,  /* storageBuffer8BitAccess               */
    EM_VK_F_FLOAT16      = 1u << 2,  /* shaderFloat16 (f16 arithmetic)        */
    EM_VK_F_INT8         = 1u << 3,  /* shaderInt8                            */
    EM_VK_F_INT16        = 1u << 4,  /* shaderInt16                           */
    EM_VK_F_INT64        = 1u << 5,  /* shaderInt64                           */
    EM_VK_F_FLOAT64      = 1u << 6,  /* shaderFloat64                         */
    EM_VK_F_DOT          = 1u << 7,  /* shaderIntegerDotProduct (1.3 / KHR)   */
    EM_VK_F_SG_BASIC     = 1u << 8,  /* subgroup basic                        */
    EM_VK_F_SG_VOTE      = 1u << 9,  /* subgroup vote                         */
    EM_VK_F_SG_ARITH     = 1u << 10, /* subgroup arithmetic (subgroupAdd...)  */
    EM_VK_F_SG_BALLOT    = 1u << 11, /* subgroup ballot                       */
    EM_VK_F_SG_SHUFFLE   = 1u << 12, /* subgroup shuffle                      */
    EM_VK_F_SG_SHUFREL   = 1u << 13, /* subgroup shuffle relative             */
    EM_VK_F_SG_CLUSTER   = 1u << 14, /* subgroup clustered                    */
    EM_VK_F_SG_QUAD      = 1u << 15, /* subgroup quad                         */
    EM_VK_F_SG_SIZE_CTL  = 1u << 16, /* subgroupSizeControl (1.3 / EXT)       */
    EM_VK_F_FULL_SG      = 1u << 17, /* computeFullSubgroups (1.3 / EXT)      */
    EM_VK_F_TIMESTAMPS   = 1u << 18, /* timestamp queries on the compute queue*/
    EM_VK_F_COUNT_       = 19
};

/* What ember cannot run without; em_vk_create refuses a device lacking any
 * of these and names the missing ones. (Vulkan 1.1 and a compute queue are
 * required as well.) */
#define EM_VK_F_REQUIRED (EM_VK_F_STORAGE16 | EM_VK_F_SG_BASIC | EM_VK_F_SG_ARITH)

/* Vulkan name of a single bit ("storageBuffer16BitAccess"), or "?". Static. */
const char *em_vk_feature_name(uint32_t bit);
/* Short key of a single bit ("storage16", "float16", "sg_arith"...). Static. */
const char *em_vk_feature_key(uint32_t bit);
/* Write the Vulkan names of the bits of mask, comma-separated, into buf. */
void em_vk_feature_list(uint32_t mask, char *buf, size_t cap);
/* Parse a comma-separated list of keys into a mask (EM_EINVAL names the bad one). */
int em_vk_feature_parse(const char *list, uint32_t *mask, em_err *err);

/* ---- devices ---------------------------------------------------------- */

#define EM_VK_MAX_HEAPS 16

typedef struct em_vk_heap {
    uint64_t size;
    bool     device_local;
    bool     host_visible;      /* some memory type on this heap is host-visible */
} em_vk_heap;

/* Everything ember knows about one physical device. From em_vk_enumerate()
 * `enabled` is 0; from em_vk_info() it holds the features enabled on the
 * logical device, which is what kernel variants must be chosen by. */
typedef struct em_vk_dev_info {
    int         index;              /* vkEnumeratePhysicalDevices order; --device N */
    char        name[VK_MAX_PHYSICAL_DEVICE_NAME_SIZE];
    uint32_t    vendor_id, device_id;
    const char *vendor;             /* from the PCI vendor id: "AMD", "NVIDIA", "Intel", "Mesa"... */
    char        driver_name[VK_MAX_DRIVER_NAME_SIZE];  /* "" without driver properties */
    char        driver_info[VK_MAX_DRIVER_INFO_SIZE];
    uint32_t    driver_version;     /* raw */
    char        driver_version_str[32]; /* decoded the vendor's way */
    uint32_t    api_version;        /* the device's */
    uint32_t    api_used;           /* min(device, instance): what ember uses */
    VkPhysicalDeviceType type;
    const char *type_name;          /* "discrete", "integrated", "virtual", "cpu", "other" */

    uint32_t    n_heaps;
    em_vk_heap  heaps[EM_VK_MAX_HEAPS];
    uint64_t    device_local_bytes; /* largest device-local heap */
    bool        unified;            /* integrated/CPU device whose main device-local heap is
                                     * host-visible: device buffers are mapped directly */
    bool        cpu_kernels;        /* the forward pass picks the kernels and geometry
                                     * tuned for CPU devices (type cpu; false under
                                     * opts.as_gpu, and from em_vk_enumerate too
                                     * under EMBER_VK_AS_GPU) */

    uint32_t    subgroup_size;      /* default; on an em_vk, the size a workgroup of it
                                     * really runs as (em_vk_create checks it) */
    uint32_t    subgroup_reported;  /* on an em_vk: the driver's subgroupSize, which
                                     * differs from subgroup_size only when the check
                                     * found the driver splitting such a workgroup */
    uint32_t    subgroup_min, subgroup_max; /* range with size control (= default without) */
    uint32_t    features;           /* EM_VK_F_* the device supports */
    uint32_t    enabled;            /* EM_VK_F_* enabled on the em_vk (0 when enumerated) */
    bool        dot_accel;          /* 4x8-bit packed signed dot product is accelerated */

    uint64_t    max_storage_range;  /* maxStorageBufferRange: largest bound range */
    uint64_t    max_alloc;          /* maxMemoryAllocationSize */
    uint64_t    storage_align;      /* minStorageBufferOffsetAlignment */
    uint64_t    max_texel_elems;    /* maxTexelBufferElements (texel-buffer bindings) */
    uint64_t    texel_align;        /* minTexelBufferOffsetAlignment */
    uint32_t    max_wg_invocations; /* maxComputeWorkGroupInvocations */
    uint32_t    max_wg_size[3];     /* maxComputeWorkGroupSize */
    uint32_t    max_wg_count[3];    /* maxComputeWorkGroupCount */
    uint32_t    max_shared;         /* maxComputeSharedMemorySize (bytes) */
    uint32_t    max_push;           /* maxPushConstantsSize (bytes) */
    uint32_t    max_storage_buffers;/* maxPerStageDescriptorStorageBuffers */
    float       timestamp_period;   /* ns per timestamp tick */
    uint32_t    timestamp_bits;     /* valid bits on the compute queue (0: none) */

    uint32_t    missing;            /* EM_VK_F_REQUIRED bits the device lacks */
    char        unusable[256];      /* why ember cannot use it; "" when usable */
} em_vk_dev_info;

/* List the physical devices. *devs is malloc'd (caller frees with free());
 * *pick is the index em_vk_create(NULL) would choose (EMBER_DEVICE honoured),
 * or -1 when no device is usable. EM_ENODEV when there is no Vulkan
 * instance or no device at all; EM_EINVAL for a bad EMBER_DEVICE. */
int em_vk_enumerate(em_vk_dev_info **devs, int *n, int *pick, em_err *err);

/* ---- the device ------------------------------------------------------- */

typedef struct em_vk_opts {
    int         device;        /* index; -1: EMBER_DEVICE, else the best (discrete >
                                * integrated > virtual > cpu) usable device */
    int         validate;      /* 0: EMBER_VK_VALIDATE decides; 1: validation layer;
                                * 2: + synchronization validation; -1: off */
    uint32_t    require;       /* EM_VK_F_* required on top of EM_VK_F_REQUIRED */
    uint32_t    disable;       /* optional EM_VK_F_* not to enable (test fallbacks);
                                * EMBER_VK_DISABLE=key,key adds to it */
    int         as_gpu;        /* 1: treat the device as a discrete GPU (also
                                * EMBER_VK_AS_GPU=1): device memory is never mapped
                                * (upload/download go through staging) and
                                * info.cpu_kernels is false, so the forward pass
                                * picks the kernels and geometry it picks on GPUs.
                                * How the tests run the GPU paths on llvmpipe. */
    size_t      staging_bytes; /* staging buffer (two halves); 0: EM_VK_STAGING_BYTES */
    size_t      block_bytes;   /* suballocation block; 0: min(256 MiB, maxMemoryAllocationSize) */
    double      wait_timeout_s;/* fence wait limit; 0: 600 s */
    int         cpu_threads;   /* software rasterizers (llvmpipe) only: worker threads
                                * for compute; 0 runs dispatches on the submitting
                                * thread (far cheaper per dispatch: tiny models),
                                * -1 (or EM_VK_OPTS_INIT): the driver's default.
                                * Sets LP_NUM_THREADS unless the user set it. */
    const char *cache_path;    /* pipeline cache file loaded at create, saved at
                                * destroy; NULL: in-memory only */
    uint32_t   *final_errors;  /* when non-NULL: receives the validation error count
                                * at the end of em_vk_destroy (teardown included) */
} em_vk_opts;

#define EM_VK_OPTS_INIT { .device = -1, .cpu_threads = -1 }

/* The staging buffer's default size: 64 MiB of host-visible memory, kept
 * for the device's lifetime once the first upload makes it. */
#define EM_VK_STAGING_BYTES (64ull << 20)

/* Create the instance, pick and open the device, one compute queue. opts may
 * be NULL (defaults). Fails with EM_ENODEV (no Vulkan loader or driver, no
 * device, or none that ember can use: the one failure tests report as SKIP),
 * EM_EDEVICE (the device failed or was lost),
 * EM_EUNSUPPORTED (device lacks a required feature, named in err; or
 * validation asked for but the layer is not installed), EM_EINVAL (bad
 * index/env). *out is owned by the caller: em_vk_destroy(). */
int em_vk_create(const em_vk_opts *opts, em_vk **out, em_err *err);

/* Wait for the device to go idle, then free everything: pipelines, descriptor
 * sets, command buffers still alive, memory blocks, staging. Prints a summary
 * line to stderr when validation reported anything. */
void em_vk_destroy(em_vk *vk);

/* The chosen device's info, with `enabled` filled. Valid for vk's lifetime. */
const em_vk_dev_info *em_vk_info(const em_vk *vk);

/* Bytes of the pipeline cache file (opts.cache_path) that em_vk_create read
 * and the driver accepted; 0 when there was none, or it was refused (another
 * device or driver, a corrupt file). */
size_t em_vk_pipe_cache_loaded(const em_vk *vk);

/* Write the pipeline cache to opts.cache_path now (beside itself, then
 * renamed), as em_vk_destroy does at the end: a server saves it once its
 * pipelines are built, so that a process killed later still leaves it.
 * Nothing without a cache_path; a failure to write is a warning on stderr. */
void em_vk_pipe_cache_save(em_vk *vk);

/* Validation: whether the Khronos layer is installed, whether it is on for vk,
 * and how many error / warning messages it has reported so far (each distinct
 * message is printed once to stderr; all are counted). */
bool     em_vk_validation_available(void);
bool     em_vk_validation_enabled(const em_vk *vk);
uint32_t em_vk_validation_errors(const em_vk *vk);
uint32_t em_vk_validation_warnings(const em_vk *vk);

/* vkDeviceWaitIdle, with device-loss reported. */
int em_vk_wait_idle(em_vk *vk, em_err *err);

/* ---- memory ----------------------------------------------------------- */

typedef enum em_vk_mem_kind {
    EM_VK_MEM_DEVICE,    /* device-local: weights, activations, KV */
    EM_VK_MEM_UPLOAD,    /* host-visible, coherent, write-mostly (staging, params) */
    EM_VK_MEM_READBACK,  /* host-visible, coherent, cached when available */
    EM_VK_MEM_KINDS
} em_vk_mem_kind;

const char *em_vk_mem_kind_name(em_vk_mem_kind kind);  /* "device", "upload", "readback" */

/* A range of device memory inside a VkBuffer. Suballocations share their
 * block's VkBuffer; `off` respects minStorageBufferOffsetAlignment (and 16).
 * `map` points at byte `off` when the memory is host-visible and mapped:
 * always for UPLOAD/READBACK, for DEVICE only on unified-memory devices.
 * A plain value: copy it freely; free it once, with em_vk_free, from the
 * copy em_vk_alloc filled (views made by em_vk_buf_view are not freed). */
typedef struct em_vk_buf {
    VkBuffer            buf;
    VkDeviceSize        off;
    VkDeviceSize        size;
    void               *map;
    em_vk_mem_kind      kind;
    struct em_vk_block *block_;   /* private: owning block; NULL in a view */
} em_vk_buf;

/* Allocate size bytes (> 0) of the given kind. Sizes up to the block size
 * share blocks; larger ones get a dedicated allocation up to
 * maxMemoryAllocationSize; beyond that (or when the heap is exhausted)
 * EM_ENOMEM with the sizes in err. *out is zeroed on failure. */
int em_vk_alloc(em_vk *vk, em_vk_mem_kind kind, VkDeviceSize size, em_vk_buf *out,
                em_err *err);

/* Return the range to its block (blocks that become empty are released,
 * except one spare per kind). Accepts a zeroed buf; zeroes *b. The memory
 * must not be in use by a pending command buffer. */
void em_vk_free(em_vk *vk, em_vk_buf *b);

/* A sub-range [off, off+size) of b, for binding part of a large buffer. The
 * view borrows b's memory (never free it). off + size must lie inside b. */
em_vk_buf em_vk_buf_view(const em_vk_buf *b, VkDeviceSize off, VkDeviceSize size);

typedef struct em_vk_mem_stats {
    uint64_t used;       /* bytes handed out (sizes asked for) */
    uint64_t reserved;   /* bytes of device memory allocated (blocks + dedicated) */
    uint32_t n_allocs;   /* live allocations */
    uint32_t n_blocks;   /* live VkDeviceMemory objects */
} em_vk_mem_stats;

void em_vk_mem_stats_get(em_vk *vk, em_vk_mem_kind kind, em_vk_mem_stats *st);

/* Progress bar on stderr for long transfers: drawn only when stderr is a
 * terminal and total >= EM_VK_PROGRESS_MIN. begin/add/end; add may be
 * called with any byte counts (redraws at most ~10 times a second). The
 * struct is caller-owned; label is borrowed until end. */
#define EM_VK_PROGRESS_MIN (100ull * 1000 * 1000)

typedef struct em_vk_progress {
    const char *label;
    uint64_t    total, done;
    double      t0, t_drawn;
    bool        draw;
} em_vk_progress;

void em_vk_progress_begin(em_vk_progress *p, const char *label, uint64_t total);
void em_vk_progress_add(em_vk_progress *p, uint64_t n);
void em_vk_progress_end(em_vk_progress *p);

/* Copy n bytes host -> dst at byte off (within dst->size). Directly through
 * the mapping when dst is mapped, else through the staging buffer in chunks
 * (double-buffered). Blocks until the data is on the device and visible to
 * later submissions. prog (may be NULL) is advanced by n. dst must not be in
 * use by a pending command buffer. */
int em_vk_upload(em_vk *vk, const em_vk_buf *dst, VkDeviceSize off, const void *src,
                 size_t n, em_vk_progress *prog, em_err *err);

/* Copy n bytes src at byte off -> host. Writes by earlier submissions on the
 * queue that have completed (em_vk_cmd_wait) are included. */
int em_vk_download(em_vk *vk, const em_vk_buf *src, VkDeviceSize off, void *dst,
                   size_t n, em_vk_progress *prog, em_err *err);

/* ---- pipelines -------------------------------------------------------- */

/* One compute kernel: the rows of the generated table em_kernels[]
 * (shaders/em_kernels.h, from shaders/meson.build). All bindings are storage
 * buffers in set 0, bindings 0..n_bindings-1. */
typedef struct em_vk_kernel {
    const char     *name;
    const uint32_t *spv;
    size_t          spv_size;   /* bytes */
    uint32_t        n_bindings;
    uint32_t        push_size;  /* bytes of push constants; 0: none */
    uint32_t        n_spec;     /* specialization constant ids 0..n_spec-1 it declares */
    uint32_t        needs;      /* EM_VK_F_* its SPIR-V capabilities need */
    uint32_t        texel;      /* bit i: binding i is a uniform texel buffer of 16-byte
                                 * R32G32B32A32_UINT texels (usamplerBuffer); others are
                                 * storage buffers. Its range must be a multiple of 16
                                 * bytes, at most maxTexelBufferElements texels, at an
                                 * offset aligned to minTexelBufferOffsetAlignment. */
} em_vk_kernel;

/* Whether the features enabled on vk cover k->needs. */
bool em_vk_kernel_supported(const em_vk *vk, const em_vk_kernel *k);

/* Build a pipeline for k with specialization constants spec[0..n_spec)
 * (constant_id i = spec[i]; 32-bit values: uint, int or float bits; bool as
 * 0/1), n_spec <= k->n_spec. subgroup_size != 0 requires that subgroup size
 * (subgroup size control when available, with full subgroups when the device
 * has computeFullSubgroups; otherwise only if the device's size is fixed at
 * that value — else EM_EUNSUPPORTED); callers pass it for kernels whose
 * workgroup must be one subgroup of a known size. EM_EUNSUPPORTED too
 * when the device lacks a feature k needs (named in err). All pipelines share
 * one pipeline cache. *out is owned by vk (freed by em_vk_destroy, or
 * earlier by em_vk_pipe_destroy). */
int em_vk_pipe_create(em_vk *vk, const em_vk_kernel *k, const uint32_t *spec,
                      uint32_t n_spec, uint32_t subgroup_size, em_vk_pipe **out,
                      em_err *err);

/* Destroy one pipeline early: no command buffer that recorded it may be
 * pending or submitted again before re-recording. Descriptor sets made with
 * it stay valid. */
void em_vk_pipe_destroy(em_vk *vk, em_vk_pipe *p);

/* Create a descriptor set for pipe's layout binding ranges[0..n_bindings)
 * (ranges borrowed; only VkBuffer/off/size are kept). Each range must be
 * non-empty, <= maxStorageBufferRange and start at a multiple of
 * minStorageBufferOffsetAlignment: EM_ERANGE / EM_EINVAL naming the binding
 * otherwise (split big tensors into ranges). A set works with every pipeline
 * of the same binding count. Owned by vk (freed by em_vk_destroy). */
int em_vk_dset_create(em_vk *vk, const em_vk_pipe *pipe, const em_vk_buf *ranges,
                      em_vk_dset **out, em_err *err);

/* Rebind all ranges of d (same checks). Command buffers that recorded d must
 * not be pending, and must be re-recorded before their next submission. */
int em_vk_dset_update(em_vk *vk, em_vk_dset *d, const em_vk_buf *ranges, em_err *err);

void em_vk_dset_destroy(em_vk *vk, em_vk_dset *d);

/* ---- commands --------------------------------------------------------- */

/* A command buffer with its own fence and, when n_timestamps > 0 and the
 * queue supports them, a query pool of n_timestamps slots. *out is owned by
 * the caller (em_vk_cmd_destroy; em_vk_destroy frees any left). */
int  em_vk_cmd_create(em_vk *vk, uint32_t n_timestamps, em_vk_cmd **out, em_err *err);
void em_vk_cmd_destroy(em_vk_cmd *c);   /* waits if pending */

/* Start recording (discarding what was recorded). Records a barrier that
 * makes writes of earlier submissions visible to this one. EM_ESTATE if the
 * command buffer is pending. */
int  em_vk_cmd_begin(em_vk_cmd *c, em_err *err);

/* Recording calls. Errors (bad group counts, wrong state, unaligned fill)
 * are sticky: the first one is returned by em_vk_cmd_end. */

/* Dispatch pipe with descriptor set d (made for a pipeline with the same
 * binding count; NULL when the kernel has no bindings). push: pipe's
 * push_size bytes, copied now (values that change between replays belong in
 * a buffer). Group counts are checked against maxComputeWorkGroupCount;
 * a zero count records nothing. */
void em_vk_cmd_dispatch(em_vk_cmd *c, const em_vk_pipe *pipe, const em_vk_dset *d,
                        const void *push, uint32_t gx, uint32_t gy, uint32_t gz);

/* Compute/transfer writes before -> compute/transfer reads and writes after. */
void em_vk_cmd_barrier(em_vk_cmd *c);

/* Fill dst (offset and size multiples of 4) with the 32-bit word. */
void em_vk_cmd_fill(em_vk_cmd *c, const em_vk_buf *dst, uint32_t word);

/* Copy n bytes from src+src_off to dst+dst_off (inside both ranges). */
void em_vk_cmd_copy(em_vk_cmd *c, const em_vk_buf *src, VkDeviceSize src_off,
                    const em_vk_buf *dst, VkDeviceSize dst_off, VkDeviceSize n);

/* Write a timestamp into slot (< n_timestamps) after all earlier commands
 * finish. No-op when the cmd has no timestamps. */
void em_vk_cmd_timestamp(em_vk_cmd *c, uint32_t slot);

/* Finish recording; records a barrier making all writes visible to the host
 * after em_vk_cmd_wait. Returns the first recording error, if any. */
int  em_vk_cmd_end(em_vk_cmd *c, em_err *err);

/* Submit the recorded commands. Any number of times without re-recording
 * (one submission pending at a time). */
int  em_vk_cmd_submit(em_vk_cmd *c, em_err *err);

/* Block on the fence (vkWaitForFences; never spins) until the submission
 * finished. No-op when nothing is pending. EM_EDEVICE on device loss or
 * after wait_timeout_s (the submission then stays pending). */
int  em_vk_cmd_wait(em_vk_cmd *c, em_err *err);

int  em_vk_cmd_submit_wait(em_vk_cmd *c, em_err *err);

/* After a wait: ns[i] = nanoseconds of timestamp slot first+i on the
 * device's clock (subtract two to get a duration). EM_EUNSUPPORTED without
 * timestamps. */
int  em_vk_cmd_timestamps(em_vk_cmd *c, uint32_t first, uint32_t n, double *ns,
                          em_err *err);

/* Whether c records real timestamps. */
bool em_vk_cmd_has_timestamps(const em_vk_cmd *c);

/* Dispatches and barriers in the current recording (for bench). */
uint32_t em_vk_cmd_dispatches(const em_vk_cmd *c);
uint32_t em_vk_cmd_barriers(const em_vk_cmd *c);

#endif
