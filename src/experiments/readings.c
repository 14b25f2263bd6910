/* readings.c: `attnlim reproduce --readings all|LIST` (METHOD section 9): the variants of the
 * run's options, one reading changed at a time (plus the cross product vectors x distance x
 * expectation for the critical-N claim, whose readings interact), each a plan of its own whose
 * jobs share the main run's forward passes (jobs.c computes every variant's heads in the same
 * observer call); then readings.json and readings.csv: every claim under every reading, the
 * robust claims apart from the reading-dependent ones, N_crit / L per L and the per-head ratio
 * of the true distance to its random-selection counterpart against N / L. */
#include "experiments.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The experiments each axis of readings changes (bit e of AL_EXP_*). */
#define EXP_DIST (AL_EXP_ALG1 | AL_EXP_ALG2 | AL_EXP_ALG3)
#define EXP_VEC  (EXP_DIST | AL_EXP_ALG4)

static const char *const VEC_NAMES[5] = {"value", "key", "hidden", "residual", "embedding"};
static const al_vectors VEC_KIND[5] = {AL_VEC_VALUE, AL_VEC_KEY, AL_VEC_HIDDEN, AL_VEC_RESIDUAL,
                                       AL_VEC_EMBED};

/* Applies one "axis=value" to o (and the experiments it changes to *exp); an error names what is
 * allowed. */
static int apply_item(const char *item, al_repro_opts *o, unsigned *exp, al_error *err) {
    const char *eq = strchr(item, '=');
    char axis[32];
    if (!eq || eq == item || (size_t)(eq - item) >= sizeof axis)
        return al__err(err, AL_E_INVALID,
                       "--readings: '%s' is not AXIS=VALUE (axes: vectors, distance, expectation, "
                       "temperature-scale, directions) or all",
                       item);
    memcpy(axis, item, (size_t)(eq - item));
    axis[eq - item] = 0;
    const char *v = eq + 1;
    int rc = -1;
    if (!strcmp(axis, "vectors")) {
        *exp |= EXP_VEC;
        rc = al_vectors_parse(v, &o->vectors, err);
    } else if (!strcmp(axis, "distance")) {
        *exp |= EXP_DIST;
        rc = al_distance_parse(v, &o->distance, err);
    } else if (!strcmp(axis, "expectation")) {
        *exp |= EXP_DIST;
        rc = al_expect_parse(v, &o->expectation, err);
    }
    if (rc >= 0) return rc ? al__err_prefix(err, rc, "--readings '%s'", item) : 0;
    if (!strcmp(axis, "temperature-scale") || !strcmp(axis, "directions")) {
        int raw = !strcmp(axis, "temperature-scale");
        const char *a = raw ? "scaled" : "shared", *b = raw ? "raw" : "fresh";
        *exp |= AL_EXP_ALG5;
        if (strcmp(v, a) && strcmp(v, b))
            return al__err(err, AL_E_INVALID, "--readings: %s=%s: allowed %s, %s", axis, v, a, b);
        int on = !strcmp(v, b);
        if (raw)
            o->temperature_raw = on;
        else
            o->fresh_directions = on;
        return 0;
    }
    return al__err(err, AL_E_INVALID,
                   "--readings: unknown axis '%s' in '%s' (allowed: vectors, distance, "
                   "expectation, temperature-scale, directions)",
                   axis, item);
}

/* The variant's directory name: its name with '=' as '-' and ',' as '+'. */
static void variant_dir(const char *out, const char *name, char *dir, size_t size) {
    char n[96];
    snprintf(n, sizeof n, "%s", name);
    for (char *c = n; *c; c++)
        if (*c == '=')
            *c = '-';
        else if (*c == ',')
            *c = '+';
    snprintf(dir, size, "%s/readings/%s", out, n);
}

static int add_variant(variant **v, int *n, int *cap, const al_repro_opts *base, const char *name,
                       int cross, al_error *err) {
    if (*n == *cap) {
        int nc = *cap ? 2 * *cap : 16;
        variant *t = realloc(*v, sizeof(variant) * (size_t)nc);
        if (!t) return al__err(err, AL_E_NOMEM, "out of memory (readings)");
        *v = t;
        *cap = nc;
    }
    variant *x = &(*v)[(*n)++];
    memset(x, 0, sizeof *x);
    snprintf(x->name, sizeof x->name, "%s", name);
    x->cross = cross;
    x->o = *base;
    x->o.readings = NULL;
    x->o.resume = base->resume;
    x->o.quiet = 1;
    x->o.progress = 0;
    unsigned exp = 0;
    char buf[128];
    snprintf(buf, sizeof buf, "%s", name);
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        int rc = apply_item(tok, &x->o, &exp, err);
        if (rc) return rc;
    }
    if (cross) exp = AL_EXP_ALG3; /* the cross product is for the critical-N claim */
    unsigned main_exp = base->experiments ? (base->experiments & AL_EXP_ALL) : AL_EXP_ALL;
    x->o.experiments = exp & main_exp;
    variant_dir(base->out_dir, name, x->out_dir, sizeof x->out_dir);
    x->o.out_dir = x->out_dir;
    return 0;
}

/* Is a variant the same as the run on every axis? */
static int same_as_base(const al_repro_opts *a, const al_repro_opts *b) {
    return a->vectors == b->vectors && a->distance == b->distance &&
           a->expectation == b->expectation && a->temperature_raw == b->temperature_raw &&
           a->fresh_directions == b->fresh_directions;
}

/* "all": every alternative of every axis one at a time (around the run's own options), then
 * the cross product vectors x distance x expectation not already covered (two axes or more
 * changed). */
static int all_variants(const al_repro_opts *o, variant **v, int *n, int *cap, al_error *err) {
    static const char *const dn[3] = {"sum-of-norms", "norm-of-sum", "sum-vector"}, *const en[3] = {
                                                                                        "analytic",
                                                                                        "mc",
                                                                                        "exact"};
    char name[128];
    int rc = 0;
    for (int i = 0; i < 5 && !rc; i++)
        if (VEC_KIND[i] != o->vectors) {
            snprintf(name, sizeof name, "vectors=%s", VEC_NAMES[i]);
            rc = add_variant(v, n, cap, o, name, 0, err);
        }
    for (int i = 0; i < 3 && !rc; i++)
        if ((int)o->distance != i) {
            snprintf(name, sizeof name, "distance=%s", dn[i]);
            rc = add_variant(v, n, cap, o, name, 0, err);
        }
    for (int i = 0; i < 3 && !rc; i++)
        if ((int)o->expectation != i) {
            snprintf(name, sizeof name, "expectation=%s", en[i]);
            rc = add_variant(v, n, cap, o, name, 0, err);
        }
    if (!rc)
        rc = add_variant(v, n, cap, o,
                         o->temperature_raw ? "temperature-scale=scaled" : "temperature-scale=raw",
                         0, err);
    if (!rc)
        rc = add_variant(v, n, cap, o,
                         o->fresh_directions ? "directions=shared" : "directions=fresh", 0, err);
    for (int a = 0; a < 5 && !rc; a++)
        for (int b = 0; b < 3 && !rc; b++)
            for (int c = 0; c < 3 && !rc; c++) {
                int changed = (VEC_KIND[a] != o->vectors) + ((int)o->distance != b) +
                              ((int)o->expectation != c);
                if (changed < 2) continue;
                snprintf(name, sizeof name, "vectors=%s,distance=%s,expectation=%s", VEC_NAMES[a],
                         dn[b], en[c]);
                rc = add_variant(v, n, cap, o, name, 1, err);
            }
    return rc;
}

int al__ex_readings_variants(const al_repro_opts *o, variant **out, int *n_out, al_error *err) {
    *out = NULL;
    *n_out = 0;
    if (!o->readings) return 0;
    variant *v = NULL;
    int n = 0, cap = 0, rc = 0;
    if (!strcmp(o->readings, "all")) {
        rc = all_variants(o, &v, &n, &cap, err);
    } else {
        char buf[1024];
        if (strlen(o->readings) >= sizeof buf)
            return al__err(err, AL_E_INVALID, "--readings: the list is too long");
        snprintf(buf, sizeof buf, "%s", o->readings);
        /* items are separated by ';' or by ',' before an axis name */
        char *save = NULL;
        for (char *tok = strtok_r(buf, ";", &save); tok && !rc; tok = strtok_r(NULL, ";", &save))
            rc = add_variant(&v, &n, &cap, o, tok, 0, err);
        for (int i = 0; i < n && !rc; i++)
            if (same_as_base(&v[i].o, o))
                rc = al__err(err, AL_E_INVALID,
                             "--readings: '%s' is the run's own reading (nothing to compare)",
                             v[i].name);
    }
    if (rc) {
        free(v);
        return rc;
    }
    for (int i = 0; i < n; i++) v[i].o.out_dir = v[i].out_dir; /* after the reallocs */
    *out = v;
    *n_out = n;
    return 0;
}

void al__ex_free_variants(variant *v, int n) {
    for (int i = 0; i < n; i++) {
        al__ex_free_agg(&v[i].a);
        al__ex_free_plan(&v[i].p);
    }
    free(v);
}

/* ---- readings.json and readings.csv ------------------------------------------------------- */

/* The per-head ratio dtilde / E of a variant's Algorithm 3 at each (L, N): median and quartiles
 * over heads, against N / L. */
static cJSON *ratio_json(const plan *p, const agg *a) {
    cJSON *arr = cJSON_CreateArray();
    if (!(p->exp & AL_EXP_ALG3) || !a->a3_dt) return arr;
    double *r = malloc(sizeof(double) * (size_t)p->H);
    for (int li = 0; li < p->nL && r; li++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "L", p->Ls[li]);
        cJSON *x = cJSON_AddArrayToObject(o, "N_over_L"), *md = cJSON_AddArrayToObject(o, "median"),
              *q1 = cJSON_AddArrayToObject(o, "q1"), *q3 = cJSON_AddArrayToObject(o, "q3");
        for (int i = 0; i < p->nN3 && p->N3[i] < p->Ls[li]; i++) {
            size_t off = ((size_t)li * p->nN3 + i) * p->H;
            int k = 0;
            for (int h = 0; h < p->H; h++) {
                double q = a->a3_dt[off + h] / a->a3_E[off + h];
                if (isfinite(q)) r[k++] = q;
            }
            qsort(r, (size_t)k, sizeof *r, al__ex_cmp_dbl);
            cJSON_AddItemToArray(x, cJSON_CreateNumber((double)p->N3[i] / p->Ls[li]));
            cJSON_AddItemToArray(md, al__ex_jnum(al_percentile_sorted(r, (size_t)k, 50)));
            cJSON_AddItemToArray(q1, al__ex_jnum(al_percentile_sorted(r, (size_t)k, 25)));
            cJSON_AddItemToArray(q3, al__ex_jnum(al_percentile_sorted(r, (size_t)k, 75)));
        }
        cJSON_AddItemToArray(arr, o);
    }
    free(r);
    return arr;
}

/* The verdict of claim c under variant v: its own when the variant ran the claim's experiment,
 * else the run's (the reading does not change it). */
static const al__verdict *verdict_of(const variant *v, const al__summary *base, int c, int *own) {
    static const unsigned needs[5] = {AL_EXP_ALG3, AL_EXP_ALG4, AL_EXP_ALG5, AL_EXP_ALG1,
                                      AL_EXP_ALG2};
    *own = c < 5 && (v->p.exp & needs[c]);
    return *own ? &v->a.s.verdicts[c] : &base->verdicts[c];
}

static cJSON *crit_json(const plan *p, const al__summary *s) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToObject(o, "L", al__ex_jarr_i(p->Ls, (size_t)p->nL));
    cJSON *c = cJSON_AddArrayToObject(o, "N_crit"), *r = cJSON_AddArrayToObject(o, "ratio");
    for (int li = 0; li < p->nL; li++) {
        int n = s->a3_crit[0] ? s->a3_crit[0][li] : -1;
        cJSON_AddItemToArray(c, n > 0 ? cJSON_CreateNumber(n) : cJSON_CreateNull());
        cJSON_AddItemToArray(r, al__ex_jnum(n > 0 ? (double)n / p->Ls[li] : NAN));
    }
    cJSON_AddItemToObject(o, "slope", al__ex_jnum(s->a3_slope[0]));
    return o;
}

static void add_entry(cJSON *list, const char *name, int cross, const plan *p, const agg *a,
                      const al__summary *s, const variant *v, const al__summary *base) {
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "name", name);
    cJSON_AddStringToObject(e, "kind", !v ? "the run" : cross ? "cross product" : "one at a time");
    if (v) cJSON_AddStringToObject(e, "results", v->out_dir);
    cJSON *op = cJSON_AddObjectToObject(e, "options");
    cJSON_AddStringToObject(op, "vectors", al_vectors_name(p->o.vectors));
    cJSON_AddStringToObject(op, "distance", al_distance_name(p->o.distance));
    cJSON_AddStringToObject(op, "expectation", al_expect_name(p->o.expectation));
    cJSON_AddStringToObject(op, "temperature_scale", p->o.temperature_raw ? "raw" : "scaled");
    cJSON_AddStringToObject(op, "directions", p->o.fresh_directions ? "fresh" : "shared");
    cJSON *vd = cJSON_AddObjectToObject(e, "verdicts");
    for (int c = 0; c < base->n_verdicts; c++) {
        int own = 1;
        const al__verdict *x = v ? verdict_of(v, base, c, &own) : &base->verdicts[c];
        if (v && v->cross && !own) continue; /* the cross product is for the critical-N claim */
        cJSON *it = cJSON_AddObjectToObject(vd, x->key);
        cJSON_AddStringToObject(it, "verdict", x->verdict);
        cJSON_AddStringToObject(it, "measured", x->measured);
        if (!own) cJSON_AddStringToObject(it, "note", "this reading does not change this claim");
    }
    if (p->exp & AL_EXP_ALG3) {
        cJSON_AddItemToObject(e, "critical_n", crit_json(p, s));
        cJSON_AddItemToObject(e, "ratio_dtilde_over_E", ratio_json(p, a));
    }
    cJSON_AddItemToArray(list, e);
}

/* "not_evaluated": [{"reading": name, "why": reason}, ...] from the "name: why" lines. */
static int add_not_evaluated(cJSON *root, const char *lines) {
    cJSON *arr = cJSON_AddArrayToObject(root, "not_evaluated");
    if (!arr) return -1;
    for (const char *l = lines; l && *l;) {
        const char *nl = strchr(l, '\n'), *end = nl ? nl : l + strlen(l);
        const char *colon = memchr(l, ':', (size_t)(end - l));
        const char *ws = colon ? colon + (colon + 1 < end && colon[1] == ' ' ? 2 : 1) : end;
        char name[256], why[1100];
        snprintf(name, sizeof name, "%.*s", (int)((colon ? colon : end) - l), l);
        snprintf(why, sizeof why, "%.*s", (int)(end - ws), ws);
        cJSON *o = cJSON_CreateObject();
        if (!o) return -1;
        cJSON_AddItemToArray(arr, o);
        if (!cJSON_AddStringToObject(o, "reading", name) || !cJSON_AddStringToObject(o, "why", why))
            return -1;
        l = nl ? nl + 1 : end;
    }
    return 0;
}

int al__ex_write_readings(const plan *p, const agg *a, const variant *v, int nv,
                          const char *skipped, al_error *err) {
    const al__summary *s = &a->s;
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "about",
                            "every claim of the paper-vs-measured table under each reading of "
                            "METHOD section 9 (docs/readings.md), on the same captured heads");
    cJSON *list = cJSON_AddArrayToObject(root, "readings");
    add_entry(list, "the run", 0, p, a, s, NULL, s);
    for (int i = 0; i < nv; i++)
        add_entry(list, v[i].name, v[i].cross, &v[i].p, &v[i].a, &v[i].a.s, &v[i], s);
    cJSON *rob = cJSON_AddArrayToObject(root, "robust");
    cJSON *dep = cJSON_AddObjectToObject(root, "reading_dependent");
    for (int c = 0; c < s->n_verdicts; c++) {
        int same = 1;
        for (int i = 0; i < nv; i++) {
            int own;
            const al__verdict *x = verdict_of(&v[i], s, c, &own);
            same &= !strcmp(x->verdict, s->verdicts[c].verdict);
        }
        if (same) {
            cJSON_AddItemToArray(rob, cJSON_CreateString(s->verdicts[c].key));
            continue;
        }
        cJSON *d = cJSON_AddObjectToObject(dep, s->verdicts[c].key);
        cJSON *h = cJSON_AddArrayToObject(d, "holds_under"),
              *nh = cJSON_AddArrayToObject(d, "does_not_hold_under"),
              *nt = cJSON_AddArrayToObject(d, "not_testable_under");
        for (int i = -1; i < nv; i++) {
            int own;
            const al__verdict *x = i < 0 ? &s->verdicts[c] : verdict_of(&v[i], s, c, &own);
            if (i >= 0 && v[i].cross && !own) continue; /* not evaluated under it */
            const char *nm = i < 0 ? "the run" : v[i].name;
            cJSON *t = !strcmp(x->verdict, "holds")           ? h
                       : !strcmp(x->verdict, "does not hold") ? nh
                                                              : nt;
            cJSON_AddItemToArray(t, cJSON_CreateString(nm));
        }
    }
    if (add_not_evaluated(root, skipped)) {
        cJSON_Delete(root);
        return al__err(err, AL_E_NOMEM, "out of memory (readings.json)");
    }
    char path[4200];
    snprintf(path, sizeof path, "%s/readings.json", p->o.out_dir);
    char *txt = cJSON_Print(root);
    int rc = txt ? al__write_file_atomic(path, txt, strlen(txt), err)
                 : al__err(err, AL_E_NOMEM, "out of memory (readings.json)");
    free(txt);
    cJSON_Delete(root);
    if (rc) return rc;
    /* readings.csv: a line per (claim, reading) */
    al__afile f;
    snprintf(path, sizeof path, "%s/readings.csv", p->o.out_dir);
    if ((rc = al__afile_open(&f, path, err))) return rc;
    al__afile_printf(&f, err, "claim,reading,kind,verdict,own,measured\n");
    for (int c = 0; c < s->n_verdicts; c++)
        for (int i = -1; i < nv; i++) {
            int own = 1;
            const al__verdict *x = i < 0 ? &s->verdicts[c] : verdict_of(&v[i], s, c, &own);
            if (i >= 0 && v[i].cross && !own) continue;
            char meas[600];
            snprintf(meas, sizeof meas, "%s", x->measured);
            for (char *q = meas; *q; q++)
                if (*q == '"') *q = '\'';
            al__afile_printf(&f, err, "%s,\"%s\",%s,%s,%d,\"%s\"\n", x->key,
                             i < 0 ? "the run" : v[i].name,
                             i < 0        ? "the run"
                             : v[i].cross ? "cross product"
                                          : "one at a time",
                             x->verdict, own, meas);
        }
    return al__afile_commit(&f, err);
}

/* ---- the report's columns ------------------------------------------------------------------ */

/* cols[nv + 1] (the run first) for the report, with the ratio curves (median over heads of
 * dtilde / E against N / L at the largest L) in *buf and the robust claims in robust. */
int al__ex_reading_cols(const plan *p, const agg *a, const variant *v, int nv,
                        al__reading_col **cols, double **buf, char *robust, size_t rsize,
                        al_error *err) {
    const al__summary *s = &a->s;
    *cols = al__calloc((size_t)nv + 1, sizeof(al__reading_col), "readings", err);
    *buf = al__calloc(2 * ((size_t)nv + 1) * ((size_t)p->nN3 + 1), sizeof(double), "readings", err);
    double *r = al__malloc(sizeof(double) * (size_t)p->H, "readings", err);
    if (!*cols || !*buf || !r) {
        free(r);
        return AL_E_NOMEM;
    }
    for (int i = -1; i < nv; i++) {
        al__reading_col *c = &(*cols)[i + 1];
        const plan *pp = i < 0 ? p : &v[i].p;
        const agg *aa = i < 0 ? a : &v[i].a;
        c->name = i < 0 ? "the run" : v[i].name;
        c->cross = i >= 0 && v[i].cross;
        for (int k = 0; k < s->n_verdicts && k < 6; k++) {
            int own = 1;
            const al__verdict *x = i < 0 ? &s->verdicts[k] : verdict_of(&v[i], s, k, &own);
            c->own[k] = own;
            c->verdict[k] = c->cross && !own ? NULL : x->verdict;
        }
        if (!(pp->exp & AL_EXP_ALG3) || !aa->a3_dt) continue;
        c->crit = aa->s.a3_crit[0];
        int li = pp->nL - 1, n = 0;
        double *x = *buf + 2 * (size_t)(i + 1) * ((size_t)p->nN3 + 1), *y = x + p->nN3 + 1;
        for (int q = 0; q < pp->nN3 && pp->N3[q] < pp->Ls[li]; q++) {
            size_t off = ((size_t)li * pp->nN3 + q) * pp->H;
            int k = 0;
            for (int h = 0; h < pp->H; h++) {
                double t = aa->a3_dt[off + h] / aa->a3_E[off + h];
                if (isfinite(t)) r[k++] = t;
            }
            qsort(r, (size_t)k, sizeof *r, al__ex_cmp_dbl);
            x[n] = (double)pp->N3[q] / pp->Ls[li];
            y[n++] = al_percentile_sorted(r, (size_t)k, 50);
        }
        c->n_ratio = n;
        c->ratio_x = x;
        c->ratio_med = y;
    }
    free(r);
    size_t k = 0;
    robust[0] = 0;
    for (int c = 0; c < s->n_verdicts; c++) {
        int same = 1;
        for (int i = 0; i < nv; i++) {
            int own;
            same &= !strcmp(verdict_of(&v[i], s, c, &own)->verdict, s->verdicts[c].verdict);
        }
        if (same && k + 40 < rsize)
            k += (size_t)snprintf(robust + k, rsize - k, "%s%s (%s)", k ? ", " : "",
                                  s->verdicts[c].key, s->verdicts[c].verdict);
    }
    return 0;
}
