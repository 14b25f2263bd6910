/* internal.h: the base layer's helpers shared by every module of src/ (not part of the public
 * API): errors, allocation, files, atomic writes, little-endian reads, time, random numbers,
 * number tokens. Each upper layer declares its own internals in its own headers (model.h,
 * tokenizer.h, stats.h, ...). */
#ifndef AL_INTERNAL_H
#define AL_INTERNAL_H

#include "attnlim.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>

#if defined(__GNUC__)
#define AL_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define AL_PRINTF(a, b)
#endif

/* Sets err (if not NULL) and returns code. Usage: return al__err(err, AL_E_FORMAT, "%s: ...",
 * path); */
int al__err(al_error *err, al_code code, const char *fmt, ...) AL_PRINTF(3, 4);
/* Prefixes err->msg with "prefix: " (keeps the code). Returns err->code (or code if err NULL). */
int al__err_prefix(al_error *err, al_code code, const char *fmt, ...) AL_PRINTF(3, 4);

/* Overflow-checked size arithmetic: return false on overflow. */
static inline bool al__mul_ok(size_t a, size_t b, size_t *out) {
    return !__builtin_mul_overflow(a, b, out);
}
static inline bool al__add_ok(size_t a, size_t b, size_t *out) {
    return !__builtin_add_overflow(a, b, out);
}

/* The keys row t of L sees (METHOD: n = the number of keys a row sees): [lo, t] for a causal
 * row, lo = max(0, t - window + 1) under a sliding window (window 0: none); every key of L for a
 * bidirectional row. */
static inline int64_t al__row_lo(int64_t t, int causal, int64_t window) {
    return causal && window > 0 && t >= window ? t - window + 1 : 0;
}
static inline int64_t al__row_n(int64_t t, int64_t L, int causal, int64_t window) {
    return causal ? t + 1 - al__row_lo(t, causal, window) : L;
}

/* Checked allocation: NULL with err set ("out of memory allocating N bytes for WHAT"). */
void *al__malloc(size_t n, const char *what, al_error *err);
void *al__calloc(size_t count, size_t size, const char *what, al_error *err);
void *al__malloc_aligned(size_t n, const char *what, al_error *err); /* 64-byte aligned; free() */
/* For the large matrices streamed row by row (the Gram matrices of the metrics): from 2 MiB on,
 * 2 MiB aligned and madvise'd for transparent huge pages (fewer TLB misses when every row of a
 * head walks most of an 8 MB L = 1024 matrix; the kernel's THP setting "madvise" honours it),
 * else as al__malloc_aligned; free(). */
void *al__malloc_huge(size_t n, const char *what, al_error *err);

/* Opens path for reading, refusing anything but a regular file (a FIFO, device, socket or
 * directory is named in the message) without blocking on it: opened O_NONBLOCK, checked with
 * fstat, then set back to blocking. The fd (O_CLOEXEC) in *fd. Every input goes through it. */
int al__open_read(const char *path, int *fd, al_error *err);
/* The same as a stdio stream ("rb"); NULL with err set. */
FILE *al__fopen_read(const char *path, al_error *err);
/* "a FIFO", "a directory", "a symbolic link", ... for the messages */
const char *al__file_kind(unsigned mode);

/* Reads a whole file into a NUL-terminated malloc'ed buffer (max_size caps it). "-" is stdin;
 * any other path must be a regular file (al__open_read). */
int al__read_file(const char *path, size_t max_size, char **out, size_t *len, al_error *err);

/* A read-only mapping of a whole file (a regular file: al__open_read). */
typedef struct al__map {
    const unsigned char *data;
    size_t size;
} al__map;
int al__map_file(const char *path, al__map *m, al_error *err);
void al__unmap(al__map *m);

/* Edit distance (optimal string alignment, case-insensitive) of two short names. */
int al__edit_distance(const char *a, const char *b);
/* The one candidate nearest to s (at most 1 edit for names up to 4 bytes, 2 up to 8, else 3; a
 * prefix of 3+ characters counts as near), or NULL when none or when two are equally near. */
const char *al__nearest(const char *s, const char *const *cand, int n);

/* Has al_cancel been called (since al_cancel_reset)? */
int al__cancelled(void);

/* Atomic output: open creates "<name>.tmp.<pid><random>" beside path, inside the directory
 * opened once (openat on its fd, O_CREAT | O_EXCL | O_NOFOLLOW: never through a planted link),
 * and checks it is a regular file of ours; commit fsyncs and renames it onto path in that same
 * directory; abort removes it. path itself, when it exists, must be a regular file owned by
 * us: a symbolic link, FIFO, device or directory there (or another user's file) is refused,
 * naming it. Writes are checked; a failed write (full disk, file-size limit) is an error naming
 * the file, and nothing is left. */
typedef struct al__afile {
    FILE *f;
    char path[4096];
    char tmp[4096 + 48];
    bool failed;
    bool have_dir;
    int dirfd;         /* the directory of path */
    char name[256];    /* path's last component, in dirfd */
    char tmpname[300]; /* the temporary's, in dirfd */
} al__afile;
int al__afile_open(al__afile *a, const char *path, al_error *err);
int al__afile_write(al__afile *a, const void *buf, size_t n, al_error *err);
int al__afile_printf(al__afile *a, al_error *err, const char *fmt, ...) AL_PRINTF(3, 4);
int al__afile_commit(al__afile *a, al_error *err);
void al__afile_abort(al__afile *a);
/* Writes a whole buffer to path atomically. */
int al__write_file_atomic(const char *path, const void *buf, size_t n, al_error *err);
/* Is something other than a directory at path (following links)? Used to ask "is the file
 * there?": the opener then refuses what is not a regular file, so that a FIFO or device
 * planted at an input's name is an error naming it, never silently skipped. */
bool al__is_file(const char *path);
/* Is path a directory (following links)? */
bool al__is_dir(const char *path);
/* A directory attnlim makes inside its own output: created, or when present a real directory
 * (not a symbolic link) owned by us; else an error naming it. */
int al__mkdir_own(const char *path, al_error *err);
/* Checks path's SHA-256 against the pinned want (64 hex digits); a mismatch is an error naming
 * the file, both hashes and what the file is (what), unless $ATTNLIM_NO_VERIFY=1. */
int al__check_sha256(const char *path, const char *want, const char *what, al_error *err);
/* Runs argv without a shell, the child's stdout sent to our stderr (our stdout stays clean for
 * --json). Returns the child's exit status, or -1 when it could not run or was killed. */
int al__run(char *const argv[]);
/* mkdir -p */
int al__mkdirs(const char *path, al_error *err);

/* Little-endian loads from untrusted bytes. */
static inline uint16_t al__le16(const unsigned char *p) {
    return (uint16_t)(p[0] | (p[1] << 8));
}
static inline uint32_t al__le32(const unsigned char *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static inline uint64_t al__le64(const unsigned char *p) {
    return (uint64_t)al__le32(p) | ((uint64_t)al__le32(p + 4) << 32);
}

/* Monotonic seconds. */
double al__now(void);

/* SplitMix64 / xoshiro256** seeded generator (deterministic across platforms). */
typedef struct al__rng {
    uint64_t s[4];
} al__rng;
void al__rng_seed(al__rng *r, uint64_t seed);
uint64_t al__rng_next(al__rng *r);
double al__rng_uniform(al__rng *r); /* [0, 1) with 53 bits */
double al__rng_normal(al__rng *r);  /* standard normal (Box-Muller, no cached state) */
/* xoshiro256**'s state step on s[4]: uint64_t, or a GCC vector of them (the same operators:
 * sensitivity.c steps one generator per vector lane with it) */
#define AL__XOSHIRO_ADVANCE(s)                                                                     \
    do {                                                                                           \
        __typeof__((s)[1]) t_ = (s)[1] << 17;                                                      \
        (s)[2] ^= (s)[0];                                                                          \
        (s)[3] ^= (s)[1];                                                                          \
        (s)[1] ^= (s)[2];                                                                          \
        (s)[0] ^= (s)[3];                                                                          \
        (s)[2] ^= t_;                                                                              \
        (s)[3] = ((s)[3] << 45) | ((s)[3] >> 19);                                                  \
    } while (0)
/* al__rng_next and al__rng_uniform themselves, inline for the hot loops that draw many */
static inline uint64_t al__rng_next_inline(al__rng *r) {
    uint64_t *s = r->s, x = s[1] * 5;
    const uint64_t result = ((x << 7) | (x >> 57)) * 9;
    AL__XOSHIRO_ADVANCE(s);
    return result;
}
static inline double al__rng_uniform_inline(al__rng *r) {
    return (double)(al__rng_next_inline(r) >> 11) * 0x1.0p-53;
}
uint64_t al__hash64(uint64_t x); /* SplitMix64 finaliser: mixes seeds with indices */

/* numparse.c: one decimal number token (NUL-terminated) as the text readers and the CLI take it:
 * [+-] digits [. digits] [e [+-] digits]. 0 with *out set (and *underflow = 1 when the value
 * rounds to 0 or a subnormal), or why it is refused. */
enum { AL__NUM_SYNTAX = 1, AL__NUM_HEX, AL__NUM_NONFINITE, AL__NUM_OVERFLOW };
int al__number_token(const char *tok, double *out, int *underflow);

#endif
