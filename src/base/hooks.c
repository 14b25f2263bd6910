/* hooks.c: progress and cancellation (per thread), messages and the network permission
 * (process-wide), al_free (see hooks.h and include/attnlim.h). */
#include "hooks.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

void al_free(void *p) {
    free(p);
}

/* ---- progress and cancellation: the calling thread's ---------------------------------------- */

static _Thread_local al_progress_fn progress_fn;
static _Thread_local void *progress_user;
static _Thread_local int progress_stopped;

void al_set_progress(al_progress_fn fn, void *user) {
    progress_fn = fn;
    progress_user = user;
    progress_stopped = 0;
}

int al__stopped(void) {
    return progress_stopped;
}

int al__poll(const char *stage, int64_t done, int64_t total, al_error *err) {
    if (!progress_stopped && progress_fn && progress_fn(progress_user, stage, done, total) != 0)
        progress_stopped = 1;
    if (!progress_stopped) return 0;
    return al__err(err, AL_E_CANCELLED, "%s: cancelled by the caller (progress callback)", stage);
}

/* ---- messages ------------------------------------------------------------------------------- */

typedef struct log_sink {
    al_log_fn fn;
    void *user;
} log_sink;
static _Atomic(log_sink *) log_current;
static log_sink log_slots[2]; /* set alternately, so that a reader never sees a half-set sink */
static atomic_int log_next;

void al_set_log(al_log_fn fn, void *user) {
    if (!fn) {
        atomic_store(&log_current, NULL);
        return;
    }
    log_sink *s = &log_slots[atomic_fetch_add(&log_next, 1) & 1];
    s->fn = fn, s->user = user;
    atomic_store(&log_current, s);
}

void al__log(al_log_level level, const char *fmt, ...) {
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    log_sink *s = atomic_load(&log_current);
    if (s) {
        s->fn(s->user, level, msg);
        return;
    }
    (void)level;
    fprintf(stderr, "%s\n", msg);
}

/* ---- network -------------------------------------------------------------------------------- */

static atomic_int network_allowed;

int al_set_network(int allowed) {
    return atomic_exchange(&network_allowed, allowed ? 1 : 0);
}

int al__network_allowed(void) {
    if (atomic_load(&network_allowed)) return 1;
    const char *e = getenv("ATTNLIM_ALLOW_NETWORK");
    return e && strcmp(e, "1") == 0;
}

/* ---- threads -------------------------------------------------------------------------------- */

#include <omp.h>

void al_set_threads(int n) {
    omp_set_num_threads(n > 0 ? n : omp_get_num_procs());
}

/* OpenBLAS's thread count is process-wide: the kernels set it to 1 while they run (they split
 * their work over OpenMP threads themselves); a public entry point records it first and puts it
 * back before returning (not from inside a parallel region: the outermost call restores). */
#include <cblas.h>

int al__blas_save(void) {
    return omp_in_parallel() ? -1 : openblas_get_num_threads();
}

void al__blas_restore(int saved) {
    if (saved > 0 && !omp_in_parallel() && openblas_get_num_threads() != saved)
        openblas_set_num_threads(saved);
}
