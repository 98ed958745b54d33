/* alive.c — the service thread's heartbeat, for the systemd watchdog
 * (firmware/notify.c): every turn of em_web_run's loop records the time,
 * and a timer turns the loop at least every BEAT_US even when no socket
 * stirs, so a heartbeat that stops moving means the lws thread is stuck
 * (in a callback, or the loop itself). */
#include <time.h>

#include "web/web_int.h"

#define BEAT_US (500 * 1000)

long long web_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

void web_alive_beat(em_web *w)
{
    atomic_store(&w->beat_us, web_now_us());
}

static void tick(lws_sorted_usec_list_t *sul)
{
    em_web *w = lws_container_of(sul, em_web, beat_sul);
    web_alive_beat(w);
    lws_sul_schedule(w->ctx, 0, &w->beat_sul, tick, BEAT_US);
}

void web_alive_start(em_web *w)
{
    web_alive_beat(w);
    lws_sul_schedule(w->ctx, 0, &w->beat_sul, tick, BEAT_US);
}

void web_alive_stop(em_web *w)
{
    lws_sul_cancel(&w->beat_sul);
}

long long em_web_heartbeat_us(em_web *w)
{
    return atomic_load(&w->beat_us);
}
