/* stats.c: the statistics of METHOD section 4: the two-sample Kolmogorov-Smirnov test
 * (statistic and p-value as scipy.stats.ks_2samp, scipy 1.10, method='auto'), the
 * critical-N search of Algorithm 3, least squares through the origin and five-number
 * summaries (quartiles as numpy.percentile's default linear method).
 *
 * KS p-value, the rules scipy follows (and so do we):
 *  - statistic D = max over the pooled values of |F1 - F2| (right-continuous ECDFs, ties
 *    pooled), the larger of the two one-sided maxima;
 *  - max(n1, n2) <= 10000: exact. D is rounded to h / lcm(n1, n2) (h integer, and the
 *    returned statistic is that rounded value); h == 0 gives p = 1; equal sizes use the
 *    alternating series of binomial ratios (Pr(D_{n,n} >= h/n)); unequal sizes count the
 *    lattice paths that leave the band |x/m - y/n| < h/lcm with the scaled recursion that
 *    computes 1 - p directly (Hodges 1958; Viehmann 2021). A result outside [0, 1] (equal
 *    sizes, p = 1 + 2e-16 for D of a few steps: scipy warns) falls back to the asymptotic one,
 *    with the rounded D.
 *  - otherwise: asymptotic, kstwo.sf(D, round(n1 n2 / (n1 + n2))) (numpy's round, half to
 *    even): the distribution of the one-sample two-sided statistic for that many values,
 *    evaluated as scipy does (kstwo_sf below: Simard and L'Ecuyer 2011's choice of Durbin's
 *    matrix, Pomeranz's recursion, the Pelz-Good series, Smirnov's exact one-sided sum and
 *    the Ruben-Gambino ends), to 1e-10 of scipy's value and in under a millisecond.
 */
#include "stats.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- helpers -------------------------------------------------------------------------- */

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int check_finite(const double *x, size_t n, const char *what, al_error *err) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i]))
            return al__err(err, AL_E_RANGE, "%s: non-finite value %g at position %zu", what, x[i],
                           i);
    return 0;
}

static double *sorted_copy(const double *x, size_t n, const char *what, al_error *err) {
    size_t bytes;
    if (!al__mul_ok(n, sizeof(double), &bytes)) {
        al__err(err, AL_E_NOMEM, "%s: %zu values overflow", what, n);
        return NULL;
    }
    double *s = al__malloc(bytes ? bytes : 1, what, err); /* [n] */
    if (!s) return NULL;
    memcpy(s, x, bytes);
    qsort(s, n, sizeof(double), cmp_double);
    return s;
}

static uint64_t gcd_u64(uint64_t a, uint64_t b) {
    while (b) {
        uint64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

/* ---- KS: exact probabilities ---------------------------------------------------------- */

/* Pr(D_{n,n} >= h/n) for 0 < h <= n: 2 (A0 (1 - A1 (1 - A2 (...)))) with the A_k ratios of
 * binomial coefficients binom(2n, n - k h) / binom(2n, n - (k-1) h), evaluated innermost
 * first (Horner-like) to avoid cancellation. */
static double prob_outside_square(int64_t n, int64_t h) {
    double P = 0.0;
    for (int64_t k = n / h; k >= 0; k--) {
        double p1 = 1.0;
        for (int64_t j = 0; j < h; j++)
            p1 = (double)(n - k * h - j) * p1 / (double)(n + k * h + j + 1);
        P = p1 * (1.0 - P);
    }
    return 2.0 * P;
}

/* The proportion of monotone lattice paths from (0,0) to (m,n) that leave the band
 * |n x / g - m y / g| < h (unequal sizes, two-sided). One sliding column of the path-count
 * table is kept, scaled so that it holds 1 - (paths inside) / binom directly: each entry is
 * (A_left * i + A_below * j) / (i + j), with 1 for cells outside the band. */
static double prob_outside_band(int64_t m, int64_t n, int64_t g, int64_t h, al_error *err,
                                int *ok) {
    if (m < n) {
        int64_t t = m;
        m = n;
        n = t;
    }
    int64_t mg = m / g, ng = n / g;
    int64_t minj = 0;
    int64_t maxj = (int64_t)ceil((double)h / (double)mg);
    if (maxj > n + 1) maxj = n + 1;
    int64_t curlen = maxj - minj;
    int64_t lenA = 2 * maxj + 2;
    if (lenA > n + 1) lenA = n + 1;
    double *A = al__malloc((size_t)lenA * sizeof(double), "KS path column", err); /* [lenA] */
    if (!A) {
        *ok = 0;
        return NAN;
    }
    for (int64_t j = 0; j < lenA; j++) A[j] = 1.0;
    for (int64_t j = minj; j < maxj; j++) A[j] = 0.0;
    for (int64_t i = 1; i <= m; i++) {
        int64_t lastminj = minj, lastlen = curlen;
        minj = (int64_t)floor((double)(ng * i - h) / (double)mg) + 1;
        if (minj < 0) minj = 0;
        if (minj > n) minj = n;
        maxj = (int64_t)ceil((double)(ng * i + h) / (double)mg);
        if (maxj > n + 1) maxj = n + 1;
        if (maxj <= minj) {
            free(A);
            return 1.0;
        }
        double val = minj == 0 ? 0.0 : 1.0;
        for (int64_t jj = 0; jj < maxj - minj; jj++) {
            int64_t j = jj + minj;
            val = (A[jj + minj - lastminj] * (double)i + val * (double)j) / (double)(i + j);
            A[jj] = val;
        }
        curlen = maxj - minj;
        if (lastlen > curlen)
            for (int64_t q = maxj - minj; q < maxj - minj + (lastlen - curlen); q++) A[q] = 1.0;
    }
    double p = A[maxj - minj - 1];
    free(A);
    return p;
}

/* ---- KS: the one-sample two-sided distribution (scipy.stats.kstwo) -------------------- */

/* Simard & L'Ecuyer (2011) pick, by (n, x), the method that is exact (or accurate) and fast;
 * scipy 1.10's kstwo.sf follows their rules with its own thresholds, and so do we (the
 * choice is made in kstwo_sf below). D_n = sup |F_n - F| of n uniform values. */

#define KS_LN_SQRT_2PI 0.91893853320467274178032973640562
#define KS_SQRT_2PI    2.50662827463100050241576528481105

/* log(k!) - log(sqrt(2 pi k) (k / e)^k) for integer k >= 1 (the error of Stirling's formula):
 * its asymptotic series beyond 15 (the next term, 691 / (360360 k^11), is below 1e-16
 * there), long double lgamma below. */
static double stirling_err(double k) {
    if (k > 15) {
        double r = 1.0 / k, r2 = r * r;
        return r *
               (1.0 / 12 - r2 * (1.0 / 360 - r2 * (1.0 / 1260 - r2 * (1.0 / 1680 - r2 / 1188))));
    }
    long double kl = k;
    return (double)(lgammal(kl + 1) - (kl + 0.5L) * logl(kl) + kl -
                    0.91893853320467274178032973640562L);
}

/* a log(a / M) + M - a (a > 0, M > 0) without cancellation: when a and M are close, the
 * series in v = (a - M) / (a + M) (log(a / M) = 2 atanh v) (Loader 2000). */
static double dev_term(double a, double M) {
    double d = a - M, s = a + M;
    if (fabs(d) < 0.1 * s) {
        double v = d / s, v2 = v * v, pw = 2.0 * a * v, sum = d * v;
        for (int k = 1; k < 100; k++) {
            pw *= v2;
            double next = sum + pw / (double)(2 * k + 1);
            if (next == sum) break;
            sum = next;
        }
        return sum;
    }
    return a * log(a / M) + M - a;
}

/* log of n! / n^n = -n + log sqrt(2 pi n) + stirling_err(n), returned as -n and the rest. */
static double log_fact_over_pow_rest(double n) {
    return 0.5 * log(n) + KS_LN_SQRT_2PI + stirling_err(n);
}

/* v exp(r - n) 2^e for a large integer n, without rounding n into the exponent: n = q ln 2 -
 * rem with q integer and rem small, the product q ln 2 in two parts (Cody and Waite); exact
 * for n below 1.4e6 (used up to 1e5; beyond 1500 or so the Ruben-Gambino value is 0). */
static double scaled_exp_minus(double v, double r, double n, long e) {
    static const double ln2_hi = 6.93147180369123816490e-01; /* q ln2_hi exact for q < 2^21 */
    static const double ln2_lo = 1.90821492927058770002e-10;
    double q = nearbyint(n / M_LN2);
    double rem = (q * ln2_hi - n) + q * ln2_lo; /* = q ln 2 - n, |rem| <= 0.35 */
    long p2 = e - (long)q;
    if (p2 < -2000) return 0.0;
    if (p2 > 2000) return INFINITY;
    return ldexp(v * exp(r + rem), (int)p2);
}

/* The j-th term of the one-sided sum: x / p * binom(n, j) p^j (1 - p)^(n - j) with
 * p = x + j / n, binomial in Loader's saddle-point form (exact algebra, no cancellation).
 * nx = n x. */
static double smirnov_term(double n, double x, double nx, double j) {
    if (j == 0) return exp(n * log1p(-x));
    double nq = (n - j) - nx;
    if (!(nq > 0)) return 0.0;
    double np = nx + j;
    double lc = stirling_err(n) - stirling_err(j) - stirling_err(n - j) - dev_term(j, np) -
                dev_term(n - j, nq);
    return nx / np * exp(lc) * sqrt(n / (2.0 * M_PI * j * (n - j)));
}

/* Pr(D_n^+ >= x), Smirnov's exact formula (Birnbaum and Tingey 1951):
 *   x sum_{j=0}^{floor(n (1 - x))} binom(n, j) (x + j/n)^(j-1) (1 - x - j/n)^(n-j).
 * The terms are positive. For n >= 4000 (where 2 n x^2 < 700, so x is small) they vary
 * smoothly over a range of order n (at least n / 500 between e-fold changes where they
 * matter), so every K-th term, times K, gives the same sum (the trapezoid rule on an analytic
 * integrand whose ends are negligible; the error is of order exp(-2 pi^2 (width / K)^2),
 * about e^-300 here): K = n / 2000, checked against stride 2K (whose error is the fourth root
 * of stride K's, so agreement to 1e-9 leaves stride K exact to rounding) and against the end
 * terms, else all terms are summed (so for n x^2 below about 1, where the end terms matter,
 * a large n is slow: kstwo_sf asks only for n x^2 >= 2.2 beyond n = 140). Pr <= exp(-2 n x^2)
 * (Massart 1990, when that is <= 1/2) gives 0 below 1e-300. */
static double smirnov_sf(int64_t n, double x) {
    if (n < 1 || isnan(x)) return NAN;
    if (x <= 0) return 1.0;
    if (x >= 1) return 0.0;
    double nd = (double)n, nx = nd * x;
    if (2.0 * nx * x > 700.0) return 0.0;
    double jmax = floor(nd - nx);
    int64_t J = (int64_t)jmax;
    int64_t K = n / 2000;
    if (K > 1) {
        double s1 = 0, s2 = 0, tmax = 0;
        int64_t i = 0, last = 0;
        for (int64_t j = 0; j <= J; j += K, i++) {
            double t = smirnov_term(nd, x, nx, (double)j);
            s1 += t;
            if (!(i & 1)) s2 += t;
            if (t > tmax) tmax = t;
            last = j;
        }
        double t0 = smirnov_term(nd, x, nx, 0), tl = smirnov_term(nd, x, nx, (double)last);
        s1 *= (double)K;
        s2 *= 2.0 * (double)K;
        if (fabs(s1 - s2) <= 1e-9 * s1 && t0 <= 1e-20 * tmax && tl <= 1e-20 * tmax) return s1;
    }
    double s = 0;
    for (int64_t j = 0; j <= J; j++) s += smirnov_term(nd, x, nx, (double)j);
    return s;
}

/* C = A A for a persymmetric m x m row-major matrix A (A[i][j] = A[m-1-j][m-1-i]; so is C):
 * the entries with i + j <= m - 1 are computed, the others mirrored. */
static void square_persym(const double *restrict A, double *restrict C, int m) {
    size_t M = (size_t)m;
    for (size_t i = 0; i < M; i++) {
        double *c = C + i * M;
        size_t w = M - i; /* columns 0 .. m-1-i */
        const double *a = A + i * M;
        for (size_t j = 0; j < w; j++) c[j] = 0.0;
        size_t k = 0;
        for (; k + 4 <= M; k += 4) { /* four rows of A at a time: c is loaded once per four */
            const double *b0 = A + k * M, *b1 = b0 + M, *b2 = b1 + M, *b3 = b2 + M;
            double a0 = a[k], a1 = a[k + 1], a2 = a[k + 2], a3 = a[k + 3];
            if (a0 == 0.0 && a1 == 0.0 && a2 == 0.0 && a3 == 0.0) continue;
            for (size_t j = 0; j < w; j++)
                c[j] += a0 * b0[j] + a1 * b1[j] + a2 * b2[j] + a3 * b3[j];
        }
        for (; k < M; k++) {
            const double *b = A + k * M;
            for (size_t j = 0; j < w; j++) c[j] += a[k] * b[j];
        }
    }
    for (size_t i = 0; i < M; i++)
        for (size_t j = M - i; j < M; j++) C[i * M + j] = C[(M - 1 - j) * M + (M - 1 - i)];
}

/* Scales v[len] (non-negative) by a power of two so that its largest entry is in [0.5, 1);
 * returns that power's exponent (v_true = v * 2^returned). */
static long rescale(double *v, size_t len) {
    double mx = 0;
    for (size_t i = 0; i < len; i++)
        if (v[i] > mx) mx = v[i];
    if (!(mx > 0)) return 0;
    int e;
    frexp(mx, &e);
    if (e == 0) return 0;
    double s = ldexp(1.0, -e); /* exact unless an entry falls below 2^-1022 (then negligible) */
    for (size_t i = 0; i < len; i++) v[i] *= s;
    return e;
}

/* Pr(D_n < d) by Durbin's matrix formula as Marsaglia, Tsang and Wang (2003) evaluate it:
 * with n d = k - h (k integer, 0 <= h < 1) and m = 2k - 1, the m x m matrix H with
 * H[i][j] = 1/(i-j+1)! (0 when i-j+1 < 0), its first column and last row reduced by
 * h^(i+1)/(i+1)! and h^(m-j)/(m-j)! and its corner raised by (2h-1)^m/m! when 2h > 1;
 * Pr = n!/n^n (H^n)[k-1][k-1]. Only row k-1 of H^n is formed (a vector times the squares
 * H^(2^i)); powers of two are tracked apart. NaN when out of memory. */
static double kolm_cdf_durbin(int64_t n, double d) {
    double nd = (double)n * d;
    if (d >= 1) return 1.0;
    if (nd <= 0.5) return 0.0;
    int k = (int)ceil(nd);
    double h = (double)k - nd;
    int m = 2 * k - 1;
    size_t mm = (size_t)m * (size_t)m;
    /* H [m*m], T [m*m] (squares), r and r2 [m] (row k-1 of the power), 1/i! [m + 1] */
    double *H = malloc(sizeof(double) * (2 * mm + 3 * (size_t)m + 1));
    if (!H) return NAN;
    double *T = H + mm, *r = T + mm, *r2 = r + m, *fact_inv = r2 + m;
    fact_inv[0] = 1.0;
    for (int i = 1; i <= m; i++) fact_inv[i] = fact_inv[i - 1] / (double)i;
    for (int i = 0; i < m; i++)
        for (int j = 0; j < m; j++) {
            int o = i - j + 1;
            H[(size_t)i * (size_t)m + (size_t)j] = o >= 0 ? fact_inv[o] : 0.0;
        }
    for (int i = 0; i < m; i++) {
        H[(size_t)i * (size_t)m] -= pow(h, i + 1) * fact_inv[i + 1];
        H[(size_t)(m - 1) * (size_t)m + (size_t)i] -= pow(h, m - i) * fact_inv[m - i];
    }
    if (2 * h - 1 > 0) H[(size_t)(m - 1) * (size_t)m] += pow(2 * h - 1, m) * fact_inv[m];
    for (int j = 0; j < m; j++) r[j] = j == k - 1 ? 1.0 : 0.0;
    long rexp = 0, hexp = 0;
    for (int64_t e = n;;) {
        if (e & 1) { /* r = r H */
            for (int j = 0; j < m; j++) r2[j] = 0.0;
            for (int i = 0; i < m; i++) {
                double a = r[i];
                if (a == 0.0) continue;
                const double *row = H + (size_t)i * (size_t)m;
                for (int j = 0; j < m; j++) r2[j] += a * row[j];
            }
            memcpy(r, r2, sizeof(double) * (size_t)m);
            rexp += hexp + rescale(r, (size_t)m);
        }
        e >>= 1;
        if (!e) break;
        square_persym(H, T, m);
        memcpy(H, T, sizeof(double) * mm);
        hexp = 2 * hexp + rescale(H, mm);
    }
    double v = r[k - 1];
    free(H);
    if (!(v > 0)) return 0.0;
    return scaled_exp_minus(v, log_fact_over_pow_rest((double)n), (double)n, rexp); /* n!/n^n */
}

/* Pr(D_n <= d) by Pomeranz's recursion (1974), for small n: with s = n t, the sample's count
 * N(s) of values <= s/n must stay in [s - n d, s + n d]. The integer bounds change only at
 * s = i +- n d; writing n d = l + f (l integer), the breakpoints lie at integers +- f, so
 * [0, n] splits into 2n + 1 intervals of three lengths (g, 1 - 2g, 2g with g = min(f, 1-f))
 * on each of which N's bounds are fixed: N at an interval's left end >= its lower bound
 * (L), at its right end <= its upper bound (U). The counts falling in an interval of length
 * len are Poisson-like, weight (len/n)^c / c!, so the weights W[c] of N = c evolve by a
 * convolution per interval; Pr = n! W[n] at s = n. */
static double kolm_cdf_pomeranz(int64_t n64, double d) {
    enum { NMAX = 140 };
    if (n64 < 1 || n64 > NMAX) return NAN;
    int n = (int)n64;
    double a = (double)n * d;
    if (d >= 1) return 1.0;
    if (a <= 0.5) return 0.0;
    double lf = floor(a), f = a - lf;
    int l = (int)lf, high = f > 0.5;
    double g = high ? 1.0 - f : f;
    double ker[3][NMAX + 1]; /* (len/n)^c / c! for len = g, 1 - 2g, 2g */
    double lens[3] = {g, 1.0 - 2.0 * g, 2.0 * g};
    for (int t = 0; t < 3; t++) {
        ker[t][0] = 1.0;
        for (int c = 1; c <= n; c++) ker[t][c] = ker[t][c - 1] * (lens[t] / (double)n) / (double)c;
    }
    double W[NMAX + 1], X[NMAX + 1];
    int lo = 0, hi = 0;
    W[0] = 1.0;
    long expo = 0;
    /* the intervals in order: [0, g]; for k = 0..n-1 the one of length 1 - 2g centred on
     * k + 1/2, each but the last followed by the one of length 2g centred on k + 1; [n-g, n].
     * The bounds (from the centres: floor(s + n d), ceil(s - n d)) are below. */
    int nint = 2 * n + 1;
    for (int r = 0; r < nint; r++) {
        int kind, L, U;
        if (r == 0) {
            kind = 0, L = 0, U = l;
        } else if (r == nint - 1) {
            kind = 0, L = n - l, U = n;
        } else if (r % 2 == 1) { /* around k + 1/2 */
            int k = (r - 1) / 2;
            kind = 1;
            L = high ? k - l : k - l + 1;
            U = high ? k + l + 1 : k + l;
        } else { /* around k + 1 */
            int k = (r - 2) / 2;
            kind = 2, L = k + 1 - l, U = k + 1 + l;
        }
        if (L < 0) L = 0;
        if (U > n) U = n;
        int nlo = lo > L ? lo : L;
        if (nlo > hi || nlo > U) return 0.0;
        const double *kr = ker[kind];
        for (int j = nlo; j <= U; j++) {
            double s = 0;
            int cmax = j < hi ? j : hi;
            for (int c = nlo; c <= cmax; c++) s += W[c] * kr[j - c];
            X[j] = s;
        }
        lo = nlo, hi = U;
        for (int j = lo; j <= hi; j++) W[j] = X[j];
        expo += rescale(W + lo, (size_t)(hi - lo + 1));
    }
    if (hi != n) return 0.0;
    long double fct = 1;
    for (int i = 2; i <= n; i++) fct *= i;
    return (double)ldexpl((long double)W[n] * fct, (int)expo);
}

/* Pr(D_n <= x) ~ K0 + K1/sqrt(n) + K2/n + K3/n^1.5 (z = x sqrt(n)): Li-Chien's and
 * Korolyuk's expansion, its terms turned by Pelz and Good (1976) into rapidly converging
 * theta-type series for small z:
 *   S_p = sum_{m odd} m^(2p) exp(-pi^2 m^2 / (8 z^2)),
 *   R_p = sum_{k>=1} k^(2p) exp(-pi^2 k^2 / (2 z^2)),
 *   K0 = sqrt(2 pi) / z S_0,
 *   K1 = sqrt(2 pi) / (6 z^4) (pi^2/4 S_1 - z^2 S_0),
 *   K2 = sqrt(2 pi) / (72 z^7) ((6 z^6 + 2 z^4) S_0 + pi^2 (2 z^4 - 5 z^2)/4 S_1
 *        + pi^4 (1 - 2 z^2)/16 S_2) - pi^2 sqrt(2 pi) / (36 z^3) R_1,
 *   K3 = sqrt(2 pi) / (6480 z^10) (-(30 z^6 + 90 z^8) S_0 + pi^2 (135 z^4 - 96 z^6)/4 S_1
 *        + pi^4 (212 z^4 - 60 z^2)/16 S_2 + pi^6 (5 - 30 z^2)/64 S_3)
 *        + pi^2 sqrt(2 pi) / (216 z^6) (3 z^2 R_1 - pi^2 R_2)
 * (an approximation: scipy uses it where it is accurate enough, and so do we). */
static double kolm_cdf_pelz_good(int64_t n, double x) {
    if (x <= 0) return 0.0;
    if (x >= 1) return 1.0;
    double z = sqrt((double)n) * x, z2 = z * z, z4 = z2 * z2, z6 = z4 * z2, z8 = z4 * z4;
    double a = M_PI * M_PI / (8.0 * z2);
    if (a > 708.0) return 0.0; /* exp(-a) below 1e-307 (scipy: 0 there too) */
    double S[4] = {0, 0, 0, 0}, R[3] = {0, 0, 0};
    for (int m = 1; m < 10000; m += 2) {
        double md = m, e = exp(-a * md * md), m2 = md * md;
        double t0 = e, t1 = e * m2, t2 = t1 * m2, t3 = t2 * m2;
        S[0] += t0, S[1] += t1, S[2] += t2, S[3] += t3;
        if (t3 <= 1e-20 * S[3] && t0 <= 1e-20 * S[0]) break;
    }
    for (int k = 1; k < 10000; k++) {
        double kd = k, e = exp(-4.0 * a * kd * kd), k2 = kd * kd;
        double t1 = e * k2, t2 = t1 * k2;
        R[1] += t1, R[2] += t2;
        if (t2 <= 1e-20 * R[2] || !(R[2] > 0)) break;
    }
    double pi2 = M_PI * M_PI, pi4 = pi2 * pi2, pi6 = pi4 * pi2;
    double K0 = KS_SQRT_2PI / z * S[0];
    double K1 = KS_SQRT_2PI / (6.0 * z4) * (pi2 / 4.0 * S[1] - z2 * S[0]);
    double K2 = KS_SQRT_2PI / (72.0 * z6 * z) *
                    ((6.0 * z6 + 2.0 * z4) * S[0] + pi2 * (2.0 * z4 - 5.0 * z2) / 4.0 * S[1] +
                     pi4 * (1.0 - 2.0 * z2) / 16.0 * S[2]) -
                pi2 * KS_SQRT_2PI / (36.0 * z2 * z) * R[1];
    double K3 =
        KS_SQRT_2PI / (6480.0 * z8 * z2) *
            (-(30.0 * z6 + 90.0 * z8) * S[0] + pi2 * (135.0 * z4 - 96.0 * z6) / 4.0 * S[1] +
             pi4 * (212.0 * z4 - 60.0 * z2) / 16.0 * S[2] + pi6 * (5.0 - 30.0 * z2) / 64.0 * S[3]) +
        pi2 * KS_SQRT_2PI / (216.0 * z6) * (3.0 * z2 * R[1] - pi2 * R[2]);
    double rn = sqrt((double)n);
    return K0 + K1 / rn + K2 / (double)n + K3 / ((double)n * rn);
}

static double clip01(double p) {
    return p < 0 ? 0.0 : (p > 1 ? 1.0 : p);
}

/* Pr(D_n >= x) = scipy.stats.kstwo.sf(x, n) (scipy 1.10), the method chosen as scipy does:
 *  - x <= 1/(2n): 1; x >= 1: 0;
 *  - n x <= 1: 1 - n!/n^n (2 n x - 1)^n; n x >= n - 1: 2 (1 - x)^n (Ruben and Gambino 1982);
 *  - x >= 1/2: 2 Pr(D_n^+ >= x) (exact: the two one-sided events are disjoint);
 *  - n <= 140: 1 - Durbin when n x^2 <= 0.754693, 1 - Pomeranz when <= 4, else
 *    2 Pr(D_n^+ >= x) (Miller's approximation, ignoring the two-sided overlap);
 *  - n > 140: 0 when n x^2 >= 370; 2 Pr(D_n^+ >= x) when >= 2.2; else 1 - Durbin when
 *    n <= 100000 and n x^1.5 <= 1.4, else 1 - Pelz-Good.
 * Where scipy's method is exact ours is too, so the two agree to rounding; where scipy's is an
 * approximation (Pelz-Good, Miller), ours is the same formula. */
static double kstwo_sf(double x, int64_t n) {
    if (n < 1 || isnan(x)) return NAN;
    double nd = (double)n;
    if (x <= 0.5 / nd) return 1.0;
    if (x >= 1.0) return 0.0;
    double t = nd * x;
    if (t <= 1.0) {
        if (t <= 0.5) return 1.0;
        double lp = nd * log(2.0 * t - 1.0);
        double cdf =
            n == 1 ? 2.0 * t - 1.0 : scaled_exp_minus(1.0, log_fact_over_pow_rest(nd) + lp, nd, 0);
        return clip01(1.0 - cdf);
    }
    if (t >= nd - 1.0) return clip01(2.0 * pow(1.0 - x, nd));
    if (x >= 0.5) return clip01(2.0 * smirnov_sf(n, x));
    double nx2 = t * x, cdf;
    if (n <= 140) {
        if (nx2 <= 0.754693)
            cdf = kolm_cdf_durbin(n, x);
        else if (nx2 <= 4.0)
            cdf = kolm_cdf_pomeranz(n, x);
        else
            return clip01(2.0 * smirnov_sf(n, x));
    } else {
        if (nx2 >= 370.0) return 0.0;
        if (nx2 >= 2.2) return clip01(2.0 * smirnov_sf(n, x));
        cdf = kolm_cdf_pelz_good(n, x);
        /* Durbin's matrix is up to 115 wide here and costs m^3 log2(n); where Pelz-Good gives
         * a cdf below 1e-12 the exact one is below 1.2e-12 (checked on a dense grid of this
         * region), so 1 - cdf is the same to 2.5e-13 and the matrix is skipped. */
        if (n <= 100000 && nd * pow(x, 1.5) <= 1.4 && !(cdf < 1e-12)) cdf = kolm_cdf_durbin(n, x);
    }
    if (isnan(cdf)) return NAN;
    return clip01(1.0 - cdf);
}

double al__kstwo_sf(double x, int64_t n) {
    return kstwo_sf(x, n);
}
double al__smirnov_sf(int64_t n, double x) {
    return smirnov_sf(n, x);
}

int al_ks_2samp(const double *a, size_t na, const double *b, size_t nb, double *statistic,
                double *pvalue, al_error *err) {
    if (na == 0 || nb == 0)
        return al__err(err, AL_E_INVALID, "ks_2samp: empty sample (sizes %zu and %zu)", na, nb);
    if (!a || !b || !statistic || !pvalue)
        return al__err(err, AL_E_INVALID, "ks_2samp: NULL argument");
    if (na > ((size_t)1 << 40) || nb > ((size_t)1 << 40))
        return al__err(err, AL_E_INVALID, "ks_2samp: samples too large");
    int rc = check_finite(a, na, "ks_2samp: first sample", err);
    if (rc) return rc;
    rc = check_finite(b, nb, "ks_2samp: second sample", err);
    if (rc) return rc;
    double *sa = sorted_copy(a, na, "ks_2samp: first sample", err);
    if (!sa) return err ? err->code : AL_E_NOMEM;
    double *sb = sorted_copy(b, nb, "ks_2samp: second sample", err);
    if (!sb) {
        free(sa);
        return err ? err->code : AL_E_NOMEM;
    }

    /* Walk the pooled values in order; after all copies of a value are consumed, the
     * right-continuous ECDF difference is i/na - j/nb (as numpy computes it). */
    double maxS = -INFINITY, minS = INFINITY;
    size_t i = 0, j = 0;
    while (i < na || j < nb) {
        double v = (j >= nb || (i < na && sa[i] <= sb[j])) ? sa[i] : sb[j];
        while (i < na && sa[i] <= v) i++;
        while (j < nb && sb[j] <= v) j++;
        double diff = (double)i / (double)na - (double)j / (double)nb;
        if (diff > maxS) maxS = diff;
        if (diff < minS) minS = diff;
    }
    free(sa);
    free(sb);
    double negmin = -minS;
    if (negmin < 0) negmin = 0;
    if (negmin > 1) negmin = 1;
    double d = negmin > maxS ? negmin : maxS;

    int64_t n1 = (int64_t)na, n2 = (int64_t)nb;
    int64_t g = (int64_t)gcd_u64((uint64_t)n1, (uint64_t)n2);
    double prob = NAN;
    int exact = (n1 > n2 ? n1 : n2) <= 10000;
    if (exact) {
        int64_t lcm = (n1 / g) * n2;
        int64_t h = (int64_t)nearbyint(d * (double)lcm);
        d = (double)h / (double)lcm;
        if (h == 0) {
            prob = 1.0;
        } else if (n1 == n2) {
            prob = prob_outside_square(n1, h);
        } else {
            int ok = 1;
            prob = prob_outside_band(n1, n2, g, h, err, &ok);
            if (!ok) return err ? err->code : AL_E_NOMEM;
        }
        if (!(prob >= 0 && prob <= 1)) exact = 0;
    }
    if (!exact) {
        double m = (double)(n1 > n2 ? n1 : n2), n = (double)(n1 > n2 ? n2 : n1);
        double en = nearbyint(m * n / (m + n)); /* numpy's round: half to even */
        prob = kstwo_sf(d, (int64_t)en);
        if (isnan(prob))
            return al__err(err, AL_E_NOMEM,
                           "ks_2samp: out of memory for the p-value (sizes %zu, %zu)", na, nb);
    }
    if (prob < 0) prob = 0;
    if (prob > 1) prob = 1;
    *statistic = d;
    *pvalue = prob;
    return 0;
}

/* ---- Algorithm 3 -------------------------------------------------------------------------- */

int al_critical_n(const int *N, int nN, const double *dtilde, const double *E, int n_heads,
                  double level, double *pvalues, int *crit, al_error *err) {
    if (!N || !dtilde || !E || !pvalues || !crit || nN < 0 || n_heads <= 0)
        return al__err(err, AL_E_INVALID, "critical_n: bad arguments (nN %d, heads %d)", nN,
                       n_heads);
    if (!(level >= 0 && level <= 1))
        return al__err(err, AL_E_INVALID, "critical_n: level %g outside [0, 1]", level);
    for (int i = 1; i < nN; i++)
        if (N[i] <= N[i - 1])
            return al__err(err, AL_E_INVALID, "critical_n: N grid not increasing at %d (%d, %d)", i,
                           N[i - 1], N[i]);
    *crit = -1;
    for (int i = 0; i < nN; i++) {
        const double *a = dtilde + (size_t)i * (size_t)n_heads; /* [n_heads] */
        const double *b = E + (size_t)i * (size_t)n_heads;      /* [n_heads] */
        double stat;
        int rc = al_ks_2samp(a, (size_t)n_heads, b, (size_t)n_heads, &stat, &pvalues[i], err);
        if (rc) return al__err_prefix(err, (al_code)rc, "critical_n: N = %d", N[i]);
        if (*crit < 0 && pvalues[i] >= level) *crit = N[i];
    }
    return 0;
}

/* ---- regression and summaries --------------------------------------------------------- */

double al_slope_origin(const double *x, const double *y, size_t n) {
    double sxy = 0, sxx = 0;
    for (size_t i = 0; i < n; i++) {
        sxy += x[i] * y[i];
        sxx += x[i] * x[i];
    }
    return sxx > 0 ? sxy / sxx : NAN;
}

double al_next_token_nll(const float *logits, const int32_t *tokens, int T, int V) {
    if (T < 2 || !logits || !tokens) return NAN;
    double total = 0.0;
#pragma omp parallel for reduction(+ : total) schedule(static)
    for (int t = 0; t < T - 1; t++) {
        const float *row = logits + (size_t)t * V; /* [V] */
        double mx = -INFINITY, s = 0.0;
        for (int j = 0; j < V; j++) mx = row[j] > mx ? row[j] : mx;
        for (int j = 0; j < V; j++) s += exp((double)row[j] - mx);
        total += mx + log(s) - row[tokens[t + 1]];
    }
    return total / (T - 1);
}

double al_percentile_sorted(const double *sorted, size_t n, double p) {
    if (n == 0 || !sorted || !(p >= 0 && p <= 100)) return NAN; /* NaN p fails the test too */
    double q = p / 100.0;
    double vi = (double)n * q + (1.0 - q) - 1.0; /* numpy's virtual index, alpha = beta = 1 */
    if (vi <= 0) return sorted[0];
    if (vi >= (double)(n - 1)) return sorted[n - 1];
    double lo = floor(vi);
    size_t k = (size_t)lo;
    double t = vi - lo, a = sorted[k], b = sorted[k + 1], diff = b - a;
    return t >= 0.5 ? b - diff * (1.0 - t) : a + diff * t; /* numpy's _lerp */
}

int al_five_number(const double *x, size_t n, al_five *out, al_error *err) {
    if (!x || !out) return al__err(err, AL_E_INVALID, "five_number: NULL argument");
    if (n == 0) return al__err(err, AL_E_INVALID, "five_number: empty input");
    int rc = check_finite(x, n, "five_number", err);
    if (rc) return rc;
    double *s = sorted_copy(x, n, "five_number", err);
    if (!s) return err ? err->code : AL_E_NOMEM;
    double sum = 0;
    for (size_t i = 0; i < n; i++) sum += x[i];
    out->min = s[0];
    out->max = s[n - 1];
    out->q1 = al_percentile_sorted(s, n, 25);
    out->median = al_percentile_sorted(s, n, 50);
    out->q3 = al_percentile_sorted(s, n, 75);
    out->mean = sum / (double)n;
    free(s);
    return 0;
}

/* ---- the critical-N grid (METHOD section 4) ------------------------------------------------- */

int al_critical_grid(int L, int *N, int cap) {
    if (L < 2) return 0;
    int cnt = 0;
#define AL_PUT(v)                                                                                  \
    do {                                                                                           \
        if (cnt < cap && N) N[cnt] = (v);                                                          \
        cnt++;                                                                                     \
    } while (0)
    static const int lo[5] = {1, 18, 36, 72, 144}, hi[5] = {16, 32, 64, 128, 256},
                     st[5] = {1, 2, 4, 8, 16};
    for (int b = 0; b < 5; b++)
        for (int v = lo[b]; v <= hi[b] && v < L - 1; v += st[b]) AL_PUT(v);
    int step = L / 32 > 0 ? L / 32 : 1;
    for (int v = 256 + step; v < L - 1; v += step) AL_PUT(v);
    AL_PUT(L - 1);
#undef AL_PUT
    return cnt;
}
