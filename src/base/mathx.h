/* mathx.h: small double-precision kernels shared by the metrics modules (metrics.c,
 * sensitivity.c), written so that the loops calling them vectorise. */
#ifndef AL_MATHX_H
#define AL_MATHX_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* a*b + c in one rounding where the machine has FMA (ISO C mode does not contract). */
#ifdef __FMA__
#define FMA(a, b, c) fma(a, b, c)
#else
#define FMA(a, b, c) ((a) * (b) + (c))
#endif

/* exp(x) for x <= 0 (not NaN) to ~1 ulp (0 below -708), vectorisable: x = k ln2 + r, |r| <= ln2/2,
 * a degree-12 Taylor polynomial for e^r and 2^k built from the bits. */
static inline double al__exp_neg(double x) {
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
    /* Estrin's scheme: a shallow dependency chain (the Horner chain is latency-bound) */
    double r2 = r * r, r4 = r2 * r2, r8 = r4 * r4;
    double p01 = FMA(r, 1.0, 1.0), p23 = FMA(r, 1.0 / 6.0, 0.5);
    double p45 = FMA(r, 1.0 / 120.0, 1.0 / 24.0), p67 = FMA(r, 1.0 / 5040.0, 1.0 / 720.0);
    double p89 = FMA(r, 1.0 / 362880.0, 1.0 / 40320.0);
    double p1011 = FMA(r, 1.0 / 39916800.0, 1.0 / 3628800.0);
    double q0 = FMA(p23, r2, p01), q1 = FMA(p67, r2, p45), q2 = FMA(p1011, r2, p89);
    double s0 = FMA(q1, r4, q0), s1 = FMA(1.0 / 479001600.0, r4, q2);
    double p = FMA(s1, r8, s0);
    uint64_t tb, sb;
    memcpy(&tb, &t, sizeof tb);
    sb = (tb - 0x4338000000000000ull + 1023ull) << 52;
    sb = under ? 0 : sb;
    double scale;
    memcpy(&scale, &sb, sizeof scale);
    return p * scale;
}

/* The kernels below use only + - * / sqrt and integer operations, no FMA and no libm: every
 * copy (scalar, AVX2, AVX-512) gives the same bits, vectorised or not. */

/* log(x) for a normal x > 0 (not Inf/NaN) to ~1 ulp, vectorisable: x = 2^e m, m in [sqrt(1/2),
 * sqrt 2), log m = 2 atanh(f), f = (m - 1) / (m + 1), |f| <= 0.1716: the odd series to f^21. */
static inline double al__log_pos(double x) {
    uint64_t xb;
    memcpy(&xb, &x, sizeof xb);
    int64_t mb = (int64_t)((xb & 0x000FFFFFFFFFFFFFull) | 0x3FF0000000000000ull); /* m in [1, 2) */
    int64_t big = mb > 0x3FF6A09E667F3BCDll ? 1 : 0; /* m > sqrt 2: halve it */
    mb -= big << 52;
    /* e + 1023 as a double from the bits (2^52 + k - 2^52): no int64 -> double instruction */
    uint64_t eb = 0x4330000000000000ull | ((xb >> 52) + (uint64_t)big);
    double m, ed;
    memcpy(&m, &mb, sizeof m);
    memcpy(&ed, &eb, sizeof ed);
    ed -= 0x1p52 + 1023.0;
    double f = (m - 1.0) / (m + 1.0), f2 = f * f, f4 = f2 * f2;
    double a = 2.0 / 3.0 + f2 * (2.0 / 5.0), b = 2.0 / 7.0 + f2 * (2.0 / 9.0);
    double c = 2.0 / 11.0 + f2 * (2.0 / 13.0), d = 2.0 / 15.0 + f2 * (2.0 / 17.0);
    double g = 2.0 / 19.0 + f2 * (2.0 / 21.0);
    double p = a + f4 * (b + f4 * (c + f4 * (d + f4 * g))); /* sum_k>=1 2 f^2(k-1) / (2k+1) */
    double lm = 2.0 * f + (f * f2) * p;
    return ed * 6.93147180369123816490e-01 + (ed * 1.90821492927058770002e-10 + lm);
}

/* *s = sin(2 pi u), *c = cos(2 pi u) for u in [0, 1) to ~1 ulp, vectorisable: 4u = k + f
 * exactly (k an integer, |f| <= 1/2), r = f pi/2, Taylor polynomials of sin r, cos r to r^18,
 * then the quadrant k mod 4. */
static inline void al__sincos_turn(double u, double *s, double *c) {
    double q = 4.0 * u, t = q + 0x1.8p52, kf = t - 0x1.8p52;
    double r = (q - kf) * 1.57079632679489661923, r2 = r * r, r4 = r2 * r2, r8 = r4 * r4;
    double s01 = -1.0 / 6.0 + r2 * (1.0 / 120.0), s23 = -1.0 / 5040.0 + r2 * (1.0 / 362880.0);
    double s45 = -1.0 / 39916800.0 + r2 * (1.0 / 6227020800.0);
    double s67 = -1.0 / 1307674368000.0 + r2 * (1.0 / 355687428096000.0);
    double sr = r + (r * r2) * ((s01 + r4 * s23) + r8 * (s45 + r4 * s67));
    double c01 = -0.5 + r2 * (1.0 / 24.0), c23 = -1.0 / 720.0 + r2 * (1.0 / 40320.0);
    double c45 = -1.0 / 3628800.0 + r2 * (1.0 / 479001600.0);
    double c67 = -1.0 / 87178291200.0 + r2 * (1.0 / 20922789888000.0);
    double c8 = -1.0 / 6402373705728000.0;
    double cr = 1.0 + r2 * ((c01 + r4 * c23) + r8 * (c45 + r4 * (c67 + r4 * c8)));
    /* quadrant k: (sin, cos) = (s, c), (c, -s), (-s, -c), (-c, s); integer selects */
    uint64_t tb, sb, cb;
    memcpy(&tb, &t, sizeof tb);
    memcpy(&sb, &sr, sizeof sb);
    memcpy(&cb, &cr, sizeof cb);
    uint64_t odd = 0 - (tb & 1), sw = (sb & ~odd) | (cb & odd), cw = (cb & ~odd) | (sb & odd);
    sw ^= (tb & 2) << 62;
    cw ^= ((tb + 1) & 2) << 62;
    memcpy(s, &sw, sizeof sw);
    memcpy(c, &cw, sizeof cw);
}

/* Single-precision kernels (+ - * / sqrt, no FMA, no libm: the same bits in every copy), each
 * within a few float ulps (relative error below 1e-6; tests/test_metrics.c). */

/* log(x) for a normal float x > 0 (not Inf/NaN): x = 2^e m, m in [sqrt(1/2), sqrt 2),
 * log m = 2 atanh(f), f = (m - 1) / (m + 1), |f| <= 0.1716: the odd series to f^9. */
static inline float al__logf_pos(float x) {
    uint32_t xb;
    memcpy(&xb, &x, sizeof xb);
    int32_t mb = (int32_t)((xb & 0x007FFFFFu) | 0x3F800000u); /* m in [1, 2) */
    int32_t big = mb > 0x3FB504F3 ? 1 : 0;                    /* m > sqrt 2: halve it */
    mb -= big << 23;
    float m, e = (float)((int32_t)(xb >> 23) - 127 + big);
    memcpy(&m, &mb, sizeof m);
    float f = (m - 1.0f) / (m + 1.0f), f2 = f * f;
    float p = 2.0f / 3.0f + f2 * (2.0f / 5.0f + f2 * (2.0f / 7.0f + f2 * (2.0f / 9.0f)));
    float lm = 2.0f * f + (f * f2) * p;
    return e * 0.693145751953125f + (e * 1.428606765330187e-06f + lm); /* ln 2 = hi + lo */
}

/* *s = sin(2 pi u), *c = cos(2 pi u) for a float u in [0, 1): 4u = k + f exactly (|f| <= 1/2),
 * r = f pi/2, Taylor polynomials of sin r to r^9 and cos r to r^10, then the quadrant k mod 4. */
static inline void al__sincosf_turn(float u, float *s, float *c) {
    float q = 4.0f * u, t = q + 0x1.8p23f, kf = t - 0x1.8p23f;
    float r = (q - kf) * 1.57079632679489661923f, r2 = r * r;
    float sr =
        r + (r * r2) * (-1.0f / 6.0f +
                        r2 * (1.0f / 120.0f + r2 * (-1.0f / 5040.0f + r2 * (1.0f / 362880.0f))));
    float cr =
        1.0f + r2 * (-0.5f + r2 * (1.0f / 24.0f +
                                   r2 * (-1.0f / 720.0f +
                                         r2 * (1.0f / 40320.0f + r2 * (-1.0f / 3628800.0f)))));
    /* quadrant k: (sin, cos) = (s, c), (c, -s), (-s, -c), (-c, s); integer selects */
    uint32_t tb, sb, cb;
    memcpy(&tb, &t, sizeof tb);
    memcpy(&sb, &sr, sizeof sb);
    memcpy(&cb, &cr, sizeof cb);
    uint32_t odd = 0u - (tb & 1u), sw = (sb & ~odd) | (cb & odd), cw = (cb & ~odd) | (sb & odd);
    sw ^= (tb & 2u) << 30;
    cw ^= ((tb + 1u) & 2u) << 30;
    memcpy(s, &sw, sizeof sw);
    memcpy(c, &cw, sizeof cw);
}

/* expm1(x) = e^x - 1 for |x| <= 64 (not NaN) to ~2 ulp, vectorisable: x = k ln2 + r, |r| <=
 * ln2/2, expm1(r) by its Taylor polynomial to r^14 (full relative accuracy near 0), then
 * 2^k expm1(r) + (2^k - 1) (both exact scalings for |k| <= 52; k = 0 keeps expm1(r) itself). */
static inline double al__expm1_mod(double x) {
    double t = x * 1.4426950408889634 + 0x1.8p52;
    double kf = t - 0x1.8p52;
    double r = FMA(-kf, 1.90821492927058770002e-10, FMA(-kf, 6.93147180369123816490e-01, x));
    double r2 = r * r, r4 = r2 * r2, r8 = r4 * r4;
    double p23 = FMA(r, 1.0 / 6.0, 0.5), p45 = FMA(r, 1.0 / 120.0, 1.0 / 24.0);
    double p67 = FMA(r, 1.0 / 5040.0, 1.0 / 720.0), p89 = FMA(r, 1.0 / 362880.0, 1.0 / 40320.0);
    double p1011 = FMA(r, 1.0 / 39916800.0, 1.0 / 3628800.0);
    double p1213 = FMA(r, 1.0 / 6227020800.0, 1.0 / 479001600.0);
    double p14 = 1.0 / 87178291200.0;
    /* sum_{j>=2} r^(j-2) / j! */
    double q =
        FMA(FMA(FMA(p14, r2, p1213), r2, p1011), r8, FMA(FMA(p89, r2, p67), r4, FMA(p45, r2, p23)));
    double em = FMA(r2, q, r);
    uint64_t tb, sb;
    memcpy(&tb, &t, sizeof tb);
    sb = (tb - 0x4338000000000000ull + 1023ull) << 52;
    double sc;
    memcpy(&sc, &sb, sizeof sc);
    return FMA(sc, em, sc - 1.0);
}

/* expm1(x) for |x| <= 1/32 to ~1 ulp: its Taylor polynomial to x^9 (the rest is below 2^-60 of
 * the result), no range reduction: about a third of al__expm1_mod's work. */
static inline double al__expm1_small(double x) {
    double x2 = x * x, x4 = x2 * x2;
    double a = FMA(x, 1.0 / 6.0, 0.5), b = FMA(x, 1.0 / 120.0, 1.0 / 24.0);
    double c = FMA(x, 1.0 / 5040.0, 1.0 / 720.0), d = FMA(x, 1.0 / 362880.0, 1.0 / 40320.0);
    double q = FMA(FMA(d, x2, c), x4, FMA(b, x2, a)); /* sum_{j=2..9} x^(j-2) / j! */
    return FMA(x2, q, x);
}

#endif
