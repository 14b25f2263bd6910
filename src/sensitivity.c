/* sensitivity.c: gradient sensitivity of the normalizer (METHOD section 6; paper Algorithm 5)
 * for one head: per row of logits, the finite difference
 *     delta(T, eps) = || f((z + eps v)/T) - f(z/T) || / eps
 * with one seeded direction v per (seed, layer, head, row), reused for every T and eps, and
 * the exact spectral norm of the Jacobian of f(z/T); both averaged over the rows with n >= 2.
 *
 * f is any normalizer of attnlim.h (al_norm_forward / al_norm_forward_spectral, with its
 * temperature set to each T). Softmax, the case of the paper, has a fast path: a vectorised
 * exponential here and the exact secular-equation norm of the normalizer module
 * (al_norm_rank1_spectral(p) / T, the spectral norm of (diag(p) - p p^T)/T).
 */
#include "internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* a*b + c in one rounding where the machine has FMA (ISO C mode does not contract). */
#ifdef __FMA__
#define FMA(a, b, c) fma(a, b, c)
#else
#define FMA(a, b, c) ((a) * (b) + (c))
#endif

/* exp(x) for x <= 0 (not NaN) to ~1 ulp (0 below -708), vectorisable: x = k ln2 + r, |r| <= ln2/2,
 * a degree-12 Taylor polynomial for e^r and 2^k built from the bits. */
static inline double exp_neg(double x) {
    /* the clamp and the underflow select are integer selects: the compiler may not
     * if-convert floating-point compares under -ftrapping-math (it would not vectorise) */
    uint64_t xb, cb = 0xC086200000000000ull; /* bits of -708.0 */
    memcpy(&xb, &x, sizeof xb);
    int under = xb > cb; /* x < -708 for x <= 0 (sign-magnitude order) */
    xb = under ? cb : xb;
    double xc;
    memcpy(&xc, &xb, sizeof xc);
    double t = xc * 1.4426950408889634 + 0x1.8p52;
    double kf = t - 0x1.8p52;
    double r = FMA(-kf, 1.90821492927058770002e-10, FMA(-kf, 6.93147180369123816490e-01, xc));
    double p = 1.0 / 479001600.0;
    p = FMA(p, r, 1.0 / 39916800.0);
    p = FMA(p, r, 1.0 / 3628800.0);
    p = FMA(p, r, 1.0 / 362880.0);
    p = FMA(p, r, 1.0 / 40320.0);
    p = FMA(p, r, 1.0 / 5040.0);
    p = FMA(p, r, 1.0 / 720.0);
    p = FMA(p, r, 1.0 / 120.0);
    p = FMA(p, r, 1.0 / 24.0);
    p = FMA(p, r, 1.0 / 6.0);
    p = FMA(p, r, 0.5);
    p = FMA(p, r, 1.0);
    p = FMA(p, r, 1.0);
    uint64_t tb, sb;
    memcpy(&tb, &t, sizeof tb);
    sb = (tb - 0x4338000000000000ull + 1023ull) << 52;
    sb = under ? 0 : sb;
    double scale;
    memcpy(&scale, &sb, sizeof scale);
    return p * scale;
}

/* p[n] = softmax((z + eps v) / T) (v may be NULL: eps ignored). */
__attribute__((noinline)) static void softmax_t(const double *restrict z, const double *restrict v,
                                                double eps, double T, int64_t n,
                                                double *restrict p) {
    double mx = -INFINITY;
    if (v) {
#pragma omp simd reduction(max : mx)
        for (int64_t i = 0; i < n; i++) {
            double q = z[i] + eps * v[i];
            mx = mx > q ? mx : q;
        }
    } else {
#pragma omp simd reduction(max : mx)
        for (int64_t i = 0; i < n; i++) mx = mx > z[i] ? mx : z[i];
    }
    double invT = 1.0 / T, s = 0;
    if (v) {
#pragma omp simd
        for (int64_t i = 0; i < n; i++) p[i] = exp_neg(((z[i] + eps * v[i]) - mx) * invT);
    } else {
#pragma omp simd
        for (int64_t i = 0; i < n; i++) p[i] = exp_neg((z[i] - mx) * invT);
    }
#pragma omp simd reduction(+ : s)
    for (int64_t i = 0; i < n; i++) s += p[i];
    double is = 1.0 / s;
#pragma omp simd
    for (int64_t i = 0; i < n; i++) p[i] *= is;
}

static double dist2(const double *restrict a, const double *restrict b, int64_t n) {
    double s = 0;
#pragma omp simd reduction(+ : s)
    for (int64_t i = 0; i < n; i++) {
        double e = a[i] - b[i];
        s += e * e;
    }
    return s;
}

int al_sensitivity_direction(uint64_t seed, int layer, int head, int64_t row, int64_t n,
                             double *v) {
    if (!v || n < 1) return AL_E_INVALID;
    uint64_t h = al__hash64(seed);
    h = al__hash64(h ^ (uint64_t)(int64_t)layer);
    h = al__hash64(h ^ (uint64_t)(int64_t)head);
    h = al__hash64(h ^ (uint64_t)row);
    al__rng r;
    al__rng_seed(&r, h);
    double s = 0;
    for (int64_t i = 0; i < n; i++) {
        v[i] = al__rng_normal(&r);
        s += v[i] * v[i];
    }
    if (!(s > 0)) { /* measure zero; keep the result on the sphere anyway */
        for (int64_t i = 0; i < n; i++) v[i] = i == 0;
        return 0;
    }
    double is = 1.0 / sqrt(s);
    for (int64_t i = 0; i < n; i++) v[i] *= is;
    return 0;
}

int al_head_sensitivity(const double *z, int64_t L, int causal, const al_norm *nm,
                        const double *temps, int n_t, const double *eps, int n_eps, uint64_t seed,
                        int layer, int head, double *fd_mean, double *spec_mean, al_error *err) {
    if (!z || !nm || !temps || (n_eps > 0 && (!eps || !fd_mean)) || !spec_mean)
        return al__err(err, AL_E_INVALID, "sensitivity: NULL argument");
    if (L < 1 || L > ((int64_t)1 << 24) || n_t < 1 || n_eps < 0)
        return al__err(err, AL_E_INVALID, "sensitivity: bad sizes (L %lld, %d T, %d eps)",
                       (long long)L, n_t, n_eps);
    for (int a = 0; a < n_t; a++)
        if (!(temps[a] > 0) || !isfinite(temps[a]))
            return al__err(err, AL_E_INVALID,
                           "sensitivity: temperature %g at position %d is not "
                           "a positive number",
                           temps[a], a);
    for (int e = 0; e < n_eps; e++)
        if (!(eps[e] > 0) || !isfinite(eps[e]))
            return al__err(err, AL_E_INVALID,
                           "sensitivity: eps %g at position %d is not a "
                           "positive number",
                           eps[e], e);
    al_norm base = *nm;
    base.temperature = 1.0;
    int rc = al_norm_check(&base, err);
    if (rc) return rc;
    int fast = nm->kind == AL_NORM_SOFTMAX;

    double *buf = al__malloc((size_t)L * 4 * sizeof(double), "sensitivity scratch", err);
    double *acc = al__calloc((size_t)n_t * (size_t)(n_eps + 1), sizeof(double), "sensitivity sums",
                             err); /* [n_t, n_eps + 1]: fd..., spectral */
    if (!buf || !acc) {
        free(buf);
        free(acc);
        return AL_E_NOMEM;
    }
    double *v = buf, *zp = buf + L, *p0 = buf + 2 * L, *p1 = buf + 3 * L; /* [L] each */
    int64_t rows = 0;
    int64_t t0 = causal ? 1 : 0;
    for (int64_t t = t0; t < L; t++) {
        int64_t n = causal ? t + 1 : L;
        if (n < 2) continue;
        const double *zt = z + t * L; /* [n] */
        for (int64_t j = 0; j < n; j++)
            if (!isfinite(zt[j])) {
                free(buf);
                free(acc);
                return al__err(err, AL_E_RANGE,
                               "sensitivity: logits: non-finite value %g at row %lld, column %lld",
                               zt[j], (long long)t, (long long)j);
            }
        al_sensitivity_direction(seed, layer, head, t, n, v);
        for (int a = 0; a < n_t; a++) {
            double T = temps[a], spec;
            double *row = acc + (size_t)a * (size_t)(n_eps + 1);
            if (fast) {
                softmax_t(zt, NULL, 0, T, n, p0);
                spec = al_norm_rank1_spectral(p0, n) / T;
            } else {
                al_norm nmT = base;
                nmT.temperature = T;
                rc = al_norm_forward_spectral(&nmT, zt, n, p0, &spec, err);
                if (rc) goto fail_row;
            }
            row[n_eps] += spec;
            for (int e = 0; e < n_eps; e++) {
                if (fast) {
                    softmax_t(zt, v, eps[e], T, n, p1);
                } else {
                    al_norm nmT = base;
                    nmT.temperature = T;
                    for (int64_t j = 0; j < n; j++) zp[j] = zt[j] + eps[e] * v[j];
                    rc = al_norm_forward(&nmT, zp, n, p1, err);
                    if (rc) goto fail_row;
                }
                row[e] += sqrt(dist2(p1, p0, n)) / eps[e];
            }
        }
        rows++;
        continue;
    fail_row:
        free(buf);
        free(acc);
        return al__err_prefix(err, (al_code)rc, "sensitivity: row %lld", (long long)t);
    }
    double r = rows > 0 ? (double)rows : NAN;
    for (int a = 0; a < n_t; a++) {
        const double *row = acc + (size_t)a * (size_t)(n_eps + 1);
        for (int e = 0; e < n_eps; e++) fd_mean[(size_t)a * (size_t)n_eps + (size_t)e] = row[e] / r;
        spec_mean[a] = row[n_eps] / r;
    }
    free(buf);
    free(acc);
    return 0;
}
