/* vk_int.h — private structures shared by core/vk/vk.c (instance, device),
 * core/vk/vk_mem.c (allocator, transfers) and core/vk/vk_pipe.c (pipelines,
 * descriptor sets, command buffers). Not for use outside core/vk*.c. */
#ifndef EM_VK_INT_H
#define EM_VK_INT_H

#include <pthread.h>
#include <stdatomic.h>

#include "core/vk/vk.h"

#define EM_VK_MIB (1024ull * 1024)
#define EM_VK_MAX_BINDINGS 32   /* storage buffers per kernel */

/* One VkDeviceMemory with one VkBuffer over all of it. Free space is a sorted
 * array of [off, off+size) ranges, coalesced on free. */
typedef struct em_vk_range {
    VkDeviceSize off, size;
} em_vk_range;

typedef struct em_vk_block {
    struct em_vk_block *next;
    em_vk_mem_kind      kind;
    VkDeviceMemory      mem;
    VkBuffer            buf;
    VkDeviceSize        size;
    VkDeviceSize        used;       /* bytes reserved by live suballocations */
    uint32_t            n_allocs;
    bool                dedicated;  /* one allocation, freed with it */
    void               *map;        /* mapped base, or NULL */
    em_vk_range        *free;       /* sorted by off */
    uint32_t            n_free, cap_free;
} em_vk_block;

/* A pipeline layout and its set layout, shared by every pipeline with the
 * same binding count, push size and texel mask. Set layouts of the same
 * binding count and mask are identically defined, so descriptor sets are
 * interchangeable between all those pipelines and outlive them. */
typedef struct em_vk_layout {
    struct em_vk_layout  *next;
    uint32_t              n_bindings;
    uint32_t              push_size;
    uint32_t              texel;      /* em_vk_kernel.texel of its kernels */
    VkDescriptorSetLayout dsl;        /* owned */
    VkPipelineLayout      pl;
} em_vk_layout;

struct em_vk_pipe {
    struct em_vk_pipe  *next, *prev;
    const em_vk_kernel *kernel;
    VkPipeline          pipeline;
    const em_vk_layout *layout;
};

struct em_vk_dset {
    struct em_vk_dset *next, *prev;
    VkDescriptorSet    set;
    VkDescriptorPool   pool;
    uint32_t           n_bindings;
    uint32_t           texel;                       /* texel-buffer bindings (mask) */
    VkBufferView       views[EM_VK_MAX_BINDINGS];   /* their views, owned */
};

typedef enum { EM_VK_CMD_INITIAL, EM_VK_CMD_RECORDING, EM_VK_CMD_EXECUTABLE,
               EM_VK_CMD_PENDING } em_vk_cmd_state;

struct em_vk_cmd {
    struct em_vk_cmd *next, *prev;
    em_vk            *vk;
    VkCommandPool     pool;
    VkCommandBuffer   cb;
    VkFence           fence;
    VkQueryPool       qpool;
    uint32_t          n_ts;
    em_vk_cmd_state   state;
    int               rec_err;          /* first recording error */
    char              rec_msg[256];
    VkPipeline        bound_pipe;
    VkPipelineLayout  bound_layout;
    VkDescriptorSet   bound_set;
    uint32_t          n_dispatch, n_barrier;
};

/* Deduplication of validation messages: ids seen so far. */
#define EM_VK_SEEN_MAX 512

struct em_vk {
    em_vk_opts         opts;
    em_vk_dev_info     info;
    VkInstance         instance;
    VkDebugUtilsMessengerEXT messenger;
    PFN_vkDestroyDebugUtilsMessengerEXT destroy_messenger;
    VkPhysicalDevice   phys;
    VkDevice           dev;
    VkQueue            queue;
    uint32_t           qfamily;
    VkPhysicalDeviceMemoryProperties memprops;
    atomic_bool        lost;           /* VK_ERROR_DEVICE_LOST seen */
    uint32_t           fault_at[3];    /* EMBER_VK_FAULT: per kind (em_vk_fault), the call of this
                                          device that fails (1-based); 0: none */
    atomic_uint        fault_n[3];     /* calls of each kind so far */
    bool               map_device;     /* DEVICE kind is mapped (unified, not as_gpu) */
    bool               validate;

    /* validation messenger state */
    atomic_uint        val_errors, val_warnings;
    pthread_mutex_t    val_lock;
    int32_t            seen[EM_VK_SEEN_MAX];
    uint32_t           n_seen;

    pthread_mutex_t    lock;           /* allocator, layouts, pools, object lists */
    pthread_mutex_t    qlock;          /* vkQueueSubmit */
    pthread_mutex_t    xfer_lock;      /* staging buffers (one transfer at a time) */

    /* memory */
    VkDeviceSize       block_size;
    VkDeviceSize       align;          /* suballocation alignment */
    int                memtype[EM_VK_MEM_KINDS]; /* chosen memory type per kind, -1 unknown */
    em_vk_block       *blocks[EM_VK_MEM_KINDS];
    em_vk_mem_stats    stats[EM_VK_MEM_KINDS];
    em_vk_buf          stage_up, stage_down;
    em_vk_cmd         *xfer[2];

    /* pipelines and descriptors */
    VkPipelineCache    cache;
    uint8_t            cache_uuid[VK_UUID_SIZE];
    size_t             cache_loaded;   /* bytes of cache_path accepted at create */
    em_vk_layout      *layouts;        /* list */
    VkDescriptorPool  *pools;
    uint32_t           n_pools, cap_pools;
    em_vk_pipe        *pipes;
    em_vk_dset        *dsets;
    em_vk_cmd         *cmds;
};

/* Map a VkResult to an EM_E* code and write "vulkan: <what>: <VK_...>" into
 * err; marks the device lost on VK_ERROR_DEVICE_LOST. vk may be NULL. */
int em_vk_fail(em_vk *vk, em_err *err, VkResult r, const char *what);

/* Name of a VkResult ("VK_ERROR_DEVICE_LOST"). Static. */
const char *em_vk_result_str(VkResult r);

/* EM_EDEVICE with a message when the device was lost earlier, else 0. */
int em_vk_check_lost(const em_vk *vk, em_err *err);

/* Fault injection for the tests of error paths: EMBER_VK_FAULT=alloc:N makes
 * the N-th device memory allocation fail with VK_ERROR_OUT_OF_DEVICE_MEMORY,
 * lost:N the N-th wait for a submission end with VK_ERROR_DEVICE_LOST (after
 * the work is done), on every device the process makes; kind:N@D only on
 * the D-th device it makes (from 1: a server's first rebuild makes its
 * second). Several, one per kind, separated by commas: "lost:40,alloc:1@2".
 * em_vk_fault counts a call of kind and returns true when that call is to
 * fail. */
enum { EM_VK_FAULT_ALLOC = 1, EM_VK_FAULT_LOST = 2 };
bool em_vk_fault(em_vk *vk, int kind);

/* vk_mem.c: free blocks and staging at destroy (device idle). */
void em_vk_mem_destroy_all(em_vk *vk);

/* vk_pipe.c: free pipelines, sets, pools, layouts, cmds, cache at destroy. */
void em_vk_pipe_destroy_all(em_vk *vk);
/* vk_pipe.c: create the pipeline cache (loaded from opts.cache_path). */
int  em_vk_pipe_init(em_vk *vk, em_err *err);

/* vk_probe.c: run one workgroup of the reported subgroup size and, when the
 * driver splits it into smaller subgroups, make info.subgroup_size the size
 * it runs (info.subgroup_reported keeps the driver's); EM_EUNSUPPORTED when
 * no power-of-two size holds up. Called once by em_vk_create. */
int  em_vk_probe_subgroup(em_vk *vk, em_err *err);

/* Monotonic clock in seconds. */
double em_vk_now(void);

#endif
