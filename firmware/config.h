/* config.h — `ember serve`'s configuration: the INI file given with
 * --config (read with inih; every key documented in firmware/ember.conf),
 * the command-line flags that override it, defaults under both, and where
 * each effective value came from (default, file:line, flag) for
 * --print-config and for SIGHUP's reload (what changed, what needs a
 * restart).
 *
 * Errors. An unknown section or key, a bad value, a duplicate key or
 * section, a line inih cannot read: EM_EINVAL (EM_ENOENT for a missing
 * file) with "FILE:LINE: ..." in err, before anything starts. A bad flag:
 * the same, naming the flag.
 *
 * Ownership. An em_config owns every string it holds (em_config_free);
 * the em_config_* getters return pointers that live as long as it. argv is
 * borrowed for the duration of each call. */
#ifndef EM_CONFIG_H
#define EM_CONFIG_H

#include <stdint.h>

#include "core/err.h"

/* id, section, key, kind, min, max, choices, flag, SIGHUP applies it, default */
#define EM_CONFIG_KEYS(X)                                                                              \
    X(MODEL_PATH, "model", "path", STR, 0, 0, NULL, "--model", 0, "")                                 \
    X(DEVICE, "model", "device", INT, -1, 255, NULL, "--device", 0, "-1")                             \
    X(CONTEXT, "model", "context", INT, 16, 1 << 20, NULL, "--ctx", 0, "0")                           \
    X(KV_MB, "model", "kv_mb", INT, 1, 1 << 24, NULL, "--kv-mb", 0, "0")                              \
    X(KV_TYPE, "model", "kv_type", ENUM, 0, 0, "f16|q8_0", "--kv-type", 0, "f16")                     \
    X(DRAFT_MODEL, "model", "draft_model", STR, 0, 0, NULL, "--draft-model", 0, "")                  \
    X(MODELS_DIR, "models", "dir", STR, 0, 0, NULL, "--models-dir", 0, "models")                      \
    X(HOST, "server", "host", STR, 0, 0, NULL, "--host", 0, "127.0.0.1")                              \
    X(PORT, "server", "port", INT, 0, 65535, NULL, "--port", 0, "8080")                               \
    X(TLS_CERT, "server", "tls_cert", STR, 0, 0, NULL, "--tls-cert", 0, "")                          \
    X(TLS_KEY, "server", "tls_key", STR, 0, 0, NULL, "--tls-key", 0, "")                             \
    X(ALLOWED_ORIGINS, "server", "allowed_origins", STR, 0, 0, NULL, "--allowed-origins", 1, "")      \
    X(ALLOWED_HOSTS, "server", "allowed_hosts", STR, 0, 0, NULL, "--allowed-hosts", 1, "")            \
    X(TRUSTED_PROXIES, "server", "trusted_proxies", STR, 0, 0, NULL, "--trusted-proxies", 1, "")      \
    X(PING_S, "server", "ping_s", FLOAT, 0.1, 3600, NULL, "--ping-s", 0, "10")                        \
    X(WS_AUTH_TIMEOUT_S, "server", "ws_auth_timeout_s", FLOAT, 1, 3600, NULL, "--ws-auth-timeout-s", 0, "10") \
    X(DRAIN_S, "server", "drain_s", INT, 0, 3600, NULL, "--drain-s", 0, "30")                         \
    X(MAX_WS_MESSAGE, "server", "max_ws_message", INT, 256, 1 << 30, NULL, "--max-ws-message", 0,     \
      "1048576")                                                                                       \
    X(MAX_BODY, "server", "max_body", INT, 1024, 1 << 30, NULL, "--max-body", 0, "4194304")          \
    X(MAX_UPLOAD, "server", "max_upload", INT, 1024, 1 << 30, NULL, "--max-upload", 0, "67108864")   \
    X(PARALLEL, "scheduler", "parallel", INT, 1, 1024, NULL, "--parallel", 0, "0")                    \
    X(STEP_TOKENS, "scheduler", "step_tokens", INT, 16, 16384, NULL, "--step-tokens", 0, "512")       \
    X(MAX_QUEUED_INTERACTIVE, "scheduler", "max_queued_interactive", INT, 1, 1 << 20, NULL,           \
      "--max-queued-interactive", 0, "256")                                                            \
    X(MAX_QUEUED_BACKGROUND, "scheduler", "max_queued_background", INT, 1, 1 << 20, NULL,             \
      "--max-queued-background", 0, "1024")                                                           \
    X(BG_STEP_MS, "scheduler", "bg_step_ms", FLOAT, 0, 60000, NULL, "--bg-step-ms", 0, "200")         \
    X(AGING_MS, "scheduler", "aging_ms", FLOAT, 1, 3600000, NULL, "--aging-ms", 0, "10000")           \
    X(PREFIX_CACHE, "scheduler", "prefix_cache", BOOL, 0, 0, NULL, "--no-prefix-cache", 0, "true")    \
    X(SPECULATE, "scheduler", "speculate", INT, 0, 8, NULL, "--speculate", 0, "0")                     \
    X(REQUIRE_KEY, "auth", "require_key", BOOL, 0, 0, NULL, "--require-key", 1, "false")              \
    X(RATE_LIMIT, "auth", "rate_limit", INT, 0, 1000000, NULL, "--rate-limit", 1, "0")                \
    X(DB, "storage", "db", STR, 0, 0, NULL, "--db", 0, "ember.db")                                    \
    X(STORE_CONTENT, "storage", "store_content", BOOL, 0, 0, NULL, "--no-store-content", 0, "true")   \
    X(RETENTION_DAYS, "storage", "retention_days", INT, 0, 36500, NULL, "--retention-days", 0, "0")   \
    X(RESPONSE_CACHE_MB, "storage", "response_cache_mb", INT, 0, 1 << 20, NULL, "--response-cache-mb", 0, "0") \
    X(LOG_LEVEL, "log", "log_level", ENUM, 0, 0, "error|warn|info|debug", "--log-level", 1, "info")       \
    X(LOG_FORMAT, "log", "log_format", ENUM, 0, 0, "plain|json", "--log-format", 1, "plain")              \
    X(LOG_CONTENT, "log", "log_content", BOOL, 0, 0, NULL, "--log-content", 1, "false")

typedef enum {
#define EM_CONFIG_ID(id, ...) EM_CFG_##id,
    EM_CONFIG_KEYS(EM_CONFIG_ID)
#undef EM_CONFIG_ID
    EM_CFG_COUNT
} em_config_key;

typedef struct em_config em_config;

/* Build the configuration of `ember serve` from argv (argv[0] is "serve"):
 * defaults, then the --config file when given, then the flags. *out is the
 * caller's (em_config_free). Returns 0; -1 after "--help" (usage printed:
 * exit 0); or the exit status (2) after printing the error line.
 * *print_config is set when --print-config was given. usage is printed
 * for --help. */
int  em_config_load(int argc, char **argv, const char *usage, em_config **out, int *print_config);

/* Print every key as an INI file with where its value came from
 * ("; default", "; file PATH:LINE", "; flag --port") to stdout. */
void em_config_print(const em_config *c);

/* The --config file (NULL without one). */
const char *em_config_file(const em_config *c);

/* Values (as parsed; bools 0/1). A string key's text; "" for an unset one. */
const char *em_config_str(const em_config *c, em_config_key k);
long        em_config_int(const em_config *c, em_config_key k);
double      em_config_float(const em_config *c, em_config_key k);
/* Whether the value came from a flag or the file rather than the default. */
int         em_config_is_set(const em_config *c, em_config_key k);
/* "port", "log_level"...: the key's name in the file (names are unique across sections). */
const char *em_config_name(em_config_key k);

/* SIGHUP: read the file again with the same flags into a new configuration.
 * On success, copies into running the values of the keys a reload applies
 * (those marked so above), logs each change (info), logs each key that
 * changed but needs a restart ("port changed in the file: needs a
 * restart", warn), sets changed[k] for each applied change and returns 0.
 * On a bad file logs the error and returns -1, leaving running alone. */
int  em_config_reload(em_config *running, int argc, char **argv, int changed[EM_CFG_COUNT]);

void em_config_free(em_config *c);   /* accepts NULL */

/* ---- what `ember serve` does with it ----------------------------------------- */

/* log_level, log_format and log_content into core/log.h's switches. */
void em_config_apply_log(const em_config *c);

/* tls_cert and tls_key: both or neither, and both readable; 0, or 2 after
 * the error line (before anything starts). */
int  em_config_check_tls(const em_config *c);

/* The SIGHUP hook for em_web_opts.on_reload (ctx: an em_config_reload_ctx,
 * borrowed, outliving the server): em_config_reload, then the log switches
 * and em_web_update with what it applied. */
typedef struct {
    em_config *cfg;    /* the running configuration (updated in place) */
    int        argc;   /* serve's arguments, to read the flags again */
    char     **argv;
} em_config_reload_ctx;
struct em_web;
void em_config_serve_reload(void *ctx, struct em_web *w);

#endif
