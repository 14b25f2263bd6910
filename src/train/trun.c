/* trun.c: one training run (train_io.h): data, model, the loop, the JSONL log, validation,
 * the per-head monitoring, checkpoints and --resume.
 *
 * The log (OUT/log.jsonl) has one line per step {"step", "loss", "lr", "grad_norm",
 * "tokens_per_s", "elapsed_s"} and, every eval_every steps and at the end, one line
 * {"step", "val_loss", "grad_norm_layers" [L], "grad_norm_embed", "grad_norm_lnf",
 *  "entropy_norm" [L][H], "max_weight" [L][H], "ns_N", "ns_ratio" [L][H]} on the training batch's
 * first sequence (the paper's monitoring advice, during training). "step" counts completed
 * steps; a resumed run first drops the lines past its state's step. */
#include "progress.h"
#include "train_io.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void al_train_defaults(al_train_opts *o) {
    memset(o, 0, sizeof *o);
    al__tr_opt p = al__tr_opt_default();
    o->size = sizeof *o;
    o->n_layer = 4, o->n_head = 4, o->n_embd = 128, o->n_ctx = 256;
    o->norm = al_norm_default(AL_NORM_SOFTMAX);
    o->lr = p.lr, o->min_lr_frac = p.min_lr_frac, o->warmup = p.warmup, o->steps = p.steps;
    o->beta1 = p.beta1, o->beta2 = p.beta2, o->eps = p.eps, o->weight_decay = p.weight_decay;
    o->clip = p.clip;
    o->B = 8, o->T = 256, o->seed = 1;
    o->corpus = "war-and-peace", o->tokenizer = "bytes";
    o->val_frac = 0.1, o->eval_every = 50, o->val_windows = 16;
}

al__tr_cfg al__tr_cfg_of(const al_train_opts *o) {
    return (al__tr_cfg){o->n_layer, o->n_head, o->n_embd, o->n_ctx, 0, o->norm, o->ssmax_learn};
}

al__tr_opt al__tr_opt_of(const al_train_opts *o) {
    return (al__tr_opt){.lr = o->lr,
                        .min_lr_frac = o->min_lr_frac,
                        .warmup = o->warmup,
                        .steps = o->steps,
                        .beta1 = o->beta1,
                        .beta2 = o->beta2,
                        .eps = o->eps,
                        .weight_decay = o->weight_decay,
                        .clip = o->clip};
}

typedef struct run {
    const al_train_opts *o;
    al__tr_opt opt; /* the optimizer of o */
    al__tr_model *m;
    al__tr_data data;
    int32_t *tok, *tgt; /* [B, T] */
    FILE *log;
    char path[4096 + 64];
} run;

static const char *at(run *r, const char *file) {
    snprintf(r->path, sizeof r->path, "%s/%s", r->o->out, file);
    return r->path;
}

/* ---- the log ---------------------------------------------------------------------------- */

/* Keeps the lines of log.jsonl with "step" <= step (a resumed run), then opens it to append. */
static int open_log(run *r, uint64_t step, al_error *err) {
    const char *path = at(r, "log.jsonl");
    if (step > 0 && al__is_file(path)) {
        char *text;
        size_t len;
        int rc = al__read_file(path, (size_t)1 << 31, &text, &len, err);
        if (rc) return rc;
        size_t o = 0;
        for (char *p = text; p < text + len;) {
            char *nl = memchr(p, '\n', (size_t)(text + len - p));
            size_t l = (size_t)((nl ? nl + 1 : text + len) - p);
            cJSON *j = cJSON_ParseWithLength(p, l);
            const cJSON *s = cJSON_GetObjectItemCaseSensitive(j, "step");
            if (cJSON_IsNumber(s) && s->valuedouble <= (double)step) {
                memmove(text + o, p, l);
                o += l;
            }
            cJSON_Delete(j);
            p += l;
        }
        rc = al__write_file_atomic(path, text, o, err);
        free(text);
        if (rc) return rc;
    }
    r->log = fopen(path, step > 0 ? "a" : "w");
    if (!r->log) return al__err(err, AL_E_IO, "%s: cannot open the log for writing", path);
    return 0;
}

static int log_line(run *r, cJSON *j, al_error *err) {
    char *text = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    if (!text) return al__err(err, AL_E_NOMEM, "out of memory writing the log");
    int bad = fprintf(r->log, "%s\n", text) < 0 || fflush(r->log) != 0;
    free(text);
    return bad ? al__err(err, AL_E_IO, "%s/log.jsonl: write failed", r->o->out) : 0;
}

/* ---- validation and monitoring ------------------------------------------------------------ */

static int val_loss(run *r, double *out, al_error *err) {
    const int B = r->o->B, T = r->o->T;
    int groups = (r->o->val_windows + B - 1) / B, nw = groups * B;
    double total = 0;
    for (int g = 0; g < groups; g++) {
        for (int b = 0; b < B; b++)
            al__tr_val_window(&r->data, g * B + b, nw, T, r->tok + (size_t)b * T,
                              r->tgt + (size_t)b * T);
        double l;
        int rc = al__tr_forward(r->m, r->tok, r->tgt, NULL, &l, err);
        if (rc) return al__err_prefix(err, rc, "validation");
        total += l;
    }
    *out = total / groups;
    return 0;
}

static double norm_of(const al__tr_model *m, int i0, int i1, int stride) {
    double s = 0;
    for (int i = i0; i <= i1; i += stride)
        for (size_t k = 0; k < m->numel[i]; k++) {
            double g = m->grads[m->off[i] + k];
            s += g * g;
        }
    return sqrt(s);
}

/* Entropy / log n and max weight (rows n >= 2) and N_s/N (value vectors) of every head of the
 * last forward's first sequence, into [L][H] arrays. */
static int head_stats(run *r, double *ent, double *mxw, double *ns, int nsN, al_error *err) {
    const al__tr_model *m = r->m;
    const int L = m->cfg.n_layer, H = m->cfg.n_head, T = r->o->T, C = m->cfg.n_embd, d = C / H;
    const int B = r->o->B;
    int bad = 0;
#pragma omp parallel for schedule(dynamic, 1)
    for (int lh = 0; lh < L * H; lh++) {
        int l = lh / H, h = lh % H;
        const float *p = m->acts.p + ((size_t)l * B * H + h) * T * T; /* sequence 0 */
        const float *qkv = m->acts.qkv + (size_t)l * B * T * 3 * C;
        double *w = malloc((size_t)T * T * sizeof *w), *x = malloc((size_t)T * d * sizeof *x);
        double *rm = malloc((size_t)T * sizeof *rm), *re = malloc((size_t)T * sizeof *re);
        al_error e = {0};
        int rc = w && x && rm && re ? 0 : AL_E_NOMEM;
        for (size_t i = 0; !rc && i < (size_t)T * T; i++) w[i] = p[i];
        for (int t = 0; !rc && t < T; t++)
            for (int k = 0; k < d; k++) x[t * d + k] = qkv[(size_t)t * 3 * C + 2 * C + h * d + k];
        al_metrics_opts mo = {.top_n = &nsN, .n_top = 1, .separability = 1, .causal = 1};
        al_topn_stats st;
        if (!rc) rc = al_head_metrics(w, x, T, d, &mo, &st, rm, re, &e);
        if (!rc) {
            double se = 0, sm = 0;
            for (int t = 1; t < T; t++) se += re[t] / log(t + 1.0), sm += rm[t];
            ent[lh] = T > 1 ? se / (T - 1) : NAN;
            mxw[lh] = T > 1 ? sm / (T - 1) : NAN;
            ns[lh] = st.ns_ratio;
        }
        if (rc) {
#pragma omp critical(al_tr_stats_err)
            if (!bad) {
                bad = rc;
                if (err) *err = e;
            }
        }
        free(w), free(x), free(rm), free(re);
    }
    return bad;
}

static cJSON *grid(const double *v, int L, int H) {
    cJSON *a = cJSON_CreateArray();
    for (int l = 0; l < L; l++) {
        cJSON *row = cJSON_CreateArray();
        for (int h = 0; h < H; h++)
            cJSON_AddItemToArray(row, isfinite(v[l * H + h]) ? cJSON_CreateNumber(v[l * H + h])
                                                             : cJSON_CreateNull());
        cJSON_AddItemToArray(a, row);
    }
    return a;
}

/* The monitoring line (before the validation forward overwrites the activations). */
static int eval_line(run *r, int step, double *vl, al_error *err) {
    const al__tr_model *m = r->m;
    const int L = m->cfg.n_layer, H = m->cfg.n_head;
    cJSON *j = cJSON_CreateObject();
    cJSON_AddNumberToObject(j, "step", step);
    cJSON *gl = cJSON_AddArrayToObject(j, "grad_norm_layers");
    for (int l = 0; l < L; l++)
        cJSON_AddItemToArray(gl, cJSON_CreateNumber(norm_of(m, 2 + l, 2 + 11 * L + l, L)));
    cJSON_AddNumberToObject(j, "grad_norm_embed", norm_of(m, 0, 1, 1));
    cJSON_AddNumberToObject(j, "grad_norm_lnf", norm_of(m, 2 + 12 * L, 3 + 12 * L, 1));
    double *buf = malloc(3 * (size_t)L * H * sizeof *buf);
    if (!buf) {
        cJSON_Delete(j);
        return al__err(err, AL_E_NOMEM, "out of memory for the head statistics");
    }
    int nsN = r->o->T > 8 ? 8 : (r->o->T > 1 ? r->o->T - 1 : 1);
    int rc = head_stats(r, buf, buf + L * H, buf + 2 * L * H, nsN, err);
    if (!rc) {
        cJSON_AddItemToObject(j, "entropy_norm", grid(buf, L, H));
        cJSON_AddItemToObject(j, "max_weight", grid(buf + L * H, L, H));
        cJSON_AddNumberToObject(j, "ns_N", nsN);
        cJSON_AddItemToObject(j, "ns_ratio", grid(buf + 2 * L * H, L, H));
        const float *s = al__tr_ssmax_s(m, m->params);
        if (s) {
            for (int k = 0; k < L * H; k++) buf[k] = s[k];
            cJSON_AddItemToObject(j, "ssmax_s", grid(buf, L, H));
        }
        rc = val_loss(r, vl, err);
    }
    free(buf);
    if (rc) {
        cJSON_Delete(j);
        return rc;
    }
    cJSON_AddNumberToObject(j, "val_loss", *vl);
    return log_line(r, j, err);
}

/* ---- saving -------------------------------------------------------------------------------- */

static cJSON *train_info(const run *r, int step) {
    const al_train_opts *o = r->o;
    cJSON *j = cJSON_CreateObject();
    cJSON_AddNumberToObject(j, "step", step);
    cJSON_AddNumberToObject(j, "steps", o->steps);
    cJSON_AddNumberToObject(j, "batch", o->B);
    cJSON_AddNumberToObject(j, "seq_len", o->T);
    char seed[32];
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)o->seed);
    cJSON_AddStringToObject(j, "seed", seed);
    cJSON_AddStringToObject(j, "corpus", o->corpus);
    cJSON_AddNumberToObject(j, "val_frac", o->val_frac);
    cJSON_AddNumberToObject(j, "lr", o->lr);
    cJSON_AddNumberToObject(j, "min_lr_frac", o->min_lr_frac);
    cJSON_AddNumberToObject(j, "warmup", o->warmup);
    cJSON_AddNumberToObject(j, "weight_decay", o->weight_decay);
    cJSON_AddNumberToObject(j, "beta1", o->beta1);
    cJSON_AddNumberToObject(j, "beta2", o->beta2);
    cJSON_AddNumberToObject(j, "clip", o->clip);
    cJSON_AddBoolToObject(j, "fixed_batch", o->fixed_batch);
    return j;
}

static int save_all(run *r, int step, al_error *err) {
    int rc = al__tr_save_model(r->m, r->o->out, r->data.tokenizer, train_info(r, step), err);
    if (!rc) rc = al__tr_save_state(r->m, at(r, "state.bin"), (uint64_t)step, err);
    return rc;
}

/* The first step for the autograd comparison: batch, loss, every gradient, updated weights. */
static int write_dump(run *r, double loss, const float *before, al_error *err) {
    al__tr_model *m = r->m;
    int cap = 3 * m->n_tensors + 4, n = 0;
    al__tr_tensor *t = al__calloc((size_t)cap, sizeof *t, "dump tensors", err);
    if (!t) return AL_E_NOMEM;
    int64_t BT[2] = {r->o->B, r->o->T};
    const char *ints[2] = {"tokens", "targets"};
    const int32_t *iv[2] = {r->tok, r->tgt};
    for (int k = 0; k < 2; k++, n++) {
        snprintf(t[n].name, sizeof t[n].name, "%s", ints[k]);
        snprintf(t[n].dtype, sizeof t[n].dtype, "I32");
        t[n].ndim = 2, t[n].shape[0] = BT[0], t[n].shape[1] = BT[1];
        t[n].data = iv[k], t[n].bytes = (size_t)BT[0] * BT[1] * 4;
    }
    snprintf(t[n].name, sizeof t[n].name, "loss");
    snprintf(t[n].dtype, sizeof t[n].dtype, "F64");
    t[n].ndim = 1, t[n].shape[0] = 1, t[n].data = &loss, t[n].bytes = 8;
    n++;
    n += al__tr_gpt2_tensors(m, before, "init.", t + n, cap - n);
    n += al__tr_gpt2_tensors(m, m->grads, "grad.", t + n, cap - n);
    n += al__tr_gpt2_tensors(m, m->params, "new.", t + n, cap - n);
    if (m->cfg.norm.kind == AL_NORM_SSMAX) {
        const char *pre[3] = {"init.", "grad.", "new."};
        const float *src[3] = {before + m->off[m->n_tensors - 1], al__tr_ssmax_s(m, m->grads),
                               al__tr_ssmax_s(m, m->params)};
        for (int k = 0; k < 3 && n < cap; k++, n++) {
            snprintf(t[n].name, sizeof t[n].name, "%sattnlim.ssmax_s", pre[k]);
            snprintf(t[n].dtype, sizeof t[n].dtype, "F32");
            t[n].ndim = 2, t[n].shape[0] = m->cfg.n_layer, t[n].shape[1] = m->cfg.n_head;
            t[n].data = src[k], t[n].bytes = m->numel[m->n_tensors - 1] * 4;
        }
    }
    int rc = al__tr_write_tensors(r->o->dump, t, n, err);
    free(t);
    return rc;
}

/* ---- the loop ------------------------------------------------------------------------------ */

static int setup(run *r, uint64_t *step0, al_error *err) {
    const al_train_opts *o = r->o;
    int rc = al__tr_data_load(o->corpus, o->data_path, o->tokenizer, o->val_frac, &r->data, err);
    if (rc) return rc;
    size_t tail = r->data.n - r->data.n_train;
    if (r->data.n_train < (size_t)o->T + 2 || tail < (size_t)o->T + 2)
        return al__err(err, AL_E_INVALID,
                       "train: %s has %zu training and %zu validation tokens; windows of %d need "
                       "at least %d in each",
                       o->corpus, r->data.n_train, tail, o->T, o->T + 2);
    al__tr_cfg c = al__tr_cfg_of(o);
    c.vocab_size = r->data.vocab;
    if ((rc = al__tr_model_new(&c, o->B, o->T, &r->m, err))) return rc;
    size_t bt = (size_t)o->B * o->T;
    r->tok = al__malloc(bt * sizeof *r->tok, "batch tokens", err);
    r->tgt = al__malloc(bt * sizeof *r->tgt, "batch targets", err);
    if (!r->tok || !r->tgt) return AL_E_NOMEM;
    if ((rc = al__mkdirs(o->out, err))) return rc;
    *step0 = 0;
    if (o->resume) {
        if ((rc = al__tr_load_state(r->m, at(r, "state.bin"), step0, err))) return rc;
    } else if (al__is_file(at(r, "state.bin"))) {
        return al__err(err, AL_E_INVALID,
                       "%s holds a run already (state.bin): --resume to continue it, or another "
                       "--out",
                       o->out);
    } else if (o->init) {
        if ((rc = al__tr_load_init(r->m, o->init, err))) return rc;
        al__tr_init_extra(r->m);
        if ((rc = al__tr_init_ssmax_s(r->m, o->init, err))) return rc;
    } else {
        al__tr_init(r->m, o->seed);
    }
    return open_log(r, *step0, err);
}

static int one_step(run *r, int s, double *loss, double *gnorm, int dump, al_error *err) {
    const al_train_opts *o = r->o;
    al__tr_batch(&r->data, o->seed, s, o->fixed_batch, o->B, o->T, r->tok, r->tgt);
    int rc = al__tr_forward(r->m, r->tok, r->tgt, NULL, loss, err);
    if (!rc) rc = al__tr_backward(r->m, r->tok, r->tgt, err);
    if (rc) return al__err_prefix(err, rc, "step %d", s + 1);
    if (!isfinite(*loss))
        return al__err(err, AL_E_RANGE, "step %d: the loss is %g (diverged)", s + 1, *loss);
    float *before = NULL;
    if (dump) {
        before = al__malloc(r->m->n_params * sizeof *before, "initial weights", err);
        if (!before) return AL_E_NOMEM;
        memcpy(before, r->m->params, r->m->n_params * sizeof *before);
    }
    al__tr_adamw(r->m, &r->opt, s, gnorm);
    if (dump) rc = write_dump(r, *loss, before, err);
    free(before);
    return rc;
}

static int loop(run *r, int step0, al_train_summary *sum, al_error *err) {
    const al_train_opts *o = r->o;
    al__progress p;
    al__progress_begin(&p, o->progress, stderr, (double)(o->steps - step0));
    double t0 = al__now(), loss = NAN, vl = NAN;
    int s = step0, rc = 0;
    for (; s < o->steps; s++) {
        double gnorm;
        if ((rc = one_step(r, s, &loss, &gnorm, o->dump && s == step0, err))) break;
        double el = al__now() - t0, tps = (double)(s + 1 - step0) * o->B * o->T / el;
        cJSON *j = cJSON_CreateObject();
        cJSON_AddNumberToObject(j, "step", s + 1);
        cJSON_AddNumberToObject(j, "loss", loss);
        cJSON_AddNumberToObject(j, "lr", al__tr_lr(&r->opt, s));
        cJSON_AddNumberToObject(j, "grad_norm", gnorm);
        cJSON_AddNumberToObject(j, "tokens_per_s", tps);
        cJSON_AddNumberToObject(j, "elapsed_s", el);
        if ((rc = log_line(r, j, err))) break;
        int last = s + 1 == o->steps, stop = o->stop_after && s + 1 - step0 >= o->stop_after;
        if ((o->eval_every && (s + 1) % o->eval_every == 0) || last)
            if ((rc = eval_line(r, s + 1, &vl, err))) break;
        if (((o->ckpt_every && (s + 1) % o->ckpt_every == 0) || last || stop) &&
            (rc = save_all(r, s + 1, err)))
            break;
        char status[96];
        snprintf(status, sizeof status, "step %d loss %.4f | %.0f tok/s", s + 1, loss, tps);
        al__progress_add(&p, 1, status);
        if (stop) {
            s++;
            break;
        }
    }
    al__progress_end(&p);
    if (rc) return rc;
    if (s == step0 && step0 == o->steps) rc = save_all(r, s, err); /* nothing left to do */
    sum->steps_done = s;
    sum->last_loss = loss;
    sum->val_loss = vl;
    sum->seconds = al__now() - t0;
    sum->tokens_per_s = (double)(s - step0) * o->B * o->T / (sum->seconds > 0 ? sum->seconds : 1);
    return rc;
}

int al__tr_run(const al_train_opts *o, al_train_summary *sum, al_error *err) {
    memset(sum, 0, sizeof *sum);
    if (!o->out || !*o->out) return al__err(err, AL_E_INVALID, "train: no output directory");
    if (o->steps < 0 || o->warmup < 0 || !(o->lr > 0) || !(o->clip >= 0) ||
        !(o->weight_decay >= 0) || !(o->beta1 >= 0 && o->beta1 < 1) ||
        !(o->beta2 >= 0 && o->beta2 < 1) || !(o->min_lr_frac >= 0))
        return al__err(err, AL_E_INVALID,
                       "train: steps, warmup >= 0, lr > 0, clip, weight decay, min lr >= 0, betas "
                       "in [0, 1)");
    run r;
    memset(&r, 0, sizeof r);
    r.o = o, r.opt = al__tr_opt_of(o);
    uint64_t step0 = 0;
    int rc = setup(&r, &step0, err);
    if (!rc && step0 > (uint64_t)o->steps)
        rc = al__err(err, AL_E_INVALID, "train: the state is at step %llu, past --steps %d",
                     (unsigned long long)step0, o->steps);
    if (!rc) rc = loop(&r, (int)step0, sum, err);
    if (r.log) fclose(r.log);
    free(r.tok);
    free(r.tgt);
    al__tr_data_free(&r.data);
    al__tr_model_free(r.m);
    return rc;
}
