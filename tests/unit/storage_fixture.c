/* storage_fixture.c — writes a small fixed ledger through the storage API for
 * the CLI test (storage_cli.sh): `storage_fixture PATH a|b` fills PATH with
 * the requests of box a or box b (fixed times in May 2024, UTC);
 * `storage_fixture PATH verify KEY` checks KEY (read from stdin when "-")
 * as ember serve does and prints "ok NAME", "revoked" or "unknown". */
#include <stdio.h>
#include <string.h>

#include "storage/storage.h"

#define T(day, hour) (1714521600000LL + ((day) - 1) * 86400000LL + (hour) * 3600000LL)

typedef struct {
    const char *id;
    int64_t key;
    em_usage_class cls;
    const char *model;
    int64_t received;
    int64_t prompt, cached, completion;
    double ttft, tpot;
    em_usage_status status;
} req;

static const char *const keys_a[] = { "alice", "bob", NULL };
static const char *const keys_b[] = { "carol", "alice", NULL };

static const req box_a[] = {
    { "a1", 1, EM_USAGE_INTERACTIVE, "tiny", T(1, 10), 100, 50, 20, 10, 5, EM_USAGE_COMPLETED },
    { "a2", 1, EM_USAGE_INTERACTIVE, "tiny", T(1, 11), 200, 0, 40, 30, 7, EM_USAGE_COMPLETED },
    { "a3", 2, EM_USAGE_BACKGROUND, "tiny", T(2, 9), 300, 150, 60, 50, 9, EM_USAGE_COMPLETED },
    { "a4", 0, EM_USAGE_INTERACTIVE, "llama, \"q8\"", T(2, 12), 400, 100, 80, 20, 6,
      EM_USAGE_PREEMPTED_COMPLETED },
    { "a5", 2, EM_USAGE_INTERACTIVE, "llama, \"q8\"", T(2, 13), 50, 0, 0, -1, -1,
      EM_USAGE_FAILED },
    { NULL, 0, 0, NULL, 0, 0, 0, 0, 0, 0, 0 },
};

static const req box_b[] = {
    { "b1", 1, EM_USAGE_BACKGROUND, "tiny", T(1, 8), 1000, 500, 100, 40, 8, EM_USAGE_COMPLETED },
    { "b2", 2, EM_USAGE_INTERACTIVE, "llama, \"q8\"", T(2, 20), 100, 100, 100, 15, 4,
      EM_USAGE_COMPLETED },
    { NULL, 0, 0, NULL, 0, 0, 0, 0, 0, 0, 0 },
};

/* `storage_fixture PATH verify KEY`: 0 and "ok NAME", else 1 and why. */
static int verify(const char *path, const char *key_arg)
{
    char key[EM_STORAGE_KEY_MAX + 2] = "";
    if (strcmp(key_arg, "-"))
        snprintf(key, sizeof key, "%s", key_arg);
    else if (fgets(key, sizeof key, stdin))
        key[strcspn(key, "\n")] = 0;
    em_storage_opts o;
    em_storage_opts_init(&o);
    o.path = path;
    o.create = 0;
    em_err err = { 0 };
    em_storage *st = NULL;
    em_key_info info;
    if (em_storage_open(&o, &st, &err)) {
        fprintf(stderr, "storage_fixture: %s\n", err.msg);
        return 2;
    }
    int rc = em_storage_key_verify(st, key, &info, &err);
    em_storage_close(st);
    if (rc == 0)
        printf("ok %s\n", info.name);
    else
        printf("%s\n", rc == EM_ESTATE ? "revoked" : rc == EM_ENOENT ? "unknown" : err.msg);
    return rc ? 1 : 0;
}

int main(int argc, char **argv)
{
    if (argc == 4 && !strcmp(argv[2], "verify"))
        return verify(argv[1], argv[3]);
    if (argc != 3 || (strcmp(argv[2], "a") && strcmp(argv[2], "b"))) {
        fprintf(stderr, "usage: storage_fixture PATH a|b\n");
        return 2;
    }
    int b = argv[2][0] == 'b';
    em_storage_opts o;
    em_storage_opts_init(&o);
    o.path = argv[1];
    em_err err = { 0 };
    em_storage *st = NULL;
    int status = 1;
    if (em_storage_open(&o, &st, &err))
        goto fail;
    for (const char *const *k = b ? keys_b : keys_a; *k; k++) {
        char key[EM_STORAGE_KEY_MAX];
        if (em_storage_key_add(st, *k, EM_USAGE_INTERACTIVE, 0, key, sizeof key, NULL, &err))
            goto fail;
    }
    for (const req *r = b ? box_b : box_a; r->id; r++) {
        em_usage_record rec;
        em_usage_record_init(&rec);
        snprintf(rec.request_id, sizeof rec.request_id, "%s", r->id);
        snprintf(rec.model, sizeof rec.model, "%s", r->model);
        rec.key_id = r->key;
        rec.cls = r->cls;
        rec.received_ms = r->received;
        rec.started_ms = r->received + 100;
        rec.finished_ms = r->received + 2000;
        rec.prompt_tokens = r->prompt;
        rec.cached_tokens = r->cached;
        rec.completion_tokens = r->completion;
        rec.ttft_ms = r->ttft;
        rec.queue_ms = r->ttft >= 0 ? r->ttft / 2 : -1;   /* half of the first token's wait */
        rec.tpot_mean_ms = r->tpot;
        rec.status = r->status;
        if (em_storage_submit(st, &rec)) {
            em_err_set(&err, EM_EIO, "%s: queue refused %s", argv[1], r->id);
            goto fail;
        }
    }
    if (em_storage_flush(st, -1, &err))
        goto fail;
    status = 0;
fail:
    if (status)
        fprintf(stderr, "storage_fixture: %s\n", err.msg);
    em_storage_close(st);
    return status;
}
