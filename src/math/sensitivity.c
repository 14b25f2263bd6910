/* sensitivity.c: gradient sensitivity of the normalizer (METHOD section 6; paper Algorithm 5):
 * per row of logits (al_row_sensitivity, in a given direction v), the finite difference
 *     delta(T, eps) = || f((z + eps v)/T) - f(z/T) || / eps
 * and the exact spectral norm of the Jacobian of f(z/T); per head (al_head_sensitivity) the
 * same row code with one seeded direction v per (seed, layer, head, row), reused for every T
 * and eps, both averaged over the rows with n >= 2. al_head_sensitivity_ex adds the readings of
 * METHOD section 9: the logits on another scale (the paper's raw q.k: z sqrt(d_head)) and a
 * fresh direction at every (T, eps, head, row), as the paper's Algorithm 5 draws it.
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
    int f(al__sensitivity_directions)(const al__rng *r, int nb, int64_t n, double *v);             \
    int f(al__fresh_normals)(al__rng * r, int64_t n, double *x);                                   \
    int f(al__head_sensitivity_fd)(const double *z, int64_t L, int causal, const al_norm *nm,      \
                                   const double *temps, int n_t, const double *eps, int n_eps,     \
                                   uint64_t seed, int layer, int head, const al_sens_opts *so,     \
                                   double *fd_mean, al_error *err);
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

/* The fresh directions' normals (al_sensitivity_direction_fresh; the definition): Box-Muller in
 * single precision, one 64-bit draw b of r a pair: u1 = k1 2^-31, k1 = (b >> 33) | 1 (odd, so
 * u1 in (0, 1): radii up to sqrt(62 ln 2) = 6.56), u2 = k2 2^-24, k2 = bits 8..31 of b; c, s =
 * sqrt(-2 log u1) (cos, sin)(2 pi u2) (mathx.h's float kernels: within 1e-6 of the exact
 * transform of these uniforms), each an exact float product widened to double. The
 * integers first, then one pass over the pairs that vectorises (16 float lanes on AVX-512). */
static inline void fresh_ints(uint64_t b, int32_t *k1, int32_t *k2) {
    *k1 = (int32_t)((b >> 33) | 1u);
    *k2 = (int32_t)((b >> 8) & 0xFFFFFFu);
}

static inline void fresh_pair(int32_t k1, int32_t k2, double *c, double *s) {
    float sn, cs, rad = sqrtf(-2.0f * al__logf_pos((float)k1 * 0x1p-31f));
    al__sincosf_turn((float)k2 * 0x1p-24f, &sn, &cs);
    *c = (double)rad * (double)cs;
    *s = (double)rad * (double)sn;
}

/* c[m], s[m] = fresh_pair(k1[m], k2[m]) */
static void fresh_pairs(const int32_t *restrict k1, const int32_t *restrict k2, int64_t m,
                        double *restrict c, double *restrict s) {
#pragma omp simd
    for (int64_t j = 0; j < m; j++) fresh_pair(k1[j], k2[j], &c[j], &s[j]);
}

/* sum_i x_i^2 for x[n] as four sums, a_j over i = j mod 4 in index order, then
 * (a_0 + a_1) + (a_2 + a_3) (four chains: the lanes add theirs in registers) */
static double fresh_sumsq(const double *x, int64_t n) {
    double a[4] = {0, 0, 0, 0};
    for (int64_t i = 0; i < n; i++) a[i & 3] += x[i] * x[i];
    return (a[0] + a[1]) + (a[2] + a[3]);
}

/* x[n]: n normals of r (the pairs' cosines and sines in turn; an odd n drops the last sine) */
static void fresh_normals(al__rng *r, int64_t n, double *x) {
    for (int64_t i = 0; i < n; i += 2) {
        int32_t k1, k2;
        double c, s;
        fresh_ints(al__rng_next_inline(r), &k1, &k2);
        fresh_pair(k1, k2, &c, &s);
        x[i] = c;
        if (i + 1 < n) x[i + 1] = s;
    }
}

/* fresh_normals, divided by the root of fresh_sumsq */
static void unit_direction_fresh(al__rng r, int64_t n, double *v) {
    fresh_normals(&r, n, v);
    double ss = fresh_sumsq(v, n);
    if (!(ss > 0)) {
        normalise(n, v); /* measure zero: e_0 */
        return;
    }
    double is = 1.0 / sqrt(ss);
    for (int64_t i = 0; i < n; i++) v[i] *= is;
}

/* ---- AL__DIR_LANES fresh directions at once, one generator per vector lane ---- */

/* DIR_W lanes a vector, the copy's own width (a wider generic vector is split badly by the
 * compiler); DIR_G vectors hold one number of every lane */
#if defined(__AVX512F__)
#define DIR_W 8
#elif defined(__AVX2__)
#define DIR_W 4
#else
#define DIR_W 2
#endif
enum { DIR_G = AL__DIR_LANES / DIR_W };
typedef uint64_t dir_u64 __attribute__((vector_size(8 * DIR_W)));
typedef double dir_f64 __attribute__((vector_size(8 * DIR_W)));

/* Each lane's next 64 bits: xoshiro256** on the state s[4] (al__rng_next_inline, lane by lane;
 * x 5 and x 9 as shifts and adds). */
static inline __attribute__((always_inline)) dir_u64 dir_next(dir_u64 *s) {
    dir_u64 x = (s[1] << 2) + s[1], y = (x << 7) | (x >> 57), r = (y << 3) + y;
    AL__XOSHIRO_ADVANCE(s);
    return r;
}

/* the lanes of a and b picked by constant indices (b's numbered from DIR_W) */
#if defined(__clang__) || __GNUC__ >= 12
#define DIR_SHUF(a, b, ...) __builtin_shufflevector(a, b, __VA_ARGS__)
#else
typedef int64_t dir_i64 __attribute__((vector_size(8 * DIR_W)));
#define DIR_SHUF(a, b, ...) __builtin_shuffle(a, b, (dir_i64){__VA_ARGS__})
#endif

/* the i-th normal of lane k: row i >> 1 of the cosines (i even) or the sines, lane k */
static inline const double *dir_row(const double *c, const double *s, int64_t i) {
    return (i & 1 ? s : c) + (i >> 1) * AL__DIR_LANES;
}

/* v[k, i] = x_i[k] is[k] (x_i = dir_row(i)) for the rows i0 <= i < i1 and the lanes k < nb */
static inline void dir_scatter(const double *c, const double *s, const double *is, int64_t i0,
                               int64_t i1, int nb, int64_t n, double *restrict v) {
    for (int64_t i = i0; i < i1; i++)
        for (int k = 0; k < nb; k++) v[k * n + i] = dir_row(c, s, i)[k] * is[k];
}

/* v[k, i0 .. i0 + 7] = x_i[k] is[k] for the lanes k < nb: with 8-lane vectors, the block scaled
 * in registers and transposed by three rounds of two-vector shuffles; else one number at a
 * time. */
static inline void dir_scatter8(const double *c, const double *s, const double *is, int64_t i0,
                                int nb, int64_t n, double *restrict v) {
#if DIR_W == 8
    dir_f64 x[8], a[8], b[8], isv;
    memcpy(&isv, is, sizeof isv);
    for (int i = 0; i < 8; i++) {
        memcpy(&x[i], dir_row(c, s, i0 + i), sizeof x[i]);
        x[i] *= isv;
    }
    for (int i = 0; i < 8; i += 2) { /* a[i]: the even columns of rows i, i + 1 interleaved */
        a[i] = DIR_SHUF(x[i], x[i + 1], 0, 8, 2, 10, 4, 12, 6, 14);
        a[i + 1] = DIR_SHUF(x[i], x[i + 1], 1, 9, 3, 11, 5, 13, 7, 15);
    }
    for (int i = 0; i < 8; i += 4)
        for (int j = 0; j < 2; j++) {
            b[i + j] = DIR_SHUF(a[i + j], a[i + j + 2], 0, 1, 8, 9, 4, 5, 12, 13);
            b[i + j + 2] = DIR_SHUF(a[i + j], a[i + j + 2], 2, 3, 10, 11, 6, 7, 14, 15);
        }
    for (int j = 0; j < 4; j++) { /* x[k] = column k */
        x[j] = DIR_SHUF(b[j], b[j + 4], 0, 1, 2, 3, 8, 9, 10, 11);
        x[j + 4] = DIR_SHUF(b[j], b[j + 4], 4, 5, 6, 7, 12, 13, 14, 15);
    }
    for (int k = 0; k < nb; k++) memcpy(v + k * n + i0, &x[k], sizeof x[k]);
#else
    dir_scatter(c, s, is, i0, i0 + 8, nb, n, v);
#endif
}

_Static_assert(AL__DIR_LANES == 8, "dir_scatter8 is 8 x 8");

/* a[j][g] += x_i^2 (x_i = dir_row(c, s, i), lanes g DIR_W .. g DIR_W + DIR_W - 1) for the rows
 * i0 <= i < i1, i = j mod 4 (i0 a multiple of 4): fresh_sumsq's four sums of every lane, in
 * registers, a block of four rows (two pairs) at a time */
static void dir_sumsq(const double *c, const double *s, int64_t i0, int64_t i1,
                      dir_f64 (*a)[DIR_G]) {
    int64_t i = i0;
    for (; i + 4 <= i1; i += 4)
        for (int j = 0; j < 4; j++)
            for (int g = 0; g < DIR_G; g++) {
                dir_f64 x;
                memcpy(&x, dir_row(c, s, i + j) + g * DIR_W, sizeof x);
                a[j][g] += x * x;
            }
    for (int j = 0; i + j < i1; j++)
        for (int g = 0; g < DIR_G; g++) {
            dir_f64 x;
            memcpy(&x, dir_row(c, s, i + j) + g * DIR_W, sizeof x);
            a[j][g] += x * x;
        }
}

/* the doubles of unit_directions' scratch for n */
static size_t dir_scratch(int64_t n) {
    return (size_t)((n + 1) / 2) * AL__DIR_LANES * 2;
}

/* v[nb, n] (nb <= AL__DIR_LANES): unit_direction_fresh of each generator r[nb], lane k drawing
 * its own: the same pairs, its own sum of squares in index order, so the same bits.
 * u[dir_scratch(n)] scratch: the pairs' normals c, s [(n + 1) / 2, AL__DIR_LANES] (row p the
 * p-th pair of every lane), drawn, mapped and summed a block of pairs at a time. */
static void unit_directions(const al__rng *r, int nb, int64_t n, double *restrict u,
                            double *restrict v) {
    enum { K = AL__DIR_LANES, PB = 32 }; /* PB pairs of every lane a block */
    typedef int32_t dir_i32 __attribute__((vector_size(4 * DIR_W)));
    int64_t np = (n + 1) / 2;
    double *c = u, *s = c + np * K;
    int32_t k1[PB * K], k2[PB * K];
    dir_u64 st[DIR_G][4];
    dir_f64 a[4][DIR_G] = {{{0}}};
    for (int k = 0; k < K; k++)
        for (int q = 0; q < 4; q++) st[k / DIR_W][q][k % DIR_W] = r[k < nb ? k : 0].s[q];
    for (int64_t p0 = 0; p0 < np; p0 += PB) {
        int64_t pb = np - p0 < PB ? np - p0 : PB;
        for (int64_t p = 0; p < pb; p++)
            for (int g = 0; g < DIR_G; g++) { /* fresh_ints lane by lane */
                dir_u64 b = dir_next(st[g]);
                dir_i32 x = __builtin_convertvector((b >> 33) | 1u, dir_i32);
                dir_i32 y = __builtin_convertvector((b >> 8) & 0xFFFFFFu, dir_i32);
                memcpy(k1 + p * K + g * DIR_W, &x, sizeof x);
                memcpy(k2 + p * K + g * DIR_W, &y, sizeof y);
            }
        fresh_pairs(k1, k2, pb * K, c + p0 * K, s + p0 * K);
        dir_sumsq(c, s, 2 * p0, 2 * (p0 + pb) < n ? 2 * (p0 + pb) : n, a);
    }
    double is[K], sk[K];
    for (int k = 0; k < K; k++) {
        int g = k / DIR_W, l = k % DIR_W;
        sk[k] = (a[0][g][l] + a[1][g][l]) + (a[2][g][l] + a[3][g][l]);
        is[k] = sk[k] > 0 ? 1.0 / sqrt(sk[k]) : 0.0;
    }
    int64_t i0 = 0;
    for (; i0 + 8 <= n; i0 += 8) dir_scatter8(c, s, is, i0, nb, n, v);
    dir_scatter(c, s, is, i0, n, nb, n, v);
    for (int k = 0; k < nb; k++)
        if (!(sk[k] > 0)) unit_direction_fresh(r[k], n, v + k * n);
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
    al__rng r;
    al__rng_seed(&r, fresh_hash(seed, layer, head, row, ti, ei));
    unit_direction_fresh(r, n, v);
    return 0;
}

int AL_MV(al__fresh_normals)(al__rng *r, int64_t n, double *x) {
    if (!r || !x || n < 0) return AL_E_INVALID;
    fresh_normals(r, n, x);
    return 0;
}

int AL_MV(al__sensitivity_directions)(const al__rng *r, int nb, int64_t n, double *v) {
    if (!r || !v || nb < 1 || nb > AL__DIR_LANES || n < 1 || n > ((int64_t)1 << 24))
        return AL_E_INVALID;
    double *u = al__malloc(dir_scratch(n) * sizeof(double), "directions", NULL);
    if (!u) return AL_E_NOMEM;
    unit_directions(r, nb, n, u, v);
    free(u);
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

/* One row: z[n] (finite), v[n]; fd[n_t, n_eps] and spec[n_t] (NULL: not computed) are set (not
 * added to). */
static int sens_row(const double *zt, int64_t n, const al_norm *base, const double *temps, int n_t,
                    const double *eps, int n_eps, const double *v, sens_ws *w, double *fd,
                    double *spec, al_error *err) {
    double mx0 = max_of(zt, n), mn0 = -max_neg(zt, n), vmax = absmax(v, n);
    int64_t top = first_of(zt, n, mx0);
    for (int a = 0; a < n_t; a++) {
        sens_at at;
        int rc = sens_prepare(zt, n, mx0, mn0, base, temps[a], w, &at, spec ? &spec[a] : NULL, err);
        const double *vc = rc ? NULL : on_support(&at, v, w->vc);
        for (int e = 0; e < n_eps && !rc; e++)
            rc = sens_fd(&at, zt, v, vc, vmax, top, n, eps[e], w,
                         &fd[(size_t)a * (size_t)n_eps + e], err);
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
    rc = sens_row(z, n, &base, temps, n_t, eps, n_eps, v, &w, fd, spec, err);
    free(w.buf);
    if (rc) return al__err_prefix(err, (al_code)rc, "sensitivity: row");
    return 0;
}

/* The fresh directions q0 .. q0 + nb - 1 of row t, q = ti n_eps + ei (ti the T index, ei the
 * eps index), into v[nb, n]; u[dir_scratch(n)] scratch (unit_directions). */
static void fresh_batch(uint64_t seed, int layer, int head, int64_t t, size_t q0, int nb, int n_eps,
                        int64_t n, double *u, double *v) {
    al__rng r[AL__DIR_LANES];
    for (int k = 0; k < nb; k++) {
        size_t q = q0 + (size_t)k;
        al__rng_seed(&r[k], fresh_hash(seed, layer, head, t, (int)(q / (size_t)n_eps),
                                       (int)(q % (size_t)n_eps)));
    }
    unit_directions(r, nb, n, u, v);
}

/* One row under the readings: the shared v, or a fresh v per (T, eps), drawn AL__DIR_LANES at
 * a time; out[n_t, n_eps] then [n_t] spectral norms (want_spec 0: not computed, left as they
 * are). v[n] (shared) or v[AL__DIR_LANES, n] and
 * u[dir_scratch(n)] (fresh). */
static int sens_row_ex(const double *zt, int64_t n, const al_norm *base, const double *temps,
                       int n_t, const double *eps, int n_eps, uint64_t seed, int layer, int head,
                       int64_t t, int fresh, int want_spec, double *v, double *u, sens_ws *w,
                       double *out, al_error *err) {
    size_t nfd = (size_t)n_t * (size_t)n_eps, q = 0;
    double *spec = want_spec ? out + nfd : NULL;
    if (!fresh) {
        AL_MV(al_sensitivity_direction)(seed, layer, head, t, n, v);
        return sens_row(zt, n, base, temps, n_t, eps, n_eps, v, w, out, spec, err);
    }
    double mx0 = max_of(zt, n), mn0 = -max_neg(zt, n);
    int64_t top = first_of(zt, n, mx0);
    for (int a = 0; a < n_t; a++) { /* p0 and the spectral norm once per T, a v per (T, eps) */
        sens_at at;
        int rc = sens_prepare(zt, n, mx0, mn0, base, temps[a], w, &at, spec ? spec + a : NULL, err);
        for (int e = 0; e < n_eps && !rc; e++, q++) {
            size_t k = q % AL__DIR_LANES;
            if (k == 0) {
                size_t nb = nfd - q < AL__DIR_LANES ? nfd - q : AL__DIR_LANES;
                fresh_batch(seed, layer, head, t, q, (int)nb, n_eps, n, u, v);
            }
            const double *vq = v + k * (size_t)n;
            rc = sens_fd(&at, zt, vq, on_support(&at, vq, w->vc), absmax(vq, n), top, n, eps[e], w,
                         out + q, err);
        }
        if (rc) return rc;
    }
    return 0;
}

int AL_MV(al_head_sensitivity)(const double *z, int64_t L, int causal, const al_norm *nm,
                               const double *temps, int n_t, const double *eps, int n_eps,
                               uint64_t seed, int layer, int head, double *fd_mean,
                               double *spec_mean, al_error *err) {
    return al_head_sensitivity_ex(z, L, causal, nm, temps, n_t, eps, n_eps, seed, layer, head, NULL,
                                  fd_mean, spec_mean, err);
}

/* al_head_sensitivity_ex; spec_mean NULL: the spectral norms not computed */
static int head_sens(const double *z, int64_t L, int causal, const al_norm *nm, const double *temps,
                     int n_t, const double *eps, int n_eps, uint64_t seed, int layer, int head,
                     const al_sens_opts *so, double *fd_mean, double *spec_mean, al_error *err) {
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

    size_t nout = (size_t)n_t * (size_t)(n_eps + 1); /* [n_t, n_eps] fd, then [n_t] spectral */
    sens_ws w = {0};
    int scaled = so->logit_scale != 1.0;
    /* [dir_scratch(L)] the fresh draws, [AL__DIR_LANES or 1, L] the directions, [L] zs */
    size_t nu = so->fresh ? dir_scratch(L) : 0;
    size_t nv = (size_t)L * (so->fresh ? AL__DIR_LANES : 1);
    double *u = al__malloc_aligned((nu + nv + (scaled ? (size_t)L : 0)) * sizeof(double),
                                   "sensitivity directions", err);
    double *v = u ? u + nu : NULL;
    double *acc = al__calloc(nout, sizeof(double), "sensitivity sums", err);
    double *one = al__calloc(nout, sizeof(double), "sensitivity row", err);
    if (!u || !acc || !one || build_ws(&w, L, err)) {
        free(u);
        free(acc);
        free(one);
        return AL_E_NOMEM;
    }
    double *zs = scaled ? v + nv : NULL; /* [L] the row on the chosen scale */
    int64_t rows = 0;
    int64_t t0 = causal ? 1 : 0;
    size_t nfd = (size_t)n_t * (size_t)n_eps;
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
        rc = sens_row_ex(zt, n, &base, temps, n_t, eps, n_eps, seed, layer, head, t, so->fresh,
                         spec_mean != NULL, v, u, &w, one, err);
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
done:
    free(u);
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
                     spec_mean, err);
}

int AL_MV(al__head_sensitivity_fd)(const double *z, int64_t L, int causal, const al_norm *nm,
                                   const double *temps, int n_t, const double *eps, int n_eps,
                                   uint64_t seed, int layer, int head, const al_sens_opts *so,
                                   double *fd_mean, al_error *err) {
    return head_sens(z, L, causal, nm, temps, n_t, eps, n_eps, seed, layer, head, so, fd_mean, NULL,
                     err);
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

int al__sensitivity_directions(const al__rng *r, int nb, int64_t n, double *v) {
    return AL_MV_PICK(al__sensitivity_directions)(r, nb, n, v);
}

int al__fresh_normals(al__rng *r, int64_t n, double *x) {
    return AL_MV_PICK(al__fresh_normals)(r, n, x);
}

int al__head_sensitivity_fd(const double *z, int64_t L, int causal, const al_norm *nm,
                            const double *temps, int n_t, const double *eps, int n_eps,
                            uint64_t seed, int layer, int head, const al_sens_opts *so,
                            double *fd_mean, al_error *err) {
    return AL_MV_PICK(al__head_sensitivity_fd)(z, L, causal, nm, temps, n_t, eps, n_eps, seed,
                                               layer, head, so, fd_mean, err);
}
#endif
