/* normalize.c: the normalizers of METHOD section 7 and their Jacobians.
 *
 * Every normalizer is applied to x = c * z, with c = 1/T (ssmax: c = s log(n) / T). The
 * Jacobian with respect to z is c times the Jacobian with respect to x.
 *
 *  - softmax, ssmax:   p = softmax(x);              J_x = diag(p) - p p^T
 *  - sparsemax:        p = [x - tau]_+              J_x = diag(g) - g g^T / sum(g), g = 1[p > 0]
 *  - 1.5-entmax:       p = [x/2 - tau]_+^2          J_x = same form, g = sqrt(p)
 *  - alpha-entmax:     p = [(a-1) x - tau]_+^(1/(a-1)), g = p^(2-a) on the support
 *  - sa-softmax:       p = x * softmax(x)
 *  - sa-softmax-norm:  p = w(x) * softmax(x), w = (x - m) / (M - m), m = min(x_min, 0),
 *                      M = max(0, x_max)
 *
 * The first four share the form J_x = diag(g) - g g^T / sum(g) (g >= 0): it is positive
 * semi-definite (x^T J x is a g-weighted variance), so its spectral norm is its largest
 * eigenvalue. Using diag = g itself, the eigenvalues lambda != g_i solve the secular equation
 *     F(lambda) = sum_i g_i / (g_i - lambda) = 0,
 * whose largest root lies strictly between the largest two distinct entries of g (if the
 * largest entry is repeated, lambda_max is that entry exactly). rank1_spectral solves it with
 * a safeguarded rational (two-pole) iteration, shifted to the nearer pole so that the root
 * keeps full relative accuracy. The sa-softmax forms are a diagonal plus a rank of at most 4
 * (not symmetric): their norm is a bisection on the inertia of J^T J - lambda, counted in O(n)
 * through the low-rank part (sa_spectral).
 *
 * 1.5-entmax and sparsemax thresholds are exact: tau is the closed form over the support, and
 * the support is found by a selection (quickselect on the values, expected O(n)) of the same
 * monotone test a full sort would scan, "x_(k) > tau_k". alpha-entmax: tau by bisection with
 * Newton steps inside the bracket, float64. */
#include "internal.h"
#include "mv.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#if defined(AL_MV_ISA) || defined(AL_MV_DISPATCH)
#define AL_NORMALIZE_PROTOS(f)                                                                     \
    void f(al_norm_bounds)(const al_norm *nm, int64_t n, double *bound_sup, double *bound_paper);  \
    int f(al_norm_check)(const al_norm *nm, al_error *err);                                        \
    al_norm f(al_norm_default)(al_norm_kind kind);                                                 \
    int f(al_norm_forward)(const al_norm *nm, const double *z, int64_t n, double *p,               \
                           al_error *err);                                                         \
    int f(al_norm_forward_spectral)(const al_norm *nm, const double *z, int64_t n, double *p,      \
                                    double *spectral, al_error *err);                              \
    int f(al_norm_frobenius_norm)(const al_norm *nm, const double *z, int64_t n, double *out,      \
                                  al_error *err);                                                  \
    int f(al_norm_jacobian)(const al_norm *nm, const double *z, int64_t n, double *J,              \
                            al_error *err);                                                        \
    int f(al_norm_jvp)(const al_norm *nm, const double *z, int64_t n, const double *v,             \
                       double *out, al_error *err);                                                \
    const char *f(al_norm_name)(al_norm_kind kind);                                                \
    int f(al_norm_parse)(const char *name, al_norm *out, al_error *err);                           \
    double f(al_norm_rank1_spectral)(const double *g, int64_t n);                                  \
    int f(al_norm_spectral_norm)(const al_norm *nm, const double *z, int64_t n, double *out,       \
                                 al_error *err);                                                   \
    int f(al_norm_sums_to_one)(const al_norm *nm);                                                 \
    int f(al_norm_vjp)(const al_norm *nm, const double *z, int64_t n, const double *u,             \
                       double *out, al_error *err);
#pragma GCC visibility push(hidden) /* the copies: internal, never exported */
AL_MV_FOR_EACH(AL_NORMALIZE_PROTOS)
#pragma GCC visibility pop
#endif

#define STACK_N 1024 /* rows up to this length use stack scratch (no malloc) */

#if defined(__clang__) /* clang keeps the "omp simd" max reductions scalar, and says so */
#pragma clang diagnostic ignored "-Wpass-failed"
#endif

/* ---- names, defaults, checks ------------------------------------------------------------- */

static const char *const kind_names[] = {"softmax", "sparsemax",  "entmax15",       "entmax",
                                         "ssmax",   "sa-softmax", "sa-softmax-norm"};
#define N_KINDS ((int)(sizeof kind_names / sizeof kind_names[0]))

al_norm AL_MV(al_norm_default)(al_norm_kind kind) {
    al_norm nm = {kind, 1.0, 1.5, 0.43};
    return nm;
}

const char *AL_MV(al_norm_name)(al_norm_kind kind) {
    return ((int)kind >= 0 && (int)kind < N_KINDS) ? kind_names[kind] : "unknown";
}

int AL_MV(al_norm_parse)(const char *name, al_norm *out, al_error *err) {
    static const struct {
        const char *alias;
        al_norm_kind kind;
    } aliases[] = {{"1.5-entmax", AL_NORM_ENTMAX15},
                   {"entmax-1.5", AL_NORM_ENTMAX15},
                   {"alpha-entmax", AL_NORM_ENTMAX},
                   {"sa_softmax", AL_NORM_SA_SOFTMAX},
                   {"sa_softmax_norm", AL_NORM_SA_SOFTMAX_NORM}};
    if (!name) return al__err(err, AL_E_INVALID, "normalizer: no name given");
    for (int k = 0; k < N_KINDS; k++)
        if (!strcmp(name, kind_names[k])) {
            *out = al_norm_default((al_norm_kind)k);
            return 0;
        }
    for (size_t k = 0; k < sizeof aliases / sizeof aliases[0]; k++)
        if (!strcmp(name, aliases[k].alias)) {
            *out = al_norm_default(aliases[k].kind);
            return 0;
        }
    return al__err(err, AL_E_INVALID,
                   "unknown normalizer '%s' (softmax, sparsemax, entmax15, entmax, ssmax, "
                   "sa-softmax, sa-softmax-norm)",
                   name);
}

int AL_MV(al_norm_sums_to_one)(const al_norm *nm) {
    return nm->kind != AL_NORM_SA_SOFTMAX && nm->kind != AL_NORM_SA_SOFTMAX_NORM;
}

int AL_MV(al_norm_check)(const al_norm *nm, al_error *err) {
    if (!nm) return al__err(err, AL_E_INVALID, "normalizer: NULL");
    if ((int)nm->kind < 0 || (int)nm->kind >= N_KINDS)
        return al__err(err, AL_E_INVALID, "normalizer: unknown kind %d", (int)nm->kind);
    if (!(nm->temperature > 0) || !isfinite(nm->temperature))
        return al__err(err, AL_E_RANGE, "%s: temperature %g must be finite and > 0",
                       kind_names[nm->kind], nm->temperature);
    if (nm->kind == AL_NORM_ENTMAX && (!(nm->alpha > 1) || !isfinite(nm->alpha)))
        return al__err(err, AL_E_RANGE, "entmax: alpha %g must be finite and > 1", nm->alpha);
    if (nm->kind == AL_NORM_SSMAX && (!(nm->ssmax_s > 0) || !isfinite(nm->ssmax_s)))
        return al__err(err, AL_E_RANGE, "ssmax: s %g must be finite and > 0", nm->ssmax_s);
    return 0;
}

/* The scale c of x = c z (c = 1/T; ssmax: s log(n) / T; 0 for ssmax with n = 1). */
static int norm_scale(const al_norm *nm, int64_t n, double *c, al_error *err) {
    double num = nm->kind == AL_NORM_SSMAX ? nm->ssmax_s * log((double)n) : 1.0;
    double v = num / nm->temperature;
    if (!isfinite(v) || (v == 0 && num != 0))
        return al__err(err, AL_E_RANGE, "%s: temperature %g gives a scale %g out of range",
                       kind_names[nm->kind], nm->temperature, v);
    *c = v;
    return 0;
}

void AL_MV(al_norm_bounds)(const al_norm *nm, int64_t n, double *bound_sup, double *bound_paper) {
    double sup = NAN, paper = NAN;
    if (nm && nm->temperature > 0 && isfinite(nm->temperature) &&
        (nm->kind == AL_NORM_SOFTMAX ||
         (nm->kind == AL_NORM_SSMAX && nm->ssmax_s > 0 && isfinite(nm->ssmax_s)))) {
        double c = 1.0 / nm->temperature; /* 1/T_eff */
        if (nm->kind == AL_NORM_SSMAX) c *= nm->ssmax_s * log((double)(n > 1 ? n : 1));
        sup = 0.5 * c;
        paper = fmin(0.25 * c, sqrt(2.0));
    }
    if (bound_sup) *bound_sup = sup;
    if (bound_paper) *bound_paper = paper;
}

/* ---- input checks and scratch ------------------------------------------------------------- */

/* max of a[n] (n >= 1) and the first index holding a value (vectorised loops) */
static double max_simd(const double *a, int64_t n) {
    double m = a[0];
#pragma omp simd reduction(max : m)
    for (int64_t i = 0; i < n; i++) m = a[i] > m ? a[i] : m;
    return m;
}

static int64_t find_first(const double *a, int64_t n, double v) {
    for (int64_t i = 0; i < n; i++)
        if (a[i] == v) return i;
    return 0;
}

/* Checks nm, n and z (NaN/Inf names the position); *zmax = max z. */
static int check_input(const al_norm *nm, const double *z, int64_t n, double *zmax, al_error *err) {
    int rc = al_norm_check(nm, err);
    if (rc) return rc;
    if (n < 1)
        return al__err(err, AL_E_INVALID, "%s: empty input (n = %lld)", kind_names[nm->kind],
                       (long long)n);
    if (!z) return al__err(err, AL_E_INVALID, "%s: NULL logits", kind_names[nm->kind]);
    if ((uint64_t)n > (uint64_t)(SIZE_MAX / (8 * sizeof(double))))
        return al__err(err, AL_E_NOMEM, "%s: n = %lld is too large", kind_names[nm->kind],
                       (long long)n);
    double mx = z[0], bad = 0; /* bad: sum of z * 0, NaN iff some z is NaN or +-Inf */
#pragma omp simd reduction(max : mx) reduction(+ : bad)
    for (int64_t i = 0; i < n; i++) {
        mx = z[i] > mx ? z[i] : mx;
        bad += z[i] * 0.0;
    }
    if (bad != 0 || isnan(bad)) {
        for (int64_t i = 0; i < n; i++)
            if (!isfinite(z[i]))
                return al__err(err, AL_E_RANGE, "%s: logit %lld (0-based) is %s",
                               kind_names[nm->kind], (long long)i,
                               isnan(z[i]) ? "NaN" : (z[i] > 0 ? "+Inf" : "-Inf"));
    }
    *zmax = mx;
    return 0;
}

/* Scratch of k*n doubles: the stack buffer when it fits, else the heap (*heap set). */
static double *scratch(double *stackbuf, size_t stack_len, int64_t n, int k, double **heap,
                       al_error *err) {
    size_t need = (size_t)n * (size_t)k;
    *heap = NULL;
    if (need <= stack_len) return stackbuf;
    *heap = al__malloc(need * sizeof(double), "normalizer scratch", err);
    return *heap;
}

/* ---- forward passes ------------------------------------------------------------------------ */

/* Differences d = z_i - zmax, clamped so that c*d never gives NaN (c finite >= 0). */
static inline double zdiff(double zi, double zmax) {
    double d = zi - zmax;
    return d < -DBL_MAX ? -DBL_MAX : d;
}

/* exp(x) for x <= 0 (x may be -inf), within 2 ulp of libm's exp, branch-free so that loops
 * over it vectorise: x = k ln2 + r (|r| <= ln2/2, ln2 split in two), exp(r) by its Taylor
 * polynomial of degree 13 (remainder < 4e-18), 2^k (k in [-1077, 0]) as two normal factors so
 * that subnormal results come out right. */
static inline double exp_nonpos(double x) {
    int64_t b, lim;
    double m746 = -746.0; /* exp(-746) rounds to 0 */
    memcpy(&b, &x, sizeof b);
    memcpy(&lim, &m746, sizeof lim);
    b |= INT64_MIN;        /* x = -|x|: now the bits order like the values (also for -inf) */
    b = b > lim ? lim : b; /* clamp to -746 with integer ops (vectorises) */
    memcpy(&x, &b, sizeof x);
    const double shift = 0x1.8p52;
    double k = (x * 0x1.71547652b82fep0 + shift) - shift; /* round(x / ln 2) */
    double r = fma(-k, 1.90821492927058770002e-10, fma(-k, 6.93147180369123816490e-01, x));
    static const double inv_fact[14] = {1.0,
                                        1.0,
                                        0.5,
                                        1.0 / 6,
                                        1.0 / 24,
                                        1.0 / 120,
                                        1.0 / 720,
                                        1.0 / 5040,
                                        1.0 / 40320,
                                        1.0 / 362880,
                                        1.0 / 3628800,
                                        1.0 / 39916800,
                                        1.0 / 479001600,
                                        1.0 / 6227020800.0};
    double q = inv_fact[13];
    for (int j = 12; j >= 0; j--) q = fma(q, r, inv_fact[j]);    /* Horner, fused */
    double k1 = ((k * 0.5 - 0.25) + shift) - shift, k2 = k - k1; /* floor(k/2), k - floor(k/2) */
    double t1 = (k1 + 1023.0) + 0x1.0p52, t2 = (k2 + 1023.0) + 0x1.0p52;
    uint64_t b1, b2;
    memcpy(&b1, &t1, sizeof b1);
    memcpy(&b2, &t2, sizeof b2);
    b1 = (b1 - 0x4330000000000000ULL) << 52; /* the bits of 2^k1 */
    b2 = (b2 - 0x4330000000000000ULL) << 52;
    double s1, s2;
    memcpy(&s1, &b1, sizeof s1);
    memcpy(&s2, &b2, sizeof s2);
    return q * s1 * s2;
}

/* sum of a[n] (a vectorised reduction: "omp simd" lets the compiler reorder the additions) */
static double sum_simd(const double *a, int64_t n) {
    double s = 0;
#pragma omp simd reduction(+ : s)
    for (int64_t i = 0; i < n; i++) s += a[i];
    return s;
}

/* p = softmax(c z) (c > 0; c == 0 gives the uniform row). */
static void softmax_fwd(const double *restrict z, int64_t n, double zmax, double c,
                        double *restrict p) {
    for (int64_t i = 0; i < n; i++) p[i] = c * (z[i] - zmax);
    for (int64_t i = 0; i < n; i++) p[i] = exp_nonpos(p[i]);
    double inv = 1.0 / sum_simd(p, n); /* the sum is >= 1: the max gives exp(0) */
    for (int64_t i = 0; i < n; i++) p[i] *= inv;
}

/* Threshold of sparsemax (q = 1) or 1.5-entmax (q = 2) for y[n] with max y = 0: the support is
 * {i : y_i > tau}, p_i = (y_i - tau)_+^q. A value v is in the support iff
 * C(v) = sum_{y_j >= v} (y_j - v)^q < 1 (C is monotone in v and equal values pass or fail
 * together): quickselect on the candidates (y > -1, since tau >= max - 1) finds the smallest
 * passing value, keeping running sums of the values known to pass. buf: [2n] scratch. */
static double sparse_threshold(const double *y, int64_t n, int q, double *buf) {
    double *A = buf, *B = buf + n;
    double *src = A;
    int64_t m = 0;
    for (int64_t i = 0; i < n; i++)
        if (y[i] > -1.0) A[m++] = y[i];
    double cnt = 0, s = 0, ss = 0; /* sums over the values known to be in the support */
    /* near-uniform rows: when the smallest candidate passes, every candidate is in the support */
    double vmin = A[0], cs = 0, css = 0, cmin = 0;
    for (int64_t j = 0; j < m; j++) vmin = A[j] < vmin ? A[j] : vmin;
    for (int64_t j = 0; j < m; j++) {
        double d = A[j] - vmin;
        cmin += q == 1 ? d : d * d;
        cs += A[j];
        css += A[j] * A[j];
    }
    if (cmin < 1.0) {
        cnt = (double)m;
        s = cs;
        ss = css;
        m = 0;
    }
    while (m > 0) {
        double *dst = (src >= A && src < A + n) ? B : A;
        double a0 = src[0], a1 = src[m / 2], a2 = src[m - 1]; /* median of three */
        double v =
            a0 < a1 ? (a1 < a2 ? a1 : (a0 < a2 ? a2 : a0)) : (a0 < a2 ? a0 : (a1 < a2 ? a2 : a1));
        int64_t ng = 0, nl = 0, ne = 0;
        double cg = 0, gs = 0, gss = 0;
        for (int64_t j = 0; j < m; j++) { /* branch-free 3-way partition: G to the front, L to
                                             the back of dst (both slots written, one kept) */
            double u = src[j], d = u - v;
            int gt = u > v, lt = u < v;
            dst[ng] = u;
            dst[n - 1 - nl] = u;
            ng += gt;
            nl += lt;
            double w = (double)gt; /* 0 or 1, no branch */
            cg += w * (q == 1 ? d : d * d);
            gs += w * u;
            gss += w * u * u;
        }
        ne = m - ng - nl;
        double cacc = q == 1 ? s - cnt * v : ss - 2 * v * s + cnt * v * v;
        if (cacc + cg < 1.0) { /* v passes: everything >= v is in the support */
            cnt += (double)(ng + ne);
            s += gs + (double)ne * v;
            ss += gss + (double)ne * v * v;
            src = dst + n - nl;
            m = nl;
        } else { /* v fails: only values > v can pass */
            src = dst;
            m = ng;
        }
    }
    if (q == 1) return (s - 1.0) / cnt;
    double mean = s / cnt;
    double delta = 1.0 / cnt - (ss / cnt - mean * mean);
    double tau = mean - sqrt(delta > 0 ? delta : 0);
    /* one Newton step on f(tau) = sum (y - tau)_+^2 - 1 removes the rounding of the sums */
    double f = -1.0, fp = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = y[i] - tau;
        d = d > 0 ? d : 0;
        f += d * d;
        fp += d;
    }
    if (fp > 0) tau += f / (2 * fp);
    return tau;
}

/* sparsemax (q = 1) / 1.5-entmax (q = 2) of c z into p; buf [2n]. */
static void sparse_fwd(const double *z, int64_t n, double zmax, double c, int q, double *p,
                       double *buf) {
    double k = q == 1 ? c : 0.5 * c;
    for (int64_t i = 0; i < n; i++) p[i] = k * zdiff(z[i], zmax);
    double tau = sparse_threshold(p, n, q, buf);
    for (int64_t i = 0; i < n; i++) {
        double d = p[i] - tau;
        d = d > 0 ? d : 0;
        p[i] = q == 1 ? d : d * d;
    }
}

/* alpha-entmax of c z into p: y = (alpha-1) c (z - zmax) (max 0), p = (y - tau)_+^(1/(alpha-1)),
 * tau in [-1, -n^(1-alpha)] by bisection with Newton steps, then p / sum(p). */
static void entmax_fwd(const double *z, int64_t n, double zmax, double c, double alpha, double *p) {
    double am1 = alpha - 1, beta = 1.0 / am1;
    for (int64_t i = 0; i < n; i++) p[i] = am1 * (c * zdiff(z[i], zmax)); /* 0 at the max */
    double lo = -1.0, hi = -pow((double)n, -am1);                         /* f(lo) >= 0 >= f(hi) */
    double tau = 0.5 * (lo + hi);
    for (int it = 0; it < 400; it++) {
        double f = -1.0, fp = 0;
        for (int64_t i = 0; i < n; i++) {
            double d = p[i] - tau;
            if (d > 0) {
                double t = pow(d, beta);
                f += t;
                fp += t / d;
            }
        }
        fp *= beta; /* -df/dtau */
        if (f == 0) break;
        if (f > 0)
            lo = tau;
        else
            hi = tau;
        double next = fp > 0 ? tau + f / fp : 0.5 * (lo + hi);
        /* a Newton step at rounding level: tau is converged (its error is about the step) */
        if (fp > 0 && fabs(f / fp) <= 4 * DBL_EPSILON * fabs(tau)) {
            if (next > lo && next < hi) tau = next;
            break;
        }
        if (!(next > lo && next < hi)) next = 0.5 * (lo + hi);
        if (fabs(next - tau) <= 2 * DBL_EPSILON * fabs(tau) ||
            hi - lo <= 2 * DBL_EPSILON * fabs(tau)) {
            tau = next;
            break;
        }
        tau = next;
    }
    double s = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = p[i] - tau;
        p[i] = d > 0 ? pow(d, beta) : 0;
        s += p[i];
    }
    double inv = 1.0 / s;
    for (int64_t i = 0; i < n; i++) p[i] *= inv;
}

/* x = c z for the sa-softmax forms; overflow is an error naming the position. */
static int sa_logits(const al_norm *nm, const double *z, int64_t n, double c, double *x,
                     al_error *err) {
    for (int64_t i = 0; i < n; i++) {
        x[i] = c * z[i];
        if (!isfinite(x[i]))
            return al__err(err, AL_E_RANGE, "%s: logit %lld (0-based) / T = %g / %g overflows",
                           kind_names[nm->kind], (long long)i, z[i], nm->temperature);
    }
    return 0;
}

/* The sa-softmax-norm factor w [n] and what its derivative needs. w is invariant under x = c z
 * (c > 0), so it is computed from z itself: no overflow of c z, no loss of bits when c z is
 * subnormal, and dw/dz = (dw/dx) c carries the factor 1/(z range) directly. */
typedef struct sa_norm_info {
    int64_t imin, imax; /* first index of the min / max of z */
    int mact, Mact;     /* m = z[imin] (z_min < 0), M = z[imax] (z_max > 0); else 0 */
    double R;           /* M - m (in halves: the stored value is (M - m)/2) */
} sa_norm_info;

static void sa_norm_factor(const double *x, int64_t n, double *w, sa_norm_info *inf) { /* x = z */
    int64_t imin = 0, imax = 0;
    for (int64_t i = 1; i < n; i++) {
        if (x[i] < x[imin]) imin = i;
        if (x[i] > x[imax]) imax = i;
    }
    inf->imin = imin;
    inf->imax = imax;
    inf->mact = x[imin] < 0;
    inf->Mact = x[imax] > 0;
    double hm = inf->mact ? 0.5 * x[imin] : 0, hM = inf->Mact ? 0.5 * x[imax] : 0;
    inf->R = hM - hm; /* half range: never overflows */
    for (int64_t i = 0; i < n; i++) w[i] = inf->R > 0 ? (0.5 * x[i] - hm) / inf->R : 0.0;
}

/* ---- public forward ---------------------------------------------------------------------- */

/* The forward into p. For the sa forms xbuf [n] receives x (and wbuf [n] the factor w);
 * buf [2n] scratch for sparsemax/entmax15. */
static int forward_core(const al_norm *nm, const double *z, int64_t n, double zmax, double c,
                        double *p, double *xbuf, double *wbuf, sa_norm_info *inf, double *buf,
                        al_error *err) {
    switch (nm->kind) {
    case AL_NORM_SOFTMAX:
    case AL_NORM_SSMAX:
        softmax_fwd(z, n, zmax, c, p);
        return 0;
    case AL_NORM_SPARSEMAX:
        sparse_fwd(z, n, zmax, c, 1, p, buf);
        return 0;
    case AL_NORM_ENTMAX15:
        sparse_fwd(z, n, zmax, c, 2, p, buf);
        return 0;
    case AL_NORM_ENTMAX:
        entmax_fwd(z, n, zmax, c, nm->alpha, p);
        return 0;
    case AL_NORM_SA_SOFTMAX: {
        int rc = sa_logits(nm, z, n, c, xbuf, err);
        if (rc) return rc;
        softmax_fwd(z, n, zmax, c, p);
        for (int64_t i = 0; i < n; i++) p[i] *= xbuf[i];
        return 0;
    }
    case AL_NORM_SA_SOFTMAX_NORM:
        softmax_fwd(z, n, zmax, c, p);
        sa_norm_factor(z, n, wbuf, inf);
        for (int64_t i = 0; i < n; i++) p[i] *= wbuf[i];
        return 0;
    }
    return al__err(err, AL_E_INVALID, "normalizer: unknown kind");
}

int AL_MV(al_norm_forward)(const al_norm *nm, const double *z, int64_t n, double *p,
                           al_error *err) {
    double zmax = 0, c = 0;
    int rc = check_input(nm, z, n, &zmax, err);
    if (rc) return rc;
    if ((rc = norm_scale(nm, n, &c, err))) return rc;
    if (!p) return al__err(err, AL_E_INVALID, "%s: NULL output", kind_names[nm->kind]);
    /* scratch: [2n] for sparsemax / 1.5-entmax (threshold) and the sa forms (x, w); none else */
    int need = nm->kind == AL_NORM_SPARSEMAX || nm->kind == AL_NORM_ENTMAX15 ||
               nm->kind == AL_NORM_SA_SOFTMAX || nm->kind == AL_NORM_SA_SOFTMAX_NORM;
    double stackbuf[2 * STACK_N], *heap = NULL;
    double *buf = need ? scratch(stackbuf, 2 * STACK_N, n, 2, &heap, err) : stackbuf;
    if (!buf) return AL_E_NOMEM;
    sa_norm_info inf;
    rc = forward_core(nm, z, n, zmax, c, p, buf, buf + n, &inf, buf, err);
    free(heap);
    return rc;
}

/* ---- linearisation: everything a Jacobian product needs ------------------------------------ */

typedef struct lin {
    al_norm_kind kind;
    int64_t n;
    double c;     /* dx/dz */
    double *p;    /* [n] the output weights (sa forms: s = softmax(x)) */
    double *g;    /* [n] rank-one kinds: g; sa-softmax: x; sa-softmax-norm: w */
    double sigma; /* rank-one kinds: sum g; sa forms: sum s */
    double rest;  /* sum of g (sa forms: s) without its largest entry (= sigma - g[top]) */
    int64_t top;  /* index of the largest g (sa forms: s) */
    /* sa forms: J = scale * A, A_ij = a_i d_ij - [j = m] bm_i - [j = M] bM_i + P_ij with
     * P_ij = rho_i (d_ij - s_j) for i != top, P_top,j = -rt_j (j != top), P_top,top = dt, and
     * bm_i = a_i (1 - w_i), bM_i = a_i w_i (sa-softmax-norm, active min / max only). The entries
     * of A are at most 2 in magnitude and its largest is >= 1 (scale = the largest entry of J,
     * up to a factor 2): Lanczos on A^T A neither overflows nor underflows, and nothing of J
     * (whose entries may exceed the double range squared) is squared. The top row is kept as
     * entries (rt) because rho_top may be huge (x_top ~ 1e306) while its entries are not. */
    double *a, *rho, *rt; /* [n] each */
    double dt, scale;
    sa_norm_info inf; /* sa-softmax-norm (mact = Mact = 0 for sa-softmax) */
} lin;

static int is_rank1(al_norm_kind k) {
    return k != AL_NORM_SA_SOFTMAX && k != AL_NORM_SA_SOFTMAX_NORM;
}

/* sigma = sum g, top = argmax g, rest = sigma - g[top] summed without g[top] (no cancellation
 * when one entry dominates, e.g. 1 - p_top for a peaked softmax). */
static void lin_sums(lin *L, const double *g) {
    int64_t n = L->n, top = find_first(g, n, max_simd(g, n));
    double rest = sum_simd(g, top) + sum_simd(g + top + 1, n - top - 1);
    L->top = top;
    L->rest = rest;
    L->sigma = g[top] + rest;
}

/* Doubles of scratch per element that lin_build needs for a kind. */
static int lin_blocks(al_norm_kind k) {
    switch (k) {
    case AL_NORM_SOFTMAX:
    case AL_NORM_SSMAX:
        return 1; /* p (g = p) */
    case AL_NORM_ENTMAX:
        return 2; /* p, g */
    case AL_NORM_SA_SOFTMAX:
    case AL_NORM_SA_SOFTMAX_NORM:
        return 5; /* s, x or w, a, rho, rt */
    default:
        return 4; /* p, g, threshold scratch [2n] */
    }
}

/* The scaled operator A of the sa forms (see struct lin) from s = L->p, L->g (x or w), L->top
 * and L->rest. Entries of J beyond the double range are an error. */
static int sa_build(const al_norm *nm, const double *z, lin *L, al_error *err) {
    int64_t n = L->n, t = L->top;
    const double *s = L->p, *f = L->g;
    double *a = L->a, *rho = L->rho, *rt = L->rt;
    double st = s[t], s2 = 0; /* s2 = the largest s_j, j != top */
    for (int64_t j = 0; j < n; j++)
        if (j != t && s[j] > s2) s2 = s[j];
            /* 1 - s_i, without cancellation at the top */
#define OM(i) ((i) == t ? L->rest : 1 - s[(i)])
    double scale, wr = 0; /* wr: the top row's rho-part, as a numerator over den */
    double den = 1, fac = 1;
    if (nm->kind == AL_NORM_SA_SOFTMAX) {
        /* K = J / c = diag(s + q) - q s^T, q = x s; E = its largest entry */
        double E = 0;
        for (int64_t i = 0; i < n; i++) {
            double q = f[i] * s[i], d = fabs(s[i] + q * OM(i)), o = fabs(q) * (i == t ? s2 : st);
            E = fmax(E, fmax(d, o));
        }
        scale = L->c * E;
        if (!(E > 0))
            scale = 0;
        else {
            for (int64_t i = 0; i < n; i++) {
                a[i] = s[i] / E;
                rho[i] = f[i] * s[i] / E;
            }
            wr = f[t] * st;
            den = E;
        }
        L->inf.mact = L->inf.Mact = 0;
    } else {
        /* J = D / R_z + c S: D_ij = s_i (d_ij - [j = m](1 - w_i) - [j = M] w_i) (zero rows at
         * an active m and M), S_ij = w_i s_i (d_ij - s_j); the two parts have equal signs
         * entrywise, so max(E_D / R_z, c E_S) is the largest entry of J up to a factor 2. */
        sa_norm_factor(z, n, L->g, &L->inf);
        const sa_norm_info *inf = &L->inf;
        double ED = 0, ES = 0;
        for (int64_t i = 0; i < n; i++) {
            int zero = (inf->mact && i == inf->imin) || (inf->Mact && i == inf->imax);
            if (!zero) ED = fmax(ED, s[i]);
            ES = fmax(ES, f[i] * s[i] * fmax(OM(i), i == t ? s2 : st));
        }
        double tD = inf->R > 0 ? 0.5 * ED / inf->R : 0, tS = L->c * ES;
        scale = fmax(tD, tS);
        if (inf->R > 0 && scale > 0 && isfinite(scale)) {
            double kD = ED > 0 ? tD / scale / ED : 0, kS = tS / scale; /* kD s_i <= 1 */
            for (int64_t i = 0; i < n; i++) {
                int zero = (inf->mact && i == inf->imin) || (inf->Mact && i == inf->imax);
                a[i] = zero ? 0 : s[i] * kD;
                rho[i] = ES > 0 ? f[i] * s[i] / ES * kS : 0;
            }
            wr = f[t] * st;
            den = ES > 0 ? ES : 1;
            fac = ES > 0 ? kS : 0;
        } else if (!(inf->R > 0) || !(scale > 0))
            scale = 0;
    }
    if (!isfinite(scale))
        return al__err(
            err, AL_E_RANGE,
            "%s: the Jacobian has entries beyond the double range at these logits (T = %g)",
            kind_names[nm->kind], nm->temperature);
    L->scale = scale;
    if (scale == 0) { /* J = 0 */
        memset(a, 0, (size_t)n * sizeof(double));
        memset(rho, 0, (size_t)n * sizeof(double));
        memset(rt, 0, (size_t)n * sizeof(double));
        L->dt = 0;
        L->inf.mact = L->inf.Mact = 0;
        return 0;
    }
    /* the top row: rt_j = rho_top s_j = (f_t s_t s_j) / den * fac, entries of A (bounded) */
    double dt = 0;
    for (int64_t j = 0; j < n; j++) {
        rt[j] = j == t ? 0 : wr * s[j] / den * fac;
        dt += rt[j];
    }
    L->dt = dt;
    rho[t] = 0; /* never read: the top row is rt and dt */
#undef OM
    return 0;
}

/* Builds L in buf [lin_blocks(kind) * n] (p, then g or x, then w or the threshold scratch);
 * p_out [n] (optional) receives the forward output. z is checked (check_input) and zmax is its
 * max. */
static int lin_build(const al_norm *nm, const double *z, int64_t n, double zmax, double *buf,
                     lin *L, double *p_out, al_error *err) {
    double c = 0;
    int rc = norm_scale(nm, n, &c, err);
    if (rc) return rc;
    int blocks = lin_blocks(nm->kind);
    L->kind = nm->kind;
    L->n = n;
    L->c = c;
    L->p = buf;
    L->g = blocks >= 2 ? buf + n : buf;
    double *tmp = blocks >= 3 ? buf + 2 * n : NULL; /* [2n] for sparsemax / 1.5-entmax */
    switch (nm->kind) {
    case AL_NORM_SOFTMAX:
    case AL_NORM_SSMAX:
        softmax_fwd(z, n, zmax, c, L->p);
        L->g = L->p;
        lin_sums(L, L->g);
        if (p_out) memcpy(p_out, L->p, (size_t)n * sizeof(double));
        return 0;
    case AL_NORM_SPARSEMAX:
    case AL_NORM_ENTMAX15:
    case AL_NORM_ENTMAX: {
        if (nm->kind == AL_NORM_ENTMAX)
            entmax_fwd(z, n, zmax, c, nm->alpha, L->p);
        else
            sparse_fwd(z, n, zmax, c, nm->kind == AL_NORM_SPARSEMAX ? 1 : 2, L->p, tmp);
        double e = 2 - nm->alpha;
        for (int64_t i = 0; i < n; i++) {
            double pi = L->p[i], gi;
            if (!(pi > 0))
                gi = 0;
            else if (nm->kind == AL_NORM_SPARSEMAX)
                gi = 1;
            else if (nm->kind == AL_NORM_ENTMAX15)
                gi = sqrt(pi);
            else
                gi = pow(pi, e);
            L->g[i] = gi;
        }
        lin_sums(L, L->g);
        if (p_out) memcpy(p_out, L->p, (size_t)n * sizeof(double));
        return 0;
    }
    case AL_NORM_SA_SOFTMAX:
    case AL_NORM_SA_SOFTMAX_NORM:
        if (nm->kind == AL_NORM_SA_SOFTMAX && (rc = sa_logits(nm, z, n, c, L->g, err))) return rc;
        softmax_fwd(z, n, zmax, c, L->p);
        lin_sums(L, L->p);
        L->a = buf + 2 * n;
        L->rho = buf + 3 * n;
        L->rt = buf + 4 * n;
        if ((rc = sa_build(nm, z, L, err))) return rc;
        if (p_out) /* x s or w s (w == 0 everywhere when J = 0 for want of a range) */
            for (int64_t i = 0; i < n; i++)
                p_out[i] = (nm->kind == AL_NORM_SA_SOFTMAX_NORM && !(L->inf.R > 0))
                               ? 0
                               : L->g[i] * L->p[i];
        return 0;
    }
    return al__err(err, AL_E_INVALID, "normalizer: unknown kind");
}

static double dot(const double *a, const double *b, int64_t n) {
    double s = 0;
#pragma omp simd reduction(+ : s)
    for (int64_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

/* out = J v (transpose = 0) or J^T v (transpose = 1); for the sa forms out = A v or A^T v
 * (J = L->scale * A, see struct lin). */
static void lin_apply(const lin *L, const double *v, double *out, int transpose) {
    int64_t n = L->n;
    double c = L->c;
    const double *p = L->p, *g = L->g;
    if (is_rank1(L->kind)) { /* symmetric: out = c g (v - (g . v) / sigma) */
        int64_t t = L->top;
        double gv_rest = dot(g, v, t) + dot(g + t + 1, v + t + 1, n - t - 1);
        double k = L->sigma > 0 ? (gv_rest + g[t] * v[t]) / L->sigma : 0;
        for (int64_t i = 0; i < n; i++) out[i] = c * g[i] * (v[i] - k);
        if (L->sigma > 0) out[t] = c * g[t] * (v[t] * L->rest - gv_rest) / L->sigma;
        return;
    }
    const double *s = p, *w = g, *a = L->a, *rho = L->rho, *rt = L->rt;
    const sa_norm_info *inf = &L->inf;
    int64_t t = L->top;
    if (!transpose) {
        double sv = dot(s, v, n), rtv = dot(rt, v, n); /* rt[t] = 0 */
        double vm = inf->mact ? v[inf->imin] : 0, vM = inf->Mact ? v[inf->imax] : 0;
        if (L->kind == AL_NORM_SA_SOFTMAX)
            for (int64_t i = 0; i < n; i++) out[i] = a[i] * v[i] + rho[i] * (v[i] - sv);
        else
            for (int64_t i = 0; i < n; i++)
                out[i] = a[i] * ((v[i] - vm) - w[i] * (vM - vm)) + rho[i] * (v[i] - sv);
        out[t] = (L->kind == AL_NORM_SA_SOFTMAX ? a[t] * v[t]
                                                : a[t] * ((v[t] - vm) - w[t] * (vM - vm))) +
                 L->dt * v[t] - rtv;
    } else {
        double R1 = dot(rho, v, n); /* rho[t] = 0: the sum over i != top */
        double ut = v[t];
        for (int64_t j = 0; j < n; j++)
            out[j] = a[j] * v[j] + rho[j] * v[j] - rt[j] * ut - s[j] * R1;
        out[t] = a[t] * v[t] + L->dt * ut - s[t] * R1;
        if (inf->mact || inf->Mact) {
            double Am = 0, AM = 0; /* sum_i bm_i u_i, sum_i bM_i u_i */
            for (int64_t i = 0; i < n; i++) {
                double au = a[i] * v[i];
                Am += au - au * w[i];
                AM += au * w[i];
            }
            if (inf->mact) out[inf->imin] -= Am;
            if (inf->Mact) out[inf->imax] -= AM;
        }
    }
}

/* J[i*n + j] (dense). */
static void lin_dense(const lin *L, double *J) {
    int64_t n = L->n;
    double c = L->c;
    const double *p = L->p, *g = L->g;
    if (is_rank1(L->kind)) {
        double inv = L->sigma > 0 ? 1.0 / L->sigma : 0;
        for (int64_t i = 0; i < n; i++) {
            double gi = c * g[i] * inv;
            for (int64_t j = 0; j < n; j++) J[i * n + j] = -gi * g[j];
            J[i * n + i] = c * g[i] * (i == L->top ? L->rest : L->sigma - g[i]) * inv;
        }
        return;
    }
    const double *s = p, *w = g, *a = L->a, *rho = L->rho, *rt = L->rt;
    const sa_norm_info *inf = &L->inf;
    double sc = L->scale;
    int64_t t = L->top;
    for (int64_t i = 0; i < n; i++) {
        double *row = J + i * n;
        if (i == t) {
            for (int64_t j = 0; j < n; j++) row[j] = -rt[j];
            row[i] = a[i] + L->dt;
        } else {
            for (int64_t j = 0; j < n; j++) row[j] = -rho[i] * s[j];
            row[i] = a[i] + rho[i] * (1 - s[i]);
        }
        if (inf->mact) row[inf->imin] -= a[i] * (1 - w[i]);
        if (inf->Mact) row[inf->imax] -= a[i] * w[i];
        for (int64_t j = 0; j < n; j++) row[j] *= sc;
    }
}

/* ---- the secular equation ------------------------------------------------------------------ */

/* psi = sum_{i != top} g_i / e_i, dpsi = sum g_i / e_i^2, e_i = (g_i - o) - t. */
static void secular_sums(const double *g, int64_t n, int64_t top, double o, double t, double *psi,
                         double *dpsi) {
    double s = 0, d = 0;
    for (int pass = 0; pass < 2; pass++) {
        int64_t a = pass ? top + 1 : 0, b = pass ? n : top;
#pragma omp simd reduction(+ : s, d)
        for (int64_t i = a; i < b; i++) {
            double inv = 1.0 / ((g[i] - o) - t), r = g[i] * inv;
            s += r;
            d += r * inv;
        }
    }
    *psi = s;
    *dpsi = d;
}

double AL_MV(al_norm_rank1_spectral)(const double *g, int64_t n) {
    if (n < 2) return 0;
    if (!g) return NAN;
    double d1 = max_simd(g, n);
    int64_t top = find_first(g, n, d1), count1 = 0, neg = 0;
    double d2 = 0, bad = 0; /* d2: the largest entry below d1 (0 if none); bad: NaN/Inf seen */
#pragma omp simd reduction(max : d2) reduction(+ : count1, neg, bad)
    for (int64_t i = 0; i < n; i++) {
        count1 += g[i] == d1;
        neg += g[i] < 0;
        bad += g[i] * 0.0;
        double u = g[i] < d1 ? g[i] : 0.0;
        d2 = u > d2 ? u : d2;
    }
    if (bad != 0 || isnan(bad) || neg) return NAN; /* outside the domain g >= 0 finite */
    if (!(d1 > 0)) return 0;
    int ties = count1 >= 2;
    if (ties) return d1;     /* eigenvalue d1 with multiplicity >= 1 */
    if (!(d2 > 0)) return 0; /* a single non-zero entry */
    double D = d1 - d2, g1 = d1;
    double mid = d2 + 0.5 * D;
    if (!(mid > d2 && mid < d1)) return mid; /* d1, d2 adjacent doubles */
    /* F(mid) > 0: the root is in (d2, mid), work with t = lambda - d2; else t = lambda - d1 */
    double psi, dpsi;
    secular_sums(g, n, top, mid, 0, &psi, &dpsi);
    double F = psi + g1 / (d1 - mid);
    int near2 = F > 0;
    double o = near2 ? d2 : d1;
    /* y = lambda - d2 in (0, D) (near2) or w = d1 - lambda in (0, D); bracket in that variable */
    double lo = 0, hi = 0.5 * D, u = 0.5 * D;
    if (F == 0) return mid;
    for (int it = 0; it < 200; it++) {
        /* model psi ~ a + b / (d2 - x) matched to psi, dpsi at the current point; exact top pole */
        double dl2 = near2 ? u : D - u; /* lambda - d2 */
        double a = psi + dpsi * dl2, b = dpsi * dl2 * dl2;
        double next;
        if (near2) { /* a y^2 - (a D + b + g1) y + b D = 0, root in (0, D) */
            double B = a * D + b + g1, disc = B * B - 4 * a * b * D;
            next = 2 * b * D / (B + sqrt(disc > 0 ? disc : 0));
        } else { /* a w^2 + (b + g1 - a D) w - g1 D = 0 */
            double B = b + g1 - a * D, disc = B * B + 4 * a * g1 * D;
            next = 2 * g1 * D / (B + sqrt(disc > 0 ? disc : 0));
        }
        double lam_u = near2 ? d2 + u : d1 - u;
        int inside = next > lo && next < hi;
        /* the step measures the error of u (the iteration converges quadratically) */
        if (fabs(next - u) <= 1e-13 * lam_u)
            return inside ? (near2 ? d2 + next : d1 - next) : lam_u;
        if (!inside) next = 0.5 * (lo + hi);
        u = next;
        double lam = near2 ? d2 + u : d1 - u;
        double t = near2 ? u : -u; /* lambda - o */
        secular_sums(g, n, top, o, t, &psi, &dpsi);
        double phi = g1 / (near2 ? D - u : u);
        F = psi + phi;
        /* F at the level of its rounding error (psi's terms are all negative): converged */
        if (fabs(F) <= 8 * DBL_EPSILON * (phi - psi)) return lam;
        /* F increases with lambda: y grows with lambda, w shrinks */
        if ((F > 0) == near2)
            hi = u;
        else
            lo = u;
        if (hi - lo <= 2 * DBL_EPSILON * lam)
            return near2 ? d2 + 0.5 * (lo + hi) : d1 - 0.5 * (lo + hi);
    }
    return near2 ? d2 + u : d1 - u;
}

/* ---- Lanczos on J^T J for the sa forms: a first guess, checked by the inertia count below
 * ----------------------------------------------------- */

/* LAPACK (in OpenBLAS): eigenvalues/vectors of a symmetric tridiagonal matrix. */
extern void dstev_(const char *jobz, const int *n, double *d, double *e, double *z, const int *ldz,
                   double *work, int *info, size_t jobz_len);

/* Largest eigenvalue (and eigenvector s [k] when s != NULL) of the tridiagonal T (al [k], be
 * [k-1]); work [k*k + 4k]. */
static double tridiag_top(const double *al, const double *be, int k, double *s, double *work) {
    double *d = work, *e = work + k, *zz = work + 2 * k, *wk = work + 2 * k + k * k;
    memcpy(d, al, (size_t)k * sizeof(double));
    if (k > 1) memcpy(e, be, (size_t)(k - 1) * sizeof(double));
    int info = 0, ldz = k;
    dstev_(s ? "V" : "N", &k, d, e, zz, &ldz, wk, &info, 1);
    if (info != 0) return NAN;
    if (s) memcpy(s, zz + (size_t)(k - 1) * (size_t)k, (size_t)k * sizeof(double));
    return d[k - 1];
}

/* The largest Ritz value of J^T J (a lower bound of sigma_max^2) after at most 3 restarts of
 * a basis of at most 160 vectors and ~32 MB; NaN on failure. */
static double sa_lanczos(const lin *L, al_error *err) {
    int64_t n = L->n;
    /* basis of at most 160 vectors and ~32 MB (restarts make up for a short basis) */
    int64_t mlim = (int64_t)4000000 / n;
    int mcap = (int)(n < 160 ? n : 160);
    if (mcap > 20 && mcap > mlim) mcap = mlim > 20 ? (int)mlim : 20;
    size_t nn = (size_t)n;
    size_t need = nn * (size_t)(mcap + 3) + (size_t)mcap * (size_t)mcap + 8 * (size_t)mcap + 8;
    double *mem = al__malloc(need * sizeof(double), "Lanczos basis", err);
    if (!mem) return NAN;
    double *V = mem;                                        /* [mcap + 1, n] */
    double *w = V + nn * (size_t)(mcap + 1);                /* [n] */
    double *tmp = w + nn;                                   /* [n] */
    double *al = tmp + nn, *be = al + mcap, *s = be + mcap; /* [mcap] each */
    double *work = s + mcap;                                /* [mcap*mcap + 4 mcap] */
    /* a fixed pseudo-random start */
    al__rng rng;
    al__rng_seed(&rng, 0x5eedULL + (uint64_t)n);
    for (int64_t i = 0; i < n; i++) V[i] = al__rng_uniform(&rng) - 0.5;
    double theta = 0, best = 0, anorm = 0;
    const double tol = 1e-8; /* Ritz residual / theta: |sigma^2 - theta| <= 1e-8 theta */
    int done = 0;
    for (int restart = 0; restart < 3 && !done; restart++) {
        double nv = sqrt(dot(V, V, n));
        if (!(nv > 0)) break;
        for (int64_t i = 0; i < n; i++) V[i] /= nv;
        double prev = -1;
        int k = 0, next_check = 4;
        for (int j = 0; j < mcap; j++) {
            double *vj = V + (size_t)j * nn;
            lin_apply(L, vj, tmp, 0);
            lin_apply(L, tmp, w, 1);
            al[j] = dot(w, vj, n);
            for (int pass = 0; pass < 2; pass++) /* full reorthogonalisation, twice */
                for (int i = 0; i <= j; i++) {
                    double *vi = V + (size_t)i * nn;
                    double h = dot(w, vi, n);
                    for (int64_t q = 0; q < n; q++) w[q] -= h * vi[q];
                }
            double b = sqrt(dot(w, w, n));
            be[j] = b;
            k = j + 1;
            if (fabs(al[j]) > anorm) anorm = fabs(al[j]);
            if (b > anorm) anorm = b;
            /* Ritz values at growing intervals; the residual (needs the Ritz vector) once they
             * stop moving, at the end of the basis, or when the Krylov space is exhausted */
            int exhausted = b <= 1e-14 * anorm || k == n, last = j == mcap - 1;
            if (!isfinite(al[j]) || !isfinite(b)) {
                theta = NAN;
                done = 1;
                break;
            }
            if (k >= next_check || exhausted || last) {
                theta = tridiag_top(al, be, k, NULL, work);
                int stable = prev >= 0 && fabs(theta - prev) <= 1e-9 * theta;
                prev = theta;
                next_check = k + (k / 4 > 2 ? k / 4 : 2);
                if (exhausted || stable || last) {
                    theta = tridiag_top(al, be, k, s, work);
                    double resid = b * fabs(s[k - 1]);
                    if (exhausted || resid <= tol * theta || theta == 0) {
                        done = 1;
                        break;
                    }
                }
            }
            if (j == mcap - 1) break;
            double *vn = V + (size_t)(j + 1) * nn;
            for (int64_t q = 0; q < n; q++) vn[q] = w[q] / b;
        }
        if (!isfinite(theta)) break;
        if (theta > best) best = theta;
        if (!done) { /* restart from the Ritz vector V s */
            for (int64_t q = 0; q < n; q++) w[q] = 0;
            for (int i = 0; i < k; i++)
                for (int64_t q = 0; q < n; q++) w[q] += s[i] * V[(size_t)i * nn + q];
            memcpy(V, w, nn * sizeof(double));
        }
    }
    if (theta > best || !isfinite(theta)) best = theta;
    free(mem);
    return best;
}

/* ---- the spectral norm of the sa forms: inertia bisection on A^T A ----------------------------
 */

/* The scaled operator (struct lin) is a diagonal plus a rank of at most 4:
 *     A = diag(d) - X Y^T,   X = [rho, e_top, bm, bM], Y = [s, rt, e_m, e_M]   [n, k]
 * (d_i = a_i + rho_i, d_top = a_top + dt; bm, bM only for an active min / max). So
 *     B = A^T A = D^2 + U C U^T,   U = [Y, D X]   [n, 2k],   C = [[X^T X, -I], [-I, 0]],
 * and, for lambda not a d_i^2, Haynsworth's inertia additivity on [[D^2 - lambda, U], [U^T,
 * -C^-1]] (-C^-1 = [[0, I], [I, X^T X]] has k positive eigenvalues) counts the eigenvalues of B
 * above lambda in O(n k^2):
 *     #{eig B > lambda} = #{d_i^2 > lambda} + #pos(H(lambda)) - k,
 *     H(lambda) = [[0, I], [I, X^T X]] - U^T (D^2 - lambda)^-1 U   [2k, 2k].
 * sigma_max(A)^2 is the largest lambda where the count is >= 1: bisection between
 * trace(B) / (4n) and trace(B) (sigma_max^2 <= trace <= rank sigma_max^2), geometric while the
 * bracket spans more than a factor 2, to a relative width of 4 eps: about 60 counts, so the
 * whole norm is O(n) (the Lanczos it replaces grew as n^2.6: 29 s at n = 128k). */
#define SA_MAXK 4

extern void dsyev_(const char *jobz, const char *uplo, const int *n, double *a, const int *lda,
                   double *w, double *work, const int *lwork, int *info, size_t, size_t);

typedef struct sa_ops {
    int k;                       /* rank of X Y^T: 2 (sa-softmax) to 4 */
    int64_t t, m, M;             /* the top, the active min and max (-1: none) */
    double G[SA_MAXK * SA_MAXK]; /* X^T X */
} sa_ops;

static double sa_d(const lin *L, int64_t i) {
    return i == L->top ? L->a[i] + L->dt : L->a[i] + L->rho[i];
}

/* X_i [k] and Y_i [k]: row i of X and Y. */
static void sa_rows(const lin *L, const sa_ops *o, int64_t i, double *x, double *y) {
    x[0] = L->rho[i]; /* rho[top] = 0 */
    y[0] = L->p[i];
    x[1] = i == o->t;
    y[1] = L->rt[i]; /* rt[top] = 0 */
    int c = 2;
    double au = L->a[i], w = L->g[i];
    if (o->m >= 0) x[c] = au * (1 - w), y[c] = i == o->m, c++;
    if (o->M >= 0) x[c] = au * w, y[c] = i == o->M, c++;
}

static void sa_ops_build(const lin *L, sa_ops *o) {
    o->t = L->top;
    o->m = L->inf.mact ? L->inf.imin : -1;
    o->M = L->inf.Mact ? L->inf.imax : -1;
    o->k = 2 + (o->m >= 0) + (o->M >= 0);
    memset(o->G, 0, sizeof o->G);
    double x[SA_MAXK], y[SA_MAXK];
    for (int64_t i = 0; i < L->n; i++) {
        sa_rows(L, o, i, x, y);
        for (int a = 0; a < o->k; a++)
            for (int b = 0; b < o->k; b++) o->G[a * SA_MAXK + b] += x[a] * x[b];
    }
}

/* trace(B) = sum_j |A e_j|^2, |A e_j|^2 = d_j^2 - 2 d_j (X_j . Y_j) + Y_j G Y_j^T. */
static double sa_trace(const lin *L, const sa_ops *o) {
    double tr = 0, x[SA_MAXK], y[SA_MAXK];
    for (int64_t j = 0; j < L->n; j++) {
        sa_rows(L, o, j, x, y);
        double d = sa_d(L, j), xy = 0, yGy = 0;
        for (int a = 0; a < o->k; a++) {
            xy += x[a] * y[a];
            for (int b = 0; b < o->k; b++) yGy += y[a] * o->G[a * SA_MAXK + b] * y[b];
        }
        double c = d * d - 2 * d * xy + yGy;
        tr += c > 0 ? c : 0;
    }
    return tr;
}

/* #{eig B > lam} (lam > 0 and no d_i^2 equal to it: the caller nudges it); -1 if LAPACK fails. */
static int64_t sa_count_above(const lin *L, const sa_ops *o, double lam) {
    const int k = o->k, K = 2 * k;
    double H[4 * SA_MAXK * SA_MAXK] = {0}, u[2 * SA_MAXK], x[SA_MAXK], y[SA_MAXK];
    int64_t above = 0;
    for (int64_t i = 0; i < L->n; i++) {
        double d = sa_d(L, i), e = d * d - lam;
        above += e > 0;
        sa_rows(L, o, i, x, y);
        double inv = 1.0 / e;
        for (int a = 0; a < k; a++) u[a] = y[a], u[k + a] = d * x[a];
        for (int a = 0; a < K; a++) {
            double ua = u[a] * inv;
            if (ua == 0) continue;
            for (int b = a; b < K; b++) H[a * K + b] -= ua * u[b];
        }
    }
    for (int a = 0; a < k; a++) {
        H[a * K + k + a] += 1;
        for (int b = a; b < k; b++) H[(k + a) * K + k + b] += o->G[a * SA_MAXK + b];
    }
    for (int a = 0; a < K; a++) /* column-major for LAPACK: fill the lower part too */
        for (int b = 0; b < a; b++) H[a * K + b] = H[b * K + a];
    double ev[2 * SA_MAXK], work[64];
    int n2 = K, lw = 64, info = 0;
    dsyev_("N", "U", &n2, H, &n2, ev, work, &lw, &info, 1, 1);
    if (info != 0) return -1;
    for (int a = 0; a < K; a++) above += ev[a] > 0;
    return above - k;
}

/* Is lam a d_i^2? Then the count's pivot would divide by 0. */
static int sa_is_pole(const lin *L, double lam) {
    for (int64_t i = 0; i < L->n; i++) {
        double d = sa_d(L, i);
        if (d * d == lam) return 1;
    }
    return 0;
}

static int sa_spectral(const lin *L, double *out, al_error *err) {
    int64_t n = L->n;
    if (L->scale == 0) { /* J = 0 */
        *out = 0;
        return 0;
    }
    if (n == 1) {
        double J;
        lin_dense(L, &J);
        *out = fabs(J);
        return 0;
    }
    sa_ops o;
    sa_ops_build(L, &o);
    double hi = sa_trace(L, &o) * (1 + 1e-12), lo = hi / (4.0 * (double)n);
    if (!isfinite(hi))
        return al__err(err, AL_E_RANGE, "%s: the spectral norm failed (non-finite trace)",
                       kind_names[L->kind]);
    if (!(hi > 0)) { /* B = 0 up to rounding */
        *out = 0;
        return 0;
    }
    /* A short Lanczos (bounded work) usually lands on sigma^2 to a few ulps; its Ritz value is
     * a lower bound, and one count proves it within 1e-10 (none above theta (1 + 1e-10)). Else
     * that point is a valid lower end of the bisection. */
    al_error le = {0};
    double theta = sa_lanczos(L, &le), top = theta * (1 + 1e-10);
    if (isfinite(theta) && theta > lo && top < hi) {
        while (sa_is_pole(L, top)) top = nextafter(top, hi);
        int64_t c = sa_count_above(L, &o, top);
        if (c == 0) {
            *out = L->scale * sqrt(theta);
            return isfinite(*out)
                       ? 0
                       : al__err(err, AL_E_RANGE, "%s: the spectral norm exceeds the double range",
                                 kind_names[L->kind]);
        }
        if (c > 0) lo = top;
    }
    for (int it = 0; it < 400 && hi - lo > 4 * DBL_EPSILON * hi; it++) {
        double mid = hi > 2 * lo ? sqrt(lo) * sqrt(hi) : lo + 0.5 * (hi - lo);
        while (sa_is_pole(L, mid) && mid < hi) mid = nextafter(mid, hi);
        if (!(mid > lo && mid < hi)) break;
        int64_t c = sa_count_above(L, &o, mid);
        if (c < 0)
            return al__err(err, AL_E_RANGE, "%s: the spectral norm failed (LAPACK dsyev)",
                           kind_names[L->kind]);
        if (c >= 1)
            lo = mid;
        else
            hi = mid;
    }
    double r = L->scale * sqrt(lo + 0.5 * (hi - lo));
    if (!isfinite(r))
        return al__err(err, AL_E_RANGE, "%s: the spectral norm exceeds the double range",
                       kind_names[L->kind]);
    *out = r;
    return 0;
}

/* ---- public Jacobian functions ------------------------------------------------------------- */

/* Builds the linearisation with scratch from the stack or heap: a macro-free pair. */
#define LIN_STACK 4096 /* doubles (32 KB): softmax rows up to 4096, sparsemax up to 1024 */

typedef struct lin_mem {
    double stack[LIN_STACK];
    double *heap;
} lin_mem;

/* Builds the linearisation with scratch on the stack when it fits, else on the heap. */
static int lin_open(const al_norm *nm, const double *z, int64_t n, lin_mem *m, lin *L,
                    double *p_out, al_error *err) {
    m->heap = NULL;
    double zmax;
    int rc = check_input(nm, z, n, &zmax, err);
    if (rc) return rc;
    double *buf = scratch(m->stack, LIN_STACK, n, lin_blocks(nm->kind), &m->heap, err);
    if (!buf) return AL_E_NOMEM;
    return lin_build(nm, z, n, zmax, buf, L, p_out, err);
}

/* NaN/Inf in a product's vector v [n] is an error naming the position. */
static int check_vector(const al_norm *nm, const char *what, const double *v, int64_t n,
                        al_error *err) {
    double bad = 0;
#pragma omp simd reduction(+ : bad)
    for (int64_t i = 0; i < n; i++) bad += v[i] * 0.0;
    if (bad == 0) return 0;
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(v[i]))
            return al__err(err, AL_E_RANGE, "%s: %s element %lld (0-based) is %s",
                           kind_names[nm->kind], what, (long long)i,
                           isnan(v[i]) ? "NaN" : (v[i] > 0 ? "+Inf" : "-Inf"));
    return 0;
}

/* out = J v or J^T v: the sa forms' A v times the scale; a result beyond the double range is an
 * error naming the position. */
static int lin_product(const al_norm *nm, const lin *L, const double *v, double *out, int transpose,
                       al_error *err) {
    int64_t n = L->n;
    lin_apply(L, v, out, transpose);
    double bad = 0;
    if (!is_rank1(L->kind))
        for (int64_t i = 0; i < n; i++) out[i] *= L->scale;
#pragma omp simd reduction(+ : bad)
    for (int64_t i = 0; i < n; i++) bad += out[i] * 0.0;
    if (bad != 0 || isnan(bad))
        for (int64_t i = 0; i < n; i++)
            if (!isfinite(out[i]))
                return al__err(err, AL_E_RANGE, "%s: %s element %lld exceeds the double range",
                               kind_names[nm->kind], transpose ? "J^T u" : "J v", (long long)i);
    return 0;
}

int AL_MV(al_norm_jvp)(const al_norm *nm, const double *z, int64_t n, const double *v, double *out,
                       al_error *err) {
    lin_mem m;
    lin L;
    int rc = lin_open(nm, z, n, &m, &L, NULL, err);
    if (rc == 0 && (!v || !out)) rc = al__err(err, AL_E_INVALID, "jvp: NULL vector");
    if (rc == 0) rc = check_vector(nm, "jvp: v", v, n, err);
    if (rc == 0) rc = lin_product(nm, &L, v, out, 0, err);
    free(m.heap);
    return rc;
}

int AL_MV(al_norm_vjp)(const al_norm *nm, const double *z, int64_t n, const double *u, double *out,
                       al_error *err) {
    lin_mem m;
    lin L;
    int rc = lin_open(nm, z, n, &m, &L, NULL, err);
    if (rc == 0 && (!u || !out)) rc = al__err(err, AL_E_INVALID, "vjp: NULL vector");
    if (rc == 0) rc = check_vector(nm, "vjp: u", u, n, err);
    if (rc == 0) rc = lin_product(nm, &L, u, out, 1, err);
    free(m.heap);
    return rc;
}

int AL_MV(al_norm_jacobian)(const al_norm *nm, const double *z, int64_t n, double *J,
                            al_error *err) {
    lin_mem m;
    lin L;
    int rc = lin_open(nm, z, n, &m, &L, NULL, err);
    if (rc == 0 && !J) rc = al__err(err, AL_E_INVALID, "jacobian: NULL output");
    if (rc == 0) lin_dense(&L, J);
    for (int64_t i = 0; rc == 0 && i < n; i++)
        for (int64_t j = 0; j < n; j++)
            if (!isfinite(J[i * n + j])) {
                rc = al__err(err, AL_E_RANGE,
                             "%s: Jacobian entry (%lld, %lld) exceeds the double range",
                             kind_names[nm->kind], (long long)i, (long long)j);
                break;
            }
    free(m.heap);
    return rc;
}

static int spectral_of(const lin *L, double *out, al_error *err) {
    if (is_rank1(L->kind)) {
        if (L->kind == AL_NORM_SPARSEMAX) /* a projection: 1 on a support of >= 2 */
            *out = L->sigma >= 2 ? L->c : 0;
        else
            *out = L->c * al_norm_rank1_spectral(L->g, L->n);
        return 0;
    }
    return sa_spectral(L, out, err);
}

int AL_MV(al_norm_spectral_norm)(const al_norm *nm, const double *z, int64_t n, double *out,
                                 al_error *err) {
    lin_mem m;
    lin L;
    int rc = lin_open(nm, z, n, &m, &L, NULL, err);
    if (rc == 0 && !out) rc = al__err(err, AL_E_INVALID, "spectral norm: NULL output");
    if (rc == 0) rc = spectral_of(&L, out, err);
    free(m.heap);
    return rc;
}

int AL_MV(al_norm_forward_spectral)(const al_norm *nm, const double *z, int64_t n, double *p,
                                    double *spectral, al_error *err) {
    lin_mem m;
    lin L;
    if (!p || !spectral) return al__err(err, AL_E_INVALID, "forward_spectral: NULL output");
    int rc = lin_open(nm, z, n, &m, &L, p, err);
    if (rc == 0) rc = spectral_of(&L, spectral, err);
    free(m.heap);
    return rc;
}

int AL_MV(al_norm_frobenius_norm)(const al_norm *nm, const double *z, int64_t n, double *out,
                                  al_error *err) {
    lin_mem m;
    lin L;
    int rc = lin_open(nm, z, n, &m, &L, NULL, err);
    if (rc == 0 && !out) rc = al__err(err, AL_E_INVALID, "frobenius norm: NULL output");
    if (rc) {
        free(m.heap);
        return rc;
    }
    double f2 = 0;
    if (is_rank1(L.kind)) {
        /* ||diag(g) - g g^T/s||_F^2 = sum_i (g_i (s - g_i)/s)^2 + sum_{i != j} g_i^2 g_j^2 / s^2,
         * with s - g_top and the off-diagonal sum taken without the top entry (no cancellation
         * when one entry dominates). */
        const double *g = L.g;
        double s = L.sigma;
        int64_t top = 0;
        for (int64_t i = 1; i < n; i++)
            if (g[i] > g[top]) top = i;
        double rest = 0, s2r = 0, s4r = 0;
        for (int64_t i = 0; i < n; i++)
            if (i != top) {
                rest += g[i];
                s2r += g[i] * g[i];
                s4r += g[i] * g[i] * g[i] * g[i];
            }
        if (s > 0) {
            double diag = 0;
            for (int64_t i = 0; i < n; i++) {
                double oth = i == top ? rest : s - g[i];
                double d = g[i] * oth / s;
                diag += d * d;
            }
            double gt2 = g[top] * g[top];
            double off = 2 * gt2 * s2r + (s2r * s2r - s4r);
            f2 = diag + off / (s * s);
        }
        *out = L.c * sqrt(f2);
    } else {
        double *row = al__malloc((size_t)n * sizeof(double), "Jacobian row", err);
        double *e = al__calloc((size_t)n, sizeof(double), "unit vector", err);
        if (!row || !e) {
            free(row);
            free(e);
            free(m.heap);
            return AL_E_NOMEM;
        }
        for (int64_t j = 0; j < n; j++) { /* column j = A e_j (entries <= 2: no overflow) */
            e[j] = 1;
            lin_apply(&L, e, row, 0);
            e[j] = 0;
            f2 += dot(row, row, n);
        }
        free(row);
        free(e);
        double r = L.scale * sqrt(f2);
        if (!isfinite(r)) {
            free(m.heap);
            return al__err(err, AL_E_RANGE, "%s: the Frobenius norm exceeds the double range",
                           kind_names[nm->kind]);
        }
        *out = r;
    }
    free(m.heap);
    return 0;
}

/* ---- one copy of this file per instruction set (mv.h) ---- */

#ifdef AL_MV_DISPATCH
void al_norm_bounds(const al_norm *nm, int64_t n, double *bound_sup, double *bound_paper) {
    AL_MV_PICK(al_norm_bounds)(nm, n, bound_sup, bound_paper);
}

int al_norm_check(const al_norm *nm, al_error *err) {
    return AL_MV_PICK(al_norm_check)(nm, err);
}

al_norm al_norm_default(al_norm_kind kind) {
    return AL_MV_PICK(al_norm_default)(kind);
}

int al_norm_forward(const al_norm *nm, const double *z, int64_t n, double *p, al_error *err) {
    return AL_MV_PICK(al_norm_forward)(nm, z, n, p, err);
}

int al_norm_forward_spectral(const al_norm *nm, const double *z, int64_t n, double *p,
                             double *spectral, al_error *err) {
    return AL_MV_PICK(al_norm_forward_spectral)(nm, z, n, p, spectral, err);
}

int al_norm_frobenius_norm(const al_norm *nm, const double *z, int64_t n, double *out,
                           al_error *err) {
    return AL_MV_PICK(al_norm_frobenius_norm)(nm, z, n, out, err);
}

int al_norm_jacobian(const al_norm *nm, const double *z, int64_t n, double *J, al_error *err) {
    return AL_MV_PICK(al_norm_jacobian)(nm, z, n, J, err);
}

int al_norm_jvp(const al_norm *nm, const double *z, int64_t n, const double *v, double *out,
                al_error *err) {
    return AL_MV_PICK(al_norm_jvp)(nm, z, n, v, out, err);
}

const char *al_norm_name(al_norm_kind kind) {
    return AL_MV_PICK(al_norm_name)(kind);
}

int al_norm_parse(const char *name, al_norm *out, al_error *err) {
    return AL_MV_PICK(al_norm_parse)(name, out, err);
}

double al_norm_rank1_spectral(const double *g, int64_t n) {
    return AL_MV_PICK(al_norm_rank1_spectral)(g, n);
}

int al_norm_spectral_norm(const al_norm *nm, const double *z, int64_t n, double *out,
                          al_error *err) {
    return AL_MV_PICK(al_norm_spectral_norm)(nm, z, n, out, err);
}

int al_norm_sums_to_one(const al_norm *nm) {
    return AL_MV_PICK(al_norm_sums_to_one)(nm);
}

int al_norm_vjp(const al_norm *nm, const double *z, int64_t n, const double *u, double *out,
                al_error *err) {
    return AL_MV_PICK(al_norm_vjp)(nm, z, n, u, out, err);
}
#endif
