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

#endif
