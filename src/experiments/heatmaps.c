/* heatmaps.c: the layer x head heatmaps of the headline statistics of `attnlim reproduce`. */
#include "experiments.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- heatmaps (layer x head) of the headline statistics
 * ------------------------------------------- */

int al__ex_nearest_d(const double *v, int n, double x) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (fabs(log(v[i] / x)) < fabs(log(v[b] / x))) b = i;
    return b;
}
int al__ex_nearest_i(const int *v, int n, int x) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (abs(v[i] - x) < abs(v[b] - x)) b = i;
    return b;
}

static int add_heatmap(al__summary *s, const char *name, const char *title, const char *label,
                       const double *v, int H, al_error *err) {
    if (s->n_heatmaps >= 8) return 0;
    double *c = al__malloc(sizeof(double) * (size_t)H, "heatmap", err);
    if (!c) return AL_E_NOMEM;
    memcpy(c, v, sizeof(double) * (size_t)H);
    s->hm_name[s->n_heatmaps] = name;
    s->hm_title[s->n_heatmaps] = title;
    s->hm_label[s->n_heatmaps] = label;
    s->hm[s->n_heatmaps++] = c;
    return 0;
}

int al__ex_build_heatmaps(const plan *p, agg *a, char titles[6][160], al_error *err) {
    al__summary *s = &a->s;
    int H = p->H, rc = 0;
    double *tmp = al__ex_alloc_nan((size_t)H, err);
    if (!tmp) return AL_E_NOMEM;
    if ((p->exp & AL_EXP_ALG1) && p->nL > 0) {
        int li = p->nL - 1;
        snprintf(titles[0], 160, "dtilde per head (N = %d, L = %d)", ALG1_N, p->Ls[li]);
        rc = add_heatmap(s, "heatmap_dtilde", titles[0], "dtilde", a->a1[0] + (size_t)li * H, H,
                         err);
        snprintf(titles[1], 160, "E (random selection) per head (N = %d, L = %d)", ALG1_N,
                 p->Ls[li]);
        if (!rc)
            rc = add_heatmap(s, "heatmap_E", titles[1], "E", a->a1[2] + (size_t)li * H, H, err);
    }
    if (!rc && (p->exp & AL_EXP_ALG4) && p->nN4 > 0) {
        int k = al__ex_nearest_i(p->N4, p->nN4, 16);
        snprintf(titles[2], 160, "N_s/N per head (N = %d, L = %d)", p->N4[k], p->long_L);
        rc = add_heatmap(s, "heatmap_ns_ratio", titles[2], "N_s / N", a->a4[0] + (size_t)k * H, H,
                         err);
    }
    if (!rc && (p->exp & AL_EXP_ALG5)) {
        int t = al__ex_nearest_d(p->T, p->nT, 1.0);
        for (int h = 0; h < H; h++) tmp[h] = a->spec[(size_t)h * p->nT + t];
        snprintf(titles[3], 160, "mean exact Jacobian spectral norm per head (T = %.3g)", p->T[t]);
        rc = add_heatmap(s, "heatmap_spectral", titles[3], "spectral norm", tmp, H, err);
    }
    if (!rc && (p->exp & AL_EXP_VANISHING)) {
        int L = p->long_L;
        for (int h = 0; h < H; h++) tmp[h] = al__ex_mean_finite(a->vmax + (size_t)h * L, L);
        snprintf(titles[4], 160, "mean max attention weight per head (L = %d)", L);
        rc = add_heatmap(s, "heatmap_max_weight", titles[4], "max weight", tmp, H, err);
        if (!rc) {
            for (int h = 0; h < H; h++) {
                double sum = 0;
                int c = 0;
                for (int t = 0; t < L; t++) {
                    double n = (double)al__ex_row_n(p, h, t, L);
                    if (n >= 2 && isfinite(a->vent[(size_t)h * L + t]))
                        sum += a->vent[(size_t)h * L + t] / log(n), c++;
                }
                tmp[h] = c ? sum / c : NAN;
            }
            snprintf(titles[5], 160, "mean normalised entropy H / log n per head (L = %d)", L);
            rc = add_heatmap(s, "heatmap_entropy", titles[5], "H / log n", tmp, H, err);
        }
    }
    free(tmp);
    return rc;
}
