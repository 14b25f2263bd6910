/* results_csv.c: the CSV and NPY outputs of `attnlim reproduce`. */
#include "experiments.h"

#include <math.h>

/* ---- writers: CSV and NPY
 * ------------------------------------------------------------------------------- */

static void csv_num(al__afile *f, double v, al_error *err) {
    if (isfinite(v))
        al__afile_printf(f, err, ",%.10g", v);
    else
        al__afile_printf(f, err, ",");
}

int al__ex_write_csvs(const plan *p, agg *a, al_error *err) {
    char path[4200];
    al__afile f;
    int rc, H = p->H, nh = p->n_head;
    if (p->exp & AL_EXP_ALG1) {
        snprintf(path, sizeof path, "%s/alg1.csv", p->o.out_dir);
        if ((rc = al__afile_open(&f, path, err))) return rc;
        al__afile_printf(&f, err, "layer,head,L,N,dtilde,dmax,E,E_mc\n");
        for (int li = 0; li < p->nL; li++)
            for (int h = 0; h < H; h++) {
                al__afile_printf(&f, err, "%d,%d,%d,%d", h / nh, h % nh, p->Ls[li], ALG1_N);
                for (int k = 0; k < 3; k++) csv_num(&f, a->a1[k][(size_t)li * H + h], err);
                csv_num(&f, a->a1_mc[(size_t)li * H + h], err);
                al__afile_printf(&f, err, "\n");
            }
        if ((rc = al__afile_commit(&f, err))) return rc;
    }
    if (p->exp & AL_EXP_ALG2) {
        snprintf(path, sizeof path, "%s/alg2.csv", p->o.out_dir);
        if ((rc = al__afile_open(&f, path, err))) return rc;
        al__afile_printf(&f, err, "layer,head,L,N,dtilde,dmax,E,E_mc\n");
        for (int i = 0; i < p->nN2; i++)
            for (int h = 0; h < H; h++) {
                al__afile_printf(&f, err, "%d,%d,%d,%d", h / nh, h % nh, p->long_L, p->N2[i]);
                for (int k = 0; k < 4; k++) csv_num(&f, a->a2[k][(size_t)i * H + h], err);
                al__afile_printf(&f, err, "\n");
            }
        if ((rc = al__afile_commit(&f, err))) return rc;
    }
    if (p->exp & AL_EXP_ALG3) {
        snprintf(path, sizeof path, "%s/alg3.csv", p->o.out_dir);
        if ((rc = al__afile_open(&f, path, err))) return rc;
        al__afile_printf(&f, err,
                         "L,N,pvalue,mean_dtilde,mean_E,critical_n_0.01,critical_n_0.05\n");
        for (int li = 0; li < p->nL; li++)
            for (int i = 0; i < p->nN3 && p->N3[i] < p->Ls[li]; i++) {
                size_t q = (size_t)li * p->nN3 + i;
                al__afile_printf(&f, err, "%d,%d", p->Ls[li], p->N3[i]);
                csv_num(&f, a->s.a3_p[q], err);
                csv_num(&f, a->s.a3_dt_mean[q], err);
                csv_num(&f, a->s.a3_E_mean[q], err);
                al__afile_printf(&f, err, ",%d,%d\n", a->s.a3_crit[0][li], a->s.a3_crit[1][li]);
            }
        if ((rc = al__afile_commit(&f, err))) return rc;
        snprintf(path, sizeof path, "%s/alg3_heads.csv", p->o.out_dir);
        if ((rc = al__afile_open(&f, path, err))) return rc;
        al__afile_printf(&f, err, "layer,head,L,N,dtilde,E\n");
        for (int li = 0; li < p->nL; li++)
            for (int i = 0; i < p->nN3 && p->N3[i] < p->Ls[li]; i++)
                for (int h = 0; h < H; h++) {
                    size_t q = ((size_t)li * p->nN3 + i) * H + h;
                    al__afile_printf(&f, err, "%d,%d,%d,%d", h / nh, h % nh, p->Ls[li], p->N3[i]);
                    csv_num(&f, a->a3_dt[q], err);
                    csv_num(&f, a->a3_E[q], err);
                    al__afile_printf(&f, err, "\n");
                }
        if ((rc = al__afile_commit(&f, err))) return rc;
    }
    if (p->exp & AL_EXP_ALG4) {
        snprintf(path, sizeof path, "%s/alg4.csv", p->o.out_dir);
        if ((rc = al__afile_open(&f, path, err))) return rc;
        al__afile_printf(&f, err, "layer,head,L,N,ns_ratio,ns_lower,ns_upper\n");
        for (int i = 0; i < p->nN4; i++)
            for (int h = 0; h < H; h++) {
                al__afile_printf(&f, err, "%d,%d,%d,%d", h / nh, h % nh, p->long_L, p->N4[i]);
                for (int k = 0; k < 3; k++) csv_num(&f, a->a4[k][(size_t)i * H + h], err);
                al__afile_printf(&f, err, "\n");
            }
        if ((rc = al__afile_commit(&f, err))) return rc;
    }
    if (p->exp & AL_EXP_ALG5) {
        snprintf(path, sizeof path, "%s/alg5.csv", p->o.out_dir);
        if ((rc = al__afile_open(&f, path, err))) return rc;
        al__afile_printf(&f, err, "layer,head,L,T,eps,fd_mean,spectral_mean\n");
        for (int h = 0; h < H; h++)
            for (int t = 0; t < p->nT; t++) {
                for (int e = 0; e < p->nE; e++) {
                    al__afile_printf(&f, err, "%d,%d,%d,%.10g,%.10g", h / nh, h % nh, p->long_L,
                                     p->T[t], p->eps[e]);
                    csv_num(&f, a->fd[((size_t)h * p->nT + t) * p->nE + e], err);
                    al__afile_printf(&f, err, ",\n");
                }
                al__afile_printf(&f, err, "%d,%d,%d,%.10g,exact,", h / nh, h % nh, p->long_L,
                                 p->T[t]);
                csv_num(&f, a->spec[(size_t)h * p->nT + t], err);
                al__afile_printf(&f, err, "\n");
            }
        if ((rc = al__afile_commit(&f, err))) return rc;
        snprintf(path, sizeof path, "%s/alg5_g.csv", p->o.out_dir);
        if ((rc = al__afile_open(&f, path, err))) return rc;
        al__afile_printf(&f, err, "T,eps,g,bound_paper,bound_sup,above_1_over_4T\n");
        for (int t = 0; t < p->nT; t++)
            for (int e = 0; e <= p->nE; e++) {
                double v = e < p->nE ? a->s.g[(size_t)t * p->nE + e] : a->s.spec[t],
                       b = 1 / (4 * p->T[t]);
                if (e < p->nE)
                    al__afile_printf(&f, err, "%.10g,%.10g", p->T[t], p->eps[e]);
                else
                    al__afile_printf(&f, err, "%.10g,exact", p->T[t]);
                csv_num(&f, v, err);
                csv_num(&f, b < sqrt(2.0) ? b : sqrt(2.0), err);
                csv_num(&f, 1 / (2 * p->T[t]), err);
                al__afile_printf(&f, err, ",%d\n", v > b);
            }
        if ((rc = al__afile_commit(&f, err))) return rc;
    }
    if (p->exp & AL_EXP_VANISHING) {
        const al__summary *s = &a->s;
        snprintf(path, sizeof path, "%s/vanishing.csv", p->o.out_dir);
        if ((rc = al__afile_open(&f, path, err))) return rc;
        al__afile_printf(
            &f, err, "layer,head,L,n,max_weight,entropy,entropy_over_log_n,D,band_lo,band_hi\n");
        int L = p->long_L;
        for (int h = 0; h < H; h++)
            for (int t = 0; t < L; t++) {
                size_t q = (size_t)h * L + t;
                double n = s->v_n[t];
                al__afile_printf(&f, err, "%d,%d,%d,%d", h / nh, h % nh, L, (int)n);
                csv_num(&f, a->vmax[q], err);
                csv_num(&f, a->vent[q], err);
                csv_num(&f, n >= 2 ? a->vent[q] / log(n) : NAN, err);
                csv_num(&f, a->vD[q], err);
                csv_num(&f, exp(-2 * a->vD[q]) / n, err);
                csv_num(&f, exp(2 * a->vD[q]) / n, err);
                al__afile_printf(&f, err, "\n");
            }
        if ((rc = al__afile_commit(&f, err))) return rc;
    }
    return 0;
}

static int npy_out(const plan *p, const char *name, const double *data, int ndim,
                   const int64_t *shape, al_error *err) {
    char path[4200];
    snprintf(path, sizeof path, "%s/%s.npy", p->o.out_dir, name);
    al_array arr = {.dtype = AL_F64, .ndim = ndim, .data = (void *)data};
    for (int i = 0; i < ndim; i++) arr.shape[i] = shape[i];
    return al_npy_write(path, &arr, err);
}

int al__ex_write_npys(const plan *p, agg *a, al_error *err) {
    int rc = 0;
    int64_t Ly = p->n_layer, Hd = p->n_head;
    if (p->exp & AL_EXP_ALG1) {
        int64_t sh[3] = {p->nL, Ly, Hd};
        if ((rc = npy_out(p, "alg1_dtilde", a->a1[0], 3, sh, err)) ||
            (rc = npy_out(p, "alg1_dmax", a->a1[1], 3, sh, err)) ||
            (rc = npy_out(p, "alg1_E", a->a1[2], 3, sh, err)))
            return rc;
    }
    if (p->exp & AL_EXP_ALG2) {
        int64_t sh[3] = {p->nN2, Ly, Hd};
        if ((rc = npy_out(p, "alg2_dtilde", a->a2[0], 3, sh, err)) ||
            (rc = npy_out(p, "alg2_dmax", a->a2[1], 3, sh, err)) ||
            (rc = npy_out(p, "alg2_E", a->a2[2], 3, sh, err)))
            return rc;
    }
    if (p->exp & AL_EXP_ALG3) {
        int64_t sh[4] = {p->nL, p->nN3, Ly, Hd};
        if ((rc = npy_out(p, "alg3_dtilde", a->a3_dt, 4, sh, err)) ||
            (rc = npy_out(p, "alg3_E", a->a3_E, 4, sh, err)))
            return rc;
        int64_t s2[2] = {p->nL, p->nN3};
        if ((rc = npy_out(p, "alg3_pvalues", a->s.a3_p, 2, s2, err))) return rc;
    }
    if (p->exp & AL_EXP_ALG4) {
        int64_t sh[3] = {p->nN4, Ly, Hd};
        if ((rc = npy_out(p, "alg4_ratio", a->a4[0], 3, sh, err)) ||
            (rc = npy_out(p, "alg4_lower", a->a4[1], 3, sh, err)) ||
            (rc = npy_out(p, "alg4_upper", a->a4[2], 3, sh, err)))
            return rc;
    }
    if (p->exp & AL_EXP_ALG5) {
        int64_t sh[4] = {Ly, Hd, p->nT, p->nE}, s2[3] = {Ly, Hd, p->nT};
        if ((rc = npy_out(p, "alg5_fd", a->fd, 4, sh, err)) ||
            (rc = npy_out(p, "alg5_spectral", a->spec, 3, s2, err)))
            return rc;
    }
    if (p->exp & AL_EXP_VANISHING) {
        int64_t sh[3] = {Ly, Hd, p->long_L};
        if ((rc = npy_out(p, "vanishing_max_weight", a->vmax, 3, sh, err)) ||
            (rc = npy_out(p, "vanishing_entropy", a->vent, 3, sh, err)) ||
            (rc = npy_out(p, "vanishing_D", a->vD, 3, sh, err)))
            return rc;
    }
    return 0;
}
