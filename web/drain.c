/* drain.c — stopping `ember serve` gently. em_web_drain (the first
 * SIGINT/SIGTERM, from the signal handler) only sets a flag and wakes the
 * service loop. From then on new generation requests are refused with 503
 * server_draining and a Retry-After (gen.c asks web_drain_refuse, so every
 * front door refuses alike), /healthz answers 503, the requests already
 * running go on, and the loop returns once none is left. When drain_s
 * seconds have passed first, drain_stop tells the front doors to cancel
 * what runs and answer each client with server_shutting_down (an SSE error
 * event before [DONE], a 503, a WebSocket error frame) instead of a cut
 * connection; what has not ended STOP_GRACE_US later em_web_destroy cuts
 * (every such ledger row says cancelled). Before it returns with nothing
 * running, the loop
 * shuts the listening socket (a load balancer's next connection is refused,
 * which it retries on another box, instead of being accepted and dropped)
 * and answers the requests it has already read (their 503s reach the
 * client: no refusal in the ledger that the client never saw), for at most
 * CLOSE_GRACE_US. A second signal is em_web_stop: at once. */
#include <stdio.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <time.h>
#include <unistd.h>

#include "core/log.h"
#include "web/web_int.h"

#define WAKE_US (100 * 1000)   /* how often the loop looks at the drain meanwhile */
#define CLOSE_WAKE_US (10 * 1000)          /* ... once the listening socket is shut */
#define CLOSE_GRACE_US (1000 * 1000)       /* the most it waits then for answers to go out */
#define STOP_GRACE_US (2000 * 1000)        /* after --drain-s: for the stopped answers' errors to go out */
#define MAX_FD 65536

void em_web_drain(em_web *w)
{
    atomic_store(&w->draining, 1);
    if (w->ctx)
        lws_cancel_service(w->ctx);
}

uint32_t web_drain_retry_s(em_web *w)
{
    long long end = atomic_load(&w->drain_end_us);
    long long left = end ? end - web_now_us() : (long long)w->o.drain_s * 1000000;
    long long s = (left + 999999) / 1000000;
    return s < 1 ? 1 : (uint32_t)s;
}

int web_drain_refuse(em_web *w, em_web_error *e)
{
    if (!atomic_load(&w->draining))
        return 0;
    em_web_fail(e, 503, "server_error", "server_draining", NULL,
                "the server is shutting down and takes no new requests; try again later");
    e->retry_after_s = web_drain_retry_s(w);
    return -1;
}

int web_drain_stopping(em_web *w)
{
    return atomic_load(&w->drain_stop) != 0;
}

void web_drain_stopped(em_web *w, uint32_t completion_tokens, em_web_error *e)
{
    em_web_fail(e, 503, "server_error", "server_shutting_down", NULL,
                "the server is shutting down: this answer was stopped after %u token(s), when the %u s it "
                "had to finish were up; send the request again (another server may take it)",
                completion_tokens, w->o.drain_s);
    e->retry_after_s = 1;
}

/* Nothing to do: a timer that fires makes lws_service return, and the loop
 * calls web_drain_step again. */
static void wake(lws_sorted_usec_list_t *sul)
{
    (void)sul;
}

/* Shut (not close: lws owns it) every listening TCP socket of this process
 * on our port: connections to it are refused from now on. */
static void unlisten(em_web *w)
{
    long max = sysconf(_SC_OPEN_MAX);
    if (max < 0 || max > MAX_FD)
        max = MAX_FD;
    for (int fd = 0; fd < (int)max; fd++) {
        int acc = 0;
        socklen_t len = sizeof acc;
        struct sockaddr_storage sa;
        socklen_t sl = sizeof sa;
        if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &acc, &len) || !acc ||
            getsockname(fd, (struct sockaddr *)&sa, &sl))
            continue;
        int port = sa.ss_family == AF_INET ? ntohs(((struct sockaddr_in *)&sa)->sin_port)
                 : sa.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&sa)->sin6_port) : -1;
        if (port == w->port)
            shutdown(fd, SHUT_RDWR);
    }
}

int web_drain_step(em_web *w)
{
    if (!atomic_load(&w->draining))
        return 0;
    long long now = web_now_us(), end = atomic_load(&w->drain_end_us);
    int running = atomic_load(&w->gens);
    if (!end) {
        end = now + (long long)w->o.drain_s * 1000000;
        atomic_store(&w->drain_end_us, end);
        em_log(EM_LOG_INFO, NULL, "draining: %d request(s) running, new ones refused; stopping when they "
               "are done or in %u s (a second signal stops at once)", running, w->o.drain_s);
    }
    int stopping = atomic_load(&w->drain_stop) != 0;
    if (running && now >= end && (!stopping || now - w->stop_us < STOP_GRACE_US)) {
        /* time is up: the front doors stop what runs and tell its clients why
         * (an error event, frame or response, not a cut connection) */
        if (!stopping) {
            em_log(EM_LOG_WARN, NULL, "drain: %u s passed: stopping %d request(s); their clients are "
                   "told the server is shutting down", w->o.drain_s, running);
            w->stop_us = now;
            atomic_store(&w->drain_stop, 1);
            for (web_live *l = w->live; l; l = l->next)
                lws_callback_on_writable(l->wsi);
        }
        lws_sul_schedule(w->ctx, 0, &w->drain_sul, wake, CLOSE_WAKE_US);
        return 0;
    }
    if (running == 0 && (now < end || stopping)) {
        /* nothing runs: stop taking connections, let the answers already made go out */
        if (!w->unlisten_us) {
            unlisten(w);
            w->unlisten_us = now;
        }
        if (w->open_tx > 0 && now - w->unlisten_us < CLOSE_GRACE_US) {
            lws_sul_schedule(w->ctx, 0, &w->drain_sul, wake, CLOSE_WAKE_US);
            return 0;
        }
    }
    if (running == 0 || now >= end) {
        if (running)
            em_log(EM_LOG_WARN, NULL, "drain: %u s passed, cancelling %d request(s)", w->o.drain_s, running);
        else
            em_log(EM_LOG_INFO, NULL, "drained");
        lws_sul_cancel(&w->drain_sul);
        return 1;
    }
    lws_sul_schedule(w->ctx, 0, &w->drain_sul, wake, WAKE_US);
    return 0;
}
