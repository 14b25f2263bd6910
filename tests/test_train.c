/* test_train.c: the training layer (src/train) against float64 finite differences.
 *
 *  - every normalizer's row backward (and ssmax's dL/ds) against central differences of the
 *    library's float64 forward; softmax's closed form against al_norm_vjp;
 *  - the whole model's gradient (every layer's backward: embeddings, LayerNorms, the four
 *    matrices and biases of every layer, attention with each normalizer, the tied head and the
 *    loss) against central differences of a float64 forward written here from the equations;
 *  - the float32 loss against that float64 forward;
 *  - AdamW + clipping + schedule against a float64 loop; a tiny run's loss falling at every step
 *    on a fixed batch, for every normalizer; two runs bit-identical. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "train_io.h"

typedef struct normcase {
    const char *name;
    al_norm nm;
    int learn;
} normcase;

static normcase cases[] = {
    {"softmax", {AL_NORM_SOFTMAX, 1.0, 1.5, 0.43}, 0},
    {"softmax T=0.7", {AL_NORM_SOFTMAX, 0.7, 1.5, 0.43}, 0},
    {"sparsemax", {AL_NORM_SPARSEMAX, 1.0, 1.5, 0.43}, 0},
    {"entmax15", {AL_NORM_ENTMAX15, 1.0, 1.5, 0.43}, 0},
    {"entmax a=1.3", {AL_NORM_ENTMAX, 1.0, 1.3, 0.43}, 0},
    {"ssmax fixed", {AL_NORM_SSMAX, 1.0, 1.5, 0.8}, 0},
    {"ssmax learnable", {AL_NORM_SSMAX, 1.0, 1.5, 0.8}, 1},
    {"sa-softmax", {AL_NORM_SA_SOFTMAX, 1.0, 1.5, 0.43}, 0},
    {"sa-softmax-norm", {AL_NORM_SA_SOFTMAX_NORM, 1.0, 1.5, 0.43}, 0},
};
#define N_CASES ((int)(sizeof cases / sizeof cases[0]))

/* ---- one row ------------------------------------------------------------------------------ */

static double row_obj(const al_norm *nm, double s, const double *z, const double *u, int n) {
    al_norm r = *nm;
    r.ssmax_s = s;
    double p[64];
    al_error e = {0};
    assert_int_equal(al_norm_forward(&r, z, n, p, &e), 0);
    double o = 0;
    for (int j = 0; j < n; j++) o += u[j] * p[j];
    return o;
}

static void test_row_backward(void **state) {
    (void)state;
    al__rng r;
    al__rng_seed(&r, 17);
    for (int c = 0; c < N_CASES; c++)
        for (int n = 1; n <= 40; n += 13) {
            const al_norm *nm = &cases[c].nm;
            float z[64], p[64], g[64];
            double zd[64], u[64], buf[4 * 64];
            for (int j = 0; j < n; j++) {
                z[j] = (float)(2.0 * al__rng_normal(&r)), zd[j] = z[j];
                u[j] = al__rng_normal(&r), g[j] = (float)u[j];
            }
            float s = (float)nm->ssmax_s;
            al_error e = {0};
            assert_int_equal(al__tr_row_forward(nm, s, z, n, p, buf, &e), 0);
            double ds = 0;
            assert_int_equal(al__tr_row_backward(nm, s, nm->kind == AL_NORM_SOFTMAX ? NULL : z, p,
                                                 g, n, buf, &ds, &e),
                             0);
            for (int j = 0; j < n; j++) { /* central differences of the float64 forward */
                double h = 1e-6, keep = zd[j];
                zd[j] = keep + h;
                double fp = row_obj(nm, nm->ssmax_s, zd, u, n);
                zd[j] = keep - h;
                double fm = row_obj(nm, nm->ssmax_s, zd, u, n);
                zd[j] = keep;
                double want = (fp - fm) / (2 * h);
                if (fabs(g[j] - want) > 1e-5 + 1e-4 * fabs(want))
                    fail_msg("%s n=%d: dz[%d] = %.9g, finite difference %.9g", cases[c].name, n, j,
                             g[j], want);
            }
            if (nm->kind == AL_NORM_SSMAX) {
                double h = 1e-6;
                double want =
                    (row_obj(nm, s + h, zd, u, n) - row_obj(nm, s - h, zd, u, n)) / (2 * h);
                if (fabs(ds - want) > 1e-6 + 1e-5 * fabs(want))
                    fail_msg("ssmax n=%d: ds = %.9g, finite difference %.9g", n, ds, want);
            }
            if (nm->kind == AL_NORM_SOFTMAX) { /* the closed form is the library's product */
                double out[64];
                assert_int_equal(al_norm_vjp(nm, zd, n, u, out, &e), 0);
                for (int j = 0; j < n; j++)
                    if (fabs(g[j] - out[j]) > 1e-6 + 1e-5 * fabs(out[j]))
                        fail_msg("softmax n=%d: closed form %.9g, al_norm_vjp %.9g", n, g[j],
                                 out[j]);
            }
        }
}

/* ---- a float64 model written from the equations ------------------------------------------ */

typedef struct ref {
    const al__tr_model *m; /* for the layout and config only */
    const double *w;       /* [n_params] */
    int B, T;
    const int32_t *tok, *tgt;
} ref;

static const double *RW(const ref *R, int kind, int l) {
    return R->w + R->m->off[al__tr_index(&R->m->cfg, kind, l)];
}

static void ref_ln(double *y, const double *x, const double *g, const double *b, int M, int C) {
    for (int r = 0; r < M; r++) {
        double mu = 0, var = 0;
        for (int c = 0; c < C; c++) mu += x[r * C + c] / C;
        for (int c = 0; c < C; c++) var += (x[r * C + c] - mu) * (x[r * C + c] - mu) / C;
        for (int c = 0; c < C; c++)
            y[r * C + c] = (x[r * C + c] - mu) / sqrt(var + 1e-5) * g[c] + b[c];
    }
}

/* y[M, N] = x[M, K] W[K, N] + b[N] */
static void ref_lin(double *y, const double *x, const double *W, const double *b, int M, int K,
                    int N) {
    for (int r = 0; r < M; r++)
        for (int n = 0; n < N; n++) {
            double s = b[n];
            for (int k = 0; k < K; k++) s += x[r * K + k] * W[k * N + n];
            y[r * N + n] = s;
        }
}

static double ref_loss(const ref *R) {
    const al__tr_cfg *c = &R->m->cfg;
    const int C = c->n_embd, H = c->n_head, d = C / H, BT = R->B * R->T, T = R->T;
    const int V = c->vocab_size;
    double *x = calloc((size_t)BT * C, 8), *ln = calloc((size_t)BT * C, 8);
    double *qkv = calloc((size_t)BT * 3 * C, 8), *at = calloc((size_t)BT * C, 8);
    double *pr = calloc((size_t)BT * C, 8), *fc = calloc((size_t)BT * 4 * C, 8);
    for (int r = 0; r < BT; r++)
        for (int k = 0; k < C; k++)
            x[r * C + k] =
                RW(R, AL_GK_WTE, -1)[R->tok[r] * C + k] + RW(R, AL_GK_WPE, -1)[(r % T) * C + k];
    const double *sv = c->norm.kind == AL_NORM_SSMAX ? R->w + R->m->off[R->m->n_tensors - 1] : NULL;
    for (int l = 0; l < c->n_layer; l++) {
        ref_ln(ln, x, RW(R, AL_GK_LN1W, l), RW(R, AL_GK_LN1B, l), BT, C);
        ref_lin(qkv, ln, RW(R, AL_GK_QKVW, l), RW(R, AL_GK_QKVB, l), BT, C, 3 * C);
        for (int b = 0; b < R->B; b++)
            for (int h = 0; h < H; h++)
                for (int t = 0; t < T; t++) {
                    double z[64], p[64];
                    const double *q = qkv + (b * T + t) * 3 * C + h * d;
                    for (int j = 0; j <= t; j++) {
                        const double *k = qkv + (b * T + j) * 3 * C + C + h * d;
                        z[j] = 0;
                        for (int e = 0; e < d; e++) z[j] += q[e] * k[e] / sqrt((double)d);
                    }
                    al_norm nm = c->norm;
                    if (sv) nm.ssmax_s = sv[l * H + h];
                    al_error e = {0};
                    assert_int_equal(al_norm_forward(&nm, z, t + 1, p, &e), 0);
                    for (int e2 = 0; e2 < d; e2++) {
                        double s = 0;
                        for (int j = 0; j <= t; j++)
                            s += p[j] * qkv[(b * T + j) * 3 * C + 2 * C + h * d + e2];
                        at[(b * T + t) * C + h * d + e2] = s;
                    }
                }
        ref_lin(pr, at, RW(R, AL_GK_ATTPROJW, l), RW(R, AL_GK_ATTPROJB, l), BT, C, C);
        for (int i = 0; i < BT * C; i++) x[i] += pr[i];
        ref_ln(ln, x, RW(R, AL_GK_LN2W, l), RW(R, AL_GK_LN2B, l), BT, C);
        ref_lin(fc, ln, RW(R, AL_GK_FCW, l), RW(R, AL_GK_FCB, l), BT, C, 4 * C);
        for (int i = 0; i < BT * 4 * C; i++) {
            double v = fc[i];
            fc[i] = 0.5 * v * (1 + tanh(sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
        }
        ref_lin(pr, fc, RW(R, AL_GK_FCPROJW, l), RW(R, AL_GK_FCPROJB, l), BT, 4 * C, C);
        for (int i = 0; i < BT * C; i++) x[i] += pr[i];
    }
    ref_ln(ln, x, RW(R, AL_GK_LNFW, -1), RW(R, AL_GK_LNFB, -1), BT, C);
    double loss = 0;
    for (int r = 0; r < BT; r++) {
        double lg[64], mx = -INFINITY, s = 0;
        for (int v = 0; v < V; v++) {
            lg[v] = 0;
            for (int k = 0; k < C; k++) lg[v] += ln[r * C + k] * RW(R, AL_GK_WTE, -1)[v * C + k];
            mx = fmax(mx, lg[v]);
        }
        for (int v = 0; v < V; v++) s += exp(lg[v] - mx);
        loss += (mx + log(s) - lg[R->tgt[r]]) / BT;
    }
    free(x), free(ln), free(qkv), free(at), free(pr), free(fc);
    return loss;
}

static al__tr_model *tiny(const normcase *nc, int B, int T, uint64_t seed, double scale) {
    al__tr_cfg c = {2, 2, 8, 8, 13, nc->nm, nc->learn};
    al__tr_model *m = NULL;
    al_error e = {0};
    assert_int_equal(al__tr_model_new(&c, B, T, &m, &e), 0);
    al__tr_init(m, seed);
    al__rng r;
    al__rng_seed(&r, seed * 7 + 1); /* away from init: peaked attention, sparse supports */
    for (size_t i = 0; i < m->n_gpt2; i++) m->params[i] += (float)(scale * al__rng_normal(&r));
    return m;
}

static void test_model_gradients(void **state) {
    (void)state;
    const int B = 2, T = 6;
    int32_t tok[12], tgt[12];
    al__rng r;
    al__rng_seed(&r, 5);
    for (int i = 0; i < B * T; i++)
        tok[i] = (int32_t)(al__rng_next(&r) % 13), tgt[i] = (int32_t)(al__rng_next(&r) % 13);
    for (int c = 0; c < N_CASES; c++) {
        al__tr_model *m = tiny(&cases[c], B, T, 11 + (uint64_t)c, 0.4);
        al_error e = {0};
        double loss;
        assert_int_equal(al__tr_forward(m, tok, tgt, NULL, &loss, &e), 0);
        assert_int_equal(al__tr_backward(m, tok, tgt, &e), 0);
        double *w = malloc(m->n_params * sizeof *w);
        for (size_t i = 0; i < m->n_params; i++) w[i] = m->params[i];
        ref R = {m, w, B, T, tok, tgt};
        double want = ref_loss(&R);
        if (fabs(loss - want) > 1e-5 * fabs(want))
            fail_msg("%s: loss %.9g, float64 forward %.9g", cases[c].name, loss, want);
        for (int t = 0; t < m->n_tensors; t++) {
            int is_s = cases[c].nm.kind == AL_NORM_SSMAX && t == m->n_tensors - 1;
            double num = 0, den = 0;
            for (size_t k = 0; k < m->numel[t]; k++) {
                size_t i = m->off[t] + k;
                double keep = w[i], h = 1e-5 * fmax(1.0, fabs(keep));
                w[i] = keep + h;
                double fp = ref_loss(&R);
                w[i] = keep - h;
                double fm = ref_loss(&R);
                w[i] = keep;
                double fd = (fp - fm) / (2 * h), got = m->grads[i];
                if (is_s && !cases[c].learn) fd = 0; /* fixed s: no gradient kept */
                num += (got - fd) * (got - fd);
                den += fd * fd;
            }
            double rel = sqrt(num) / fmax(sqrt(den), 1e-12);
            if (!(rel < 1e-3))
                fail_msg("%s: tensor %d: relative error %.3g of the gradient (|fd| = %.3g)",
                         cases[c].name, t, rel, sqrt(den));
        }
        free(w);
        al__tr_model_free(m);
    }
}

/* ---- attention past one block of rows (T > 64) --------------------------------------------- */

/* sum_{b,t,c} R[b,t,c] out[b,t,c] of a float64 attention on qkv [B T, 3C] (library forward) */
static double attn_obj(const al_norm *nm0, const double *qkv, const double *R, const double *s,
                       int B, int T, int H, int C) {
    const int d = C / H;
    double total = 0, *z = malloc((size_t)T * 8), *p = malloc((size_t)T * 8);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int t = 0; t < T; t++) {
                const double *q = qkv + ((size_t)b * T + t) * 3 * C + h * d;
                for (int j = 0; j <= t; j++) {
                    const double *k = qkv + ((size_t)b * T + j) * 3 * C + C + h * d;
                    z[j] = 0;
                    for (int e = 0; e < d; e++) z[j] += q[e] * k[e] / sqrt((double)d);
                }
                al_norm nm = *nm0;
                if (s) nm.ssmax_s = s[h];
                al_error e = {0};
                assert_int_equal(al_norm_forward(&nm, z, t + 1, p, &e), 0);
                for (int c = 0; c < d; c++) {
                    double o = 0;
                    for (int j = 0; j <= t; j++)
                        o += p[j] * qkv[((size_t)b * T + j) * 3 * C + 2 * C + h * d + c];
                    total += R[((size_t)b * T + t) * C + h * d + c] * o;
                }
            }
    free(z), free(p);
    return total;
}

static void test_attention_blocks(void **state) {
    (void)state;
    const int B = 1, T = 150, H = 2, C = 16; /* three blocks of rows, the last partial */
    int which[4] = {0, 2, 4, 6};             /* softmax, sparsemax, entmax 1.3, ssmax learnable */
    for (int w = 0; w < 4; w++) {
        const normcase *nc = &cases[which[w]];
        al__tr_cfg c = {1, H, C, T, 13, nc->nm, nc->learn};
        al__tr_model *m = NULL;
        al_error e = {0};
        assert_int_equal(al__tr_model_new(&c, B, T, &m, &e), 0);
        al__rng r;
        al__rng_seed(&r, 31 + (uint64_t)w);
        size_t nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C;
        float *qkv = malloc(nq * 4), *out = malloc(no * 4), *dout = malloc(no * 4);
        float *dqkv = malloc(nq * 4), s[2] = {0.7f, 1.1f};
        double *qd = malloc(nq * 8), *R = malloc(no * 8), sd[2] = {0.7, 1.1};
        for (size_t i = 0; i < nq; i++) qkv[i] = (float)(1.5 * al__rng_normal(&r)), qd[i] = qkv[i];
        for (size_t i = 0; i < no; i++) dout[i] = (float)al__rng_normal(&r), R[i] = dout[i];
        const float *sp = nc->nm.kind == AL_NORM_SSMAX ? s : NULL;
        const double *sdp = sp ? sd : NULL;
        assert_int_equal(al__tr_attn_forward(m, qkv, m->acts.z, m->acts.p, out, sp, &e), 0);
        double got = 0;
        for (size_t i = 0; i < no; i++) got += R[i] * out[i];
        double want = attn_obj(&nc->nm, qd, R, sdp, B, T, H, C);
        if (fabs(got - want) > 1e-4 * (1 + fabs(want)))
            fail_msg("%s: attention output objective %.9g, float64 %.9g", nc->name, got, want);
        assert_int_equal(al__tr_attn_backward(m, qkv, m->acts.z, m->acts.p, dout, dqkv, sp, &e), 0);
        for (int k = 0; k < 8; k++) { /* sampled entries of q, k and v */
            size_t i = (size_t)(al__rng_next(&r) % nq);
            double keep = qd[i], h = 1e-5;
            qd[i] = keep + h;
            double fp = attn_obj(&nc->nm, qd, R, sdp, B, T, H, C);
            qd[i] = keep - h;
            double fm = attn_obj(&nc->nm, qd, R, sdp, B, T, H, C);
            qd[i] = keep;
            double fd = (fp - fm) / (2 * h);
            if (fabs(dqkv[i] - fd) > 2e-3 * (1 + fabs(fd)))
                fail_msg("%s: d qkv[%zu] = %.9g, finite difference %.9g", nc->name, i, dqkv[i], fd);
        }
        if (sp) { /* dL/ds of head 1 from the sequences' sums */
            double ds = m->acts.ds_bh[1], h = 1e-5;
            sd[1] = 1.1 + h;
            double fp = attn_obj(&nc->nm, qd, R, sd, B, T, H, C);
            sd[1] = 1.1 - h;
            double fm = attn_obj(&nc->nm, qd, R, sd, B, T, H, C);
            sd[1] = 1.1;
            if (fabs(ds - (fp - fm) / (2 * h)) > 2e-3 * (1 + fabs(ds)))
                fail_msg("ssmax: ds %.9g, finite difference %.9g", ds, (fp - fm) / (2 * h));
        }
        free(qkv), free(out), free(dout), free(dqkv), free(qd), free(R);
        al__tr_model_free(m);
    }
}

/* ---- optimizer ---------------------------------------------------------------------------- */

static void test_adamw(void **state) {
    (void)state;
    normcase nc = {"softmax", {AL_NORM_SOFTMAX, 1.0, 1.5, 0.43}, 0};
    al__tr_model *m = tiny(&nc, 1, 4, 3, 0.1);
    al__rng r;
    al__rng_seed(&r, 9);
    size_t n = m->n_params;
    double *p = malloc(n * 8), *mm = calloc(n, 8), *vv = calloc(n, 8);
    for (size_t i = 0; i < n; i++) p[i] = m->params[i];
    al__tr_opt o = al__tr_opt_default();
    o.lr = 0.01, o.warmup = 2, o.steps = 5, o.clip = 0.5, o.weight_decay = 0.1;
    /* warmup (step + 1) / 2, then cosine from lr at step 2 towards 0.1 lr at step 5 */
    double lrs[5] = {0.005, 0.01, 0.01, 0.01 * (0.1 + 0.45 * (1 + cos(M_PI / 3))),
                     0.01 * (0.1 + 0.45 * (1 + cos(2 * M_PI / 3)))};
    for (int step = 0; step < 5; step++) {
        double norm = 0;
        for (size_t i = 0; i < n; i++) {
            m->grads[i] = (float)al__rng_normal(&r);
            norm += (double)m->grads[i] * m->grads[i];
        }
        norm = sqrt(norm);
        double got_norm;
        if (fabs(al__tr_lr(&o, step) - lrs[step]) > 1e-15)
            fail_msg("lr at step %d: %.17g, want %.17g", step, al__tr_lr(&o, step), lrs[step]);
        double sc = norm > o.clip ? o.clip / norm : 1.0;
        for (int t = 0; t < m->n_tensors; t++) {
            int grp = (t - 2) / 2; /* the group of a layer tensor (L = 2) */
            int decay =
                t < 2 || (t < 2 + 12 * 2 && (grp == 2 || grp == 4 || grp == 8 || grp == 10));
            for (size_t k = 0; k < m->numel[t]; k++) {
                size_t i = m->off[t] + k;
                double g = m->grads[i] * sc;
                mm[i] = 0.9 * mm[i] + 0.1 * g;
                vv[i] = 0.95 * vv[i] + 0.05 * g * g;
                double mh = mm[i] / (1 - pow(0.9, step + 1)),
                       vh = vv[i] / (1 - pow(0.95, step + 1));
                p[i] -= lrs[step] * (mh / (sqrt(vh) + 1e-8) + (decay ? 0.1 * p[i] : 0));
            }
        }
        al__tr_adamw(m, &o, step, &got_norm);
        assert_true(fabs(got_norm - norm) < 1e-9 * norm);
        for (size_t i = 0; i < n; i++)
            if (fabs(m->params[i] - p[i]) > 1e-6 + 1e-5 * fabs(p[i]))
                fail_msg("step %d param %zu: %.9g, float64 AdamW %.9g", step, i, m->params[i],
                         p[i]);
    }
    free(p), free(mm), free(vv);
    al__tr_model_free(m);
}

/* ---- a tiny run on a fixed batch ---------------------------------------------------------- */

static void run_fixed(const normcase *nc, int steps, double *losses, float *final, size_t nf) {
    al__tr_model *m = tiny(nc, 2, 8, 21, 0.0);
    int32_t tok[16], tgt[16];
    for (int i = 0; i < 16; i++)
        tok[i] = (int32_t)((i * 5 + 3) % 13), tgt[i] = (int32_t)((i * 7 + 1) % 13);
    al__tr_opt o = al__tr_opt_default();
    o.lr = 3e-3, o.warmup = 0, o.steps = steps, o.min_lr_frac = 1.0, o.weight_decay = 0.0;
    al_error e = {0};
    for (int s = 0; s < steps; s++) {
        assert_int_equal(al__tr_forward(m, tok, tgt, NULL, &losses[s], &e), 0);
        assert_int_equal(al__tr_backward(m, tok, tgt, &e), 0);
        al__tr_adamw(m, &o, s, NULL);
    }
    if (final) memcpy(final, m->params, nf * sizeof *final);
    al__tr_model_free(m);
}

static void test_overfit(void **state) {
    (void)state;
    for (int c = 0; c < N_CASES; c++) {
        double loss[60];
        run_fixed(&cases[c], 60, loss, NULL, 0);
        for (int s = 1; s < 60; s++)
            if (!(loss[s] < loss[s - 1]))
                fail_msg("%s: loss went up at step %d: %.9g -> %.9g", cases[c].name, s, loss[s - 1],
                         loss[s]);
        if (!(loss[59] < 0.7 * loss[0]))
            fail_msg("%s: loss %.4g -> %.4g in 60 steps (not overfitting)", cases[c].name, loss[0],
                     loss[59]);
    }
}

static void test_deterministic(void **state) {
    (void)state;
    double l1[5], l2[5];
    float a[2000], b[2000];
    run_fixed(&cases[3], 5, l1, a, 2000);
    run_fixed(&cases[3], 5, l2, b, 2000);
    assert_memory_equal(a, b, sizeof a);
    assert_memory_equal(l1, l2, sizeof l1);
}

static void test_bad_config(void **state) {
    (void)state;
    al__tr_cfg c = {2, 3, 8, 8, 13, al_norm_default(AL_NORM_SOFTMAX), 0};
    al__tr_model *m = NULL;
    al_error e = {0};
    assert_int_not_equal(al__tr_model_new(&c, 1, 4, &m, &e), 0); /* 8 % 3 != 0 */
    c.n_head = 2, c.ssmax_learn = 1;
    assert_int_not_equal(al__tr_model_new(&c, 1, 4, &m, &e), 0);
    assert_non_null(strstr(e.msg, "ssmax"));
    c.ssmax_learn = 0;
    assert_int_not_equal(al__tr_model_new(&c, 1, 9, &m, &e), 0); /* T > n_ctx */
    c.norm.temperature = 0;
    assert_int_not_equal(al__tr_model_new(&c, 1, 4, &m, &e), 0);
    assert_null(m);
    c.norm.temperature = 1;
    assert_int_equal(al__tr_model_new(&c, 1, 4, &m, &e), 0);
    al__tr_init(m, 1);
    int32_t tok[4] = {1, 2, 13, 0}, tgt[4] = {0};
    assert_int_not_equal(al__tr_forward(m, tok, tgt, NULL, NULL, &e), 0);
    assert_non_null(strstr(e.msg, "token 13"));
    al__tr_model_free(m);
}

/* The public options (include/attnlim.h) are what the trainer takes: the defaults are the
 * optimizer's (al__tr_opt_default) and the model's carries over into the trainer's config and
 * optimizer field by field; a struct of another size is refused before anything runs. */
static void test_public_options(void **state) {
    (void)state;
    al_train_opts o;
    al_train_defaults(&o);
    assert_int_equal(o.size, sizeof o);
    al__tr_opt d = al__tr_opt_default();
    assert_true(o.lr == d.lr && o.beta2 == d.beta2 && o.steps == d.steps && o.clip == d.clip);
    assert_int_equal(o.B, 8), assert_int_equal(o.T, 256), assert_true(o.val_frac == 0.1);
    o.n_layer = 3, o.n_ctx = 77, o.ssmax_learn = 1, o.lr = 0.25, o.warmup = 9, o.eps = 1e-6;
    al__tr_cfg c = al__tr_cfg_of(&o);
    al__tr_opt p = al__tr_opt_of(&o);
    assert_int_equal(c.n_layer, 3), assert_int_equal(c.n_ctx, 77);
    assert_int_equal(c.ssmax_learn, 1), assert_int_equal(c.vocab_size, 0);
    assert_true(p.lr == 0.25 && p.warmup == 9 && p.eps == 1e-6 && p.beta1 == d.beta1);
    al_error e = {0};
    o.size--;
    assert_int_equal(al_train(&o, NULL, &e), AL_E_INVALID);
    assert_non_null(strstr(e.msg, "another version"));
    al_study_opts so;
    al_study_defaults(&so);
    assert_int_equal(so.size, sizeof so);
    assert_int_equal(so.n_crit_L, 4), assert_int_equal(so.crit_L[3], 1024);
    int n = 0;
    assert_int_equal(al_study_normalizers(so.normalizers, &n, &e), 0);
    assert_int_equal(n, 6);
    assert_int_not_equal(al_study_normalizers("softmax,nosuch", &n, &e), 0);
    so.size = 0;
    assert_int_equal(al_study(&so, &e), AL_E_INVALID);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_row_backward), cmocka_unit_test(test_model_gradients),
        cmocka_unit_test(test_adamw),        cmocka_unit_test(test_attention_blocks),
        cmocka_unit_test(test_overfit),      cmocka_unit_test(test_deterministic),
        cmocka_unit_test(test_bad_config),   cmocka_unit_test(test_public_options),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
