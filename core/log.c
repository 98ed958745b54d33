/* log.c — the service log (core/log.h): level, format and content switches
 * as atomics, each event formatted into one buffer (plain, or a JSON object
 * through jansson) and written whole to stderr under a mutex. */
#include "core/log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "core/err.h"

static atomic_int log_level = EM_LOG_INFO, log_json = 0, log_text = 0;
static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;

static const char *const names[] = { "error", "warn", "info", "debug" };

const char *em_log_level_name(em_log_level l)
{
    return (unsigned)l < 4 ? names[l] : "info";
}

int em_log_level_parse(const char *s, em_log_level *out)
{
    for (int i = 0; i < 4; i++)
        if (strcmp(s, names[i]) == 0) {
            *out = (em_log_level)i;
            return 0;
        }
    return -1;
}

void em_log_configure(em_log_level level, int json, int content)
{
    atomic_store(&log_level, (int)level);
    atomic_store(&log_json, json != 0);
    atomic_store(&log_text, content != 0);
}

int em_log_enabled(em_log_level l)
{
    return (int)l <= atomic_load(&log_level);
}

int em_log_content(void)
{
    return atomic_load(&log_text) && em_log_enabled(EM_LOG_DEBUG);
}

void em_log(em_log_level l, const char *rid, const char *fmt, ...)
{
    if (!em_log_enabled(l))
        return;
    char msg[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    size_t n = strlen(msg);
    while (n && (msg[n - 1] == '\n' || msg[n - 1] == '\r'))   /* lws' own lines end in one */
        msg[--n] = 0;
    em_err_escape(msg, sizeof msg);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char when[40];
    snprintf(when, sizeof when, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ", tm.tm_year + 1900, tm.tm_mon + 1,
             tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000);
    int has_rid = rid && rid[0];
    char *line = NULL, plain[4400];
    if (atomic_load(&log_json)) {
        json_t *j = json_pack("{s:s, s:s}", "time", when, "level", em_log_level_name(l));
        if (j && has_rid)
            json_object_set_new(j, "request_id", json_string(rid));
        if (j)
            json_object_set_new(j, "msg", json_string(msg));
        line = j ? json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
        json_decref(j);
    }
    pthread_mutex_lock(&log_mu);
    if (line)
        fprintf(stderr, "%s\n", line);
    else {
        snprintf(plain, sizeof plain, "%s %s %s%s%s%s\n", when, em_log_level_name(l), has_rid ? "[" : "",
                 has_rid ? rid : "", has_rid ? "] " : "", msg);
        fputs(plain, stderr);
    }
    fflush(stderr);
    pthread_mutex_unlock(&log_mu);
    free(line);
}
