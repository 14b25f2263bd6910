/* cmd_jacobian.c: attnlim jacobian — spectral and Frobenius norms of a normalizer's Jacobian
 * dp/dz at the given logits, with the softmax-family bounds 1/(2T) and min(1/(4T), sqrt 2). */
#include "cli.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const cli_opt opts[] = {
    CLI_MORE(CLI_NORM_OPTS),
    {CLI_NORM_FULL, "--full", NULL,
     "also print the dense Jacobian (\"jacobian\": rows of J[i][j] = dp_i/dz_j)"},
    {CLI_NORM_JSON, "--json", NULL,
     "print {\"spectral_norm\", \"frobenius_norm\", \"bound_sup\", \"bound_paper\"}"},
    CLI_OPT_END,
};

static void usage(FILE *f) {
    fprintf(f, "usage: attnlim jacobian --method M [--temperature T] [--alpha A] [--ssmax-s S]\n"
               "                        [--input FILE|-] [--full] [--json]\n\n"
               "Norms of J = dp/dz for p = normalizer(z / T) at the logits z read from the input\n"
               "(a row; a 2-D input gives one result per row).\n\n");
    cli_print_options(f, opts, 21);
    fprintf(f, "\nSpectral norms are exact (secular equation) for softmax, sparsemax, entmax and "
               "ssmax, and\n"
               "accurate to 1e-6 relative or better (Lanczos on J^T J) for the sa-softmax forms. "
               "bound_sup\n"
               "= 1/(2T) (the supremum) and bound_paper = min(1/(4T), sqrt 2) (the paper's value) "
               "for\n"
               "softmax and ssmax (at its effective temperature T / (s log n)); null for the "
               "others.\n");
}

typedef struct row_result {
    double spectral, frobenius, sup, paper;
    double *J; /* [n, n] when --full */
} row_result;

static int one_row(const norm_opts *o, const double *z, int64_t n, row_result *r, al_error *err) {
    int rc = al_norm_spectral_norm(&o->nm, z, n, &r->spectral, err);
    if (rc == 0) rc = al_norm_frobenius_norm(&o->nm, z, n, &r->frobenius, err);
    if (rc) return rc;
    al_norm_bounds(&o->nm, n, &r->sup, &r->paper);
    r->J = NULL;
    if (o->full) {
        /* the dense J must fit: at most half the memory available now, and 1 GiB (n = 11585),
         * beyond which printing it is no use either */
        double avail = (double)sysconf(_SC_AVPHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
        double need = (double)n * (double)n * sizeof(double);
        double cap = avail > 0 && avail / 2 < 1073741824.0 ? avail / 2 : 1073741824.0;
        if (need > cap) {
            err->code = AL_E_INVALID;
            snprintf(err->msg, sizeof err->msg,
                     "--full: the dense Jacobian of n = %lld needs %.3g GB, more than the %.3g GB "
                     "allowed (half the available memory, at most 1 GiB): refused",
                     (long long)n, need / 1e9, cap / 1e9);
            return AL_E_INVALID;
        }
        r->J = malloc((size_t)n * (size_t)n * sizeof(double));
        if (!r->J) {
            err->code = AL_E_NOMEM;
            snprintf(err->msg, sizeof err->msg, "out of memory for the dense Jacobian");
            return AL_E_NOMEM;
        }
        if ((rc = al_norm_jacobian(&o->nm, z, n, r->J, err))) {
            free(r->J);
            r->J = NULL;
        }
    }
    return rc;
}

static cJSON *row_json(const row_result *r, int64_t n) {
    cJSON *obj = cJSON_CreateObject();
    cJSON_AddItemToObject(obj, "spectral_norm", cli_json_num(r->spectral));
    cJSON_AddItemToObject(obj, "frobenius_norm", cli_json_num(r->frobenius));
    cJSON_AddItemToObject(obj, "bound_sup", cli_json_num(r->sup));
    cJSON_AddItemToObject(obj, "bound_paper", cli_json_num(r->paper));
    if (r->J) {
        cJSON *rows = cJSON_CreateArray();
        for (int64_t i = 0; i < n; i++)
            cJSON_AddItemToArray(rows, cli_json_array_d(r->J + i * n, n));
        cJSON_AddItemToObject(obj, "jacobian", rows);
    }
    return obj;
}

static void row_text(const norm_opts *o, const row_result *r, int64_t n) {
    printf("%s, T = %g, n = %lld\n", al_norm_name(o->nm.kind), o->nm.temperature, (long long)n);
    printf("  spectral norm   %.12g\n", r->spectral);
    printf("  Frobenius norm  %.12g\n", r->frobenius);
    if (isfinite(r->sup)) {
        printf("  1/(2T) (sup)    %.12g\n", r->sup);
        printf("  min(1/(4T),sqrt2) (paper) %.12g%s\n", r->paper,
               r->spectral > r->paper ? "   <- the spectral norm is above the paper's value" : "");
    } else
        printf("  bounds          none known for %s\n", al_norm_name(o->nm.kind));
    if (r->J) {
        printf("  J = dp/dz:\n");
        for (int64_t i = 0; i < n; i++) {
            printf("   ");
            for (int64_t j = 0; j < n; j++) printf(" %12.5g", r->J[i * n + j]);
            printf("\n");
        }
    }
}

int cmd_jacobian(int argc, char **argv) {
    norm_opts o;
    int rc = cmd_norm_options("jacobian", argc, argv, opts, usage, &o);
    if (rc || o.help) return rc;
    al_error err = {0};
    al_array a;
    if (cli_read_rows(o.input, &a, &err)) return cli_fail("jacobian", &err);
    int64_t rows = a.ndim == 1 ? 1 : a.shape[0], n = a.shape[a.ndim - 1];
    const double *z = a.data; /* [rows, n] */
    cJSON *list = a.ndim == 2 && o.json ? cJSON_CreateArray() : NULL;
    for (int64_t r = 0; r < rows; r++) {
        row_result res;
        if (one_row(&o, z + r * n, n, &res, &err)) {
            cli_row_error(o.input, &a, r, &err);
            cJSON_Delete(list);
            al_array_free(&a);
            return cli_fail("jacobian", &err);
        }
        if (!o.json)
            row_text(&o, &res, n);
        else if (list)
            cJSON_AddItemToArray(list, row_json(&res, n));
        else
            cli_print_json(row_json(&res, n), 0);
        free(res.J);
    }
    if (list) { /* 2-D: each key holds a list over the rows */
        cJSON *obj = cJSON_CreateObject();
        const char *keys[] = {"spectral_norm", "frobenius_norm", "bound_sup", "bound_paper",
                              "jacobian"};
        for (int k = 0; k < 5; k++) {
            if (k == 4 && !o.full) break;
            cJSON *arr = cJSON_CreateArray();
            cJSON *it;
            cJSON_ArrayForEach(it, list) {
                cJSON *v = cJSON_DetachItemFromObject(it, keys[k]);
                cJSON_AddItemToArray(arr, v ? v : cJSON_CreateNull());
            }
            cJSON_AddItemToObject(obj, keys[k], arr);
        }
        cJSON_Delete(list);
        cli_print_json(obj, 0);
    }
    al_array_free(&a);
    return 0;
}
