/* vk_pipe.c — compute pipelines from the embedded kernel table (shared
 * pipeline cache, layouts shared by binding count, push size and binding
 * kinds, specialization constants, required subgroup size), descriptor
 * sets over buffer ranges (checked against the device limits, pools grown
 * on demand), and command buffers with a fence that are recorded once and
 * submitted any number of times. */
#include "core/vk/vk_int.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Dispatch barrier masks: compute shaders and transfers (fill/copy). */
#define WORK_STAGES (VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT)
#define WORK_WRITES (VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT)
#define WORK_ACCESS (VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT | \
                     VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT)

/* ---- pipeline cache --------------------------------------------------- */

/* Load opts.cache_path if its header matches this device and driver. */
static void cache_load(em_vk *vk, void **data, size_t *len)
{
    *data = NULL;
    *len = 0;
    FILE *f = vk->opts.cache_path ? fopen(vk->opts.cache_path, "rb") : NULL;
    if (!f)
        return;
    long n = -1;
    if (fseek(f, 0, SEEK_END) == 0)
        n = ftell(f);
    if (n >= 32 && n < (1l << 30) && fseek(f, 0, SEEK_SET) == 0) {
        unsigned char *d = malloc((size_t)n);
        uint32_t hdr[4];
        if (d && fread(d, 1, (size_t)n, f) == (size_t)n) {
            memcpy(hdr, d, sizeof hdr);
            if (hdr[0] >= 32 && hdr[1] == VK_PIPELINE_CACHE_HEADER_VERSION_ONE &&
                hdr[2] == vk->info.vendor_id && hdr[3] == vk->info.device_id &&
                memcmp(d + 16, vk->cache_uuid, VK_UUID_SIZE) == 0) {
                *data = d;
                *len = (size_t)n;
                d = NULL;
            }
        }
        free(d);
    }
    fclose(f);
}

void em_vk_pipe_cache_save(em_vk *vk)
{
    size_t n = 0;
    void *d = NULL;
    char tmp[4096];
    FILE *f = NULL;
    if (!vk->opts.cache_path || !vk->cache ||
        vkGetPipelineCacheData(vk->dev, vk->cache, &n, NULL) != VK_SUCCESS || !n)
        goto done;
    if (!(d = malloc(n)) || vkGetPipelineCacheData(vk->dev, vk->cache, &n, d) != VK_SUCCESS)
        goto done;
    snprintf(tmp, sizeof tmp, "%s.tmp", vk->opts.cache_path);
    if (!(f = fopen(tmp, "wb")))
        goto done;
    bool ok = fwrite(d, 1, n, f) == n;
    ok = (fclose(f) == 0) && ok;
    f = NULL;
    if (!ok || rename(tmp, vk->opts.cache_path) != 0) {
        fprintf(stderr, "ember: vulkan: cannot save the pipeline cache to %s\n",
                vk->opts.cache_path);
        remove(tmp);
    }
done:
    if (f)
        fclose(f);
    free(d);
}

int em_vk_pipe_init(em_vk *vk, em_err *err)
{
    int rc = 0;
    void *data = NULL;
    size_t len = 0;
    VkPhysicalDeviceProperties p;
    vkGetPhysicalDeviceProperties(vk->phys, &p);
    memcpy(vk->cache_uuid, p.pipelineCacheUUID, VK_UUID_SIZE);
    cache_load(vk, &data, &len);
    VkPipelineCacheCreateInfo ci = {
        .sType = VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO,
        .initialDataSize = len,
        .pInitialData = data,
    };
    VkResult r = vkCreatePipelineCache(vk->dev, &ci, NULL, &vk->cache);
    vk->cache_loaded = r == VK_SUCCESS ? len : 0;
    if (r != VK_SUCCESS && data) {   /* a stale file is not an error */
        ci.initialDataSize = 0;
        ci.pInitialData = NULL;
        r = vkCreatePipelineCache(vk->dev, &ci, NULL, &vk->cache);
    }
    if (r != VK_SUCCESS) {
        vk->cache = VK_NULL_HANDLE;
        rc = em_vk_fail(vk, err, r, "cannot create the pipeline cache");
    }
    free(data);
    return rc;
}

size_t em_vk_pipe_cache_loaded(const em_vk *vk)
{
    return vk->cache_loaded;
}

/* ---- layouts ---------------------------------------------------------- */

/* A descriptor set layout of n storage buffers, bit i of texel making
 * binding i a uniform texel buffer instead. */
static int dsl_create(em_vk *vk, uint32_t n, uint32_t texel, VkDescriptorSetLayout *out, em_err *err)
{
    VkDescriptorSetLayoutBinding b[EM_VK_MAX_BINDINGS];
    for (uint32_t i = 0; i < n; i++)
        b[i] = (VkDescriptorSetLayoutBinding){
            .binding = i,
            .descriptorType = (texel >> i & 1u) ? VK_DESCRIPTOR_TYPE_UNIFORM_TEXEL_BUFFER
                                                : VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
            .descriptorCount = 1,
            .stageFlags = VK_SHADER_STAGE_COMPUTE_BIT,
        };
    VkDescriptorSetLayoutCreateInfo dci = {
        .sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO,
        .bindingCount = n,
        .pBindings = b,
    };
    VkResult r = vkCreateDescriptorSetLayout(vk->dev, &dci, NULL, out);
    if (r != VK_SUCCESS) {
        *out = VK_NULL_HANDLE;
        return em_vk_fail(vk, err, r, "cannot create a descriptor set layout");
    }
    return 0;
}

/* The shared layout for (n_bindings, push_size, texel) (vk->lock held). Each
 * owns its set layout; set layouts with the same binding count and texel
 * mask are identically defined, so a descriptor set works with every
 * pipeline whose layout has them, whatever its push size. */
static int layout_get(em_vk *vk, uint32_t n_bindings, uint32_t push_size, uint32_t texel,
                      const em_vk_layout **out, em_err *err)
{
    int rc = 0;
    VkResult r;
    em_vk_layout *l;
    for (l = vk->layouts; l; l = l->next) {
        if (l->n_bindings == n_bindings && l->push_size == push_size && l->texel == texel) {
            *out = l;
            return 0;
        }
    }
    VkDescriptorSetLayout dsl;
    if ((rc = dsl_create(vk, n_bindings, texel, &dsl, err)))
        goto done;
    l = calloc(1, sizeof *l);
    if (!l) {
        vkDestroyDescriptorSetLayout(vk->dev, dsl, NULL);
        rc = em_err_set(err, EM_ENOMEM, "vulkan: out of host memory");
        goto done;
    }
    l->dsl = dsl;
    VkPushConstantRange pr = { VK_SHADER_STAGE_COMPUTE_BIT, 0, push_size };
    VkPipelineLayoutCreateInfo pci = {
        .sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO,
        .setLayoutCount = 1,
        .pSetLayouts = &l->dsl,
        .pushConstantRangeCount = push_size ? 1 : 0,
        .pPushConstantRanges = &pr,
    };
    r = vkCreatePipelineLayout(vk->dev, &pci, NULL, &l->pl);
    if (r != VK_SUCCESS) {
        vkDestroyDescriptorSetLayout(vk->dev, dsl, NULL);
        free(l);
        rc = em_vk_fail(vk, err, r, "cannot create a pipeline layout");
        goto done;
    }
    l->n_bindings = n_bindings;
    l->push_size = push_size;
    l->texel = texel;
    l->next = vk->layouts;
    vk->layouts = l;
    *out = l;
done:
    return rc;
}

/* ---- pipelines -------------------------------------------------------- */

bool em_vk_kernel_supported(const em_vk *vk, const em_vk_kernel *k)
{
    return (k->needs & ~vk->info.enabled) == 0;
}

/* Check that the kernel can be built on vk as asked. */
static int pipe_check(const em_vk *vk, const em_vk_kernel *k, uint32_t n_spec,
                      uint32_t sg, bool *use_sg, em_err *err)
{
    const em_vk_dev_info *in = &vk->info;
    *use_sg = false;
    if (!k->spv || k->spv_size < 20 || k->spv_size % 4 || k->spv[0] != 0x07230203)
        return em_err_set(err, EM_EINVAL, "vulkan: kernel %s: not a SPIR-V module", k->name);
    uint32_t spv_ver = k->spv[1], api = in->api_used;
    uint32_t spv_max = api >= VK_API_VERSION_1_3 ? 0x10600 : api >= VK_API_VERSION_1_2 ? 0x10500
                                                                                     : 0x10300;
    if (spv_ver > spv_max)
        return em_err_set(err, EM_EUNSUPPORTED, "vulkan: kernel %s is SPIR-V %u.%u, which "
                          "needs a Vulkan %s device (%s is %u.%u)", k->name, (spv_ver >> 16) & 0xff,
                          (spv_ver >> 8) & 0xff, spv_ver > 0x10500 ? "1.3" : "1.2", in->name,
                          VK_API_VERSION_MAJOR(api), VK_API_VERSION_MINOR(api));
    if (k->n_bindings > EM_VK_MAX_BINDINGS || k->n_bindings > in->max_storage_buffers)
        return em_err_set(err, EM_EUNSUPPORTED, "vulkan: kernel %s: %u storage buffers "
                          "(device limit %u, ember's %d)", k->name, k->n_bindings,
                          in->max_storage_buffers, EM_VK_MAX_BINDINGS);
    if (k->push_size % 4 || k->push_size > in->max_push)
        return em_err_set(err, EM_EUNSUPPORTED, "vulkan: kernel %s: %u bytes of push "
                          "constants (device limit %u)", k->name, k->push_size, in->max_push);
    if (n_spec > k->n_spec)
        return em_err_set(err, EM_EINVAL, "vulkan: kernel %s: %u specialization constants "
                          "given, the shader declares %u", k->name, n_spec, k->n_spec);
    uint32_t missing = k->needs & ~in->enabled;
    if (missing) {
        char list[200];
        em_vk_feature_list(missing, list, sizeof list);
        return em_err_set(err, EM_EUNSUPPORTED, "vulkan: kernel %s needs %s, which %s %s",
                          k->name, list, in->name,
                          (missing & in->features) ? "has disabled" : "lacks");
    }
    if (sg) {
        bool pow2 = (sg & (sg - 1)) == 0;
        if ((in->enabled & EM_VK_F_SG_SIZE_CTL) && pow2 && sg >= in->subgroup_min &&
            sg <= in->subgroup_max) {
            *use_sg = in->subgroup_min != in->subgroup_max;
        } else if (!(in->subgroup_min == sg && in->subgroup_max == sg &&
                     in->subgroup_size == sg)) {
            return em_err_set(err, EM_EUNSUPPORTED, "vulkan: kernel %s: subgroup size %u "
                              "requested; %s runs %u..%u%s", k->name, sg, in->name,
                              in->subgroup_min, in->subgroup_max,
                              (in->enabled & EM_VK_F_SG_SIZE_CTL) ? ""
                                  : " without subgroup size control");
        }
    }
    return 0;
}

int em_vk_pipe_create(em_vk *vk, const em_vk_kernel *k, const uint32_t *spec,
                      uint32_t n_spec, uint32_t subgroup_size, em_vk_pipe **out,
                      em_err *err)
{
    int rc;
    bool use_sg = false;
    VkShaderModule mod = VK_NULL_HANDLE;
    em_vk_pipe *p = NULL;
    const em_vk_layout *layout = NULL;
    VkResult r;
    *out = NULL;
    if ((rc = em_vk_check_lost(vk, err)) ||
        (rc = pipe_check(vk, k, n_spec, subgroup_size, &use_sg, err)))
        goto done;
    pthread_mutex_lock(&vk->lock);
    rc = layout_get(vk, k->n_bindings, k->push_size, k->texel, &layout, err);
    pthread_mutex_unlock(&vk->lock);
    if (rc)
        goto done;
    if (!(p = calloc(1, sizeof *p))) {
        rc = em_err_set(err, EM_ENOMEM, "vulkan: out of host memory");
        goto done;
    }
    VkShaderModuleCreateInfo mci = {
        .sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO,
        .codeSize = k->spv_size,
        .pCode = k->spv,
    };
    r = vkCreateShaderModule(vk->dev, &mci, NULL, &mod);
    if (r != VK_SUCCESS) {
        mod = VK_NULL_HANDLE;
        rc = em_vk_fail(vk, err, r, "cannot create a shader module");
        goto done;
    }
    VkSpecializationMapEntry map[64];
    if (n_spec > 64)
        n_spec = 64;
    for (uint32_t i = 0; i < n_spec; i++)
        map[i] = (VkSpecializationMapEntry){ i, i * 4, 4 };
    VkSpecializationInfo si = {
        .mapEntryCount = n_spec,
        .pMapEntries = map,
        .dataSize = n_spec * 4,
        .pData = spec,
    };
    VkPipelineShaderStageRequiredSubgroupSizeCreateInfo rss = {
        .sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_REQUIRED_SUBGROUP_SIZE_CREATE_INFO,
        .requiredSubgroupSize = subgroup_size,
    };
    VkComputePipelineCreateInfo ci = {
        .sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
        .stage = {
            .sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
            .pNext = use_sg ? &rss : NULL,
            /* the workgroup is a whole number of required-size subgroups */
            .flags = use_sg && (vk->info.enabled & EM_VK_F_FULL_SG)
                         ? VK_PIPELINE_SHADER_STAGE_CREATE_REQUIRE_FULL_SUBGROUPS_BIT
                         : 0,
            .stage = VK_SHADER_STAGE_COMPUTE_BIT,
            .module = mod,
            .pName = "main",
            .pSpecializationInfo = n_spec ? &si : NULL,
        },
        .layout = layout->pl,
    };
    r = vkCreateComputePipelines(vk->dev, vk->cache, 1, &ci, NULL, &p->pipeline);
    if (r != VK_SUCCESS) {
        p->pipeline = VK_NULL_HANDLE;
        char what[160];
        snprintf(what, sizeof what, "cannot create the pipeline of kernel %s", k->name);
        rc = em_vk_fail(vk, err, r, what);
        goto done;
    }
    p->kernel = k;
    p->layout = layout;
    pthread_mutex_lock(&vk->lock);
    p->next = vk->pipes;
    if (vk->pipes)
        vk->pipes->prev = p;
    vk->pipes = p;
    pthread_mutex_unlock(&vk->lock);
    *out = p;
    p = NULL;
done:
    if (mod)
        vkDestroyShaderModule(vk->dev, mod, NULL);
    free(p);
    return rc;
}

void em_vk_pipe_destroy(em_vk *vk, em_vk_pipe *p)
{
    if (!vk || !p)
        return;
    pthread_mutex_lock(&vk->lock);
    if (p->prev)
        p->prev->next = p->next;
    else
        vk->pipes = p->next;
    if (p->next)
        p->next->prev = p->prev;
    pthread_mutex_unlock(&vk->lock);
    vkDestroyPipeline(vk->dev, p->pipeline, NULL);
    free(p);
}

/* ---- descriptor sets -------------------------------------------------- */

static int ranges_check(const em_vk *vk, const char *kname, uint32_t n, uint32_t texel,
                        const em_vk_buf *ranges, em_err *err)
{
    const em_vk_dev_info *in = &vk->info;
    for (uint32_t i = 0; i < n; i++) {
        const em_vk_buf *b = &ranges[i];
        if (!b->buf || b->size == 0)
            return em_err_set(err, EM_EINVAL, "vulkan: descriptor set for %s: binding %u: "
                              "empty range", kname, i);
        if (texel >> i & 1u) {
            if (b->size % 16 || b->size / 16 > in->max_texel_elems)
                return em_err_set(err, EM_ERANGE, "vulkan: descriptor set for %s: binding %u: "
                                  "texel-buffer range of %llu bytes is not whole 16-byte texels "
                                  "within maxTexelBufferElements (%llu)", kname, i,
                                  (unsigned long long)b->size, (unsigned long long)in->max_texel_elems);
            if (in->texel_align && b->off % in->texel_align)
                return em_err_set(err, EM_EINVAL, "vulkan: descriptor set for %s: binding %u: "
                                  "offset %llu is not a multiple of minTexelBufferOffsetAlignment "
                                  "(%llu)", kname, i, (unsigned long long)b->off,
                                  (unsigned long long)in->texel_align);
            continue;
        }
        if (b->size > in->max_storage_range)
            return em_err_set(err, EM_ERANGE, "vulkan: descriptor set for %s: binding %u: "
                              "range of %llu bytes exceeds the device's maxStorageBufferRange "
                              "(%llu); bind the tensor in parts", kname, i,
                              (unsigned long long)b->size,
                              (unsigned long long)in->max_storage_range);
        if (b->off % in->storage_align)
            return em_err_set(err, EM_EINVAL, "vulkan: descriptor set for %s: binding %u: "
                              "offset %llu is not a multiple of minStorageBufferOffsetAlignment "
                              "(%llu)", kname, i, (unsigned long long)b->off,
                              (unsigned long long)in->storage_align);
    }
    return 0;
}

static void views_free(em_vk *vk, em_vk_dset *d)
{
    for (uint32_t i = 0; i < EM_VK_MAX_BINDINGS; i++) {
        if (d->views[i])
            vkDestroyBufferView(vk->dev, d->views[i], NULL);
        d->views[i] = VK_NULL_HANDLE;
    }
}

/* Point the set's bindings at ranges; texel bindings get new buffer views
 * (the old ones are destroyed: the set must not be in use). */
static int dset_write(em_vk *vk, em_vk_dset *d, const em_vk_buf *ranges, em_err *err)
{
    VkDescriptorBufferInfo bi[EM_VK_MAX_BINDINGS];
    VkWriteDescriptorSet w[EM_VK_MAX_BINDINGS];
    VkBufferView nv[EM_VK_MAX_BINDINGS] = { 0 };
    uint32_t n = d->n_bindings;
    for (uint32_t i = 0; i < n; i++) {
        w[i] = (VkWriteDescriptorSet){
            .sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET,
            .dstSet = d->set,
            .dstBinding = i,
            .descriptorCount = 1,
        };
        if (d->texel >> i & 1u) {
            VkBufferViewCreateInfo vci = {
                .sType = VK_STRUCTURE_TYPE_BUFFER_VIEW_CREATE_INFO,
                .buffer = ranges[i].buf,
                .format = VK_FORMAT_R32G32B32A32_UINT,
                .offset = ranges[i].off,
                .range = ranges[i].size,
            };
            VkResult r = vkCreateBufferView(vk->dev, &vci, NULL, &nv[i]);
            if (r != VK_SUCCESS) {
                for (uint32_t j = 0; j < i; j++)
                    if (nv[j])
                        vkDestroyBufferView(vk->dev, nv[j], NULL);
                return em_vk_fail(vk, err, r, "cannot create a texel-buffer view");
            }
            w[i].descriptorType = VK_DESCRIPTOR_TYPE_UNIFORM_TEXEL_BUFFER;
            w[i].pTexelBufferView = &nv[i];
        } else {
            bi[i] = (VkDescriptorBufferInfo){ ranges[i].buf, ranges[i].off, ranges[i].size };
            w[i].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
            w[i].pBufferInfo = &bi[i];
        }
    }
    if (n)
        vkUpdateDescriptorSets(vk->dev, n, w, 0, NULL);
    views_free(vk, d);
    memcpy(d->views, nv, sizeof nv);
    return 0;
}

/* Allocate a set of layout dsl from the pools, adding a pool when all are
 * full (vk->lock held). */
static int set_alloc(em_vk *vk, VkDescriptorSetLayout dsl, VkDescriptorSet *set,
                     VkDescriptorPool *pool, em_err *err)
{
    VkResult r = VK_ERROR_OUT_OF_POOL_MEMORY;
    VkDescriptorSetAllocateInfo ai = {
        .sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO,
        .descriptorSetCount = 1,
        .pSetLayouts = &dsl,
    };
    for (uint32_t i = vk->n_pools; i-- > 0;) {
        ai.descriptorPool = vk->pools[i];
        r = vkAllocateDescriptorSets(vk->dev, &ai, set);
        if (r == VK_SUCCESS) {
            *pool = vk->pools[i];
            return 0;
        }
        if (r != VK_ERROR_OUT_OF_POOL_MEMORY && r != VK_ERROR_FRAGMENTED_POOL)
            return em_vk_fail(vk, err, r, "cannot allocate a descriptor set");
    }
    if (vk->n_pools == vk->cap_pools) {
        uint32_t cap = vk->cap_pools ? 2 * vk->cap_pools : 8;
        VkDescriptorPool *np = realloc(vk->pools, cap * sizeof *np);
        if (!np)
            return em_err_set(err, EM_ENOMEM, "vulkan: out of host memory");
        vk->pools = np;
        vk->cap_pools = cap;
    }
    const uint32_t sets = 256;
    VkDescriptorPoolSize ps[2] = { { VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, sets * 8 },
                                   { VK_DESCRIPTOR_TYPE_UNIFORM_TEXEL_BUFFER, sets * 2 } };
    VkDescriptorPoolCreateInfo pci = {
        .sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO,
        .flags = VK_DESCRIPTOR_POOL_CREATE_FREE_DESCRIPTOR_SET_BIT,
        .maxSets = sets,
        .poolSizeCount = 2,
        .pPoolSizes = ps,
    };
    VkDescriptorPool p;
    r = vkCreateDescriptorPool(vk->dev, &pci, NULL, &p);
    if (r != VK_SUCCESS)
        return em_vk_fail(vk, err, r, "cannot create a descriptor pool");
    vk->pools[vk->n_pools++] = p;
    ai.descriptorPool = p;
    r = vkAllocateDescriptorSets(vk->dev, &ai, set);
    if (r != VK_SUCCESS)
        return em_vk_fail(vk, err, r, "cannot allocate a descriptor set");
    *pool = p;
    return 0;
}

int em_vk_dset_create(em_vk *vk, const em_vk_pipe *pipe, const em_vk_buf *ranges,
                      em_vk_dset **out, em_err *err)
{
    int rc;
    em_vk_dset *d = NULL;
    *out = NULL;
    uint32_t n = pipe->layout->n_bindings;
    if ((rc = em_vk_check_lost(vk, err)) ||
        (rc = ranges_check(vk, pipe->kernel->name, n, pipe->layout->texel, ranges, err)))
        goto done;
    if (!(d = calloc(1, sizeof *d))) {
        rc = em_err_set(err, EM_ENOMEM, "vulkan: out of host memory");
        goto done;
    }
    d->n_bindings = n;
    d->texel = pipe->layout->texel;
    pthread_mutex_lock(&vk->lock);
    rc = set_alloc(vk, pipe->layout->dsl, &d->set, &d->pool, err);
    if (!rc) {
        d->next = vk->dsets;
        if (vk->dsets)
            vk->dsets->prev = d;
        vk->dsets = d;
    }
    pthread_mutex_unlock(&vk->lock);
    if (rc)
        goto done;
    if ((rc = dset_write(vk, d, ranges, err))) {
        em_vk_dset_destroy(vk, d);
        d = NULL;
        goto done;
    }
    *out = d;
    d = NULL;
done:
    free(d);
    return rc;
}

int em_vk_dset_update(em_vk *vk, em_vk_dset *d, const em_vk_buf *ranges, em_err *err)
{
    int rc = em_vk_check_lost(vk, err);
    if (!rc)
        rc = ranges_check(vk, "update", d->n_bindings, d->texel, ranges, err);
    if (!rc)
        rc = dset_write(vk, d, ranges, err);
    return rc;
}

void em_vk_dset_destroy(em_vk *vk, em_vk_dset *d)
{
    if (!vk || !d)
        return;
    pthread_mutex_lock(&vk->lock);
    if (d->prev)
        d->prev->next = d->next;
    else
        vk->dsets = d->next;
    if (d->next)
        d->next->prev = d->prev;
    vkFreeDescriptorSets(vk->dev, d->pool, 1, &d->set);
    pthread_mutex_unlock(&vk->lock);
    views_free(vk, d);
    free(d);
}

/* ---- command buffers -------------------------------------------------- */

static void cmd_unlink(em_vk *vk, em_vk_cmd *c)
{
    pthread_mutex_lock(&vk->lock);
    if (c->prev)
        c->prev->next = c->next;
    else if (vk->cmds == c)
        vk->cmds = c->next;
    if (c->next)
        c->next->prev = c->prev;
    c->next = c->prev = NULL;
    pthread_mutex_unlock(&vk->lock);
}

static void cmd_free(em_vk_cmd *c)
{
    em_vk *vk = c->vk;
    if (c->fence)
        vkDestroyFence(vk->dev, c->fence, NULL);
    if (c->qpool)
        vkDestroyQueryPool(vk->dev, c->qpool, NULL);
    if (c->pool)
        vkDestroyCommandPool(vk->dev, c->pool, NULL);
    free(c);
}

int em_vk_cmd_create(em_vk *vk, uint32_t n_timestamps, em_vk_cmd **out, em_err *err)
{
    int rc;
    VkResult r;
    *out = NULL;
    em_vk_cmd *c = calloc(1, sizeof *c);
    if (!c) {
        rc = em_err_set(err, EM_ENOMEM, "vulkan: out of host memory");
        goto done;
    }
    c->vk = vk;
    if ((rc = em_vk_check_lost(vk, err)))
        goto done;
    VkCommandPoolCreateInfo pci = {
        .sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
        .flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT,
        .queueFamilyIndex = vk->qfamily,
    };
    if ((r = vkCreateCommandPool(vk->dev, &pci, NULL, &c->pool)) != VK_SUCCESS) {
        c->pool = VK_NULL_HANDLE;
        rc = em_vk_fail(vk, err, r, "cannot create a command pool");
        goto done;
    }
    VkCommandBufferAllocateInfo ai = {
        .sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
        .commandPool = c->pool,
        .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
        .commandBufferCount = 1,
    };
    if ((r = vkAllocateCommandBuffers(vk->dev, &ai, &c->cb)) != VK_SUCCESS) {
        rc = em_vk_fail(vk, err, r, "cannot allocate a command buffer");
        goto done;
    }
    VkFenceCreateInfo fci = { .sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO };
    if ((r = vkCreateFence(vk->dev, &fci, NULL, &c->fence)) != VK_SUCCESS) {
        c->fence = VK_NULL_HANDLE;
        rc = em_vk_fail(vk, err, r, "cannot create a fence");
        goto done;
    }
    if (n_timestamps && (vk->info.enabled & EM_VK_F_TIMESTAMPS)) {
        VkQueryPoolCreateInfo qci = {
            .sType = VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO,
            .queryType = VK_QUERY_TYPE_TIMESTAMP,
            .queryCount = n_timestamps,
        };
        if ((r = vkCreateQueryPool(vk->dev, &qci, NULL, &c->qpool)) != VK_SUCCESS) {
            c->qpool = VK_NULL_HANDLE;
            rc = em_vk_fail(vk, err, r, "cannot create a timestamp query pool");
            goto done;
        }
        c->n_ts = n_timestamps;
    }
    pthread_mutex_lock(&vk->lock);
    c->next = vk->cmds;
    if (vk->cmds)
        vk->cmds->prev = c;
    vk->cmds = c;
    pthread_mutex_unlock(&vk->lock);
    *out = c;
    c = NULL;
done:
    if (c)
        cmd_free(c);
    return rc;
}

void em_vk_cmd_destroy(em_vk_cmd *c)
{
    if (!c)
        return;
    if (c->state == EM_VK_CMD_PENDING)
        em_vk_cmd_wait(c, NULL);
    if (c->state == EM_VK_CMD_PENDING)   /* still running (timeout, lost): drain */
        vkDeviceWaitIdle(c->vk->dev);
    cmd_unlink(c->vk, c);
    cmd_free(c);
}

/* Record a sticky recording error. */
__attribute__((format(printf, 2, 3)))
static void rec_fail(em_vk_cmd *c, const char *fmt, ...)
{
    if (c->rec_err)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->rec_msg, sizeof c->rec_msg, fmt, ap);
    va_end(ap);
    c->rec_err = EM_EINVAL;
}

static bool recording(em_vk_cmd *c, const char *what)
{
    if (c->state == EM_VK_CMD_RECORDING)
        return true;
    rec_fail(c, "vulkan: %s outside em_vk_cmd_begin/end", what);
    return false;
}

static void barrier(em_vk_cmd *c, VkPipelineStageFlags src, VkAccessFlags src_access,
                    VkPipelineStageFlags dst, VkAccessFlags dst_access)
{
    VkMemoryBarrier mb = {
        .sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
        .srcAccessMask = src_access,
        .dstAccessMask = dst_access,
    };
    vkCmdPipelineBarrier(c->cb, src, dst, 0, 1, &mb, 0, NULL, 0, NULL);
}

int em_vk_cmd_begin(em_vk_cmd *c, em_err *err)
{
    int rc = em_vk_check_lost(c->vk, err);
    if (rc)
        return rc;
    if (c->state == EM_VK_CMD_PENDING)
        return em_err_set(err, EM_ESTATE, "vulkan: command buffer re-recorded while pending "
                          "(wait for it first)");
    VkCommandBufferBeginInfo bi = { .sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO };
    VkResult r = vkBeginCommandBuffer(c->cb, &bi);
    if (r != VK_SUCCESS)
        return em_vk_fail(c->vk, err, r, "cannot begin a command buffer");
    c->state = EM_VK_CMD_RECORDING;
    c->rec_err = 0;
    c->rec_msg[0] = '\0';
    c->bound_pipe = VK_NULL_HANDLE;
    c->bound_layout = VK_NULL_HANDLE;
    c->bound_set = VK_NULL_HANDLE;
    c->n_dispatch = c->n_barrier = 0;
    if (c->qpool)
        vkCmdResetQueryPool(c->cb, c->qpool, 0, c->n_ts);
    /* writes of earlier submissions -> this one */
    barrier(c, WORK_STAGES, WORK_WRITES, WORK_STAGES, WORK_ACCESS);
    return 0;
}

void em_vk_cmd_dispatch(em_vk_cmd *c, const em_vk_pipe *p, const em_vk_dset *d,
                        const void *push, uint32_t gx, uint32_t gy, uint32_t gz)
{
    if (!recording(c, "dispatch"))
        return;
    const em_vk_dev_info *in = &c->vk->info;
    const em_vk_layout *l = p->layout;
    const char *name = p->kernel->name;
    if (l->n_bindings && (!d || d->n_bindings != l->n_bindings)) {
        rec_fail(c, "vulkan: dispatch %s: needs a descriptor set of %u bindings (got %u)",
                 name, l->n_bindings, d ? d->n_bindings : 0);
        return;
    }
    if (l->push_size && !push) {
        rec_fail(c, "vulkan: dispatch %s: push constants missing", name);
        return;
    }
    if (gx > in->max_wg_count[0] || gy > in->max_wg_count[1] || gz > in->max_wg_count[2]) {
        rec_fail(c, "vulkan: dispatch %s: %u x %u x %u workgroups exceed the device's "
                 "maxComputeWorkGroupCount (%u x %u x %u)", name, gx, gy, gz,
                 in->max_wg_count[0], in->max_wg_count[1], in->max_wg_count[2]);
        return;
    }
    if (!gx || !gy || !gz)
        return;
    if (c->bound_pipe != p->pipeline) {
        vkCmdBindPipeline(c->cb, VK_PIPELINE_BIND_POINT_COMPUTE, p->pipeline);
        c->bound_pipe = p->pipeline;
    }
    if (d && l->n_bindings && (c->bound_set != d->set || c->bound_layout != l->pl)) {
        vkCmdBindDescriptorSets(c->cb, VK_PIPELINE_BIND_POINT_COMPUTE, l->pl, 0, 1, &d->set,
                                0, NULL);
        c->bound_set = d->set;
        c->bound_layout = l->pl;
    }
    if (l->push_size)
        vkCmdPushConstants(c->cb, l->pl, VK_SHADER_STAGE_COMPUTE_BIT, 0, l->push_size, push);
    vkCmdDispatch(c->cb, gx, gy, gz);
    c->n_dispatch++;
}

void em_vk_cmd_barrier(em_vk_cmd *c)
{
    if (!recording(c, "barrier"))
        return;
    barrier(c, WORK_STAGES, WORK_WRITES, WORK_STAGES, WORK_ACCESS);
    c->n_barrier++;
}

void em_vk_cmd_fill(em_vk_cmd *c, const em_vk_buf *dst, uint32_t word)
{
    if (!recording(c, "fill"))
        return;
    if (!dst->buf || dst->off % 4 || dst->size % 4 || !dst->size) {
        rec_fail(c, "vulkan: fill: offset %llu and size %llu must be non-zero multiples of 4",
                 (unsigned long long)dst->off, (unsigned long long)dst->size);
        return;
    }
    vkCmdFillBuffer(c->cb, dst->buf, dst->off, dst->size, word);
}

void em_vk_cmd_copy(em_vk_cmd *c, const em_vk_buf *src, VkDeviceSize src_off,
                    const em_vk_buf *dst, VkDeviceSize dst_off, VkDeviceSize n)
{
    if (!recording(c, "copy") || n == 0)
        return;
    if (!src->buf || !dst->buf || src_off > src->size || n > src->size - src_off ||
        dst_off > dst->size || n > dst->size - dst_off) {
        rec_fail(c, "vulkan: copy of %llu bytes outside the source (%llu+%llu) or destination "
                 "(%llu+%llu) range", (unsigned long long)n, (unsigned long long)src_off,
                 (unsigned long long)src->size, (unsigned long long)dst_off,
                 (unsigned long long)dst->size);
        return;
    }
    VkBufferCopy region = { src->off + src_off, dst->off + dst_off, n };
    vkCmdCopyBuffer(c->cb, src->buf, dst->buf, 1, &region);
}

void em_vk_cmd_timestamp(em_vk_cmd *c, uint32_t slot)
{
    if (!recording(c, "timestamp") || !c->qpool)
        return;
    if (slot >= c->n_ts) {
        rec_fail(c, "vulkan: timestamp slot %u of %u", slot, c->n_ts);
        return;
    }
    vkCmdWriteTimestamp(c->cb, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, c->qpool, slot);
}

int em_vk_cmd_end(em_vk_cmd *c, em_err *err)
{
    if (c->state != EM_VK_CMD_RECORDING)
        return em_err_set(err, EM_ESTATE, "vulkan: em_vk_cmd_end without em_vk_cmd_begin");
    /* every write -> the host, after the fence */
    barrier(c, WORK_STAGES, WORK_WRITES, VK_PIPELINE_STAGE_HOST_BIT, VK_ACCESS_HOST_READ_BIT);
    VkResult r = vkEndCommandBuffer(c->cb);
    if (r != VK_SUCCESS) {
        c->state = EM_VK_CMD_INITIAL;
        return em_vk_fail(c->vk, err, r, "cannot end a command buffer");
    }
    if (c->rec_err) {
        c->state = EM_VK_CMD_INITIAL;
        return em_err_set(err, c->rec_err, "%s", c->rec_msg);
    }
    c->state = EM_VK_CMD_EXECUTABLE;
    return 0;
}

int em_vk_cmd_submit(em_vk_cmd *c, em_err *err)
{
    em_vk *vk = c->vk;
    int rc = em_vk_check_lost(vk, err);
    if (rc)
        return rc;
    if (c->state != EM_VK_CMD_EXECUTABLE)
        return em_err_set(err, EM_ESTATE, "vulkan: submit of a command buffer that is %s",
                          c->state == EM_VK_CMD_PENDING ? "still pending"
                                                        : "not recorded (em_vk_cmd_end)");
    VkResult r = vkResetFences(vk->dev, 1, &c->fence);
    if (r != VK_SUCCESS)
        return em_vk_fail(vk, err, r, "cannot reset a fence");
    VkSubmitInfo si = {
        .sType = VK_STRUCTURE_TYPE_SUBMIT_INFO,
        .commandBufferCount = 1,
        .pCommandBuffers = &c->cb,
    };
    pthread_mutex_lock(&vk->qlock);
    r = vkQueueSubmit(vk->queue, 1, &si, c->fence);
    pthread_mutex_unlock(&vk->qlock);
    if (r != VK_SUCCESS)
        return em_vk_fail(vk, err, r, "submit");
    c->state = EM_VK_CMD_PENDING;
    return 0;
}

int em_vk_cmd_wait(em_vk_cmd *c, em_err *err)
{
    em_vk *vk = c->vk;
    if (c->state != EM_VK_CMD_PENDING)
        return 0;
    double limit = vk->opts.wait_timeout_s > 0 ? vk->opts.wait_timeout_s : 600.0;
    VkResult r = vkWaitForFences(vk->dev, 1, &c->fence, VK_TRUE, (uint64_t)(limit * 1e9));
    if (r == VK_SUCCESS && em_vk_fault(vk, EM_VK_FAULT_LOST))
        r = VK_ERROR_DEVICE_LOST;
    if (r == VK_TIMEOUT)
        return em_err_set(err, EM_EDEVICE, "vulkan: the device did not finish within %.0f s "
                          "(hung?)", limit);
    if (r != VK_SUCCESS)
        return em_vk_fail(vk, err, r, "waiting for the device");
    c->state = EM_VK_CMD_EXECUTABLE;
    return 0;
}

int em_vk_cmd_submit_wait(em_vk_cmd *c, em_err *err)
{
    int rc = em_vk_cmd_submit(c, err);
    return rc ? rc : em_vk_cmd_wait(c, err);
}

int em_vk_cmd_timestamps(em_vk_cmd *c, uint32_t first, uint32_t n, double *ns, em_err *err)
{
    em_vk *vk = c->vk;
    uint64_t ticks[64];
    if (!c->qpool)
        return em_err_set(err, EM_EUNSUPPORTED, "vulkan: %s has no timestamp queries",
                          vk->info.name);
    if (first > c->n_ts || n > c->n_ts - first || n > 64)
        return em_err_set(err, EM_EINVAL, "vulkan: timestamps %u..%u of %u", first, first + n,
                          c->n_ts);
    if (c->state != EM_VK_CMD_EXECUTABLE)
        return em_err_set(err, EM_ESTATE, "vulkan: timestamps read before the wait");
    VkResult r = vkGetQueryPoolResults(vk->dev, c->qpool, first, n, sizeof ticks, ticks,
                                       sizeof ticks[0],
                                       VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT);
    if (r != VK_SUCCESS)
        return em_vk_fail(vk, err, r, "reading timestamps");
    uint64_t mask = vk->info.timestamp_bits >= 64 ? UINT64_MAX
                                                  : (1ull << vk->info.timestamp_bits) - 1;
    for (uint32_t i = 0; i < n; i++)
        ns[i] = (double)(ticks[i] & mask) * vk->info.timestamp_period;
    return 0;
}

bool em_vk_cmd_has_timestamps(const em_vk_cmd *c)
{
    return c->qpool != VK_NULL_HANDLE;
}

uint32_t em_vk_cmd_dispatches(const em_vk_cmd *c)
{
    return c->n_dispatch;
}

uint32_t em_vk_cmd_barriers(const em_vk_cmd *c)
{
    return c->n_barrier;
}

/* ---- teardown --------------------------------------------------------- */

void em_vk_pipe_destroy_all(em_vk *vk)
{
    while (vk->cmds) {
        em_vk_cmd *c = vk->cmds;
        vk->cmds = c->next;
        cmd_free(c);
    }
    vk->xfer[0] = vk->xfer[1] = NULL;
    while (vk->dsets) {
        em_vk_dset *d = vk->dsets;
        vk->dsets = d->next;
        views_free(vk, d);
        free(d);
    }
    for (uint32_t i = 0; i < vk->n_pools; i++)
        vkDestroyDescriptorPool(vk->dev, vk->pools[i], NULL);
    free(vk->pools);
    vk->pools = NULL;
    vk->n_pools = vk->cap_pools = 0;
    while (vk->pipes) {
        em_vk_pipe *p = vk->pipes;
        vk->pipes = p->next;
        vkDestroyPipeline(vk->dev, p->pipeline, NULL);
        free(p);
    }
    while (vk->layouts) {
        em_vk_layout *l = vk->layouts;
        vk->layouts = l->next;
        vkDestroyPipelineLayout(vk->dev, l->pl, NULL);
        vkDestroyDescriptorSetLayout(vk->dev, l->dsl, NULL);
        free(l);
    }
    if (vk->cache) {
        em_vk_pipe_cache_save(vk);
        vkDestroyPipelineCache(vk->dev, vk->cache, NULL);
        vk->cache = VK_NULL_HANDLE;
    }
}
