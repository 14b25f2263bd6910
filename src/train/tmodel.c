/* tmodel.c: the trainable GPT-2 (train.h): arenas, initialisation, forward and backward.
 *
 *   x_0 = wte[tokens] + wpe[0..T)                                         [B, T, C]
 *   per layer: m = x + proj(attn(ln_1(x)));  x' = m + fc_proj(gelu(fc(ln_2(m))))
 *   logits = ln_f(x_L) wte^T;  loss = mean_{b,t} (logsumexp(logits) - logits[target])
 *
 * The backward runs the chain in reverse with d_res the gradient of the residual stream.
 * Every gradient is accumulated into the zeroed gradient arena. Reductions over rows (bias,
 * LayerNorm and embedding gradients) run over column blocks, each summing its rows in order,
 * so they do not depend on the thread count; the sgemm-based ones are deterministic at a given
 * thread count. */
#include "ops.h"
#include "train.h"

#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

int al__tr_index(const al__tr_cfg *c, int kind, int layer) {
    int L = c->n_layer;
    if (kind <= AL_GK_WPE) return kind;
    if (kind == AL_GK_LNFW) return 2 + 12 * L;
    if (kind == AL_GK_LNFB) return 3 + 12 * L;
    return 2 + (kind - AL_GK_LN1W) * L + layer;
}

float *al__tr_ssmax_s(const al__tr_model *m, float *arena) {
    return m->cfg.norm.kind == AL_NORM_SSMAX ? arena + m->off[m->n_tensors - 1] : NULL;
}

int al__tr_cfg_check(const al__tr_cfg *c, al_error *err) {
    al__gpt2_cfg g = {c->n_layer, c->n_head, c->n_embd, c->n_ctx, c->vocab_size};
    int rc = al__gpt2_cfg_check(&g, "train", err);
    if (rc) return rc;
    if (c->n_ctx > 8192 || c->n_embd > 8192 || c->n_layer > 256)
        return al__err(err, AL_E_INVALID,
                       "train: n_ctx, n_embd up to 8192 and n_layer up to 256 (have %d, %d, %d)",
                       c->n_ctx, c->n_embd, c->n_layer);
    if ((rc = al_norm_check(&c->norm, err))) return al__err_prefix(err, rc, "train");
    if (c->ssmax_learn && c->norm.kind != AL_NORM_SSMAX)
        return al__err(err, AL_E_INVALID, "train: a learnable s is for ssmax only (have %s)",
                       al_norm_name(c->norm.kind));
    return 0;
}

/* ---- arenas ---------------------------------------------------------------------------- */

static size_t up16(size_t n) {
    return (n + 15) & ~(size_t)15;
}

static int layout_params(al__tr_model *m, al_error *err) {
    const al__tr_cfg *c = &m->cfg;
    al__gpt2_cfg g = {c->n_layer, c->n_head, c->n_embd, c->n_ctx, c->vocab_size};
    int n = al__gpt2_n_tensors(&g), extra = c->norm.kind == AL_NORM_SSMAX;
    m->n_tensors = n + extra;
    m->off = al__calloc((size_t)m->n_tensors, sizeof *m->off, "parameter offsets", err);
    m->numel = al__calloc((size_t)m->n_tensors, sizeof *m->numel, "parameter sizes", err);
    if (!m->off || !m->numel) return AL_E_NOMEM;
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        al__gpt2_spec s;
        al__gpt2_spec_at(&g, i, &s);
        m->off[i] = total;
        m->numel[i] = (size_t)s.shape[0] * (s.ndim == 2 ? (size_t)s.shape[1] : 1);
        total += m->numel[i];
    }
    m->n_gpt2 = total;
    if (extra) {
        m->off[n] = total;
        m->numel[n] = (size_t)c->n_layer * c->n_head;
        total += m->numel[n];
    }
    m->n_params = total;
    size_t bytes = up16(total) * sizeof(float) * 4;
    float *mem = al__malloc_aligned(bytes, "parameters, gradients and AdamW moments", err);
    if (!mem) return AL_E_NOMEM;
    memset(mem, 0, bytes);
    m->params = mem;
    m->grads = mem + up16(total);
    m->m = mem + 2 * up16(total);
    m->v = mem + 3 * up16(total);
    return 0;
}

static int layout_acts(al__tr_model *m, int B, int T, al_error *err) {
    al__tr_acts *a = &m->acts;
    const size_t L = (size_t)m->cfg.n_layer, C = (size_t)m->cfg.n_embd, H = (size_t)m->cfg.n_head;
    const size_t BT = (size_t)B * T, TT = (size_t)T * T, V = (size_t)m->cfg.vocab_size;
    const int keep_z = m->cfg.norm.kind != AL_NORM_SOFTMAX;
    a->B = B, a->T = T;
    float **ptr[] = {&a->res,  &a->ln1,      &a->ln1_stat, &a->qkv,      &a->z,   &a->p,
                     &a->atty, &a->mid,      &a->ln2,      &a->ln2_stat, &a->fc,  &a->fcg,
                     &a->lnf,  &a->lnf_stat, &a->d_res,    &a->d_a,      &a->d_b, &a->d_qkv,
                     &a->d_fc, &a->d_pz,     &a->logit_buf};
    size_t sz[] = {(L + 1) * BT * C,
                   L * BT * C,
                   L * BT * 2,
                   L * BT * 3 * C,
                   keep_z ? L * B * H * TT : 0,
                   L * B * H * TT,
                   L * BT * C,
                   L * BT * C,
                   L * BT * C,
                   L * BT * 2,
                   L * BT * 4 * C,
                   L * BT * 4 * C,
                   BT * C,
                   BT * 2,
                   BT * C,
                   BT * C,
                   BT * C,
                   BT * 3 * C,
                   BT * 4 * C,
                   B * H * TT,
                   (size_t)AL__TR_CHUNK * V};
    const int n = (int)(sizeof sz / sizeof sz[0]);
    double total = 0;
    for (int i = 0; i < n; i++) total += (double)up16(sz[i]);
    if (total * 4 > 64e9)
        return al__err(err, AL_E_NOMEM,
                       "train: the activations of B=%d x T=%d need %.1f GB (more than 64 GB)", B, T,
                       total * 4 / 1e9);
    a->mem = al__malloc_aligned((size_t)total * sizeof(float), "training activations", err);
    if (!a->mem) return AL_E_NOMEM;
    float *q = a->mem;
    for (int i = 0; i < n; i++) {
        *ptr[i] = sz[i] ? q : NULL;
        q += up16(sz[i]);
    }
    a->row_threads = omp_get_max_threads();
    a->row_buf = al__malloc((size_t)a->row_threads * 4 * T * sizeof(double), "row scratch", err);
    a->ds_bh = al__calloc((size_t)B * H, sizeof(double), "ssmax gradients", err);
    return a->row_buf && a->ds_bh ? 0 : AL_E_NOMEM;
}

int al__tr_model_new(const al__tr_cfg *c, int B, int T, al__tr_model **out, al_error *err) {
    *out = NULL;
    int rc = al__tr_cfg_check(c, err);
    if (rc) return rc;
    if (B < 1 || B > 4096 || T < 1 || T > c->n_ctx)
        return al__err(err, AL_E_INVALID, "train: batch %d x %d outside 1..4096 x 1..%d", B, T,
                       c->n_ctx);
    al__tr_model *m = al__calloc(1, sizeof *m, "training model", err);
    if (!m) return AL_E_NOMEM;
    m->cfg = *c;
    if ((rc = layout_params(m, err)) || (rc = layout_acts(m, B, T, err))) {
        al__tr_model_free(m);
        return rc;
    }
    *out = m;
    return 0;
}

void al__tr_model_free(al__tr_model *m) {
    if (!m) return;
    free(m->off);
    free(m->numel);
    free(m->params);
    free(m->acts.mem);
    free(m->acts.row_buf);
    free(m->acts.ds_bh);
    free(m);
}

void al__tr_init(al__tr_model *m, uint64_t seed) {
    const al__tr_cfg *c = &m->cfg;
    al__gpt2_cfg g = {c->n_layer, c->n_head, c->n_embd, c->n_ctx, c->vocab_size};
    for (int i = 0; i < al__gpt2_n_tensors(&g); i++) {
        al__gpt2_spec s;
        al__gpt2_spec_at(&g, i, &s);
        float *w = m->params + m->off[i];
        size_t n = m->numel[i];
        if (s.kind == AL_GK_LN1W || s.kind == AL_GK_LN2W || s.kind == AL_GK_LNFW) {
            for (size_t k = 0; k < n; k++) w[k] = 1.0f;
            continue;
        }
        if (s.ndim == 1) {
            memset(w, 0, n * sizeof *w);
            continue;
        }
        double std = 0.02;
        if (s.kind == AL_GK_ATTPROJW || s.kind == AL_GK_FCPROJW) std /= sqrt(2.0 * c->n_layer);
        al__rng r;
        al__rng_seed(&r, al__hash64(seed ^ al__hash64((uint64_t)i + 1)));
        for (size_t k = 0; k < n; k++) w[k] = (float)(std * al__rng_normal(&r));
    }
    al__tr_init_extra(m);
}

void al__tr_init_extra(al__tr_model *m) {
    float *s = al__tr_ssmax_s(m, m->params);
    if (s)
        for (int k = 0; k < m->cfg.n_layer * m->cfg.n_head; k++) s[k] = (float)m->cfg.norm.ssmax_s;
}

/* ---- kernels ------------------------------------------------------------------------------ */

/* y[M, C] = LN(x) w + b; stat[M, 2] = mean, 1/std. */
static void ln_forward(float *y, float *stat, const float *x, const float *w, const float *b, int M,
                       int C) {
#pragma omp parallel for schedule(static)
    for (int r = 0; r < M; r++) {
        const float *xr = x + (size_t)r * C;
        double s = 0, s2 = 0;
        for (int c = 0; c < C; c++) s += xr[c];
        double mean = s / C;
        for (int c = 0; c < C; c++) s2 += (xr[c] - mean) * (xr[c] - mean);
        float mu = (float)mean, rs = (float)(1.0 / sqrt(s2 / C + 1e-5));
        float *yr = y + (size_t)r * C;
        for (int c = 0; c < C; c++) yr[c] = (xr[c] - mu) * rs * w[c] + b[c];
        stat[2 * r] = mu, stat[2 * r + 1] = rs;
    }
}

/* dx[M, C] += dLN/dx^T dy; dw[C] += sum_r dy xhat; db[C] += sum_r dy. */
static void ln_backward(float *dx, float *dw, float *db, const float *dy, const float *x,
                        const float *stat, const float *w, int M, int C) {
#pragma omp parallel for schedule(static)
    for (int r = 0; r < M; r++) {
        const float *xr = x + (size_t)r * C, *dyr = dy + (size_t)r * C;
        float mu = stat[2 * r], rs = stat[2 * r + 1];
        double md = 0, mdx = 0;
        for (int c = 0; c < C; c++) {
            float dn = dyr[c] * w[c];
            md += dn;
            mdx += dn * ((xr[c] - mu) * rs);
        }
        float a = (float)(md / C), bb = (float)(mdx / C);
        float *dxr = dx + (size_t)r * C;
        for (int c = 0; c < C; c++) dxr[c] += rs * (dyr[c] * w[c] - a - (xr[c] - mu) * rs * bb);
    }
    int nb = (C + 15) / 16;
#pragma omp parallel for schedule(static)
    for (int k = 0; k < nb; k++) {
        int c0 = 16 * k, c1 = c0 + 16 < C ? c0 + 16 : C;
        for (int r = 0; r < M; r++) {
            const float *xr = x + (size_t)r * C, *dyr = dy + (size_t)r * C;
            float mu = stat[2 * r], rs = stat[2 * r + 1];
            for (int c = c0; c < c1; c++) {
                dw[c] += dyr[c] * ((xr[c] - mu) * rs);
                db[c] += dyr[c];
            }
        }
    }
}

/* db[N] += sum over the M rows of dy[M, N] (column blocks, rows in order). */
static void colsum_acc(float *db, const float *dy, int M, int N) {
    int nb = (N + 15) / 16;
#pragma omp parallel for schedule(static)
    for (int k = 0; k < nb; k++) {
        int c0 = 16 * k, c1 = c0 + 16 < N ? c0 + 16 : N;
        for (int r = 0; r < M; r++)
            for (int c = c0; c < c1; c++) db[c] += dy[(size_t)r * N + c];
    }
}

/* dW[K, N] += X[M, K]^T dY[M, N], the K rows of dW split over the threads. */
static void gemm_tn_acc(float *dW, const float *X, const float *dY, int M, int K, int N) {
    al__blas_single();
    int nt = omp_get_max_threads();
    if ((double)M * K * N < 4e6) nt = 1;
#pragma omp parallel for schedule(static) num_threads(nt)
    for (int p = 0; p < nt; p++) {
        int r0 = (int)((int64_t)K * p / nt), r1 = (int)((int64_t)K * (p + 1) / nt);
        if (r1 > r0)
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, r1 - r0, N, M, 1.0f, X + r0, K, dY,
                        N, 1.0f, dW + (size_t)r0 * N, N);
    }
}

/* GELU (tanh form) y = x s, s = sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3) (ops.c's
 * forward); its derivative s + 2 x s (1 - s) u' from e = exp(-2u). */
static inline float gelu_grad1(float x, float e) {
    float s = 1.0f / (1.0f + e);
    float du = 0.7978845608028654f * (1.0f + 3.0f * 0.044715f * x * x);
    return s + x * s * (1.0f - s) * 2.0f * du;
}

/* x = exp(x) over n values in chunks over the threads. */
static void exp_par(float *x, size_t n) {
    const size_t chunk = 16384;
    long nc = (long)((n + chunk - 1) / chunk);
#pragma omp parallel for schedule(static)
    for (long c = 0; c < nc; c++) {
        size_t i0 = (size_t)c * chunk;
        al__exp_inplace(x + i0, n - i0 < chunk ? n - i0 : chunk);
    }
}

/* ---- forward ------------------------------------------------------------------------------ */

#define W(kind, l) al__tr_at(m, m->params, kind, l)
#define G(kind, l) al__tr_at(m, m->grads, kind, l)

static int embed(al__tr_model *m, const int32_t *tokens, float *x, al_error *err) {
    const int BT = m->acts.B * m->acts.T, T = m->acts.T, C = m->cfg.n_embd;
    for (int r = 0; r < BT; r++)
        if (tokens[r] < 0 || tokens[r] >= m->cfg.vocab_size)
            return al__err(err, AL_E_INVALID, "train: token %d at position %d outside [0, %d)",
                           tokens[r], r, m->cfg.vocab_size);
    const float *wte = W(AL_GK_WTE, -1), *wpe = W(AL_GK_WPE, -1);
#pragma omp parallel for schedule(static)
    for (int r = 0; r < BT; r++) {
        const float *te = wte + (size_t)tokens[r] * C, *pe = wpe + (size_t)(r % T) * C;
        for (int c = 0; c < C; c++) x[(size_t)r * C + c] = te[c] + pe[c];
    }
    return 0;
}

static int layer_forward(al__tr_model *m, int l, al_error *err) {
    al__tr_acts *a = &m->acts;
    const int BT = a->B * a->T, C = m->cfg.n_embd, H = m->cfg.n_head;
    const size_t nc = (size_t)BT * C, TT = (size_t)a->T * a->T;
    float *x = a->res + l * nc, *ln1 = a->ln1 + l * nc, *qkv = a->qkv + 3 * l * nc;
    float *atty = a->atty + l * nc, *mid = a->mid + l * nc, *ln2 = a->ln2 + l * nc;
    float *fc = a->fc + 4 * l * nc, *fcg = a->fcg + 4 * l * nc, *y = a->res + (l + 1) * nc;
    float *zl = a->z ? a->z + (size_t)l * a->B * H * TT : NULL;
    float *pl = a->p + (size_t)l * a->B * H * TT, *s = al__tr_ssmax_s(m, m->params);
    ln_forward(ln1, a->ln1_stat + 2 * (size_t)l * BT, x, W(AL_GK_LN1W, l), W(AL_GK_LN1B, l), BT, C);
    al__matmul(qkv, ln1, W(AL_GK_QKVW, l), W(AL_GK_QKVB, l), BT, C, 3 * C);
    int rc = al__tr_attn_forward(m, qkv, zl, pl, atty, s ? s + (size_t)l * H : NULL, err);
    if (rc) return al__err_prefix(err, rc, "layer %d", l);
    al__matmul(mid, atty, W(AL_GK_ATTPROJW, l), W(AL_GK_ATTPROJB, l), BT, C, C);
    al__add(mid, x, nc);
    ln_forward(ln2, a->ln2_stat + 2 * (size_t)l * BT, mid, W(AL_GK_LN2W, l), W(AL_GK_LN2B, l), BT,
               C);
    al__matmul(fc, ln2, W(AL_GK_FCW, l), W(AL_GK_FCB, l), BT, C, 4 * C);
    memcpy(fcg, fc, 4 * nc * sizeof *fcg);
    al__gelu_tanh(fcg, 4 * nc); /* x / (1 + exp(-2u)), vectorised (ops.c) */
    al__matmul(y, fcg, W(AL_GK_FCPROJW, l), W(AL_GK_FCPROJB, l), BT, 4 * C, C);
    al__add(y, mid, nc);
    return 0;
}

/* Loss of rows r0..r0+R-1 from their logits lg [R, V]; with grad, lg becomes dloss/dlogits
 * (softmax - onehot) * inv. Returns the sum of the rows' losses. */
static double chunk_loss(float *lg, const int32_t *targets, int R, int V, int grad, float inv) {
    double total = 0;
#pragma omp parallel for schedule(static) reduction(+ : total)
    for (int r = 0; r < R; r++) {
        float *row = lg + (size_t)r * V, mx = row[0];
        for (int j = 1; j < V; j++) mx = row[j] > mx ? row[j] : mx;
        double sum = 0;
        for (int j = 0; j < V; j++) sum += exp((double)row[j] - mx);
        double lse = mx + log(sum);
        total += lse - row[targets[r]];
        if (grad) {
            for (int j = 0; j < V; j++) row[j] = (float)(exp((double)row[j] - lse) * inv);
            row[targets[r]] -= inv;
        }
    }
    return total;
}

int al__tr_forward(al__tr_model *m, const int32_t *tokens, const int32_t *targets, float *logits,
                   double *loss, al_error *err) {
    al__tr_acts *a = &m->acts;
    const int BT = a->B * a->T, C = m->cfg.n_embd, V = m->cfg.vocab_size;
    int rc = embed(m, tokens, a->res, err);
    for (int l = 0; !rc && l < m->cfg.n_layer; l++) rc = layer_forward(m, l, err);
    if (rc) return rc;
    ln_forward(a->lnf, a->lnf_stat, a->res + (size_t)m->cfg.n_layer * BT * C, W(AL_GK_LNFW, -1),
               W(AL_GK_LNFB, -1), BT, C);
    if (targets)
        for (int r = 0; r < BT; r++)
            if (targets[r] < 0 || targets[r] >= V)
                return al__err(err, AL_E_INVALID, "train: target %d at position %d outside [0, %d)",
                               targets[r], r, V);
    double total = 0;
    for (int r0 = 0; r0 < BT && (targets || logits); r0 += AL__TR_CHUNK) {
        int R = BT - r0 < AL__TR_CHUNK ? BT - r0 : AL__TR_CHUNK;
        float *lg = logits ? logits + (size_t)r0 * V : a->logit_buf;
        al__matmul_nt(lg, a->lnf + (size_t)r0 * C, W(AL_GK_WTE, -1), NULL, R, C, V);
        if (targets) total += chunk_loss(lg, targets + r0, R, V, 0, 0.0f);
    }
    if (loss) *loss = targets ? total / BT : NAN;
    return 0;
}

/* ---- backward ----------------------------------------------------------------------------- */

static void head_backward(al__tr_model *m, const int32_t *targets) {
    al__tr_acts *a = &m->acts;
    const int BT = a->B * a->T, C = m->cfg.n_embd, V = m->cfg.vocab_size;
    float *wte = W(AL_GK_WTE, -1), *dwte = G(AL_GK_WTE, -1), inv = 1.0f / (float)BT;
    memset(a->d_a, 0, (size_t)BT * C * sizeof(float));
    for (int r0 = 0; r0 < BT; r0 += AL__TR_CHUNK) {
        int R = BT - r0 < AL__TR_CHUNK ? BT - r0 : AL__TR_CHUNK;
        float *lg = a->logit_buf, *xr = a->lnf + (size_t)r0 * C;
        al__matmul_nt(lg, xr, wte, NULL, R, C, V);
        chunk_loss(lg, targets + r0, R, V, 1, inv);
        al__matmul(a->d_a + (size_t)r0 * C, lg, wte, NULL, R, V, C); /* d lnf = dlogits wte */
        gemm_tn_acc(dwte, lg, xr, R, V, C);                          /* dwte += dlogits^T lnf */
    }
    memset(a->d_res, 0, (size_t)BT * C * sizeof(float));
    ln_backward(a->d_res, G(AL_GK_LNFW, -1), G(AL_GK_LNFB, -1), a->d_a,
                a->res + (size_t)m->cfg.n_layer * BT * C, a->lnf_stat, W(AL_GK_LNFW, -1), BT, C);
}

static int layer_backward(al__tr_model *m, int l, al_error *err) {
    al__tr_acts *a = &m->acts;
    const int BT = a->B * a->T, C = m->cfg.n_embd, H = m->cfg.n_head;
    const size_t nc = (size_t)BT * C, TT = (size_t)a->T * a->T;
    float *x = a->res + l * nc, *ln1 = a->ln1 + l * nc, *qkv = a->qkv + 3 * l * nc;
    float *atty = a->atty + l * nc, *mid = a->mid + l * nc, *ln2 = a->ln2 + l * nc;
    float *fc = a->fc + 4 * l * nc, *fcg = a->fcg + 4 * l * nc, *dr = a->d_res;
    /* MLP: y = mid + fcg W_fcproj + b */
    al__matmul_nt(a->d_fc, dr, W(AL_GK_FCPROJW, l), NULL, BT, C, 4 * C);
    gemm_tn_acc(G(AL_GK_FCPROJW, l), fcg, dr, BT, 4 * C, C);
    colsum_acc(G(AL_GK_FCPROJB, l), dr, BT, C);
/* GELU': fcg (no longer needed: W_fcproj's gradient is done) receives exp(-2u) */
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < 4 * nc; i++)
        fcg[i] = -2.0f * 0.7978845608028654f * (fc[i] + 0.044715f * fc[i] * fc[i] * fc[i]);
    exp_par(fcg, 4 * nc);
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < 4 * nc; i++) a->d_fc[i] *= gelu_grad1(fc[i], fcg[i]);
    gemm_tn_acc(G(AL_GK_FCW, l), ln2, a->d_fc, BT, C, 4 * C);
    colsum_acc(G(AL_GK_FCB, l), a->d_fc, BT, 4 * C);
    al__matmul_nt(a->d_a, a->d_fc, W(AL_GK_FCW, l), NULL, BT, 4 * C, C);
    ln_backward(dr, G(AL_GK_LN2W, l), G(AL_GK_LN2B, l), a->d_a, mid,
                a->ln2_stat + 2 * (size_t)l * BT, W(AL_GK_LN2W, l), BT, C);
    /* attention: mid = x + atty W_proj + b */
    al__matmul_nt(a->d_a, dr, W(AL_GK_ATTPROJW, l), NULL, BT, C, C);
    gemm_tn_acc(G(AL_GK_ATTPROJW, l), atty, dr, BT, C, C);
    colsum_acc(G(AL_GK_ATTPROJB, l), dr, BT, C);
    float *s = al__tr_ssmax_s(m, m->params);
    int rc = al__tr_attn_backward(m, qkv, a->z ? a->z + (size_t)l * a->B * H * TT : NULL,
                                  a->p + (size_t)l * a->B * H * TT, a->d_a, a->d_qkv,
                                  s ? s + (size_t)l * H : NULL, err);
    if (rc) return al__err_prefix(err, rc, "layer %d", l);
    if (s && m->cfg.ssmax_learn) {
        float *ds = al__tr_ssmax_s(m, m->grads) + (size_t)l * H;
        for (int h = 0; h < H; h++) {
            double acc = 0;
            for (int b = 0; b < a->B; b++) acc += a->ds_bh[b * H + h];
            ds[h] += (float)acc;
        }
    }
    gemm_tn_acc(G(AL_GK_QKVW, l), ln1, a->d_qkv, BT, C, 3 * C);
    colsum_acc(G(AL_GK_QKVB, l), a->d_qkv, BT, 3 * C);
    al__matmul_nt(a->d_b, a->d_qkv, W(AL_GK_QKVW, l), NULL, BT, 3 * C, C);
    ln_backward(dr, G(AL_GK_LN1W, l), G(AL_GK_LN1B, l), a->d_b, x, a->ln1_stat + 2 * (size_t)l * BT,
                W(AL_GK_LN1W, l), BT, C);
    return 0;
}

/* dwte[tok] += d_res, dwpe[t] += d_res over the batch (column blocks, rows in order). */
static void embed_backward(al__tr_model *m, const int32_t *tokens) {
    const int BT = m->acts.B * m->acts.T, T = m->acts.T, C = m->cfg.n_embd, nb = (C + 15) / 16;
    float *dwte = G(AL_GK_WTE, -1), *dwpe = G(AL_GK_WPE, -1);
    const float *d = m->acts.d_res;
#pragma omp parallel for schedule(static)
    for (int k = 0; k < nb; k++) {
        int c0 = 16 * k, c1 = c0 + 16 < C ? c0 + 16 : C;
        for (int r = 0; r < BT; r++) {
            float *te = dwte + (size_t)tokens[r] * C, *pe = dwpe + (size_t)(r % T) * C;
            for (int c = c0; c < c1; c++) {
                te[c] += d[(size_t)r * C + c];
                pe[c] += d[(size_t)r * C + c];
            }
        }
    }
}

int al__tr_backward(al__tr_model *m, const int32_t *tokens, const int32_t *targets, al_error *err) {
    memset(m->grads, 0, m->n_params * sizeof(float));
    head_backward(m, targets);
    for (int l = m->cfg.n_layer - 1; l >= 0; l--) {
        int rc = layer_backward(m, l, err);
        if (rc) return rc;
    }
    embed_backward(m, tokens);
    return 0;
}
