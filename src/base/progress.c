/* progress.c: progress bar with ETA for long runs (see progress.h). */
#include "progress.h"

#include "internal.h"

#include <stdlib.h>
#include <string.h>

void al__progress_fmt_time(double s, char *buf, size_t size) {
    if (!(s >= 0) || s > 1e7) {
        snprintf(buf, size, "--");
        return;
    }
    long t = (long)(s + 0.5);
    if (t >= 3600)
        snprintf(buf, size, "%ldh%02ldm", t / 3600, (t / 60) % 60);
    else if (t >= 60)
        snprintf(buf, size, "%ldm%02lds", t / 60, t % 60);
    else
        snprintf(buf, size, "%lds", t);
}

void al__progress_begin(al__progress *p, int on, FILE *out, double total) {
    memset(p, 0, sizeof *p);
    p->on = on;
    p->out = out ? out : stderr;
    p->t0 = p->last_draw = al__now(); /* plain lines: the first after one interval */
    p->total = total > 0 ? total : 1;
}

int al__progress_task(al__progress *p, const char *name, int total) {
    if (p->n_tasks >= AL__PROGRESS_MAX_TASKS) return AL__PROGRESS_MAX_TASKS - 1;
    int i = p->n_tasks++;
    p->task_name[i] = name;
    p->task_total[i] = total;
    p->task_done[i] = 0;
    return i;
}

/* Not a TTY (logs, mpirun, batch schedulers): a plain line every interval seconds
 * ($ATTNLIM_PROGRESS_INTERVAL, default 10), never a carriage return or an escape code. */
static double plain_interval(void) {
    const char *e = getenv("ATTNLIM_PROGRESS_INTERVAL");
    char *end;
    double v = e ? strtod(e, &end) : 10;
    return e && (end == e || !(v >= 0)) ? 10 : v;
}

static void draw(al__progress *p, int force) {
    if (!p->on) return;
    double now = al__now();
    if (p->on == 2) force = force == 2; /* plain lines: by the clock, and the last one */
    if (!force && now - p->last_draw < (p->on == 2 ? plain_interval() : 0.1)) return;
    p->last_draw = now;
    double frac = p->done / p->total;
    if (frac > 1) frac = 1;
    if (frac < 0) frac = 0;
    char bar[25];
    int fill = (int)(frac * 24 + 0.5);
    for (int i = 0; i < 24; i++) bar[i] = i < fill ? '#' : '.';
    bar[24] = 0;
    double el = now - p->t0;
    char eta[32], elapsed[32];
    al__progress_fmt_time(frac > 0.005 ? el / frac * (1 - frac) : -1, eta, sizeof eta);
    al__progress_fmt_time(el, elapsed, sizeof elapsed);
    char tasks[256] = "";
    size_t k = 0;
    for (int i = 0; i < p->n_tasks && k < sizeof tasks - 32; i++)
        k += (size_t)snprintf(tasks + k, sizeof tasks - k, "%s%s %d/%d", i ? " " : "",
                              p->task_name[i], p->task_done[i], p->task_total[i]);
    if (p->on == 2)
        fprintf(p->out, "progress: %3.0f%% done, %s elapsed, ETA %s | %s | %s\n", frac * 100,
                elapsed, eta, tasks, p->status);
    else
        fprintf(p->out, "\r\033[K[%s] %3.0f%% %s ETA %s | %s | %s", bar, frac * 100, elapsed, eta,
                tasks, p->status);
    fflush(p->out);
}

void al__progress_task_step(al__progress *p, int task) {
    if (task >= 0 && task < p->n_tasks) p->task_done[task]++;
    draw(p, 1);
}

void al__progress_add(al__progress *p, double units, const char *status) {
    p->done += units;
    if (status) snprintf(p->status, sizeof p->status, "%s", status);
    draw(p, 0);
}

void al__progress_end(al__progress *p) {
    if (!p->on) return;
    p->done = p->total;
    draw(p, 2);
    if (p->on != 2) fputc('\n', p->out);
    fflush(p->out);
}
