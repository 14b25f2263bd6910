/* optim.c: AdamW with decoupled weight decay, warmup + cosine schedule, global-norm clipping
 * (train.h). Elementwise over the arena in a fixed partition: independent of the thread count. */
#include "train.h"

#include <math.h>

al__tr_opt al__tr_opt_default(void) {
    al__tr_opt o = {.lr = 1e-3,
                    .min_lr_frac = 0.1,
                    .warmup = 10,
                    .steps = 100,
                    .beta1 = 0.9,
                    .beta2 = 0.95,
                    .eps = 1e-8,
                    .weight_decay = 0.1,
                    .clip = 1.0};
    return o;
}

double al__tr_lr(const al__tr_opt *o, int step) {
    if (o->warmup > 0 && step < o->warmup) return o->lr * (step + 1) / o->warmup;
    int span = o->steps - o->warmup;
    if (span <= 0) return o->lr;
    double f = (double)(step - o->warmup) / span;
    if (f > 1) f = 1;
    double lo = o->min_lr_frac * o->lr;
    return lo + 0.5 * (o->lr - lo) * (1.0 + cos(M_PI * f));
}

double al__tr_grad_norm(const al__tr_model *m) {
    double s = 0;
    for (size_t i = 0; i < m->n_params; i++) s += (double)m->grads[i] * m->grads[i];
    return sqrt(s);
}

/* Is tensor i decayed? The 2-D GPT-2 tensors (embeddings and matrices) only. */
static int decayed(const al__tr_model *m, int i) {
    const al__tr_cfg *c = &m->cfg;
    if (i >= m->n_tensors - (c->norm.kind == AL_NORM_SSMAX)) return 0;
    al__gpt2_cfg g = {c->n_layer, c->n_head, c->n_embd, c->n_ctx, c->vocab_size};
    al__gpt2_spec s;
    al__gpt2_spec_at(&g, i, &s);
    return s.ndim == 2;
}

void al__tr_adamw(al__tr_model *m, const al__tr_opt *o, int step, double *norm_out) {
    double norm = al__tr_grad_norm(m);
    if (norm_out) *norm_out = norm;
    float gs = o->clip > 0 && norm > o->clip ? (float)(o->clip / norm) : 1.0f;
    double lr = al__tr_lr(o, step), t = step + 1.0;
    float b1 = (float)o->beta1, b2 = (float)o->beta2, eps = (float)o->eps;
    float c1 = (float)(1.0 - pow(o->beta1, t)), c2 = (float)(1.0 - pow(o->beta2, t));
    int ss = m->cfg.norm.kind == AL_NORM_SSMAX ? m->n_tensors - 1 : -1;
    for (int i = 0; i < m->n_tensors; i++) {
        if (i == ss && !m->cfg.ssmax_learn) continue;
        float wd = decayed(m, i) ? (float)o->weight_decay : 0.0f, lrf = (float)lr;
        float *p = m->params + m->off[i], *g = m->grads + m->off[i];
        float *mm = m->m + m->off[i], *vv = m->v + m->off[i];
        long n = (long)m->numel[i];
#pragma omp parallel for schedule(static) if (n > 65536)
        for (long k = 0; k < n; k++) {
            float gk = g[k] * gs;
            mm[k] = b1 * mm[k] + (1.0f - b1) * gk;
            vv[k] = b2 * vv[k] + (1.0f - b2) * gk * gk;
            float mh = mm[k] / c1, vh = vv[k] / c2;
            p[k] -= lrf * (mh / (sqrtf(vh) + eps) + wd * p[k]);
        }
        if (i == ss)
            for (long k = 0; k < n; k++) p[k] = p[k] < 1e-3f ? 1e-3f : p[k];
    }
}
