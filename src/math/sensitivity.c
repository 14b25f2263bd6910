/* sensitivity.c: gradient sensitivity of the normalizer (METHOD section 6; paper Algorithm 5):
 * per row of logits (al_row_sensitivity, in a given direction v), the finite difference
 *     delta(T, eps) = || f((z + eps v)/T) - f(z/T) || / eps
 * and the exact spectral norm of the Jacobian of f(z/T); per head (al_head_sensitivity) the
 * same row code with one seeded direction v per (seed, layer, head, row), reused for every T
 * and eps, both averaged over the rows with n >= 2. al_head_sensitivity_ex adds the readings of
 * METHOD section 9: the logits on another scale (the paper's raw q.k: z sqrt(d_head)) and a
 * fresh direction at every (T, eps, head, row), as the paper's Algorithm 5 draws it;
 * al__head_sensitivity_pair (metrics.h) both directions' finite differences in one pass over the
 * rows (what does not depend on the direction computed once), each the bits of its own call.
 *
 * f is any normalizer of attnlim.h (al_norm_forward / al_norm_forward_spectral, with its
 * temperature set to each T). Softmax, the case of the paper, has a fast path: a vectorised
 * exponential here and the exact secular-equation norm of the normalizer module
 * (al_norm_rank1_spectral(p) / T, the spectral norm of (diag(p) - p p^T)/T), both once per row
 * and T and on the support of exp((z - max)/T); the difference of the two softmaxes as
 * p0_i (g_i - G) / (1 + G), g = expm1(eps (v - v_top) / T), wherever |eps v / T| <= 32
 * (fd_factored; docs/readings.md, "Algorithm 5 readings").
 */
#include "internal.h"
#include "metrics.h"
#include "mv.h"
#include "mathx.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#if defined(AL_MV_ISA) || defined(AL_MV_DISPATCH)
#define AL_SENSITIVITY_PROTOS(f)                                                                   \
    int f(al_head_sensitivity)(const double *z, int64_t L, int causal, const al_norm *nm,          \
                               const double *temps, int n_t, const double *eps, int n_eps,         \
                               uint64_t seed, int layer, int head, double *fd_mean,                \
                               double *spec_mean, al_error *err);                                  \
    int f(al_head_sensitivity_ex)(const double *z, int64_t L, int causal, const al_norm *nm,       \
                                  const double *temps, int n_t, const double *eps, int n_eps,      \
                                  uint64_t seed, int layer, int head, const al_sens_opts *so,      \
                                  double *fd_mean, double *spec_mean, al_error *err);              \
    int f(al_row_sensitivity)(const double *z, int64_t n, const al_norm *nm, const double *temps,  \
                              int n_t, const double *eps, int n_eps, const double *v, double *fd,  \
                              double *spec, al_error *err);                                        \
    int f(al_sensitivity_direction)(uint64_t seed, int layer, int head, int64_t row, int64_t n,    \
                                    double *v);                                                    \
    int f(al_sensitivity_direction_fresh)(uint64_t seed, int layer, int head, int64_t row, int ti, \
                                          int ei, int64_t n, double *v);                           \
    int f(al__fresh_normals)(uint64_t h, int64_t n, double *x);                                    \
    int f(al__fresh_direction)(uint64_t h, int64_t n, double *v);                                  \
    int f(al__head_sensitivity_pair)(                                                              \
        const double *z, int64_t L, int causal, const al_norm *nm, const double *temps, int n_t,   \
        const double *eps, int n_eps, uint64_t seed, int layer, int head, const al_sens_opts *so,  \
        double *fd_mean, double *spec_mean, double *fd_other, al_error *err);
#pragma GCC visibility push(hidden) /* the copies: internal, never exported */
AL_MV_FOR_EACH(AL_SENSITIVITY_PROTOS)
#pragma GCC visibility pop
#endif

/* e[n] = exp((z - mx) / T), returns sum e (mx = max z: every exponent <= 0). */
static double exp_shifted(const double *restrict z, double mx, double T, int64_t n,
                          double *restrict e) {
    double invT = 1.0 / T, s = 0;
#pragma omp simd reduction(+ : s)
    for (int64_t i = 0; i < n; i++) {
        double q = al__exp_neg((z[i] - mx) * invT);
        e[i] = q;
        s += q;
    }
    return s;
}

/* the first i with z_i == x (there is one) */
static int64_t first_of(const double *z, int64_t n, double x) {
    int64_t i = 0;
    while (i < n - 1 && z[i] != x) i++;
    return i;
}

/* max -z_i (= -min z) */
static double max_neg(const double *z, int64_t n) {
    double mx = -INFINITY;
#pragma omp simd reduction(max : mx)
    for (int64_t i = 0; i < n; i++) mx = mx > -z[i] ? mx : -z[i];
    return mx;
}

static double max_of(const double *z, int64_t n) {
    double mx = -INFINITY;
#pragma omp simd reduction(max : mx)
    for (int64_t i = 0; i < n; i++) mx = mx > z[i] ? mx : z[i];
    return mx;
}

/* || a / sa - b / sb ||^2 */
static double dist2_scaled(const double *restrict a, double ia, const double *restrict b, double ib,
                           int64_t n) {
    double s = 0;
#pragma omp simd reduction(+ : s)
    for (int64_t i = 0; i < n; i++) {
        double e = FMA(a[i], ia, -b[i] * ib);
        s = FMA(e, e, s);
    }
    return s;
}

static double dist2(const double *restrict a, const double *restrict b, int64_t n) {
    return dist2_scaled(a, 1.0, b, 1.0, n);
}

/* sqrt(-2 log u1) times cos (which = 0) or sin (which = 1) of 2 pi u2 (u1 in (0, 1]). */
static inline double box_muller(double u1, double u2, int which) {
    double sn, cs;
    al__sincos_turn(u2, &sn, &cs);
    return sqrt(-2.0 * al__log_pos(u1)) * (which ? sn : cs);
}

/* v[n] /= || v || (the sum of squares in index order); a zero v (measure zero) becomes e_0, to
 * stay on the sphere */
static void normalise(int64_t n, double *v) {
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += v[i] * v[i];
    if (!(s > 0)) {
        for (int64_t i = 0; i < n; i++) v[i] = i == 0;
        return;
    }
    double is = 1.0 / sqrt(s);
    for (int64_t i = 0; i < n; i++) v[i] *= is;
}

/* n normal draws from the generator r, normalised (al_sensitivity_direction; the definition):
 * Box-Muller on the uniform pairs (u2, then u1 > 0) drawn in order; both normals of each pair.
 * The uniforms go through v first, then one vectorisable pass maps each pair (the kernels of
 * mathx.h, exact operations only: every copy, vectorised or not, gives the same bits). */
static void unit_direction_rng(al__rng r, int64_t n, double *v) {
    int64_t np = n / 2; /* the full pairs; an odd n keeps the cosine of one more */
    for (int64_t i = 0; i < n; i += 2) {
        double u1, u2 = al__rng_uniform_inline(&r);
        do u1 = al__rng_uniform_inline(&r);
        while (u1 <= 0);
        v[i] = u1;
        if (i + 1 < n)
            v[i + 1] = u2;
        else
            v[i] = box_muller(u1, u2, 0);
    }
    for (int64_t k = 0; k < np; k++) {
        double u1 = v[2 * k], u2 = v[2 * k + 1];
        v[2 * k] = box_muller(u1, u2, 0);
        v[2 * k + 1] = box_muller(u1, u2, 1);
    }
    normalise(n, v);
}

static void unit_direction(uint64_t h, int64_t n, double *v) {
    al__rng r;
    al__rng_seed(&r, h);
    unit_direction_rng(r, n, v);
}

/* ---- the fresh directions (al_sensitivity_direction_fresh; the definition) ----
 * A direction's seed h drives AL__DIR_LANES xoshiro256** generators, lane j seeded with the
 * SplitMix64 outputs 4j .. 4j + 3 of h (al__hash64(h + (4j + c) 0x9E3779B97F4A7C15), c < 4);
 * pair p of the np = (n + 1) / 2 is lane (p mod 8)'s (p div 8)-th draw b. Box-Muller in single
 * precision on it: u1 = k1 2^-31, k1 = (b >> 33) | 1 (odd, so u1 in (0, 1): radii up to
 * sqrt(62 ln 2) = 6.56), u2 = k2 2^-24, k2 = bits 8..31 of b; (c, s) = sqrt(-2 log u1) (cos,
 * sin)(2 pi u2) (mathx.h's float kernels: within 1e-6 of the radius of the exact transform of
 * these uniforms), each an exact float product widened to double. x = (c_0 .. c_{np-1}, s_0 ..
 * s_{n-np-1}) (an odd n drops the last sine); v = x / sqrt(S), S = the sum of x_i^2 as eight sums
 * a_j over i = j mod 8 in index order, ((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7)). Every
 * step is exact or one IEEE operation without FMA: every copy gives the same bits. */

/* DIR_W lanes a vector, the copy's own width (a wider generic vector is split badly by the
 * compiler); DIR_G vectors hold the AL__DIR_LANES lanes */
#if defined(__AVX512F__)
#define DIR_W 8
#elif defined(__AVX2__)
#define DIR_W 4
#else
#define DIR_W 2
#endif
/* a chunk: DIR_CH pairs, DIR_D draws of every lane (two float vectors on AVX-512: measured
 * faster than one or four, docs/benchmarks.md) */
enum { DIR_G = AL__DIR_LANES / DIR_W, DIR_CH = 32, DIR_D = DIR_CH / AL__DIR_LANES };
typedef uint64_t dir_u64 __attribute__((vector_size(8 * DIR_W)));
typedef double dir_f64 __attribute__((vector_size(8 * DIR_W)));
typedef uint32_t dir_u32 __attribute__((vector_size(8 * DIR_W))); /* 2 DIR_W lanes */
/* the odd and the even dwords of two dir_u32 (__builtin_shufflevector: gcc >= 12 and clang) */
#if DIR_W == 8
#define DIR_ODD  1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31
#define DIR_EVEN 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30
#elif DIR_W == 4
#define DIR_ODD  1, 3, 5, 7, 9, 11, 13, 15
#define DIR_EVEN 0, 2, 4, 6, 8, 10, 12, 14
#else
#define DIR_ODD  1, 3, 5, 7
#define DIR_EVEN 0, 2, 4, 6
#endif
_Static_assert(DIR_CH % (2 * AL__DIR_LANES) == 0, "a chunk is an even number of draws");
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "fresh_ints: dword 2 l is the low half");

/* Each lane's next 64 bits: xoshiro256** on the state s[4] (al__rng_next_inline, lane by lane;
 * x 5 and x 9 as shifts and adds). */
static inline __attribute__((always_inline)) dir_u64 dir_next(dir_u64 *s) {
    dir_u64 x = (s[1] << 2) + s[1], y = (x << 7) | (x >> 57), r = (y << 3) + y;
    AL__XOSHIRO_ADVANCE(s);
    return r;
}

/* the lanes' generators of seed h: st[g][c] lane l = SplitMix64 output 4 (g DIR_W + l) + c of h
 * (the SplitMix64 finaliser of al__hash64, lane by lane); an all-zero state (as al__rng_seed)
 * gets s0 = 1 */
static void dir_seed(uint64_t h, dir_u64 (*st)[4]) {
    for (int g = 0; g < DIR_G; g++) {
        for (int c = 0; c < 4; c++) {
            dir_u64 x;
            for (int l = 0; l < DIR_W; l++)
                x[l] = h + (uint64_t)(4 * (g * DIR_W + l) + c + 1) * 0x9e3779b97f4a7c15ull;
            x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
            x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
            st[g][c] = x ^ (x >> 31);
        }
        dir_u64 zero = {0}; /* (x == zero) is -1 in the all-zero lanes */
        st[g][0] |= (dir_u64)((st[g][0] | st[g][1] | st[g][2] | st[g][3]) == zero) & 1u;
    }
}

static inline void fresh_pair(int32_t k1, int32_t k2, double *c, double *s) {
    float sn, cs, rad = sqrtf(-2.0f * al__logf_pos((float)k1 * 0x1p-31f));
    al__sincosf_turn((float)k2 * 0x1p-24f, &sn, &cs);
    *c = (double)rad * (double)cs;
    *s = (double)rad * (double)sn;
}

/* k1[DIR_CH], k2[DIR_CH] of the next DIR_D draws of every lane (pair j of the chunk from lane
 * j mod 8, draw j div 8), in registers: of each two vectors of draws b (their lanes in pair
 * order), the high halves' bits 1..31 | 1 (= (b >> 33) | 1) and the low halves' bits 8..31
 * (= (b >> 8) & 0xFFFFFF), 2 DIR_W lanes at once (one float vector of the kernels) */
static inline __attribute__((always_inline)) void fresh_ints(dir_u64 (*st)[4], int32_t *k1,
                                                             int32_t *k2) {
    dir_u64 b[DIR_D * DIR_G];
    for (int d = 0; d < DIR_D; d++)
        for (int g = 0; g < DIR_G; g++) b[d * DIR_G + g] = dir_next(st[g]);
    for (int i = 0; i < DIR_D * DIR_G / 2; i++) {
        dir_u32 u = (dir_u32)b[2 * i], v = (dir_u32)b[2 * i + 1];
        /* element i: dword 2 i + 1 (DIR_ODD) or 2 i (DIR_EVEN) of the two vectors, in order */
        dir_u32 x = (__builtin_shufflevector(u, v, DIR_ODD) >> 1) | 1u,
                y = __builtin_shufflevector(u, v, DIR_EVEN) >> 8;
        memcpy(k1 + i * 2 * DIR_W, &x, sizeof x);
        memcpy(k2 + i * 2 * DIR_W, &y, sizeof y);
    }
}

/* x[n]: the normals of seed h, DIR_CH pairs at a time, every pair of a chunk computed (full float
 * vectors, no scalar tail): a whole chunk straight into x, the last (pairs past np, or sines
 * past ns: the last sine of an odd n) through c, s, of which only x's part is copied */
static void fresh_normals(uint64_t h, int64_t n, double *x) {
    int32_t k1[DIR_CH] __attribute__((aligned(64))), k2[DIR_CH] __attribute__((aligned(64)));
    double c[DIR_CH], s[DIR_CH];
    dir_u64 st[DIR_G][4];
    dir_seed(h, st);
    int64_t np = (n + 1) / 2, ns = n - np, p = 0; /* ns sines */
    for (; p < np; p += DIR_CH) {
        fresh_ints(st, k1, k2);
        int whole = p + DIR_CH <= ns;
        double *xc = whole ? x + p : c, *xs = whole ? x + np + p : s;
#pragma omp simd
        for (int j = 0; j < DIR_CH; j++) fresh_pair(k1[j], k2[j], &xc[j], &xs[j]);
        if (whole) continue;
        for (int j = 0; j < DIR_CH && p + j < np; j++) x[p + j] = c[j];
        for (int j = 0; j < DIR_CH && p + j < ns; j++) x[np + p + j] = s[j];
    }
}

/* the sum of x[n]^2 as the definition's eight sums */
static double fresh_sumsq(const double *x, int64_t n) {
    dir_f64 a[DIR_G] = {{0}};
    int64_t i = 0;
    for (; i + AL__DIR_LANES <= n; i += AL__DIR_LANES)
        for (int g = 0; g < DIR_G; g++) {
            dir_f64 y;
            memcpy(&y, x + i + g * DIR_W, sizeof y);
            a[g] += y * y;
        }
    double s[AL__DIR_LANES];
    for (int j = 0; j < AL__DIR_LANES; j++) s[j] = a[j / DIR_W][j % DIR_W];
    for (int j = 0; i + j < n; j++) s[j] += x[i + j] * x[i + j];
    return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

_Static_assert(AL__DIR_LANES == 8, "fresh_sumsq's tree is of eight sums");

/* v[n]: the fresh direction of seed h; returns max |v_i| */
static double unit_direction_fresh(uint64_t h, int64_t n, double *v) {
    fresh_normals(h, n, v);
    double ss = fresh_sumsq(v, n), mx = 0;
    if (!(ss > 0)) {
        normalise(n, v); /* measure zero: e_0 */
        return 1.0;
    }
    double is = 1.0 / sqrt(ss);
#pragma omp simd reduction(max : mx)
    for (int64_t i = 0; i < n; i++) {
        v[i] *= is;
        mx = mx > fabs(v[i]) ? mx : fabs(v[i]);
    }
    return mx;
}

static uint64_t direction_hash(uint64_t seed, int layer, int head, int64_t row) {
    uint64_t h = al__hash64(seed);
    h = al__hash64(h ^ (uint64_t)(int64_t)layer);
    h = al__hash64(h ^ (uint64_t)(int64_t)head);
    return al__hash64(h ^ (uint64_t)row);
}

int AL_MV(al_sensitivity_direction)(uint64_t seed, int layer, int head, int64_t row, int64_t n,
                                    double *v) {
    if (!v || n < 1) return AL_E_INVALID;
    unit_direction(direction_hash(seed, layer, head, row), n, v);
    return 0;
}

/* the generator's seed of the fresh direction at (T index ti, eps index ei) */
static uint64_t fresh_hash(uint64_t seed, int layer, int head, int64_t row, int ti, int ei) {
    uint64_t h = direction_hash(seed, layer, head, row);
    return al__hash64(h ^ (0xF5E5ull << 40) ^ ((uint64_t)(uint32_t)ti << 20) ^
                      (uint64_t)(uint32_t)ei);
}

int AL_MV(al_sensitivity_direction_fresh)(uint64_t seed, int layer, int head, int64_t row, int ti,
                                          int ei, int64_t n, double *v) {
    if (!v || n < 1 || ti < 0 || ei < 0) return AL_E_INVALID;
    unit_direction_fresh(fresh_hash(seed, layer, head, row, ti, ei), n, v);
    return 0;
}

int AL_MV(al__fresh_normals)(uint64_t h, int64_t n, double *x) {
    if (!x || n < 1 || n > ((int64_t)1 << 24)) return AL_E_INVALID;
    fresh_normals(h, n, x);
    return 0;
}

int AL_MV(al__fresh_direction)(uint64_t h, int64_t n, double *v) {
    if (!v || n < 1 || n > ((int64_t)1 << 24)) return AL_E_INVALID;
    unit_direction_fresh(h, n, v);
    return 0;
}

/* The checks al_head_sensitivity and al_row_sensitivity share; *base = nm at T = 1. */
static int check_args(const al_norm *nm, const double *temps, int n_t, const double *eps, int n_eps,
                      al_norm *base, al_error *err) {
    if (n_t < 1 || n_eps < 0)
        return al__err(err, AL_E_INVALID, "sensitivity: bad sizes (%d T, %d eps)", n_t, n_eps);
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
    *base = *nm;
    base->temperature = 1.0;
    return al_norm_check(base, err);
}

/* Scratch for one row of up to n keys: p0, p1, zp, ec, vc [n], idx [n]. */
typedef struct sens_ws {
    double *p0, *p1, *zp, *ec, *vc;
    int64_t *idx;
    double *buf;
} sens_ws;

static int build_ws(sens_ws *w, int64_t n, al_error *err) {
    w->buf =
        al__malloc((size_t)n * (5 * sizeof(double) + sizeof(int64_t)), "sensitivity scratch", err);
    if (!w->buf) return AL_E_NOMEM;
    w->p0 = w->buf;
    w->p1 = w->p0 + n;
    w->zp = w->p1 + n;
    w->ec = w->zp + n;
    w->vc = w->ec + n;
    w->idx = (int64_t *)(w->vc + n);
    return 0;
}

/* The row's state at one temperature T: p0[n] = f(z/T) up to the factor 1 / s0 (softmax: the
 * shifted exponentials e0, s0 their sum; other normalizers: f itself, s0 = 1). Softmax also
 * keeps the support of e0: ec[m] its non-zero entries at idx[m] (ec = p0, idx = NULL if the
 * support is everything). */
typedef struct sens_at {
    al_norm nmT; /* the normalizer at T */
    double T, s0;
    const double *p0, *ec;
    const int64_t *idx;
    int64_t m;
} sens_at;

/* The support of e0[n] (every e0_i >= 0): m entries into ec, idx; returns m. */
static int64_t support(const double *e0, int64_t n, double *ec, int64_t *idx) {
    int64_t m = 0;
    for (int64_t i = 0; i < n; i++)
        if (e0[i] > 0) {
            ec[m] = e0[i];
            idx[m++] = i;
        }
    return m;
}

/* p0, s0 and spec = the spectral norm of the Jacobian of f(z/T) (spec NULL: not computed), for
 * z[n] (mx0 = max z, mn0 = min z). The entries e0_i = 0 (exponent below -708, al__exp_neg) add
 * exactly 0 to the secular sums and to the finite differences (sens_fd), so both run on the
 * support. */
static int sens_prepare(const double *zt, int64_t n, double mx0, double mn0, const al_norm *base,
                        double T, sens_ws *w, sens_at *at, double *spec, al_error *err) {
    at->nmT = *base;
    at->nmT.temperature = T;
    at->T = T;
    at->p0 = at->ec = w->p0;
    at->idx = NULL;
    at->m = n;
    if (base->kind == AL_NORM_SOFTMAX) {
        /* unnormalised e0 = s0 p0: lambda_max(diag(e0) - e0 e0^T / s0) = s0 lambda(p0) */
        at->s0 = exp_shifted(zt, mx0, T, n, w->p0);
        if ((mn0 - mx0) * (1.0 / T) < -708.0) { /* as exp_shifted's exponent: zeros */
            at->m = support(w->p0, n, w->ec, w->idx);
            at->ec = w->ec;
            at->idx = w->idx;
        }
        if (spec) *spec = al_norm_rank1_spectral(at->ec, at->m) / (at->s0 * T);
        return 0;
    }
    at->s0 = 1.0;
    if (!spec) return al_norm_forward(&at->nmT, zt, n, w->p0, err);
    return al_norm_forward_spectral(&at->nmT, zt, n, w->p0, spec, err);
}

/* ze[n] = z + eps v; returns max ze. */
static double perturb(const double *restrict zt, const double *restrict v, double eps, int64_t n,
                      double *restrict ze) {
    for (int64_t j = 0; j < n; j++) ze[j] = FMA(eps, v[j], zt[j]);
    return max_of(ze, n);
}

/* max |v_i| */
static double absmax(const double *v, int64_t n) {
    double mx = 0;
#pragma omp simd reduction(max : mx)
    for (int64_t i = 0; i < n; i++) mx = mx > fabs(v[i]) ? mx : fabs(v[i]);
    return mx;
}

/* The direction on the support of e0 (at->idx): vc[m] (v itself if the support is everything). */
static const double *on_support(const sens_at *at, const double *v, double *vc) {
    if (!at->idx) return v;
    for (int64_t k = 0; k < at->m; k++) vc[k] = v[at->idx[k]];
    return vc;
}

/* Softmax at c = eps / T with c |v_i| <= SENS_FACTOR_MAX: softmax is shift-invariant, so with
 * x_i = c (v_i - v_t) (t the largest logit), g = expm1(x), S1 = sum_i e0_i (1 + g_i) and
 * G = sum_i p0_i g_i, softmax((z + eps v)/T)_i = e0_i (1 + g_i) / S1 and the difference from p0
 * is e0_i (g_i - G) / S1: one expm1 per entry of the support, no cancellation between two
 * softmaxes; the largest weight's difference -G / S1 keeps its digits when the others are far
 * below its rounding, and S1 >= e0_t = 1 is a sum of positive terms. Entries outside the support
 * (e0_i < e^-708) would weigh below e^(-708 + 2 * SENS_FACTOR_MAX) n in either softmax. */
#define SENS_FACTOR_MAX 32.0

/* g[m] = expm1(c (v - vt)); *sg = sum e g, *s1 = sum e (1 + g). small: every |c (v_i - vt)| <=
 * 1/32 (al__expm1_small). */
static void expm1_sums(const double *restrict e, const double *restrict v, int64_t m, double c,
                       double vt, int small, double *restrict g, double *sg, double *s1) {
    double a = 0, b = 0;
    if (small) {
#pragma omp simd reduction(+ : a, b)
        for (int64_t i = 0; i < m; i++) {
            g[i] = al__expm1_small(c * (v[i] - vt));
            a = FMA(e[i], g[i], a);
            b = FMA(e[i], 1.0 + g[i], b);
        }
    } else {
#pragma omp simd reduction(+ : a, b)
        for (int64_t i = 0; i < m; i++) {
            g[i] = al__expm1_mod(c * (v[i] - vt));
            a = FMA(e[i], g[i], a);
            b = FMA(e[i], 1.0 + g[i], b);
        }
    }
    *sg = a;
    *s1 = b;
}

/* || softmax((z + eps v)/T) - softmax(z/T) || / eps on the support: e[m] = e0 (s0 = sum e),
 * v[m], vt = v at the largest logit, xmax >= max |eps v_i / T|, g[m] scratch. */
static double fd_factored(const double *restrict e, const double *restrict v, int64_t m, double s0,
                          double vt, double xmax, double T, double eps, double *restrict g) {
    double sg, s1, sd = 0;
    expm1_sums(e, v, m, eps / T, vt, 2.0 * xmax <= 1.0 / 32.0, g, &sg, &s1);
    double G = sg / s0;
#pragma omp simd reduction(+ : sd)
    for (int64_t i = 0; i < m; i++) {
        double d = e[i] * (g[i] - G);
        sd = FMA(d, d, sd);
    }
    return sqrt(sd) / s1 / eps;
}

/* || e1 / s1 - e0 / s0 ||^2 for e0[n] with e0_t = 1 (t = top, the largest logit): the term at t
 * as sum_{j != t} (e1_t e0_j - e1_j) / (s0 s1), not as the difference of two weights that may
 * both round to 1 (e1 has its own shift: e1_t <= 1). */
static double dist2_top(const double *e1, double s1, const double *e0, double s0, int64_t n,
                        int64_t t) {
    double d2 = dist2_scaled(e1, 1.0 / s1, e0, 1.0 / s0, t) +
                dist2_scaled(e1 + t + 1, 1.0 / s1, e0 + t + 1, 1.0 / s0, n - t - 1);
    double c = 0, et = e1[t];
#pragma omp simd reduction(+ : c)
    for (int64_t j = 0; j < n; j++) c += j == t ? 0.0 : FMA(et, e0[j], -e1[j]);
    double dt = c / (s0 * s1);
    return FMA(dt, dt, d2);
}

/* *fd = || f((z + eps v)/T) - p0 / s0 || / eps; vc[at->m] = v on the support, vmax = max |v_i|,
 * top = the index of the largest logit. */
static int sens_fd(const sens_at *at, const double *zt, const double *v, const double *vc,
                   double vmax, int64_t top, int64_t n, double eps, sens_ws *w, double *fd,
                   al_error *err) {
    int softmax = at->nmT.kind == AL_NORM_SOFTMAX;
    double xmax = eps / at->T * vmax; /* NaN (0 times Inf) fails the test */
    if (softmax && xmax <= SENS_FACTOR_MAX) {
        *fd = fd_factored(at->ec, vc, at->m, at->s0, v[top], xmax, at->T, eps, w->p1);
        return 0;
    }
    double mxe = perturb(zt, v, eps, n, w->zp);
    if (softmax) { /* the definition's two softmaxes */
        double s1 = exp_shifted(w->zp, mxe, at->T, n, w->p1);
        *fd = sqrt(dist2_top(w->p1, s1, at->p0, at->s0, n, top)) / eps;
        return 0;
    }
    int rc = al_norm_forward(&at->nmT, w->zp, n, w->p1, err);
    if (rc) return rc;
    *fd = sqrt(dist2(w->p1, at->p0, n)) / eps;
    return 0;
}

/* fd[n_eps] at one T (at) in the direction v[n] (vmax = max |v_i|) */
static int fd_given(const sens_at *at, const double *zt, const double *v, double vmax, int64_t top,
                    int64_t n, const double *eps, int n_eps, sens_ws *w, double *fd,
                    al_error *err) {
    const double *vc = on_support(at, v, w->vc);
    int rc = 0;
    for (int e = 0; e < n_eps && !rc; e++)
        rc = sens_fd(at, zt, v, vc, vmax, top, n, eps[e], w, &fd[e], err);
    return rc;
}

/* The fresh directions of one row: (seed, layer, head, row t), v[n] their scratch. */
typedef struct sens_fresh {
    uint64_t seed;
    int layer, head;
    int64_t t;
    double *v;
} sens_fresh;

/* fd[n_eps] at T index a (at) in the fresh direction of each (a, eps index) */
static int fd_fresh(const sens_at *at, const double *zt, int64_t top, int64_t n, const double *eps,
                    int n_eps, const sens_fresh *fr, int a, sens_ws *w, double *fd, al_error *err) {
    int rc = 0;
    for (int e = 0; e < n_eps && !rc; e++) {
        double vmax =
            unit_direction_fresh(fresh_hash(fr->seed, fr->layer, fr->head, fr->t, a, e), n, fr->v);
        rc = sens_fd(at, zt, fr->v, on_support(at, fr->v, w->vc), vmax, top, n, eps[e], w, &fd[e],
                     err);
    }
    return rc;
}

/* One row z[n] (finite): fd[n_t, n_eps] in the direction v[n] (v NULL: none), fdf[n_t, n_eps] in
 * the fresh directions fr (NULL: none), spec[n_t] (NULL: not computed); set, not added to. What
 * does not depend on the direction (the row's maxima, p0 and the support at each T: sens_prepare)
 * is computed once for both; each set gets the bits of a call with it alone. */
static int sens_row(const double *zt, int64_t n, const al_norm *base, const double *temps, int n_t,
                    const double *eps, int n_eps, const double *v, double *fd, const sens_fresh *fr,
                    double *fdf, sens_ws *w, double *spec, al_error *err) {
    double mx0 = max_of(zt, n), mn0 = -max_neg(zt, n), vmax = v ? absmax(v, n) : 0;
    int64_t top = first_of(zt, n, mx0);
    for (int a = 0; a < n_t; a++) {
        sens_at at;
        size_t o = (size_t)a * (size_t)n_eps;
        int rc = sens_prepare(zt, n, mx0, mn0, base, temps[a], w, &at, spec ? &spec[a] : NULL, err);
        if (!rc && v) rc = fd_given(&at, zt, v, vmax, top, n, eps, n_eps, w, fd + o, err);
        if (!rc && fr) rc = fd_fresh(&at, zt, top, n, eps, n_eps, fr, a, w, fdf + o, err);
        if (rc) return rc;
    }
    return 0;
}

int AL_MV(al_row_sensitivity)(const double *z, int64_t n, const al_norm *nm, const double *temps,
                              int n_t, const double *eps, int n_eps, const double *v, double *fd,
                              double *spec, al_error *err) {
    if (!z || !nm || !temps || !v || (n_eps > 0 && (!eps || !fd)) || !spec)
        return al__err(err, AL_E_INVALID, "sensitivity: NULL argument");
    if (n < 1 || n > ((int64_t)1 << 24))
        return al__err(err, AL_E_INVALID, "sensitivity: bad row length n = %lld", (long long)n);
    al_norm base;
    int rc = check_args(nm, temps, n_t, eps, n_eps, &base, err);
    if (rc) return rc;
    for (int64_t j = 0; j < n; j++) {
        if (!isfinite(z[j]))
            return al__err(err, AL_E_RANGE,
                           "sensitivity: logits: non-finite value %g at position %lld", z[j],
                           (long long)j);
        if (!isfinite(v[j]))
            return al__err(err, AL_E_RANGE,
                           "sensitivity: direction: non-finite value %g at position %lld", v[j],
                           (long long)j);
    }
    sens_ws w;
    if (build_ws(&w, n, err)) return AL_E_NOMEM;
    rc = sens_row(z, n, &base, temps, n_t, eps, n_eps, v, fd, NULL, NULL, &w, spec, err);
    free(w.buf);
    if (rc) return al__err_prefix(err, (al_code)rc, "sensitivity: row");
    return 0;
}

/* One row under the readings: out[n_t, n_eps] in the shared v (fresh 0) or a fresh v per
 * (T, eps) (fresh 1), then [n_t] spectral norms (want_spec 0: not computed, left as they are),
 * then (other 1) [n_t, n_eps] in the other directions. fr: the row's fresh directions; vs[n]
 * scratch for the shared one. */
static int sens_row_ex(const double *zt, int64_t n, const al_norm *base, const double *temps,
                       int n_t, const double *eps, int n_eps, const sens_fresh *fr, int fresh,
                       int other, int want_spec, double *vs, sens_ws *w, double *out,
                       al_error *err) {
    size_t nfd = (size_t)n_t * (size_t)n_eps;
    double *spec = want_spec ? out + nfd : NULL, *fdo = other ? out + nfd + n_t : NULL;
    int shared = !fresh || other;
    if (shared) AL_MV(al_sensitivity_direction)(fr->seed, fr->layer, fr->head, fr->t, n, vs);
    return sens_row(zt, n, base, temps, n_t, eps, n_eps, shared ? vs : NULL, fresh ? fdo : out,
                    fresh || other ? fr : NULL, fresh ? out : fdo, w, spec, err);
}

int AL_MV(al_head_sensitivity)(const double *z, int64_t L, int causal, const al_norm *nm,
                               const double *temps, int n_t, const double *eps, int n_eps,
                               uint64_t seed, int layer, int head, double *fd_mean,
                               double *spec_mean, al_error *err) {
    return al_head_sensitivity_ex(z, L, causal, nm, temps, n_t, eps, n_eps, seed, layer, head, NULL,
                                  fd_mean, spec_mean, err);
}

/* al_head_sensitivity_ex; spec_mean NULL: the spectral norms not computed; fd_other (NULL:
 * none) the finite differences under the other directions (al__head_sensitivity_pair) */
static int head_sens(const double *z, int64_t L, int causal, const al_norm *nm, const double *temps,
                     int n_t, const double *eps, int n_eps, uint64_t seed, int layer, int head,
                     const al_sens_opts *so, double *fd_mean, double *spec_mean, double *fd_other,
                     al_error *err) {
    if (!z || !nm || !temps || (n_eps > 0 && (!eps || !fd_mean)))
        return al__err(err, AL_E_INVALID, "sensitivity: NULL argument");
    if (L < 1 || L > ((int64_t)1 << 24))
        return al__err(err, AL_E_INVALID, "sensitivity: bad sizes (L %lld, %d T, %d eps)",
                       (long long)L, n_t, n_eps);
    al_sens_opts sd = {1.0, 0, 0};
    if (!so) so = &sd;
    if (so->window < 0) return al__err(err, AL_E_INVALID, "sensitivity: window %d < 0", so->window);
    if (!(so->logit_scale > 0) || !isfinite(so->logit_scale))
        return al__err(err, AL_E_INVALID, "sensitivity: logit scale %g is not a positive number",
                       so->logit_scale);
    al_norm base;
    int rc = check_args(nm, temps, n_t, eps, n_eps, &base, err);
    if (rc) return rc;

    size_t nfd = (size_t)n_t * (size_t)n_eps;
    /* [n_t, n_eps] fd, then [n_t] spectral, then [n_t, n_eps] fd_other */
    size_t nout = nfd + (size_t)n_t + (fd_other ? nfd : 0);
    sens_ws w = {0};
    int scaled = so->logit_scale != 1.0;
    /* [L] the shared direction, [L] the fresh one, [L] zs */
    double *v = al__malloc_aligned((size_t)L * 3 * sizeof(double), "sensitivity directions", err);
    double *acc = al__calloc(nout, sizeof(double), "sensitivity sums", err);
    double *one = al__calloc(nout, sizeof(double), "sensitivity row", err);
    if (!v || !acc || !one || build_ws(&w, L, err)) {
        free(v);
        free(acc);
        free(one);
        return AL_E_NOMEM;
    }
    double *zs = v + 2 * L; /* [L] the row on the chosen scale */
    sens_fresh fr = {seed, layer, head, 0, v + L};
    int64_t rows = 0;
    int64_t t0 = causal ? 1 : 0;
    for (int64_t t = t0; t < L; t++) {
        int64_t lo = al__row_lo(t, causal, so->window), n = al__row_n(t, L, causal, so->window);
        if (n < 2) continue;
        const double *zt = z + t * L + lo; /* [n] the row's keys lo..lo+n-1 */
        for (int64_t j = 0; j < n; j++)
            if (!isfinite(zt[j]) || (scaled && !isfinite(zt[j] * so->logit_scale))) {
                rc = al__err(err, AL_E_RANGE,
                             "sensitivity: logits: non-finite value %g at row %lld, column %lld",
                             scaled ? zt[j] * so->logit_scale : zt[j], (long long)t,
                             (long long)(lo + j));
                goto done;
            }
        if (scaled) {
            for (int64_t j = 0; j < n; j++) zs[j] = zt[j] * so->logit_scale;
            zt = zs;
        }
        fr.t = t;
        rc = sens_row_ex(zt, n, &base, temps, n_t, eps, n_eps, &fr, so->fresh, fd_other != NULL,
                         spec_mean != NULL, v, &w, one, err);
        if (rc) {
            rc = al__err_prefix(err, (al_code)rc, "sensitivity: row %lld", (long long)t);
            goto done;
        }
        for (size_t q = 0; q < nout; q++) acc[q] += one[q];
        rows++;
    }
    double r = rows > 0 ? (double)rows : NAN;
    for (size_t q = 0; q < nfd; q++) fd_mean[q] = acc[q] / r;
    for (int a = 0; a < n_t && spec_mean; a++) spec_mean[a] = acc[nfd + (size_t)a] / r;
    for (size_t q = 0; q < nfd && fd_other; q++) fd_other[q] = acc[nfd + (size_t)n_t + q] / r;
done:
    free(v);
    free(acc);
    free(one);
    free(w.buf);
    return rc;
}

int AL_MV(al_head_sensitivity_ex)(const double *z, int64_t L, int causal, const al_norm *nm,
                                  const double *temps, int n_t, const double *eps, int n_eps,
                                  uint64_t seed, int layer, int head, const al_sens_opts *so,
                                  double *fd_mean, double *spec_mean, al_error *err) {
    if (!spec_mean) return al__err(err, AL_E_INVALID, "sensitivity: NULL argument");
    return head_sens(z, L, causal, nm, temps, n_t, eps, n_eps, seed, layer, head, so, fd_mean,
                     spec_mean, NULL, err);
}

int AL_MV(al__head_sensitivity_pair)(const double *z, int64_t L, int causal, const al_norm *nm,
                                     const double *temps, int n_t, const double *eps, int n_eps,
                                     uint64_t seed, int layer, int head, const al_sens_opts *so,
                                     double *fd_mean, double *spec_mean, double *fd_other,
                                     al_error *err) {
    return head_sens(z, L, causal, nm, temps, n_t, eps, n_eps, seed, layer, head, so, fd_mean,
                     spec_mean, fd_other, err);
}

/* ---- one copy of this file per instruction set (mv.h) ---- */

#ifdef AL_MV_DISPATCH
/* the directions: the baseline copy; every copy draws the same bits (unit_direction and
 * unit_direction_fresh use no FMA and no libm), so the head functions draw theirs in their own
 * copy (tested) */
int al_head_sensitivity(const double *z, int64_t L, int causal, const al_norm *nm,
                        const double *temps, int n_t, const double *eps, int n_eps, uint64_t seed,
                        int layer, int head, double *fd_mean, double *spec_mean, al_error *err) {
    return AL_MV_PICK(al_head_sensitivity)(z, L, causal, nm, temps, n_t, eps, n_eps, seed, layer,
                                           head, fd_mean, spec_mean, err);
}

int al_head_sensitivity_ex(const double *z, int64_t L, int causal, const al_norm *nm,
                           const double *temps, int n_t, const double *eps, int n_eps,
                           uint64_t seed, int layer, int head, const al_sens_opts *so,
                           double *fd_mean, double *spec_mean, al_error *err) {
    return AL_MV_PICK(al_head_sensitivity_ex)(z, L, causal, nm, temps, n_t, eps, n_eps, seed, layer,
                                              head, so, fd_mean, spec_mean, err);
}

int al_row_sensitivity(const double *z, int64_t n, const al_norm *nm, const double *temps, int n_t,
                       const double *eps, int n_eps, const double *v, double *fd, double *spec,
                       al_error *err) {
    return AL_MV_PICK(al_row_sensitivity)(z, n, nm, temps, n_t, eps, n_eps, v, fd, spec, err);
}

int al_sensitivity_direction(uint64_t seed, int layer, int head, int64_t row, int64_t n,
                             double *v) {
    return al_sensitivity_direction_base(seed, layer, head, row, n, v);
}

int al_sensitivity_direction_fresh(uint64_t seed, int layer, int head, int64_t row, int ti, int ei,
                                   int64_t n, double *v) {
    return al_sensitivity_direction_fresh_base(seed, layer, head, row, ti, ei, n, v);
}

int al__fresh_normals(uint64_t h, int64_t n, double *x) {
    return AL_MV_PICK(al__fresh_normals)(h, n, x);
}

int al__fresh_direction(uint64_t h, int64_t n, double *v) {
    return AL_MV_PICK(al__fresh_direction)(h, n, v);
}

int al__head_sensitivity_pair(const double *z, int64_t L, int causal, const al_norm *nm,
                              const double *temps, int n_t, const double *eps, int n_eps,
                              uint64_t seed, int layer, int head, const al_sens_opts *so,
                              double *fd_mean, double *spec_mean, double *fd_other, al_error *err) {
    return AL_MV_PICK(al__head_sensitivity_pair)(z, L, causal, nm, temps, n_t, eps, n_eps, seed,
                                                 layer, head, so, fd_mean, spec_mean, fd_other,
                                                 err);
}
#endif
