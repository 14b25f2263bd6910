/* cmd_metrics.c: attnlim metrics — the distance and separability metrics of METHOD sections
 * 2, 3 and 5 for one row of weights or one head's [L, L] weights, over a grid of N. */
#include "cli.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

typedef struct metrics_opts {
    const char *weights, *vectors;
    int *top_n; /* [n_top] */
    int n_top;
    int causal, per_row, json, help;
    long mc, seed;
    long head; /* --head: which [L, L] of 3-D weights [H, L, L] (-1: not given) */
} metrics_opts;

enum { O_WEIGHTS = 1, O_VECTORS, O_HEAD, O_TOP_N, O_CAUSAL, O_MC, O_SEED, O_PER_ROW, O_JSON };
static const cli_opt opts[] = {
    {O_WEIGHTS, "--weights", "W",
     "a row alpha[n] (1-D) or a head's weights [L, L] (2-D; row t uses\n"
     "columns 0..t with --causal, all L otherwise); .npy or text numbers"},
    {O_VECTORS, "--vectors", "X", "the vectors x [n, d] (1-D weights) or [L, d] (2-D weights)"},
    {O_HEAD, "--head", "H",
     "3-D weights [n_heads, L, L] (capture's weights.npy): head H of them;\n"
     "vectors then [n_heads, L, d] (head H taken) or [L, d]"},
    {O_TOP_N, "--top-n", "LIST", "the N grid, e.g. 1,5,10 or 1-16,18,20 (each >= 1)"},
    {O_CAUSAL, "--causal", NULL, "2-D weights: row t sees keys 0..t (n = t+1)"},
    {O_MC, "--mc", "S", "Monte-Carlo E with S random N-subsets per row (default 0: off)"},
    {O_SEED, "--seed", "S", "its seed (default 0)"},
    {O_PER_ROW, "--per-row", NULL, "2-D weights: also every row's values (\"rows\" in the JSON)"},
    {O_JSON, "--json", NULL,
     "one JSON object: {\"results\": [{\"N\", \"rows\", \"dtilde\", \"dmax\",\n"
     "\"E\", \"E_mc\", \"E_mc_se\", \"ns_ratio\", \"ns_lower\", \"ns_upper\"}],\n"
     "\"max_weight\", \"entropy\", ...}; 2-D: means over the rows with n > N\n"
     "(max_weight, entropy: over every row; normalized_entropy H / log n:\n"
     "over the rows with n >= 2). null = not defined."},
    CLI_OPT_END,
};

static void usage(FILE *f) {
    fprintf(f,
            "usage: attnlim metrics --weights W.npy --vectors X.npy --top-n N[,N...] [--causal]\n"
            "                       [--head H] [--mc SAMPLES --seed S] [--per-row] [--json]\n\n"
            "Distance (METHOD 3) and separability (METHOD 5) metrics of attention weights.\n\n");
    cli_print_options(f, opts, 17);
    fprintf(f,
            "\ndtilde, dmax and the separability bounds are reconstructions [reading] of formulas\n"
            "the paper does not print (docs/METHOD.md). dmax is a bound only for non-negative\n"
            "weights (\"dmax_is_bound\").\n");
}

/* --head h of 3-D weights [H, L, L] (and of 3-D vectors [H, L, d]): the arrays become that
 * head's, in place (the data moved to the front). 3-D without --head, or --head on 2-D, is an
 * error naming the file. */
static int take_head(const metrics_opts *o, al_array *W, al_array *X, al_error *err) {
    if (W->ndim != 3) {
        if (o->head >= 0)
            return al_error_set(err, AL_E_INVALID,
                                "%s: --head takes 3-D weights [n_heads, L, L], got %d dims",
                                o->weights, W->ndim);
        return 0;
    }
    if (o->head < 0)
        return al_error_set(
            err, AL_E_INVALID, "%s: 3-D weights [%lld, %lld, %lld]: pick one head with --head H",
            o->weights, (long long)W->shape[0], (long long)W->shape[1], (long long)W->shape[2]);
    if (o->head >= W->shape[0])
        return al_error_set(err, AL_E_RANGE, "%s: --head %ld, but the weights hold %lld heads",
                            o->weights, o->head, (long long)W->shape[0]);
    size_t per = (size_t)W->shape[1] * (size_t)W->shape[2];
    double *wd = W->data;
    memmove(wd, wd + (size_t)o->head * per, per * sizeof(double));
    W->ndim = 2, W->shape[0] = W->shape[1], W->shape[1] = W->shape[2];
    if (X->ndim == 3) {
        if (o->head >= X->shape[0])
            return al_error_set(err, AL_E_INVALID, "%s: vectors hold %lld heads, --head %ld",
                                o->vectors, (long long)X->shape[0], o->head);
        size_t px = (size_t)X->shape[1] * (size_t)X->shape[2];
        double *xd = X->data;
        memmove(xd, xd + (size_t)o->head * px, px * sizeof(double));
        X->ndim = 2, X->shape[0] = X->shape[1], X->shape[1] = X->shape[2];
    }
    return 0;
}

/* Returns 0, or the exit status (2: usage). */
static int parse_options(int argc, char **argv, metrics_opts *o) {
    memset(o, 0, sizeof *o);
    o->head = -1;
    al_error err = {0};
    cli_parser p = {"metrics", argc, argv, opts, usage};
    const char *v;
    for (int id; (id = cli_next(&p, &v)) != CLI_END;) {
        int rc = 0;
        if (id == CLI_STOP) {
            o->help = p.status == 0;
            return p.status;
        } else if (id == O_JSON) {
            o->json = 1;
        } else if (id == O_CAUSAL) {
            o->causal = 1;
        } else if (id == O_PER_ROW) {
            o->per_row = 1;
        } else if (id == O_WEIGHTS) {
            o->weights = v;
        } else if (id == O_VECTORS) {
            o->vectors = v;
        } else if (id == O_TOP_N) {
            free(o->top_n);
            o->top_n = NULL;
            rc = cli_parse_int_list(v, "--top-n", &o->top_n, &o->n_top, &err);
        } else if (id == O_HEAD) {
            rc = cli_parse_int(v, "--head", 0, 1L << 30, &o->head, &err);
        } else if (id == O_MC) {
            rc = cli_parse_int(v, "--mc", 0, 100000000, &o->mc, &err);
        } else if (id == O_SEED) {
            rc = cli_parse_int(v, "--seed", 0, 0x7fffffffffffffffL, &o->seed, &err);
        }
        if (rc) return cli_usage_error("metrics", "%s", err.msg);
    }
    if (!o->weights) return cli_usage_error("metrics", "--weights is required");
    if (!o->vectors) return cli_usage_error("metrics", "--vectors is required");
    if (!o->top_n || o->n_top < 1) return cli_usage_error("metrics", "--top-n is required");
    for (int k = 0; k < o->n_top; k++)
        if (o->top_n[k] < 1)
            return cli_usage_error("metrics", "--top-n: N = %d is < 1", o->top_n[k]);
    return 0;
}

static cJSON *results_json(const al_topn_stats *st, int n_top, int mc) {
    cJSON *arr = cJSON_CreateArray();
    for (int k = 0; k < n_top; k++) {
        const al_topn_stats *s = &st[k];
        cJSON *e = cJSON_CreateObject();
        cJSON_AddNumberToObject(e, "N", s->N);
        cJSON_AddNumberToObject(e, "rows", (double)s->rows);
        cJSON_AddItemToObject(e, "dtilde", cli_json_num(s->dtilde));
        cJSON_AddItemToObject(e, "dmax", cli_json_num(s->dmax));
        cJSON_AddItemToObject(e, "E", cli_json_num(s->E));
        cJSON_AddItemToObject(e, "E_mc", cli_json_num(mc ? s->E_mc : NAN));
        cJSON_AddItemToObject(e, "E_mc_se", cli_json_num(mc ? s->E_mc_se : NAN));
        cJSON_AddItemToObject(e, "ns_ratio", cli_json_num(s->ns_ratio));
        cJSON_AddItemToObject(e, "ns_lower", cli_json_num(s->ns_lower));
        cJSON_AddItemToObject(e, "ns_upper", cli_json_num(s->ns_upper));
        cJSON_AddItemToArray(arr, e);
    }
    return arr;
}

static void print_table(const al_topn_stats *st, int n_top, int mc) {
    printf("%6s %8s %14s %14s %14s %14s %9s %9s %9s\n", "N", "rows", "dtilde", "dmax", "E",
           mc ? "E_mc" : "-", "ns_ratio", "ns_lower", "ns_upper");
    for (int k = 0; k < n_top; k++) {
        const al_topn_stats *s = &st[k];
        printf("%6d %8lld %14.8g %14.8g %14.8g %14.8g %9.4f %9.4f %9.4f\n", s->N,
               (long long)s->rows, s->dtilde, s->dmax, s->E, mc ? s->E_mc : NAN, s->ns_ratio,
               s->ns_lower, s->ns_upper);
    }
}

static int fail(al_error *err, al_code code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fail(al_error *err, al_code code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    al_error_vset(err, code, fmt, ap);
    va_end(ap);
    return cli_fail("metrics", err);
}

int cmd_metrics(int argc, char **argv) {
    metrics_opts o;
    int rc = parse_options(argc, argv, &o);
    if (rc || o.help) {
        free(o.top_n);
        return rc;
    }
    al_error err = {0};
    al_array W = {0}, X = {0};
    al_topn_stats *st = NULL;
    double *rmax = NULL, *rent = NULL, *rhn = NULL; /* [rows] max weight, H, H / log n */
    cJSON *obj = NULL;
    int status = 1;
    if (cli_read_array(o.weights, &W, &err) || cli_read_array(o.vectors, &X, &err)) {
        status = cli_fail("metrics", &err);
        goto done;
    }
    if ((status = take_head(&o, &W, &X, &err)) != 0) {
        status = cli_fail("metrics", &err);
        goto done;
    }
    status = 1;
    if (W.ndim != 1 && W.ndim != 2) {
        status = fail(&err, AL_E_INVALID, "%s: weights must be 1-D or 2-D (got %d dims)", o.weights,
                      W.ndim);
        goto done;
    }
    if (X.ndim != 2) {
        status = fail(&err, AL_E_INVALID, "%s: vectors must be 2-D [rows, d] (got %d dims)",
                      o.vectors, X.ndim);
        goto done;
    }
    int64_t rows = W.ndim == 1 ? 1 : W.shape[0], n = W.shape[W.ndim - 1];
    if (n < 1 || rows < 1) {
        status = fail(&err, AL_E_INVALID, "%s: empty weights (%lld x %lld)", o.weights,
                      (long long)rows, (long long)n);
        goto done;
    }
    if (W.ndim == 2 && rows != n) {
        status =
            fail(&err, AL_E_INVALID, "%s: head weights must be square [L, L], got [%lld, %lld]",
                 o.weights, (long long)rows, (long long)n);
        goto done;
    }
    if (X.shape[0] != n) {
        status = fail(&err, AL_E_INVALID, "%s: vectors have %lld rows, the weights need %lld",
                      o.vectors, (long long)X.shape[0], (long long)n);
        goto done;
    }
    const double *w = W.data; /* [rows, n] */
    const double *x = X.data; /* [n, d] */
    int64_t d = X.shape[1];
    al_metrics_opts mo = {.top_n = o.top_n,
                          .n_top = o.n_top,
                          .distance = 1,
                          .separability = 1,
                          .mc_samples = (int)o.mc,
                          .mc_seed = (uint64_t)o.seed,
                          .causal = W.ndim == 2 && o.causal};
    st = calloc((size_t)o.n_top, sizeof *st);
    rmax = calloc((size_t)rows, sizeof *rmax);
    rent = calloc((size_t)rows, sizeof *rent);
    rhn = calloc((size_t)rows, sizeof *rhn);
    if (!st || !rmax || !rent || !rhn) {
        status = fail(&err, AL_E_NOMEM, "out of memory");
        goto done;
    }
    if (W.ndim == 2 && !o.causal && n > 1) { /* zeros above the diagonal: a causal head */
        int lower = 1;
        for (int64_t t = 0; t < rows && lower; t++)
            for (int64_t j = t + 1; j < n && lower; j++) lower = w[t * n + j] == 0;
        if (lower)
            fprintf(stderr,
                    "attnlim metrics: warning: %s: every weight above the diagonal is 0, as in a "
                    "causal head; without --causal every row counts all %lld keys (n = L). Pass "
                    "--causal for n = t + 1.\n",
                    o.weights, (long long)n);
    }
    int nonneg = 1;
    for (int64_t t = 0; t < rows; t++) {
        int64_t nt = mo.causal ? t + 1 : n;
        for (int64_t j = 0; j < nt; j++)
            if (w[t * n + j] < 0) nonneg = 0;
    }
    if (W.ndim == 1)
        rc = al_row_metrics(w, x, n, d, &mo, st, &err);
    else
        rc = al_head_metrics(w, x, rows, d, &mo, st, NULL, NULL, &err);
    for (int64_t t = 0; t < rows && !rc; t++) /* METHOD section 2, row by row */
        rc = al_row_vanishing(w + t * n, mo.causal ? t + 1 : n, &rmax[t], &rent[t], &rhn[t], &err);
    if (rc) {
        char m[sizeof err.msg];
        snprintf(m, sizeof m, "%s, %s: %s", o.weights, o.vectors, err.msg);
        memcpy(err.msg, m, sizeof m);
        status = cli_fail("metrics", &err);
        goto done;
    }
    double mean_max = 0, mean_ent = 0, mean_hn = 0; /* H / log n over the rows with n >= 2 */
    int64_t n_hn = 0;
    for (int64_t t = 0; t < rows; t++) {
        mean_max += rmax[t] / (double)rows;
        mean_ent += rent[t] / (double)rows;
        if (!isnan(rhn[t])) { /* n >= 2 */
            mean_hn += rhn[t];
            n_hn++;
        }
    }
    if (o.json) {
        obj = cJSON_CreateObject();
        cJSON_AddBoolToObject(obj, "causal", mo.causal);
        cJSON_AddNumberToObject(obj, "n_rows", (double)rows);
        cJSON_AddNumberToObject(obj, "d", (double)d);
        cJSON_AddBoolToObject(obj, "dmax_is_bound", nonneg);
        cJSON_AddItemToObject(obj, "max_weight", cli_json_num(mean_max));
        cJSON_AddItemToObject(obj, "entropy", cli_json_num(mean_ent));
        cJSON_AddItemToObject(obj, "normalized_entropy",
                              cli_json_num(n_hn ? mean_hn / (double)n_hn : NAN));
        cJSON_AddItemToObject(obj, "results", results_json(st, o.n_top, o.mc > 0));
    } else {
        printf("# %s: %lld row(s) of %lld keys, d = %lld%s; max_weight %.6g, entropy %.6g "
               "(means over rows)\n",
               o.weights, (long long)rows, (long long)n, (long long)d, mo.causal ? ", causal" : "",
               mean_max, mean_ent);
        print_table(st, o.n_top, o.mc > 0);
    }
    if (o.per_row && W.ndim == 2) {
        cJSON *rarr = o.json ? cJSON_CreateArray() : NULL;
        for (int64_t t = 0; t < rows; t++) {
            int64_t nt = mo.causal ? t + 1 : n;
            rc = al_row_metrics(w + t * n, x, nt, d, &mo, st, &err);
            if (rc) {
                cJSON_Delete(rarr);
                status = cli_fail("metrics", &err);
                goto done;
            }
            if (o.json) {
                cJSON *e = cJSON_CreateObject();
                cJSON_AddNumberToObject(e, "row", (double)t);
                cJSON_AddNumberToObject(e, "n", (double)nt);
                cJSON_AddItemToObject(e, "max_weight", cli_json_num(rmax[t]));
                cJSON_AddItemToObject(e, "entropy", cli_json_num(rent[t]));
                cJSON_AddItemToObject(e, "normalized_entropy", cli_json_num(rhn[t]));
                cJSON_AddItemToObject(e, "results", results_json(st, o.n_top, o.mc > 0));
                cJSON_AddItemToArray(rarr, e);
            } else {
                printf("# row %lld (n = %lld): max_weight %.6g, entropy %.6g\n", (long long)t,
                       (long long)nt, rmax[t], rent[t]);
                print_table(st, o.n_top, o.mc > 0);
            }
        }
        if (o.json) cJSON_AddItemToObject(obj, "rows", rarr);
    }
    if (o.json) {
        cli_print_json(obj, 0);
        obj = NULL;
    }
    status = 0;
done:
    cJSON_Delete(obj);
    free(st);
    free(rmax);
    free(rent);
    free(rhn);
    free(o.top_n);
    al_array_free(&W);
    al_array_free(&X);
    return status;
}
