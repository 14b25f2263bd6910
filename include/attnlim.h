/* attnlim.h: the public API of attnlim, a toolkit that measures the limits of
 * normalization in attention (Mudarisov, Burtsev, Petrova, State; arXiv 2508.17821).
 *
 * Conventions (every function of this header):
 *  - Prefix al_. Opaque contexts own their memory: al_x_open/al_x_free pairs.
 *  - Errors are values: functions return 0 on success or an al_code, and fill the
 *    al_error given (which may be NULL) with a message naming the file and the fault.
 *  - Shapes are written beside every array argument, row-major, as [rows, cols].
 *  - Float accumulations are in double. No globals; every function is re-entrant.
 *  - Definitions follow docs/METHOD.md (a copy of the project's spec). Where the spec says
 *    [reading], the result is our reconstruction of a formula the paper does not print.
 */
#ifndef ATTNLIM_H
#define ATTNLIM_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* ==== Version, export ======================================================================= */

#define AL_VERSION_MAJOR 0
#define AL_VERSION_MINOR 1
#define AL_VERSION_PATCH 0
/* One number for comparisons: #if AL_VERSION_NUMBER >= AL_VERSION_ENCODE(0, 1, 0). */
#define AL_VERSION_ENCODE(major, minor, patch) ((major)*10000 + (minor)*100 + (patch))
#define AL_VERSION_NUMBER                      (AL_VERSION_MAJOR * 10000 + AL_VERSION_MINOR * 100 + AL_VERSION_PATCH)

/* AL_API marks the public API: libattnlim.so exports exactly these functions (its version
 * script, cmake/attnlim.map, keeps al_ + letter/digit and makes every other symbol local). */
#if defined(__GNUC__) || defined(__clang__)
#define AL_API __attribute__((visibility("default")))
#else
#define AL_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ==== Version and errors ================================================================= */

AL_API const char *al_version(void); /* "0.1.0" */

typedef enum al_code {
    AL_OK = 0,
    AL_E_INVALID = 1,     /* bad argument or option */
    AL_E_IO = 2,          /* a file could not be opened, read or written */
    AL_E_FORMAT = 3,      /* a file is malformed (names the file and the fault) */
    AL_E_NOMEM = 4,       /* out of memory, or a size that would overflow */
    AL_E_RANGE = 5,       /* NaN/Inf or a value out of its domain (names the position) */
    AL_E_UNSUPPORTED = 6, /* a valid input we do not support (names what) */
    AL_E_NOTFOUND = 7,    /* a data file, tensor or model that is not there */
    AL_E_CANCELLED = 8,   /* stopped by an observer or the progress callback (al_set_progress) */
} al_code;

typedef struct al_error {
    al_code code;
    char msg[1024];
} al_error;

AL_API const char *al_code_name(al_code code); /* "invalid argument", "format error", ... */
/* The one error formatter: sets err (if not NULL) to code and the printf-formatted message,
 * truncated to fit; returns code. al_error_vset takes a va_list. */
AL_API int al_error_set(al_error *err, al_code code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
AL_API int al_error_vset(al_error *err, al_code code, const char *fmt, va_list ap);

/* ==== What the caller hands the library: progress and cancellation, messages, policy ======= */

/* Frees memory the library handed out with malloc (al_tokenize's ids, al_detokenize's bytes,
 * al_corpus_load's text, al_diagnose's JSON, ...). NULL is a no-op. */
AL_API void al_free(void *p);

/* Progress and cancellation. Long operations call fn between units of work: al_model_forward
 * once per layer (with or without a capture), al_head_metrics every 64 rows, al_reproduce and
 * al_diagnose (and the other experiments) between jobs and before each head. stage names the
 * unit ("forward": a layer, "heads": a head, "head metrics": 64 rows, "reproduce": a job); done
 * and total count the units (total 0 when not known).
 * fn returns 0 to go on, non-zero to stop: the operation then returns AL_E_CANCELLED promptly
 * (within one unit of work), with nothing half-written (al_reproduce keeps only what
 * --resume reuses, never a final output). The callback belongs to the calling thread: set it
 * before the call, on the thread that makes the call; it is called only on that thread (never
 * from the library's worker threads). al_set_progress(NULL, NULL) removes it, and every call
 * of al_set_progress clears the "stopped" state. */
typedef int (*al_progress_fn)(void *user, const char *stage, int64_t done, int64_t total);
AL_API void al_set_progress(al_progress_fn fn, void *user);

/* Messages (warnings and notes; errors are values, never messages). The library writes none
 * to stderr itself: it hands each to the log callback, which by default writes it and a newline
 * to stderr. A message is one line: "attnlim: ...", "attnlim reproduce: ..." or, for warnings,
 * "attnlim: warning: ...".
 * al_set_log(NULL, NULL) restores the default; a callback that does nothing silences them.
 * Process-wide (set it once, before other threads call the library); fn may be called from
 * any thread, one message at a time. */
typedef enum al_log_level { AL_LOG_NOTE = 0, AL_LOG_WARNING = 1 } al_log_level;
typedef void (*al_log_fn)(void *user, al_log_level level, const char *msg);
AL_API void al_set_log(al_log_fn fn, void *user);

/* Network: the library fetches nothing (a known model or a data file that is not on disk is
 * AL_E_NOTFOUND, saying how to get it) unless the caller allows it (al_set_network(1), or
 * ATTNLIM_ALLOW_NETWORK=1 in the environment); the CLI does. Process-wide; returns the previous
 * setting. A local wheelhouse ($ATTNLIM_WHEELHOUSE) is not the network. */
AL_API int al_set_network(int allowed);

/* Threads: the library never changes the process's thread settings on its own. Its kernels
 * take the OpenMP default (OMP_NUM_THREADS, or all cores) unless a call's options say
 * otherwise (threads fields), and OpenBLAS's thread count is set to 1 only for the duration
 * of a call that needs it and restored before the call returns. al_set_threads(n) (n <= 0:
 * all cores) sets OpenMP's count for the calling thread, for callers that want to. */
AL_API void al_set_threads(int n);

/* ==== Arrays and NumPy .npy files ========================================================= */

#define AL_MAX_DIMS 64 /* numpy 2 allows 64 dimensions (numpy 1: 32) */

typedef enum al_dtype { AL_F32 = 0, AL_F64 = 1 } al_dtype;

/* An owned, C-ordered, dense array. data is malloc'ed; al_array_free releases it. */
typedef struct al_array {
    al_dtype dtype;
    int ndim; /* 0..AL_MAX_DIMS */
    int64_t shape[AL_MAX_DIMS];
    void *data; /* [shape[0], ..., shape[ndim-1]] */
} al_array;

/* The product of a's dimensions (1 for ndim 0, 0 when a dimension is 0); a must be valid (as
 * al_array_alloc or al_npy_parse make them). */
AL_API int64_t al_array_numel(const al_array *a);
AL_API size_t al_dtype_size(al_dtype dt);
/* Zero dimensions are valid (numel 0). ndim outside 0..AL_MAX_DIMS or a negative dimension is
 * AL_E_INVALID; a size overflowing size_t is AL_E_NOMEM. */
AL_API int al_array_alloc(al_array *a, al_dtype dt, int ndim, const int64_t *shape, al_error *err);
/* Safe on a zeroed or an already freed array (data is set to NULL). */
AL_API void al_array_free(al_array *a);
/* A new float64 copy of a (any dtype), in *out (allocated); values are converted as they are
 * (NaN and Inf stay). */
AL_API int al_array_to_f64(const al_array *a, al_array *out, al_error *err);

/* Reads .npy v1/v2/v3 with dtype <f4 or <f8 (also |f4-style native LE), C order, any rank
 * numpy writes (up to AL_MAX_DIMS). The header is untrusted: magic, version, length, dict
 * syntax, shape overflow and the data size are all checked; every fault is AL_E_FORMAT (an
 * empty buffer "empty file", a bad magic naming the bytes found) or AL_E_UNSUPPORTED, naming
 * name (the file path). Zero dimensions are valid; NaN/Inf values are read as they are (the
 * CLI refuses them, naming the position). */
AL_API int al_npy_read(const char *path, al_array *out, al_error *err);
AL_API int al_npy_parse(const void *buf, size_t len, const char *name, al_array *out,
                        al_error *err);
/* Writes v1 (the header of any valid array fits), atomically (temp file, fsync, rename); an
 * invalid array (ndim, dtype) is AL_E_INVALID. */
AL_API int al_npy_write(const char *path, const al_array *a, al_error *err);

/* Numbers from text (untrusted): whitespace- or comma-separated, one row per non-empty line.
 * One line gives a 1-D float64 array, several lines of equal length a 2-D one. Decimal
 * numbers only ([+-] digits [. digits] [e [+-] digits]): nan/inf words and overflowing values
 * are AL_E_RANGE, hexadecimal, non-numbers, empty fields (a comma at the start or end of a
 * line, or two in a row) and ragged rows AL_E_FORMAT, each naming name, the line and (but
 * for ragged rows) the field; a text without numbers is AL_E_INVALID. */
AL_API int al_parse_numbers(const char *text, size_t len, const char *name, al_array *out,
                            al_error *err);

/* ==== Data files (tokenizer, corpus) ====================================================== */

/* Finds a shared data file by its relative path ("gpt2/encoder.json",
 * "gpt2/vocab.bpe", "war_and_peace/pg2600.txt"), in this order:
 *   1. explicit (a directory holding relpath, or the file itself), when not NULL;
 *   2. $ATTNLIM_DATA (a directory holding relpath);
 *   3. the cache: $ATTNLIM_CACHE, else $XDG_CACHE_HOME/attnlim, else ~/.cache/attnlim;
 *   4. ../shared/data (from the working directory, then from the source tree; or
 *      $ATTNLIM_SHARED_DIR when set);
 *   5. a download into the cache (curl or wget), checked against the pinned SHA-256.
 * Every file found is checked against its pinned SHA-256 (a mismatch is an error naming
 * the file, unless $ATTNLIM_NO_VERIFY=1). out receives the path. */
AL_API int al_data_find(const char *relpath, const char *explicit_path, char *out, size_t out_size,
                        al_error *err);
/* The cache directory (created if absent) into out. */
AL_API int al_cache_dir(char *out, size_t out_size, al_error *err);

/* SHA-256 of a file / a buffer as 64 lowercase hex digits + NUL. */
AL_API int al_sha256_file(const char *path, char hex[65], al_error *err);
AL_API void al_sha256_buf(const void *buf, size_t len, char hex[65]);

/* ==== Section: normalizers (METHOD section 7) ============================================ */
/* owner: normalizers module (src/normalize.c) */

typedef enum al_norm_kind {
    AL_NORM_SOFTMAX,
    AL_NORM_SPARSEMAX,
    AL_NORM_ENTMAX15,
    AL_NORM_ENTMAX,
    AL_NORM_SSMAX,
    AL_NORM_SA_SOFTMAX,      /* z * softmax(z) */
    AL_NORM_SA_SOFTMAX_NORM, /* ((z - min(z_min,0)) / (max(0,z_max) - min(z_min,0))) * softmax(z) */
} al_norm_kind;

typedef struct al_norm {
    al_norm_kind kind;
    double temperature; /* T > 0 (default 1): every normalizer is applied to z/T */
    double alpha;       /* entmax alpha > 1 (default 1.5) */
    double ssmax_s;     /* ssmax scalar s (default 0.43) */
} al_norm;

AL_API al_norm al_norm_default(al_norm_kind kind);
/* names: "softmax","sparsemax","entmax15","entmax","ssmax","sa-softmax","sa-softmax-norm" */
AL_API int al_norm_parse(const char *name, al_norm *out, al_error *err);
AL_API const char *al_norm_name(al_norm_kind kind);
AL_API int al_norm_sums_to_one(const al_norm *nm); /* 0 for the sa-softmax forms */
/* sa-softmax-norm: when max(0, x_max) == min(x_min, 0) (all z = 0) the factor is 0/0 and is
 * taken as 0 (output and Jacobian 0); its derivative follows the first index of a tied min/max. */
/* Checks temperature, alpha and s (an error names the bad field). */
AL_API int al_norm_check(const al_norm *nm, al_error *err);

/* p[n] = normalizer(z[n]). n < 1 is AL_E_INVALID ("empty input (n = 0)"); NaN/Inf in z is
 * AL_E_RANGE naming the position ("logit 2 (0-based) is NaN"), as is z/T overflowing for
 * sa-softmax; finite z of any size (1e30, DBL_MAX) is well defined.
 * Scratch memory: none on the heap for n <= 1024 (stack), heap beyond. */
AL_API int al_norm_forward(const al_norm *nm, const double *z, int64_t n, double *p, al_error *err);
/* out[n] = J v and out[n] = J^T u, J = dp/dz [n, n] at z. out must not alias z, v, u. z is
 * checked as by al_norm_forward; NaN/Inf in v or u is AL_E_RANGE naming the element ("jvp: v
 * element 2 (0-based) is NaN"), and so is an element of the result beyond the double range. */
AL_API int al_norm_jvp(const al_norm *nm, const double *z, int64_t n, const double *v, double *out,
                       al_error *err);
AL_API int al_norm_vjp(const al_norm *nm, const double *z, int64_t n, const double *u, double *out,
                       al_error *err);
/* J[n, n], J[i*n+j] = dp_i/dz_j. z as al_norm_forward; an entry beyond the double range (sa
 * forms at extreme z/T) is AL_E_RANGE naming (i, j). */
AL_API int al_norm_jacobian(const al_norm *nm, const double *z, int64_t n, double *J,
                            al_error *err);
/* Largest singular value of J: exact (secular equation, 1e-12 relative or better) for softmax,
 * sparsemax, entmax and ssmax; for the sa-softmax forms (a diagonal plus a rank of at most 4)
 * a bisection on the inertia of J^T J - lambda, O(n) (1e-8 relative or better), with J scaled
 * to entries of order 1 first (so J^T J neither overflows nor underflows). z as
 * al_norm_forward; a norm (or, for the sa forms, an entry of J) beyond the double range is
 * AL_E_RANGE. al_norm_frobenius_norm likewise. */
AL_API int al_norm_spectral_norm(const al_norm *nm, const double *z, int64_t n, double *out,
                                 al_error *err);
AL_API int al_norm_frobenius_norm(const al_norm *nm, const double *z, int64_t n, double *out,
                                  al_error *err);
/* Forward and spectral norm in one call (one forward pass instead of two): p[n], *spectral;
 * the errors of both. */
AL_API int al_norm_forward_spectral(const al_norm *nm, const double *z, int64_t n, double *p,
                                    double *spectral, al_error *err);
/* lambda_max of diag(g) - g g^T / sum(g) for g[n] >= 0 (the rank-one form of the softmax,
 * sparsemax and entmax Jacobians). For softmax weights p (summing to 1) and temperature T the
 * softmax Jacobian's spectral norm is al_norm_rank1_spectral(p, n) / T. No error channel: 0
 * for n < 2 or g == 0, NaN when g is NULL or some g_i is NaN, infinite or negative. */
AL_API double al_norm_rank1_spectral(const double *g, int64_t n);
/* bounds for the softmax family (softmax; ssmax via its effective temperature): sup = 1/(2T),
 * paper = min(1/(4T), sqrt 2); NaN where no bound is known (the other kinds) or T (ssmax: s)
 * is not finite and > 0; ssmax with n <= 1 gives 0 (its scale s log n is 0). */
AL_API void al_norm_bounds(const al_norm *nm, int64_t n, double *bound_sup, double *bound_paper);

/* ==== Section: metrics (METHOD sections 2-6) ============================================== */
/* owner: metrics module (src/metrics.c, src/sensitivity.c) */

/* What al_row_metrics / al_head_metrics compute. */
typedef struct al_metrics_opts {
    const int *top_n; /* [n_top] the N grid, any order, each >= 1 */
    int n_top;
    int distance;     /* compute dtilde, dmax, E (METHOD section 3) */
    int separability; /* compute N_s/N and its bounds (METHOD section 5) */
    int mc_samples;   /* Monte-Carlo E: random N-subsets per row (0 = off); cost
                       * mc_samples * (n + N) * d per row and N */
    uint64_t mc_seed; /* its seed (mixed with the row index and N) */
    int causal;       /* 1: row t sees keys 0..t (n = t+1); 0: every row sees all L keys */
    int window;       /* causal sliding window (Mistral, Gemma 2; 0 = none): row t sees keys
                       * lo..t, lo = max(0, t - window + 1), so n_t = min(t + 1, window); the
                       * head functions then read row t's columns lo..t and x rows lo..t only */
} al_metrics_opts;

/* Per-N results: means over the rows with n > N (rows == 0: every mean is NaN).
 * Weights need not be non-negative nor sum to 1 (sparsemax zeros, sa-softmax): b is the
 * sum of the non-selected weights as given; dmax is then reported but is a bound only for
 * non-negative weights. Separability for N = 1: delta is undefined, every xi_i = 0, so the
 * bounds are both 1 when r > 0 (and N_s/N is 1 then too); r == 0 gives N_s = 0 and bounds 0.
 * Distances closer than the rounding of the unit vectors, tol = (d + 8) u (sum_{j in I}
 * |alpha_j| + max |alpha|) with u = 2^-53, are equal: r <= tol is r == 0, and N_s counts
 * ||s - alpha_i u_i|| < r - 2 tol only. Unit vectors u = x/|x| (a zero vector has u = 0);
 * xi_i = sqrt(max(xi_i^2, 0)) (xi_i^2 can be negative only with negative weights). Accuracy:
 * the distances are computed by a Gram expansion (fast) and, where it would cancel, from the
 * vectors in double-double; every dtilde, d1, E, r and xi_i term is accurate to 1e-10
 * relative (rounding of the inputs' own products aside), an exact 0 comes out 0. */
typedef struct al_topn_stats {
    int N;
    int64_t rows;    /* rows with n > N that entered the means */
    double dtilde;   /* sum_{i not in I_N} ||alpha_i x_i - s||                 [reading] */
    double dmax;     /* b d1 + ((n-N) abar - b) m                              [reading] */
    double E;        /* ((n-N)/n) sum_i ||alpha_i x_i - N/(n-1) sum_{j!=i} alpha_j x_j|| */
    double E_mc;     /* Monte-Carlo mean of dtilde over uniform random N-subsets (NaN if off) */
    double E_mc_se;  /* standard error of E_mc (over samples, combined over rows) */
    double ns_ratio; /* N_s / N on unit vectors                                          */
    double ns_lower; /* max(0, 1 - sum_i xi_i / (r N))                         [reading] */
    double ns_upper; /* min(1, (1/N) sum_i exp(-max(xi_i - r, 0)^2 / 2))       [reading] */
} al_topn_stats;

/* One row: alpha[n] weights, x[n, d] vectors (o->causal is ignored). out[n_top] in the order
 * of o->top_n (rows = 1, or 0 with NaN means when n <= N). NaN/Inf input is AL_E_RANGE naming
 * the position (alpha: "position 2"; x: "row 2, column 0"); n < 1 is AL_E_INVALID. */
AL_API int al_row_metrics(const double *alpha, const double *x, int64_t n, int64_t d,
                          const al_metrics_opts *o, al_topn_stats *out, al_error *err);
/* One head: w[L, L] weights (row t uses columns 0..n_t-1 only; the rest is never read),
 * x[L, d] vectors. out[n_top]: means over the rows with n_t > N. row_max[L] (max weight)
 * and row_entropy[L] (H = -sum alpha log alpha over the row's n keys; terms with alpha <= 0
 * contribute 0) may be NULL. Single-threaded and re-entrant: callers parallelise over heads. Asks
 * the progress callback every 64 rows (AL_E_CANCELLED: out untouched). NaN/Inf in the used part of
 * w, or in x, is AL_E_RANGE naming the row and column; L < 1 is AL_E_INVALID. Memory: about 3 L^2
 * doubles (4 L^2 on heads whose vectors nearly coincide, where d1 needs the Gram matrix of x -
 * x_0). */
AL_API int al_head_metrics(const double *w, const double *x, int64_t L, int64_t d,
                           const al_metrics_opts *o, al_topn_stats *out, double *row_max,
                           double *row_entropy, al_error *err);
/* Section 2 for one row alpha[n] (n >= 1): max_weight = max_j alpha_j, entropy
 * H = -sum alpha log alpha (terms with alpha <= 0 contribute 0; as al_head_metrics' row_max
 * and row_entropy) and entropy_norm = H / log n (NaN for n = 1). Outputs may be NULL.
 * NaN/Inf weights are an error naming the position. */
AL_API int al_row_vanishing(const double *alpha, int64_t n, double *max_weight, double *entropy,
                            double *entropy_norm, al_error *err);
/* Corollary 1: D[L], D_t = ||q_t|| * max_{j <= t (causal) or all j} ||k_j|| / sqrt(d_head).
 * q[L, d_head], k[L, d_head]. NaN/Inf is AL_E_RANGE naming the array, row and column; L or
 * d_head < 1 is AL_E_INVALID; squared norms beyond DBL_MAX (|values| ~ 1e154) give Inf. */
AL_API int al_head_vanishing_D(const double *q, const double *k, int64_t L, int64_t d_head,
                               int causal, double *D, al_error *err);
/* The same under a causal sliding window (window 0 = none: al_head_vanishing_D's numbers): the max
 * is over the keys row t sees, j = max(0, t - window + 1)..t. window < 0 is AL_E_INVALID. */
AL_API int al_head_vanishing_D_window(const double *q, const double *k, int64_t L, int64_t d_head,
                                      int causal, int window, double *D, al_error *err);
/* Algorithm 5 on logits z[L, L] (row t uses columns 0..n_t-1; rows with n_t >= 2 enter),
 * normalizer nm (its temperature field is ignored; temps[n_t] are used, each > 0):
 *   fd_mean[n_t, n_eps]  mean over rows of || f((z + eps v)/T) - f(z/T) || / eps,
 *   spec_mean[n_t]       mean over rows of the exact spectral norm of the Jacobian of f(z/T).
 * v (al_sensitivity_direction) is one per (seed, layer, head, row), reused for every T, eps.
 * Softmax has a vectorised fast path; other kinds go through al_norm_forward(_spectral).
 * NaN/Inf logits in the used part are AL_E_RANGE naming the row and column; temps and eps
 * not finite and > 0 are AL_E_INVALID naming the position; L < 1 is AL_E_INVALID. No rows
 * (L = 1): NaN. */
AL_API int al_head_sensitivity(const double *z, int64_t L, int causal, const al_norm *nm,
                               const double *temps, int n_t, const double *eps, int n_eps,
                               uint64_t seed, int layer, int head, double *fd_mean,
                               double *spec_mean, al_error *err);
/* Algorithm 5 for one row of logits z[n] (n >= 1) in the direction v[n] (any finite v; the
 * paper's is al_sensitivity_direction(seed, layer, head, row, n, v), a unit vector):
 *   fd[n_t, n_eps]  || f((z + eps v)/T) - f(z/T) || / eps,
 *   spec[n_t]       the exact spectral norm of the Jacobian of f(z/T)
 * (nm's temperature field is ignored; fd may be NULL when n_eps == 0). al_head_sensitivity's
 * fd_mean and spec_mean are the means of these over the rows with n_t >= 2, each row with its
 * own v, computed by the same code. NaN/Inf in z or v is AL_E_RANGE naming the position;
 * temps and eps not finite and > 0 are AL_E_INVALID naming the position; n < 1 AL_E_INVALID. */
AL_API int al_row_sensitivity(const double *z, int64_t n, const al_norm *nm, const double *temps,
                              int n_t, const double *eps, int n_eps, const double *v, double *fd,
                              double *spec, al_error *err);
/* The direction v[n] of Algorithm 5 for (seed, layer, head, row): n standard normals from the
 * project's xoshiro256** generator (seeded by SplitMix64 mixing of the four), normalised to
 * unit length. Exposed so that references can use the same v. Returns 0 (AL_E_INVALID if
 * v == NULL or n < 1). */
AL_API int al_sensitivity_direction(uint64_t seed, int layer, int head, int64_t row, int64_t n,
                                    double *v);

/* Readings of Algorithm 5 (METHOD sections 6 and 9 [reading]). */
typedef struct al_sens_opts {
    /* The logits are multiplied by this before anything else (T, eps and the bounds then live on
     * that scale): 1 = our scaled logits q.k/sqrt(d_head) ("scaled", the default);
     * sqrt(d_head) = the paper's raw q.k ("raw"), on which its T is read. Finite, > 0. */
    double logit_scale;
    /* 0 ("shared"): one v per (layer, head, row), reused for every T and eps; 1 ("fresh"): a new
     * v at every (T, eps, layer, head, row), as the paper's Algorithm 5 draws it
     * (al_sensitivity_direction_fresh). */
    int fresh;
    /* causal sliding window (0 = none): row t's logits are its columns lo..t, lo = max(0, t -
     * window + 1), n_t = min(t + 1, window) (as al_metrics_opts' window) */
    int window;
} al_sens_opts;
/* The "fresh" direction v[n] of Algorithm 5 for (seed, layer, head, row, T index ti, eps index
 * ei): a seed mixed as al_sensitivity_direction's with the two indices mixed in too drives eight
 * xoshiro256** generators (SplitMix64-seeded) in turn, one 64-bit draw a normal pair by
 * Box-Muller in single precision (u1 from 31 bits, u2 from 24; within 1e-6 of the radius of the
 * exact transform of those uniforms, radii <= 6.56), the cosines then the sines, normalised
 * (docs/readings.md, "The fresh directions' generator"). The same bits on every CPU level. */
AL_API int al_sensitivity_direction_fresh(uint64_t seed, int layer, int head, int64_t row, int ti,
                                          int ei, int64_t n, double *v);
/* al_head_sensitivity under the readings so (NULL = {1, 0}: then the very same results, bit for
 * bit). The spectral means do not depend on the directions. Errors as al_head_sensitivity; a bad
 * so->logit_scale is AL_E_INVALID. */
AL_API int al_head_sensitivity_ex(const double *z, int64_t L, int causal, const al_norm *nm,
                                  const double *temps, int n_t, const double *eps, int n_eps,
                                  uint64_t seed, int layer, int head, const al_sens_opts *so,
                                  double *fd_mean, double *spec_mean, al_error *err);

/* ---- Part: readings of the distance (METHOD sections 3 and 9; owner: src/math/readings.c) ---- */

/* Which distance between the selected context s = sum_{i in I} alpha_i x_i and the rest
 * (METHOD section 9 [reading]); r = sum_{i not in I} alpha_i x_i, S = r + s, m = n - N. */
typedef enum al_distance_kind {
    AL_DIST_SUM_OF_NORMS = 0, /* sum_{i not in I} ||alpha_i x_i - s||  (default; section 3) */
    AL_DIST_NORM_OF_SUM = 1,  /* || r - s || = || S - 2 s ||                                  */
    AL_DIST_SUM_VECTOR = 2,   /* || sum_{i not in I} (alpha_i x_i - s) || = || S - (m+1) s || */
} al_distance_kind;
AL_API const char *
al_distance_name(al_distance_kind k); /* "sum-of-norms", "norm-of-sum", "sum-vector" */
AL_API int al_distance_parse(const char *s, al_distance_kind *out, al_error *err);

/* Which random-selection counterpart the KS test of Algorithm 3 compares with. */
typedef enum al_expect_kind {
    AL_EXPECT_ANALYTIC = 0, /* the main term (indicators replaced by their expectations) */
    AL_EXPECT_MC = 1,       /* Monte-Carlo estimate of the exact expectation (with its s.e.) */
    AL_EXPECT_EXACT = 2,    /* the exact expectation by enumerating every N-subset */
} al_expect_kind;
AL_API const char *al_expect_name(al_expect_kind k); /* "analytic", "mc", "exact" */
AL_API int al_expect_parse(const char *s, al_expect_kind *out, al_error *err);

/* The default and the largest cap on C(n, N) per row for the exact expectation. */
#define AL_EXACT_MAX_DEFAULT 10000
#define AL_EXACT_MAX_LIMIT   10000000

/* C(n, k) as a double (exact below 2^53; +Inf beyond the double range; 0 for k < 0 or k > n). */
AL_API double al_binomial(int64_t n, int64_t k);
/* Whether the exact expectation may be enumerated for rows of up to n_max keys at every N of
 * top_n[n_top] with N < n_max: 0, or AL_E_INVALID naming the first N whose C(n_max, N) exceeds
 * cap (<= 0: AL_EXACT_MAX_DEFAULT; above AL_EXACT_MAX_LIMIT: AL_E_INVALID). */
AL_API int al_exact_check(int64_t n_max, const int *top_n, int n_top, int64_t cap, al_error *err);

typedef struct al_reading_opts {
    al_distance_kind distance;
    const int *top_n; /* [n_top] the N grid, any order, each >= 1 */
    int n_top;
    int mc_samples;    /* Monte-Carlo samples per row and N (0 = off) */
    uint64_t mc_seed;  /* seeded per (row, N) exactly as al_metrics_opts' Monte-Carlo E */
    int exact;         /* 1: the exact expectation too (al_exact_check must pass: else an error
                        * before any work) */
    int64_t exact_max; /* cap on C(n, N) per row (<= 0: AL_EXACT_MAX_DEFAULT) */
    int causal;        /* as al_metrics_opts */
    int window;        /* as al_metrics_opts */
} al_reading_opts;

/* Per-N means over the rows with n > N (rows == 0: NaN). For sum-of-norms dist, analytic, mc and
 * mc_se are al_head_metrics' dtilde, E, E_mc and E_mc_se (the same numbers, bit for bit). */
typedef struct al_reading_stats {
    int N;
    int64_t rows;
    double dist;      /* the true distance (top-N selection; ties to the lower index)  [reading] */
    double analytic;  /* main term: sum-of-norms E of section 3; norm-of-sum |n - 2N|/n ||S||;
                       * sum-vector (n-N)(N-1)/n ||S||. A lower bound of exact (Jensen)  [reading] */
    double mc, mc_se; /* Monte-Carlo mean over uniform N-subsets and its standard error (NaN if
                       * off) */
    double exact;     /* the mean over every N-subset (NaN unless opts.exact) */
} al_reading_stats;

/* One row alpha[n], x[n, d] (o->causal ignored), out[n_top] in the order of o->top_n; one head
 * w[L, L], x[L, d] (as al_head_metrics). NaN/Inf input is AL_E_RANGE naming the position; bad
 * options AL_E_INVALID, all checked before any work. Cost per row: O(n d) plus O(d) per N of the
 * grid for the vector readings (s grows as N walks up), O(S N d) for S Monte-Carlo samples and
 * O(C(n, N) (N + n) d) at worst for the exact expectation. */
AL_API int al_row_reading(const double *alpha, const double *x, int64_t n, int64_t d,
                          const al_reading_opts *o, al_reading_stats *out, al_error *err);
AL_API int al_head_reading(const double *w, const double *x, int64_t L, int64_t d,
                           const al_reading_opts *o, al_reading_stats *out, al_error *err);

/* ==== Section: statistics (METHOD section 4) ============================================= */
/* owner: statistics module (src/stats.c) */

/* Two-sample Kolmogorov-Smirnov test, two-sided: statistic and p-value as
 * scipy.stats.ks_2samp(a, b) (scipy 1.10, method='auto': exact when
 * max(na, nb) <= 10000, asymptotic otherwise or when the exact computation fails).
 * a[na], b[nb]; NaN/Inf is AL_E_RANGE naming the sample and the position; an empty sample is
 * AL_E_INVALID. Only ranks matter: finite values of any size are fine. */
AL_API int al_ks_2samp(const double *a, size_t na, const double *b, size_t nb, double *statistic,
                       double *pvalue, al_error *err);
/* Algorithm 3 for one L: N[nN] increasing; dtilde[nN, n_heads] and E[nN, n_heads] per-head
 * means. pvalues[nN] = KS p-value of dtilde[i, :] against E[i, :]; *crit = the smallest N
 * with p >= level, or -1 when not reached (also for nN == 0: nothing is tested, rc 0). A
 * non-finite value is AL_E_RANGE naming N, the array and the head; n_heads < 1 AL_E_INVALID. */
AL_API int al_critical_n(const int *N, int nN, const double *dtilde, const double *E, int n_heads,
                         double level, double *pvalues, int *crit, al_error *err);
/* Least squares through the origin: sum x y / sum x^2 over x[n], y[n] (NaN if sum x^2 == 0,
 * so also for n == 0). No error channel: NaN/Inf input, or sums beyond DBL_MAX, give a
 * non-finite result (NaN, or +-Inf from an infinite y). */
AL_API double al_slope_origin(const double *x, const double *y, size_t n);
/* Five-number summary and mean of x[n]; quartiles as numpy.percentile's default (linear).
 * NaN/Inf is AL_E_RANGE naming the position, n == 0 AL_E_INVALID. The mean is sum / n, so
 * +-Inf when the sum overflows (values near DBL_MAX; as numpy.mean), with rc 0. */
typedef struct al_five {
    double min, q1, median, q3, max, mean;
} al_five;
AL_API int al_five_number(const double *x, size_t n, al_five *out, al_error *err);
/* p-th percentile of sorted[n] (ascending), numpy's linear; NaN if n == 0 or p not in [0, 100]. */
AL_API double al_percentile_sorted(const double *sorted, size_t n, double p);
/* The mean next-token negative log-likelihood of one window, in nats: the mean over t < T - 1
 * of -log softmax(logits[t])[tokens[t + 1]], accumulated in double. logits [T, V] row-major,
 * tokens [T] in [0, V); NaN if T < 2. Perplexity is exp of it. */
AL_API double al_next_token_nll(const float *logits, const int32_t *tokens, int T, int V);
/* The critical-N grid of METHOD section 4 for one L (>= 2): {1..16} U {18..32 step 2} U
 * {36..64 step 4} U {72..128 step 8} U {144..256 step 16} below L, then steps of L/32 beyond
 * 256, and L - 1 always; increasing. Writes min(count, cap) values to N (may be NULL with cap
 * 0) and returns the count (0 for L < 2). */
AL_API int al_critical_grid(int L, int *N, int cap);

/* ==== Section: tokenizers and corpora ===================================================== */
/* owner: tokenizer module (src/bpe.c, src/corpus.c, src/wordpiece.c) */

typedef struct al_tokenizer al_tokenizer;

/* GPT-2 byte-level BPE. vocab: NULL (find gpt2/encoder.json and gpt2/vocab.bpe with
 * al_data_find), or a directory holding encoder.json + vocab.bpe (or HF vocab.json +
 * merges.txt). */
AL_API int al_tokenizer_open_gpt2(const char *vocab, al_tokenizer **out, al_error *err);
/* Any byte-level BPE vocabulary in those files, with a named pre-tokenizer: "gpt2" (or NULL),
 * "llama3" (also "llama-bpe"), "smollm" (each digit alone, then the GPT-2 pattern). The
 * files of an explicit directory are used as they are (no pinned hash). */
AL_API int al_tokenizer_open_bpe(const char *vocab, const char *pretok, al_tokenizer **out,
                                 al_error *err);
AL_API void al_tokenizer_free(al_tokenizer *tk);
AL_API int al_tokenizer_vocab_size(const al_tokenizer *tk);
/* Overrides whether al_tokenize adds the BOS / EOS token (1 on, 0 off, -1 as the model's
 * files say): tokenizers from tokenizer.json only (others never add them). */
AL_API void al_tokenizer_set_bos_eos(al_tokenizer *tk, int add_bos, int add_eos);

/* ---- how a corpus becomes windows (capture, perplexity, reproduce, diagnose) ----------------
 * A decoder's corpus is tokenized as one text, with the BOS token first when bos is on (the
 * model's default: tokenizer_config.json add_bos_token or the tokenizer.json template, GGUF
 * tokenizer.ggml.add_bos_token, GPT-2 none), and window k is ids [kL, (k+1)L). An encoder's
 * (WordPiece) corpus is its body without [CLS]/[SEP]; with wrap on (the default) window k is
 * [CLS] + body [k(L-2), (k+1)(L-2)) + [SEP], so L counts the two special tokens (the forward's
 * T = L, every row sees n = L keys); with wrap off it is body [kL, (k+1)L), bare.
 * docs/reproduce.md "Windows: BOS and [CLS] ... [SEP]". */
typedef struct al_framing {
    int encoder;          /* a WordPiece tokenizer: wrap applies, BOS does not */
    int wrap;             /* encoder windows [CLS] ... [SEP] */
    int32_t cls, sep;     /* their ids */
    int bos, bos_default; /* the BOS token first in the text: used, and the model's default */
    int32_t bos_id;       /* -1: the model has none */
    const char *bos_from; /* where the default comes from (a static string) */
    char bos_token[64];   /* its string ("" none) */
} al_framing;
/* bos, wrap: -1 the model's default, 0 off, 1 on. --bos on where the model has no BOS token,
 * --bos for an encoder and wrap for a decoder are refused (AL_E_INVALID). Applies bos to tk. */
AL_API int al_framing_make(al_tokenizer *tk, int bos, int wrap, al_framing *f, al_error *err);
/* The corpus ids (the body of an encoder's; a decoder's with BOS first when f->bos); *ids
 * malloc'ed (al_free). */
AL_API int al_framing_tokenize(const al_tokenizer *tk, const al_framing *f, const char *text,
                               size_t len, int32_t **ids, size_t *n, al_error *err);
/* Corpus tokens in a window of L (L - 2 when wrapped); < 1 when L is too short. */
AL_API long al_framing_body(const al_framing *f, long L);
/* Window k of L: dst[L] from body (wrapped or not). The caller checks it fits. */
AL_API void al_framing_window(const al_framing *f, const int32_t *body, long k, long L,
                              int32_t *dst);
/* Window k of L of the body ids[n] into a new array *dst[L] (al_free); the range checked
 * (AL_E_RANGE naming source and the windows there are). */
AL_API int al_framing_window_alloc(const al_framing *f, const int32_t *ids, size_t n, long k,
                                   long L, const char *source, int32_t **dst, al_error *err);
/* The manifests' "framing" object as JSON text (al_free): bos {used, default, default_from,
 * id, token}, encoder, wrap, L_counts. NULL when out of memory. */
AL_API char *al_framing_json(const al_framing *f);

/* Encodes bytes (any bytes: invalid UTF-8 is handled byte-level, as GPT-2 does) into ids
 * (*ids malloc'ed). allow_special: recognise special tokens such as <|endoftext|> in text.
 * Invalid UTF-8 follows tiktoken's Encoding._encode_bytes: the valid prefix is split by the
 * pattern; its last pre-token and every byte from the first invalid one on are merged as one
 * BPE piece (per segment between allowed special tokens). decode(encode(x)) == x always. */
AL_API int al_tokenize(const al_tokenizer *tk, const char *text, size_t len, int allow_special,
                       int32_t **ids, size_t *n, al_error *err);
/* Decodes ids into bytes (*text malloc'ed, NUL-terminated, len excludes the NUL). */
AL_API int al_detokenize(const al_tokenizer *tk, const int32_t *ids, size_t n, char **text,
                         size_t *len, al_error *err);
/* A corpus: "war-and-peace" (METHOD section 1: the body of pg2600.txt, CRLF -> LF; data_path
 * as al_data_find's explicit path), AL_CORPUS_TEXT followed by the text itself (a prompt: the
 * CLI's --text), or a path to a text file (read as bytes). */
#define AL_CORPUS_TEXT "text:"
AL_API int al_corpus_load(const char *name_or_path, const char *data_path, char **text, size_t *len,
                          al_error *err);
/* Length of the longest valid UTF-8 prefix of text[len] (== len when it is all valid). */
AL_API size_t al_utf8_valid_len(const char *text, size_t len);

/* ==== Section: models and capture ========================================================= */
/* owner: model modules (src/model.c dispatches; src/gpt2.c, src/llama.c, src/bert.c) */

typedef struct al_model al_model;

typedef struct al_model_info {
    char family[16]; /* "gpt2", "llama", "bert" */
    char name[128];  /* e.g. "gpt2-124M-shape", "SmolLM2-135M-Instruct" */
    char path[1024]; /* the file opened */
    char sha256[65]; /* the model identity ("" until computed by al_model_hash) */
    char dtype[16];  /* storage of the weights: "f32", "bf16", "q4_1", ... */
    int n_layer;
    int n_head;    /* query heads */
    int n_kv_head; /* key/value heads (== n_head without grouped-query attention) */
    int d_model;
    int d_head;
    int d_ff;
    int n_ctx; /* the longest window the model takes */
    int vocab_size;
    int causal; /* 1 decoder (n = t+1 keys for row t), 0 encoder (n = L) */
    int64_t n_params;
} al_model_info;

/* Opens a model: a path (HF directory or .safetensors with config.json beside it; llm.c
 * .bin; .gguf) or a known name ("smollm2", "minilm", "gpt2" from the cache; fetched on
 * first use where the project can fetch it). The file is untrusted: every size, offset,
 * shape and dtype is checked. A directory with manifest.json is an attention dump
 * (docs/dumps.md; family "dump"): its forward replays the stored attention of its T tokens
 * (any prefix when causal), and it has no tokenizer and no output logits. */
AL_API int al_model_open(const char *path_or_name, al_model **out, al_error *err);
AL_API void al_model_free(al_model *m);
AL_API const al_model_info *al_model_get_info(const al_model *m);
/* What `attnlim info` prints, as JSON text (al_free): the model object of every manifest
 * (family, config, files and their SHA-256s unless hash is 0, identity, load warnings, a dump's
 * arrays; given: the name or path the caller opened m with), "dtypes" (storage dtype counts)
 * and, when tensors, "tensors" (every stored tensor: name, dtype, shape) of a safetensors or
 * llm.c checkpoint. NULL with err set. */
AL_API char *al_model_describe(al_model *m, const char *given, int hash, int tensors,
                               al_error *err);
/* For the error when an output of m's forward is not finite: "FILE: tensor NAME has N NaN/Inf
 * values (first at flat index I)" from m's first load warning, or, when the weights are all
 * finite, "PATH: the weights are finite (the forward overflowed)", into buf[cap]. */
AL_API void al_model_nonfinite_cause(const al_model *m, char *buf, size_t cap);
/* The "attention" object of every manifest as JSON text ({rule, k, normalizer, layers, heads,
 * tie_rule, modified}): malloc'ed (al_free); NULL when out of memory. */
AL_API char *al_model_attention_json(const al_model *m);
/* Layer l's causal sliding window: the number of keys a row sees at most (Mistral, Gemma 2's
 * local layers); 0 = none (every earlier key), also for a layer out of range. */
AL_API int al_model_layer_window(const al_model *m, int layer);
/* A known model name (smollm2, minilm, gpt2) as the path of its files in the cache, fetching
 * them on first use when the network is allowed (al_set_network); every file's SHA-256 is
 * pinned. */
AL_API int al_fetch_model(const char *name, char *path, size_t size, al_error *err);
/* The model's own tokenizer (GPT-2 BPE files, GGUF metadata, BERT vocab.txt). */
AL_API int al_model_tokenizer(al_model *m, al_tokenizer **out, al_error *err);
/* Computes (once) the model identity into info->sha256: the SHA-256 of the lines
 * "<sha256>  <name>\n" of every file that defines the model (config.json, a shard index and
 * every shard, or the one .safetensors / .bin / .gguf), sorted by name; what
 * `sha256sum FILES | LC_ALL=C sort -k 2 | sha256sum` prints in the model's directory. */
AL_API int al_model_hash(al_model *m, al_error *err);

/* What a capture wants (bit flags). */
enum {
    AL_CAP_Q = 1u << 0,       /* q [n_sel, T, d_head] (after RoPE where the model has it) */
    AL_CAP_K = 1u << 1,       /* k [n_sel, T, d_head] of the key/value head each query head reads */
    AL_CAP_V = 1u << 2,       /* v [n_sel, T, d_head] likewise */
    AL_CAP_LOGITS = 1u << 3,  /* z [n_sel, T, T] = q.k/sqrt(d_head); masked entries -INFINITY */
    AL_CAP_WEIGHTS = 1u << 4, /* alpha [n_sel, T, T] = softmax rows; masked entries 0 */
    AL_CAP_HIDDEN = 1u << 5,  /* [T, d_model] the layer input after its first norm */
    AL_CAP_EMBED = 1u << 6,   /* [T, d_model] the model input (token + position embedding) */
    /* [T, d_model] the layer input before its first norm (the residual stream); BERT, post-norm,
     * has no norm before attention: its residual is its hidden */
    AL_CAP_RESIDUAL = 1u << 7,
    /* [n_sel, T, T] the logits before attention-logit soft-capping (Gemma 2: z = q.k * scale;
     * AL_CAP_LOGITS then gives cap * tanh(z / cap)); NULL for models without soft-capping */
    AL_CAP_LOGITS_PRECAP = 1u << 12,
};

/* One layer's capture, handed to the observer while the forward runs. Pointers are valid
 * only during the call; copy what must be kept. Arrays of heads hold the selected heads in
 * increasing order (heads[0..n_sel-1]). */
typedef struct al_capture {
    int layer;
    int T; /* tokens in the window */
    int n_head, n_kv_head, d_head, d_model;
    int causal;
    int n_sel;
    const int *heads;           /* [n_sel] query head indices */
    const int *kv_head;         /* [n_head] key/value head read by each query head */
    const float *q;             /* [n_sel, T, d_head] or NULL */
    const float *k;             /* [n_sel, T, d_head] or NULL */
    const float *v;             /* [n_sel, T, d_head] or NULL */
    const float *logits;        /* [n_sel, T, T] or NULL */
    const float *weights;       /* [n_sel, T, T] or NULL */
    const float *hidden;        /* [T, d_model] or NULL */
    const float *embed;         /* [T, d_model] or NULL */
    const float *residual;      /* [T, d_model] or NULL */
    int window;                 /* causal sliding window (Mistral, Gemma 2): row t sees the keys
                                 * max(0, t - window + 1)..t, so METHOD's n = min(t + 1, window);
                                 * 0 = none. Masked entries as for causal rows: logits -inf,
                                 * weights 0. */
    const float *logits_precap; /* [n_sel, T, T] or NULL (AL_CAP_LOGITS_PRECAP) */
    float softcap;              /* the attention-logit soft-cap (0 = none) */
    float scale;                /* the logit scale: 1/sqrt(d_head), or the model's own */
} al_capture;

/* Returns 0 to go on, non-zero (with err set) to stop the forward. */
typedef int (*al_observer)(void *user, const al_capture *cap, al_error *err);

typedef struct al_capture_request {
    unsigned what;         /* AL_CAP_* flags; 0 = no capture */
    const uint8_t *layers; /* [n_layer] non-zero = wanted; NULL = all layers */
    const uint8_t *heads;  /* [n_head] non-zero = wanted; NULL = all heads */
    al_observer fn;
    void *user;
} al_capture_request;

/* Runs the model over tokens [T] (T <= n_ctx). logits [T, vocab_size] and final_hidden
 * [T, d_model] (after the final norm for decoders, the last layer's output for encoders)
 * are written when not NULL. req may be NULL. Memory: only one layer's capture is alive.
 * The progress callback (al_set_progress) is asked before each layer; when it stops the
 * forward, AL_E_CANCELLED is returned and logits / final_hidden are left as they were. */
AL_API int al_model_forward(al_model *m, const int32_t *tokens, int T,
                            const al_capture_request *req, float *logits, float *final_hidden,
                            al_error *err);

/* Which tokens' outputs a forward computes: the final norm and the LM head run for those rows
 * only, and with AL_LOGITS_LAST the last layer's attention output and MLP too (as llama.cpp's
 * prompt processing does); with AL_LOGITS_NONE neither runs, and no layer above the last one
 * the capture asks for (or opts.last_layer) runs. The captures are the same bit for bit whatever
 * the mode; the last token's outputs in AL_LOGITS_LAST are AL_LOGITS_ALL's last row to float32
 * rounding (a 1-row product takes another BLAS kernel; tests/python/test_forward_opts.py). */
typedef enum al_logits_mode {
    AL_LOGITS_ALL = 0,  /* logits [T, vocab_size], final_hidden [T, d_model] */
    AL_LOGITS_LAST = 1, /* the last token's: logits [1, vocab_size], final_hidden [1, d_model] */
    AL_LOGITS_NONE = 2, /* neither (logits and final_hidden must be NULL): capture only */
} al_logits_mode;

typedef struct al_forward_opts {
    al_logits_mode logits;
    /* >= 0: the last layer whose output anything reads (AL_LOGITS_NONE only): the layers above it
     * are not run, and a capture of one of them is an error; -1: the last layer the capture asks
     * for (AL_LOGITS_NONE), every layer otherwise */
    int last_layer;
} al_forward_opts;

/* al_model_forward doing only the work opts asks for (NULL: AL_LOGITS_ALL when logits or
 * final_hidden is given, else AL_LOGITS_NONE; last_layer -1). al_model_forward is this with
 * opts NULL. */
AL_API int al_model_forward_opts(al_model *m, const int32_t *tokens, int T,
                                 const al_capture_request *req, const al_forward_opts *opts,
                                 float *logits, float *final_hidden, al_error *err);

/* ---- Part: attention variants inside the forward (src/model/attn_variant.c) ---- */

/* Which keys each query row keeps before it is normalised. A row of n visible keys (causal:
 * n = t + 1) in a window of L tokens keeps min(n, K) keys, K =
 *   topk:K        K (an integer >= 1)
 *   topk-frac:F   ceil(F L), F in (0, 1]
 *   topk-sqrt:C   ceil(C sqrt(n)), C > 0
 *   topk-log:C    ceil(C ln n), C > 0 (and at least 1)
 * (each ceil taken of x - 1e-9, so that a product landing on an integer stays there); the kept
 * keys are those of the K largest logits, ties at the K-th logit broken toward the lower index
 * (METHOD section 3's rule). The others get weight 0. */
typedef enum al_attn_rule {
    AL_ATTN_DENSE = 0,
    AL_ATTN_TOPK,
    AL_ATTN_TOPK_FRAC,
    AL_ATTN_TOPK_SQRT,
    AL_ATTN_TOPK_LOG,
} al_attn_rule;

typedef struct al_attn_variant {
    al_attn_rule rule;
    double param; /* K, F or C (unused for dense) */
    al_norm norm; /* over the kept logits (n = the kept count: ssmax's scale is s ln(kept)) */
    const uint8_t *layers; /* [n_layer] non-zero = modified; NULL = every layer */
    const uint8_t *heads;  /* [n_head] non-zero = modified (query heads); NULL = every head */
} al_attn_variant;

/* "dense", "topk:K", "topk-frac:F", "topk-sqrt:C", "topk-log:C" into rule and param (other fields
 * untouched). */
AL_API int al_attn_rule_parse(const char *spec, al_attn_variant *v, al_error *err);
/* "softmax", "sparsemax", "entmax15", "entmax[:A]" (A > 1, default 1.5), "ssmax[:S]" (S > 0,
 * default 0.43) into *out (temperature 1). */
AL_API int al_attn_norm_parse(const char *spec, al_norm *out, al_error *err);
/* The spellings parse reads back: "topk:16", "topk-frac:0.0625", "entmax:1.3", "ssmax:0.43". */
AL_API void al_attn_rule_name(const al_attn_variant *v, char *buf, size_t cap);
AL_API void al_attn_norm_name(const al_norm *nm, char *buf, size_t cap);
/* Keys kept of a row of n >= 1 visible keys in a window of L tokens (1..n). */
AL_API int al_attn_kept(const al_attn_variant *v, int n, int L);
/* Every later forward of m uses v (copied, masks included; NULL, or dense with softmax: the
 * model's own attention). Families with a causal LM head (gpt2, llama) support it; others are
 * AL_E_UNSUPPORTED. A mask shorter than the model is the caller's bug: give n_layer / n_head. */
AL_API int al_model_set_attention(al_model *m, const al_attn_variant *v, al_error *err);
/* The variant in force (NULL when the model's own attention runs). */
AL_API const al_attn_variant *al_model_get_attention(const al_model *m);

/* A variant as the command lines give it (every field optional: all zero = the model's own). */
typedef struct al_attn_spec {
    const char *rule;       /* al_attn_rule_parse spelling; NULL = dense */
    const char *normalizer; /* al_attn_norm_parse spelling; NULL = softmax */
    const int *layers;      /* [n_layers] layer indices modified; NULL = every layer */
    int n_layers;
    const int *heads; /* [n_heads] query head indices modified; NULL = every head */
    int n_heads;
} al_attn_spec;
/* Parses s, checks the indices against m (an error names the one outside) and sets it. */
AL_API int al_model_set_attention_spec(al_model *m, const al_attn_spec *s, al_error *err);

/* ---- Part: checkpoints (owner: checkpoint module: src/gpt2_load.c, src/verify.c,
 * src/makemodel.c) ---- */

/* A GPT-2 parameter of an open model, copied as float32 in the HF layout (Conv1D [in, out];
 * wte [vocab_size, d_model] without llm.c's padding rows), whatever the file's format and
 * dtype. name: an HF parameter name, with or without "transformer." ("h.0.attn.c_attn.weight"). */
AL_API int al_gpt2_tensor(const al_model *m, const char *name, al_array *out, al_error *err);

typedef enum al_verify_status {
    AL_VERIFY_MATCH = 0,      /* present, same bytes as the pinned hash */
    AL_VERIFY_MISMATCH = 1,   /* present, different bytes (or size) */
    AL_VERIFY_MISSING = 2,    /* a parameter of the table absent from the file */
    AL_VERIFY_UNEXPECTED = 3, /* in the file, not in the table */
    AL_VERIFY_OPTIONAL = 4,   /* an HF buffer or the tied lm_head, absent: not needed */
} al_verify_status;

typedef struct al_verify_entry {
    char name[160]; /* the table's name (HF, "transformer." prefix), or the file's */
    al_verify_status status;
    int64_t bytes;          /* float32 bytes hashed, -1 if absent */
    int64_t expected_bytes; /* from the table, -1 if not in it */
    char sha256[65];        /* of the tensor as HF float32 little-endian, "" if absent */
    char expected[65];      /* "" if not in the table */
    char note[128];         /* e.g. "stored as bf16: cannot match the float32 hash" */
} al_verify_entry;

typedef struct al_verify_report {
    int n;
    al_verify_entry *entries; /* [n], table order, then the unexpected ones */
    int matched, mismatched, missing, unexpected, optional_absent;
    int complete;     /* 1: every parameter of the table present and matched */
    char format[32];  /* "safetensors", "llm.c v3 (fp32)", "llm.c v5 (bf16)" */
    char table[1024]; /* the table used */
} al_verify_report;

/* Hashes every tensor of a GPT-2 checkpoint (a bare .safetensors, an HF directory or index,
 * or an llm.c .bin; no config needed) in the HF float32 layout and compares them with a
 * table of "name<TAB>bytes<TAB>sha256" lines. table NULL: the pinned GPT-2 124M table
 * (data/gpt2_124M_tensor_sha256.tsv in the source tree or share/attnlim when installed). */
AL_API int al_gpt2_verify(const char *model_path, const char *table, al_verify_report *out,
                          al_error *err);
AL_API void al_verify_report_free(al_verify_report *r);

typedef enum al_ckpt_format { AL_CKPT_SAFETENSORS = 0, AL_CKPT_LLMC = 1 } al_ckpt_format;

typedef struct al_gpt2_make_opts {
    int n_layer, n_head, n_embd, n_ctx, vocab_size;
    uint64_t seed;
    al_ckpt_format format;
    int llmc_version; /* 3 (fp32) or 5 (bf16) */
} al_gpt2_make_opts;

/* Writes a deterministic random GPT-2 checkpoint of the real layout, atomically: safetensors
 * (out = a directory receiving model.safetensors + config.json, HF names without prefix) or
 * llm.c (out = the .bin, vocabulary padded to a multiple of 128). The same seed gives the
 * same weights in both formats. Scales: embeddings and matrices N(0, 0.02) except c_attn
 * N(0, 1/sqrt(C)) (so that attention logits have unit scale), residual projections
 * N(0, 0.02/sqrt(2L)), biases N(0, 0.02), LayerNorm weights 1 + N(0, 0.1). */
AL_API int al_gpt2_make_model(const al_gpt2_make_opts *o, const char *out, al_error *err);

/* ==== Section: experiments (the paper's Algorithms 1-5, reports) ======================== */
/* owner: reproduce module (src/reproduce.c, src/plot.c, src/report.c) */

/* Which vectors x_j the distance and separability metrics use (METHOD section 1 [reading]). */
typedef enum al_vectors {
    AL_VEC_VALUE = 0, /* the head's value vectors v_j (default) */
    AL_VEC_KEY,       /* the head's key vectors k_j */
    AL_VEC_HIDDEN,    /* the layer input after its first norm, d_model wide */
    AL_VEC_EMBED,     /* the model input embedding (GPT-2: token + position; Llama: token; BERT:
                       * the normalised sum of word, position and type embeddings) */
    AL_VEC_RESIDUAL,  /* the layer input before its first norm (the residual stream) */
} al_vectors;
/* "value", "key", "hidden", "embedding", "residual" */
AL_API const char *al_vectors_name(al_vectors v);
AL_API int al_vectors_parse(const char *s, al_vectors *out, al_error *err);

/* The experiments of `attnlim reproduce` (bit flags; 0 = all). */
enum {
    AL_EXP_VANISHING = 1u << 0,
    AL_EXP_ALG1 = 1u << 1,
    AL_EXP_ALG2 = 1u << 2,
    AL_EXP_ALG3 = 1u << 3,
    AL_EXP_ALG4 = 1u << 4,
    AL_EXP_ALG5 = 1u << 5,
    AL_EXP_ALL = 0x3f,
};

/* Options of al_reproduce. al_repro_defaults fills the paper's settings; every NULL grid
 * means the default grid of METHOD (or the --quick grid when quick is set). */
#define AL_WINDOWS_ALL (-1) /* al_repro_opts.windows: every window of the corpus */
typedef struct al_repro_opts {
    const char *model;     /* path or known name; NULL = the best available (al_repro_pick_model) */
    const char *corpus;    /* "war-and-peace" (default, NULL) or a text file; none for a dump */
    const char *data_path; /* explicit data location for al_data_find, or NULL */
    const char *out_dir;   /* where every output goes (created) */
    int windows;           /* K >= 1: windows 0..K-1 of every L; AL_WINDOWS_ALL: every window
                              of the corpus at the longest L (K = tokens / L) */
    al_vectors vectors;
    const char *normalizer; /* NULL: the model's own softmax weights; else an al_norm_parse name */
    int quick;              /* small grids for tiny test models */
    int resume;             /* reuse OUT/partial results whose options match */
    int progress;           /* 1: a progress bar on stderr (a TTY); 2: plain periodic lines */
    int quiet;              /* no messages on stderr at all */
    int threads;            /* OpenMP threads over heads (0 = the OpenMP default) */
    unsigned experiments;   /* AL_EXP_* (0 = all) */
    uint64_t seed;          /* Algorithm 5 directions and Monte-Carlo E */
    int mc_samples;         /* Monte-Carlo samples for E (0 = off) */
    int long_length;    /* L of the vanishing study and Algorithms 2, 4, 5 (0 = min(1024, ctx)) */
    const int *lengths; /* [n_lengths] Algorithms 1 and 3 */
    int n_lengths;
    const int *top_n; /* [n_top_n] Algorithm 2 */
    int n_top_n;
    const int *critical_n; /* [n_critical_n] Algorithm 3 (only N < L is used) */
    int n_critical_n;
    const int *separability_n; /* [n_separability_n] Algorithm 4 */
    int n_separability_n;
    const double *temperatures; /* [n_temperatures] Algorithm 5 */
    int n_temperatures;
    const double *eps; /* [n_eps] Algorithm 5 */
    int n_eps;
    int synthetic; /* -1 auto (from the checkpoint's config), 0 trained, 1 random weights */
    /* the readings of METHOD section 9 (each [reading]; the defaults are METHOD's sections 3, 6) */
    al_distance_kind distance;  /* --distance: dtilde of Algorithms 1-3 (default sum-of-norms) */
    al_expect_kind expectation; /* --expectation: the E that Algorithm 3's KS test compares with
                                 * and Algorithms 1-2 report (default analytic); mc needs
                                 * mc_samples > 0; exact is refused where C(L, N) > exact_max */
    int64_t exact_max;          /* cap on C(n, N) per row (0 = AL_EXACT_MAX_DEFAULT) */
    int temperature_raw;        /* --temperature-scale: 0 scaled (T on q.k/sqrt(d_head)), 1 raw
                                 * (T on q.k, the paper's axis) */
    int fresh_directions;       /* --directions: 0 shared (one v per row), 1 fresh (a new v per
                                 * (T, eps, head, row), the paper's Algorithm 5) */
    al_attn_spec attention;     /* the attention inside the forward (zero: the model's own) */
    /* --readings: NULL (off), "all", or ';'-separated AXIS=VALUE[,AXIS=VALUE] items (axes:
     * vectors, distance, expectation, temperature-scale, directions): every claim evaluated
     * under each on the same forward passes; OUT/readings.json, readings.csv, the report's
     * "Verdicts under every reading", OUT/readings/<name>/ (docs/readings.md) */
    const char *readings;
    int bos, wrap; /* as al_diag_opts's: 0 the model's default, 1 on, 2 off */
    /* --layers / --heads: the heads analysed (NULL or 0: all); the others are NaN everywhere */
    const int *layers; /* [n_layers] */
    int n_layers;
    const int *heads; /* [n_heads] */
    int n_heads;
} al_repro_opts;

AL_API void al_repro_defaults(al_repro_opts *o);
/* The best model available: "gpt2" (124M) when al_model_open("gpt2") works, else "smollm2";
 * else AL_E_NOTFOUND with a message on how to provide one. name receives the name. */
AL_API int al_repro_pick_model(char *name, size_t size, al_error *err);
/* Before al_reproduce (the CLI's rank 0): o->out_dir absent or empty, or with o->resume its
 * own earlier output, or an earlier run's that never finished (no results.json): the run works
 * in DIR (*od NULL). With force over its own earlier output: o->out_dir becomes a temporary
 * beside DIR (*od), published with al_outdir_publish after the run and released with
 * al_outdir_free. Anything else (a link, a file, entries reproduce does not write; its own
 * output without force or resume) is refused, naming it. */
struct al_outdir;
AL_API int al_repro_out_begin(al_repro_opts *o, int force, struct al_outdir **od, al_error *err);
/* Runs every experiment and writes results.json, CSVs, NPYs, figures, report.md and
 * report.html into o->out_dir (docs/results-schema.md, docs/reproduce.md). */
AL_API int al_reproduce(const al_repro_opts *o, al_error *err);

/* "Did you mean": the one name of cand [n] nearest to s (case-insensitive edit distance: at
 * most 1 for names up to 4 bytes, 2 up to 8, else 3; a prefix of 3+ characters counts as near),
 * or NULL when none is near or two are equally near. */
AL_API const char *al_nearest(const char *s, const char *const *cand, int n);

/* ==== Services for programs built on the library (the attnlim CLI is one) ================ */

/* Monotonic seconds, for timings. */
AL_API double al_now(void);
/* The OpenMP thread count the kernels take now (al_set_threads sets it). */
AL_API int al_get_threads(void);
/* Prefixes err->msg with the printf-formatted prefix and ": " (an err without a code takes
 * AL_E_INVALID); returns err's code. NULL err: a no-op returning AL_E_INVALID. */
AL_API int al_error_prefix(al_error *err, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* A whole file ("-": stdin) as a NUL-terminated buffer (*out, free with al_free; *len its
 * bytes), at most max_size bytes; any other path must be a regular file (a FIFO, a device, a
 * directory is refused, naming it, without blocking on it). */
AL_API int al_read_file(const char *path, size_t max_size, char **out, size_t *len, al_error *err);
/* One decimal number as every reader of the library takes it ([+-] digits [. digits]
 * [e [+-] digits]): hexadecimal, NaN, Inf, values beyond the normal doubles and anything else
 * are refused with a message naming what ("--alpha: '0x1p3' is hexadecimal ..."). */
AL_API int al_parse_double(const char *s, const char *what, double *out, al_error *err);
/* The terminal form of s[n] into out[cap] (NUL-terminated, cut at a character): controls as
 * \xNN / \u00NN (tab, newline and carriage return kept), invalid UTF-8 bytes as \xNN, so that
 * a name holding ESC or CSI sequences cannot act on a terminal. Returns the length written. */
AL_API size_t al_term_text(const char *s, size_t n, char *out, size_t cap);
/* The JSON text of a cJSON tree as every JSON attnlim writes it (pretty or on one line; numbers
 * round-trip, invalid UTF-8 repaired). malloc'ed (free with al_free); NULL when out of memory. */
struct cJSON;
AL_API char *al_json_print(const struct cJSON *j, int pretty);
/* The kernels' instruction set: al_cpu_kernels(0) the one in use ("scalar", "avx2", "avx512":
 * the best this CPU has, or $ATTNLIM_CPU), al_cpu_kernels(1) the best this CPU supports. */
AL_API const char *al_cpu_kernels(int supported);
/* Checks $ATTNLIM_CPU: unset, or one of those names and supported here; else AL_E_INVALID
 * saying what this CPU supports. */
AL_API int al_cpu_check_env(al_error *err);

/* A progress bar on stderr: mode 0 off (every call a no-op), 1 redrawn in place (a TTY), 2
 * plain lines every $ATTNLIM_PROGRESS_INTERVAL seconds (default 10). total: work units. NULL
 * when out of memory (the calls then do nothing). al_bar_end draws the last line and frees
 * (in mode 2 only if a line was printed before: a run shorter than one interval prints none). */
typedef struct al_bar al_bar;
AL_API al_bar *al_bar_begin(int mode, double total);
AL_API void al_bar_add(al_bar *b, double units, const char *status);
AL_API void al_bar_end(al_bar *b);

/* An output directory published in one rename: the run writes into a temporary directory
 * beside DIR (al_outdir_path), and al_outdir_publish makes it DIR. DIR absent or empty is
 * replaced; DIR holding files is refused unless force, and with force only when every entry is
 * one the tool writes (own(name, is_dir)), its own earlier output, then exchanged atomically.
 * Temporaries of killed runs are swept when their owner is provably gone (src/base/outdir.h). */
typedef struct al_outdir al_outdir;
typedef int (*al_own_fn)(const char *name, int is_dir);
/* Checks DIR (tool names the temporaries: "capture", "make-model") and sweeps dead runs'
 * temporaries; nothing is created yet. NULL with err set. */
AL_API al_outdir *al_outdir_open(const char *dir, const char *tool, al_own_fn own, int force,
                                 al_error *err);
/* Creates the missing parents, the lock and the temporary directory. */
AL_API int al_outdir_make(al_outdir *d, al_error *err);
/* The temporary directory to write into (after al_outdir_make), and DIR. */
AL_API const char *al_outdir_path(const al_outdir *d);
AL_API const char *al_outdir_dir(const al_outdir *d);
/* The one rename that makes the temporary DIR (replacing the earlier output when force). */
AL_API int al_outdir_publish(al_outdir *d, al_error *err);
/* Releases d: when not published, the temporary, the parents it created and the lock go.
 * NULL is a no-op. */
AL_API void al_outdir_free(al_outdir *d);
/* DIR holds nothing but entries own() accepts (for a run that works inside DIR itself). */
AL_API int al_outdir_check_own(const char *dir, const char *tool, al_own_fn own, al_error *err);

/* ==== Training: a GPT-2 of any normalizer (docs/training.md), and the normalizer study ===== */

/* The options of a training run. size: sizeof(al_train_opts), set by al_train_defaults (a
 * struct of another version is refused): fill with al_train_defaults, then change fields. */
typedef struct al_train_opts {
    size_t size;
    int n_layer, n_head, n_embd, n_ctx; /* the model (vocab_size: the tokenizer's) */
    al_norm norm;                       /* the attention normalizer */
    int ssmax_learn;                    /* ssmax: s learnable per (layer, head) */
    double lr, min_lr_frac;             /* peak learning rate; cosine floor as a fraction */
    int warmup, steps;                  /* linear warmup steps; total steps */
    double beta1, beta2, eps, weight_decay, clip; /* AdamW; global norm clip (<= 0: off) */
    int B, T;                                     /* batch: B sequences of T tokens (T <= n_ctx) */
    uint64_t seed;                                /* initialisation and data order */
    int fixed_batch;                              /* every step on the batch of step 0 */
    const char *corpus;                           /* "war-and-peace" or a text file */
    const char *data_path;                        /* al_data_find's explicit path (NULL) */
    const char *tokenizer;                        /* "bytes" or "gpt2" */
    double val_frac;                              /* held-out tail */
    int eval_every;   /* validation every K steps (0: only at the end) */
    int val_windows;  /* windows of T tokens per validation */
    int ckpt_every;   /* checkpoint + state every K steps (0: only at the end) */
    int stop_after;   /* stop (saving) after this many steps of this call (0: off) */
    const char *out;  /* the run's directory */
    int resume;       /* continue from out/state.bin */
    const char *init; /* start from these GPT-2 weights instead of the seeded init */
    const char *dump; /* write the first step (batch, loss, gradients, weights) */
    int progress;     /* 0 off, 1 a bar on stderr (a TTY), 2 plain periodic lines */
} al_train_opts;

typedef struct al_train_summary {
    int steps_done;      /* steps completed in total (with earlier calls) */
    double last_loss;    /* training loss of the last step */
    double val_loss;     /* last validation loss (NaN if none) */
    double tokens_per_s; /* training tokens per second in this call */
    double seconds;
} al_train_summary;

AL_API void al_train_defaults(al_train_opts *o);
/* Trains (or resumes) into o->out: model.safetensors, config.json, state.bin, train.json. */
AL_API int al_train(const al_train_opts *o, al_train_summary *s, al_error *err);

#define AL_STUDY_MAX_L 16
/* The study: one model per normalizer at the same budget (base), then the paper's diagnostics
 * on each. size: sizeof(al_study_opts), set by al_study_defaults. */
typedef struct al_study_opts {
    size_t size;
    al_train_opts base;         /* model, data, optimizer, batch, seed: the same for every run */
    const char *normalizers;    /* "softmax,sparsemax,entmax15,entmax:1.3,ssmax,sa-softmax" */
    int windows;                /* validation windows of T tokens diagnosed */
    int crit_L[AL_STUDY_MAX_L]; /* window lengths of the critical-N test (<= T) */
    int n_crit_L;
    const char *out;
    int progress; /* 0 off, 1 a bar on stderr (a TTY), 2 plain periodic lines */
} al_study_opts;

AL_API void al_study_defaults(al_study_opts *o);
/* Checks a normalizer list as al_study reads it (ssmax: s learnable; ssmax-fixed[:S]: fixed);
 * *n receives the number of runs. */
AL_API int al_study_normalizers(const char *list, int *n, al_error *err);
/* Trains (or resumes) every run into OUT/runs/NAME, diagnoses each, then writes
 * OUT/study.json, OUT/study.csv, OUT/figures/ and OUT/report.html. */
AL_API int al_study(const al_study_opts *o, al_error *err);

/* ==== Dump writer: attention dumps (docs/dumps.md), written by capture and write_dump ======== */

/* A dump is written into a temporary directory beside DIR and becomes DIR in one rename
 * (al_outdir_* rules: DIR absent or empty; with force, only over an earlier dump's manifest.json
 * and layer{l}.{kind}.npy files). An unfinished writer freed leaves nothing behind. */
typedef struct al_dump_writer al_dump_writer;
/* Checks DIR, creates the temporary directory (tool names it: "capture", "dump"). NULL with
 * err set. */
AL_API al_dump_writer *al_dump_writer_open(const char *dir, const char *tool, int force,
                                           al_error *err);
/* The temporary directory (readable as a dump once the manifest is written), and DIR. */
AL_API const char *al_dump_writer_path(const al_dump_writer *w);
AL_API const char *al_dump_writer_dir(const al_dump_writer *w);
/* Writes layer{layer}.{what}.npy (what: q, k, v, logits, weights, hidden, embed,
 * logits_precap; dtype AL_F32 or AL_F64; C order data [shape[0], ..., shape[ndim-1]]) and its
 * "files" entry {file, layer, what, shape, dtype} followed by the members of extra_json (a JSON
 * object as text, or NULL). */
AL_API int al_dump_writer_add(al_dump_writer *w, int layer, const char *what, int dtype, int ndim,
                              const int64_t *shape, const void *data, const char *extra_json,
                              al_error *err);
/* Sets manifest member key to json (JSON text), members kept in the order set; key "files"
 * with json NULL places the list of the arrays added there (else it comes last). */
AL_API int al_dump_writer_set(al_dump_writer *w, const char *key, const char *json, al_error *err);
/* Sets "model": m's manifest object (files and their SHA-256s, identity, family, shapes, load
 * warnings, attention; given: the name or path m was opened with). */
AL_API int al_dump_writer_model(al_dump_writer *w, al_model *m, const char *given, al_error *err);
/* Writes manifest.json (pretty JSON), with check opens the temporary dump as al_model_open
 * does (every array read back and checked), and publishes DIR; *manifest (if not NULL)
 * receives the manifest's text (al_free). Then al_dump_writer_free only releases the writer. */
AL_API int al_dump_writer_finish(al_dump_writer *w, int check, char **manifest, al_error *err);
AL_API void al_dump_writer_free(al_dump_writer *w);
/* The files m's tokenizer reads as JSON text {sha256, sha256_of, files: [{name, path, role,
 * bytes, sha256}]} (al_free), hashed; NULL with err set. */
AL_API char *al_model_tokenizer_json(al_model *m, al_error *err);

/* Asks a running al_reproduce to stop at the next layer of its forward (async-signal-safe: call
 * it from a SIGINT handler). The run returns AL_E_CANCELLED, its finished jobs saved for
 * --resume; al_cancel_reset() clears the request. */
AL_API void al_cancel(void);
AL_API void al_cancel_reset(void);

/* `attnlim diagnose`: per-head health of a model on one window. */
typedef struct al_diag_opts {
    const char *model;
    const char *corpus;
    const char *data_path;
    const char *out_dir; /* diagnose.json and diagnose.md (NULL: only the JSON on stdout) */
    int length;          /* 0 = min(1024, ctx) */
    int window;
    int threads;
    const char *normalizer; /* NULL = softmax */
    al_attn_spec attention; /* the attention inside the forward (zero: the model's own) */
    const int *layers;      /* [n_layers] the layers diagnosed (NULL or 0: every layer) */
    int n_layers;
    const int *heads; /* [n_heads] the heads diagnosed in each of them (NULL or 0: every head) */
    int n_heads;
    /* How the corpus becomes the window (docs/reproduce.md "Windows"): bos 0 the model's
     * default, 1 BOS first in the text, 2 none (decoders); wrap 0 the default (on), 1 on,
     * 2 off: an encoder's window is [CLS] + L - 2 corpus tokens + [SEP] (L counts them) */
    int bos, wrap;
} al_diag_opts;

/* Per head: mean max weight, mean H / log n, mean weight on token 0, N_s/N at N = 1, 4, 16, 64
 * (N < L), mean exact Jacobian spectral norm at T = 1; flags "collapsed" (mean max weight > 0.9
 * or H / log n < 0.1), "vanishing" (H / log n > 0.95: near uniform), "sink" (mean weight on
 * token 0 > 0.5). *json (malloc'ed) receives the report as JSON text; with out_dir,
 * diagnose.json and diagnose.md are written there too. */
AL_API int al_diagnose(const al_diag_opts *o, char **json, al_error *err);

/* `attnlim guidelines`: the paper's guidelines tested in the model's loss (docs/guidelines.md).
 * For each L: the mean next-token NLL over windows 0..K-1 of the unmodified model, of top-k
 * attention at each fixed k < L and at each rule, and of each normalizer (in every layer);
 * the smallest fixed k within 1% and 5% of the dense NLL, as k / L, with fitted rules; the KS
 * critical N of `attnlim reproduce` beside it; entropy and N_s/N per layer of the modified
 * models. Every NULL grid is the default. */
typedef struct al_guide_opts {
    const char *model;     /* path or known name (required) */
    const char *corpus;    /* NULL: war-and-peace */
    const char *data_path; /* explicit data location, or NULL */
    const char *out_dir;   /* guidelines.json, guidelines.csv, monitoring.csv, figures, .md */
    int windows;           /* K >= 1 (0: 4) */
    const int *lengths;    /* [n_lengths]; NULL: 128, 256, 512, 1024 and 2048 when the context
                            * allows */
    int n_lengths;
    const int *k; /* [n_k] fixed k (only k < L is run); NULL: 1, 2, 4, ..., 512 */
    int n_k;
    const char *const *rules; /* [n_rules] al_attn_rule_parse spellings; NULL: topk-frac:0.06,
                               * topk-sqrt:1, topk-sqrt:2, topk-log:2, topk-log:4 */
    int n_rules;
    const char *const *normalizers; /* [n_normalizers] al_attn_norm_parse spellings; NULL:
                                     * sparsemax, entmax15, entmax:1.25, ssmax */
    int n_normalizers;
    const char *reproduce_dir; /* a reproduce OUT (results.json) of the same model: critical N */
    int monitor_length;        /* the per-layer monitoring: 0 at every L of the grid (the
                                * figures at the largest L <= 1024), > 0 at that L only,
                                * -1 off */
    int monitor_n;             /* N of N_s/N (0: 16) */
    int resume, progress, quiet, threads;
    int bos; /* the model's BOS first in the text: 0 the model's default, 1 on, 2 off */
    /* the layers / query heads every variant modifies (--attention-layers / --attention-heads);
     * NULL: every one. Recorded in the manifest; --resume refuses results of another subset. */
    const int *attn_layers; /* [n_attn_layers] */
    int n_attn_layers;
    const int *attn_heads; /* [n_attn_heads] */
    int n_attn_heads;
} al_guide_opts;
AL_API int al_guidelines(const al_guide_opts *o, al_error *err);

/* ---- Part: several processes (MPI) (owner: src/dist.c) ---- */

/* A group of cooperating processes, possibly on several machines: MPI_COMM_WORLD when attnlim
 * was built with MPI (CMake option AL_MPI) and the program was started by an MPI launcher, else
 * this process alone. A NULL al_dist * is this process alone too. */
typedef struct al_dist al_dist;
/* 1 when this build has MPI. */
AL_API int al_dist_has_mpi(void);
/* 1 when the environment says an MPI launcher started this process (OMPI_COMM_WORLD_SIZE,
 * PMI_SIZE or PMIX_RANK is set). */
AL_API int al_dist_launched(void);
/* The group. Under a launcher: MPI_Init_thread (MPI_THREAD_FUNNELED; not when MPI is already
 * initialised) and a duplicate of MPI_COMM_WORLD; otherwise a group of one, without touching
 * MPI (a binary linked with MPI runs alone without a launcher). A build without MPI started as
 * one of several processes: AL_E_UNSUPPORTED saying so. *out is closed with al_dist_close, which
 * calls MPI_Finalize when al_dist_open called MPI_Init. */
AL_API int al_dist_open(al_dist **out, al_error *err);
AL_API void al_dist_close(al_dist *d);
AL_API int al_dist_rank(const al_dist *d); /* 0 .. size-1; 0 for NULL */
AL_API int al_dist_size(const al_dist *d); /* 1 for NULL */
/* Collective (every rank calls it): rc is this rank's status. 0 when every rank passed 0; else
 * the lowest failing rank's code on every rank, and err receives its message there, prefixed
 * "rank R (HOST): " when R is not 0. */
AL_API int al_dist_agree(al_dist *d, int rc, al_error *err);

/* al_reproduce and al_diagnose over the group d (collective: every rank calls it with the same
 * options). Every rank runs each job's forward and computes the per-head metrics of the heads it
 * owns (head h = layer * n_head + head is rank h % size's); rank 0 gathers them (checking that
 * every head was computed exactly once), alone writes every output and decides what --resume
 * reuses, and alone prints; the other ranks are quiet (o->quiet). Rank 0 reads the corpus and
 * sends the tokens; every rank opens the model, which must have rank 0's identity (sha256). An
 * error on any rank is returned on every rank, with that rank's message ("rank R (HOST): ...").
 * al_diagnose_dist sets *json on rank 0 only (NULL elsewhere). With d NULL or of size 1 they are
 * al_reproduce and al_diagnose. */
AL_API int al_reproduce_dist(const al_repro_opts *o, al_dist *d, al_error *err);
AL_API int al_diagnose_dist(const al_diag_opts *o, al_dist *d, char **json, al_error *err);
/* al_guidelines over the group d (collective, the same options on every rank): each L's
 * (variant, window) forwards and the monitoring forwards go round robin over the ranks; rank 0
 * reads the corpus (and sends the tokens), decides what --resume reuses, gathers the NLLs, alone
 * writes and prints. Every rank opens the model, which must have rank 0's identity. d NULL or
 * of size 1: al_guidelines. */
AL_API int al_guidelines_dist(const al_guide_opts *o, al_dist *d, al_error *err);

#ifdef __cplusplus
}
#endif
#endif /* ATTNLIM_H */
