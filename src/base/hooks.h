/* hooks.h: the library's side of what the caller hands it (include/attnlim.h: al_set_progress,
 * al_set_log, al_set_network): polling for cancellation, emitting messages, asking whether the
 * network may be used. */
#ifndef AL_HOOKS_H
#define AL_HOOKS_H

#include "internal.h"

/* Between units of work: calls the calling thread's progress callback (none on worker threads:
 * they never have one). Returns 0 to go on, or AL_E_CANCELLED with err set ("<stage>: cancelled
 * by the caller (progress callback)") once the callback has asked to stop; every later poll on
 * this thread says so too, until al_set_progress is called again. */
int al__poll(const char *stage, int64_t done, int64_t total, al_error *err);
/* Has the calling thread's callback asked to stop? (No call of the callback.) */
int al__stopped(void);

/* A message to the log callback (default: the message and a newline on stderr). Messages are
 * whole lines, "attnlim: ..." or "attnlim CMD: ..." ("attnlim: warning: ..." for warnings). */
void al__log(al_log_level level, const char *fmt, ...) AL_PRINTF(2, 3);

/* 1 when the caller allowed network fetches (al_set_network, or ATTNLIM_ALLOW_NETWORK=1). */
int al__network_allowed(void);

/* OpenBLAS's thread count, saved by a public entry point before its kernels set it to 1 and
 * restored before it returns (-1 inside a parallel region: nothing to restore there). */
int al__blas_save(void);
void al__blas_restore(int saved);

#endif
