/* cmd_batch.c — `ember batch`: the Batch API from the terminal, against any
 * server that speaks it (ember serve first): submit a JSONL file of
 * requests (upload it with purpose batch, create the batch; --wait polls it
 * with a progress bar on stderr until it ends), and status, results
 * (the output or error file to stdout), cancel and list. Plain http://
 * (firmware/http_client.c); the key from --api-key or EMBER_API_KEY. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "firmware/cli.h"
#include "firmware/http_client.h"

static const char usage[] =
    "usage: ember batch submit FILE.jsonl [--endpoint /v1/chat/completions|/v1/completions] [--wait]\n"
    "       ember batch status ID\n"
    "       ember batch results ID [--errors]\n"
    "       ember batch cancel ID\n"
    "       ember batch list\n"
    "  every subcommand also takes [--url URL] (default http://127.0.0.1:8080) and\n"
    "  [--api-key KEY] (default: the EMBER_API_KEY environment variable).\n"
    "  submit uploads FILE (one {\"custom_id\", \"method\": \"POST\", \"url\", \"body\"} per line)\n"
    "  and creates a batch (the endpoint: --endpoint, else the first line's url); it\n"
    "  prints the batch id. --wait then shows its progress until it ends, and exits 0\n"
    "  when it completed, 1 otherwise. results writes the output file (--errors: the\n"
    "  error file) to stdout. Exit 2 for bad arguments, 1 for a refusal or a failure.\n";

typedef struct {
    em_http_url     u;
    em_http_client *c;
    char            auth[600];
} conn;

static int conn_open(conn *k, const char *url, const char *key)
{
    em_err err = { 0 };
    if (key && (!*key || strpbrk(key, "\r\n") || strlen(key) > 512))
        return em_cli_fail(2, "batch: the API key is empty, over 512 bytes, or holds a line break");
    if (em_http_url_parse(url, "/v1", &k->u, &err) || em_http_url_resolve(&k->u, &err))
        return em_cli_fail(2, "batch: --url %s: %s", url, err.msg);
    em_http_opts ho = { .timeout_ms = 600000, .max_line = 1 << 20, .max_body = (size_t)1 << 30, .cancel = NULL };
    if (em_http_client_create(&k->u, &ho, &k->c, &err))
        return em_cli_fail(1, "batch: %s", err.msg);
    snprintf(k->auth, sizeof k->auth, "%s%s%s", key ? "Authorization: Bearer " : "", key ? key : "", key ? "\r\n" : "");
    return 0;
}

/* One request; *body the response's (malloc'd), *status its HTTP status. */
static int call(conn *k, const char *method, const char *path, const char *ctype, const char *data, size_t len,
                char **body, size_t *blen, int *status)
{
    char headers[900];
    snprintf(headers, sizeof headers, "%s%s%s%s", k->auth, ctype ? "Content-Type: " : "", ctype ? ctype : "",
             ctype ? "\r\n" : "");
    em_http_resp r;
    em_err err = { 0 };
    char full[1200];
    snprintf(full, sizeof full, "/v1%s", path);
    if (em_http_request(k->c, method, full, headers, data, len, &r, &err) || em_http_body(k->c, body, blen, &err)) {
        em_http_end(k->c);
        return em_cli_fail(1, "batch: %s %s: %s", method, full, err.msg);
    }
    em_http_end(k->c);
    *status = r.status;
    return 0;
}

/* A JSON response, or the exit status after saying what the server refused. */
static int call_json(conn *k, const char *method, const char *path, const char *ctype, const char *data, size_t len,
                     json_t **out)
{
    char *body = NULL;
    size_t blen = 0;
    int status = 0, rc = call(k, method, path, ctype, data, len, &body, &blen, &status);
    if (rc)
        return rc;
    json_error_t je;
    json_t *j = json_loadb(body ? body : "", blen, 0, &je);
    free(body);
    if (status != 200) {
        const char *msg = json_string_value(json_object_get(json_object_get(j, "error"), "message"));
        rc = em_cli_fail(1, "batch: %s /v1%s: %d %s", method, path, status, msg ? msg : "(no message)");
        json_decref(j);
        return rc;
    }
    if (!j)
        return em_cli_fail(1, "batch: %s /v1%s: the answer is not JSON: %s", method, path, je.text);
    *out = j;
    return 0;
}

static const char *str(const json_t *o, const char *k)
{
    const char *s = json_string_value(json_object_get(o, k));
    return s ? s : "-";
}

static long long num(const json_t *o, const char *k)
{
    return (long long)json_integer_value(json_object_get(o, k));
}

static void print_batch(const json_t *b)
{
    const json_t *rc = json_object_get(b, "request_counts");
    printf("%s  %s  %lld/%lld done, %lld failed  output %s  errors %s\n", str(b, "id"), str(b, "status"),
           num(rc, "completed") + num(rc, "failed"), num(rc, "total"), num(rc, "failed"), str(b, "output_file_id"),
           str(b, "error_file_id"));
    const json_t *errs = json_object_get(json_object_get(b, "errors"), "data");
    size_t i;
    const json_t *e;
    json_array_foreach(errs, i, e)
        printf("  line %lld: %s: %s\n", num(e, "line"), str(e, "code"), str(e, "message"));
}

static int final_status(const char *s)
{
    return !strcmp(s, "completed") || !strcmp(s, "failed") || !strcmp(s, "expired") || !strcmp(s, "cancelled");
}

/* Poll until the batch ends: a bar on stderr when it is a terminal. */
static int wait_batch(conn *k, const char *id)
{
    char path[128];
    snprintf(path, sizeof path, "/batches/%s", id);
    int tty = isatty(2);
    for (;;) {
        json_t *b = NULL;
        int rc = call_json(k, "GET", path, NULL, NULL, 0, &b);
        if (rc)
            return rc;
        const json_t *c = json_object_get(b, "request_counts");
        long long total = num(c, "total"), done = num(c, "completed") + num(c, "failed");
        int width = 30, fill = total ? (int)(width * done / total) : 0;
        char bar[64];
        for (int i = 0; i < width; i++)
            bar[i] = i < fill ? '#' : '.';
        bar[width] = 0;
        fprintf(stderr, "%s[%s] %lld/%lld %s%s", tty ? "\r" : "", bar, done, total, str(b, "status"),
                tty ? "   " : "\n");
        if (final_status(str(b, "status"))) {
            if (tty)
                fputc('\n', stderr);
            print_batch(b);
            int ok = strcmp(str(b, "status"), "completed") == 0;
            json_decref(b);
            return ok ? 0 : 1;
        }
        json_decref(b);
        sleep(1);
    }
}

static int submit(conn *k, const char *file, const char *endpoint, int wait)
{
    char *data = NULL;
    size_t len = 0;
    em_err err = { 0 };
    if (em_cli_read_file(file, &data, &len, &err))
        return em_cli_fail(2, "batch: %s", err.msg);
    char ep[64] = "";
    if (endpoint) {
        snprintf(ep, sizeof ep, "%s", endpoint);
    } else {   /* the first line's url */
        const char *nl = memchr(data, '\n', len);
        json_t *first = json_loadb(data, nl ? (size_t)(nl - data) : len, 0, NULL);
        snprintf(ep, sizeof ep, "%s", json_is_string(json_object_get(first, "url"))
                                      ? json_string_value(json_object_get(first, "url")) : "");
        json_decref(first);
        if (!ep[0]) {
            free(data);
            return em_cli_fail(2, "batch: %s: its first line names no \"url\": give --endpoint", file);
        }
    }
    const char *base = strrchr(file, '/');
    base = base ? base + 1 : file;
    char boundary[64];
    snprintf(boundary, sizeof boundary, "ember-%lx-%lx", (long)time(NULL), (long)getpid());
    size_t cap = len + 1024;
    char *body = malloc(cap);
    if (!body) {
        free(data);
        return em_cli_fail(1, "batch: out of memory");
    }
    int h = snprintf(body, cap, "--%s\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nbatch\r\n--%s\r\n"
                     "Content-Disposition: form-data; name=\"file\"; filename=\"%.200s\"\r\n"
                     "Content-Type: application/octet-stream\r\n\r\n", boundary, boundary, base);
    memcpy(body + h, data, len);
    int t = snprintf(body + h + len, cap - (size_t)h - len, "\r\n--%s--\r\n", boundary);
    free(data);
    char ctype[128];
    snprintf(ctype, sizeof ctype, "multipart/form-data; boundary=%s", boundary);
    json_t *f = NULL, *b = NULL;
    int rc = call_json(k, "POST", "/files", ctype, body, (size_t)h + len + (size_t)t, &f);
    free(body);
    if (rc)
        return rc;
    json_t *req = json_pack("{s:s, s:s, s:s}", "input_file_id", str(f, "id"), "endpoint", ep, "completion_window",
                            "24h");
    char *rtext = json_dumps(req, JSON_COMPACT);
    json_decref(req);
    json_decref(f);
    rc = call_json(k, "POST", "/batches", "application/json", rtext, strlen(rtext), &b);
    free(rtext);
    if (rc)
        return rc;
    char id[128], path[160];
    snprintf(id, sizeof id, "%s", str(b, "id"));
    snprintf(path, sizeof path, "/batches/%s", id);
    /* the server validates the file after answering: wait for its verdict
     * (bounded: 10 minutes) */
    for (int i = 0; i < 6000 && strcmp(str(b, "status"), "validating") == 0; i++) {
        struct timespec ts = { 0, 100 * 1000 * 1000 };
        nanosleep(&ts, NULL);
        json_decref(b);
        b = NULL;
        if ((rc = call_json(k, "GET", path, NULL, NULL, 0, &b)))
            return rc;
    }
    if (strcmp(str(b, "status"), "failed") == 0) {   /* validation: say why, line by line */
        print_batch(b);
        json_decref(b);
        return 1;
    }
    json_decref(b);
    printf("%s\n", id);
    fflush(stdout);
    return wait ? wait_batch(k, id) : 0;
}

static int results(conn *k, const char *id, int errors)
{
    char path[160];
    snprintf(path, sizeof path, "/batches/%s", id);
    json_t *b = NULL;
    int rc = call_json(k, "GET", path, NULL, NULL, 0, &b);
    if (rc)
        return rc;
    const char *fid = json_string_value(json_object_get(b, errors ? "error_file_id" : "output_file_id"));
    if (!fid) {
        rc = final_status(str(b, "status"))
                 ? 0   /* nothing of that kind: an empty result */
                 : em_cli_fail(1, "batch: %s is %s: no results yet", id, str(b, "status"));
        json_decref(b);
        return rc;
    }
    snprintf(path, sizeof path, "/files/%s/content", fid);
    json_decref(b);
    char *body = NULL;
    size_t blen = 0;
    int status = 0;
    if ((rc = call(k, "GET", path, NULL, NULL, 0, &body, &blen, &status)))
        return rc;
    if (status != 200) {
        free(body);
        return em_cli_fail(1, "batch: GET /v1%s: %d", path, status);
    }
    fwrite(body, 1, blen, stdout);
    free(body);
    return 0;
}

int em_cmd_batch(int argc, char **argv)
{
    if (argc < 2) {
        fputs(usage, stderr);
        return 2;
    }
    const char *sub = argv[1];
    if (strcmp(sub, "--help") == 0 || strcmp(sub, "-h") == 0) {
        fputs(usage, stdout);
        return 0;
    }
    const char *url = "http://127.0.0.1:8080", *key = getenv("EMBER_API_KEY"), *endpoint = NULL;
    int wait = 0, errors = 0;
    em_cli_opt opts[] = {
        { "--url", NULL, EM_OPT_STR, &url, 0, 0 },
        { "--api-key", NULL, EM_OPT_STR, &key, 0, 0 },
        { "--endpoint", NULL, EM_OPT_STR, &endpoint, 0, 0 },
        { "--wait", NULL, EM_OPT_FLAG, &wait, 0, 0 },
        { "--errors", NULL, EM_OPT_FLAG, &errors, 0, 0 },
        { NULL, NULL, 0, NULL, 0, 0 },
    };
    const char *pos[1];
    int n_pos = 0, want = strcmp(sub, "list") == 0 ? 0 : 1;
    char cmd[32];
    snprintf(cmd, sizeof cmd, "batch %.16s", sub);
    int rc = em_cli_parse(cmd, argc - 1, argv + 1, opts, pos, 1, &n_pos, usage);
    if (rc)
        return rc < 0 ? 0 : rc;
    if (strcmp(sub, "submit") && strcmp(sub, "status") && strcmp(sub, "results") && strcmp(sub, "cancel") &&
        strcmp(sub, "list"))
        return em_cli_fail(2, "batch: unknown subcommand '%s' (submit, status, results, cancel, list)", sub);
    if (n_pos != want)
        return em_cli_fail(2, "batch %s: %s", sub, want ? (strcmp(sub, "submit") ? "give the batch ID" : "give the FILE")
                                                       : "takes no argument");
    if ((wait && strcmp(sub, "submit")) || (endpoint && strcmp(sub, "submit")) || (errors && strcmp(sub, "results")))
        return em_cli_fail(2, "batch %s: --wait and --endpoint go with submit, --errors with results", sub);
    if (want && strcmp(sub, "submit") && (strlen(pos[0]) > 64 || strpbrk(pos[0], "/?#% \r\n")))
        return em_cli_fail(2, "batch %s: '%.64s' is not a batch id", sub, pos[0]);
    conn k = { 0 };
    if ((rc = conn_open(&k, url, key)))
        return rc;
    json_t *j = NULL;
    char path[160];
    if (strcmp(sub, "submit") == 0) {
        rc = submit(&k, pos[0], endpoint, wait);
    } else if (strcmp(sub, "results") == 0) {
        rc = results(&k, pos[0], errors);
    } else if (strcmp(sub, "list") == 0) {
        if (!(rc = call_json(&k, "GET", "/batches?limit=100", NULL, NULL, 0, &j))) {
            size_t i;
            json_t *b;
            json_array_foreach(json_object_get(j, "data"), i, b)
                print_batch(b);
        }
    } else {
        int cancel = strcmp(sub, "cancel") == 0;
        snprintf(path, sizeof path, "/batches/%s%s", pos[0], cancel ? "/cancel" : "");
        if (!(rc = call_json(&k, cancel ? "POST" : "GET", path, cancel ? "application/json" : NULL, cancel ? "{}" : NULL,
                             cancel ? 2 : 0, &j)))
            print_batch(j);
    }
    json_decref(j);
    em_http_client_destroy(k.c);
    return rc;
}
