/* cmd_normalize.c: attnlim normalize — map logits to weights with a normalizer (METHOD 7).
 * Also defines cmd_norm_options, the option parser shared with cmd_jacobian.c. */
#include "cli.h"

#include <stdlib.h>
#include <string.h>

/* The options shared by normalize and jacobian (jacobian adds --full: CLI_NORM_FULL). */
enum { O_METHOD = 1, O_TEMPERATURE, O_ALPHA, O_SSMAX_S, O_INPUT };
const cli_opt CLI_NORM_OPTS[] = {
    {O_METHOD, "--method", "M",
     "softmax (default), sparsemax, entmax15, entmax, ssmax,\n"
     "sa-softmax (z * softmax(z)), sa-softmax-norm"},
    {O_TEMPERATURE, "--temperature", "T", "T > 0, default 1; every normalizer is applied to z / T"},
    {O_ALPHA, "--alpha", "A", "entmax alpha > 1 (default 1.5)"},
    {O_SSMAX_S, "--ssmax-s", "S", "ssmax scalar s (default 0.43): softmax(s log(n) z / T)"},
    {O_INPUT, "--input", "FILE",
     "a .npy file (1-D row or 2-D rows) or text numbers; absent or '-'\n"
     "reads numbers from stdin (whitespace/comma separated, a row per line)"},
    CLI_OPT_END,
};

int cmd_norm_options(const char *cmd, int argc, char **argv, const cli_opt *opts,
                     void (*usage)(FILE *), norm_opts *o) {
    memset(o, 0, sizeof *o);
    o->nm = al_norm_default(AL_NORM_SOFTMAX);
    const char *method = "softmax", *v;
    double T = 1, alpha = 1.5, s = 0.43;
    al_error err = {0};
    cli_parser p = {cmd, argc, argv, opts, usage};
    int id;
    while ((id = cli_next(&p, &v)) != CLI_END) {
        double *num = id == O_TEMPERATURE ? &T : id == O_ALPHA ? &alpha : id == O_SSMAX_S ? &s : 0;
        if (id == CLI_STOP) {
            o->help = p.status == 0;
            return p.status;
        } else if (id == CLI_NORM_JSON) {
            o->json = 1;
        } else if (id == CLI_NORM_FULL) {
            o->full = 1;
        } else if (id == O_METHOD) {
            method = v;
        } else if (id == O_INPUT) {
            o->input = v;
        } else if (num && cli_parse_double(v, p.opt, num, &err)) {
            return cli_usage_error(cmd, "%s", err.msg);
        }
    }
    if (al_norm_parse(method, &o->nm, &err)) return cli_usage_error(cmd, "%s", err.msg);
    o->nm.temperature = T;
    o->nm.alpha = alpha;
    o->nm.ssmax_s = s;
    if (al_norm_check(&o->nm, &err)) return cli_usage_error(cmd, "%s", err.msg);
    return 0;
}

static const cli_opt opts[] = {
    CLI_MORE(CLI_NORM_OPTS),
    {CLI_NORM_JSON, "--json", NULL, "print {\"method\", \"weights\"} (a list, or a list per row)"},
    CLI_OPT_END,
};

static void usage(FILE *f) {
    fprintf(
        f,
        "usage: attnlim normalize --method M [--temperature T] [--alpha A] [--ssmax-s S]\n"
        "                         [--input FILE|-] [--json]\n\n"
        "Maps logits to weights: p = normalizer(z / T) for every row of the input (METHOD 7).\n\n");
    cli_print_options(f, opts, 21);
}

int cmd_normalize(int argc, char **argv) {
    norm_opts o;
    int rc = cmd_norm_options("normalize", argc, argv, opts, usage, &o);
    if (rc || o.help) return rc;
    al_error err = {0};
    al_array a;
    if (cli_read_rows(o.input, &a, &err)) return cli_fail("normalize", &err);
    int64_t rows = a.ndim == 1 ? 1 : a.shape[0], n = a.shape[a.ndim - 1];
    const double *z = a.data;                                                   /* [rows, n] */
    double *p = malloc((size_t)(rows * n > 0 ? rows * n : 1) * sizeof(double)); /* [rows, n] */
    if (!p) {
        al_array_free(&a);
        err.code = AL_E_NOMEM;
        snprintf(err.msg, sizeof err.msg, "out of memory");
        return cli_fail("normalize", &err);
    }
    for (int64_t r = 0; r < rows; r++) {
        if (al_norm_forward(&o.nm, z + r * n, n, p + r * n, &err)) {
            cli_row_error(o.input, &a, r, &err);
            free(p);
            al_array_free(&a);
            return cli_fail("normalize", &err);
        }
    }
    if (o.json) {
        cJSON *obj = cJSON_CreateObject();
        cJSON_AddStringToObject(obj, "method", al_norm_name(o.nm.kind));
        if (a.ndim == 1) {
            cJSON_AddItemToObject(obj, "weights", cli_json_array_d(p, n));
        } else {
            cJSON *rowsj = cJSON_CreateArray();
            for (int64_t r = 0; r < rows; r++)
                cJSON_AddItemToArray(rowsj, cli_json_array_d(p + r * n, n));
            cJSON_AddItemToObject(obj, "weights", rowsj);
        }
        cli_print_json(obj, 0);
    } else {
        printf("# %s, T = %g, %lld row(s) of %lld\n", al_norm_name(o.nm.kind), o.nm.temperature,
               (long long)rows, (long long)n);
        for (int64_t r = 0; r < rows; r++) {
            for (int64_t j = 0; j < n; j++) printf("%s%.10g", j ? " " : "", p[r * n + j]);
            printf("\n");
        }
    }
    free(p);
    al_array_free(&a);
    return 0;
}
