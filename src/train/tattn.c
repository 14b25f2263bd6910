/* tattn.c: causal multi-head attention with any normalizer, forward and backward (train.h).
 *
 * Per (sequence b, head h), with Q, K, V [T, d] read in place from qkv [BT, 3C]:
 *   Z = Q K^T / sqrt(d)            (sgemm; only j <= t is used)
 *   P_t = f(Z_t[0..t]), P_tj = 0 for j > t
 *   O = P V                        (sgemm)
 * backward, from dO:
 *   dP = dO V^T,  dV = P^T dO,  dZ_t = J_f(Z_t)^T dP_t (row by row, 0 above the diagonal),
 *   dQ = dZ K / sqrt(d),  dK = dZ^T Q / sqrt(d).
 * The products run in blocks of CB rows, each over the keys its rows can see (about half the
 * work of the full T x T products). Tasks are the B H (b, h) pairs (OpenMP, BLAS single-threaded
 * inside); each writes only its own blocks, so the result does not depend on the thread count. */
#include "ops.h"
#include "train.h"

#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <string.h>

int al__tr_row_forward(const al_norm *nm, float s, const float *z, int n, float *p, double *buf,
                       al_error *err) {
    if (nm->kind == AL_NORM_SOFTMAX) { /* softmax(z / T): float exp, double sum */
        float mx = z[0], invT = (float)(1.0 / nm->temperature);
        for (int j = 1; j < n; j++) mx = z[j] > mx ? z[j] : mx;
        for (int j = 0; j < n; j++) p[j] = (z[j] - mx) * invT;
        al__exp_inplace(p, (size_t)n); /* vectorised float exp (ops.c) */
        double sum = 0;
        for (int j = 0; j < n; j++) sum += p[j];
        float inv = (float)(1.0 / sum);
        for (int j = 0; j < n; j++) p[j] *= inv;
        return 0;
    }
    al_norm r = *nm;
    if (r.kind == AL_NORM_SSMAX) r.ssmax_s = s;
    double *zd = buf, *pd = buf + n; /* [n] each */
    for (int j = 0; j < n; j++) zd[j] = z[j];
    int rc = al_norm_forward(&r, zd, n, pd, err);
    if (rc) return rc;
    for (int j = 0; j < n; j++) p[j] = (float)pd[j];
    return 0;
}

int al__tr_row_backward(const al_norm *nm, float s, const float *z, const float *p, float *g, int n,
                        double *buf, double *ds, al_error *err) {
    if (nm->kind == AL_NORM_SOFTMAX) { /* J^T g = (p * (g - <p, g>)) / T */
        double dot = 0;
        for (int j = 0; j < n; j++) dot += (double)p[j] * g[j];
        float d = (float)dot, invT = (float)(1.0 / nm->temperature);
        for (int j = 0; j < n; j++) g[j] = p[j] * (g[j] - d) * invT;
        return 0;
    }
    al_norm r = *nm;
    if (r.kind == AL_NORM_SSMAX) r.ssmax_s = s;
    double *zd = buf, *ud = buf + n, *od = buf + 2 * (size_t)n; /* [n] each */
    for (int j = 0; j < n; j++) zd[j] = z[j], ud[j] = g[j];
    int rc = al_norm_vjp(&r, zd, n, ud, od, err);
    if (rc) return rc;
    double acc = 0;
    for (int j = 0; j < n; j++) {
        g[j] = (float)od[j];
        acc += od[j] * zd[j];
    }
    if (ds && r.kind == AL_NORM_SSMAX) *ds += acc / s; /* x = s log(n) z / T: dL/ds = g.z / s */
    return 0;
}

#define CB 64 /* rows per block of the causal products: keys past the block's last row skipped */

/* Keeps the first failing task's error (lowest index: the same message at any thread count). */
static void keep_error(int task, const al_error *e, int *bad, al_error *err) {
#pragma omp critical(al_tr_attn_err)
    if (task < *bad) {
        *bad = task;
        if (err) *err = *e;
    }
}

static int n_threads(const al__tr_model *m) {
    int nt = omp_get_max_threads();
    return nt < m->acts.row_threads ? nt : m->acts.row_threads;
}

int al__tr_attn_forward(al__tr_model *m, const float *qkv, float *z, float *p, float *out,
                        const float *s, al_error *err) {
    const al__tr_acts *a = &m->acts;
    const int B = a->B, T = a->T, H = m->cfg.n_head, C = m->cfg.n_embd, d = C / H;
    const size_t TT = (size_t)T * T, ld = 3 * (size_t)C;
    const float scale = 1.0f / sqrtf((float)d);
    const al_norm *nm = &m->cfg.norm;
    int bad = B * H;
    al__blas_single();
#pragma omp parallel for schedule(dynamic, 1) num_threads(n_threads(m))
    for (int bh = 0; bh < B * H; bh++) {
        if (bad < B * H) continue;
        int b = bh / H, h = bh % H;
        const float *Q = qkv + (size_t)b * T * ld + (size_t)h * d, *K = Q + C, *V = Q + 2 * C;
        float *pb = p + (size_t)bh * TT, *zb = z ? z + (size_t)bh * TT : pb; /* [T, T] */
        for (int r0 = 0; r0 < T; r0 += CB) { /* rows r0..r1-1 see keys 0..r1-1 */
            int r1 = r0 + CB < T ? r0 + CB : T;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, r1 - r0, r1, d, scale, Q + r0 * ld,
                        (int)ld, K, (int)ld, 0.0f, zb + (size_t)r0 * T, T);
        }
        double *buf = a->row_buf + (size_t)omp_get_thread_num() * 4 * T;
        al_error e = {0};
        for (int t = 0; t < T; t++) {
            float *pr = pb + (size_t)t * T;
            if (al__tr_row_forward(nm, s ? s[h] : 0.0f, zb + (size_t)t * T, t + 1, pr, buf, &e)) {
                al__err_prefix(&e, e.code, "attention of sequence %d, head %d, row %d", b, h, t);
                keep_error(bh, &e, &bad, err);
                break;
            }
            memset(pr + t + 1, 0, (size_t)(T - t - 1) * sizeof *pr);
        }
        float *ob = out + (size_t)b * T * C + (size_t)h * d;
        for (int r0 = 0; r0 < T; r0 += CB) {
            int r1 = r0 + CB < T ? r0 + CB : T;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, r1 - r0, d, r1, 1.0f,
                        pb + (size_t)r0 * T, T, V, (int)ld, 0.0f, ob + (size_t)r0 * C, C);
        }
    }
    return bad < B * H ? (err ? err->code : AL_E_RANGE) : 0;
}

int al__tr_attn_backward(al__tr_model *m, const float *qkv, const float *z, const float *p,
                         const float *d_out, float *d_qkv, const float *s, al_error *err) {
    al__tr_acts *a = &m->acts;
    const int B = a->B, T = a->T, H = m->cfg.n_head, C = m->cfg.n_embd, d = C / H;
    const size_t TT = (size_t)T * T, ld = 3 * (size_t)C;
    const float scale = 1.0f / sqrtf((float)d);
    const al_norm *nm = &m->cfg.norm;
    int bad = B * H;
    al__blas_single();
#pragma omp parallel for schedule(dynamic, 1) num_threads(n_threads(m))
    for (int bh = 0; bh < B * H; bh++) {
        if (bad < B * H) continue;
        int b = bh / H, h = bh % H;
        size_t q0 = (size_t)b * T * ld + (size_t)h * d;
        const float *Q = qkv + q0, *K = Q + C, *V = Q + 2 * C;
        float *dQ = d_qkv + q0, *dK = dQ + C, *dV = dQ + 2 * C;
        const float *dO = d_out + (size_t)b * T * C + (size_t)h * d; /* [T, d], ld C */
        const float *pb = p + (size_t)bh * TT, *zb = z ? z + (size_t)bh * TT : NULL;
        float *g = a->d_pz + (size_t)bh * TT; /* [T, T] dP, then dZ */
        for (int r0 = 0; r0 < T; r0 += CB) {
            int r1 = r0 + CB < T ? r0 + CB : T;
            /* dP[r0..r1) = dO[r0..r1) V[0..r1)^T;  dV[r0..r1) = P[r0.., r0..r1)^T dO[r0..] */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, r1 - r0, r1, d, 1.0f,
                        dO + (size_t)r0 * C, C, V, (int)ld, 0.0f, g + (size_t)r0 * T, T);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, r1 - r0, d, T - r0, 1.0f,
                        pb + (size_t)r0 * T + r0, T, dO + (size_t)r0 * C, C, 0.0f, dV + r0 * ld,
                        (int)ld);
        }
        double *buf = a->row_buf + (size_t)omp_get_thread_num() * 4 * T, ds = 0;
        al_error e = {0};
        for (int t = 0; t < T; t++) {
            float *gr = g + (size_t)t * T;
            if (al__tr_row_backward(nm, s ? s[h] : 0.0f, zb ? zb + (size_t)t * T : NULL,
                                    pb + (size_t)t * T, gr, t + 1, buf, &ds, &e)) {
                al__err_prefix(&e, e.code, "attention backward of sequence %d, head %d, row %d", b,
                               h, t);
                keep_error(bh, &e, &bad, err);
                break;
            }
            memset(gr + t + 1, 0, (size_t)(T - t - 1) * sizeof *gr);
        }
        if (a->ds_bh) a->ds_bh[bh] = ds;
        for (int r0 = 0; r0 < T; r0 += CB) {
            int r1 = r0 + CB < T ? r0 + CB : T;
            /* dQ[r0..r1) = dZ[r0..r1), 0..r1) K[0..r1);  dK[r0..r1) = dZ[r0.., r0..r1)^T Q[r0..] */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, r1 - r0, d, r1, scale,
                        g + (size_t)r0 * T, T, K, (int)ld, 0.0f, dQ + r0 * ld, (int)ld);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, r1 - r0, d, T - r0, scale,
                        g + (size_t)r0 * T + r0, T, Q + r0 * ld, (int)ld, 0.0f, dK + r0 * ld,
                        (int)ld);
        }
    }
    return bad < B * H ? (err ? err->code : AL_E_RANGE) : 0;
}
