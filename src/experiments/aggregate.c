/* aggregate.c: aggregation of `attnlim reproduce`: window means per head, summaries over heads, KS
 * and critical N (METHOD sections 2-6). */
#include "experiments.h"

#include <math.h>
#include <stdlib.h>

/* ---- aggregation
 * ------------------------------------------------------------------------------------ */

static job *find_job(const plan *p, int window, int L) {
    for (int i = 0; i < p->n_jobs; i++)
        if (p->jobs[i].window == window && p->jobs[i].L == L) return &p->jobs[i];
    return NULL;
}
int al__ex_idx_of(const int *v, int n, int x) {
    for (int i = 0; i < n; i++)
        if (v[i] == x) return i;
    return -1;
}

/* The per-head values a job holds, and one accessor: value f of head h at index k (of the
 * job's Nd for distance fields, its Ns for separability, T x eps or T for Algorithm 5). */
typedef enum { F_DTILDE, F_DMAX, F_E, F_EMC, F_RATIO, F_LOWER, F_UPPER, F_FD, F_SPEC } head_field;
static double job_value(const job *j, head_field f, int h, int k, const plan *p) {
    size_t d = (size_t)h * j->nd + k, s = (size_t)h * j->ns + k;
    switch (f) {
    case F_DTILDE:
        return j->dtilde[d];
    case F_DMAX:
        return j->dmax[d];
    case F_E:
        return j->E[d];
    case F_EMC:
        return j->E_mc[d];
    case F_RATIO:
        return j->ns_ratio[s];
    case F_LOWER:
        return j->ns_lower[s];
    case F_UPPER:
        return j->ns_upper[s];
    case F_FD:
        return j->fd[(size_t)h * p->nT * p->nE + k];
    case F_SPEC:
        return j->spec[(size_t)h * p->nT + k];
    }
    return NAN;
}

/* out[H] = window mean of field f at (L, N) where N indexes the job's Nd (sep: Ns; -1: k given) */
static void head_means(const plan *p, int L, int N, int sep, int kfixed, head_field f,
                       double *out) {
    for (int h = 0; h < p->H; h++) {
        double s = 0;
        int c = 0;
        for (int w = 0; w < p->o.windows; w++) {
            const job *j = find_job(p, w, L);
            if (!j) continue;
            int k = kfixed >= 0 ? kfixed
                    : sep       ? al__ex_idx_of(j->Ns, j->ns, N)
                                : al__ex_idx_of(j->Nd, j->nd, N);
            if (k < 0) continue;
            double v = job_value(j, f, h, k, p);
            if (isfinite(v)) {
                s += v;
                c++;
            }
        }
        out[h] = c ? s / c : NAN;
    }
}

static al_five five_of(const double *x, int n) {
    double *f = malloc(sizeof(double) * (size_t)(n > 0 ? n : 1));
    al_five r = {NAN, NAN, NAN, NAN, NAN, NAN};
    if (!f) return r;
    int k = 0;
    for (int i = 0; i < n; i++)
        if (isfinite(x[i])) f[k++] = x[i];
    if (k > 0 && al_five_number(f, (size_t)k, &r, NULL) != 0)
        r = (al_five){NAN, NAN, NAN, NAN, NAN, NAN};
    free(f);
    return r;
}
static al_five *alloc_five(int n, al_error *err) {
    al_five *f = al__malloc(sizeof(al_five) * (size_t)(n > 0 ? n : 1), "summaries", err);
    if (f)
        for (int i = 0; i < n; i++) f[i] = (al_five){NAN, NAN, NAN, NAN, NAN, NAN};
    return f;
}

void al__ex_free_agg(agg *a) {
    cJSON_Delete(a->s.model_json);
    al__ex_free_explorer(a);
    for (int i = 0; i < 3; i++) free(a->a1[i]);
    free(a->a1_mc);
    for (int i = 0; i < 4; i++) free(a->a2[i]);
    free(a->a3_dt);
    free(a->a3_E);
    free(a->a3_win_crit);
    for (int i = 0; i < 3; i++) free(a->a4[i]);
    free(a->fd);
    free(a->spec);
    free(a->vmax);
    free(a->vent);
    free(a->vD);
    free(a->win_a1);
    free(a->win_a2);
    al__summary *s = &a->s;
    free(s->a1_dtilde);
    free(s->a1_E);
    free(s->a1_dmax);
    free(s->a2_dtilde);
    free(s->a2_E);
    free(s->a2_dmax);
    free(s->a3_p);
    free(s->a3_dt_mean);
    free(s->a3_E_mean);
    free(s->a3_crit[0]);
    free(s->a3_crit[1]);
    free(s->a4_ratio);
    free(s->a4_lower);
    free(s->a4_upper);
    free(s->g);
    free(s->spec);
    free(s->v_n);
    free(s->v_max_med);
    free(s->v_max_q1);
    free(s->v_max_q3);
    free(s->v_ent_med);
    free(s->v_ent_q1);
    free(s->v_ent_q3);
    free(s->v_band_lo);
    free(s->v_band_hi);
    for (int i = 0; i < s->n_heatmaps; i++) free(s->hm[i]);
}

double al__ex_mean_finite(const double *x, int n) {
    double s = 0;
    int c = 0;
    for (int i = 0; i < n; i++)
        if (isfinite(x[i])) {
            s += x[i];
            c++;
        }
    return c ? s / c : NAN;
}

/* KS over heads for one L (window-averaged head means or one window's). crit[2]. */
static int critical_for(const plan *p, int li, const double *dt, const double *E, double *pvals,
                        int crit[2], al_error *err) {
    int L = p->Ls[li], n = 0;
    while (n < p->nN3 && p->N3[n] < L) n++;
    crit[0] = crit[1] = -1;
    if (n == 0) return 0;
    /* heads with a non-finite value (no rows) are left out of both samples */
    double *a = malloc(sizeof(double) * (size_t)n * p->H),
           *b = malloc(sizeof(double) * (size_t)n * p->H);
    if (!a || !b) {
        free(a);
        free(b);
        return al__err(err, AL_E_NOMEM, "out of memory in Algorithm 3");
    }
    int hk = 0;
    for (int h = 0; h < p->H; h++) {
        int ok = 1;
        for (int i = 0; i < n; i++)
            ok &= isfinite(dt[(size_t)i * p->H + h]) && isfinite(E[(size_t)i * p->H + h]);
        if (!ok) continue;
        hk++;
    }
    int rc = 0;
    if (hk == 0) {
        for (int i = 0; i < n; i++) pvals[i] = NAN;
    } else {
        for (int i = 0; i < n; i++) {
            int c = 0;
            for (int h = 0; h < p->H; h++) {
                int ok = 1;
                for (int q = 0; q < n; q++)
                    ok &= isfinite(dt[(size_t)q * p->H + h]) && isfinite(E[(size_t)q * p->H + h]);
                if (!ok) continue;
                a[(size_t)i * hk + c] = dt[(size_t)i * p->H + h];
                b[(size_t)i * hk + c] = E[(size_t)i * p->H + h];
                c++;
            }
        }
        static const double levels[2] = {0.01, 0.05};
        for (int l = 0; l < 2 && !rc; l++)
            rc = al_critical_n(p->N3, n, a, b, hk, levels[l], pvals, &crit[l], err);
    }
    free(a);
    free(b);
    return rc;
}

#define ALLOC(ptr, count)                                                                          \
    do {                                                                                           \
        if (!((ptr) = al__ex_alloc_nan((size_t)(count), err))) return AL_E_NOMEM;                  \
    } while (0)

/* Algorithm 1: per head the window mean of dtilde, dmax, E (and E_mc) at N = 5 for each L; over
 * heads their five-number summaries; per window the mean over heads of dtilde. */
static int agg_alg1(const plan *p, agg *a, al_error *err) {
    int H = p->H, nL = p->nL, W = p->o.windows;
    al__summary *s = &a->s;
    size_t nh = (size_t)H;
    for (int i = 0; i < 3; i++) ALLOC(a->a1[i], nL * nh);
    ALLOC(a->a1_mc, nL * nh);
    ALLOC(a->win_a1, (size_t)W * nL);
    s->a1_win = a->win_a1;
    if (!(s->a1_dtilde = alloc_five(nL, err))) return AL_E_NOMEM;
    if (!(s->a1_E = alloc_five(nL, err))) return AL_E_NOMEM;
    if (!(s->a1_dmax = alloc_five(nL, err))) return AL_E_NOMEM;
    for (int li = 0; li < nL; li++) {
        int L = p->Ls[li];
        head_means(p, L, ALG1_N, 0, -1, F_DTILDE, a->a1[0] + li * nh);
        head_means(p, L, ALG1_N, 0, -1, F_DMAX, a->a1[1] + li * nh);
        head_means(p, L, ALG1_N, 0, -1, F_E, a->a1[2] + li * nh);
        head_means(p, L, ALG1_N, 0, -1, F_EMC, a->a1_mc + li * nh);
        s->a1_dtilde[li] = five_of(a->a1[0] + li * nh, H);
        s->a1_dmax[li] = five_of(a->a1[1] + li * nh, H);
        s->a1_E[li] = five_of(a->a1[2] + li * nh, H);
        for (int w = 0; w < W; w++) {
            const job *j = find_job(p, w, L);
            int k = j ? al__ex_idx_of(j->Nd, j->nd, ALG1_N) : -1;
            if (k < 0) continue;
            double sum = 0;
            int c = 0;
            for (int h = 0; h < H; h++)
                if (isfinite(j->dtilde[(size_t)h * j->nd + k]))
                    sum += j->dtilde[(size_t)h * j->nd + k], c++;
            a->win_a1[(size_t)w * nL + li] = c ? sum / c : NAN;
        }
    }
    return 0;
}

/* Algorithm 2: as Algorithm 1 at L = long_L for each N of the top-N grid. */
static int agg_alg2(const plan *p, agg *a, al_error *err) {
    int H = p->H, W = p->o.windows;
    al__summary *s = &a->s;
    size_t nh = (size_t)H;
    for (int i = 0; i < 4; i++) ALLOC(a->a2[i], p->nN2 * nh);
    ALLOC(a->win_a2, (size_t)W * p->nN2);
    s->a2_win = a->win_a2;
    if (!(s->a2_dtilde = alloc_five(p->nN2, err))) return AL_E_NOMEM;
    if (!(s->a2_E = alloc_five(p->nN2, err))) return AL_E_NOMEM;
    if (!(s->a2_dmax = alloc_five(p->nN2, err))) return AL_E_NOMEM;
    for (int i = 0; i < p->nN2; i++) {
        int N = p->N2[i];
        head_means(p, p->long_L, N, 0, -1, F_DTILDE, a->a2[0] + i * nh);
        head_means(p, p->long_L, N, 0, -1, F_DMAX, a->a2[1] + i * nh);
        head_means(p, p->long_L, N, 0, -1, F_E, a->a2[2] + i * nh);
        head_means(p, p->long_L, N, 0, -1, F_EMC, a->a2[3] + i * nh);
        s->a2_dtilde[i] = five_of(a->a2[0] + i * nh, H);
        s->a2_dmax[i] = five_of(a->a2[1] + i * nh, H);
        s->a2_E[i] = five_of(a->a2[2] + i * nh, H);
        for (int w = 0; w < W; w++) {
            const job *j = find_job(p, w, p->long_L);
            int k = j ? al__ex_idx_of(j->Nd, j->nd, N) : -1;
            if (k < 0) continue;
            double sum = 0;
            int c = 0;
            for (int h = 0; h < H; h++)
                if (isfinite(j->dtilde[(size_t)h * j->nd + k]))
                    sum += j->dtilde[(size_t)h * j->nd + k], c++;
            a->win_a2[(size_t)w * p->nN2 + i] = c ? sum / c : NAN;
        }
    }
    return 0;
}

/* Algorithm 3: per (L, N < L) the window means of dtilde and E per head and their means over heads;
 * KS over heads and the critical N at 0.01 and 0.05, over the window means and per window; the
 * slope of critical N against L. */
static int agg_alg3(const plan *p, agg *a, al_error *err) {
    int H = p->H, nL = p->nL, W = p->o.windows;
    al__summary *s = &a->s;
    size_t nh = (size_t)H;
    size_t n3 = (size_t)p->nN3;
    ALLOC(a->a3_dt, nL * n3 * nh);
    ALLOC(a->a3_E, nL * n3 * nh);
    ALLOC(s->a3_p, nL * n3);
    ALLOC(s->a3_dt_mean, nL * n3);
    ALLOC(s->a3_E_mean, nL * n3);
    ALLOC(a->a3_win_crit, (size_t)W * 2 * nL);
    for (int l = 0; l < 2; l++)
        if (!(s->a3_crit[l] = al__malloc(sizeof(int) * (size_t)nL, "critical N", err)))
            return AL_E_NOMEM;
    double *wdt = al__ex_alloc_nan(n3 * nh, err), *wE = al__ex_alloc_nan(n3 * nh, err),
           *pv = al__ex_alloc_nan(n3, err);
    if (!wdt || !wE || !pv) {
        free(wdt);
        free(wE);
        free(pv);
        return AL_E_NOMEM;
    }
    int rc = 0;
    for (int li = 0; li < nL && !rc; li++) {
        int L = p->Ls[li];
        double *dt = a->a3_dt + li * n3 * nh, *E = a->a3_E + li * n3 * nh;
        for (size_t i = 0; i < n3; i++) {
            if (p->N3[i] >= L) continue;
            head_means(p, L, p->N3[i], 0, -1, F_DTILDE, dt + i * nh);
            head_means(p, L, p->N3[i], 0, -1, F_E, E + i * nh);
            s->a3_dt_mean[li * n3 + i] = al__ex_mean_finite(dt + i * nh, H);
            s->a3_E_mean[li * n3 + i] = al__ex_mean_finite(E + i * nh, H);
        }
        int crit[2];
        rc = critical_for(p, li, dt, E, s->a3_p + li * n3, crit, err);
        s->a3_crit[0][li] = crit[0];
        s->a3_crit[1][li] = crit[1];
        for (int w = 0; w < W && !rc && W > 1; w++) {
            const job *j = find_job(p, w, L);
            if (!j) continue;
            for (size_t i = 0; i < n3; i++) {
                int k = al__ex_idx_of(j->Nd, j->nd, p->N3[i]);
                for (int h = 0; h < H; h++) {
                    wdt[i * nh + h] = k >= 0 ? j->dtilde[(size_t)h * j->nd + k] : NAN;
                    wE[i * nh + h] = k >= 0 ? j->E[(size_t)h * j->nd + k] : NAN;
                }
            }
            rc = critical_for(p, li, wdt, wE, pv, crit, err);
            a->a3_win_crit[((size_t)w * 2 + 0) * nL + li] = crit[0];
            a->a3_win_crit[((size_t)w * 2 + 1) * nL + li] = crit[1];
        }
    }
    free(wdt);
    free(wE);
    free(pv);
    if (rc) return rc;
    for (int l = 0; l < 2; l++) {
        double x[64], y[64];
        int k = 0;
        for (int li = 0; li < nL && k < 64; li++)
            if (s->a3_crit[l][li] > 0) {
                x[k] = p->Ls[li];
                y[k] = s->a3_crit[l][li];
                k++;
            }
        s->a3_slope[l] = k ? al_slope_origin(x, y, (size_t)k) : NAN;
    }
    return 0;
}

/* Algorithm 4: per N the window means per head of N_s/N and its bounds, and their summaries. */
static int agg_alg4(const plan *p, agg *a, al_error *err) {
    int H = p->H;
    al__summary *s = &a->s;
    size_t nh = (size_t)H;
    for (int i = 0; i < 3; i++) ALLOC(a->a4[i], p->nN4 * nh);
    if (!(s->a4_ratio = alloc_five(p->nN4, err))) return AL_E_NOMEM;
    if (!(s->a4_lower = alloc_five(p->nN4, err))) return AL_E_NOMEM;
    if (!(s->a4_upper = alloc_five(p->nN4, err))) return AL_E_NOMEM;
    for (int i = 0; i < p->nN4; i++) {
        head_means(p, p->long_L, p->N4[i], 1, -1, F_RATIO, a->a4[0] + i * nh);
        head_means(p, p->long_L, p->N4[i], 1, -1, F_LOWER, a->a4[1] + i * nh);
        head_means(p, p->long_L, p->N4[i], 1, -1, F_UPPER, a->a4[2] + i * nh);
        s->a4_ratio[i] = five_of(a->a4[0] + i * nh, H);
        s->a4_lower[i] = five_of(a->a4[1] + i * nh, H);
        s->a4_upper[i] = five_of(a->a4[2] + i * nh, H);
    }
    return 0;
}

/* Algorithm 5: per head the window means of the finite-difference and exact sensitivities; g =
 * their max over heads; the count of values above 1/(4T). */
static int agg_alg5(const plan *p, agg *a, al_error *err) {
    int H = p->H;
    al__summary *s = &a->s;
    size_t nh = (size_t)H;
    size_t nte = (size_t)p->nT * p->nE;
    ALLOC(a->fd, nh * nte);
    ALLOC(a->spec, nh * p->nT);
    ALLOC(s->g, nte);
    ALLOC(s->spec, p->nT);
    double *tmp = al__ex_alloc_nan(nh, err);
    if (!tmp) return AL_E_NOMEM;
    for (size_t k = 0; k < nte; k++) {
        head_means(p, p->long_L, 0, 0, (int)k, F_FD, tmp);
        double mx = -INFINITY;
        for (int h = 0; h < H; h++) {
            a->fd[h * nte + k] = tmp[h];
            if (tmp[h] > mx) mx = tmp[h];
        }
        s->g[k] = isfinite(mx) ? mx : NAN;
    }
    for (int t = 0; t < p->nT; t++) {
        head_means(p, p->long_L, 0, 0, t, F_SPEC, tmp);
        double mx = -INFINITY;
        for (int h = 0; h < H; h++) {
            a->spec[(size_t)h * p->nT + t] = tmp[h];
            if (tmp[h] > mx) mx = tmp[h];
        }
        s->spec[t] = isfinite(mx) ? mx : NAN;
    }
    free(tmp);
    s->n_flagged = 0;
    for (int t = 0; t < p->nT; t++) {
        double b = 1.0 / (4 * p->T[t]);
        for (int e = 0; e < p->nE; e++) s->n_flagged += s->g[(size_t)t * p->nE + e] > b;
        s->n_flagged += s->spec[t] > b;
    }
    return 0;
}

/* vanishing attention at L = long_L: per (head, row) the window means of the max weight, entropy
 * and D, the share inside the band, and per row their summaries over heads. */
static int agg_vanishing(const plan *p, agg *a, al_error *err) {
    int H = p->H, W = p->o.windows;
    al__summary *s = &a->s;
    size_t nh = (size_t)H;
    int L = p->long_L;
    size_t nv = nh * L;
    ALLOC(a->vmax, nv);
    ALLOC(a->vent, nv);
    ALLOC(a->vD, nv);
    long inside = 0, total = 0;
    for (size_t q = 0; q < nv; q++) {
        double sm = 0, se = 0, sd = 0;
        int c = 0;
        for (int w = 0; w < W; w++) {
            const job *j = find_job(p, w, L);
            if (!j || !j->want_van) continue;
            sm += j->vmax[q];
            se += j->vent[q];
            sd += j->vD[q];
            c++;
            int t = (int)(q % L);
            double n = (double)al__ex_row_n(p, (int)(q / L), t, L);
            double lo = exp(-2 * j->vD[q]) / n, hi = exp(2 * j->vD[q]) / n;
            inside += j->vmax[q] >= lo * (1 - 1e-9) && j->vmax[q] <= hi * (1 + 1e-9);
            total++;
        }
        a->vmax[q] = c ? sm / c : NAN;
        a->vent[q] = c ? se / c : NAN;
        a->vD[q] = c ? sd / c : NAN;
    }
    s->v_inside = total ? (double)inside / total : NAN;
    s->band_applies = !p->have_nm || p->nm.kind == AL_NORM_SOFTMAX;
    s->vL = L;
    ALLOC(s->v_n, L);
    ALLOC(s->v_max_med, L);
    ALLOC(s->v_max_q1, L);
    ALLOC(s->v_max_q3, L);
    ALLOC(s->v_ent_med, L);
    ALLOC(s->v_ent_q1, L);
    ALLOC(s->v_ent_q3, L);
    ALLOC(s->v_band_lo, L);
    ALLOC(s->v_band_hi, L);
    double *col = al__ex_alloc_nan(nh, err), *col2 = al__ex_alloc_nan(nh, err),
           *col3 = al__ex_alloc_nan(nh, err);
    if (!col || !col2 || !col3) {
        free(col);
        free(col2);
        free(col3);
        return AL_E_NOMEM;
    }
    int windowed = 0; /* a sliding window shorter than L: n depends on the head's layer */
    for (int h = 0; h < H; h++) windowed |= al__ex_row_n(p, h, L - 1, L) != L;
    for (int t = 0; t < L; t++) {
        double n = p->causal ? t + 1 : L;
        s->v_n[t] = n; /* the row's n without a window (the figures' axis: the position + 1) */
        for (int h = 0; h < H; h++) {
            double nr = (double)al__ex_row_n(p, h, t, L);
            col[h] = a->vmax[(size_t)h * L + t];
            col2[h] = nr >= 2 ? a->vent[(size_t)h * L + t] / log(nr) : NAN;
            col3[h] = a->vD[(size_t)h * L + t];
        }
        al_five f = five_of(col, H), g = five_of(col2, H), d = five_of(col3, H);
        s->v_max_med[t] = f.median;
        s->v_max_q1[t] = f.q1;
        s->v_max_q3[t] = f.q3;
        s->v_ent_med[t] = g.median;
        s->v_ent_q1[t] = g.q1;
        s->v_ent_q3[t] = g.q3;
        s->v_band_lo[t] = exp(-2 * d.median) / n;
        s->v_band_hi[t] = exp(2 * d.median) / n;
        if (windowed) { /* each head's band over its own n: their medians */
            for (int h = 0; h < H; h++)
                col3[h] = exp(-2 * a->vD[(size_t)h * L + t]) / (double)al__ex_row_n(p, h, t, L);
            s->v_band_lo[t] = five_of(col3, H).median;
            for (int h = 0; h < H; h++)
                col3[h] = exp(2 * a->vD[(size_t)h * L + t]) / (double)al__ex_row_n(p, h, t, L);
            s->v_band_hi[t] = five_of(col3, H).median;
        }
    }
    free(col);
    free(col2);
    free(col3);
    return 0;
}

#undef ALLOC

/* Every experiment's aggregates from the jobs' per-head values (a->*, a->s). */
int al__ex_aggregate(plan *p, agg *a, al_error *err) {
    static const struct {
        unsigned exp;
        int (*fn)(const plan *p, agg *a, al_error *err);
    } steps[] = {{AL_EXP_ALG1, agg_alg1}, {AL_EXP_ALG2, agg_alg2},
                 {AL_EXP_ALG3, agg_alg3}, {AL_EXP_ALG4, agg_alg4},
                 {AL_EXP_ALG5, agg_alg5}, {AL_EXP_VANISHING, agg_vanishing}};
    for (size_t i = 0; i < sizeof steps / sizeof *steps; i++) {
        int rc = (p->exp & steps[i].exp) ? steps[i].fn(p, a, err) : 0;
        if (rc) return rc;
    }
    return 0;
}
