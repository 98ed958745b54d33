/* cmd_serve.c — `ember serve`: load the model onto the device, start the
 * scheduler over the batched forward pass, open the ledger, and serve HTTP
 * and WebSocket on one port until SIGINT/SIGTERM (web/web.h): the first
 * signal drains (new requests refused, running ones finish, --drain-s
 * bounds the wait), a second stops at once; SIGHUP reloads the --config
 * file's keys a running server can change (firmware/config.h). Refuses to
 * listen beyond loopback while the database holds no API key, and to serve
 * at all when the boot self-test (core/gpu/selftest.h) finds the device's
 * kernels wrong. */
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/gpu/forward.h"
#include "core/gpu/selftest.h"
#include "core/log.h"
#include "core/model/model.h"
#include "core/run/kv.h"
#include "core/text/tokenizer.h"
#include "core/vk/vk.h"
#include "firmware/boot.h"
#include "firmware/cli.h"
#include "firmware/config.h"
#include "firmware/library.h"
#include "firmware/notify.h"
#include "scheduler/scheduler.h"
#include "storage/storage.h"
#include "web/web.h"

static const char usage[] =
    "usage: ember serve [--config FILE] [--print-config] [--model PATH] [--draft-model PATH]\n"
    "                   [--speculate N] [--device N] [--host H]\n"
    "                   [--port P] [--db PATH] [--ctx N] [--kv-mb N] [--parallel N] [--kv-type f16|q8_0]\n"
    "                   [--tls-cert PEM --tls-key PEM] [--require-key] [--rate-limit N]\n"
    "                   [--allowed-origins LIST] [--allowed-hosts LIST] [--trusted-proxies LIST]\n"
    "                   [--ping-s S] [--ws-auth-timeout-s S]\n"
    "                   [--drain-s N] [--max-queued N] [--max-queued-interactive N]\n"
    "                   [--max-queued-background N] [--step-tokens N] [--bg-step-ms MS]\n"
    "                   [--aging-ms MS] [--no-prefix-cache] [--max-ws-message BYTES] [--max-body BYTES]\n"
    "                   [--max-upload BYTES]\n"
    "                   [--no-store-content] [--retention-days N] [--response-cache-mb N] [--log-level error|warn|info|debug]\n"
    "                   [--log-format plain|json] [--log-content] [--verbose]\n"
    "  Every setting can also come from the INI file given with --config (firmware/ember.conf\n"
    "  documents each key, docs/config.md); flags win over the file. --print-config prints the\n"
    "  effective configuration with where each value came from and exits. SIGHUP reloads the\n"
    "  file's require_key, rate_limit, allowed_origins, allowed_hosts, trusted_proxies and log\n"
    "  settings.\n"
    "  Serves the model over HTTP and WebSocket on one port: the OpenAI-compatible API\n"
    "  (/v1/chat/completions, /v1/completions, /v1/models, /v1/embeddings, /v1/rerank),\n"
    "  /healthz, /metrics\n"
    "  (Prometheus) and /api/usage (docs/api.md). Default 127.0.0.1:8080 and\n"
    "  ./ember.db (the usage ledger and API keys). Clients on other\n"
    "  machines always need an API key (`ember keys add NAME`); loopback clients too with\n"
    "  --require-key. --host 0.0.0.0 listens on every interface and needs a key in the\n"
    "  database. Behind a reverse proxy, --trusted-proxies names it (addresses, CIDR\n"
    "  blocks): the client is then read from its X-Forwarded-For.\n"
    "  --parallel caps the sequences running at once (default: 16 on a CPU\n"
    "  device, 64 on a GPU, fewer if the KV cache is small); --max-queued how many\n"
    "  requests of each class may wait for one (default 256 interactive, 1024\n"
    "  background; past it: 503 with Retry-After). A streamed answer silent for\n"
    "  --ping-s seconds (default 10: a long prompt) gets an SSE comment, so that proxies\n"
    "  keep the connection. The first SIGINT/SIGTERM drains: new requests get 503,\n"
    "  running ones finish (at most --drain-s seconds, default 30; then they are\n"
    "  cancelled), then it exits 0. A second one stops at once.\n"
    "  GET /ws speaks the WebSocket chat protocol ember.chat.v1 (messages up to\n"
    "  --max-ws-message bytes, default 1 MiB; a socket that must authenticate and has\n"
    "  not within --ws-auth-timeout-s seconds, default 10, is closed); its chats are kept as conversations\n"
    "  (/api/conversations) unless --no-store-content. Before the port opens the\n"
    "  model's kernels are checked on the device against the CPU reference (`ember\n"
    "  selftest`); if they are wrong ember refuses to serve. The pipeline caches are\n"
    "  kept beside the database.\n"
    "  Speculative decoding: --speculate N drafts up to N (1..8) tokens a step for\n"
    "  requests that do not say, checked by the model at once (the output stays the\n"
    "  model's); drafts come from --draft-model (a smaller model with the same\n"
    "  vocabulary, loaded beside the model; N then defaults to 4), else by prompt lookup.\n";

static em_web *volatile the_web;
static em_notify *volatile the_notify;   /* systemd's side (notify.c): NULL when not under it */
static volatile sig_atomic_t signals_seen;

static void on_signal(int sig)
{
    if (!the_web)
        return;
    if (sig == SIGHUP) {   /* the service loop calls reload() */
        em_web_reload(the_web);
        return;
    }
    if (signals_seen++ == 0) {
        em_web_drain(the_web);
        em_notify_stopping(the_notify);   /* STOPPING=1 */
    } else
        em_web_stop(the_web);
}

static int is_loopback_host(const char *h)
{
    return strcmp(h, "localhost") == 0 || strncmp(h, "127.", 4) == 0 || strcmp(h, "::1") == 0;
}

/* The URLs a browser on the LAN would use: every IPv4 address of the box. */
static void print_urls(const char *host, int port, const char *scheme)
{
    int any = strcmp(host, "0.0.0.0") == 0 || strcmp(host, "::") == 0;
    if (!any) {
        printf(strchr(host, ':') ? "ember: listening on %s://[%s]:%d/\n" : "ember: listening on %s://%s:%d/\n",
               scheme, host, port);
        return;
    }
    struct ifaddrs *ifs = NULL, *i;
    printf("ember: listening on every interface, port %d:\n", port);
    if (getifaddrs(&ifs) == 0) {
        for (i = ifs; i; i = i->ifa_next) {
            if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || !(i->ifa_flags & IFF_UP))
                continue;
            char a[INET_ADDRSTRLEN];
            inet_ntop(AF_INET, &((struct sockaddr_in *)i->ifa_addr)->sin_addr, a, sizeof a);
            printf("  %s://%s:%d/\n", scheme, a, port);
        }
        freeifaddrs(ifs);
    }
}

int em_cmd_serve(int argc, char **argv)
{
    em_config *cfg = NULL;
    int print_config = 0;
    int rc = em_config_load(argc, argv, usage, &cfg, &print_config);
    if (rc)
        return rc;
    if (print_config) {
        em_config_print(cfg);
        em_config_free(cfg);
        return 0;
    }
    em_config_apply_log(cfg);
    signal(SIGHUP, SIG_IGN);   /* a reload asked while loading must not end the process */
    /* a file-size limit reached (RLIMIT_FSIZE) is a failed write (EFBIG) the
     * ledger rides out as it does a full disk, not the end of the process */
    signal(SIGXFSZ, SIG_IGN);
    const char *model_path = em_config_str(cfg, EM_CFG_MODEL_PATH)[0] ? em_config_str(cfg, EM_CFG_MODEL_PATH) : NULL;
    const char *host = em_config_str(cfg, EM_CFG_HOST), *db = em_config_str(cfg, EM_CFG_DB);
    const char *kv_name = em_config_str(cfg, EM_CFG_KV_TYPE);
    long ctx = em_config_int(cfg, EM_CFG_CONTEXT), kv_mb = em_config_int(cfg, EM_CFG_KV_MB);
    long parallel = em_config_int(cfg, EM_CFG_PARALLEL);
    em_err err = { 0 };
    const char *tls_cert = em_config_str(cfg, EM_CFG_TLS_CERT), *tls_key = em_config_str(cfg, EM_CFG_TLS_KEY);
    if ((rc = em_config_check_tls(cfg))) {
        em_config_free(cfg);
        return rc;
    }
    uint32_t kv_type;
    if (em_fwd_kv_type_parse(kv_name, &kv_type, &err)) {
        em_config_free(cfg);
        return em_cli_fail(2, "serve: %s", err.msg);
    }
    char default_path[4096];
    if (!model_path) {
        if (em_cli_default_model(default_path, sizeof default_path, &err)) {
            em_config_free(cfg);
            return em_cli_fail(2, "serve: %s", err.msg);
        }
        model_path = default_path;
        em_log(EM_LOG_INFO, NULL, "using model %s", model_path);
    } else {   /* a file, or a model of the library by name */
        if (em_library_resolve(em_config_str(cfg, EM_CFG_MODELS_DIR), model_path, default_path, sizeof default_path,
                               &err)) {
            em_config_free(cfg);
            return em_cli_fail(2, "serve: %s", err.msg);
        }
        model_path = default_path;
    }

    em_model *m = NULL;
    em_tokenizer *tok = NULL;
    em_storage *st = NULL;
    em_vk *vk = NULL;
    em_fwd *fwd = NULL, *dfwd = NULL;
    em_model *dm = NULL;
    em_tokenizer *dtok = NULL;
    em_sched *s = NULL;
    em_web *w = NULL;
    em_notify *nt = NULL;
    int status = 0;
    struct sigaction sa, old_int, old_term, old_hup;
    em_config_reload_ctx rctx = { cfg, argc, argv };
    int handlers = 0;
    em_web_boot boot = { .n = 0 };
    em_boot_device dev;
    em_selftest_report selftest;

    /* the database first: a refusal to start should cost no model load */
    em_boot_begin();
    em_storage_opts so;
    em_storage_opts_init(&so);
    so.path = db;
    so.store_content = (int)em_config_int(cfg, EM_CFG_STORE_CONTENT);
    so.retention_days = (int)em_config_int(cfg, EM_CFG_RETENTION_DAYS);
    if ((rc = em_storage_open(&so, &st, &err))) {
        status = em_cli_fail_err(&err);
        goto done;
    }
    if (!is_loopback_host(host)) {
        em_key_info *keys = NULL;
        size_t n = 0, active = 0;
        if (em_storage_key_list(st, &keys, &n, &err) == 0)
            for (size_t i = 0; i < n; i++)
                active += keys[i].revoked_ms == 0;
        free(keys);
        if (!active) {
            status = em_cli_fail(2, "serve: host %s would let other machines in, but %s holds no API key: "
                                 "make one with `ember keys add NAME --db %s` (clients then send it as "
                                 "\"Authorization: Bearer KEY\")", host, db, db);
            goto done;
        }
    }
    em_boot_end(&boot, "database");
    if ((status = em_cli_open_model("serve", model_path, &m, &tok)))
        goto done;
    em_boot_guard_mapping(m);   /* a truncated model file: a clear exit, not a crash */
    em_boot_end(&boot, "model");
    /* a draft model (speculative decoding) must share the vocabulary: checked before the device */
    const char *draft_path = em_config_str(cfg, EM_CFG_DRAFT_MODEL);
    if (draft_path[0]) {
        if ((status = em_cli_open_model("serve", draft_path, &dm, &dtok)))
            goto done;
        em_boot_guard_mapping(dm);
        if ((rc = em_cli_same_vocab(tok, dtok, &err))) {
            status = em_cli_fail(2, "serve: the draft model %s cannot draft for %s: %s", draft_path, model_path,
                                 err.msg);
            goto done;
        }
    }
    const em_hparams *hp = em_model_hparams(m);
    uint32_t n_ctx = ctx > 0 ? (uint32_t)ctx : (hp->n_ctx_train < 4096 ? hp->n_ctx_train : 4096);
    if (hp->encoder && n_ctx > hp->n_pos) {   /* (it has no rows for positions past its learned ones) */
        em_log(EM_LOG_WARN, NULL, "an encoder's context is its %u learned positions, not %u", hp->n_pos, n_ctx);
        n_ctx = hp->n_pos;
    } else if (n_ctx > hp->n_ctx_train)
        em_log(EM_LOG_WARN, NULL, "a %u-token context is longer than the %u tokens the model was trained for; "
               "text past position %u is likely to degrade", n_ctx, hp->n_ctx_train, hp->n_ctx_train);
    em_vk_opts vo = EM_VK_OPTS_INIT;
    vo.device = (int)em_config_int(cfg, EM_CFG_DEVICE);   /* -1: EMBER_DEVICE, else the best */
    char pipeline_cache[4200];
    em_boot_caches(db, pipeline_cache, sizeof pipeline_cache);
    vo.cache_path = pipeline_cache;
    if ((rc = em_vk_create(&vo, &vk, &err))) {
        status = em_cli_fail_err(&err);
        goto done;
    }
    em_boot_end(&boot, "device");
    int cpu_device = em_vk_info(vk)->type == VK_PHYSICAL_DEVICE_TYPE_CPU;
    uint32_t seqs = parallel > 0 ? (uint32_t)parallel : cpu_device ? EM_SERVE_PARALLEL_CPU : EM_SERVE_PARALLEL_GPU;
    uint32_t T = (uint32_t)em_config_int(cfg, EM_CFG_STEP_TOKENS);   /* tokens per step: prompt chunks and decodes */
    uint32_t n_blocks_w = 0, blocks = em_fwd_kv_blocks(vk, m, kv_type, (uint64_t)kv_mb, seqs, n_ctx, T, &n_blocks_w);
    uint32_t min_blocks = (n_ctx + EM_KV_BLOCK - 1) / EM_KV_BLOCK;
    if (blocks < min_blocks) {
        status = em_cli_fail(1, "serve: the KV cache holds %u blocks, fewer than one %u-token context "
                             "needs (%u): give --kv-mb more, or a smaller --ctx", blocks, n_ctx, min_blocks);
        goto done;
    }
    if (parallel <= 0 && blocks / min_blocks < seqs / 4 && blocks / min_blocks * 4 < seqs)
        seqs = blocks / min_blocks * 4 > 1 ? blocks / min_blocks * 4 : 1;
    /* logit rows: one per sequence; speculation's drafts take the rows of
     * sequences not running (a full server does not speculate) */
    if (n_blocks_w)   /* (the sequences may have been cut to what the main pool holds) */
        n_blocks_w = seqs * em_fwd_window_blocks(hp, T, n_ctx);
    em_fwd_opts fo = { .max_tokens = T, .max_seqs = seqs, .max_ctx = n_ctx, .n_blocks = blocks,
                       .n_blocks_window = n_blocks_w, .max_logits = seqs, .kv_type = kv_type };
    if ((rc = em_fwd_create(vk, m, &fo, &fwd, &err))) {
        status = em_cli_fail_err(&err);
        goto done;
    }
    em_boot_end(&boot, "weights");
    /* the known-answer check of the kernels this model uses, on this device,
     * before the scheduler owns the KV pool; it also builds every pipeline
     * a request will use, and the cache keeps them for the next boot */
    /* (an encoder's: its pooled rows against core/run/encode.c) */
    if ((rc = em_selftest_run(fwd, m, &selftest, &err))) {
        status = em_cli_fail(1, "serve: the self-test could not run on %s: %s", em_vk_info(vk)->name, err.msg);
        goto done;
    }
    if (!selftest.ok) {
        status = em_cli_fail(1, "serve: self-test failed on %s (%s, driver %s): %s; refusing to serve wrong "
                             "numbers (`ember selftest` shows every stage)", em_vk_info(vk)->name,
                             em_vk_info(vk)->type_name, em_vk_info(vk)->driver_info, selftest.failure);
        goto done;
    }
    em_vk_pipe_cache_save(vk);
    boot.selftest = &selftest;
    em_boot_end(&boot, "selftest");
    /* a draft model for speculative decoding: the same vocabulary, its own
     * forward pass and KV pool on the same device (enough blocks for the
     * sequences that speculate at once), self-tested like the model */
    em_sched_backend dbe;
    em_fwd_opts dfo = { 0 };
    if (dm) {
        uint32_t dseqs = seqs < EM_SCHED_SPEC_MAX_SEQS ? seqs : EM_SCHED_SPEC_MAX_SEQS;
        uint32_t dblocks = (dseqs + 1) * min_blocks;
        dfo = (em_fwd_opts){ .max_tokens = T, .max_seqs = seqs, .max_ctx = n_ctx, .n_blocks = dblocks,
                             .n_blocks_window = seqs * em_fwd_window_blocks(em_model_hparams(dm), T, n_ctx),
                             .max_logits = dseqs, .kv_type = kv_type };
        em_selftest_report drep;
        if ((rc = em_fwd_create(vk, dm, &dfo, &dfwd, &err)) || (rc = em_selftest_run(dfwd, dm, &drep, &err))) {
            status = em_cli_fail(1, "serve: the draft model %s: %s", draft_path, err.msg);
            goto done;
        }
        if (!drep.ok) {
            status = em_cli_fail(1, "serve: the draft model %s fails the self-test on %s: %s", draft_path,
                                 em_vk_info(vk)->name, drep.failure);
            goto done;
        }
        em_sched_backend_gpu(dfwd, vk, em_model_hparams(dm)->n_vocab, T, dseqs, seqs, n_ctx, dblocks, &dbe);
        em_boot_end(&boot, "draft model");
    }
    em_sched_backend be;
    em_sched_backend_gpu(fwd, vk, hp->n_vocab, T, seqs, seqs, n_ctx, blocks, &be);
    /* a device lost or a kernel failure mid-step: the scheduler fails what
     * ran, then the backend makes device and forward pass again (boot.c) */
    dev.vk = &vk;
    dev.fwd = &fwd;
    dev.m = m;
    dev.vo = vo;
    dev.fo = fo;
    dev.dfwd = dfwd ? &dfwd : NULL;
    dev.dm = dm;
    dev.dfo = dfo;
    em_sched_backend_gpu_recovery(&be, em_boot_rebuild, &dev);
    if (dfwd)
        em_sched_backend_gpu_recovery(&dbe, em_boot_rebuild_draft, &dev);
    em_sched_opts sco;
    em_sched_opts_init(&sco);
    sco.step_tokens = T;
    /* past them a request is answered 503 with Retry-After */
    sco.max_waiting[EM_CLASS_INTERACTIVE] = (uint32_t)em_config_int(cfg, EM_CFG_MAX_QUEUED_INTERACTIVE);
    sco.max_waiting[EM_CLASS_BACKGROUND] = (uint32_t)em_config_int(cfg, EM_CFG_MAX_QUEUED_BACKGROUND);
    sco.bg_step_ms = em_config_float(cfg, EM_CFG_BG_STEP_MS);
    sco.aging_ms = em_config_float(cfg, EM_CFG_AGING_MS);
    sco.prefix_cache = (int)em_config_int(cfg, EM_CFG_PREFIX_CACHE);
    sco.speculate = (uint32_t)em_config_int(cfg, EM_CFG_SPECULATE);
    if (dfwd) {
        sco.draft = &dbe;
        if (!sco.speculate)   /* a draft model is there to draft: 4 tokens unless told */
            sco.speculate = 4;
    }
    if ((rc = em_sched_create(&sco, &be, tok, &s, &err))) {
        status = em_cli_fail_err(&err);
        goto done;
    }
    char device[512];
    snprintf(device, sizeof device, "%s (%s)", em_vk_info(vk)->name, em_vk_info(vk)->type_name);
    /* the model's name for /v1/models: the file name without .gguf */
    char model_id[256];
    const char *base = strrchr(model_path, '/');
    snprintf(model_id, sizeof model_id, "%s", base ? base + 1 : model_path);
    char *dot = strstr(model_id, ".gguf");
    if (dot && dot[5] == 0)
        *dot = 0;

    em_web_opts wo;
    em_web_opts_init(&wo);
    wo.host = host;
    wo.port = (int)em_config_int(cfg, EM_CFG_PORT);
    wo.sched = s;
    wo.model = m;
    wo.tok = tok;
    wo.storage = st;
    wo.model_id = model_id;
    wo.device = device;
    wo.n_ctx = n_ctx;
    /* an encoder runs each sequence whole in one step */
    wo.embed_max_tokens = hp->encoder ? (T < n_ctx ? T : n_ctx) : n_ctx;
    wo.parallel = seqs;
    wo.require_key = (int)em_config_int(cfg, EM_CFG_REQUIRE_KEY);
    wo.rate_limit_per_min = (int32_t)em_config_int(cfg, EM_CFG_RATE_LIMIT);
    wo.allowed_origins = em_config_str(cfg, EM_CFG_ALLOWED_ORIGINS);
    wo.allowed_hosts = em_config_str(cfg, EM_CFG_ALLOWED_HOSTS);
    wo.trusted_proxies = em_config_str(cfg, EM_CFG_TRUSTED_PROXIES);
    wo.tls_cert = tls_cert[0] ? tls_cert : NULL;
    wo.tls_key = tls_key[0] ? tls_key : NULL;
    wo.drain_s = (uint32_t)em_config_int(cfg, EM_CFG_DRAIN_S);
    wo.max_ws_message = (size_t)em_config_int(cfg, EM_CFG_MAX_WS_MESSAGE);
    wo.max_body = (size_t)em_config_int(cfg, EM_CFG_MAX_BODY);
    wo.max_upload = (size_t)em_config_int(cfg, EM_CFG_MAX_UPLOAD);
    wo.response_cache_bytes = (int64_t)em_config_int(cfg, EM_CFG_RESPONSE_CACHE_MB) << 20;
    wo.ping_s = em_config_float(cfg, EM_CFG_PING_S);
    wo.ws_auth_timeout_s = em_config_float(cfg, EM_CFG_WS_AUTH_TIMEOUT_S);
    wo.on_reload = em_config_serve_reload;
    wo.reload_ctx = &rctx;
    wo.boot = &boot;
    if ((rc = em_web_create(&wo, &w, &err))) {
        status = em_cli_fail_err(&err);
        goto done;
    }
    em_boot_end(&boot, "port");
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    sigaction(SIGHUP, &sa, &old_hup);
    signal(SIGPIPE, SIG_IGN);
    handlers = 1;
    signals_seen = 0;
    the_web = w;
    /* the port is bound, SIGTERM drains: READY=1, then STATUS= and the watchdog (notify.c) */
    if ((rc = em_notify_start(s, w, model_id, &nt, &err))) {
        status = em_cli_fail_err(&err);
        goto done;
    }
    the_notify = nt;
    em_fwd_stats fst;
    em_fwd_get_stats(fwd, &fst);
    em_log(EM_LOG_INFO, NULL, "serve: %s on %s, %s | context %u, %u sequences at once, KV cache %u blocks (%.0f MiB, "
           "%s)%s", model_id, device, em_fwd_variant(fwd), n_ctx, seqs, blocks, (double)fst.kv_bytes / (1 << 20),
           em_fwd_kv_type_name(kv_type), n_blocks_w ? ", the sliding-window layers' K/V for the last window only" : "");
    print_urls(host, em_web_port(w), wo.tls_cert ? "https" : "http");
    fflush(stdout);
    if ((rc = em_web_run(w)))
        status = em_cli_fail(1, "serve: the service loop failed");
    em_log(EM_LOG_INFO, NULL, "serve: stopping");
done:
    the_web = NULL;
    if (handlers) {
        sigaction(SIGINT, &old_int, NULL);
        sigaction(SIGTERM, &old_term, NULL);
        sigaction(SIGHUP, &old_hup, NULL);
    }
    the_notify = NULL;
    em_notify_stop(nt);         /* STOPPING=1 unless the drain sent it */
    em_web_destroy(w);          /* closes connections: their requests are cancelled */
    em_sched_destroy(s);        /* finishes what is left */
    em_fwd_destroy(dfwd);
    em_fwd_destroy(fwd);
    em_vk_destroy(vk);
    em_tokenizer_destroy(dtok);
    em_model_close(dm);
    em_storage_close(st);       /* commits the last ledger rows */
    em_tokenizer_destroy(tok);
    em_model_close(m);
    em_config_free(cfg);
    return status;
}
