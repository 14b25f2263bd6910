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
 *    computes 1 - p directly (Hodges 1958; Viehmann 2021). A result outside [0, 1] falls back
 *    to the asymptotic formula.
 *  - otherwise: asymptotic. scipy evaluates kstwo.sf(D, round(n1 n2 / (n1 + n2))); we use the
 *    Kolmogorov limit Q(sqrt(en) D) there (differs from scipy by O(1/sqrt(en)); documented).
 */
#include "internal.h"

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

/* The Kolmogorov limiting survival function Q(x) = 2 sum_{k>=1} (-1)^{k-1} exp(-2 k^2 x^2),
 * with the theta-function form for small x. */
static double kolmogorov_sf(double x) {
    if (x <= 0) return 1.0;
    if (x < 1.0) {
        /* 1 - sqrt(2 pi)/x sum_{k>=1} exp(-(2k-1)^2 pi^2 / (8 x^2)) */
        double s = 0, c = M_PI * M_PI / (8.0 * x * x);
        for (int k = 1; k < 20; k++) {
            double t = exp(-(double)((2 * k - 1) * (2 * k - 1)) * c);
            s += t;
            if (t < 1e-300) break;
        }
        return 1.0 - sqrt(2.0 * M_PI) / x * s;
    }
    double s = 0;
    for (int k = 1; k < 100; k++) {
        double t = exp(-2.0 * (double)k * (double)k * x * x);
        s += (k & 1) ? t : -t;
        if (t < 1e-300) break;
    }
    return 2.0 * s;
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
        double en = m * n / (m + n);
        prob = kolmogorov_sf(sqrt(en) * d);
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

double al_percentile_sorted(const double *sorted, size_t n, double p) {
    if (n == 0) return NAN;
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
