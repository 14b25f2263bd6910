/* study.c: attnlim study's runs and diagnostics (study.h).
 *
 * Each normalizer's model is trained by al__tr_run into OUT/runs/NAME (resumable: a run whose
 * state is complete is not trained again). Then the library's own experiments run on each
 * checkpoint, loaded as every command loads it (its normalizer the model's attention, a learnt
 * ssmax s per head included; its tokenizer the run's), in-process: al_reproduce with
 * --readings all into OUT/runs/NAME/reproduce and al_diagnose into OUT/runs/NAME/diagnose, on
 * the held-out tail of the corpus (OUT/heldout.txt: the text the training never saw). The run's
 * entry of the report (OUT/runs/NAME/diag.json) is built from their outputs and the training
 * log:
 *   - vanishing (METHOD 2): reproduce's median over heads of the max weight and H / log n of
 *     the rows with n keys, on a doubling grid of n, and the slope of log(max weight) against
 *     log n over n >= 16;
 *   - critical N (METHOD 4): reproduce's N_crit and N_crit / L (KS at 0.01) for each L of
 *     crit_L, under the run's reading and under every reading of METHOD 9 (readings.json);
 *   - separability (METHOD 5): reproduce's median N_s/N over heads against N;
 *   - the normalizer's Jacobian (METHOD 6/7): diagnose's mean exact spectral norm per head;
 *   - the validation loss: the last of log.jsonl (the trainer's held-out windows). */
#include "hooks.h"
#include "study.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

void al__study_defaults(al__study_opts *o) {
    memset(o, 0, sizeof *o);
    o->pub.size = sizeof o->pub;
    o->pub.normalizers = "softmax,sparsemax,entmax15,entmax:1.3,ssmax,sa-softmax";
    al_train_defaults(&o->pub.base);
    /* about an hour of a quiet 2-core machine for the six runs, their diagnostics and the
     * library's reproduce and diagnose: 600 steps from the CPU seconds of short runs
     * (docs/training.md, docs/findings.md) */
    o->pub.base.n_layer = 4, o->pub.base.n_head = 4, o->pub.base.n_embd = 128;
    o->pub.base.n_ctx = 1024;
    o->pub.base.B = 2, o->pub.base.T = 1024;
    o->pub.base.steps = 600, o->pub.base.warmup = 60, o->pub.base.lr = 2e-3;
    o->pub.base.eval_every = 50, o->pub.base.val_windows = 4;
    o->pub.base.ckpt_every = 50; /* an interrupted run resumes from its last 50 steps */
    o->pub.windows = 2;
    int L[] = {128, 256, 512, 1024};
    memcpy(o->pub.crit_L, L, sizeof L);
    o->pub.n_crit_L = 4;
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

/* ---- the held-out text ------------------------------------------------------------------- */

/* OUT/heldout.txt: the corpus's held-out tail (the last val_frac of the training tokens) as
 * text: bytes, the bytes past n_train; gpt2, the ids past n_train decoded. Its path in
 * path[cap]. */
static int write_heldout(const al__study_opts *o, char *path, size_t cap, al_error *err) {
    snprintf(path, cap, "%s/heldout.txt", o->pub.out);
    const al_train_opts *b = &o->pub.base;
    al__tr_data d;
    int rc = al__tr_data_load(b->corpus, b->data_path, b->tokenizer, b->val_frac, &d, err);
    if (rc) return rc;
    char *text = NULL;
    size_t len = d.n - d.n_train;
    if (!strcmp(d.tokenizer, "bytes")) {
        text = al__malloc(len ? len : 1, "held-out text", err);
        if (!text) rc = AL_E_NOMEM;
        for (size_t i = 0; !rc && i < len; i++) text[i] = (char)d.ids[d.n_train + i];
    } else {
        al_tokenizer *tk = NULL;
        rc = al_tokenizer_open_gpt2(NULL, &tk, err);
        if (!rc) rc = al_detokenize(tk, d.ids + d.n_train, len, &text, &len, err);
        al_tokenizer_free(tk);
    }
    if (!rc) rc = al__write_file_atomic(path, text, len, err);
    free(text);
    al__tr_data_free(&d);
    return rc ? al__err_prefix(err, rc, "study: the held-out text %s", path) : 0;
}

/* ---- the library's reproduce and diagnose on each checkpoint ------------------------------- */

static cJSON *read_json(const char *path, al_error *err) {
    char *text;
    size_t len;
    if (al__read_file(path, (size_t)1 << 30, &text, &len, err)) return NULL;
    cJSON *j = cJSON_ParseWithLength(text, len);
    free(text);
    if (!j) al__err(err, AL_E_FORMAT, "%s: not valid JSON", path);
    return j;
}

static const cJSON *at2(const cJSON *j, const char *a, const char *b) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(j, a);
    return b ? cJSON_GetObjectItemCaseSensitive(x, b) : x;
}

static double num_at(const cJSON *a, int i) {
    const cJSON *v = cJSON_GetArrayItem(a, i);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

static cJSON *arr_d(const double *v, int n) {
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < n; i++)
        cJSON_AddItemToArray(a, isfinite(v[i]) ? cJSON_CreateNumber(v[i]) : cJSON_CreateNull());
    return a;
}

static cJSON *dup(const cJSON *x) {
    return x ? cJSON_Duplicate(x, 1) : cJSON_CreateNull();
}

/* Slope of log y against log x over the points with x >= 16 (least squares with intercept). */
static double loglog_slope(const double *x, const double *y, int n) {
    double sx = 0, sy = 0, sxx = 0, sxy = 0;
    int k = 0;
    for (int i = 0; i < n; i++) {
        if (x[i] < 16 || !(y[i] > 0)) continue;
        double a = log(x[i]), b = log(y[i]);
        sx += a, sy += b, sxx += a * a, sxy += a * b, k++;
    }
    if (k < 2) return NAN;
    return (k * sxy - sx * sy) / (k * sxx - sx * sx);
}

/* run.vanishing from results.json's vanishing: the rows with n = 1, 2, 4, ..., L keys. */
static void run_vanishing(const cJSON *res, cJSON *run) {
    const cJSON *v = at2(res, "vanishing", NULL), *vn = at2(v, "n", NULL);
    const cJSON *mw = at2(v, "max_weight", "median");
    const cJSON *en = at2(v, "entropy_over_log_n", "median");
    int L = cJSON_GetArraySize(vn), k = 0;
    double n[40], m[40], e[40];
    for (int i = 0; i < L && k < 40; i++) {
        double x = num_at(vn, i);
        int last = i == L - 1, pow2 = x >= 1 && ((long)x & ((long)x - 1)) == 0;
        if (!pow2 && !last) continue;
        n[k] = x, m[k] = num_at(mw, i), e[k] = x > 1 ? num_at(en, i) : NAN, k++;
    }
    cJSON *o = cJSON_AddObjectToObject(run, "vanishing");
    cJSON_AddStringToObject(o, "of",
                            "reproduce: median over heads of each head's mean over the "
                            "windows, rows with n keys");
    cJSON_AddItemToObject(o, "n", arr_d(n, k));
    cJSON_AddItemToObject(o, "max_weight", arr_d(m, k));
    cJSON_AddItemToObject(o, "entropy_norm", arr_d(e, k));
    double sl = loglog_slope(n, m, k);
    cJSON_AddItemToObject(o, "loglog_slope",
                          isfinite(sl) ? cJSON_CreateNumber(sl) : cJSON_CreateNull());
}

/* run.critical_n from results.json's alg3 (the run's reading) and readings.json (every
 * reading); run.separability from alg4. */
static void run_crit_sep(const cJSON *res, const cJSON *rd, cJSON *run) {
    const cJSON *a3 = at2(res, "alg3", NULL), *a4 = at2(res, "alg4", NULL), *r;
    cJSON *c = cJSON_AddObjectToObject(run, "critical_n");
    cJSON_AddStringToObject(c, "of", "reproduce: Algorithm 3, KS at 0.01 over the model's heads");
    cJSON_AddItemToObject(c, "L", dup(at2(a3, "L", NULL)));
    cJSON_AddItemToObject(c, "n_crit", dup(at2(a3, "critical_n", "0.01")));
    cJSON_AddItemToObject(c, "n_crit_over_L", dup(at2(a3, "critical_ratio", "0.01")));
    cJSON_AddNumberToObject(c, "level", 0.01);
    cJSON_AddItemToObject(c, "heads",
                          dup(at2(at2(res, "manifest", "options"), "heads_analysed", NULL)));
    cJSON *all = cJSON_AddArrayToObject(c, "readings");
    cJSON_ArrayForEach(r, at2(rd, "readings", NULL)) {
        cJSON *x = cJSON_CreateObject();
        cJSON_AddItemToObject(x, "name", dup(at2(r, "name", NULL)));
        cJSON_AddItemToObject(x, "n_crit_over_L", dup(at2(r, "critical_n", "ratio")));
        const cJSON *vd = at2(r, "verdicts", NULL);
        cJSON_AddItemToObject(x, "critical_n", dup(at2(vd, "critical_n", "verdict")));
        cJSON_AddItemToObject(x, "separability", dup(at2(vd, "separability", "verdict")));
        cJSON_AddItemToArray(all, x);
    }
    cJSON *s = cJSON_AddObjectToObject(run, "separability");
    cJSON_AddStringToObject(s, "of", "reproduce: Algorithm 4, median N_s/N over heads");
    cJSON_AddItemToObject(s, "N", dup(at2(a4, "N", NULL)));
    cJSON_AddItemToObject(s, "ns_ratio", dup(at2(a4, "ratio", "median")));
    cJSON_AddItemToObject(s, "ns_ratio_heads", dup(at2(a4, "per_head", "ratio")));
}

/* run.jacobian from diagnose.json's heads (index layer * H + head); run.diagnose.summary. */
static void run_jacobian(const cJSON *dg, int L, int H, cJSON *run) {
    int nlh = L * H;
    double *sp = calloc((size_t)(nlh ? nlh : 1), sizeof *sp), mean = 0;
    int cnt = 0;
    const cJSON *h;
    for (int i = 0; sp && i < nlh; i++) sp[i] = NAN;
    cJSON_ArrayForEach(h, at2(dg, "heads", NULL)) {
        const cJSON *lv = at2(h, "layer", NULL), *hv = at2(h, "head", NULL);
        if (!sp || !cJSON_IsNumber(lv) || !cJSON_IsNumber(hv)) continue;
        int l = lv->valueint, k = hv->valueint;
        const cJSON *v = at2(h, "jacobian_spectral_T1", NULL);
        if (l >= 0 && l < L && k >= 0 && k < H && cJSON_IsNumber(v))
            sp[l * H + k] = v->valuedouble, mean += v->valuedouble, cnt++;
    }
    cJSON *j = cJSON_AddObjectToObject(run, "jacobian");
    cJSON_AddStringToObject(j, "of",
                            "diagnose: mean exact spectral norm of the normalizer's "
                            "Jacobian over the rows of each head");
    cJSON_AddItemToObject(j, "spectral_mean",
                          cnt ? cJSON_CreateNumber(mean / cnt) : cJSON_CreateNull());
    cJSON_AddItemToObject(j, "spectral_heads", sp ? arr_d(sp, nlh) : cJSON_CreateArray());
    free(sp);
    cJSON *d = cJSON_AddObjectToObject(run, "diagnose");
    cJSON_AddStringToObject(d, "dir", "diagnose");
    cJSON_AddItemToObject(d, "summary", dup(at2(dg, "summary", NULL)));
}

/* The verdicts of results.json as [{key, claim, verdict, measured}]. */
static cJSON *repro_verdicts(const cJSON *res) {
    cJSON *out = cJSON_CreateArray();
    const cJSON *v;
    cJSON_ArrayForEach(v, at2(res, "verdicts", NULL)) {
        cJSON *it = cJSON_CreateObject();
        static const char *keep[] = {"key", "claim", "verdict", "measured"};
        for (int k = 0; k < 4; k++) {
            const cJSON *x = at2(v, keep[k], NULL);
            if (cJSON_IsString(x)) cJSON_AddStringToObject(it, keep[k], x->valuestring);
        }
        cJSON_AddItemToArray(out, it);
    }
    return out;
}

/* al_reproduce resumed (its finished jobs reused); when DIR/reproduce holds the output of
 * other options (another corpus: an earlier study's diagnostics, a copied study), it is
 * recomputed into a temporary beside it that replaces it in one rename (reproduce --force). */
static int repro_fresh_or_resumed(al_repro_opts *r, al_error *err) {
    al_error e = {0};
    int rc = al_reproduce(r, &e);
    if (!rc || rc != AL_E_INVALID || !strstr(e.msg, "computed with other options")) {
        if (rc && err) *err = e;
        return rc;
    }
    if (!r->quiet) al__log(AL_LOG_NOTE, "study: %s: other options; recomputed", r->out_dir);
    r->resume = 0;
    struct al_outdir *od = NULL;
    const char *dir = r->out_dir;
    rc = al_repro_out_begin(r, 1, &od, err);
    if (!rc) rc = al_reproduce(r, err);
    if (!rc && od) rc = al_outdir_publish(od, err);
    al_outdir_free(od);
    r->out_dir = dir;
    return rc;
}

/* `attnlim reproduce --readings all` (al_reproduce, resumable: finished jobs whose options match
 * are reused) into DIR/reproduce and `attnlim diagnose` (al_diagnose) into DIR/diagnose on the
 * run's checkpoint DIR and the held-out text; *res, *rd, *dg their results.json, readings.json
 * and diagnose.json. */
static int run_library(const al__study_opts *o, const char *dir, const char *text, cJSON **res,
                       cJSON **rd, cJSON **dg, al_error *err) {
    char rdir[4096 + 64], ddir[4096 + 64], path[4096 + 96];
    snprintf(rdir, sizeof rdir, "%s/reproduce", dir);
    snprintf(ddir, sizeof ddir, "%s/diagnose", dir);
    al_repro_opts r;
    al_repro_defaults(&r);
    r.model = dir, r.corpus = text, r.out_dir = rdir, r.windows = o->pub.windows;
    r.readings = "all", r.resume = 1;
    r.lengths = o->pub.crit_L, r.n_lengths = o->pub.n_crit_L, r.long_length = o->pub.base.T;
    r.quiet = !o->pub.progress, r.progress = o->pub.progress;
    int rc = repro_fresh_or_resumed(&r, err);
    if (rc) return al__err_prefix(err, rc, "reproduce");
    snprintf(path, sizeof path, "%s/results.json", rdir);
    if (!(*res = read_json(path, err))) return al__err_prefix(err, err->code, "reproduce");
    snprintf(path, sizeof path, "%s/readings.json", rdir);
    if (!(*rd = read_json(path, err))) return al__err_prefix(err, err->code, "reproduce");
    al_diag_opts d = {.model = dir, .corpus = text, .out_dir = ddir, .length = o->pub.base.T};
    char *json = NULL;
    if ((rc = al_diagnose(&d, &json, err))) return al__err_prefix(err, rc, "diagnose");
    *dg = cJSON_Parse(json);
    free(json);
    return *dg ? 0 : al__err(err, AL_E_FORMAT, "diagnose: its JSON does not parse");
}

/* The run's ssmax s per (layer, head) as its config.json records them (s_per_head, else s). */
static void run_ssmax_s(const char *dir, const al_train_opts *c, cJSON *run) {
    char path[4096 + 32];
    snprintf(path, sizeof path, "%s/config.json", dir);
    al_error e = {0};
    cJSON *j = read_json(path, &e);
    const cJSON *nm = at2(j, "attnlim_normalizer", NULL), *rows = at2(nm, "s_per_head", NULL), *x;
    const cJSON *one = at2(nm, "s", NULL);
    cJSON *s = cJSON_AddArrayToObject(run, "ssmax_s");
    if (rows) {
        const cJSON *row;
        cJSON_ArrayForEach(row, rows) cJSON_ArrayForEach(x, row) cJSON_AddItemToArray(s, dup(x));
    } else {
        for (int k = 0; k < c->n_layer * c->n_head; k++)
            cJSON_AddItemToArray(s, cJSON_IsNumber(one) ? cJSON_CreateNumber(one->valuedouble)
                                                        : cJSON_CreateNull());
    }
    cJSON_Delete(j);
}

/* One run's entry of the report (DIR/diag.json): the library's results on its checkpoint and
 * the training log's last validation loss. */
int al__study_diagnose(const al__study_opts *o, const al__study_norm *sn, const char *dir,
                       const char *text, cJSON **out, al_error *err) {
    *out = NULL;
    cJSON *res = NULL, *rd = NULL, *dg = NULL;
    al__study_curve vl;
    int rc = run_library(o, dir, text, &res, &rd, &dg, err);
    if (!rc) rc = al__study_log_curve(dir, "val_loss", &vl, err);
    if (!rc) {
        cJSON *run = cJSON_CreateObject();
        cJSON_AddStringToObject(run, "normalizer", sn->name);
        cJSON_AddNumberToObject(run, "steps", vl.n ? vl.x[vl.n - 1] : 0);
        cJSON_AddItemToObject(run, "val_loss",
                              vl.n ? cJSON_CreateNumber(vl.y[vl.n - 1]) : cJSON_CreateNull());
        cJSON_AddNumberToObject(run, "windows", o->pub.windows);
        cJSON_AddNumberToObject(run, "T", o->pub.base.T);
        run_vanishing(res, run);
        run_crit_sep(res, rd, run);
        run_jacobian(dg, o->pub.base.n_layer, o->pub.base.n_head, run);
        if (sn->nm.kind == AL_NORM_SSMAX) run_ssmax_s(dir, &o->pub.base, run);
        cJSON *rj = cJSON_AddObjectToObject(run, "reproduce");
        cJSON_AddStringToObject(rj, "dir", "reproduce");
        cJSON_AddItemToObject(rj, "verdicts", repro_verdicts(res));
        *out = run;
        al__study_curve_free(&vl);
    }
    cJSON_Delete(res), cJSON_Delete(rd), cJSON_Delete(dg);
    return rc ? al__err_prefix(err, rc, "study: %s", sn->name) : 0;
}

/* ---- the runs ------------------------------------------------------------------------------ */

int al__study_run(const al__study_opts *o, al_error *err) {
    if (!o->pub.out || !*o->pub.out)
        return al__err(err, AL_E_INVALID, "study: no output directory");
    if (o->pub.windows < 1) return al__err(err, AL_E_INVALID, "study: --windows must be >= 1");
    for (int k = 0; k < o->pub.n_crit_L; k++)
        if (o->pub.crit_L[k] < 2 || o->pub.crit_L[k] > o->pub.base.T)
            return al__err(err, AL_E_INVALID, "study: critical-N window %d outside 2..%d (--seq)",
                           o->pub.crit_L[k], o->pub.base.T);
    char text[4096 + 32];
    int rc = al__mkdirs(o->pub.out, err);
    if (!rc) rc = write_heldout(o, text, sizeof text, err);
    cJSON *runs[AL__STUDY_MAX_NORMS] = {0};
    for (int k = 0; !rc && k < o->n_norms; k++) {
        const al__study_norm *sn = &o->norms[k];
        char dir[4096 + 64], state[4096 + 80];
        snprintf(dir, sizeof dir, "%s/runs/%s", o->pub.out, sn->name);
        snprintf(state, sizeof state, "%s/state.bin", dir);
        al_train_opts r = o->pub.base;
        r.norm = sn->nm, r.ssmax_learn = sn->ssmax_learn;
        r.out = dir, r.resume = al__is_file(state), r.progress = o->pub.progress;
        if (o->pub.progress)
            al__log(AL_LOG_NOTE, "study: training %s (%d of %d)", sn->name, k + 1, o->n_norms);
        al_train_summary sum;
        rc = al__tr_run(&r, &sum, err);
        if (rc) {
            al__err_prefix(err, rc, "study: training %s", sn->name);
            break;
        }
        if (o->pub.progress)
            al__log(AL_LOG_NOTE, "study: reproduce --readings all and diagnose on %s", sn->name);
        if ((rc = al__study_diagnose(o, sn, dir, text, &runs[k], err))) break;
        char *json = cJSON_Print(runs[k]);
        char path[4096 + 96];
        snprintf(path, sizeof path, "%s/diag.json", dir);
        rc = json ? al__write_file_atomic(path, json, strlen(json), err)
                  : al__err(err, AL_E_NOMEM, "study: out of memory");
        free(json);
    }
    if (!rc) rc = al__study_report(o, runs, o->n_norms, err);
    for (int k = 0; k < o->n_norms; k++) cJSON_Delete(runs[k]);
    return rc;
}
