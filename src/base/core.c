/* core.c: version, error values, checked allocation, random numbers, time. */
#include "internal.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif
#include <math.h>

const char *al_version(void) {
    return AL_VERSION;
}

const char *al_code_name(al_code code) {
    switch (code) {
    case AL_OK:
        return "ok";
    case AL_E_INVALID:
        return "invalid argument";
    case AL_E_IO:
        return "input/output error";
    case AL_E_FORMAT:
        return "format error";
    case AL_E_NOMEM:
        return "out of memory";
    case AL_E_RANGE:
        return "value out of range";
    case AL_E_UNSUPPORTED:
        return "unsupported";
    case AL_E_NOTFOUND:
        return "not found";
    case AL_E_CANCELLED:
        return "cancelled";
    }
    return "unknown error";
}

int al_error_vset(al_error *err, al_code code, const char *fmt, va_list ap) {
    if (err) {
        err->code = code;
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    }
    return (int)code;
}

int al_error_set(al_error *err, al_code code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int rc = al_error_vset(err, code, fmt, ap);
    va_end(ap);
    return rc;
}

int al__err(al_error *err, al_code code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int rc = al_error_vset(err, code, fmt, ap);
    va_end(ap);
    return rc;
}

int al__err_prefix(al_error *err, al_code code, const char *fmt, ...) {
    if (!err) return (int)code;
    char prefix[512], old[sizeof err->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, err->msg, sizeof old);
    if (err->code == AL_OK) err->code = code;
    snprintf(err->msg, sizeof err->msg, "%s: %s", prefix, old);
    return (int)err->code;
}

void *al__malloc(size_t n, const char *what, al_error *err) {
    void *p = malloc(n ? n : 1);
    if (!p) al__err(err, AL_E_NOMEM, "out of memory allocating %zu bytes for %s", n, what);
    return p;
}

void *al__calloc(size_t count, size_t size, const char *what, al_error *err) {
    size_t n;
    if (!al__mul_ok(count, size, &n)) {
        al__err(err, AL_E_NOMEM, "size overflow allocating %zu x %zu bytes for %s", count, size,
                what);
        return NULL;
    }
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (!p) al__err(err, AL_E_NOMEM, "out of memory allocating %zu bytes for %s", n, what);
    return p;
}

void *al__malloc_aligned(size_t n, const char *what, al_error *err) {
    void *p = NULL;
    size_t rounded = (n + 63) & ~(size_t)63;
    if (rounded < n || posix_memalign(&p, 64, rounded ? rounded : 64) != 0) {
        al__err(err, AL_E_NOMEM, "out of memory allocating %zu bytes for %s", n, what);
        return NULL;
    }
    return p;
}

void *al__malloc_huge(size_t n, const char *what, al_error *err) {
    const size_t H = (size_t)1 << 21; /* 2 MiB: an x86-64 huge page */
    if (n < H) return al__malloc_aligned(n, what, err);
    void *p = NULL;
    size_t rounded = (n + H - 1) & ~(H - 1);
    if (rounded < n || posix_memalign(&p, H, rounded) != 0) {
        al__err(err, AL_E_NOMEM, "out of memory allocating %zu bytes for %s", n, what);
        return NULL;
    }
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    (void)madvise(p, rounded, MADV_HUGEPAGE); /* a hint: refused (no THP), the pages stay 4 KiB */
#endif
    return p;
}

double al__now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

uint64_t al__hash64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

void al__rng_seed(al__rng *r, uint64_t seed) {
    uint64_t x = seed;
    for (int i = 0; i < 4; i++) {
        x = al__hash64(x);
        r->s[i] = x;
    }
    if (!(r->s[0] | r->s[1] | r->s[2] | r->s[3])) r->s[0] = 1;
}

uint64_t al__rng_next(al__rng *r) {
    return al__rng_next_inline(r);
}

double al__rng_uniform(al__rng *r) {
    return al__rng_uniform_inline(r);
}

double al__rng_normal(al__rng *r) {
    double u1;
    do u1 = al__rng_uniform(r);
    while (u1 <= 0.0);
    double u2 = al__rng_uniform(r);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* al_cancel: one flag, written from a signal handler (sig_atomic_t), read between layers. */
#include <signal.h>
static volatile sig_atomic_t cancel_flag;
void al_cancel(void) {
    cancel_flag = 1;
}
void al_cancel_reset(void) {
    cancel_flag = 0;
}
int al__cancelled(void) {
    return cancel_flag != 0;
}
