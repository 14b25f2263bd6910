/* ops.c: the dense float32 kernels shared by every model family (see ops.h).
 *
 * Threads: one pool only. OpenBLAS is kept single-threaded and the kernels split their work
 * over OpenMP threads themselves (rows or columns of a matmul, heads and row blocks of the
 * attention), so OpenBLAS's pthreads never spin against OpenMP's. The thread count is
 * OpenMP's (OMP_NUM_THREADS, al__set_threads; default: all cores). */
#include "ops.h"

#include "cpu.h"

#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <string.h>

void al__set_threads(int n) {
    if (n <= 0) n = omp_get_num_procs();
    omp_set_num_threads(n);
}

int al__get_threads(void) {
    return omp_get_max_threads();
}

void al__blas_single(void) {
    if (openblas_get_num_threads() != 1) openblas_set_num_threads(1);
}

/* C[M, N] = A[M, K] @ op(B) (+ bias[N] broadcast over rows), op(B) = B [K, N] or B[N, K]^T,
 * as tiles [rows of a row part, a column chunk] taken by the OpenMP threads dynamically from a
 * list ordered largest first (guided self-scheduling): each of the rm row parts has its columns
 * cut into chunks of half of what is left for its threads, down to 64 columns (multiples of 32
 * floats, our micro-tile's width; 1/8 of a row part's share at most). Each tile is one
 * single-threaded product: our SGEMM (gemm.c) at the AVX-512 level on tiles of >= AL__SGEMM_MIN_M
 * rows, else OpenBLAS's. Row parts: one, when our SGEMM runs the tiles and there are >= 4 column
 * units per thread (it reads A in place and packs only B: one row part packs each column of B
 * once, where two would pack it twice); else one per thread while there are >= 64 rows each
 * (OpenBLAS packs A and B per call). So the threads start on large tiles (each tile re-reads A, and
 * OpenBLAS re-packs it: a finer uniform split cost ~5% per doubling) and end on small ones: a
 * thread whose core is shared with another process takes fewer tiles and the others wait at the end
 * for at most a small tile, not a third of their share.
 */
#define AL__GEMM_MAX_TILES 256
typedef struct gemm_tile_t {
    int m0, m1, c0, c1; /* rows [m0, m1), columns [c0, c1) */
} gemm_tile_t;

/* Our SGEMM (gemm.c) packs B per call: below this many rows OpenBLAS is faster (bench_gemm
 * --M 64 on Zen 5: 0.95-1.6x of OpenBLAS-Haswell; --M 1: 0.3-0.8x). */
#define AL__SGEMM_MIN_M 64
#define AL__GEMM_UNIT   32 /* columns of a tile: multiples of this */

/* the tile list of an M x N product on nt threads: its length (tiles[AL__GEMM_MAX_TILES]) */
static int gemm_plan(gemm_tile_t *tiles, int M, int N, int nt) {
    int rm = M / 64 < nt ? (M / 64 > 0 ? M / 64 : 1) : nt;
    int cunits = (N + AL__GEMM_UNIT - 1) / AL__GEMM_UNIT;
    if (al__cpu_level() >= AL__CPU_AVX512 && M >= AL__SGEMM_MIN_M && cunits >= 4 * nt) rm = 1;
    int per = (nt + rm - 1) / rm; /* threads per row part */
    int minw = cunits / (8 * per) > 2 ? 2 : (cunits / (8 * per) > 1 ? cunits / (8 * per) : 1);
    int n = 0, done[64] = {0}; /* column units handed out per row part (rm <= nt <= 64) */
    for (int left = 1; left;) {
        int last = n + 2 * rm > AL__GEMM_MAX_TILES; /* a sweep adds <= rm tiles: the rest now */
        left = 0;
        for (int p = 0; p < rm; p++) {
            int rest = cunits - done[p];
            if (rest <= 0) continue;
            int w = (rest + 2 * per - 1) / (2 * per);
            if (w < minw) w = minw;
            if (w > rest || rest - w < minw || last) w = rest;
            tiles[n].m0 = (int)((int64_t)M * p / rm),
            tiles[n].m1 = (int)((int64_t)M * (p + 1) / rm);
            tiles[n].c0 = done[p] * AL__GEMM_UNIT, done[p] += w;
            tiles[n].c1 = done[p] * AL__GEMM_UNIT < N ? done[p] * AL__GEMM_UNIT : N;
            n++;
            left |= done[p] < cunits;
        }
    }
    return n;
}

static void gemm_tile(float *y, const float *x, const float *W, const float *bias, int K, int N,
                      int transW, int m0, int m, int n0, int n) {
    float *yc = y + (size_t)m0 * N + n0;
    const float *xa = x + (size_t)m0 * K;
    /* W [N, K]: columns n0.. of the product are rows n0.. of W; W [K, N]: its columns n0.. */
    const float *Wn = transW ? W + (size_t)n0 * K : W + n0;
    int ldw = transW ? K : N;
    if (m >= AL__SGEMM_MIN_M &&
        !al__sgemm_bias(yc, N, xa, K, Wn, ldw, transW, m, n, K, bias ? bias + n0 : NULL))
        return;
    float beta = 0.0f;
    if (bias) {
        for (int i = 0; i < m; i++) memcpy(yc + (size_t)i * N, bias + n0, (size_t)n * sizeof *y);
        beta = 1.0f;
    }

    cblas_sgemm(CblasRowMajor, CblasNoTrans, transW ? CblasTrans : CblasNoTrans, m, n, K, 1.0f, xa,
                K, Wn, ldw, beta, yc, N);
}

static void gemm_bias(float *y, const float *x, const float *W, const float *bias, int M, int K,
                      int N, int transW) {
    al__blas_single();
    int nt = omp_in_parallel() ? 1 : omp_get_max_threads();
    if ((double)M * K * N < 4e6) nt = 1;
    if (nt > 64) nt = 64;
    if (nt <= 1) {
        gemm_tile(y, x, W, bias, K, N, transW, 0, M, 0, N);
        return;
    }
    gemm_tile_t tiles[AL__GEMM_MAX_TILES];
    int n = gemm_plan(tiles, M, N, nt);
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1)
    for (int t = 0; t < n; t++) {
        const gemm_tile_t *g = &tiles[t];
        gemm_tile(y, x, W, bias, K, N, transW, g->m0, g->m1 - g->m0, g->c0, g->c1 - g->c0);
    }
}

void al__matmul(float *y, const float *x, const float *W, const float *bias, int M, int K, int N) {
    gemm_bias(y, x, W, bias, M, K, N, 0);
}

void al__matmul_nt(float *y, const float *x, const float *W, const float *bias, int M, int K,
                   int N) {
    gemm_bias(y, x, W, bias, M, K, N, 1);
}

void al__rmsnorm(float *y, const float *x, const float *g, int M, int C, float eps) {
#pragma omp parallel for schedule(dynamic, 16) if (M >= 64 && !omp_in_parallel())
    for (int i = 0; i < M; i++) {
        const float *xi = x + (size_t)i * C; /* [C] */
        float *yi = y + (size_t)i * C;       /* [C] */
        double ss = 0.0;
#pragma omp simd reduction(+ : ss)
        for (int c = 0; c < C; c++) ss += (double)xi[c] * xi[c];
        float r = (float)(1.0 / sqrt(ss / C + eps));
        for (int c = 0; c < C; c++) yi[c] = xi[c] * r * g[c];
    }
}

/* exp(x) in float to about 2 ulp, written so that the compiler vectorises the loops calling it
 * (Cody-Waite range reduction, degree-6 polynomial, 2^n built in the exponent bits). */
static inline float vexpf(float x) {
    if (x != x) return x; /* NaN: itself (the clamp below would make it finite) */
    x = x < -87.3f ? -87.3f : (x > 88.3f ? 88.3f : x);
    const float shift = 12582912.0f; /* 1.5 * 2^23: adding it rounds to an integer */
    float t = x * 1.44269504088896341f + shift;
    float n = t - shift;
    float r = x - n * 0.693359375f; /* ln 2 split in a short high part ... */
    r = r - n * -2.12194440e-4f;    /* ... and the rest */
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    uint32_t ti, pi; /* unsigned: the shift of a negative n is well defined (mod 2^32) */
    memcpy(&ti, &t, 4);
    memcpy(&pi, &p, 4);
    pi += (ti - 0x4B400000u) << 23; /* 0x4B400000 = bits of the shift: ti - it = n */
    memcpy(&p, &pi, 4);
    return p;
}

/* ---- run-time dispatch (cpu.h): each vector kernel is compiled for its own target and chosen
 * per call by al__cpu_level(); the scalar code is the fallback and the reference. ---- */
#if defined(__x86_64__) && defined(__GNUC__)
#define AL_X86_DISPATCH 1
#include <immintrin.h>
#define AL_TARGET_AVX2   __attribute__((target("avx2,fma")))
#define AL_TARGET_AVX512 __attribute__((target("avx512f,avx2,fma")))

/* vexpf on 8 lanes (the same steps, AVX2 + FMA) */
static inline AL_TARGET_AVX2 __m256 vexp8(__m256 x) {
    const __m256 x0 = x; /* a NaN lane is returned as it came (the clamp would make it finite) */
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.3f)), _mm256_set1_ps(88.3f));
    const __m256 shift = _mm256_set1_ps(12582912.0f);
    __m256 t = _mm256_fmadd_ps(x, _mm256_set1_ps(1.44269504088896341f), shift);
    __m256 n = _mm256_sub_ps(t, shift);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(_mm256_mul_ps(p, r), r, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    __m256i e = _mm256_slli_epi32(
        _mm256_sub_epi32(_mm256_castps_si256(t), _mm256_set1_epi32(0x4B400000)), 23);
    __m256 y = _mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(p), e));
    return _mm256_blendv_ps(y, x0, _mm256_cmp_ps(x0, x0, _CMP_UNORD_Q));
}

/* vexpf on 16 lanes (the same steps, AVX-512 F) */
static inline AL_TARGET_AVX512 __m512 vexp16(__m512 x) {
    const __m512 x0 = x; /* a NaN lane is returned as it came, as in vexp8 */
    x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.3f)), _mm512_set1_ps(88.3f));
    const __m512 shift = _mm512_set1_ps(12582912.0f);
    __m512 t = _mm512_fmadd_ps(x, _mm512_set1_ps(1.44269504088896341f), shift);
    __m512 n = _mm512_sub_ps(t, shift);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_fmadd_ps(_mm512_mul_ps(p, r), r, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    __m512i e = _mm512_slli_epi32(
        _mm512_sub_epi32(_mm512_castps_si512(t), _mm512_set1_epi32(0x4B400000)), 23);
    __m512 y = _mm512_castsi512_ps(_mm512_add_epi32(_mm512_castps_si512(p), e));
    return _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(x0, x0, _CMP_UNORD_Q), x0);
}

/* the vector part of each kernel: returns how many leading elements it did */
static AL_TARGET_AVX2 size_t exp_avx2(float *x, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, vexp8(_mm256_loadu_ps(x + i)));
    return i;
}
static AL_TARGET_AVX512 size_t exp_avx512(float *x, size_t n) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(x + i, vexp16(_mm512_loadu_ps(x + i)));
    return i;
}
static AL_TARGET_AVX2 size_t gelu_tanh_avx2(float *x, size_t n) {
    const __m256 s = _mm256_set1_ps(-2.0f * 0.7978845608028654f), c = _mm256_set1_ps(0.044715f);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        __m256 u = _mm256_mul_ps(s, _mm256_fmadd_ps(_mm256_mul_ps(c, v), _mm256_mul_ps(v, v), v));
        __m256 d = _mm256_add_ps(_mm256_set1_ps(1.0f), vexp8(u));
        _mm256_storeu_ps(x + i, _mm256_div_ps(v, d));
    }
    return i;
}
static AL_TARGET_AVX512 size_t gelu_tanh_avx512(float *x, size_t n) {
    const __m512 s = _mm512_set1_ps(-2.0f * 0.7978845608028654f), c = _mm512_set1_ps(0.044715f);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 v = _mm512_loadu_ps(x + i);
        __m512 u = _mm512_mul_ps(s, _mm512_fmadd_ps(_mm512_mul_ps(c, v), _mm512_mul_ps(v, v), v));
        __m512 d = _mm512_add_ps(_mm512_set1_ps(1.0f), vexp16(u));
        _mm512_storeu_ps(x + i, _mm512_div_ps(v, d));
    }
    return i;
}
static AL_TARGET_AVX2 size_t silu_mul_avx2(float *gate, const float *up, size_t n) {
    const __m256 one = _mm256_set1_ps(1.0f), zero = _mm256_setzero_ps();
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 g = _mm256_loadu_ps(gate + i);
        __m256 d = _mm256_add_ps(one, vexp8(_mm256_sub_ps(zero, g)));
        _mm256_storeu_ps(gate + i, _mm256_mul_ps(_mm256_div_ps(g, d), _mm256_loadu_ps(up + i)));
    }
    return i;
}
static AL_TARGET_AVX512 size_t silu_mul_avx512(float *gate, const float *up, size_t n) {
    const __m512 one = _mm512_set1_ps(1.0f), zero = _mm512_setzero_ps();
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 g = _mm512_loadu_ps(gate + i);
        __m512 d = _mm512_add_ps(one, vexp16(_mm512_sub_ps(zero, g)));
        _mm512_storeu_ps(gate + i, _mm512_mul_ps(_mm512_div_ps(g, d), _mm512_loadu_ps(up + i)));
    }
    return i;
}
/* softmax's two passes over z[0 .. n8) (n8 a multiple of 8): *mx = their max; then, given the
 * final max m, w = exp(z - m) and the double sum of w */
static AL_TARGET_AVX2 float max_avx2(const float *z, int n8) {
    __m256 mv = _mm256_set1_ps(-INFINITY);
    for (int j = 0; j < n8; j += 8) mv = _mm256_max_ps(mv, _mm256_loadu_ps(z + j));
    float mx8[8], mx = -INFINITY;
    _mm256_storeu_ps(mx8, mv);
    for (int l = 0; l < 8; l++) mx = mx8[l] > mx ? mx8[l] : mx;
    return mx;
}
static AL_TARGET_AVX2 double expsum_avx2(float *w, const float *z, int n8, float mx) {
    __m256d s0 = _mm256_setzero_pd(), s1 = _mm256_setzero_pd();
    const __m256 m8 = _mm256_set1_ps(mx);
    for (int j = 0; j < n8; j += 8) {
        __m256 e = vexp8(_mm256_sub_ps(_mm256_loadu_ps(z + j), m8));
        _mm256_storeu_ps(w + j, e);
        s0 = _mm256_add_pd(s0, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
        s1 = _mm256_add_pd(s1, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
    }
    double s4[4];
    _mm256_storeu_pd(s4, _mm256_add_pd(s0, s1));
    return (s4[0] + s4[1]) + (s4[2] + s4[3]);
}
/* the same two passes at the AVX-512 level over all of z[0 .. n) (any n): the last step masked,
 * not a scalar tail (a causal row's up to 15 scalar exps cost about a quarter of its pass) */
static AL_TARGET_AVX512 float max_avx512(const float *z, int n) {
    __m512 mv = _mm512_set1_ps(-INFINITY);
    for (int j = 0; j < n; j += 16) {
        __mmask16 m = (__mmask16)(n - j >= 16 ? 0xffffu : (1u << (n - j)) - 1);
        mv = _mm512_max_ps(mv, _mm512_mask_loadu_ps(mv, m, z + j)); /* off lanes: mv itself */
    }
    return _mm512_reduce_max_ps(mv);
}
static AL_TARGET_AVX512 double expsum_avx512(float *w, const float *z, int n, float mx) {
    __m512d s0 = _mm512_setzero_pd(), s1 = _mm512_setzero_pd();
    const __m512 m16 = _mm512_set1_ps(mx);
    for (int j = 0; j < n; j += 16) {
        __mmask16 m = (__mmask16)(n - j >= 16 ? 0xffffu : (1u << (n - j)) - 1);
        __m512 e =
            _mm512_maskz_mov_ps(m, vexp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, z + j), m16)));
        _mm512_mask_storeu_ps(w + j, m, e);
        __m512i ei = _mm512_castps_si512(e);
        s0 = _mm512_add_pd(s0, _mm512_cvtps_pd(_mm512_castps512_ps256(e)));
        s1 = _mm512_add_pd(s1,
                           _mm512_cvtps_pd(_mm256_castsi256_ps(_mm512_extracti64x4_epi64(ei, 1))));
    }
    return _mm512_reduce_add_pd(_mm512_add_pd(s0, s1));
}
/* w[0 .. n) *= s: returns how many leading elements it did */
static AL_TARGET_AVX2 int scale_avx2(float *w, int n, float s) {
    const __m256 s8 = _mm256_set1_ps(s);
    int j = 0;
    for (; j + 8 <= n; j += 8) _mm256_storeu_ps(w + j, _mm256_mul_ps(_mm256_loadu_ps(w + j), s8));
    return j;
}
static AL_TARGET_AVX512 int scale_avx512(float *w, int n, float s) {
    const __m512 s16 = _mm512_set1_ps(s);
    int j = 0;
    for (; j + 16 <= n; j += 16)
        _mm512_storeu_ps(w + j, _mm512_mul_ps(_mm512_loadu_ps(w + j), s16));
    return j;
}
/* dst [j] = src [j] * s for j < n, 0 for n <= j < width, from dst's first 32- / 64-byte boundary
 * in streaming stores (plain ones before it): returns how many leading elements it did */
static AL_TARGET_AVX2 int scale_stream_avx2(float *dst, const float *src, int n, float s,
                                            int width) {
    const __m256 s8 = _mm256_set1_ps(s);
    int j = 0;
    for (; j < width && ((uintptr_t)(dst + j) & 31); j++) dst[j] = j < n ? src[j] * s : 0.0f;
    for (; j + 8 <= n; j += 8)
        _mm256_stream_ps(dst + j, _mm256_mul_ps(_mm256_loadu_ps(src + j), s8));
    for (; j < n && j < width; j++) dst[j] = src[j] * s;
    for (; j < width && ((uintptr_t)(dst + j) & 31); j++) dst[j] = 0.0f;
    for (; j + 8 <= width; j += 8) _mm256_stream_ps(dst + j, _mm256_setzero_ps());
    return j;
}
static AL_TARGET_AVX512 int scale_stream_avx512(float *dst, const float *src, int n, float s,
                                                int width) {
    const __m512 s16 = _mm512_set1_ps(s);
    int j = 0;
    for (; j < width && ((uintptr_t)(dst + j) & 63); j++) dst[j] = j < n ? src[j] * s : 0.0f;
    for (; j + 16 <= n; j += 16)
        _mm512_stream_ps(dst + j, _mm512_mul_ps(_mm512_loadu_ps(src + j), s16));
    for (; j < n && j < width; j++) dst[j] = src[j] * s;
    for (; j < width && ((uintptr_t)(dst + j) & 63); j++) dst[j] = 0.0f;
    for (; j + 16 <= width; j += 16) _mm512_stream_ps(dst + j, _mm512_setzero_ps());
    return j;
}
#define AL_CPU_IS(level) (al__cpu_level() == (level))
#else
#define AL_CPU_IS(level) 0
#endif

/* one row's layer norm: y [C] = (x - mean) / sqrt(var + eps) * g + b (b NULL: 0); the sums in
 * double, in lanes (omp simd: vectorised, any order) */
static void ln_row(float *y, const float *x, const float *g, const float *b, int C, float eps) {
    double s = 0.0;
#pragma omp simd reduction(+ : s)
    for (int c = 0; c < C; c++) s += x[c];
    double mean = s / C, v = 0.0;
#pragma omp simd reduction(+ : v)
    for (int c = 0; c < C; c++) {
        double e = x[c] - mean;
        v += e * e;
    }
    float rstd = (float)(1.0 / sqrt(v / C + eps)), mu = (float)mean;
    for (int c = 0; c < C; c++) y[c] = (x[c] - mu) * rstd * g[c] + (b ? b[c] : 0.0f);
}

void al__add_layernorm(float *x, const float *d, float *y, const float *g, const float *b, int M,
                       int C, float eps) {
#pragma omp parallel for schedule(dynamic, 16) if (M >= 64 && !omp_in_parallel())
    for (int i = 0; i < M; i++) {
        float *xi = x + (size_t)i * C; /* [C] */
        const float *di = d + (size_t)i * C;
        for (int c = 0; c < C; c++) xi[c] += di[c];
        ln_row(y + (size_t)i * C, xi, g, b, C, eps);
    }
}

void al__layernorm(float *y, const float *x, const float *g, const float *b, int M, int C,
                   float eps) {
#pragma omp parallel for schedule(dynamic, 16) if (M >= 64 && !omp_in_parallel())
    for (int i = 0; i < M; i++) ln_row(y + (size_t)i * C, x + (size_t)i * C, g, b, C, eps);
}

float al__expf(float x) {
    return vexpf(x);
}

void al__exp_inplace(float *x, size_t n) {
    size_t i = 0;
#ifdef AL_X86_DISPATCH
    if (AL_CPU_IS(AL__CPU_AVX512))
        i = exp_avx512(x, n);
    else if (AL_CPU_IS(AL__CPU_AVX2))
        i = exp_avx2(x, n);
#endif
    for (; i < n; i++) x[i] = vexpf(x[i]);
}

/* 0.5 v (1 + tanh u) = v / (1 + exp(-2u)), u = sqrt(2/pi) (v + 0.044715 v^3): no cancellation */
static inline float gelu_tanh1(float v) {
    float u = 0.7978845608028654f * (v + 0.044715f * v * v * v);
    return v / (1.0f + vexpf(-2.0f * u));
}

static void gelu_tanh_span(float *x, size_t n) {
    size_t i = 0;
#ifdef AL_X86_DISPATCH
    if (AL_CPU_IS(AL__CPU_AVX512))
        i = gelu_tanh_avx512(x, n);
    else if (AL_CPU_IS(AL__CPU_AVX2))
        i = gelu_tanh_avx2(x, n);
#endif
    for (; i < n; i++) x[i] = gelu_tanh1(x[i]);
}

void al__gelu_tanh(float *x, size_t n) {
    const size_t chunk = 16384;
    size_t n_chunks = (n + chunk - 1) / chunk;
#pragma omp parallel for schedule(dynamic, 1) if (n_chunks > 1 && !omp_in_parallel())
    for (size_t c = 0; c < n_chunks; c++) {
        size_t i0 = c * chunk, m = n - i0 < chunk ? n - i0 : chunk;
        gelu_tanh_span(x + i0, m);
    }
}

void al__gelu_erf(float *x, size_t n) {
#pragma omp parallel for schedule(dynamic, 4096) if (n >= 65536 && !omp_in_parallel())
    for (size_t i = 0; i < n; i++) x[i] = 0.5f * x[i] * (1.0f + erff(x[i] * 0.70710678118654752f));
}

static void silu_mul_span(float *gate, const float *up, size_t n) {
    size_t i = 0;
#ifdef AL_X86_DISPATCH
    if (AL_CPU_IS(AL__CPU_AVX512))
        i = silu_mul_avx512(gate, up, n);
    else if (AL_CPU_IS(AL__CPU_AVX2))
        i = silu_mul_avx2(gate, up, n);
#endif
    for (; i < n; i++) gate[i] = gate[i] / (1.0f + vexpf(-gate[i])) * up[i];
}

void al__silu_mul(float *gate, const float *up, size_t n) {
    const size_t chunk = 16384;
    size_t n_chunks = (n + chunk - 1) / chunk;
#pragma omp parallel for schedule(dynamic, 1) if (n_chunks > 1 && !omp_in_parallel())
    for (size_t c = 0; c < n_chunks; c++) {
        size_t i0 = c * chunk, m = n - i0 < chunk ? n - i0 : chunk;
        silu_mul_span(gate + i0, up + i0, m);
    }
}

void al__add(float *y, const float *x, size_t n) {
#pragma omp parallel for schedule(dynamic, 16384) if (n >= 262144 && !omp_in_parallel())
    for (size_t i = 0; i < n; i++) y[i] += x[i];
}

/* the scalar passes of softmax over z[0 .. n8), 8 independent lanes (vectorisable) */
static float max_scalar(const float *z, int n8) {
    float mx8[8] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY,
                    -INFINITY, -INFINITY, -INFINITY, -INFINITY};
    for (int j = 0; j < n8; j += 8)
        for (int l = 0; l < 8; l++) mx8[l] = z[j + l] > mx8[l] ? z[j + l] : mx8[l];
    float mx = -INFINITY;
    for (int l = 0; l < 8; l++) mx = mx8[l] > mx ? mx8[l] : mx;
    return mx;
}
static double expsum_scalar(float *w, const float *z, int n8, float mx) {
    double s8[8] = {0}, s = 0.0;
    for (int j = 0; j < n8; j += 8)
        for (int l = 0; l < 8; l++) {
            w[j + l] = vexpf(z[j + l] - mx);
            s8[l] += w[j + l];
        }
    for (int l = 0; l < 8; l++) s += s8[l];
    return s;
}

float al__softmax_exp(float *w, const float *z, int n) {
    int n8 = n & ~7; /* the vector passes' part: [0, n8), the rest scalar */
    float (*max_fn)(const float *, int) = max_scalar;
    double (*expsum_fn)(float *, const float *, int, float) = expsum_scalar;
#ifdef AL_X86_DISPATCH
    al__cpu_isa isa = al__cpu_level();
    if (isa == AL__CPU_AVX512)
        max_fn = max_avx512, expsum_fn = expsum_avx512, n8 = n; /* masked: all of it */
    else if (isa == AL__CPU_AVX2)
        max_fn = max_avx2, expsum_fn = expsum_avx2;
#endif
    float mx = max_fn(z, n8);
    for (int j = n8; j < n; j++) mx = z[j] > mx ? z[j] : mx;
    double s = expsum_fn(w, z, n8, mx); /* exp and its sum in one pass (the sum in double) */
    for (int j = n8; j < n; j++) {
        w[j] = vexpf(z[j] - mx);
        s += w[j];
    }
    return (float)(1.0 / s);
}

void al__softmax_row(float *w, const float *z, int n) {
    float inv = al__softmax_exp(w, z, n);
    int (*scale_fn)(float *, int, float) = NULL;
#ifdef AL_X86_DISPATCH
    if (AL_CPU_IS(AL__CPU_AVX512))
        scale_fn = scale_avx512;
    else if (AL_CPU_IS(AL__CPU_AVX2))
        scale_fn = scale_avx2;
#endif
    for (int j = scale_fn ? scale_fn(w, n, inv) : 0; j < n; j++) w[j] *= inv;
}

void al__scale_stream(float *dst, const float *src, int n, float s, int width) {
    int j = 0;
#ifdef AL_X86_DISPATCH
    if (AL_CPU_IS(AL__CPU_AVX512))
        j = scale_stream_avx512(dst, src, n, s, width);
    else if (AL_CPU_IS(AL__CPU_AVX2))
        j = scale_stream_avx2(dst, src, n, s, width);
#endif
    for (; j < width; j++) dst[j] = j < n ? src[j] * s : 0.0f;
}

void al__stream_fence(void) {
#ifdef AL_X86_DISPATCH
    _mm_sfence();
#endif
}
