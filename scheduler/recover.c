/* recover.c — a device that fails under the scheduler: the requests
 * running get the error, the backend rebuilds the device (and the draft
 * model's), the prefix cache is forgotten (its blocks held what the old
 * device computed); a rebuild that fails leaves the device down — every
 * request then fails at once saying why — and is tried again every
 * EM_SCHED_RECOVER_S. */
#include <stdio.h>

#include "core/log.h"
#include "scheduler/sched_int.h"

/* Have the backend rebuild the device, and forget the prefix cache, whose
 * blocks held what the old device computed: 0 when it did (serving again);
 * otherwise the device is down — every request fails at once with why,
 * /healthz says so — until the next try, EM_SCHED_RECOVER_S on (made by
 * the next step or the idle loop, whichever comes first). */
int sched_rebuild_device(em_sched *s)
{
    em_err err = { 0 };
    double t0 = em_sched_now();
    if (s->be.recover(s->be.ctx, &err)) {
        s->recover_after = em_sched_now() + EM_SCHED_RECOVER_S;
        pthread_mutex_lock(&s->mu);
        s->st.device_down = 1;
        snprintf(s->st.device_error, sizeof s->st.device_error, "%s", err.msg[0] ? err.msg : "device error");
        pthread_mutex_unlock(&s->mu);
        em_log(EM_LOG_ERROR, NULL, "scheduler: the device could not be rebuilt: %s (trying again in %.0f s)",
               err.msg, EM_SCHED_RECOVER_S);
        return -1;
    }
    em_kv_drop_cached(s->kv);
    if (s->draft_down) {
        em_err derr = { 0 };
        if (s->dbe.recover && s->dbe.recover(s->dbe.ctx, &derr) == 0) {
            em_kv_drop_cached(s->dkv);
            s->draft_down = 0;
        } else {
            if (!s->dbe.recover)
                em_err_set(&derr, EM_EDEVICE, "it cannot be rebuilt");
            sched_draft_off(s, &derr);
        }
    }
    pthread_mutex_lock(&s->mu);
    s->st.device_resets++;
    s->st.device_down = 0;
    s->st.device_error[0] = 0;
    pthread_mutex_unlock(&s->mu);
    em_log(EM_LOG_WARN, NULL, "scheduler: the device is rebuilt and checked (%.0f ms): serving again",
           (em_sched_now() - t0) * 1e3);
    return 0;
}

/* A step failed on the device (counted) and its requests have the error:
 * rebuild it. */
void sched_recover_device(em_sched *s, const em_err *why)
{
    /* a draft model on the same device is gone with it: no drafts until it
     * is rebuilt too */
    s->draft_down = s->has_draft;
    if (!s->be.recover)
        return;
    em_log(EM_LOG_ERROR, NULL, "scheduler: the device failed (%s): the requests running got the error; "
           "rebuilding the device", why->msg[0] ? why->msg : "device error");
    sched_rebuild_device(s);
}

/* While the device is down: every request, running or waiting, fails with
 * why it cannot run. */
void sched_fail_down(em_sched *s)
{
    char msg[sizeof s->st.device_error + 128];
    pthread_mutex_lock(&s->mu);
    snprintf(msg, sizeof msg, "the device is down: it failed and could not be rebuilt (%s); ember tries again "
             "every %.0f s", s->st.device_error, EM_SCHED_RECOVER_S);
    pthread_mutex_unlock(&s->mu);
    sched_fail_all(s, msg);
    sched_finish_waiting(s, EM_FINISH_ERROR, msg);
}
