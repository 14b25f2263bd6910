/* cmd_normalize.c: attnlim normalize — map logits to weights with a normalizer (METHOD 7).
 * Also defines cmd_norm_options, the option parser shared with cmd_jacobian.c. */
#include "cli.h"

#include <stdlib.h>
#include <string.h>

/* Options shared by normalize and jacobian. */

/* Parses the shared options (allow_full: accept --full). Returns 0, or the exit status. */

static const char *opt_value(const char *cmd, int argc, char **argv, int *i, const char *name,
                             int *bad) {
    size_t len = strlen(name);
    const char *a = argv[*i];
    if (!strncmp(a, name, len) && a[len] == '=') return a + len + 1;
    if (*i + 1 >= argc) {
        cli_usage_error(cmd, "%s needs a value", name);
        *bad = 1;
        return NULL;
    }
    return argv[++*i];
}

int cmd_norm_options(const char *cmd, int argc, char **argv, int allow_full, void (*usage)(FILE *),
                     norm_opts *o) {
    memset(o, 0, sizeof *o);
    o->nm = al_norm_default(AL_NORM_SOFTMAX);
    const char *method = "softmax";
    double T = 1, alpha = 1.5, s = 0.43;
    al_error err = {0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int bad = 0;
#define IS(name) (!strcmp(a, name) || (!strncmp(a, name "=", strlen(name "="))))
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            o->help = 1;
            return 0;
        } else if (!strcmp(a, "--json")) {
            o->json = 1;
        } else if (allow_full && !strcmp(a, "--full")) {
            o->full = 1;
        } else if (IS("--method")) {
            method = opt_value(cmd, argc, argv, &i, "--method", &bad);
        } else if (IS("--input")) {
            o->input = opt_value(cmd, argc, argv, &i, "--input", &bad);
        } else if (IS("--temperature")) {
            const char *v = opt_value(cmd, argc, argv, &i, "--temperature", &bad);
            if (!bad && cli_parse_double(v, "--temperature", &T, &err))
                return cli_usage_error(cmd, "%s", err.msg);
        } else if (IS("--alpha")) {
            const char *v = opt_value(cmd, argc, argv, &i, "--alpha", &bad);
            if (!bad && cli_parse_double(v, "--alpha", &alpha, &err))
                return cli_usage_error(cmd, "%s", err.msg);
        } else if (IS("--ssmax-s")) {
            const char *v = opt_value(cmd, argc, argv, &i, "--ssmax-s", &bad);
            if (!bad && cli_parse_double(v, "--ssmax-s", &s, &err))
                return cli_usage_error(cmd, "%s", err.msg);
        } else {
            return cli_unknown_option(cmd, a, usage);
        }
#undef IS
        if (bad) return 2;
    }
    if (al_norm_parse(method, &o->nm, &err)) return cli_usage_error(cmd, "%s", err.msg);
    o->nm.temperature = T;
    o->nm.alpha = alpha;
    o->nm.ssmax_s = s;
    if (al_norm_check(&o->nm, &err)) return cli_usage_error(cmd, "%s", err.msg);
    return 0;
}

static void usage(FILE *f) {
    fprintf(
        f,
        "usage: attnlim normalize --method M [--temperature T] [--alpha A] [--ssmax-s S]\n"
        "                         [--input FILE|-] [--json]\n\n"
        "Maps logits to weights: p = normalizer(z / T) for every row of the input (METHOD 7).\n\n"
        "  --method M         softmax (default), sparsemax, entmax15, entmax, ssmax,\n"
        "                     sa-softmax (z * softmax(z)), sa-softmax-norm\n"
        "  --temperature T    T > 0, default 1; every normalizer is applied to z / T\n"
        "  --alpha A          entmax alpha > 1 (default 1.5)\n"
        "  --ssmax-s S        ssmax scalar s (default 0.43): softmax(s log(n) z / T)\n"
        "  --input FILE       a .npy file (1-D row or 2-D rows) or text numbers; absent or '-'\n"
        "                     reads numbers from stdin (whitespace/comma separated, a row per "
        "line)\n"
        "  --json             print {\"method\", \"weights\"} (a list, or a list per row)\n");
}

int cmd_normalize(int argc, char **argv) {
    norm_opts o;
    int rc = cmd_norm_options("normalize", argc, argv, 0, usage, &o);
    if (rc) return rc;
    if (o.help) {
        usage(stdout);
        return 0;
    }
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
