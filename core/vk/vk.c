/* vk.c — the Vulkan instance and device: enumeration of physical devices
 * with everything kernels choose variants by (features, subgroups, limits,
 * memory heaps), the default device choice, logical device creation with the
 * optional features the device has, and the validation layer with a
 * debug-utils messenger that counts what it reports. Memory lives in
 * core/vk/vk_mem.c, pipelines and commands in core/vk/vk_pipe.c. */
#include "core/vk/vk_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#define VALIDATION_LAYER "VK_LAYER_KHRONOS_validation"

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define EM_VK_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define EM_VK_ASAN 1
#endif

#ifdef EM_VK_ASAN
#include <dlfcn.h>
#include <link.h>

/* ASan builds only. The loader dlcloses the drivers and layers when the last
 * instance is destroyed; Mesa's one-time initialisation keeps heap memory in
 * its globals, which LeakSanitizer then reports as leaks from an
 * "<unknown module>" that no suppression can name (the module is gone). So
 * once loaded, drivers and layers stay: RTLD_NODELETE. */
static int pin_module(struct dl_phdr_info *mod, size_t size, void *arg)
{
    (void)size;
    (void)arg;
    const char *slash = mod->dlpi_name ? strrchr(mod->dlpi_name, '/') : NULL;
    const char *base = slash ? slash + 1 : "";
    if (!strncmp(base, "libvulkan_", 10) || !strncmp(base, "libVkLayer", 10))
        dlopen(mod->dlpi_name, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
    return 0;
}

static void pin_driver_modules(void)
{
    dl_iterate_phdr(pin_module, NULL);
}
#else
static void pin_driver_modules(void)
{
}
#endif

/* ---- small helpers ---------------------------------------------------- */

double em_vk_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

const char *em_vk_result_str(VkResult r)
{
    switch (r) {
#define R(x) case x: return #x;
    R(VK_SUCCESS) R(VK_NOT_READY) R(VK_TIMEOUT) R(VK_INCOMPLETE)
    R(VK_ERROR_OUT_OF_HOST_MEMORY) R(VK_ERROR_OUT_OF_DEVICE_MEMORY)
    R(VK_ERROR_INITIALIZATION_FAILED) R(VK_ERROR_DEVICE_LOST)
    R(VK_ERROR_MEMORY_MAP_FAILED) R(VK_ERROR_LAYER_NOT_PRESENT)
    R(VK_ERROR_EXTENSION_NOT_PRESENT) R(VK_ERROR_FEATURE_NOT_PRESENT)
    R(VK_ERROR_INCOMPATIBLE_DRIVER) R(VK_ERROR_TOO_MANY_OBJECTS)
    R(VK_ERROR_FORMAT_NOT_SUPPORTED) R(VK_ERROR_FRAGMENTED_POOL)
    R(VK_ERROR_OUT_OF_POOL_MEMORY) R(VK_ERROR_FRAGMENTATION)
    R(VK_ERROR_INVALID_SHADER_NV) R(VK_PIPELINE_COMPILE_REQUIRED)
    R(VK_ERROR_UNKNOWN)
#undef R
    default: return "VK_ERROR_(unknown)";
    }
}

int em_vk_fail(em_vk *vk, em_err *err, VkResult r, const char *what)
{
    int code;
    const char *hint = "";
    switch (r) {
    case VK_ERROR_OUT_OF_HOST_MEMORY:
        code = EM_ENOMEM; hint = " (out of host memory)"; break;
    case VK_ERROR_OUT_OF_DEVICE_MEMORY:
        code = EM_ENOMEM; hint = " (out of device memory)"; break;
    case VK_ERROR_FRAGMENTED_POOL: case VK_ERROR_OUT_OF_POOL_MEMORY:
    case VK_ERROR_TOO_MANY_OBJECTS: case VK_ERROR_FRAGMENTATION:
        code = EM_ENOMEM; break;
    case VK_ERROR_DEVICE_LOST:
        code = EM_EDEVICE; hint = " (the device was lost: driver reset, hang or fault)";
        if (vk)
            atomic_store(&vk->lost, true);
        break;
    case VK_ERROR_LAYER_NOT_PRESENT: case VK_ERROR_EXTENSION_NOT_PRESENT:
    case VK_ERROR_FEATURE_NOT_PRESENT:
        code = EM_EUNSUPPORTED; break;
    case VK_ERROR_INCOMPATIBLE_DRIVER:
        code = EM_EDEVICE; hint = " (no usable Vulkan driver: install the GPU's Vulkan "
                                  "driver, or mesa-vulkan-drivers for llvmpipe)"; break;
    default:
        code = EM_EDEVICE; break;
    }
    return em_err_set(err, code, "vulkan: %s: %s%s", what, em_vk_result_str(r), hint);
}

bool em_vk_fault(em_vk *vk, int kind)
{
    return vk->fault_at[kind] && atomic_fetch_add(&vk->fault_n[kind], 1) + 1 == vk->fault_at[kind];
}

static atomic_uint vk_made;   /* devices this process has begun to make (em_vk_create) */

/* EMBER_VK_FAULT: kind:N[@D] items, comma-separated (em_vk_fault) for the
 * device'th device made. */
static int fault_parse(em_vk *vk, const char *v, unsigned device, em_err *err)
{
    unsigned seen = 0;
    for (const char *p = v;;) {
        const char *colon = strchr(p, ':');
        size_t klen = colon ? (size_t)(colon - p) : 0;
        int kind = klen == 5 && !strncmp(p, "alloc", 5) ? EM_VK_FAULT_ALLOC
                 : klen == 4 && !strncmp(p, "lost", 4)  ? EM_VK_FAULT_LOST : 0;
        char *end = NULL;
        unsigned long n = kind && colon[1] >= '0' && colon[1] <= '9' ? strtoul(colon + 1, &end, 10) : 0, d = 0;
        if (end && *end == '@') {
            d = end[1] >= '1' && end[1] <= '9' ? strtoul(end + 1, &end, 10) : 0;
            if (!d)
                end = NULL;
        }
        if (!kind || !end || (*end && *end != ',') || n < 1 || n > 1000000000ul || d > 1000000ul ||
            (seen & (1u << kind)))
            return em_err_set(err, EM_EINVAL, "vulkan: EMBER_VK_FAULT=%s: expected alloc:N or lost:N "
                              "(N from 1), optionally @D (only the D-th device made, from 1), each kind "
                              "once, separated by commas", v);
        seen |= 1u << kind;
        if (!d || d == device)
            vk->fault_at[kind] = (uint32_t)n;
        if (!*end)
            return 0;
        p = end + 1;
    }
}

int em_vk_check_lost(const em_vk *vk, em_err *err)
{
    if (vk && atomic_load(&((em_vk *)vk)->lost))
        return em_err_set(err, EM_EDEVICE, "vulkan: the device was lost earlier "
                          "(VK_ERROR_DEVICE_LOST); restart to recover");
    return 0;
}

/* ---- features --------------------------------------------------------- */

static const struct {
    uint32_t    bit;
    const char *key;
    const char *name;
} feature_table[] = {
    { EM_VK_F_STORAGE16,  "storage16",   "storageBuffer16BitAccess" },
    { EM_VK_F_STORAGE8,   "storage8",    "storageBuffer8BitAccess" },
    { EM_VK_F_FLOAT16,    "float16",     "shaderFloat16" },
    { EM_VK_F_INT8,       "int8",        "shaderInt8" },
    { EM_VK_F_INT16,      "int16",       "shaderInt16" },
    { EM_VK_F_INT64,      "int64",       "shaderInt64" },
    { EM_VK_F_FLOAT64,    "float64",     "shaderFloat64" },
    { EM_VK_F_DOT,        "dot",         "shaderIntegerDotProduct" },
    { EM_VK_F_SG_BASIC,   "sg_basic",    "subgroup basic (compute)" },
    { EM_VK_F_SG_VOTE,    "sg_vote",     "subgroup vote (compute)" },
    { EM_VK_F_SG_ARITH,   "sg_arith",    "subgroup arithmetic (compute)" },
    { EM_VK_F_SG_BALLOT,  "sg_ballot",   "subgroup ballot (compute)" },
    { EM_VK_F_SG_SHUFFLE, "sg_shuffle",  "subgroup shuffle (compute)" },
    { EM_VK_F_SG_SHUFREL, "sg_shuffle_relative", "subgroup shuffle relative (compute)" },
    { EM_VK_F_SG_CLUSTER, "sg_clustered", "subgroup clustered (compute)" },
    { EM_VK_F_SG_QUAD,    "sg_quad",     "subgroup quad (compute)" },
    { EM_VK_F_SG_SIZE_CTL,"sg_size_control", "subgroupSizeControl" },
    { EM_VK_F_FULL_SG,    "full_subgroups", "computeFullSubgroups" },
    { EM_VK_F_TIMESTAMPS, "timestamps",  "timestamp queries (compute queue)" },
};

#define N_FEATURES (sizeof feature_table / sizeof feature_table[0])
_Static_assert(N_FEATURES == EM_VK_F_COUNT_, "feature_table covers every EM_VK_F_* bit");

const char *em_vk_feature_name(uint32_t bit)
{
    for (size_t i = 0; i < N_FEATURES; i++)
        if (feature_table[i].bit == bit)
            return feature_table[i].name;
    return "?";
}

const char *em_vk_feature_key(uint32_t bit)
{
    for (size_t i = 0; i < N_FEATURES; i++)
        if (feature_table[i].bit == bit)
            return feature_table[i].key;
    return "?";
}

void em_vk_feature_list(uint32_t mask, char *buf, size_t cap)
{
    size_t len = 0;
    if (cap)
        buf[0] = '\0';
    for (size_t i = 0; i < N_FEATURES && cap; i++) {
        if (!(mask & feature_table[i].bit))
            continue;
        int w = snprintf(buf + len, cap - len, "%s%s", len ? ", " : "", feature_table[i].name);
        if (w < 0 || (size_t)w >= cap - len)
            break;
        len += (size_t)w;
    }
}

int em_vk_feature_parse(const char *list, uint32_t *mask, em_err *err)
{
    *mask = 0;
    const char *p = list;
    while (p && *p) {
        size_t len = strcspn(p, ", ");
        if (len) {
            size_t i;
            for (i = 0; i < N_FEATURES; i++)
                if (strlen(feature_table[i].key) == len && !strncmp(feature_table[i].key, p, len))
                    break;
            if (i == N_FEATURES)
                return em_err_set(err, EM_EINVAL, "vulkan: unknown feature '%.*s' (known: "
                                  "storage16, storage8, float16, int8, int16, int64, float64, "
                                  "dot, sg_*, sg_size_control, full_subgroups, timestamps)",
                                  (int)len, p);
            *mask |= feature_table[i].bit;
        }
        p += len;
        p += strspn(p, ", ");
    }
    return 0;
}

/* ---- physical device queries ------------------------------------------ */

typedef struct dev_exts {
    bool s8, f16i8, ssc, dot, driver, portability;
} dev_exts;

/* Feature structs: the Vulkan 1.1/1.2/1.3 aggregates where the device has
 * that version, else the extension structs. The same chain serves the query
 * (vkGetPhysicalDeviceFeatures2) and the enable (vkCreateDevice). */
typedef struct feat_chain {
    VkPhysicalDeviceFeatures2                       f2;
    VkPhysicalDeviceVulkan11Features                v11;
    VkPhysicalDeviceVulkan12Features                v12;
    VkPhysicalDeviceVulkan13Features                v13;
    VkPhysicalDevice16BitStorageFeatures            s16;
    VkPhysicalDevice8BitStorageFeatures             s8;
    VkPhysicalDeviceShaderFloat16Int8Features       f16i8;
    VkPhysicalDeviceSubgroupSizeControlFeatures     ssc;
    VkPhysicalDeviceShaderIntegerDotProductFeatures dot;
} feat_chain;

static void chain_init(feat_chain *fc, uint32_t api, const dev_exts *x)
{
    memset(fc, 0, sizeof *fc);
    fc->f2.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2;
    void **next = &fc->f2.pNext;
#define LINK(s, st) do { (s).sType = (st); *next = &(s); next = &(s).pNext; } while (0)
    if (api >= VK_API_VERSION_1_2) {
        LINK(fc->v11, VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES);
        LINK(fc->v12, VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES);
    } else {
        LINK(fc->s16, VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES);
        if (x->s8)
            LINK(fc->s8, VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_8BIT_STORAGE_FEATURES);
        if (x->f16i8)
            LINK(fc->f16i8, VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES);
    }
    if (api >= VK_API_VERSION_1_3) {
        LINK(fc->v13, VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_3_FEATURES);
    } else {
        if (x->ssc)
            LINK(fc->ssc, VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_FEATURES);
        if (x->dot)
            LINK(fc->dot, VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_FEATURES);
    }
#undef LINK
}

/* Pointers to the VkBool32 of each feature bit in the chain (NULL: absent). */
typedef struct feat_ptrs {
    VkBool32 *s16, *s8, *f16, *i8, *i16, *i64, *f64, *dot, *ssc, *full;
} feat_ptrs;

static feat_ptrs chain_ptrs(feat_chain *fc, uint32_t api, const dev_exts *x)
{
    feat_ptrs p = { 0 };
    p.i16 = &fc->f2.features.shaderInt16;
    p.i64 = &fc->f2.features.shaderInt64;
    p.f64 = &fc->f2.features.shaderFloat64;
    if (api >= VK_API_VERSION_1_2) {
        p.s16 = &fc->v11.storageBuffer16BitAccess;
        p.s8 = &fc->v12.storageBuffer8BitAccess;
        p.f16 = &fc->v12.shaderFloat16;
        p.i8 = &fc->v12.shaderInt8;
    } else {
        p.s16 = &fc->s16.storageBuffer16BitAccess;
        if (x->s8)
            p.s8 = &fc->s8.storageBuffer8BitAccess;
        if (x->f16i8) {
            p.f16 = &fc->f16i8.shaderFloat16;
            p.i8 = &fc->f16i8.shaderInt8;
        }
    }
    if (api >= VK_API_VERSION_1_3) {
        p.dot = &fc->v13.shaderIntegerDotProduct;
        p.ssc = &fc->v13.subgroupSizeControl;
        p.full = &fc->v13.computeFullSubgroups;
    } else {
        if (x->dot)
            p.dot = &fc->dot.shaderIntegerDotProduct;
        if (x->ssc) {
            p.ssc = &fc->ssc.subgroupSizeControl;
            p.full = &fc->ssc.computeFullSubgroups;
        }
    }
    return p;
}

static const struct { uint32_t bit; size_t off; } feat_map[] = {
    { EM_VK_F_STORAGE16,  offsetof(feat_ptrs, s16) },
    { EM_VK_F_STORAGE8,   offsetof(feat_ptrs, s8) },
    { EM_VK_F_FLOAT16,    offsetof(feat_ptrs, f16) },
    { EM_VK_F_INT8,       offsetof(feat_ptrs, i8) },
    { EM_VK_F_INT16,      offsetof(feat_ptrs, i16) },
    { EM_VK_F_INT64,      offsetof(feat_ptrs, i64) },
    { EM_VK_F_FLOAT64,    offsetof(feat_ptrs, f64) },
    { EM_VK_F_DOT,        offsetof(feat_ptrs, dot) },
    { EM_VK_F_SG_SIZE_CTL,offsetof(feat_ptrs, ssc) },
    { EM_VK_F_FULL_SG,    offsetof(feat_ptrs, full) },
};

static VkBool32 *feat_ptr(feat_ptrs *p, size_t i)
{
    VkBool32 *v;
    memcpy(&v, (char *)p + feat_map[i].off, sizeof v);
    return v;
}

static const char *vendor_name(uint32_t id)
{
    switch (id) {
    case 0x1002: case 0x1022: return "AMD";
    case 0x10DE: return "NVIDIA";
    case 0x8086: return "Intel";
    case 0x13B5: return "ARM";
    case 0x5143: return "Qualcomm";
    case 0x1010: return "Imagination";
    case 0x106B: return "Apple";
    case 0x14E4: return "Broadcom";
    case 0x1AE0: return "Google";
    case 0x1414: return "Microsoft";
    case 0x1ED5: return "Moore Threads";
    case VK_VENDOR_ID_VIV: return "Vivante";
    case VK_VENDOR_ID_VSI: return "VeriSilicon";
    case VK_VENDOR_ID_KAZAN: return "Kazan";
    case VK_VENDOR_ID_CODEPLAY: return "Codeplay";
    case VK_VENDOR_ID_MESA: return "Mesa";
    case VK_VENDOR_ID_POCL: return "PoCL";
    default: return "unknown";
    }
}

static const char *type_name(VkPhysicalDeviceType t)
{
    switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU:   return "discrete";
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return "integrated";
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU:    return "virtual";
    case VK_PHYSICAL_DEVICE_TYPE_CPU:            return "cpu";
    default:                                     return "other";
    }
}

static int type_rank(VkPhysicalDeviceType t)
{
    switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU:   return 4;
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return 3;
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU:    return 2;
    case VK_PHYSICAL_DEVICE_TYPE_CPU:            return 1;
    default:                                     return 0;
    }
}

static void driver_version_str(char *buf, size_t cap, uint32_t vendor, uint32_t v)
{
    if (vendor == 0x10DE)        /* NVIDIA: 10.8.8.6 bits */
        snprintf(buf, cap, "%u.%u.%u.%u", v >> 22, (v >> 14) & 0xff, (v >> 6) & 0xff, v & 0x3f);
    else if (vendor == 0x8086 && v >= (1u << 22) * 100) /* Intel on Windows: 18.14 */
        snprintf(buf, cap, "%u.%u", v >> 14, v & 0x3fff);
    else                         /* Mesa, AMD and most: VK_MAKE_VERSION */
        snprintf(buf, cap, "%u.%u.%u", VK_API_VERSION_MAJOR(v), VK_API_VERSION_MINOR(v),
                 VK_API_VERSION_PATCH(v));
}

/* Index of the compute queue family ember uses: a compute-only family with
 * timestamps if there is one, else any compute family with timestamps, else
 * any compute family; -1 if none. */
static int pick_queue_family(VkPhysicalDevice pd, uint32_t *ts_bits)
{
    uint32_t n = 0;
    vkGetPhysicalDeviceQueueFamilyProperties(pd, &n, NULL);
    VkQueueFamilyProperties q[32];
    if (n > 32)
        n = 32;
    vkGetPhysicalDeviceQueueFamilyProperties(pd, &n, q);
    int best = -1, best_score = -1;
    for (uint32_t i = 0; i < n; i++) {
        if (!(q[i].queueFlags & VK_QUEUE_COMPUTE_BIT) || q[i].queueCount == 0)
            continue;
        int score = (q[i].timestampValidBits ? 2 : 0) +
                    !(q[i].queueFlags & VK_QUEUE_GRAPHICS_BIT);
        if (score > best_score) {
            best = (int)i;
            best_score = score;
            *ts_bits = q[i].timestampValidBits;
        }
    }
    return best;
}

static void scan_exts(VkPhysicalDevice pd, dev_exts *x)
{
    memset(x, 0, sizeof *x);
    uint32_t n = 0;
    if (vkEnumerateDeviceExtensionProperties(pd, NULL, &n, NULL) != VK_SUCCESS || !n)
        return;
    VkExtensionProperties *e = calloc(n, sizeof *e);
    if (!e)
        return;
    if (vkEnumerateDeviceExtensionProperties(pd, NULL, &n, e) == VK_SUCCESS) {
        for (uint32_t i = 0; i < n; i++) {
            const char *s = e[i].extensionName;
            x->s8 |= !strcmp(s, VK_KHR_8BIT_STORAGE_EXTENSION_NAME);
            x->f16i8 |= !strcmp(s, VK_KHR_SHADER_FLOAT16_INT8_EXTENSION_NAME);
            x->ssc |= !strcmp(s, VK_EXT_SUBGROUP_SIZE_CONTROL_EXTENSION_NAME);
            x->dot |= !strcmp(s, VK_KHR_SHADER_INTEGER_DOT_PRODUCT_EXTENSION_NAME);
            x->driver |= !strcmp(s, VK_KHR_DRIVER_PROPERTIES_EXTENSION_NAME);
            x->portability |= !strcmp(s, "VK_KHR_portability_subset");
        }
    }
    free(e);
}

/* Fill info for one physical device; inst_api is the instance's version. */
static void query_device(VkPhysicalDevice pd, uint32_t inst_api, int index,
                         em_vk_dev_info *info, dev_exts *x, int *qfamily)
{
    memset(info, 0, sizeof *info);
    info->index = index;
    scan_exts(pd, x);

    VkPhysicalDeviceProperties base;
    vkGetPhysicalDeviceProperties(pd, &base);
    uint32_t api = base.apiVersion < inst_api ? base.apiVersion : inst_api;
    info->api_version = base.apiVersion;
    info->api_used = api;

    VkPhysicalDeviceProperties2 p2 = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2 };
    VkPhysicalDeviceSubgroupProperties sg = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES };
    VkPhysicalDeviceMaintenance3Properties m3 = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES };
    VkPhysicalDeviceDriverProperties drv = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES };
    VkPhysicalDeviceSubgroupSizeControlProperties ssp = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_PROPERTIES };
    VkPhysicalDeviceShaderIntegerDotProductProperties dotp = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_PROPERTIES };
    bool has_drv = api >= VK_API_VERSION_1_2 || x->driver;
    bool has_ssc = api >= VK_API_VERSION_1_3 || x->ssc;
    bool has_dot = api >= VK_API_VERSION_1_3 || x->dot;
    if (api >= VK_API_VERSION_1_1) {
        void **next = &p2.pNext;
        *next = &sg; next = &sg.pNext;
        *next = &m3; next = &m3.pNext;
        if (has_drv) { *next = &drv; next = &drv.pNext; }
        if (has_ssc) { *next = &ssp; next = &ssp.pNext; }
        if (has_dot) { *next = &dotp; next = &dotp.pNext; }
        vkGetPhysicalDeviceProperties2(pd, &p2);
    } else {
        p2.properties = base;
    }
    const VkPhysicalDeviceProperties *p = &p2.properties;
    const VkPhysicalDeviceLimits *l = &p->limits;

    snprintf(info->name, sizeof info->name, "%s", p->deviceName);
    info->vendor_id = p->vendorID;
    info->device_id = p->deviceID;
    info->vendor = vendor_name(p->vendorID);
    if (has_drv) {
        snprintf(info->driver_name, sizeof info->driver_name, "%s", drv.driverName);
        snprintf(info->driver_info, sizeof info->driver_info, "%s", drv.driverInfo);
    }
    info->driver_version = p->driverVersion;
    driver_version_str(info->driver_version_str, sizeof info->driver_version_str,
                       p->vendorID, p->driverVersion);
    info->type = p->deviceType;
    info->type_name = type_name(p->deviceType);

    info->max_storage_range = l->maxStorageBufferRange;
    info->max_alloc = m3.maxMemoryAllocationSize ? m3.maxMemoryAllocationSize : (1ull << 30);
    info->storage_align = l->minStorageBufferOffsetAlignment;
    info->max_texel_elems = l->maxTexelBufferElements;
    info->texel_align = l->minTexelBufferOffsetAlignment;
    /* EMBER_VK_MAX_BINDING=BYTES: a smaller binding than the device's, so that
     * what is bound in parts on large models is bound in parts on small ones
     * too (tests) */
    const char *mb = getenv("EMBER_VK_MAX_BINDING");
    unsigned long long lim = mb && *mb ? strtoull(mb, NULL, 10) : 0;
    if (lim >= 4096) {
        lim &= ~15ull;
        if (info->max_storage_range > lim)
            info->max_storage_range = lim;
        if (info->max_texel_elems > lim / 16)
            info->max_texel_elems = lim / 16;
    }
    info->max_wg_invocations = l->maxComputeWorkGroupInvocations;
    for (int i = 0; i < 3; i++) {
        info->max_wg_size[i] = l->maxComputeWorkGroupSize[i];
        info->max_wg_count[i] = l->maxComputeWorkGroupCount[i];
    }
    info->max_shared = l->maxComputeSharedMemorySize;
    info->max_push = l->maxPushConstantsSize;
    info->max_storage_buffers = l->maxPerStageDescriptorStorageBuffers;
    info->timestamp_period = l->timestampPeriod;

    /* memory heaps */
    VkPhysicalDeviceMemoryProperties mp;
    vkGetPhysicalDeviceMemoryProperties(pd, &mp);
    info->n_heaps = mp.memoryHeapCount < EM_VK_MAX_HEAPS ? mp.memoryHeapCount : EM_VK_MAX_HEAPS;
    int main_heap = -1;
    for (uint32_t h = 0; h < info->n_heaps; h++) {
        info->heaps[h].size = mp.memoryHeaps[h].size;
        info->heaps[h].device_local = mp.memoryHeaps[h].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT;
        if (info->heaps[h].device_local && mp.memoryHeaps[h].size > info->device_local_bytes) {
            info->device_local_bytes = mp.memoryHeaps[h].size;
            main_heap = (int)h;
        }
    }
    const VkMemoryPropertyFlags dlhv = VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT |
        VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
    bool main_mappable = false;
    for (uint32_t t = 0; t < mp.memoryTypeCount; t++) {
        uint32_t h = mp.memoryTypes[t].heapIndex;
        if (h < info->n_heaps && (mp.memoryTypes[t].propertyFlags & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT))
            info->heaps[h].host_visible = true;
        if ((int)h == main_heap && (mp.memoryTypes[t].propertyFlags & dlhv) == dlhv)
            main_mappable = true;
    }
    info->unified = main_mappable && (p->deviceType == VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU ||
                                      p->deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU);
    info->cpu_kernels = p->deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU;

    /* features */
    uint32_t f = 0;
    if (api >= VK_API_VERSION_1_1) {
        feat_chain fc;
        chain_init(&fc, api, x);
        vkGetPhysicalDeviceFeatures2(pd, &fc.f2);
        feat_ptrs fp = chain_ptrs(&fc, api, x);
        for (size_t i = 0; i < sizeof feat_map / sizeof feat_map[0]; i++) {
            VkBool32 *v = feat_ptr(&fp, i);
            if (v && *v)
                f |= feat_map[i].bit;
        }
        if (sg.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT) {
            static const struct { VkSubgroupFeatureFlagBits vk; uint32_t em; } sgm[] = {
                { VK_SUBGROUP_FEATURE_BASIC_BIT, EM_VK_F_SG_BASIC },
                { VK_SUBGROUP_FEATURE_VOTE_BIT, EM_VK_F_SG_VOTE },
                { VK_SUBGROUP_FEATURE_ARITHMETIC_BIT, EM_VK_F_SG_ARITH },
                { VK_SUBGROUP_FEATURE_BALLOT_BIT, EM_VK_F_SG_BALLOT },
                { VK_SUBGROUP_FEATURE_SHUFFLE_BIT, EM_VK_F_SG_SHUFFLE },
                { VK_SUBGROUP_FEATURE_SHUFFLE_RELATIVE_BIT, EM_VK_F_SG_SHUFREL },
                { VK_SUBGROUP_FEATURE_CLUSTERED_BIT, EM_VK_F_SG_CLUSTER },
                { VK_SUBGROUP_FEATURE_QUAD_BIT, EM_VK_F_SG_QUAD },
            };
            for (size_t i = 0; i < sizeof sgm / sizeof sgm[0]; i++)
                if (sg.supportedOperations & sgm[i].vk)
                    f |= sgm[i].em;
        }
        /* size control only counts when it applies to compute shaders */
        if ((f & EM_VK_F_SG_SIZE_CTL) && !(ssp.requiredSubgroupSizeStages & VK_SHADER_STAGE_COMPUTE_BIT))
            f &= ~(uint32_t)(EM_VK_F_SG_SIZE_CTL | EM_VK_F_FULL_SG);
    }
    info->subgroup_size = sg.subgroupSize;
    info->subgroup_min = info->subgroup_max = sg.subgroupSize;
    if (f & EM_VK_F_SG_SIZE_CTL) {
        info->subgroup_min = ssp.minSubgroupSize;
        info->subgroup_max = ssp.maxSubgroupSize;
    }
    info->dot_accel = (f & EM_VK_F_DOT) && dotp.integerDotProduct4x8BitPackedSignedAccelerated;

    uint32_t ts_bits = 0;
    *qfamily = pick_queue_family(pd, &ts_bits);
    info->timestamp_bits = ts_bits;
    if (ts_bits && l->timestampPeriod > 0)
        f |= EM_VK_F_TIMESTAMPS;
    info->features = f;

    /* usable? */
    info->missing = EM_VK_F_REQUIRED & ~f;
    if (api < VK_API_VERSION_1_1) {
        snprintf(info->unusable, sizeof info->unusable, "Vulkan 1.1 required (device has %u.%u)",
                 VK_API_VERSION_MAJOR(base.apiVersion), VK_API_VERSION_MINOR(base.apiVersion));
    } else if (*qfamily < 0) {
        snprintf(info->unusable, sizeof info->unusable, "no compute queue");
    } else if (info->missing) {
        char list[200];
        em_vk_feature_list(info->missing, list, sizeof list);
        snprintf(info->unusable, sizeof info->unusable, "missing required features: %s", list);
    }
}

/* ---- instance --------------------------------------------------------- */

static bool layer_present(const char *name)
{
    uint32_t n = 0;
    bool found = false;
    if (vkEnumerateInstanceLayerProperties(&n, NULL) != VK_SUCCESS || !n)
        return false;
    VkLayerProperties *l = calloc(n, sizeof *l);
    if (!l)
        return false;
    if (vkEnumerateInstanceLayerProperties(&n, l) == VK_SUCCESS)
        for (uint32_t i = 0; i < n && !found; i++)
            found = !strcmp(l[i].layerName, name);
    free(l);
    return found;
}

static bool instance_ext_present(const char *layer, const char *name)
{
    uint32_t n = 0;
    bool found = false;
    if (vkEnumerateInstanceExtensionProperties(layer, &n, NULL) != VK_SUCCESS || !n)
        return false;
    VkExtensionProperties *e = calloc(n, sizeof *e);
    if (!e)
        return false;
    if (vkEnumerateInstanceExtensionProperties(layer, &n, e) == VK_SUCCESS)
        for (uint32_t i = 0; i < n && !found; i++)
            found = !strcmp(e[i].extensionName, name);
    free(e);
    return found;
}

bool em_vk_validation_available(void)
{
    return layer_present(VALIDATION_LAYER);
}

static uint32_t msg_key(const VkDebugUtilsMessengerCallbackDataEXT *d)
{
    if (d->messageIdNumber)
        return (uint32_t)d->messageIdNumber;
    uint32_t h = 2166136261u;   /* FNV-1a of the text when there is no id */
    for (const char *s = d->pMessage ? d->pMessage : ""; *s; s++)
        h = (h ^ (uint8_t)*s) * 16777619u;
    return h;
}

static VKAPI_ATTR VkBool32 VKAPI_CALL on_message(VkDebugUtilsMessageSeverityFlagBitsEXT sev,
                                                 VkDebugUtilsMessageTypeFlagsEXT type,
                                                 const VkDebugUtilsMessengerCallbackDataEXT *d,
                                                 void *user)
{
    (void)type;
    em_vk *vk = user;
    bool is_err = sev & VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT;
    if (is_err)
        atomic_fetch_add(&vk->val_errors, 1);
    else
        atomic_fetch_add(&vk->val_warnings, 1);
    uint32_t key = msg_key(d);
    bool print = true;
    pthread_mutex_lock(&vk->val_lock);
    for (uint32_t i = 0; i < vk->n_seen && print; i++)
        if ((uint32_t)vk->seen[i] == key)
            print = false;
    if (print && vk->n_seen < EM_VK_SEEN_MAX)
        vk->seen[vk->n_seen++] = (int32_t)key;
    if (print)
        fprintf(stderr, "ember: vulkan validation %s: %s\n", is_err ? "error" : "warning",
                d->pMessage ? d->pMessage : "(no message)");
    pthread_mutex_unlock(&vk->val_lock);
    return VK_FALSE;
}

static VkDebugUtilsMessengerCreateInfoEXT messenger_info(em_vk *vk)
{
    VkDebugUtilsMessengerCreateInfoEXT ci = {
        .sType = VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT,
        .messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT |
                           VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT,
        .messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT |
                       VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT |
                       VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT,
        .pfnUserCallback = on_message,
        .pUserData = vk,
    };
    return ci;
}

/* Create the instance. With vk non-NULL and vk->validate set, enables the
 * validation layer (and sync validation when opts.validate == 2) and the
 * messenger. *api receives the instance API version. */
static int instance_create(em_vk *vk, VkInstance *out, uint32_t *api, em_err *err)
{
    int rc = 0;
    uint32_t loader = VK_API_VERSION_1_0;
    const char *layers[1];
    const char *exts[2];
    uint32_t n_layers = 0, n_exts = 0;
    bool validate = vk && vk->validate;
    bool sync = validate && vk->opts.validate == 2;
    VkDebugUtilsMessengerCreateInfoEXT dbg;
    VkValidationFeatureEnableEXT vf_enable = VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT;
    VkValidationFeaturesEXT vf = { .sType = VK_STRUCTURE_TYPE_VALIDATION_FEATURES_EXT,
                                   .enabledValidationFeatureCount = 1,
                                   .pEnabledValidationFeatures = &vf_enable };

    *out = VK_NULL_HANDLE;
    if (vkEnumerateInstanceVersion(&loader) != VK_SUCCESS || loader < VK_API_VERSION_1_1) {
        rc = em_err_set(err, EM_ENODEV, "vulkan: no Vulkan device: the Vulkan loader is "
                        "version %u.%u; ember needs 1.1 or later", VK_API_VERSION_MAJOR(loader),
                        VK_API_VERSION_MINOR(loader));
        goto done;
    }
    *api = loader < VK_API_VERSION_1_3 ? loader : VK_API_VERSION_1_3;

    VkApplicationInfo app = {
        .sType = VK_STRUCTURE_TYPE_APPLICATION_INFO,
        .pApplicationName = "ember",
        .applicationVersion = VK_MAKE_API_VERSION(0, 0, 1, 0),
        .pEngineName = "ember",
        .engineVersion = VK_MAKE_API_VERSION(0, 0, 1, 0),
        .apiVersion = *api,
    };
    VkInstanceCreateInfo ci = {
        .sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO,
        .pApplicationInfo = &app,
    };
    if (validate) {
        if (!layer_present(VALIDATION_LAYER)) {
            rc = em_err_set(err, EM_EUNSUPPORTED, "vulkan: validation was asked for "
                            "(EMBER_VK_VALIDATE) but the layer %s is not installed "
                            "(Debian: apt install vulkan-validationlayers)", VALIDATION_LAYER);
            goto done;
        }
        layers[n_layers++] = VALIDATION_LAYER;
        if (!instance_ext_present(NULL, VK_EXT_DEBUG_UTILS_EXTENSION_NAME) &&
            !instance_ext_present(VALIDATION_LAYER, VK_EXT_DEBUG_UTILS_EXTENSION_NAME)) {
            rc = em_err_set(err, EM_EUNSUPPORTED, "vulkan: validation: %s is not available, "
                            "so validation messages cannot be counted",
                            VK_EXT_DEBUG_UTILS_EXTENSION_NAME);
            goto done;
        }
        exts[n_exts++] = VK_EXT_DEBUG_UTILS_EXTENSION_NAME;
        dbg = messenger_info(vk);
        ci.pNext = &dbg;
        if (sync && instance_ext_present(VALIDATION_LAYER, VK_EXT_VALIDATION_FEATURES_EXTENSION_NAME)) {
            exts[n_exts++] = VK_EXT_VALIDATION_FEATURES_EXTENSION_NAME;
            vf.pNext = &dbg;
            ci.pNext = &vf;
        }
    }
    ci.enabledLayerCount = n_layers;
    ci.ppEnabledLayerNames = layers;
    ci.enabledExtensionCount = n_exts;
    ci.ppEnabledExtensionNames = exts;

    VkResult r = vkCreateInstance(&ci, NULL, out);
    if (r != VK_SUCCESS) {
        *out = VK_NULL_HANDLE;
        if (r == VK_ERROR_INCOMPATIBLE_DRIVER) {
            rc = em_err_set(err, EM_ENODEV, "vulkan: no Vulkan device: no usable Vulkan driver "
                            "(install the GPU's Vulkan driver, or mesa-vulkan-drivers for "
                            "llvmpipe)");
            goto done;
        }
        rc = em_vk_fail(NULL, err, r, "cannot create an instance");
        if (rc == EM_EUNSUPPORTED)
            rc = EM_EDEVICE;
        goto done;
    }
    if (validate) {
        PFN_vkCreateDebugUtilsMessengerEXT create = (PFN_vkCreateDebugUtilsMessengerEXT)
            vkGetInstanceProcAddr(*out, "vkCreateDebugUtilsMessengerEXT");
        vk->destroy_messenger = (PFN_vkDestroyDebugUtilsMessengerEXT)
            vkGetInstanceProcAddr(*out, "vkDestroyDebugUtilsMessengerEXT");
        if (!create || !vk->destroy_messenger ||
            (r = create(*out, &dbg, NULL, &vk->messenger)) != VK_SUCCESS) {
            rc = em_vk_fail(NULL, err, create ? r : VK_ERROR_EXTENSION_NOT_PRESENT,
                            "validation: cannot create the debug messenger");
            vkDestroyInstance(*out, NULL);
            *out = VK_NULL_HANDLE;
            goto done;
        }
    }
done:
    return rc;
}

/* Query every physical device of inst. *devs, *phys and *qfam are malloc'd. */
static int devices_query(VkInstance inst, uint32_t api, em_vk_dev_info **devs,
                         VkPhysicalDevice **phys, int **qfam, dev_exts **exts, int *n,
                         em_err *err)
{
    int rc = 0;
    uint32_t count = 0;
    *devs = NULL;
    *phys = NULL;
    *qfam = NULL;
    *exts = NULL;
    *n = 0;
    VkResult r = vkEnumeratePhysicalDevices(inst, &count, NULL);
    if (r != VK_SUCCESS) {
        rc = em_vk_fail(NULL, err, r, "cannot list devices");
        goto done;
    }
    if (count == 0) {
        rc = em_err_set(err, EM_ENODEV, "vulkan: no Vulkan device found (no driver for this "
                        "GPU? Debian: mesa-vulkan-drivers provides llvmpipe)");
        goto done;
    }
    *phys = calloc(count, sizeof **phys);
    *devs = calloc(count, sizeof **devs);
    *qfam = calloc(count, sizeof **qfam);
    *exts = calloc(count, sizeof **exts);
    if (!*phys || !*devs || !*qfam || !*exts) {
        rc = em_err_set(err, EM_ENOMEM, "vulkan: out of memory listing devices");
        goto done;
    }
    r = vkEnumeratePhysicalDevices(inst, &count, *phys);
    if (r != VK_SUCCESS && r != VK_INCOMPLETE) {
        rc = em_vk_fail(NULL, err, r, "cannot list devices");
        goto done;
    }
    for (uint32_t i = 0; i < count; i++)
        query_device((*phys)[i], api, (int)i, &(*devs)[i], &(*exts)[i], &(*qfam)[i]);
    *n = (int)count;
    pin_driver_modules();
done:
    if (rc) {
        free(*phys);
        free(*devs);
        free(*qfam);
        free(*exts);
        *phys = NULL;
        *devs = NULL;
        *qfam = NULL;
        *exts = NULL;
    }
    return rc;
}

/* The device to use: index >= 0 as given, else EMBER_DEVICE, else the best
 * usable one that has `require`. -1 with err when none. */
static int choose_device(const em_vk_dev_info *devs, int n, int index, uint32_t require,
                         em_err *err)
{
    const char *env = getenv("EMBER_DEVICE");
    if (index < 0 && env && *env) {
        char *end;
        errno = 0;
        long v = strtol(env, &end, 10);
        if (*end || errno || v < 0 || v >= n) {
            em_err_set(err, EM_EINVAL, "vulkan: EMBER_DEVICE=%s: no such device (%d device%s: "
                       "0..%d; see ember devices)", env, n, n == 1 ? "" : "s", n - 1);
            return -1;
        }
        index = (int)v;
    }
    if (index >= 0) {
        if (index >= n) {
            em_err_set(err, EM_EINVAL, "vulkan: device %d: no such device (%d device%s: 0..%d; "
                       "see ember devices)", index, n, n == 1 ? "" : "s", n - 1);
            return -1;
        }
        return index;
    }
    int best = -1;
    for (int i = 0; i < n; i++) {
        if (devs[i].unusable[0] || (devs[i].features & require) != require)
            continue;
        if (best < 0 || type_rank(devs[i].type) > type_rank(devs[best].type) ||
            (type_rank(devs[i].type) == type_rank(devs[best].type) &&
             devs[i].device_local_bytes > devs[best].device_local_bytes))
            best = i;
    }
    if (best < 0) {
        char why[400] = "";
        size_t len = 0;
        for (int i = 0; i < n && len < sizeof why; i++) {
            int w = snprintf(why + len, sizeof why - len, "%s%d %s: %s", i ? "; " : "", i,
                             devs[i].name, devs[i].unusable[0] ? devs[i].unusable
                                                               : "lacks requested features");
            if (w < 0)
                break;
            len += (size_t)w;
        }
        /* no device ember can use at all: as good as none; usable devices
         * that lack what the caller requires: not supported */
        int any = 0;
        for (int i = 0; i < n; i++)
            any |= !devs[i].unusable[0];
        em_err_set(err, any ? EM_EUNSUPPORTED : EM_ENODEV, "vulkan: no usable Vulkan device (%s)",
                   why);
    }
    return best;
}

static int env_flag(const char *name);

int em_vk_enumerate(em_vk_dev_info **devs, int *n, int *pick, em_err *err)
{
    int rc;
    VkInstance inst = VK_NULL_HANDLE;
    uint32_t api = 0;
    VkPhysicalDevice *phys = NULL;
    int *qfam = NULL;
    dev_exts *exts = NULL;
    *devs = NULL;
    *n = 0;
    *pick = -1;
    rc = instance_create(NULL, &inst, &api, err);
    if (rc)
        goto done;
    rc = devices_query(inst, api, devs, &phys, &qfam, &exts, n, err);
    if (rc)
        goto done;
    if (env_flag("EMBER_VK_AS_GPU"))   /* as em_vk_create will treat them */
        for (int i = 0; i < *n; i++)
            (*devs)[i].cpu_kernels = false;
    em_err scratch = { 0 };
    *pick = choose_device(*devs, *n, -1, 0, &scratch);
    if (*pick < 0 && scratch.code == EM_EINVAL) {
        rc = em_err_set(err, EM_EINVAL, "%s", scratch.msg);
        free(*devs);
        *devs = NULL;
        *n = 0;
    }
done:
    free(phys);
    free(qfam);
    free(exts);
    if (inst)
        vkDestroyInstance(inst, NULL);
    return rc;
}

/* ---- device ----------------------------------------------------------- */

static int device_create(em_vk *vk, VkPhysicalDevice pd, int qfam, const dev_exts *x,
                         em_err *err)
{
    int rc = 0;
    em_vk_dev_info *info = &vk->info;
    uint32_t api = info->api_used;
    uint32_t want = info->features & ~vk->opts.disable;
    want |= info->features & EM_VK_F_REQUIRED;   /* required ones cannot be disabled */

    feat_chain fc;
    chain_init(&fc, api, x);
    feat_ptrs fp = chain_ptrs(&fc, api, x);
    for (size_t i = 0; i < sizeof feat_map / sizeof feat_map[0]; i++) {
        VkBool32 *v = feat_ptr(&fp, i);
        if (v && (want & feat_map[i].bit))
            *v = VK_TRUE;
    }
    if ((want & EM_VK_F_FULL_SG) && !(want & EM_VK_F_SG_SIZE_CTL) && fp.full)
        *fp.full = VK_FALSE, want &= ~(uint32_t)EM_VK_F_FULL_SG;

    const char *exts[8];
    uint32_t n_exts = 0;
    if (api < VK_API_VERSION_1_2) {
        if (x->s8 && (want & EM_VK_F_STORAGE8))
            exts[n_exts++] = VK_KHR_8BIT_STORAGE_EXTENSION_NAME;
        if (x->f16i8 && (want & (EM_VK_F_FLOAT16 | EM_VK_F_INT8)))
            exts[n_exts++] = VK_KHR_SHADER_FLOAT16_INT8_EXTENSION_NAME;
    }
    if (api < VK_API_VERSION_1_3) {
        if (x->ssc && (want & EM_VK_F_SG_SIZE_CTL))
            exts[n_exts++] = VK_EXT_SUBGROUP_SIZE_CONTROL_EXTENSION_NAME;
        if (x->dot && (want & EM_VK_F_DOT))
            exts[n_exts++] = VK_KHR_SHADER_INTEGER_DOT_PRODUCT_EXTENSION_NAME;
    }
    if (x->portability)
        exts[n_exts++] = "VK_KHR_portability_subset";

    float prio = 1.0f;
    VkDeviceQueueCreateInfo qci = {
        .sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO,
        .queueFamilyIndex = (uint32_t)qfam,
        .queueCount = 1,
        .pQueuePriorities = &prio,
    };
    VkDeviceCreateInfo dci = {
        .sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO,
        .pNext = &fc.f2,
        .queueCreateInfoCount = 1,
        .pQueueCreateInfos = &qci,
        .enabledExtensionCount = n_exts,
        .ppEnabledExtensionNames = exts,
    };
    VkResult r = vkCreateDevice(pd, &dci, NULL, &vk->dev);
    if (r != VK_SUCCESS) {
        vk->dev = VK_NULL_HANDLE;
        rc = em_vk_fail(vk, err, r, "cannot create the logical device");
        goto done;
    }
    vkGetDeviceQueue(vk->dev, (uint32_t)qfam, 0, &vk->queue);
    vk->qfamily = (uint32_t)qfam;
    info->enabled = want;
done:
    return rc;
}

static int env_flag(const char *name)
{
    const char *v = getenv(name);
    if (!v || !*v || !strcmp(v, "0") || !strcasecmp(v, "no") || !strcasecmp(v, "off") ||
        !strcasecmp(v, "false"))
        return 0;
    if (!strcasecmp(v, "sync") || !strcmp(v, "2"))
        return 2;
    return 1;
}

int em_vk_create(const em_vk_opts *opts, em_vk **out, em_err *err)
{
    int rc = 0;
    em_vk_dev_info *devs = NULL;
    VkPhysicalDevice *phys = NULL;
    int *qfam = NULL;
    dev_exts *exts = NULL;
    int n = 0;
    uint32_t api = 0;
    em_vk_opts def = EM_VK_OPTS_INIT;
    bool locks = false;

    *out = NULL;
    em_vk *vk = calloc(1, sizeof *vk);
    if (!vk) {
        rc = em_err_set(err, EM_ENOMEM, "vulkan: out of memory");
        goto done;
    }
    vk->opts = opts ? *opts : def;
    if (vk->opts.cpu_threads >= 0 && !getenv("LP_NUM_THREADS")) {
        /* read by llvmpipe when its screen is created (at enumeration) */
        char nt[16];
        snprintf(nt, sizeof nt, "%d", vk->opts.cpu_threads);
        setenv("LP_NUM_THREADS", nt, 0);
    }
    if (pthread_mutex_init(&vk->lock, NULL) || pthread_mutex_init(&vk->qlock, NULL) ||
        pthread_mutex_init(&vk->xfer_lock, NULL) || pthread_mutex_init(&vk->val_lock, NULL)) {
        rc = em_err_set(err, EM_ENOMEM, "vulkan: cannot create mutexes");
        goto done;
    }
    locks = true;
    atomic_init(&vk->val_errors, 0);
    atomic_init(&vk->val_warnings, 0);
    atomic_init(&vk->lost, false);
    for (int k = 0; k < EM_VK_MEM_KINDS; k++)
        vk->memtype[k] = -1;

    if (vk->opts.validate == 0)
        vk->opts.validate = env_flag("EMBER_VK_VALIDATE");
    vk->validate = vk->opts.validate > 0;
    if (!vk->opts.as_gpu)
        vk->opts.as_gpu = env_flag("EMBER_VK_AS_GPU");
    const char *fault = getenv("EMBER_VK_FAULT");
    unsigned device = atomic_fetch_add(&vk_made, 1) + 1;
    for (int k = 0; k < 3; k++)
        atomic_init(&vk->fault_n[k], 0);
    if (fault && *fault && (rc = fault_parse(vk, fault, device, err)))
        goto done;
    const char *dis = getenv("EMBER_VK_DISABLE");
    if (dis && *dis) {
        uint32_t mask;
        em_err perr = { 0 };
        rc = em_vk_feature_parse(dis, &mask, &perr);
        if (rc) {
            em_err_set(err, rc, "vulkan: EMBER_VK_DISABLE=%s: %s", dis,
                       perr.msg + strlen("vulkan: "));
            goto done;
        }
        vk->opts.disable |= mask;
    }

    rc = instance_create(vk, &vk->instance, &api, err);
    if (rc)
        goto done;
    rc = devices_query(vk->instance, api, &devs, &phys, &qfam, &exts, &n, err);
    if (rc)
        goto done;
    int pick = choose_device(devs, n, vk->opts.device, vk->opts.require, err);
    if (pick < 0) {
        rc = err ? err->code : EM_EDEVICE;
        goto done;
    }
    vk->info = devs[pick];
    vk->phys = phys[pick];
    if (vk->info.unusable[0]) {
        rc = em_err_set(err, EM_EUNSUPPORTED, "vulkan: device %d (%s): %s", pick,
                        vk->info.name, vk->info.unusable);
        goto done;
    }
    uint32_t lacking = vk->opts.require & ~vk->info.features;
    if (lacking) {
        char list[200];
        em_vk_feature_list(lacking, list, sizeof list);
        rc = em_err_set(err, EM_EUNSUPPORTED, "vulkan: device %d (%s): missing required "
                        "features: %s", pick, vk->info.name, list);
        goto done;
    }
    rc = device_create(vk, vk->phys, qfam[pick], &exts[pick], err);
    if (rc)
        goto done;
    vkGetPhysicalDeviceMemoryProperties(vk->phys, &vk->memprops);

    VkDeviceSize align = vk->info.storage_align > 16 ? vk->info.storage_align : 16;
    if (vk->info.texel_align > align)   /* any allocation may be bound as a texel buffer */
        align = vk->info.texel_align;
    vk->align = align;
    VkDeviceSize block = vk->opts.block_bytes ? vk->opts.block_bytes : 256 * EM_VK_MIB;
    if (block > vk->info.max_alloc)
        block = vk->info.max_alloc;
    vk->block_size = block / align * align;
    vk->map_device = vk->info.unified && !vk->opts.as_gpu;
    if (vk->opts.as_gpu)
        vk->info.cpu_kernels = false;
    rc = em_vk_pipe_init(vk, err);
    if (rc || (rc = em_vk_probe_subgroup(vk, err)))
        goto done;
    *out = vk;
done:
    free(devs);
    free(phys);
    free(qfam);
    free(exts);
    if (rc && vk) {
        if (locks)
            em_vk_destroy(vk);
        else
            free(vk);
    }
    return rc;
}

void em_vk_destroy(em_vk *vk)
{
    if (!vk)
        return;
    if (vk->dev) {
        vkDeviceWaitIdle(vk->dev);
        em_vk_pipe_destroy_all(vk);
        em_vk_mem_destroy_all(vk);
        vkDestroyDevice(vk->dev, NULL);
    }
    if (vk->messenger && vk->destroy_messenger)
        vk->destroy_messenger(vk->instance, vk->messenger, NULL);
    if (vk->instance)
        vkDestroyInstance(vk->instance, NULL);
    unsigned ne = atomic_load(&vk->val_errors), nw = atomic_load(&vk->val_warnings);
    if (vk->opts.final_errors)
        *vk->opts.final_errors = ne;
    if (ne || nw)
        fprintf(stderr, "ember: vulkan validation: %u error%s, %u warning%s\n", ne,
                ne == 1 ? "" : "s", nw, nw == 1 ? "" : "s");
    pthread_mutex_destroy(&vk->lock);
    pthread_mutex_destroy(&vk->qlock);
    pthread_mutex_destroy(&vk->xfer_lock);
    pthread_mutex_destroy(&vk->val_lock);
    free(vk);
}

const em_vk_dev_info *em_vk_info(const em_vk *vk)
{
    return &vk->info;
}

bool em_vk_validation_enabled(const em_vk *vk)
{
    return vk->validate;
}

uint32_t em_vk_validation_errors(const em_vk *vk)
{
    return atomic_load(&((em_vk *)vk)->val_errors);
}

uint32_t em_vk_validation_warnings(const em_vk *vk)
{
    return atomic_load(&((em_vk *)vk)->val_warnings);
}

int em_vk_wait_idle(em_vk *vk, em_err *err)
{
    int rc = em_vk_check_lost(vk, err);
    if (rc)
        return rc;
    pthread_mutex_lock(&vk->qlock);
    VkResult r = vkDeviceWaitIdle(vk->dev);
    pthread_mutex_unlock(&vk->qlock);
    if (r != VK_SUCCESS)
        return em_vk_fail(vk, err, r, "waiting for the device");
    return 0;
}
