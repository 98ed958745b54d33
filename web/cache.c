/* cache.c — the response cache: a deterministic request (greedy, or with a
 * seed) that was answered whole before is answered from SQLite
 * (storage/cache.c) without running the model. The key is everything that
 * shapes the answer — the model's fingerprint, the endpoint, the body less
 * what does not (stream, stream_options, user, cache, priority, model) —
 * through BLAKE2b-256; rows of another model are dropped at start. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <sodium.h>

#include "core/log.h"
#include "core/model/model.h"
#include "web/web_int.h"

void web_cache_open(em_web *w)
{
    const em_hparams *hp = w->o.model ? em_model_hparams(w->o.model) : NULL;
    snprintf(w->cache_model, sizeof w->cache_model, "%s|%llu|%llu|%u", w->model_id,
             w->o.model ? (unsigned long long)em_model_weight_bytes(w->o.model) : 0ull,
             w->o.model ? (unsigned long long)em_model_n_params(w->o.model) : 0ull, hp ? hp->n_vocab : 0);
    uint64_t gone = 0;
    em_err err = { 0 };
    if (w->o.storage && em_storage_cache_retain(w->o.storage, w->cache_model, &gone, &err) == 0 && gone)
        em_log(EM_LOG_INFO, NULL, "serve: the response cache dropped %llu answers of another model",
               (unsigned long long)gone);
}

static void cache_key(const em_web *w, const json_t *req, int chat, unsigned char *key)
{
    json_t *c = json_deep_copy(req);
    static const char *const drop[] = { "stream", "stream_options", "user", "cache", "priority", "model" };
    for (size_t i = 0; i < sizeof drop / sizeof drop[0]; i++)
        json_object_del(c, drop[i]);
    char *text = json_dumps(c, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(c);
    crypto_generichash_state st;
    crypto_generichash_init(&st, NULL, 0, EM_STORAGE_CACHE_KEY);
    crypto_generichash_update(&st, (const unsigned char *)"ember-response-cache-v1", 24);
    crypto_generichash_update(&st, (const unsigned char *)w->cache_model, strlen(w->cache_model) + 1);
    crypto_generichash_update(&st, (const unsigned char *)(chat ? "chat" : "completions"), chat ? 5 : 12);
    if (text)
        crypto_generichash_update(&st, (const unsigned char *)text, strlen(text));
    crypto_generichash_final(&st, key, EM_STORAGE_CACHE_KEY);
    free(text);
}

int web_cache_lookup(em_web *w, const json_t *req, int chat, unsigned char *key, char **cached,
                     const char **finish_reason, double *ms)
{
    *cached = NULL;
    if (!w->o.storage || w->o.response_cache_bytes <= 0)
        return -1;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    cache_key(w, req, chat, key);
    size_t len = 0;
    em_err ce = { 0 };
    if (em_storage_cache_get(w->o.storage, key, w->cache_model, cached, &len, &ce) != 0) {
        w->cache_misses++;
        return 0;
    }
    /* the finish reason of the first choice, for the ledger row (static names) */
    json_t *j = json_loads(*cached, 0, NULL);
    const char *fr = json_string_value(json_object_get(json_array_get(json_object_get(j, "choices"), 0),
                                                       "finish_reason"));
    static const char *const names[] = { "stop", "length", "cancelled", "error" };
    *finish_reason = NULL;
    for (size_t i = 0; fr && i < sizeof names / sizeof names[0]; i++)
        if (strcmp(fr, names[i]) == 0)
            *finish_reason = names[i];
    json_decref(j);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    *ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
    w->cache_hits++;
    return 1;
}

void web_cache_store(em_web *w, const unsigned char *key, const json_t *whole, const char *rid)
{
    if (!w->o.storage)
        return;
    char *text = json_dumps(whole, JSON_COMPACT);
    uint64_t evicted = 0;
    em_err e2 = { 0 };
    if (text && em_storage_cache_put(w->o.storage, key, w->cache_model, text, strlen(text),
                                     w->o.response_cache_bytes, &evicted, &e2) == 0) {
        w->cache_stores++;
        w->cache_evictions += evicted;
    } else if (text) {
        em_log(EM_LOG_WARN, rid, "the response cache could not keep this answer: %s", e2.msg);
    }
    free(text);
}
