/* notify.h — `ember serve` under systemd (Type=notify, WatchdogSec=):
 * READY=1 once the port is bound, STATUS= with the requests running and
 * queued and the tokens/s every few seconds, STOPPING=1 when it drains, and
 * WATCHDOG=1 pings only while both the scheduler thread and the lws service
 * thread show signs of life (em_sched_heartbeat_us, em_web_heartbeat_us):
 * a stuck step stops the pings and systemd restarts the service.
 * Everything goes through libsystemd's sd_notify; without NOTIFY_SOCKET in
 * the environment nothing is sent and no thread runs. docs/INSTALL.md. */
#ifndef EM_NOTIFY_H
#define EM_NOTIFY_H

#include "core/err.h"

struct em_sched;
struct em_web;

typedef struct em_notify em_notify;

#define EM_NOTIFY_STATUS_S 2.0   /* seconds between STATUS= updates */

/* Send READY=1 (with a first STATUS=) and start the notifier thread: a
 * STATUS= every EM_NOTIFY_STATUS_S, and where the service manager set
 * WATCHDOG_USEC (sd_watchdog_enabled), a WATCHDOG=1 every WATCHDOG_USEC/2
 * while both heartbeats are younger than WATCHDOG_USEC (at least 1.5 s: the
 * idle threads beat every half second), so a step may take up to
 * WatchdogSec before it counts as stuck. Without NOTIFY_SOCKET:
 * returns 0 with *out NULL. s and w are borrowed and must outlive
 * em_notify_stop; *out is the caller's (em_notify_stop). EM_ENOMEM / EM_EIO
 * when the thread cannot start. */
int  em_notify_start(struct em_sched *s, struct em_web *w, const char *model_id, em_notify **out,
                     em_err *err);

/* The service drains (first SIGINT/SIGTERM): async-signal-safe (one
 * write() to a pipe); the thread sends STOPPING=1 and says "draining" in
 * STATUS=. Accepts NULL. */
void em_notify_stopping(em_notify *n);

/* Send STOPPING=1 unless it was sent, stop the thread, free. Accepts NULL. */
void em_notify_stop(em_notify *n);

#endif
