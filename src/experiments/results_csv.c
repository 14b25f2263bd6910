/* results_csv.c: the CSV and NPY outputs of `attnlim reproduce` (docs/outputs.md), each declared
 * once in a table: csv_files (file, header, rows) and the NPY list of al__ex_write_npys. */
#include "experiments.h"

#include <math.h>

static void csv_num(al__afile *f, double v, al_error *err) {
    if (isfinite(v))
        al__afile_printf(f, err, ",%.10g", v);
    else
        al__afile_printf(f, err, ",");
}

/* ---- per-head tables: a line per (grid row r, head h): "layer,head,L,N" then col[c][h] */

/* Row r of a per-head table: its L and N, and its columns col[c] ([H] each). Returns the number
 * of columns, 0 for a row left out (N >= L), -1 past the last row. */
typedef int (*head_row)(const plan *p, const agg *a, int r, int *L, int *N, const double *col[4]);

static int row_alg1(const plan *p, const agg *a, int r, int *L, int *N, const double *col[4]) {
    if (r >= p->nL) return -1;
    *L = p->Ls[r], *N = ALG1_N;
    for (int c = 0; c < 3; c++) col[c] = a->a1[c] + (size_t)r * p->H;
    col[3] = a->a1_mc + (size_t)r * p->H;
    return 4;
}

static int row_alg2(const plan *p, const agg *a, int r, int *L, int *N, const double *col[4]) {
    if (r >= p->nN2) return -1;
    *L = p->long_L, *N = p->N2[r];
    for (int c = 0; c < 4; c++) col[c] = a->a2[c] + (size_t)r * p->H;
    return 4;
}

/* r runs over (L index, N index) of [nL, nN3]; the pairs with N >= L hold nothing. */
static int row_alg3(const plan *p, const agg *a, int r, int *L, int *N, const double *col[4]) {
    if (r >= p->nL * p->nN3) return -1;
    *L = p->Ls[r / p->nN3], *N = p->N3[r % p->nN3];
    col[0] = a->a3_dt + (size_t)r * p->H;
    col[1] = a->a3_E + (size_t)r * p->H;
    return *N < *L ? 2 : 0;
}

static int row_alg4(const plan *p, const agg *a, int r, int *L, int *N, const double *col[4]) {
    if (r >= p->nN4) return -1;
    *L = p->long_L, *N = p->N4[r];
    for (int c = 0; c < 3; c++) col[c] = a->a4[c] + (size_t)r * p->H;
    return 3;
}

static void write_head_rows(const plan *p, const agg *a, head_row row, const char *rd, al__afile *f,
                            al_error *err) {
    int nh = p->n_head, L, N, nc;
    const double *col[4];
    for (int r = 0; (nc = row(p, a, r, &L, &N, col)) >= 0; r++)
        for (int h = 0; h < p->H && nc > 0; h++) {
            al__afile_printf(f, err, "%d,%d,%d,%d", h / nh, h % nh, L, N);
            for (int c = 0; c < nc; c++) csv_num(f, col[c][h], err);
            al__afile_printf(f, err, ",%s\n", rd);
        }
}

/* ---- the tables of their own shape */

static void body_alg3(const plan *p, const agg *a, const char *rd, al__afile *f, al_error *err) {
    const al__summary *s = &a->s;
    for (int li = 0; li < p->nL; li++)
        for (int i = 0; i < p->nN3 && p->N3[i] < p->Ls[li]; i++) {
            size_t q = (size_t)li * p->nN3 + i;
            al__afile_printf(f, err, "%d,%d", p->Ls[li], p->N3[i]);
            csv_num(f, s->a3_p[q], err);
            csv_num(f, s->a3_dt_mean[q], err);
            csv_num(f, s->a3_E_mean[q], err);
            al__afile_printf(f, err, ",%d,%d,%s\n", s->a3_crit[0][li], s->a3_crit[1][li], rd);
        }
}

/* a line per (head, T, eps) with the finite-difference mean, then (head, T, exact) with the
 * spectral norm */
static void body_alg5(const plan *p, const agg *a, const char *rd, al__afile *f, al_error *err) {
    int nh = p->n_head;
    for (int h = 0; h < p->H; h++)
        for (int t = 0; t < p->nT; t++) {
            for (int e = 0; e < p->nE; e++) {
                al__afile_printf(f, err, "%d,%d,%d,%.10g,%.10g", h / nh, h % nh, p->long_L, p->T[t],
                                 p->eps[e]);
                csv_num(f, a->fd[((size_t)h * p->nT + t) * p->nE + e], err);
                al__afile_printf(f, err, ",,%s\n", rd);
            }
            al__afile_printf(f, err, "%d,%d,%d,%.10g,exact,", h / nh, h % nh, p->long_L, p->T[t]);
            csv_num(f, a->spec[(size_t)h * p->nT + t], err);
            al__afile_printf(f, err, ",%s\n", rd);
        }
}

static void body_alg5_g(const plan *p, const agg *a, const char *rd, al__afile *f, al_error *err) {
    for (int t = 0; t < p->nT; t++)
        for (int e = 0; e <= p->nE; e++) {
            double v = e < p->nE ? a->s.g[(size_t)t * p->nE + e] : a->s.spec[t],
                   b = 1 / (4 * p->T[t]);
            if (e < p->nE)
                al__afile_printf(f, err, "%.10g,%.10g", p->T[t], p->eps[e]);
            else
                al__afile_printf(f, err, "%.10g,exact", p->T[t]);
            csv_num(f, v, err);
            csv_num(f, b < sqrt(2.0) ? b : sqrt(2.0), err);
            csv_num(f, 1 / (2 * p->T[t]), err);
            al__afile_printf(f, err, ",%d,%s\n", v > b, rd);
        }
}

static void body_vanishing(const plan *p, const agg *a, const char *rd, al__afile *f,
                           al_error *err) {
    (void)rd; /* no [reading] of METHOD 9 changes these */
    int nh = p->n_head, L = p->long_L;
    for (int h = 0; h < p->H; h++)
        for (int t = 0; t < L; t++) {
            size_t q = (size_t)h * L + t;
            double n = a->s.v_n[t];
            al__afile_printf(f, err, "%d,%d,%d,%d", h / nh, h % nh, L, (int)n);
            csv_num(f, a->vmax[q], err);
            csv_num(f, a->vent[q], err);
            csv_num(f, n >= 2 ? a->vent[q] / log(n) : NAN, err);
            csv_num(f, a->vD[q], err);
            csv_num(f, exp(-2 * a->vD[q]) / n, err);
            csv_num(f, exp(2 * a->vD[q]) / n, err);
            al__afile_printf(f, err, "\n");
        }
}

/* Every CSV: the experiment that writes it, its name, header, and either per-head rows or a
 * body of its own. */
static const struct {
    unsigned exp;
    const char *file, *header;
    head_row rows;
    void (*body)(const plan *p, const agg *a, const char *rd, al__afile *f, al_error *err);
    int rd; /* the readings column (last): 0 none, 1 vectors, 2 vectors/distance/expectation,
             * 3 temperature scale/directions */
} csv_files[] = {
    {AL_EXP_ALG1, "alg1.csv", "layer,head,L,N,dtilde,dmax,E,E_mc,readings", row_alg1, NULL, 2},
    {AL_EXP_ALG2, "alg2.csv", "layer,head,L,N,dtilde,dmax,E,E_mc,readings", row_alg2, NULL, 2},
    {AL_EXP_ALG3, "alg3.csv",
     "L,N,pvalue,mean_dtilde,mean_E,critical_n_0.01,critical_n_0.05,readings", NULL, body_alg3, 2},
    {AL_EXP_ALG3, "alg3_heads.csv", "layer,head,L,N,dtilde,E,readings", row_alg3, NULL, 2},
    {AL_EXP_ALG4, "alg4.csv", "layer,head,L,N,ns_ratio,ns_lower,ns_upper,readings", row_alg4, NULL,
     1},
    {AL_EXP_ALG5, "alg5.csv", "layer,head,L,T,eps,fd_mean,spectral_mean,readings", NULL, body_alg5,
     3},
    {AL_EXP_ALG5, "alg5_g.csv", "T,eps,g,bound_paper,bound_sup,above_1_over_4T,readings", NULL,
     body_alg5_g, 3},
    {AL_EXP_VANISHING, "vanishing.csv",
     "layer,head,L,n,max_weight,entropy,entropy_over_log_n,D,band_lo,band_hi", NULL, body_vanishing,
     0},
};

/* The readings column of a CSV (METHOD 9 [reading]): "name=value" pairs joined by ';'. */
static void readings_text(const plan *p, int which, char *buf, size_t size) {
    const al_repro_opts *o = &p->o;
    if (which == 1)
        snprintf(buf, size, "vectors=%s", al_vectors_name(o->vectors));
    else if (which == 2)
        snprintf(buf, size, "vectors=%s;distance=%s;expectation=%s", al_vectors_name(o->vectors),
                 al_distance_name(o->distance), al_expect_name(o->expectation));
    else if (which == 3)
        snprintf(buf, size, "temperature_scale=%s;directions=%s",
                 o->temperature_raw ? "raw" : "scaled", o->fresh_directions ? "fresh" : "shared");
    else
        buf[0] = 0;
}

int al__ex_write_csvs(const plan *p, agg *a, al_error *err) {
    for (size_t i = 0; i < sizeof csv_files / sizeof *csv_files; i++) {
        if (!(p->exp & csv_files[i].exp)) continue;
        char path[4200];
        al__afile f;
        snprintf(path, sizeof path, "%s/%s", p->o.out_dir, csv_files[i].file);
        int rc = al__afile_open(&f, path, err);
        if (rc) return rc;
        al__afile_printf(&f, err, "%s\n", csv_files[i].header);
        char rd[160];
        readings_text(p, csv_files[i].rd, rd, sizeof rd);
        if (csv_files[i].rows)
            write_head_rows(p, a, csv_files[i].rows, rd, &f, err);
        else
            csv_files[i].body(p, a, rd, &f, err);
        if ((rc = al__afile_commit(&f, err))) return rc;
    }
    return 0;
}

/* ---- NPY: float64 arrays, per-head ones shaped [..., n_layer, n_head] */

int al__ex_write_npys(const plan *p, agg *a, al_error *err) {
    int64_t Ly = p->n_layer, Hd = p->n_head, nL = p->nL, nT = p->nT;
    const struct {
        unsigned exp;
        const char *name;
        const double *data;
        int ndim;
        int64_t shape[4];
    } npys[] = {
        {AL_EXP_ALG1, "alg1_dtilde", a->a1[0], 3, {nL, Ly, Hd}},
        {AL_EXP_ALG1, "alg1_dmax", a->a1[1], 3, {nL, Ly, Hd}},
        {AL_EXP_ALG1, "alg1_E", a->a1[2], 3, {nL, Ly, Hd}},
        {AL_EXP_ALG2, "alg2_dtilde", a->a2[0], 3, {p->nN2, Ly, Hd}},
        {AL_EXP_ALG2, "alg2_dmax", a->a2[1], 3, {p->nN2, Ly, Hd}},
        {AL_EXP_ALG2, "alg2_E", a->a2[2], 3, {p->nN2, Ly, Hd}},
        {AL_EXP_ALG3, "alg3_dtilde", a->a3_dt, 4, {nL, p->nN3, Ly, Hd}},
        {AL_EXP_ALG3, "alg3_E", a->a3_E, 4, {nL, p->nN3, Ly, Hd}},
        {AL_EXP_ALG3, "alg3_pvalues", a->s.a3_p, 2, {nL, p->nN3}},
        {AL_EXP_ALG4, "alg4_ratio", a->a4[0], 3, {p->nN4, Ly, Hd}},
        {AL_EXP_ALG4, "alg4_lower", a->a4[1], 3, {p->nN4, Ly, Hd}},
        {AL_EXP_ALG4, "alg4_upper", a->a4[2], 3, {p->nN4, Ly, Hd}},
        {AL_EXP_ALG5, "alg5_fd", a->fd, 4, {Ly, Hd, nT, p->nE}},
        {AL_EXP_ALG5, "alg5_spectral", a->spec, 3, {Ly, Hd, nT}},
        {AL_EXP_VANISHING, "vanishing_max_weight", a->vmax, 3, {Ly, Hd, p->long_L}},
        {AL_EXP_VANISHING, "vanishing_entropy", a->vent, 3, {Ly, Hd, p->long_L}},
        {AL_EXP_VANISHING, "vanishing_D", a->vD, 3, {Ly, Hd, p->long_L}},
    };
    for (size_t i = 0; i < sizeof npys / sizeof *npys; i++) {
        if (!(p->exp & npys[i].exp)) continue;
        char path[4200];
        snprintf(path, sizeof path, "%s/%s.npy", p->o.out_dir, npys[i].name);
        al_array arr = {.dtype = AL_F64, .ndim = npys[i].ndim, .data = (void *)npys[i].data};
        for (int d = 0; d < npys[i].ndim; d++) arr.shape[d] = npys[i].shape[d];
        int rc = al_npy_write(path, &arr, err);
        if (rc) return rc;
    }
    return 0;
}
