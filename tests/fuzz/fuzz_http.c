/* fuzz_http.c — HTTP and WebSocket handling as ember's callbacks see it.
 * The target runs a real `ember serve` stack in its own process — the
 * stories260K model on the Vulkan device (llvmpipe here), the scheduler, a
 * SQLite ledger in a temporary directory, em_web on 127.0.0.1 (any port)
 * with its service loop on a thread — and sends each input over a loopback
 * TCP connection. The first byte says how:
 *   'W'  the rest is WebSocket messages separated by "\n--\n": the target
 *        makes the upgrade (ember.chat.v1) and sends each as a masked text
 *        frame, so that inputs explore the chat protocol (auth, chat,
 *        cancel, conversations, parameters) rather than framing;
 *   'F'  the rest is raw bytes after a good upgrade: lws's frame parser and
 *        ember's receive path (fragments, binary, oversize, close, ping);
 *   else the whole input is raw bytes of HTTP/1.1 requests (the request
 *        line, headers, bodies plain or chunked, several on one connection).
 * It reads what comes back until the server closes, nothing came for
 * 100 ms, or 3 s passed (bounds, not checks), then closes — a request
 * still generating is cancelled as a client that goes away. Properties: no
 * crash, hang or sanitizer report in either thread, and every 64 inputs and
 * at the end the server still answers GET /healthz with 200. The context
 * is 128 tokens, so no request generates for long. Without the model or a
 * Vulkan device the target says SKIP and exits 77. */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "core/gpu/forward.h"
#include "core/log.h"
#include "core/model/model.h"
#include "core/text/tokenizer.h"
#include "core/vk/vk.h"
#include "scheduler/scheduler.h"
#include "storage/storage.h"
#include "tests/fuzz/fuzz.h"
#include "web/web.h"

#define N_CTX 128
#define SEQS  4
#define STEP  128

static struct {
    char          dir[64], db[96];
    em_model     *m;
    em_tokenizer *tok;
    em_vk        *vk;
    em_fwd       *fwd;
    em_sched     *s;
    em_storage   *st;
    em_web       *w;
    pthread_t     thr;
    int           port, running;
    unsigned long inputs, check_every;
} S;

static void *serve(void *arg)
{
    (void)arg;
    em_web_run(S.w);
    return NULL;
}

static void skip(const char *why, const char *more)
{
    printf("SKIP: fuzz_http: %s%s%s\n", why, more ? ": " : "", more ? more : "");
    fflush(stdout);
    _exit(77);
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec / 1e9;
}

static int connect_server(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)S.port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(fd, (struct sockaddr *)&a, sizeof a)) {
        close(fd);
        return -1;
    }
    return fd;
}

static int send_all(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n) {
        ssize_t k = send(fd, c, n, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return -1;   /* the server closed: fine, it may refuse */
        c += k;
        n -= (size_t)k;
    }
    return 0;
}

/* Read into buf (cap bytes kept, the rest read and dropped) until the
 * server closes, idle_ms pass with nothing, or total_s pass; or, with
 * until, once buf holds that string. Returns the bytes kept. */
static size_t drain(int fd, char *buf, size_t cap, int idle_ms, double total_s, const char *until)
{
    size_t n = 0;
    char tmp[16384];
    double end = now_s() + total_s;
    for (;;) {
        if (buf && until && n && memmem(buf, n, until, strlen(until)))
            break;
        double left = end - now_s();
        if (left <= 0)
            break;
        struct pollfd p = { .fd = fd, .events = POLLIN };
        int wait = left * 1000 < idle_ms ? (int)(left * 1000) + 1 : idle_ms;
        int r = poll(&p, 1, wait);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        ssize_t k = recv(fd, tmp, sizeof tmp, 0);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            break;
        if (buf && n < cap) {
            size_t c = (size_t)k < cap - n ? (size_t)k : cap - n;
            memcpy(buf + n, tmp, c);
            n += c;
        }
    }
    if (buf)
        buf[n < cap ? n : cap - 1] = 0;
    return n;
}

/* GET /healthz answers 200 (the server survived what came before). */
static void check_alive(void)
{
    int fd = -1;
    for (int tries = 0; tries < 50 && (fd = connect_server()) < 0; tries++)
        usleep(20000);
    FUZZ_ASSERT(fd >= 0);
    static const char req[] = "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    FUZZ_ASSERT(send_all(fd, req, sizeof req - 1) == 0);
    char buf[4096];
    drain(fd, buf, sizeof buf, 30000, 60, NULL);   /* it closes after the answer */
    close(fd);
    if (strncmp(buf, "HTTP/1.1 200", 12) != 0)
        fprintf(stderr, "fuzz_http: /healthz answered: %.300s\n", buf);
    FUZZ_ASSERT(strncmp(buf, "HTTP/1.1 200", 12) == 0);
}

/* A masked WebSocket frame of opcode op (FIN set) carrying p[0..n). */
static int send_frame(int fd, int op, const unsigned char *p, size_t n)
{
    unsigned char h[14];
    size_t hn = 0;
    h[hn++] = (unsigned char)(0x80 | op);
    if (n < 126) {
        h[hn++] = (unsigned char)(0x80 | n);
    } else if (n < 65536) {
        h[hn++] = 0x80 | 126;
        h[hn++] = (unsigned char)(n >> 8);
        h[hn++] = (unsigned char)n;
    } else {
        h[hn++] = 0x80 | 127;
        for (int i = 7; i >= 0; i--)
            h[hn++] = (unsigned char)((uint64_t)n >> (8 * i));
    }
    static const unsigned char mask[4] = { 0x37, 0xfa, 0x21, 0x3d };
    memcpy(h + hn, mask, 4);
    hn += 4;
    unsigned char *m = malloc(n ? n : 1);
    if (!m)
        return -1;
    for (size_t i = 0; i < n; i++)
        m[i] = p[i] ^ mask[i & 3];
    int rc = send_all(fd, h, hn) || send_all(fd, m, n);
    free(m);
    return rc;
}

/* The upgrade to ember.chat.v1; 0 once the 101 came. */
static int upgrade(int fd)
{
    char req[512];
    int n = snprintf(req, sizeof req,
                     "GET /ws HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                     "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
                     "Sec-WebSocket-Protocol: ember.chat.v1\r\n\r\n", S.port);
    if (send_all(fd, req, (size_t)n))
        return -1;
    char buf[2048];
    drain(fd, buf, sizeof buf, 3000, 10, "\r\n\r\n");
    return strncmp(buf, "HTTP/1.1 101", 12) == 0 ? 0 : -1;
}

static void stop_server(void)
{
    if (!S.running)
        return;
    check_alive();
    em_web_stop(S.w);
    pthread_join(S.thr, NULL);
    S.running = 0;
    em_web_destroy(S.w);
    em_sched_destroy(S.s);
    em_fwd_destroy(S.fwd);
    em_vk_destroy(S.vk);
    em_tokenizer_destroy(S.tok);
    em_model_close(S.m);
    em_storage_close(S.st);
    char p[160];
    static const char *const tails[] = { "", "-wal", "-shm" };
    for (int i = 0; i < 3; i++) {
        snprintf(p, sizeof p, "%s%s", S.db, tails[i]);
        unlink(p);
    }
    rmdir(S.dir);   /* what else ember put there (the files directory) stays for a look */
    printf("fuzz_http: %lu inputs, the server answered /healthz after them\n", S.inputs);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    signal(SIGPIPE, SIG_IGN);
    em_log_configure(EM_LOG_ERROR, 0, 0);
    const char *shared = getenv("EMBER_SHARED");
    char model[512];
    snprintf(model, sizeof model, "%s/models/stories260K.gguf", shared ? shared : "../shared");
    if (access(model, R_OK))
        skip("the model is absent", model);
    em_err err = { 0 };
    snprintf(S.dir, sizeof S.dir, "/tmp/ember-fuzz-http-XXXXXX");
    if (!mkdtemp(S.dir))
        skip("no temporary directory", strerror(errno));
    snprintf(S.db, sizeof S.db, "%s/ember.db", S.dir);
    em_storage_opts so;
    em_storage_opts_init(&so);
    so.path = S.db;
    if (em_storage_open(&so, &S.st, &err) || em_model_open(model, &S.m, &err) ||
        em_tokenizer_create(em_model_gguf(S.m), &S.tok, &err)) {
        fprintf(stderr, "fuzz_http: %s\n", err.msg);
        abort();
    }
    em_vk_opts vo = EM_VK_OPTS_INIT;
    if (em_vk_create(&vo, &S.vk, &err))
        skip("no Vulkan device", err.msg);
    uint32_t nbw = 0, blocks = em_fwd_kv_blocks(S.vk, S.m, 0, 0, SEQS, N_CTX, STEP, &nbw);
    em_fwd_opts fo = { .max_tokens = STEP, .max_seqs = SEQS, .max_ctx = N_CTX, .n_blocks = blocks,
                       .n_blocks_window = nbw, .max_logits = SEQS, .kv_type = 0 };
    em_sched_backend be;
    em_sched_opts sco;
    em_sched_opts_init(&sco);
    sco.step_tokens = STEP;
    if (em_fwd_create(S.vk, S.m, &fo, &S.fwd, &err)) {
        fprintf(stderr, "fuzz_http: %s\n", err.msg);
        abort();
    }
    em_sched_backend_gpu(S.fwd, S.vk, em_model_hparams(S.m)->n_vocab, STEP, SEQS, SEQS, N_CTX, blocks, &be);
    if (em_sched_create(&sco, &be, S.tok, &S.s, &err)) {
        fprintf(stderr, "fuzz_http: %s\n", err.msg);
        abort();
    }
    em_web_opts wo;
    em_web_opts_init(&wo);
    wo.port = 0;
    wo.sched = S.s;
    wo.model = S.m;
    wo.tok = S.tok;
    wo.storage = S.st;
    wo.model_id = "stories260K";
    wo.device = em_vk_info(S.vk)->name;
    wo.n_ctx = N_CTX;
    wo.parallel = SEQS;
    wo.max_ws_message = 65536;
    wo.max_body = 65536;
    wo.max_upload = 65536;
    wo.max_conns_per_addr = 4096;   /* the inputs' connections close as fast as they come */
    wo.max_connections = 8192;
    wo.drain_s = 0;
    wo.trusted_proxies = "127.0.0.1";   /* X-Forwarded-For is read: proxy.c sees the inputs' headers */
    if (em_web_create(&wo, &S.w, &err)) {
        fprintf(stderr, "fuzz_http: %s\n", err.msg);
        abort();
    }
    S.port = em_web_port(S.w);
    if (pthread_create(&S.thr, NULL, serve, NULL))
        abort();
    S.running = 1;
    atexit(stop_server);
    const char *every = getenv("FUZZ_HTTP_CHECK_EVERY");   /* 1: after each input, to find which one did it */
    S.check_every = every && atol(every) > 0 ? (unsigned long)atol(every) : 64;
    check_alive();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (S.check_every == 1) {   /* finding the input: say which */
        fprintf(stderr, "fuzz_http: input %lu (%zu bytes): ", S.inputs + 1, size);
        for (size_t i = 0; i < size && i < 60; i++)
            fputc(data[i] >= 32 && data[i] < 127 ? data[i] : '.', stderr);
        fputc('\n', stderr);
    }
    int fd = connect_server();
    if (fd < 0) {   /* the listening socket must be there */
        usleep(10000);
        FUZZ_ASSERT((fd = connect_server()) >= 0);
    }
    if (size && (data[0] == 'W' || data[0] == 'F')) {
        if (upgrade(fd) == 0) {
            const unsigned char *p = data + 1, *end = data + size;
            if (data[0] == 'F') {
                send_all(fd, p, (size_t)(end - p));
            } else {
                while (p <= end) {   /* messages separated by "\n--\n" */
                    const unsigned char *sep = memmem(p, (size_t)(end - p), "\n--\n", 4);
                    const unsigned char *e = sep ? sep : end;
                    if (send_frame(fd, 1, p, (size_t)(e - p)))
                        break;
                    if (!sep)
                        break;
                    p = sep + 4;
                }
            }
        }
    } else {
        send_all(fd, data, size);
    }
    drain(fd, NULL, 0, 100, 3, NULL);
    close(fd);
    if (++S.inputs % S.check_every == 0)
        check_alive();
    return 0;
}
