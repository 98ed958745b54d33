/* cmd_devices.c — `ember devices`: lists every Vulkan device with what ember
 * chooses kernels by (vendor, driver, type, memory heaps, subgroup sizes,
 * features, limits), marks the one the default selection picks, and with
 * --json prints the same as one JSON object. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/vk/vk.h"
#include "firmware/cli.h"

static const char usage[] =
    "usage: ember devices [--json]\n"
    "  Lists the Vulkan devices and the features ember uses. '*' marks the one\n"
    "  ember picks by default (discrete > integrated > virtual > cpu); choose\n"
    "  another with --device N or EMBER_DEVICE=N.\n";

static void human_bytes(char *buf, size_t cap, uint64_t v)
{
    const double k = 1024.0;
    if (v >= (1ull << 30))
        snprintf(buf, cap, "%.1f GiB", (double)v / (k * k * k));
    else if (v >= (1ull << 20))
        snprintf(buf, cap, "%.0f MiB", (double)v / (k * k));
    else if (v >= (1ull << 10))
        snprintf(buf, cap, "%.0f KiB", (double)v / k);
    else
        snprintf(buf, cap, "%llu B", (unsigned long long)v);
}

static const char *yes(const em_vk_dev_info *d, uint32_t bit)
{
    return (d->features & bit) ? "yes" : "no";
}

static void print_device(const em_vk_dev_info *d, bool is_pick)
{
    char a[32], b[32], c[32];
    printf("%s %d: %s%s\n", is_pick ? "*" : " ", d->index, d->name,
           is_pick ? "   (default)" : "");
    printf("    vendor     %s (0x%04x), device 0x%04x, type %s\n", d->vendor, d->vendor_id,
           d->device_id, d->type_name);
    printf("    driver     %s%s%s, version %s, Vulkan %u.%u.%u\n",
           d->driver_name[0] ? d->driver_name : "?", d->driver_info[0] ? ": " : "",
           d->driver_info, d->driver_version_str, VK_API_VERSION_MAJOR(d->api_version),
           VK_API_VERSION_MINOR(d->api_version), VK_API_VERSION_PATCH(d->api_version));
    for (uint32_t h = 0; h < d->n_heaps; h++) {
        human_bytes(a, sizeof a, d->heaps[h].size);
        printf("    %s heap %u: %s%s%s\n", h ? "          " : "memory    ", h, a,
               d->heaps[h].device_local ? ", device-local" : "",
               d->heaps[h].host_visible ? ", host-visible" : "");
    }
    if (d->unified)
        printf("               unified memory: device buffers are written in place\n");
    printf("    subgroups  size %u", d->subgroup_size);
    if (d->features & EM_VK_F_SG_SIZE_CTL)
        printf(" (%u..%u with size control%s)", d->subgroup_min, d->subgroup_max,
               (d->features & EM_VK_F_FULL_SG) ? ", full subgroups" : "");
    static const struct { uint32_t bit; const char *name; } sg_ops[] = {
        { EM_VK_F_SG_BASIC, "basic" }, { EM_VK_F_SG_VOTE, "vote" },
        { EM_VK_F_SG_ARITH, "arithmetic" }, { EM_VK_F_SG_BALLOT, "ballot" },
        { EM_VK_F_SG_SHUFFLE, "shuffle" }, { EM_VK_F_SG_SHUFREL, "shuffle relative" },
        { EM_VK_F_SG_CLUSTER, "clustered" }, { EM_VK_F_SG_QUAD, "quad" },
    };
    int n_ops = 0;
    for (size_t i = 0; i < sizeof sg_ops / sizeof sg_ops[0]; i++)
        if (d->features & sg_ops[i].bit)
            printf("%s%s", n_ops++ ? ", " : "; compute ops: ", sg_ops[i].name);
    printf("%s\n", n_ops ? "" : "; no subgroup operations in compute shaders");
    printf("    features   16-bit storage %s, 8-bit storage %s, float16 %s, int8 %s, int16 %s,\n"
           "               int64 %s, float64 %s, integer dot product %s%s,\n"
           "               subgroup size control %s, timestamps %s\n",
           yes(d, EM_VK_F_STORAGE16), yes(d, EM_VK_F_STORAGE8), yes(d, EM_VK_F_FLOAT16),
           yes(d, EM_VK_F_INT8), yes(d, EM_VK_F_INT16), yes(d, EM_VK_F_INT64),
           yes(d, EM_VK_F_FLOAT64), yes(d, EM_VK_F_DOT),
           (d->features & EM_VK_F_DOT) ? (d->dot_accel ? " (accelerated)" : " (not accelerated)")
                                       : "",
           yes(d, EM_VK_F_SG_SIZE_CTL), yes(d, EM_VK_F_TIMESTAMPS));
    human_bytes(a, sizeof a, d->max_storage_range);
    human_bytes(b, sizeof b, d->max_alloc);
    human_bytes(c, sizeof c, d->max_shared);
    printf("    limits     storage range %s, allocation %s, shared %s, push constants %u B,\n"
           "               workgroup %u invocations (%u x %u x %u), groups %u x %u x %u,\n"
           "               storage offset alignment %llu, %u storage buffers per stage",
           a, b, c, d->max_push, d->max_wg_invocations, d->max_wg_size[0], d->max_wg_size[1],
           d->max_wg_size[2], d->max_wg_count[0], d->max_wg_count[1], d->max_wg_count[2],
           (unsigned long long)d->storage_align, d->max_storage_buffers);
    if (d->features & EM_VK_F_TIMESTAMPS)
        printf(",\n               timestamps %u bits, %g ns/tick", d->timestamp_bits,
               (double)d->timestamp_period);
    printf("\n    status     %s%s\n", d->unusable[0] ? "unusable: " : "usable",
           d->unusable);
}

static json_t *device_json(const em_vk_dev_info *d, bool is_pick)
{
    json_t *heaps = json_array(), *feat = json_object(), *wgs = json_array(),
           *wgc = json_array();
    for (uint32_t h = 0; h < d->n_heaps; h++)
        json_array_append_new(heaps, json_pack("{s:I, s:b, s:b}", "size",
                                               (json_int_t)d->heaps[h].size, "device_local",
                                               d->heaps[h].device_local, "host_visible",
                                               d->heaps[h].host_visible));
    for (uint32_t b = 1; b < (1u << EM_VK_F_COUNT_); b <<= 1)
        json_object_set_new(feat, em_vk_feature_key(b), json_boolean(d->features & b));
    for (int i = 0; i < 3; i++) {
        json_array_append_new(wgs, json_integer(d->max_wg_size[i]));
        json_array_append_new(wgc, json_integer(d->max_wg_count[i]));
    }
    char api[32];
    snprintf(api, sizeof api, "%u.%u.%u", VK_API_VERSION_MAJOR(d->api_version),
             VK_API_VERSION_MINOR(d->api_version), VK_API_VERSION_PATCH(d->api_version));
    json_t *o = json_pack(
        "{s:i, s:s, s:b, s:s, s:i, s:i, s:s, s:s, s:s, s:s, s:s, s:o, s:b, s:I,"
        " s:{s:i, s:i, s:i}, s:o, s:b, s:b, s:s}",
        "index", d->index, "name", d->name, "default", is_pick, "vendor", d->vendor,
        "vendor_id", (int)d->vendor_id, "device_id", (int)d->device_id, "type", d->type_name,
        "driver_name", d->driver_name, "driver_info", d->driver_info,
        "driver_version", d->driver_version_str, "api_version", api, "heaps", heaps,
        "unified_memory", d->unified, "device_local_bytes", (json_int_t)d->device_local_bytes,
        "subgroup", "size", (int)d->subgroup_size, "min", (int)d->subgroup_min, "max",
        (int)d->subgroup_max, "features", feat, "dot_accelerated", d->dot_accel, "usable",
        !d->unusable[0], "unusable", d->unusable);
    json_t *lim = json_pack(
        "{s:I, s:I, s:I, s:i, s:o, s:o, s:i, s:i, s:i, s:f, s:i}",
        "max_storage_buffer_range", (json_int_t)d->max_storage_range,
        "max_memory_allocation_size", (json_int_t)d->max_alloc,
        "min_storage_buffer_offset_alignment", (json_int_t)d->storage_align,
        "max_compute_workgroup_invocations", (int)d->max_wg_invocations,
        "max_compute_workgroup_size", wgs, "max_compute_workgroup_count", wgc,
        "max_compute_shared_memory_size", (int)d->max_shared,
        "max_push_constants_size", (int)d->max_push,
        "max_storage_buffers_per_stage", (int)d->max_storage_buffers,
        "timestamp_period_ns", (double)d->timestamp_period,
        "timestamp_valid_bits", (int)d->timestamp_bits);
    if (o && lim)
        json_object_set_new(o, "limits", lim);
    else
        json_decref(lim);
    return o;
}

int em_cmd_devices(int argc, char **argv)
{
    int as_json = 0, status = 0;
    em_cli_opt opts[] = {
        { "--json", NULL, EM_OPT_FLAG, &as_json, 0, 0 },
        { NULL, NULL, 0, NULL, 0, 0 },
    };
    int rc = em_cli_parse("devices", argc, argv, opts, NULL, 0, NULL, usage);
    if (rc)
        return rc;
    em_err err = { 0 };
    em_vk_dev_info *devs = NULL;
    json_t *root = NULL;
    int n = 0, pick = -1;
    if ((rc = em_vk_enumerate(&devs, &n, &pick, &err))) {
        status = em_cli_fail_err(&err);
        goto done;
    }
    if (as_json) {
        json_t *arr = json_array();
        for (int i = 0; i < n; i++)
            json_array_append_new(arr, device_json(&devs[i], i == pick));
        root = json_pack("{s:o, s:i}", "devices", arr, "default", pick);
        char *s = root ? json_dumps(root, JSON_INDENT(2)) : NULL;
        if (!s) {
            status = em_cli_fail(1, "devices: out of memory");
            goto done;
        }
        puts(s);
        free(s);
    } else {
        for (int i = 0; i < n; i++) {
            if (i)
                putchar('\n');
            print_device(&devs[i], i == pick);
        }
        if (pick < 0)
            printf("\nno usable device: ember needs Vulkan 1.1 and %s\n",
                   "16-bit storage and subgroup arithmetic in compute shaders");
    }
    if (pick < 0)
        status = em_cli_fail(1, "vulkan: no usable device (see the list above)");
done:
    json_decref(root);
    free(devs);
    return status;
}
