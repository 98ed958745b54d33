/* notify.c — the systemd side of `ember serve` (notify.h): READY=1,
 * STATUS= every few seconds, STOPPING=1 on drain, and the watchdog pinger.
 * One thread waits on a pipe (poll with the time to the next ping or
 * status) so that the signal handler can wake it with one write(). It pings
 * WATCHDOG=1 every WATCHDOG_USEC/2, but only while the scheduler thread and
 * the lws service thread have both beaten within WATCHDOG_USEC; when one
 * has not, it says which in STATUS= and on stderr, and stops pinging until
 * it beats again, so systemd restarts a daemon whose step is stuck.
 * sd_notify's send blocks while the manager's socket queue is full (systemd
 * reads it at once; a test's reader must too). */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <systemd/sd-daemon.h>

#include "firmware/notify.h"

#include "core/log.h"
#include "scheduler/scheduler.h"
#include "web/web.h"

/* The threads beat every half second when nothing happens: a WatchdogSec=
 * below this would count a beat due any moment as a stuck thread. */
#define FRESH_MIN_US 1500000

struct em_notify {
    em_sched  *s;
    em_web    *w;
    char       model_id[128];
    long long  watchdog_us;    /* WATCHDOG_USEC; 0: no watchdog */
    long long  fresh_us;       /* a heartbeat younger than this is fresh: WATCHDOG_USEC, at least FRESH_MIN_US */
    int        pipe_rd, pipe_wr;
    pthread_t  th;
    atomic_int stopping;       /* STOPPING=1 asked (em_notify_stopping, em_notify_stop) */
    atomic_int quit;           /* em_notify_stop: the thread ends */
    int        stopping_sent;  /* notifier thread */
    int        stale;          /* the watchdog pings are held back (notifier thread) */
};

static long long now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* Which thread has not beaten within WATCHDOG_USEC (NULL: both have), and how long ago it did. */
static const char *stale_thread(em_notify *n, long long now, double *age_s)
{
    long long sched = em_sched_heartbeat_us(n->s), web = em_web_heartbeat_us(n->w);
    if (now - sched >= n->fresh_us) {
        *age_s = (double)(now - sched) / 1e6;
        return "the scheduler thread";
    }
    if (now - web >= n->fresh_us) {
        *age_s = (double)(now - web) / 1e6;
        return "the service (lws) thread";
    }
    return NULL;
}

/* "STATUS=<model>: 2 running, 3 queued, 41.2 tokens/s" (+ draining, + a stuck thread). */
static void send_status(em_notify *n, const char *prefix, const char *stuck, double age_s)
{
    em_sched_stats st;
    em_sched_get_stats(n->s, &st);
    char msg[512];
    int k = snprintf(msg, sizeof msg, "%sSTATUS=%s%s: %u running, %u queued, %.1f tokens/s", prefix,
                     atomic_load(&n->stopping) ? "draining " : "", n->model_id,
                     st.running[0] + st.running[1], st.waiting[0] + st.waiting[1], st.tokens_per_s);
    if (stuck && k > 0 && (size_t)k < sizeof msg)
        snprintf(msg + k, sizeof msg - (size_t)k, "; watchdog not pinged: %s has shown no sign of life "
                 "for %.0f s", stuck, age_s);
    sd_notify(0, msg);
}

static void *thread_main(void *arg)
{
    em_notify *n = arg;
    long long period = n->watchdog_us / 2, status_us = (long long)(EM_NOTIFY_STATUS_S * 1e6);
    long long now = now_us(), next_ping = period ? now : 0, next_status = now + status_us;
    for (;;) {
        long long due = next_status;
        if (period && next_ping < due)
            due = next_ping;
        long long wait = due - now_us();
        struct pollfd pfd = { n->pipe_rd, POLLIN, 0 };
        if (poll(&pfd, 1, wait > 0 ? (int)((wait + 999) / 1000) : 0) > 0) {
            char buf[16];
            while (read(n->pipe_rd, buf, sizeof buf) > 0)
                ;
        }
        int quit = atomic_load(&n->quit);
        if (atomic_load(&n->stopping) && !n->stopping_sent) {
            n->stopping_sent = 1;
            send_status(n, "STOPPING=1\n", NULL, 0);
        }
        if (quit)
            break;
        now = now_us();
        double age_s = 0;
        const char *stuck = period ? stale_thread(n, now, &age_s) : NULL;
        if (period && now >= next_ping) {
            if (!stuck) {
                if (n->stale)
                    em_log(EM_LOG_WARN, NULL, "serve: watchdog: both threads beat again: pinging");
                sd_notify(0, "WATCHDOG=1");
            } else if (!n->stale) {
                em_log(EM_LOG_ERROR, NULL, "serve: watchdog: %s has shown no sign of life for %.0f s: no more "
                       "pings (the service manager restarts the service)", stuck, age_s);
                send_status(n, "", stuck, age_s);   /* say why at once */
            }
            n->stale = stuck != NULL;
            next_ping += period;
            if (next_ping <= now)   /* late (a stopped process): go on from now, do not burst */
                next_ping = now + period;
        }
        if (now >= next_status) {
            send_status(n, "", stuck, age_s);
            next_status += status_us;
            if (next_status <= now)
                next_status = now + status_us;
        }
    }
    return NULL;
}

int em_notify_start(em_sched *s, em_web *w, const char *model_id, em_notify **out, em_err *err)
{
    *out = NULL;
    const char *sock = getenv("NOTIFY_SOCKET");
    if (!sock || !*sock)
        return 0;   /* not started by a service manager that listens */
    em_notify *n = calloc(1, sizeof *n);
    if (!n)
        return em_err_set(err, EM_ENOMEM, "serve: out of memory");
    n->s = s;
    n->w = w;
    snprintf(n->model_id, sizeof n->model_id, "%s", model_id ? model_id : "ember");
    uint64_t usec = 0;
    if (sd_watchdog_enabled(0, &usec) > 0)
        n->watchdog_us = (long long)usec;
    n->fresh_us = n->watchdog_us > FRESH_MIN_US ? n->watchdog_us : FRESH_MIN_US;
    int fds[2];
    if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) {
        free(n);
        return em_err_set(err, EM_EIO, "serve: notify: pipe: %s", strerror(errno));
    }
    n->pipe_rd = fds[0];
    n->pipe_wr = fds[1];
    send_status(n, "READY=1\n", NULL, 0);
    /* signals go to the other threads: the handler's write() never lands here */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    int rc = pthread_create(&n->th, NULL, thread_main, n);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        close(n->pipe_rd);
        close(n->pipe_wr);
        free(n);
        return em_err_set(err, EM_ENOMEM, "serve: notify: cannot start its thread");
    }
    *out = n;
    return 0;
}

void em_notify_stopping(em_notify *n)
{
    if (!n)
        return;
    atomic_store(&n->stopping, 1);
    ssize_t r = write(n->pipe_wr, "d", 1);   /* a full pipe: the thread is awake anyway */
    (void)r;
}

void em_notify_stop(em_notify *n)
{
    if (!n)
        return;
    atomic_store(&n->stopping, 1);
    atomic_store(&n->quit, 1);
    while (write(n->pipe_wr, "q", 1) < 0 && errno == EINTR)
        ;   /* EAGAIN: the pipe is full, the thread wakes anyway */
    pthread_join(n->th, NULL);   /* it sends STOPPING=1 on its way out unless it did */
    close(n->pipe_rd);
    close(n->pipe_wr);
    free(n);
}
