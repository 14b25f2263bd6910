/* attention.c: one layer's multi-head attention with the streaming capture (see ops.h).
 *
 * Work is split into tasks (query head h, block of AL__ATTN_BLOCK query rows), run by the
 * OpenMP threads with dynamic scheduling, heaviest blocks first. A task computes
 *   logits[rows, keys] = q[rows] k[keys]^T / sqrt(d_head)        (one sgemm)
 *   weights = softmax of each row over its visible keys          (float exp, double sum)
 *   out[rows, h]       = weights[rows, keys] v[keys]             (one sgemm)
 * where keys = 0..last row of the block for causal models (the masked upper triangle is never
 * computed beyond the diagonal block) and 0..T-1 for encoders. The logits of a selected head go
 * straight into the capture array; the weights are computed in per-thread rows, as exp(z - max)
 * with the softmax's 1 / sum applied by the tile kernels' w v (their rows' scales) and by the
 * write of a selected head's weights into the capture array (streaming stores: a large array
 * read by the observer after the layer, not by this pass; no read-for-ownership of its lines).
 * (Measured: -1.4% CPU per GPT-2 forward with every head's weights captured against plain stores,
 * docs/benchmarks.md.) */
#include "hooks.h"
#include "ops.h"

#include "cpu.h"

#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

void al__attn_ws_free(al__attn_ws *ws) {
    if (!ws) return;
    free(ws->cap);
    free(ws->scratch);
    free(ws->idx);
    free(ws->pack);
    free(ws->vscr);
    memset(ws, 0, sizeof *ws);
}

/* Makes *buf hold at least n elements of size sz (contents not kept). */
static int grow(void **buf, size_t *have, size_t n, size_t sz, const char *what, al_error *err) {
    if (n <= *have && *buf) return 0;
    size_t bytes;
    if (!al__mul_ok(n ? n : 1, sz, &bytes))
        return al__err(err, AL_E_NOMEM, "attention: %s of %zu elements overflows", what, n);
    free(*buf);
    *buf = al__malloc_aligned(bytes, what, err);
    *have = *buf ? n : 0;
    return *buf ? 0 : AL_E_NOMEM;
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define AL_ATTN_AVX2   1
#define AL_ATTN_TARGET __attribute__((target("avx2,fma")))
/* The two products of a task as register-tiled AVX2 kernels on the packed keys and values
 * (6 rows x 16 columns of accumulators). They skip the tiles above the causal diagonal, which
 * sgemm cannot, and avoid re-packing the keys for every block. Compiled for AVX2 + FMA by their
 * target attribute and used when al__cpu_level() (cpu.h) is avx2 (avx512: the 512-bit forms
 * below); else the two sgemms of al__attention_ws. */

/* 12 named accumulators (6 rows x 2 vectors): named so that they stay in registers */
#define ACC_DECL                                                                                   \
    __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00,       \
           c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00
#define ACC_FMA(r, p, x0, x1)                                                                      \
    do {                                                                                           \
        __m256 b_ = _mm256_broadcast_ss(p);                                                        \
        c##r##0 = _mm256_fmadd_ps(b_, x0, c##r##0);                                                \
        c##r##1 = _mm256_fmadd_ps(b_, x1, c##r##1);                                                \
    } while (0)
/* the accumulators into tile[6][16], row r times s[r] (__m256 s[6]) */
#define ACC_STORE_ROW(tile, s, r)                                                                  \
    do {                                                                                           \
        _mm256_storeu_ps(tile[r], _mm256_mul_ps(c##r##0, s[r]));                                   \
        _mm256_storeu_ps(tile[r] + 8, _mm256_mul_ps(c##r##1, s[r]));                               \
    } while (0)
#define ACC_STORE(tile, s)                                                                         \
    do {                                                                                           \
        ACC_STORE_ROW(tile, s, 0);                                                                 \
        ACC_STORE_ROW(tile, s, 1);                                                                 \
        ACC_STORE_ROW(tile, s, 2);                                                                 \
        ACC_STORE_ROW(tile, s, 3);                                                                 \
        ACC_STORE_ROW(tile, s, 4);                                                                 \
        ACC_STORE_ROW(tile, s, 5);                                                                 \
    } while (0)

/* the six row pointers of a tile of mr rows at base (ld ld): rows past mr repeat the last */
#define ROWS6(p, base, ld, mr)                                                                     \
    const float *p##0 = (base), *p##1 = (base) + (size_t)(1 < (mr) ? 1 : (mr)-1) * (ld),           \
                *p##2 = (base) + (size_t)(2 < (mr) ? 2 : (mr)-1) * (ld),                           \
                *p##3 = (base) + (size_t)(3 < (mr) ? 3 : (mr)-1) * (ld),                           \
                *p##4 = (base) + (size_t)(4 < (mr) ? 4 : (mr)-1) * (ld),                           \
                *p##5 = (base) + (size_t)(5 < (mr) ? 5 : (mr)-1) * (ld)

/* L[m, kend] (ld lL) = scale * Q[m, D] (ld ldq) @ K^T, the keys packed in panels of 16:
 * Kp[Tp / 16][D][16] (zero past T). For causal rows only the tiles holding keys
 * j <= r0 + row are computed. */
static AL_ATTN_TARGET void qk_tiles(float *L, size_t lL, const float *Q, size_t ldq,
                                    const float *Kp, int m, int kend, int D, float scale,
                                    int causal, int r0) {
    const __m256 s1 = _mm256_set1_ps(scale), sc[6] = {s1, s1, s1, s1, s1, s1};
    float tile[6][16];
    for (int i0 = 0; i0 < m; i0 += 6) {
        int mr = m - i0 < 6 ? m - i0 : 6;
        int jmax = causal ? (r0 + i0 + mr < kend ? r0 + i0 + mr : kend) : kend;
        ROWS6(q, Q + (size_t)i0 * ldq, ldq, mr);
        for (int j0 = 0; j0 < jmax; j0 += 16) {
            ACC_DECL;
            const float *kp = Kp + (size_t)(j0 / 16) * D * 16;
            for (int d = 0; d < D; d++, kp += 16) {
                __m256 k0 = _mm256_loadu_ps(kp), k1 = _mm256_loadu_ps(kp + 8);
                ACC_FMA(0, q0 + d, k0, k1);
                ACC_FMA(1, q1 + d, k0, k1);
                ACC_FMA(2, q2 + d, k0, k1);
                ACC_FMA(3, q3 + d, k0, k1);
                ACC_FMA(4, q4 + d, k0, k1);
                ACC_FMA(5, q5 + d, k0, k1);
            }
            ACC_STORE(tile, sc);
            int nj = kend - j0 < 16 ? kend - j0 : 16;
            for (int r = 0; r < mr; r++)
                memcpy(L + (size_t)(i0 + r) * lL + j0, tile[r], (size_t)nj * sizeof(float));
        }
    }
}

/* O[m, D] (ld ldo) = diag(rs[m]) W[m, *] (ld lW) @ V, the values packed in panels of 16 columns:
 * Vp[Dp / 16][T][16] (zero past D); rs: each row's scale (the softmax's 1 / sum). The rows of a
 * tile read keys below jmax (the weights past a row's last visible key are zero). */
static AL_ATTN_TARGET void wv_tiles(float *O, size_t ldo, const float *W, size_t lW,
                                    const float *rs, const float *Vp, int T, int m, int kend, int D,
                                    int causal, int r0) {
    float tile[6][16];
    for (int i0 = 0; i0 < m; i0 += 6) {
        int mr = m - i0 < 6 ? m - i0 : 6;
        int jmax = causal ? (r0 + i0 + mr < kend ? r0 + i0 + mr : kend) : kend;
        ROWS6(w, W + (size_t)i0 * lW, lW, mr);
        __m256 sr[6]; /* the rows' scales (rows past mr: any) */
        for (int r = 0; r < 6; r++) sr[r] = _mm256_set1_ps(rs[i0 + (r < mr ? r : mr - 1)]);
        for (int c0 = 0; c0 < D; c0 += 16) {
            ACC_DECL;
            const float *vp = Vp + (size_t)(c0 / 16) * T * 16;
            for (int j = 0; j < jmax; j++, vp += 16) {
                __m256 v0 = _mm256_loadu_ps(vp), v1 = _mm256_loadu_ps(vp + 8);
                ACC_FMA(0, w0 + j, v0, v1);
                ACC_FMA(1, w1 + j, v0, v1);
                ACC_FMA(2, w2 + j, v0, v1);
                ACC_FMA(3, w3 + j, v0, v1);
                ACC_FMA(4, w4 + j, v0, v1);
                ACC_FMA(5, w5 + j, v0, v1);
            }
            ACC_STORE(tile, sr);
            int nc = D - c0 < 16 ? D - c0 : 16;
            for (int r = 0; r < mr; r++)
                memcpy(O + (size_t)(i0 + r) * ldo + c0, tile[r], (size_t)nc * sizeof(float));
        }
    }
}

/* The same two products with AVX-512 F: 6 rows x 32 columns of accumulators (two 16-float
 * panels side by side; a lone last panel takes the 16-column form). Compiled by their target
 * attribute (no -march needed) and used when al__cpu_level() is avx512. */
#define AL_ATTN_AVX512    1
#define AL_ATTN_TARGET512 __attribute__((target("avx512f,avx2,fma")))
#define Z_DECL                                                                                     \
    __m512 z00 = _mm512_setzero_ps(), z01 = z00, z10 = z00, z11 = z00, z20 = z00, z21 = z00,       \
           z30 = z00, z31 = z00, z40 = z00, z41 = z00, z50 = z00, z51 = z00
#define Z_FMA(r, p, x0, x1)                                                                        \
    do {                                                                                           \
        __m512 b_ = _mm512_set1_ps(*(p));                                                          \
        z##r##0 = _mm512_fmadd_ps(b_, x0, z##r##0);                                                \
        z##r##1 = _mm512_fmadd_ps(b_, x1, z##r##1);                                                \
    } while (0)
/* the accumulators (row r times s[r], __m512 s[6]) into rows [0, mr) of dst (ld ld), columns
 * [0, 16) under mask m0 and [16, 32) under m1: straight into the destination, no copy through a
 * tile */
#define Z_ROW(r, dst, ld, m0, m1, s)                                                               \
    do {                                                                                           \
        _mm512_mask_storeu_ps((dst) + (size_t)(r) * (ld), m0, _mm512_mul_ps(z##r##0, s[r]));       \
        _mm512_mask_storeu_ps((dst) + (size_t)(r) * (ld) + 16, m1, _mm512_mul_ps(z##r##1, s[r]));  \
    } while (0)
#define Z_STORE(dst, ld, mr, m0, m1, s)                                                            \
    do {                                                                                           \
        Z_ROW(0, dst, ld, m0, m1, s);                                                              \
        if ((mr) > 1) Z_ROW(1, dst, ld, m0, m1, s);                                                \
        if ((mr) > 2) Z_ROW(2, dst, ld, m0, m1, s);                                                \
        if ((mr) > 3) Z_ROW(3, dst, ld, m0, m1, s);                                                \
        if ((mr) > 4) Z_ROW(4, dst, ld, m0, m1, s);                                                \
        if ((mr) > 5) Z_ROW(5, dst, ld, m0, m1, s);                                                \
    } while (0)
/* the masks of the first n <= 32 columns of a 32-column tile: *m0 over [0, 16), *m1 over [16, 32)
 */
static inline void cols_masks(int n, __mmask16 *m0, __mmask16 *m1) {
    *m0 = (__mmask16)(n >= 16 ? 0xffffu : (1u << n) - 1);
    *m1 = (__mmask16)(n >= 32 ? 0xffffu : (n > 16 ? (1u << (n - 16)) - 1 : 0u));
}

/* qk_tiles with 512-bit vectors: the same arguments and packing (Kp [Tp / 16][D][16]) */
static AL_ATTN_TARGET512 void qk_tiles512(float *L, size_t lL, const float *Q, size_t ldq,
                                          const float *Kp, int m, int kend, int D, float scale,
                                          int causal, int r0) {
    const __m512 s1 = _mm512_set1_ps(scale), zero = _mm512_setzero_ps(),
                 sc[6] = {s1, s1, s1, s1, s1, s1};
    for (int i0 = 0; i0 < m; i0 += 6) {
        int mr = m - i0 < 6 ? m - i0 : 6;
        int jmax = causal ? (r0 + i0 + mr < kend ? r0 + i0 + mr : kend) : kend;
        ROWS6(q, Q + (size_t)i0 * ldq, ldq, mr);
        for (int j0 = 0; j0 < jmax; j0 += 32) {
            Z_DECL;
            const float *ka = Kp + (size_t)(j0 / 16) * D * 16, *kb = ka + (size_t)D * 16;
            if (j0 + 16 < jmax) { /* two panels */
                for (int d = 0; d < D; d++) {
                    __m512 k0 = _mm512_loadu_ps(ka + 16 * d), k1 = _mm512_loadu_ps(kb + 16 * d);
                    Z_FMA(0, q0 + d, k0, k1);
                    Z_FMA(1, q1 + d, k0, k1);
                    Z_FMA(2, q2 + d, k0, k1);
                    Z_FMA(3, q3 + d, k0, k1);
                    Z_FMA(4, q4 + d, k0, k1);
                    Z_FMA(5, q5 + d, k0, k1);
                }
            } else { /* the last panel alone: the second half stays zero */
                for (int d = 0; d < D; d++) {
                    __m512 k0 = _mm512_loadu_ps(ka + 16 * d);
                    Z_FMA(0, q0 + d, k0, zero);
                    Z_FMA(1, q1 + d, k0, zero);
                    Z_FMA(2, q2 + d, k0, zero);
                    Z_FMA(3, q3 + d, k0, zero);
                    Z_FMA(4, q4 + d, k0, zero);
                    Z_FMA(5, q5 + d, k0, zero);
                }
            }
            __mmask16 m0, m1;
            cols_masks(kend - j0, &m0, &m1);
            Z_STORE(L + (size_t)i0 * lL + j0, lL, mr, m0, m1, sc);
        }
    }
}

/* wv_tiles with 512-bit vectors: the same arguments and packing (Vp [Dp / 16][T][16]) */
static AL_ATTN_TARGET512 void wv_tiles512(float *O, size_t ldo, const float *W, size_t lW,
                                          const float *rs, const float *Vp, int T, int m, int kend,
                                          int D, int causal, int r0) {
    const __m512 zero = _mm512_setzero_ps();
    for (int i0 = 0; i0 < m; i0 += 6) {
        int mr = m - i0 < 6 ? m - i0 : 6;
        int jmax = causal ? (r0 + i0 + mr < kend ? r0 + i0 + mr : kend) : kend;
        ROWS6(w, W + (size_t)i0 * lW, lW, mr);
        __m512 sr[6]; /* the rows' scales (rows past mr: any) */
        for (int r = 0; r < 6; r++) sr[r] = _mm512_set1_ps(rs[i0 + (r < mr ? r : mr - 1)]);
        for (int c0 = 0; c0 < D; c0 += 32) {
            Z_DECL;
            const float *va = Vp + (size_t)(c0 / 16) * T * 16, *vb = va + (size_t)T * 16;
            if (c0 + 16 < D) {
                for (int j = 0; j < jmax; j++) {
                    __m512 v0 = _mm512_loadu_ps(va + 16 * j), v1 = _mm512_loadu_ps(vb + 16 * j);
                    Z_FMA(0, w0 + j, v0, v1);
                    Z_FMA(1, w1 + j, v0, v1);
                    Z_FMA(2, w2 + j, v0, v1);
                    Z_FMA(3, w3 + j, v0, v1);
                    Z_FMA(4, w4 + j, v0, v1);
                    Z_FMA(5, w5 + j, v0, v1);
                }
            } else {
                for (int j = 0; j < jmax; j++) {
                    __m512 v0 = _mm512_loadu_ps(va + 16 * j);
                    Z_FMA(0, w0 + j, v0, zero);
                    Z_FMA(1, w1 + j, v0, zero);
                    Z_FMA(2, w2 + j, v0, zero);
                    Z_FMA(3, w3 + j, v0, zero);
                    Z_FMA(4, w4 + j, v0, zero);
                    Z_FMA(5, w5 + j, v0, zero);
                }
            }
            __mmask16 m0, m1;
            cols_masks(D - c0, &m0, &m1);
            Z_STORE(O + (size_t)i0 * ldo + c0, ldo, mr, m0, m1, sr);
        }
    }
}
#endif

static int wants_capture(const al__attn *a) {
    const al_capture_request *r = a->req;
    return r && r->fn && r->what && (!r->layers || r->layers[a->layer]);
}

int al__attention(const al__attn *a, al_error *err) {
    al__attn_ws ws = {0};
    int rc = al__attention_ws(a, &ws, err);
    al__attn_ws_free(&ws);
    return rc;
}

/* The selected heads and the capture arrays of one layer's attention (in ws). */
typedef struct cap_bufs {
    int *heads, *kv_head, *sel_of; /* [n_sel], [H], [H] (sel_of: -1 when not selected) */
    int n_sel;
    float *q, *k, *v;        /* [n_sel, T, D] or NULL */
    float *logits, *weights; /* [n_sel, T, T] or NULL */
    float *precap;           /* [n_sel, T, T] logits before the soft cap, or NULL */
} cap_bufs;

static int capture_layout(const al__attn *a, al__attn_ws *ws, int capture, unsigned what,
                          cap_bufs *cb, al_error *err) {
    const int H = a->n_head, G = a->n_kv_head, T = a->T, D = a->d_head;
    /* head selection: heads [n_sel], kv_head [H], sel_of [H] (-1: not selected) */
    int rc =
        grow((void **)&ws->idx, &ws->idx_n, (size_t)3 * H, sizeof(int), "attention indices", err);
    if (rc) return rc;
    int *heads = ws->idx, *kv_head = ws->idx + H, *sel_of = ws->idx + 2 * H;
    int n_sel = 0;
    for (int h = 0; h < H; h++) {
        kv_head[h] = h / (H / G);
        int on = capture && (!a->req->heads || a->req->heads[h]);
        sel_of[h] = on ? n_sel : -1;
        if (on) heads[n_sel++] = h;
    }

    /* capture arrays, one block: q, k, v [n_sel, T, D], logits, weights [n_sel, T, T] */
    size_t n_qkv = (size_t)n_sel * T * D, n_tt = (size_t)n_sel * T * T, need = 0;
    const unsigned qkv_bits[3] = {AL_CAP_Q, AL_CAP_K, AL_CAP_V};
    for (int i = 0; i < 3; i++)
        if (what & qkv_bits[i]) need += n_qkv;
    if (what & AL_CAP_LOGITS) need += n_tt;
    if (what & AL_CAP_WEIGHTS) need += n_tt;
    if ((what & AL_CAP_LOGITS_PRECAP) && a->softcap > 0) need += n_tt;
    if (need > ws->cap_n) ws->above_w = ws->above_l = NULL; /* a new block: nothing known */
    if (need &&
        (rc = grow((void **)&ws->cap, &ws->cap_n, need, sizeof(float), "capture buffers", err)))
        return rc;
    float *p = ws->cap;
    float *cq = NULL, *ck = NULL, *cv = NULL, *clog = NULL, *cw = NULL;
    if (what & AL_CAP_Q) cq = p, p += n_qkv;       /* [n_sel, T, D] */
    if (what & AL_CAP_K) ck = p, p += n_qkv;       /* [n_sel, T, D] */
    if (what & AL_CAP_V) cv = p, p += n_qkv;       /* [n_sel, T, D] */
    if (what & AL_CAP_LOGITS) clog = p, p += n_tt; /* [n_sel, T, T] */
    if (what & AL_CAP_WEIGHTS) cw = p, p += n_tt;  /* [n_sel, T, T] */
    float *cpre = NULL;                            /* [n_sel, T, T] logits before the cap */
    if ((what & AL_CAP_LOGITS_PRECAP) && a->softcap > 0) cpre = p, p += n_tt;

    *cb = (cap_bufs){heads, kv_head, sel_of, n_sel, cq, ck, cv, clog, cw, cpre};
    return 0;
}

/* Hands the layer's captured arrays to the observer (a->req->fn); its non-zero return stops the
 * forward (AL_E_CANCELLED unless it is an al_code). */
static int deliver_capture(const al__attn *a, const cap_bufs *cb, unsigned what, float scale,
                           al_error *err) {
    const int T = a->T, H = a->n_head, G = a->n_kv_head, D = a->d_head;
    const float softcap = a->softcap;
    const int n_sel = cb->n_sel;
    int *heads = cb->heads, *kv_head = cb->kv_head;
    float *cq = cb->q, *ck = cb->k, *cv = cb->v, *clog = cb->logits, *cw = cb->weights;
    float *cpre = cb->precap;
    al_capture cap = {
        .layer = a->layer,
        .T = T,
        .n_head = H,
        .n_kv_head = G,
        .d_head = D,
        .d_model = a->d_model,
        .causal = a->causal,
        .window = a->causal ? a->window : 0,
        .logits_precap = cpre,
        .softcap = softcap,
        .scale = scale,
        .n_sel = n_sel,
        .heads = heads,
        .kv_head = kv_head,
        .q = cq,
        .k = ck,
        .v = cv,
        .logits = clog,
        .weights = cw,
        .hidden = (what & AL_CAP_HIDDEN) ? a->hidden : NULL,
        .embed = (what & AL_CAP_EMBED) ? a->embed : NULL,
        .residual = (what & AL_CAP_RESIDUAL) ? a->residual : NULL,
    };
    al_error local = {0};
    al_error *e = err ? err : &local;
    e->msg[0] = 0;
    int rc = a->req->fn(a->req->user, &cap, e);
    if (rc) {
        if (rc < 0 || rc > AL_E_CANCELLED) rc = AL_E_CANCELLED;
        if (!e->msg[0])
            al__err(e, (al_code)rc, "capture observer stopped the forward at layer %d", a->layer);
        e->code = (al_code)rc;
        return rc;
    }
    return 0;
}

#ifdef AL_ATTN_AVX512
/* pack_group at the AVX-512 level: the keys through 16 x 16 transposes, the values 16 at a time */
static AL_ATTN_TARGET512 void pack_group512(const al__attn *a, int g, float *kt, float *vp,
                                            size_t Tp, size_t Dp) {
    const int T = a->T, D = a->d_head;
    for (int t0 = 0; t0 < (int)Tp; t0 += 16) /* keys t0.. as columns of the panel [D][16] */
        al__transpose16_avx512(kt + (size_t)t0 * D, 16,
                               a->k + (size_t)t0 * a->k_stride + (size_t)g * D, a->k_stride,
                               T - t0 < 16 ? T - t0 : 16, D);
    for (int t = 0; t < T; t++) {
        const float *vr = a->v + t * a->v_stride + (size_t)g * D;
        for (int c0 = 0; c0 < (int)Dp; c0 += 16) {
            int nc = D - c0 < 16 ? D - c0 : 16;
            __mmask16 m = (__mmask16)(nc == 16 ? 0xffffu : (1u << nc) - 1);
            _mm512_storeu_ps(vp + (size_t)c0 * T + (size_t)t * 16,
                             _mm512_maskz_loadu_ps(m, vr + c0));
        }
    }
}
#endif

/* Key/value group g packed for the tile kernels: keys kt [Tp / 16, D, 16] (rows past T zero),
 * values vp [Dp / 16, T, 16] (columns past D zero). */
static void pack_group(const al__attn *a, int g, float *kt, float *vp, size_t Tp, size_t Dp) {
    const int T = a->T, D = a->d_head;
#ifdef AL_ATTN_AVX512
    if (al__cpu_level() >= AL__CPU_AVX512) {
        pack_group512(a, g, kt, vp, Tp, Dp);
        return;
    }
#endif
    for (int t = 0; t < T; t++) {
        const float *kr = a->k + t * a->k_stride + (size_t)g * D;
        float *panel = kt + (size_t)(t / 16) * D * 16 + t % 16; /* [D] at stride 16 */
        for (int d = 0; d < D; d++) panel[(size_t)d * 16] = kr[d];
        const float *vr = a->v + t * a->v_stride + (size_t)g * D;
        for (size_t c = 0; c < Dp; c++)
            vp[(c / 16) * T * 16 + (size_t)t * 16 + c % 16] = c < (size_t)D ? vr[c] : 0.0f;
    }
    for (size_t t = (size_t)T; t < Tp; t++) /* the last panel's padding */
        for (int d = 0; d < D; d++) kt[(t / 16) * D * 16 + (size_t)d * 16 + t % 16] = 0.0f;
}

int al__attention_ws(const al__attn *a, al__attn_ws *ws, al_error *err) {
    const int T = a->T, H = a->n_head, G = a->n_kv_head, D = a->d_head;
    if (T < 1 || H < 1 || G < 1 || D < 1 || H % G != 0 || !a->q || !a->k || !a->v || !a->out)
        return al__err(err, AL_E_INVALID,
                       "attention: bad shape (T %d, heads %d, kv heads %d, d_head %d)", T, H, G, D);
    /* one unit of work of a forward: a layer (the caller may stop it here, include/attnlim.h) */
    int rc = al__poll("forward", a->layer, 0, err);
    if (rc) return rc;
    const int B = AL__ATTN_BLOCK;
    const int capture = wants_capture(a);
    const unsigned what = capture ? a->req->what : 0;

    cap_bufs cb;
    if ((rc = capture_layout(a, ws, capture, what, &cb, err))) return rc;
    const int n_sel = cb.n_sel, *heads = cb.heads, *kv_head = cb.kv_head, *sel_of = cb.sel_of;
    float *cq = cb.q, *ck = cb.k, *cv = cb.v, *clog = cb.logits, *cw = cb.weights,
          *cpre = cb.precap;

    int nt = omp_in_parallel() ? 1 : omp_get_max_threads();
    if (nt < 1) nt = 1;
    size_t per_thread = (size_t)2 * B * T; /* logits rows [B, T] + weights rows [B, T] */
    if ((rc = grow((void **)&ws->scratch, &ws->scratch_n, per_thread * nt, sizeof(float),
                   "attention scratch", err)))
        return rc;

    /* attention variants (attn_variant.c): their per-thread rows, only when this layer has one */
    const al_attn_variant *mod = al__attn_mod_layer(a->mod, a->layer) ? a->mod : NULL;
    const size_t per_thread_v = (size_t)AL__VSCR_PER_KEY * T;
    if (mod && (rc = grow((void **)&ws->vscr, &ws->vscr_n, per_thread_v * nt, sizeof(float),
                          "attention variant scratch", err)))
        return rc;

    int tiles = 0; /* the AVX-512 (2) or AVX2 (1) tile kernels, or sgemm (0) */
    float *Kt = NULL, *Vp = NULL;
    size_t Tp = 0, Dp = 0;
#ifdef AL_ATTN_AVX2
    tiles = al__cpu_level() >= AL__CPU_AVX512 ? 2 : al__cpu_level() >= AL__CPU_AVX2;
    /* keys in panels Kt [G, Tp / 16, D, 16] (zero-padded to Tp = T rounded up to 16) and values
     * in panels Vp [G, Dp / 16, T, 16] (zero-padded to Dp = D rounded up to 16), packed once
     * per layer */
    Tp = ((size_t)T + 15) & ~(size_t)15, Dp = ((size_t)D + 15) & ~(size_t)15;
    if (tiles && (rc = grow((void **)&ws->pack, &ws->pack_n, (size_t)G * (D * Tp + Dp * T),
                            sizeof(float), "attention packed keys and values", err)))
        return rc;
    if (tiles) Kt = ws->pack, Vp = ws->pack + (size_t)G * D * Tp;
#endif
    al__blas_single();
    const int n_blocks = (T + B - 1) / B;
    /* the first query row computed: a captured layer, or a bidirectional one, computes all */
    const int row0 = !capture && a->causal && a->row0 > 0 && a->row0 < T ? a->row0 : 0;
    const int n_tasks = (n_blocks - row0 / B) * H; /* the blocks holding rows >= row0 */
    const float scale = a->scale > 0 ? a->scale : (float)(1.0 / sqrt((double)D));
    const float softcap = a->softcap;
    const size_t ldo = (size_t)H * D;
    /* the capture arrays' parts above the blocks: already set by the last pass (same layout)? */
    const int same = a->causal && T == ws->above_T && n_sel == ws->above_n;
    const int skip_w = same && cw && cw == ws->above_w,
              skip_l = same && clog && clog == ws->above_l;
    ws->above_w = ws->above_l = NULL; /* until this pass is complete */
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        float *scr = ws->scratch + per_thread * (size_t)omp_get_thread_num();
        float *vscr = mod ? ws->vscr + per_thread_v * (size_t)omp_get_thread_num() : NULL;
        /* capture copies of q, k, v: [n_sel, T, D] from the strided inputs */
#pragma omp for schedule(dynamic, 1) nowait
        for (int s = 0; s < n_sel; s++) {
            int h = heads[s], g = kv_head[h];
            for (int t = 0; t < T; t++) {
                size_t o = ((size_t)s * T + t) * D;
                if (cq) memcpy(cq + o, a->q + t * a->q_stride + (size_t)h * D, D * sizeof(float));
                if (ck) memcpy(ck + o, a->k + t * a->k_stride + (size_t)g * D, D * sizeof(float));
                if (cv) memcpy(cv + o, a->v + t * a->v_stride + (size_t)g * D, D * sizeof(float));
            }
        }
#pragma omp for schedule(dynamic, 1)
        for (int g = 0; g < (tiles ? G : 0); g++)
            pack_group(a, g, Kt + (size_t)g * D * Tp, Vp + (size_t)g * Dp * T, Tp, Dp);
#pragma omp for schedule(dynamic, 1)
        for (int task = 0; task < n_tasks; task++) {
            int bi = n_blocks - 1 - task / H, h = task % H, g = kv_head[h], sel = sel_of[h];
            int r0 = bi * B > row0 ? bi * B : row0, r1 = bi * B + B < T ? bi * B + B : T;
            int m = r1 - r0;
            int kend = a->causal ? r1 : T; /* keys this block can see */
            /* logits rows [m, kend] (ld lL): the capture array or scratch */
            float *L = scr;
            size_t lL = (size_t)kend;
            if (clog && sel >= 0) L = clog + ((size_t)sel * T + r0) * T, lL = (size_t)T;
            /* weights rows [m, kend] (ld lW): scratch, or over the logits (scratch); a captured
             * head's are written to the capture array (wdst, ld T) as they are finished */
            float *W = L, *wdst = cw && sel >= 0 ? cw + ((size_t)sel * T + r0) * T : NULL;
            size_t lW = lL;
            if (wdst || L != scr) W = scr + (size_t)B * T, lW = (size_t)kend;
            float rs[AL__ATTN_BLOCK]; /* each row's scale: its softmax's 1 / sum, left to wv */
#ifdef AL_ATTN_AVX2
            if (tiles == 2)
                qk_tiles512(L, lL, a->q + r0 * a->q_stride + (size_t)h * D, a->q_stride,
                            Kt + (size_t)g * D * Tp, m, kend, D, scale, a->causal, r0);
            else if (tiles)
                qk_tiles(L, lL, a->q + r0 * a->q_stride + (size_t)h * D, a->q_stride,
                         Kt + (size_t)g * D * Tp, m, kend, D, scale, a->causal, r0);
            else
#endif
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, kend, D, scale,
                            a->q + r0 * a->q_stride + (size_t)h * D, (int)a->q_stride,
                            a->k + (size_t)g * D, (int)a->k_stride, 0.0f, L, (int)lL);
            const int lcap = L != scr;
            const int vrow = mod && al__attn_mod_head(mod, h); /* this head's rows: the variant */
            for (int i = 0; i < m; i++) {
                int n = a->causal ? r0 + i + 1 : T; /* visible keys of row r0 + i: [lo, n) */
                int lo = a->causal && a->window > 0 && n > a->window ? n - a->window : 0;
                float *Li = L + i * lL, *Wi = W + i * lW;
                if (softcap > 0) {
                    if (cpre && sel >= 0) {
                        float *Pi = cpre + ((size_t)sel * T + r0 + i) * T;
                        for (int j = 0; j < T; j++) Pi[j] = j >= lo && j < n ? Li[j] : -INFINITY;
                    }
                    for (int j = lo; j < n; j++) Li[j] = softcap * tanhf(Li[j] / softcap);
                }
                /* the row's visible keys [lo, n): a sliding window starts them at lo. The
                 * weights times rs[i] (a softmax's exp(z - max) and 1 / sum: wv and the capture
                 * scale them; the sgemm path scales them here) */
                if (vrow && a->ssmax_s) { /* this head's own s */
                    al_attn_variant vh = *mod;
                    vh.norm.ssmax_s = a->ssmax_s[h];
                    rs[i] = al__attn_variant_row_exp(&vh, Wi + lo, Li + lo, n - lo, T, vscr);
                } else if (vrow)
                    rs[i] = al__attn_variant_row_exp(mod, Wi + lo, Li + lo, n - lo, T, vscr);
                else
                    rs[i] = al__softmax_exp(Wi + lo, Li + lo, n - lo);
                for (int j = lo; j < n && !tiles && rs[i] != 1.0f; j++) Wi[j] *= rs[i];
                if (!tiles) rs[i] = 1.0f;
                for (int j = 0; j < lo; j++) Wi[j] = 0.0f;
                if (lcap)
                    for (int j = 0; j < lo; j++) Li[j] = -INFINITY;
                for (int j = n; j < kend; j++) Wi[j] = 0.0f;
                if (wdst) { /* the visible weights [lo, n) scaled, 0 before lo and from n on
                             * (up to kend, or to T unless there from the last pass): the zeros
                             * written, not scaled (0 x a NaN 1 / sum would be NaN) */
                    float *wd = wdst + (size_t)i * T;
                    for (int j = 0; j < lo; j++) wd[j] = 0.0f;
                    al__scale_stream(wd + lo, Wi + lo, n - lo, rs[i], (skip_w ? kend : T) - lo);
                }
                if (lcap)
                    for (int j = n, end = skip_l ? kend : T; j < end; j++) Li[j] = -INFINITY;
            }
#ifdef AL_ATTN_AVX2
            if (tiles == 2)
                wv_tiles512(a->out + (size_t)r0 * ldo + (size_t)h * D, ldo, W, lW, rs,
                            Vp + (size_t)g * Dp * T, T, m, kend, D, a->causal, r0);
            else if (tiles)
                wv_tiles(a->out + (size_t)r0 * ldo + (size_t)h * D, ldo, W, lW, rs,
                         Vp + (size_t)g * Dp * T, T, m, kend, D, a->causal, r0);
            else
#endif
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, D, kend, 1.0f, W, (int)lW,
                            a->v + (size_t)g * D, (int)a->v_stride, 0.0f,
                            a->out + (size_t)r0 * ldo + (size_t)h * D, (int)ldo);
        }
        al__stream_fence(); /* this thread's streamed capture rows, before the barrier */
    }
    if (a->causal) ws->above_w = cw, ws->above_l = clog, ws->above_T = T, ws->above_n = n_sel;
    return capture ? deliver_capture(a, &cb, what, scale, err) : 0;
}
