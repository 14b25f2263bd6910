/* progress.h: a one-line progress bar with ETA on stderr (for TTYs), per algorithm and
 * overall. Off (every call a no-op) when not enabled. */
#ifndef AL_PROGRESS_H
#define AL_PROGRESS_H

#include <stdio.h>

#define AL__PROGRESS_MAX_TASKS 8

typedef struct al__progress {
    int on;
    FILE *out;
    double t0, last_draw;
    double total, done; /* overall work units */
    int n_tasks;
    const char *task_name[AL__PROGRESS_MAX_TASKS];
    int task_total[AL__PROGRESS_MAX_TASKS], task_done[AL__PROGRESS_MAX_TASKS];
    char status[96];
} al__progress;

/* on: 0 off; 1 a bar redrawn in place (a TTY); 2 plain lines, one every
 * $ATTNLIM_PROGRESS_INTERVAL seconds (default 10) and one at the end (not a TTY: logs, mpirun,
 * batch schedulers). total: overall work units. */
void al__progress_begin(al__progress *p, int on, FILE *out, double total);
/* Declares a task (an algorithm) with its number of steps; returns its index. */
int al__progress_task(al__progress *p, const char *name, int total);
void al__progress_task_step(al__progress *p, int task);
/* Adds work units done and sets the status text (may be NULL); redraws at most 10x/s. */
void al__progress_add(al__progress *p, double units, const char *status);
void al__progress_end(al__progress *p);
/* "1m05s" style duration. */
void al__progress_fmt_time(double seconds, char *buf, size_t size);

#endif
