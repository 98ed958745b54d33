/* vk_mem.c — device memory for ember: large blocks (one VkDeviceMemory and
 * one VkBuffer each) suballocated into aligned ranges, dedicated allocations
 * for anything bigger than a block, per-kind accounting, and host<->device
 * transfers (directly through the mapping on unified-memory devices, else
 * through a double-buffered staging buffer), with a terminal progress bar. */
#include "core/vk/vk_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static VkDeviceSize align_up(VkDeviceSize v, VkDeviceSize a)
{
    return (v + a - 1) / a * a;
}

static double mib(VkDeviceSize v)
{
    return (double)v / (double)EM_VK_MIB;
}

const char *em_vk_mem_kind_name(em_vk_mem_kind kind)
{
    switch (kind) {
    case EM_VK_MEM_DEVICE:   return "device";
    case EM_VK_MEM_UPLOAD:   return "upload";
    case EM_VK_MEM_READBACK: return "readback";
    default:                 return "?";
    }
}

/* ---- memory types ----------------------------------------------------- */

/* Best memory type for kind among `bits`, or -1. Required flags must all be
 * present; then the most preferred flags, the fewest avoided ones, and the
 * lowest index (drivers list faster types first) win. */
static int pick_memtype(const em_vk *vk, em_vk_mem_kind kind, uint32_t bits)
{
    const VkMemoryPropertyFlags DL = VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT,
        HV = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT, HC = VK_MEMORY_PROPERTY_HOST_COHERENT_BIT,
        CA = VK_MEMORY_PROPERTY_HOST_CACHED_BIT;
    VkMemoryPropertyFlags req, pref, avoid;
    switch (kind) {
    case EM_VK_MEM_DEVICE:
        req = vk->map_device ? (DL | HV | HC) : DL;
        pref = 0;
        avoid = vk->map_device ? 0 : HV;   /* keep the small BAR window for others */
        break;
    case EM_VK_MEM_UPLOAD:
        req = HV | HC;
        pref = 0;
        avoid = vk->map_device ? 0 : DL;   /* system memory unless device memory is mapped */
        break;
    default:
        req = HV | HC;
        pref = CA;
        avoid = vk->map_device ? 0 : DL;   /* system memory unless device memory is mapped */
        break;
    }
    const VkMemoryPropertyFlags odd = VK_MEMORY_PROPERTY_PROTECTED_BIT |
        VK_MEMORY_PROPERTY_LAZILY_ALLOCATED_BIT | 0x40 /* DEVICE_COHERENT_AMD */;
    int best = -1, best_score = 0;
    for (uint32_t t = 0; t < vk->memprops.memoryTypeCount; t++) {
        VkMemoryPropertyFlags f = vk->memprops.memoryTypes[t].propertyFlags;
        if (!(bits & (1u << t)) || (f & req) != req || (f & odd))
            continue;
        int score = 100 + 4 * __builtin_popcount(f & pref) - 2 * __builtin_popcount(f & avoid);
        if (score > best_score) {
            best = (int)t;
            best_score = score;
        }
    }
    return best;
}

/* ---- blocks ----------------------------------------------------------- */

static void block_destroy(em_vk *vk, em_vk_block *b)
{
    if (!b)
        return;
    if (b->map)
        vkUnmapMemory(vk->dev, b->mem);
    if (b->buf)
        vkDestroyBuffer(vk->dev, b->buf, NULL);
    if (b->mem) {
        vkFreeMemory(vk->dev, b->mem, NULL);
        vk->stats[b->kind].reserved -= b->size;
        vk->stats[b->kind].n_blocks--;
    }
    free(b->free);
    free(b);
}

/* A new block of `size` bytes for kind (vk->lock held). */
static int block_create(em_vk *vk, em_vk_mem_kind kind, VkDeviceSize size, bool dedicated,
                        em_vk_block **out, em_err *err)
{
    int rc = 0;
    VkResult r;
    *out = NULL;
    em_vk_block *b = calloc(1, sizeof *b);
    if (!b || !(b->free = malloc(8 * sizeof *b->free))) {
        rc = em_err_set(err, EM_ENOMEM, "vulkan: out of host memory");
        goto done;
    }
    b->cap_free = 8;
    b->kind = kind;
    b->size = size;
    b->dedicated = dedicated;

    VkBufferCreateInfo bci = {
        .sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO,
        .size = size,
        .usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_UNIFORM_TEXEL_BUFFER_BIT |
                 VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT,
        .sharingMode = VK_SHARING_MODE_EXCLUSIVE,
    };
    r = vkCreateBuffer(vk->dev, &bci, NULL, &b->buf);
    if (r != VK_SUCCESS) {
        b->buf = VK_NULL_HANDLE;
        rc = em_vk_fail(vk, err, r, "cannot create a buffer");
        goto done;
    }
    VkMemoryRequirements req;
    vkGetBufferMemoryRequirements(vk->dev, b->buf, &req);
    int type = pick_memtype(vk, kind, req.memoryTypeBits);
    if (type < 0) {
        rc = em_err_set(err, EM_EUNSUPPORTED, "vulkan: no memory type fits %s buffers",
                        em_vk_mem_kind_name(kind));
        goto done;
    }
    vk->memtype[kind] = type;
    VkMemoryDedicatedAllocateInfo ded = {
        .sType = VK_STRUCTURE_TYPE_MEMORY_DEDICATED_ALLOCATE_INFO,
        .buffer = b->buf,
    };
    VkMemoryAllocateInfo ai = {
        .sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO,
        .pNext = dedicated ? &ded : NULL,
        .allocationSize = req.size,
        .memoryTypeIndex = (uint32_t)type,
    };
    r = em_vk_fault(vk, EM_VK_FAULT_ALLOC) ? VK_ERROR_OUT_OF_DEVICE_MEMORY
                                          : vkAllocateMemory(vk->dev, &ai, NULL, &b->mem);
    if (r != VK_SUCCESS) {
        b->mem = VK_NULL_HANDLE;
        uint32_t heap = vk->memprops.memoryTypes[type].heapIndex;
        rc = em_err_set(err, em_vk_fail(vk, NULL, r, ""), "vulkan: cannot allocate a %.1f MiB "
                        "%s %s: %s (heap %u: %.0f MiB; ember holds %.1f MiB device, %.1f MiB "
                        "upload, %.1f MiB readback)", mib(req.size), em_vk_mem_kind_name(kind),
                        dedicated ? "buffer" : "block", em_vk_result_str(r), heap,
                        mib(vk->memprops.memoryHeaps[heap].size),
                        mib(vk->stats[EM_VK_MEM_DEVICE].reserved),
                        mib(vk->stats[EM_VK_MEM_UPLOAD].reserved),
                        mib(vk->stats[EM_VK_MEM_READBACK].reserved));
        goto done;
    }
    b->size = size;
    vk->stats[kind].reserved += size;
    vk->stats[kind].n_blocks++;
    r = vkBindBufferMemory(vk->dev, b->buf, b->mem, 0);
    if (r != VK_SUCCESS) {
        rc = em_vk_fail(vk, err, r, "binding buffer memory");
        goto done;
    }
    if (kind != EM_VK_MEM_DEVICE || vk->map_device) {
        r = vkMapMemory(vk->dev, b->mem, 0, VK_WHOLE_SIZE, 0, &b->map);
        if (r != VK_SUCCESS) {
            b->map = NULL;
            rc = em_vk_fail(vk, err, r, "mapping memory");
            goto done;
        }
    }
    b->free[0] = (em_vk_range){ 0, size };
    b->n_free = 1;
    b->next = vk->blocks[kind];
    vk->blocks[kind] = b;
    *out = b;
done:
    if (rc)
        block_destroy(vk, b);
    return rc;
}

/* Index of the smallest free range of b that holds size, or UINT32_MAX. */
static uint32_t block_fit(const em_vk_block *b, VkDeviceSize size)
{
    uint32_t best = UINT32_MAX;
    for (uint32_t i = 0; i < b->n_free; i++)
        if (b->free[i].size >= size && (best == UINT32_MAX || b->free[i].size < b->free[best].size))
            best = i;
    return best;
}

/* Take `size` (a multiple of the alignment) from free range i of b. */
static VkDeviceSize block_take(em_vk_block *b, uint32_t i, VkDeviceSize size)
{
    VkDeviceSize off = b->free[i].off;
    b->free[i].off += size;
    b->free[i].size -= size;
    if (b->free[i].size == 0) {
        memmove(&b->free[i], &b->free[i + 1], (b->n_free - i - 1) * sizeof *b->free);
        b->n_free--;
    }
    b->used += size;
    b->n_allocs++;
    return off;
}

/* Return [off, off+size) to the free list, coalescing. false on a double
 * free (the range overlaps free space) or when the list cannot grow. */
static bool block_give(em_vk_block *b, VkDeviceSize off, VkDeviceSize size)
{
    uint32_t i = 0;
    while (i < b->n_free && b->free[i].off < off)
        i++;
    if ((i > 0 && b->free[i - 1].off + b->free[i - 1].size > off) ||
        (i < b->n_free && off + size > b->free[i].off) || off + size > b->size)
        return false;
    bool join_prev = i > 0 && b->free[i - 1].off + b->free[i - 1].size == off;
    bool join_next = i < b->n_free && off + size == b->free[i].off;
    if (join_prev && join_next) {
        b->free[i - 1].size += size + b->free[i].size;
        memmove(&b->free[i], &b->free[i + 1], (b->n_free - i - 1) * sizeof *b->free);
        b->n_free--;
    } else if (join_prev) {
        b->free[i - 1].size += size;
    } else if (join_next) {
        b->free[i].off = off;
        b->free[i].size += size;
    } else {
        if (b->n_free == b->cap_free) {
            em_vk_range *nf = realloc(b->free, 2 * b->cap_free * sizeof *nf);
            if (!nf)
                return false;
            b->free = nf;
            b->cap_free *= 2;
        }
        memmove(&b->free[i + 1], &b->free[i], (b->n_free - i) * sizeof *b->free);
        b->free[i] = (em_vk_range){ off, size };
        b->n_free++;
    }
    b->used -= size;
    b->n_allocs--;
    return true;
}

static void block_unlink(em_vk *vk, em_vk_block *b)
{
    for (em_vk_block **pp = &vk->blocks[b->kind]; *pp; pp = &(*pp)->next) {
        if (*pp == b) {
            *pp = b->next;
            break;
        }
    }
}

/* ---- allocation ------------------------------------------------------- */

int em_vk_alloc(em_vk *vk, em_vk_mem_kind kind, VkDeviceSize size, em_vk_buf *out,
                em_err *err)
{
    int rc = 0;
    bool locked = false;
    memset(out, 0, sizeof *out);
    if ((unsigned)kind >= EM_VK_MEM_KINDS || size == 0) {
        rc = em_err_set(err, EM_EINVAL, "vulkan: alloc: bad kind %d or size %llu", (int)kind,
                        (unsigned long long)size);
        goto done;
    }
    rc = em_vk_check_lost(vk, err);
    if (rc)
        goto done;
    VkDeviceSize res = align_up(size, vk->align);
    if (res > vk->info.max_alloc || res < size) {
        rc = em_err_set(err, EM_ENOMEM, "vulkan: %s allocation of %.1f MiB exceeds the "
                        "device's maxMemoryAllocationSize (%.1f MiB)", em_vk_mem_kind_name(kind),
                        mib(size), mib(vk->info.max_alloc));
        goto done;
    }
    pthread_mutex_lock(&vk->lock);
    locked = true;
    em_vk_block *b = NULL;
    VkDeviceSize off = 0;
    uint32_t fit = UINT32_MAX;
    if (res > vk->block_size) {
        rc = block_create(vk, kind, res, true, &b, err);
        if (rc)
            goto done;
        fit = 0;
    } else {
        /* best fit over all shared blocks of the kind */
        for (em_vk_block *o = vk->blocks[kind]; o; o = o->next) {
            uint32_t i = o->dedicated ? UINT32_MAX : block_fit(o, res);
            if (i != UINT32_MAX && (!b || o->free[i].size < b->free[fit].size)) {
                b = o;
                fit = i;
            }
        }
        if (!b) {
            rc = block_create(vk, kind, vk->block_size, false, &b, err);
            if (rc)
                goto done;
            fit = 0;
        }
    }
    off = block_take(b, fit, res);
    vk->stats[kind].used += size;
    vk->stats[kind].n_allocs++;
    out->buf = b->buf;
    out->off = off;
    out->size = size;
    out->map = b->map ? (char *)b->map + off : NULL;
    out->kind = kind;
    out->block_ = b;
done:
    if (locked)
        pthread_mutex_unlock(&vk->lock);
    return rc;
}

void em_vk_free(em_vk *vk, em_vk_buf *buf)
{
    if (!vk || !buf || !buf->block_) {
        if (buf)
            memset(buf, 0, sizeof *buf);
        return;
    }
    em_vk_block *b = buf->block_;
    pthread_mutex_lock(&vk->lock);
    VkDeviceSize res = align_up(buf->size, vk->align);
    if (!block_give(b, buf->off, res)) {
        fprintf(stderr, "ember: vulkan: em_vk_free: range %llu+%llu freed twice (ignored)\n",
                (unsigned long long)buf->off, (unsigned long long)buf->size);
        goto done;
    }
    vk->stats[b->kind].used -= buf->size;
    vk->stats[b->kind].n_allocs--;
    if (b->n_allocs == 0) {
        /* keep one empty shared block per kind as a spare */
        int empty = 0;
        for (em_vk_block *o = vk->blocks[b->kind]; o; o = o->next)
            empty += !o->dedicated && o->n_allocs == 0;
        if (b->dedicated || empty > 1) {
            block_unlink(vk, b);
            block_destroy(vk, b);
        }
    }
done:
    pthread_mutex_unlock(&vk->lock);
    memset(buf, 0, sizeof *buf);
}

em_vk_buf em_vk_buf_view(const em_vk_buf *b, VkDeviceSize off, VkDeviceSize size)
{
    em_vk_buf v = *b;
    if (off > b->size)
        off = b->size;
    if (size > b->size - off)
        size = b->size - off;
    v.off = b->off + off;
    v.size = size;
    v.map = b->map ? (char *)b->map + off : NULL;
    v.block_ = NULL;
    return v;
}

void em_vk_mem_stats_get(em_vk *vk, em_vk_mem_kind kind, em_vk_mem_stats *st)
{
    memset(st, 0, sizeof *st);
    if ((unsigned)kind >= EM_VK_MEM_KINDS)
        return;
    pthread_mutex_lock(&vk->lock);
    *st = vk->stats[kind];
    pthread_mutex_unlock(&vk->lock);
}

void em_vk_mem_destroy_all(em_vk *vk)
{
    for (int k = 0; k < EM_VK_MEM_KINDS; k++) {
        while (vk->blocks[k]) {
            em_vk_block *b = vk->blocks[k];
            vk->blocks[k] = b->next;
            block_destroy(vk, b);
        }
    }
    memset(&vk->stage_up, 0, sizeof vk->stage_up);
    memset(&vk->stage_down, 0, sizeof vk->stage_down);
}

/* ---- progress --------------------------------------------------------- */

static void progress_draw(em_vk_progress *p, double now)
{
    const int width = 30;
    double frac = p->total ? (double)p->done / (double)p->total : 1.0;
    if (frac > 1.0)
        frac = 1.0;
    int fill = (int)(frac * width + 0.5);
    char bar[64];
    for (int i = 0; i < width; i++)
        bar[i] = i < fill ? '#' : '.';
    bar[width] = '\0';
    double dt = now - p->t0;
    double rate = dt > 0 ? (double)p->done / dt / 1e6 : 0;
    fprintf(stderr, "\r%s [%s] %3d%% %.0f/%.0f MiB %.0f MB/s\033[K", p->label ? p->label : "",
            bar, (int)(frac * 100), mib(p->done), mib(p->total), rate);
    fflush(stderr);
    p->t_drawn = now;
}

void em_vk_progress_begin(em_vk_progress *p, const char *label, uint64_t total)
{
    memset(p, 0, sizeof *p);
    p->label = label;
    p->total = total;
    p->t0 = em_vk_now();
    p->draw = total >= EM_VK_PROGRESS_MIN && isatty(STDERR_FILENO);
    if (p->draw)
        progress_draw(p, p->t0);
}

void em_vk_progress_add(em_vk_progress *p, uint64_t n)
{
    if (!p)
        return;
    p->done += n;
    if (!p->draw)
        return;
    double now = em_vk_now();
    if (now - p->t_drawn >= 0.1)
        progress_draw(p, now);
}

void em_vk_progress_end(em_vk_progress *p)
{
    if (!p || !p->draw)
        return;
    progress_draw(p, em_vk_now());
    fputc('\n', stderr);
    p->draw = false;
}

/* ---- transfers -------------------------------------------------------- */

static int check_range(const em_vk_buf *b, VkDeviceSize off, size_t n, const char *what,
                       em_err *err)
{
    if (!b || !b->buf)
        return em_err_set(err, EM_EINVAL, "vulkan: %s: no buffer", what);
    if (off > b->size || n > b->size - off)
        return em_err_set(err, EM_ERANGE, "vulkan: %s: bytes %llu..%llu outside the %llu-byte "
                          "buffer", what, (unsigned long long)off,
                          (unsigned long long)(off + n), (unsigned long long)b->size);
    return 0;
}

/* Staging buffer and the two transfer command buffers (xfer_lock held). */
static int stage_ready(em_vk *vk, bool up, em_err *err)
{
    int rc = 0;
    em_vk_buf *s = up ? &vk->stage_up : &vk->stage_down;
    if (!s->buf) {
        size_t bytes = vk->opts.staging_bytes ? vk->opts.staging_bytes : EM_VK_STAGING_BYTES;
        bytes = (bytes + 7) / 8 * 8;
        rc = em_vk_alloc(vk, up ? EM_VK_MEM_UPLOAD : EM_VK_MEM_READBACK, bytes, s, err);
        if (rc)
            goto done;
    }
    for (int i = 0; i < 2 && !rc; i++)
        if (!vk->xfer[i])
            rc = em_vk_cmd_create(vk, 0, &vk->xfer[i], err);
done:
    return rc;
}

typedef struct xfer_slot {
    char        *host;     /* download: where the half goes after the wait */
    size_t       n;
    bool         pending;
} xfer_slot;

/* Copy through the staging buffer in halves, one half filling while the
 * other is copied. up: host -> dev; else dev -> host. */
static int staged(em_vk *vk, bool up, const em_vk_buf *dev, VkDeviceSize off, char *host,
                  size_t n, em_vk_progress *prog, em_err *err)
{
    int rc;
    xfer_slot slot[2] = { { 0 }, { 0 } };
    pthread_mutex_lock(&vk->xfer_lock);
    rc = stage_ready(vk, up, err);
    if (rc)
        goto done;
    em_vk_buf *stage = up ? &vk->stage_up : &vk->stage_down;
    size_t half = (size_t)stage->size / 2 / 4 * 4;
    size_t done_bytes = 0;
    for (int i = 0; done_bytes < n; i ^= 1) {
        em_vk_cmd *c = vk->xfer[i];
        if (slot[i].pending) {
            slot[i].pending = false;
            rc = em_vk_cmd_wait(c, err);
            if (rc)
                goto done;
            if (!up) {
                memcpy(slot[i].host, (char *)stage->map + (size_t)i * half, slot[i].n);
                em_vk_progress_add(prog, slot[i].n);
            }
        }
        size_t chunk = n - done_bytes < half ? n - done_bytes : half;
        em_vk_buf part = em_vk_buf_view(stage, (VkDeviceSize)i * half, chunk);
        if (up)
            memcpy(part.map, host + done_bytes, chunk);
        if ((rc = em_vk_cmd_begin(c, err)))
            goto done;
        if (up)
            em_vk_cmd_copy(c, &part, 0, dev, off + done_bytes, chunk);
        else
            em_vk_cmd_copy(c, dev, off + done_bytes, &part, 0, chunk);
        if ((rc = em_vk_cmd_end(c, err)) || (rc = em_vk_cmd_submit(c, err)))
            goto done;
        slot[i] = (xfer_slot){ host + done_bytes, chunk, true };
        if (up)
            em_vk_progress_add(prog, chunk);
        done_bytes += chunk;
    }
    for (int i = 0; i < 2; i++) {
        if (!slot[i].pending)
            continue;
        slot[i].pending = false;
        rc = em_vk_cmd_wait(vk->xfer[i], err);
        if (rc)
            goto done;
        if (!up) {
            memcpy(slot[i].host, (char *)stage->map + (size_t)i * half, slot[i].n);
            em_vk_progress_add(prog, slot[i].n);
        }
    }
done:
    for (int i = 0; i < 2; i++)   /* never leave a copy in flight on error */
        if (slot[i].pending)
            em_vk_cmd_wait(vk->xfer[i], NULL);
    pthread_mutex_unlock(&vk->xfer_lock);
    return rc;
}

/* memcpy in 64 MiB steps so that the progress bar moves. */
static void mapped_copy(char *dst, const char *src, size_t n, em_vk_progress *prog)
{
    const size_t step = 64 * EM_VK_MIB;
    for (size_t d = 0; d < n; d += step) {
        size_t k = n - d < step ? n - d : step;
        memcpy(dst + d, src + d, k);
        em_vk_progress_add(prog, k);
    }
}

int em_vk_upload(em_vk *vk, const em_vk_buf *dst, VkDeviceSize off, const void *src,
                 size_t n, em_vk_progress *prog, em_err *err)
{
    int rc = check_range(dst, off, n, "upload", err);
    if (rc || n == 0)
        return rc;
    if ((rc = em_vk_check_lost(vk, err)))
        return rc;
    if (dst->map) {
        mapped_copy((char *)dst->map + off, src, n, prog);
        return 0;
    }
    return staged(vk, true, dst, off, (char *)(uintptr_t)src, n, prog, err);
}

int em_vk_download(em_vk *vk, const em_vk_buf *src, VkDeviceSize off, void *dst,
                   size_t n, em_vk_progress *prog, em_err *err)
{
    int rc = check_range(src, off, n, "download", err);
    if (rc || n == 0)
        return rc;
    if ((rc = em_vk_check_lost(vk, err)))
        return rc;
    if (src->map) {
        mapped_copy(dst, (const char *)src->map + off, n, prog);
        return 0;
    }
    return staged(vk, false, src, off, dst, n, prog, err);
}
