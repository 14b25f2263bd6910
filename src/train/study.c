/* study.c: attnlim study's runs and diagnostics (study.h).
 *
 * Each normalizer's model is trained by al__tr_run into OUT/runs/NAME (resumable: a run whose
 * state is complete is not trained again). Then, on `windows` windows of T tokens of the
 * held-out tail, through the trainer's own forward (so every normalizer runs as trained), per
 * (layer, head):
 *   - vanishing (METHOD 2): the max weight and H / log n of the row with n keys, for n on a
 *     doubling grid; the slope of log(max weight) against log n over n >= 16;
 *   - separability (METHOD 5): N_s/N on the value vectors for N = 1, 2, 4, ..., 128;
 *   - critical N (METHOD 4): for each L of crit_L, the first L rows of each window are a
 *     window of L tokens (causal); dtilde and E per head (means over windows), KS at 0.01 over
 *     the L H heads of the model (the paper's 144 heads are GPT-2's; here there are fewer);
 *   - the normalizer's Jacobian (METHOD 6/7): mean spectral norm over rows with n >= 2.
 * All on value vectors (METHOD 1's default reading). */
#include "hooks.h"
#include "study.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

void al__study_defaults(al__study_opts *o) {
    memset(o, 0, sizeof *o);
    al__tr_run_defaults(&o->base);
    /* about an hour of a quiet 2-core machine for the six runs, their diagnostics and the
     * library's reproduce and diagnose: 600 steps from the CPU seconds of short runs
     * (docs/training.md, docs/findings.md) */
    o->base.cfg.n_layer = 4, o->base.cfg.n_head = 4, o->base.cfg.n_embd = 128;
    o->base.cfg.n_ctx = 1024;
    o->base.B = 2, o->base.T = 1024;
    o->base.opt.steps = 600, o->base.opt.warmup = 60, o->base.opt.lr = 2e-3;
    o->base.eval_every = 50, o->base.val_windows = 4;
    o->windows = 2;
    int L[] = {128, 256, 512, 1024};
    memcpy(o->crit_L, L, sizeof L);
    o->n_crit_L = 4;
}

int al__study_parse_norms(const char *list, al__study_opts *o, al_error *err) {
    o->n_norms = 0;
    const char *p = list;
    while (p && *p) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        if (!len || len >= sizeof o->norms[0].name)
            return al__err(err, AL_E_INVALID, "study: bad normalizer list item in '%s'", list);
        if (o->n_norms == AL__STUDY_MAX_NORMS)
            return al__err(err, AL_E_INVALID, "study: more than %d normalizers",
                           AL__STUDY_MAX_NORMS);
        al__study_norm *s = &o->norms[o->n_norms];
        memset(s, 0, sizeof *s);
        memcpy(s->name, p, len);
        char base[32];
        snprintf(base, sizeof base, "%s", s->name);
        char *colon = strchr(base, ':');
        double param = NAN;
        if (colon) {
            *colon = 0;
            char *end;
            param = strtod(colon + 1, &end);
            if (end == colon + 1 || *end || !isfinite(param))
                return al__err(err, AL_E_INVALID,
                               "study: '%s': the value after ':' is not a number", s->name);
        }
        int fixed = !strcmp(base, "ssmax-fixed");
        int rc = al_norm_parse(fixed ? "ssmax" : base, &s->nm, err);
        if (rc) return al__err_prefix(err, rc, "study");
        if (colon && s->nm.kind == AL_NORM_ENTMAX)
            s->nm.alpha = param;
        else if (colon && s->nm.kind == AL_NORM_SSMAX)
            s->nm.ssmax_s = param;
        else if (colon)
            return al__err(err, AL_E_INVALID, "study: '%s': only entmax:A and ssmax:S take a value",
                           s->name);
        s->ssmax_learn = s->nm.kind == AL_NORM_SSMAX && !fixed;
        if ((rc = al_norm_check(&s->nm, err))) return al__err_prefix(err, rc, "study: %s", s->name);
        for (int k = 0; k < o->n_norms; k++)
            if (!strcmp(o->norms[k].name, s->name))
                return al__err(err, AL_E_INVALID, "study: '%s' given twice", s->name);
        o->n_norms++;
        p = comma ? comma + 1 : NULL;
    }
    if (!o->n_norms) return al__err(err, AL_E_INVALID, "study: no normalizer given");
    return 0;
}

/* ---- diagnostics ------------------------------------------------------------------------- */

/* METHOD section 4's N grid for a window of L (every N < L). out has room for 256. */
static int crit_grid(int L, int *out) {
    int n = 0;
    for (int v = 1; v <= 16; v++) out[n++] = v;
    for (int v = 18; v <= 32; v += 2) out[n++] = v;
    for (int v = 36; v <= 64; v += 4) out[n++] = v;
    for (int v = 72; v <= 128; v += 8) out[n++] = v;
    for (int v = 144; v <= 256; v += 16) out[n++] = v;
    int step = L / 32 > 1 ? L / 32 : 1;
    for (int v = 256 + step; v < L && n < 256; v += step) out[n++] = v;
    int k = 0;
    while (k < n && out[k] < L) k++;
    return k;
}

typedef struct acc {
    int L, H, T, nNs, nNg;
    double *maxw, *ent;                   /* [T] sums over heads and windows of row t */
    double *ns;                           /* [nNs, L H] sums over windows */
    double *jac;                          /* [L H] sums over windows */
    double *dt, *E;                       /* [n_crit_L, 256, L H] sums over windows */
    int crit_n[AL__STUDY_MAX_L], *crit_N; /* [n_crit_L][256] grids */
} acc;

static const int NS_N[] = {1, 2, 4, 8, 16, 32, 64, 128};
#define L_H(A) ((size_t)(A)->L * (size_t)(A)->H)

/* One head of one window: everything of the accumulator for (l, h). */
static int head_diag(const al__study_opts *o, const al__tr_model *m, const al_norm *nm0, int l,
                     int h, acc *A, double *w, double *x, double *wb, double *xb, double *zr,
                     al_error *err) {
    const int T = A->T, H = A->H, C = m->cfg.n_embd, d = C / H, lh = l * H + h;
    const float *p = m->acts.p + ((size_t)l * H + h) * T * T; /* B = 1 */
    const float *z = m->acts.z ? m->acts.z + ((size_t)l * H + h) * T * T : NULL;
    const float *qkv = m->acts.qkv + (size_t)l * T * 3 * C;
    for (size_t i = 0; i < (size_t)T * T; i++) w[i] = p[i];
    for (int t = 0; t < T; t++)
        for (int k = 0; k < d; k++) x[t * d + k] = qkv[(size_t)t * 3 * C + 2 * C + h * d + k];
    al_norm nm = *nm0;
    const float *s = al__tr_ssmax_s(m, m->params);
    if (s) nm.ssmax_s = s[lh];
    /* vanishing and the Jacobian, row by row */
    double jac = 0;
    for (int t = 0; t < T; t++) {
        double mx, en, en_n;
        int rc = al_row_vanishing(w + (size_t)t * T, t + 1, &mx, &en, &en_n, err);
        if (rc) return rc;
#pragma omp atomic
        A->maxw[t] += mx;
#pragma omp atomic
        A->ent[t] += t ? en_n : 0.0;
        if (t == 0) continue;
        double sp;
        if (!z) {
            sp = al_norm_rank1_spectral(w + (size_t)t * T, t + 1) / nm.temperature;
        } else {
            for (int j = 0; j <= t; j++) zr[j] = z[(size_t)t * T + j];
            if ((rc = al_norm_spectral_norm(&nm, zr, t + 1, &sp, err))) return rc;
        }
        jac += sp / (T - 1);
    }
    A->jac[lh] += jac;
    /* separability over the whole window */
    al_topn_stats st[8];
    al_metrics_opts mo = {.top_n = NS_N, .n_top = A->nNs, .separability = 1, .causal = 1};
    int rc = al_head_metrics(w, x, T, d, &mo, st, NULL, NULL, err);
    if (rc) return rc;
    for (int k = 0; k < A->nNs; k++) A->ns[k * L_H(A) + lh] += st[k].ns_ratio;
    /* distances on the windows of each L (the first L rows and keys) */
    for (int c = 0; c < o->n_crit_L; c++) {
        int Lc = o->crit_L[c], nN = A->crit_n[c];
        for (int t = 0; t < Lc; t++) memcpy(wb + (size_t)t * Lc, w + (size_t)t * T, Lc * sizeof *w);
        memcpy(xb, x, (size_t)Lc * d * sizeof *x);
        al_topn_stats *ds = malloc((size_t)nN * sizeof *ds);
        if (!ds) return al__err(err, AL_E_NOMEM, "study: out of memory");
        al_metrics_opts dm = {
            .top_n = A->crit_N + 256 * c, .n_top = nN, .distance = 1, .causal = 1};
        rc = al_head_metrics(wb, xb, Lc, d, &dm, ds, NULL, NULL, err);
        for (int k = 0; !rc && k < nN; k++) {
            size_t i = ((size_t)c * 256 + k) * L_H(A) + lh;
            A->dt[i] += ds[k].dtilde;
            A->E[i] += ds[k].E;
        }
        free(ds);
        if (rc) return rc;
    }
    return 0;
}

static void acc_free(acc *A) {
    free(A->maxw), free(A->ent), free(A->ns), free(A->jac), free(A->dt), free(A->E);
    free(A->crit_N);
}

static int acc_new(const al__study_opts *o, const al__tr_model *m, acc *A, al_error *err) {
    memset(A, 0, sizeof *A);
    A->L = m->cfg.n_layer, A->H = m->cfg.n_head, A->T = m->acts.T;
    A->nNs = 0;
    while (A->nNs < 8 && NS_N[A->nNs] < A->T) A->nNs++;
    size_t lh = L_H(A), nc = (size_t)o->n_crit_L;
    A->maxw = calloc((size_t)A->T, sizeof(double));
    A->ent = calloc((size_t)A->T, sizeof(double));
    A->ns = calloc(8 * lh, sizeof(double));
    A->jac = calloc(lh, sizeof(double));
    A->dt = calloc((nc ? nc : 1) * 256 * lh, sizeof(double));
    A->E = calloc((nc ? nc : 1) * 256 * lh, sizeof(double));
    A->crit_N = calloc((nc ? nc : 1) * 256, sizeof(int));
    if (!A->maxw || !A->ent || !A->ns || !A->jac || !A->dt || !A->E || !A->crit_N) {
        acc_free(A);
        return al__err(err, AL_E_NOMEM, "study: out of memory for the diagnostics");
    }
    for (int c = 0; c < o->n_crit_L; c++)
        A->crit_n[c] = crit_grid(o->crit_L[c], A->crit_N + 256 * c);
    return 0;
}

/* Every head of the window just run (parallel over heads; the first error by head index). */
static int window_diag(const al__study_opts *o, const al__tr_model *m, const al_norm *nm, acc *A,
                       al_error *err) {
    const int T = A->T, d = m->cfg.n_embd / A->H, nlh = (int)L_H(A);
    int bad = nlh;
#pragma omp parallel
    {
        size_t TT = (size_t)T * T;
        double *w = malloc(TT * sizeof *w), *wb = malloc(TT * sizeof *wb);
        double *x = malloc((size_t)T * d * sizeof *x), *xb = malloc((size_t)T * d * sizeof *xb);
        double *zr = malloc((size_t)T * sizeof *zr);
#pragma omp for schedule(dynamic, 1)
        for (int lh = 0; lh < nlh; lh++) {
            al_error e = {0};
            int rc = w && wb && x && xb && zr
                         ? head_diag(o, m, nm, lh / A->H, lh % A->H, A, w, x, wb, xb, zr, &e)
                         : al__err(&e, AL_E_NOMEM, "study: out of memory");
            if (rc) {
#pragma omp critical(al_study_err)
                if (lh < bad) {
                    bad = lh;
                    if (err) *err = e;
                }
            }
        }
        free(w), free(wb), free(x), free(xb), free(zr);
    }
    return bad < nlh ? (err ? err->code : AL_E_RANGE) : 0;
}

static cJSON *arr_d(const double *v, int n, double scale) {
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < n; i++)
        cJSON_AddItemToArray(a, isfinite(v[i] * scale) ? cJSON_CreateNumber(v[i] * scale)
                                                       : cJSON_CreateNull());
    return a;
}

static cJSON *arr_i(const int *v, int n) {
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber(v[i]));
    return a;
}

/* Slope of log y against log x over the points with x >= 16 (least squares with intercept). */
static double loglog_slope(const int *x, const double *y, int n) {
    double sx = 0, sy = 0, sxx = 0, sxy = 0;
    int k = 0;
    for (int i = 0; i < n; i++) {
        if (x[i] < 16 || !(y[i] > 0)) continue;
        double a = log((double)x[i]), b = log(y[i]);
        sx += a, sy += b, sxx += a * a, sxy += a * b, k++;
    }
    if (k < 2) return NAN;
    return (k * sxy - sx * sy) / (k * sxx - sx * sx);
}

static cJSON *acc_json(const al__study_opts *o, acc *A, int nw, double vl, al_error *err) {
    const int T = A->T, nlh = (int)L_H(A);
    cJSON *j = cJSON_CreateObject();
    cJSON_AddNumberToObject(j, "val_loss", vl);
    cJSON_AddNumberToObject(j, "windows", nw);
    cJSON_AddNumberToObject(j, "T", T);
    int ng = 0, ngrid[32];
    double mw[32], en[32];
    for (int n = 1; n <= T && ng < 32; n *= 2) {
        ngrid[ng] = n;
        mw[ng] = A->maxw[n - 1] / ((double)nw * nlh);
        en[ng] = n > 1 ? A->ent[n - 1] / ((double)nw * nlh) : NAN;
        ng++;
    }
    if (ngrid[ng - 1] != T && ng < 32) {
        ngrid[ng] = T, mw[ng] = A->maxw[T - 1] / ((double)nw * nlh);
        en[ng] = A->ent[T - 1] / ((double)nw * nlh), ng++;
    }
    cJSON *v = cJSON_AddObjectToObject(j, "vanishing");
    cJSON_AddItemToObject(v, "n", arr_i(ngrid, ng));
    cJSON_AddItemToObject(v, "max_weight", arr_d(mw, ng, 1));
    cJSON_AddItemToObject(v, "entropy_norm", arr_d(en, ng, 1));
    double sl = loglog_slope(ngrid, mw, ng);
    cJSON_AddItemToObject(v, "loglog_slope",
                          isfinite(sl) ? cJSON_CreateNumber(sl) : cJSON_CreateNull());
    cJSON *s = cJSON_AddObjectToObject(j, "separability");
    cJSON_AddItemToObject(s, "N", arr_i(NS_N, A->nNs));
    double nsm[8];
    cJSON *per = cJSON_AddArrayToObject(s, "ns_ratio_heads");
    for (int k = 0; k < A->nNs; k++) {
        double sum = 0;
        for (int i = 0; i < nlh; i++) sum += A->ns[k * nlh + i] / nw;
        nsm[k] = sum / nlh;
        cJSON_AddItemToArray(per, arr_d(A->ns + (size_t)k * nlh, nlh, 1.0 / nw));
    }
    cJSON_AddItemToObject(s, "ns_ratio", arr_d(nsm, A->nNs, 1));
    cJSON *c = cJSON_AddObjectToObject(j, "critical_n");
    cJSON_AddItemToObject(c, "L", arr_i(o->crit_L, o->n_crit_L));
    cJSON *nc = cJSON_AddArrayToObject(c, "n_crit"),
          *ratio = cJSON_AddArrayToObject(c, "n_crit_over_L");
    cJSON_AddNumberToObject(c, "level", 0.01);
    cJSON_AddNumberToObject(c, "heads", nlh);
    int rc = 0;
    for (int k = 0; k < o->n_crit_L && !rc; k++) {
        int nN = A->crit_n[k], crit = -1;
        double *pv = malloc((size_t)(nN ? nN : 1) * sizeof *pv);
        double *dt = A->dt + (size_t)k * 256 * nlh, *E = A->E + (size_t)k * 256 * nlh;
        rc = pv ? al_critical_n(A->crit_N + 256 * k, nN, dt, E, nlh, 0.01, pv, &crit, err)
                : al__err(err, AL_E_NOMEM, "study: out of memory");
        free(pv);
        cJSON_AddItemToArray(nc, crit > 0 ? cJSON_CreateNumber(crit) : cJSON_CreateNull());
        cJSON_AddItemToArray(ratio, crit > 0 ? cJSON_CreateNumber((double)crit / o->crit_L[k])
                                             : cJSON_CreateNull());
    }
    double jm = 0;
    for (int i = 0; i < nlh; i++) jm += A->jac[i] / nw / nlh;
    cJSON *jj = cJSON_AddObjectToObject(j, "jacobian");
    cJSON_AddNumberToObject(jj, "spectral_mean", jm);
    cJSON_AddItemToObject(jj, "spectral_heads", arr_d(A->jac, nlh, 1.0 / nw));
    if (rc) {
        cJSON_Delete(j);
        return NULL;
    }
    return j;
}

int al__study_diagnose(const al__study_opts *o, const al__study_norm *sn, const char *run_dir,
                       cJSON **out, al_error *err) {
    *out = NULL;
    const al__tr_run_opts *b = &o->base;
    al__tr_data data;
    int rc = al__tr_data_load(b->corpus, b->data_path, b->tokenizer, b->val_frac, &data, err);
    if (rc) return rc;
    al__tr_cfg c = b->cfg;
    c.vocab_size = data.vocab, c.norm = sn->nm, c.ssmax_learn = sn->ssmax_learn;
    al__tr_model *m = NULL;
    acc A;
    memset(&A, 0, sizeof A);
    int32_t *tok = malloc((size_t)b->T * sizeof *tok), *tgt = malloc((size_t)b->T * sizeof *tgt);
    char path[4096 + 32];
    snprintf(path, sizeof path, "%s/state.bin", run_dir);
    uint64_t step = 0;
    rc = tok && tgt ? al__tr_model_new(&c, 1, b->T, &m, err) : al__err(err, AL_E_NOMEM, "study");
    if (!rc) rc = al__tr_load_state(m, path, &step, err);
    if (!rc) rc = acc_new(o, m, &A, err);
    double vl = 0;
    for (int w = 0; !rc && w < o->windows; w++) {
        al__tr_val_window(&data, w, o->windows, b->T, tok, tgt);
        double l;
        rc = al__tr_forward(m, tok, tgt, NULL, &l, err);
        if (!rc) rc = window_diag(o, m, &sn->nm, &A, err);
        vl += l / o->windows;
    }
    if (!rc) {
        *out = acc_json(o, &A, o->windows, vl, err);
        if (!*out) rc = err ? err->code : AL_E_NOMEM;
    }
    if (!rc) {
        cJSON_AddStringToObject(*out, "normalizer", sn->name);
        cJSON_AddNumberToObject(*out, "steps", (double)step);
        const float *s = al__tr_ssmax_s(m, m->params);
        if (s) {
            double sv[1024];
            int n = c.n_layer * c.n_head < 1024 ? c.n_layer * c.n_head : 1024;
            for (int k = 0; k < n; k++) sv[k] = s[k];
            cJSON_AddItemToObject(*out, "ssmax_s", arr_d(sv, n, 1));
        }
    }
    if (rc && err) al__err_prefix(err, rc, "study: diagnosing %s", sn->name);
    acc_free(&A);
    al__tr_model_free(m);
    free(tok), free(tgt);
    al__tr_data_free(&data);
    return rc;
}

/* ---- the library's reproduce and diagnose on each checkpoint ------------------------------- */

/* DIR/results.json's verdicts as [{key, verdict, measured}] (NULL when unreadable). */
static cJSON *repro_verdicts(const char *rdir, al_error *err) {
    char path[4096 + 64], *text;
    size_t len;
    snprintf(path, sizeof path, "%s/results.json", rdir);
    if (al__read_file(path, (size_t)1 << 30, &text, &len, err)) return NULL;
    cJSON *j = cJSON_ParseWithLength(text, len), *out = cJSON_CreateArray();
    free(text);
    const cJSON *v, *vd = cJSON_GetObjectItemCaseSensitive(j, "verdicts");
    cJSON_ArrayForEach(v, vd) {
        cJSON *it = cJSON_CreateObject();
        static const char *keep[] = {"key", "claim", "verdict", "measured"};
        for (int k = 0; k < 4; k++) {
            const cJSON *x = cJSON_GetObjectItemCaseSensitive(v, keep[k]);
            if (cJSON_IsString(x)) cJSON_AddStringToObject(it, keep[k], x->valuestring);
        }
        cJSON_AddItemToArray(out, it);
    }
    cJSON_Delete(j);
    return out;
}

/* `attnlim reproduce --readings all` (al_reproduce) into DIR/reproduce and `attnlim diagnose`
 * (al_diagnose) into DIR/diagnose on the run's checkpoint, loaded as every command loads it (its
 * normalizer the model's own attention; its tokenizer the run's); their verdicts and flag counts
 * into run's "reproduce" and "diagnose". A finished reproduce (results.json) is reused. */
static int study_library(const al__study_opts *o, const char *dir, cJSON *run, al_error *err) {
    char rdir[4096 + 64], ddir[4096 + 64], res[4096 + 96];
    snprintf(rdir, sizeof rdir, "%s/reproduce", dir);
    snprintf(ddir, sizeof ddir, "%s/diagnose", dir);
    snprintf(res, sizeof res, "%s/results.json", rdir);
    int rc = 0;
    if (!al__is_file(res)) {
        al_repro_opts r;
        al_repro_defaults(&r);
        r.model = dir, r.corpus = o->base.corpus, r.data_path = o->base.data_path;
        r.out_dir = rdir, r.windows = 1, r.readings = "all", r.resume = 1;
        r.lengths = o->crit_L, r.n_lengths = o->n_crit_L, r.long_length = o->base.T;
        r.quiet = !o->progress, r.progress = o->progress ? 2 : 0;
        if ((rc = al_reproduce(&r, err))) return al__err_prefix(err, rc, "reproduce");
    }
    cJSON *vd = repro_verdicts(rdir, err);
    if (!vd) return al__err_prefix(err, err ? err->code : AL_E_IO, "reproduce");
    cJSON *rj = cJSON_AddObjectToObject(run, "reproduce");
    cJSON_AddStringToObject(rj, "dir", "reproduce");
    cJSON_AddItemToObject(rj, "verdicts", vd);
    al_diag_opts d = {.model = dir,
                      .corpus = o->base.corpus,
                      .data_path = o->base.data_path,
                      .out_dir = ddir,
                      .length = o->base.T};
    char *json = NULL;
    if ((rc = al_diagnose(&d, &json, err))) return al__err_prefix(err, rc, "diagnose");
    cJSON *dj = cJSON_Parse(json);
    free(json);
    cJSON *sum = cJSON_DetachItemFromObjectCaseSensitive(dj, "summary");
    cJSON_Delete(dj);
    cJSON *dd = cJSON_AddObjectToObject(run, "diagnose");
    cJSON_AddStringToObject(dd, "dir", "diagnose");
    if (sum) cJSON_AddItemToObject(dd, "summary", sum);
    return 0;
}

/* ---- the runs ------------------------------------------------------------------------------ */

int al__study_run(const al__study_opts *o, al_error *err) {
    if (!o->out || !*o->out) return al__err(err, AL_E_INVALID, "study: no output directory");
    if (o->windows < 1) return al__err(err, AL_E_INVALID, "study: --windows must be >= 1");
    for (int k = 0; k < o->n_crit_L; k++)
        if (o->crit_L[k] < 2 || o->crit_L[k] > o->base.T)
            return al__err(err, AL_E_INVALID, "study: critical-N window %d outside 2..%d (--seq)",
                           o->crit_L[k], o->base.T);
    int rc = al__mkdirs(o->out, err);
    cJSON *runs[AL__STUDY_MAX_NORMS] = {0};
    for (int k = 0; !rc && k < o->n_norms; k++) {
        const al__study_norm *sn = &o->norms[k];
        char dir[4096 + 64], state[4096 + 80];
        snprintf(dir, sizeof dir, "%s/runs/%s", o->out, sn->name);
        snprintf(state, sizeof state, "%s/state.bin", dir);
        al__tr_run_opts r = o->base;
        r.cfg.norm = sn->nm, r.cfg.ssmax_learn = sn->ssmax_learn;
        r.out = dir, r.resume = al__is_file(state), r.progress = o->progress;
        if (o->progress)
            al__log(AL_LOG_NOTE, "study: training %s (%d of %d)", sn->name, k + 1, o->n_norms);
        al__tr_summary sum;
        rc = al__tr_run(&r, &sum, err);
        if (rc) {
            al__err_prefix(err, rc, "study: training %s", sn->name);
            break;
        }
        if (o->progress) al__log(AL_LOG_NOTE, "study: diagnosing %s", sn->name);
        if ((rc = al__study_diagnose(o, sn, dir, &runs[k], err))) break;
        if (o->progress) al__log(AL_LOG_NOTE, "study: reproduce and diagnose on %s", sn->name);
        if ((rc = study_library(o, dir, runs[k], err))) {
            al__err_prefix(err, rc, "study: %s", sn->name);
            break;
        }
        char *text = cJSON_Print(runs[k]);
        char path[4096 + 96];
        snprintf(path, sizeof path, "%s/diag.json", dir);
        rc = text ? al__write_file_atomic(path, text, strlen(text), err)
                  : al__err(err, AL_E_NOMEM, "study: out of memory");
        free(text);
    }
    if (!rc) rc = al__study_report(o, runs, o->n_norms, err);
    for (int k = 0; k < o->n_norms; k++) cJSON_Delete(runs[k]);
    return rc;
}
