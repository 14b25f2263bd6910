/* cmd_ks.c: attnlim ks — the two-sample Kolmogorov-Smirnov test of METHOD section 4
 * (statistic and two-sided p-value as scipy.stats.ks_2samp(a, b), method='auto'). */
#include "cli.h"

#include <string.h>

enum { O_JSON = 1 };
static const cli_opt opts[] = {
    {O_JSON, "--json", NULL, "print {\"statistic\", \"pvalue\", \"n1\", \"n2\"}"},
    CLI_OPT_END,
};

static void usage(FILE *f) {
    fprintf(f,
            "usage: attnlim ks A B [--json]\n\n"
            "Two-sample Kolmogorov-Smirnov test, two-sided, of the numbers in A and B (.npy of\n"
            "any shape, flattened, or text: whitespace- or comma-separated, lines of any length;\n"
            "'-' reads stdin). The p-value is scipy.stats.ks_2samp's with method='auto' (scipy\n"
            "1.10): exact when both samples have at most 10000 values, else (or when the exact\n"
            "sum fails) kstwo.sf(D, round(n1 n2 / (n1 + n2))), the one-sample distribution.\n\n");
    cli_print_options(f, opts, 12);
}

int cmd_ks(int argc, char **argv) {
    const char *paths[2] = {NULL, NULL};
    int np = 0, json = 0, id;
    cli_parser cp = {"ks", argc, argv, opts, usage, 1};
    const char *word;
    while ((id = cli_next(&cp, &word)) != CLI_END) {
        if (id == CLI_STOP) return cp.status;
        if (id == O_JSON) {
            json = 1;
        } else {
            if (np == 2)
                return cli_usage_error("ks", "expected two samples, got a third '%s'", word);
            paths[np++] = word;
        }
    }
    if (np != 2) return cli_usage_error("ks", "expected two samples A and B");
    if (!strcmp(paths[0], "-") && !strcmp(paths[1], "-"))
        return cli_usage_error("ks", "only one of A and B can be read from stdin");
    al_error err = {0};
    al_array a = {0}, b = {0};
    int status = 1;
    if (cli_read_flat(paths[0], &a, &err) || cli_read_flat(paths[1], &b, &err)) {
        status = cli_fail("ks", &err);
        goto done;
    }
    size_t na = (size_t)al_array_numel(&a), nb = (size_t)al_array_numel(&b);
    double stat, p;
    if (al_ks_2samp(a.data, na, b.data, nb, &stat, &p, &err)) {
        char m[sizeof err.msg];
        snprintf(m, sizeof m, "%s, %s: %s", paths[0], paths[1], err.msg);
        memcpy(err.msg, m, sizeof m);
        status = cli_fail("ks", &err);
        goto done;
    }
    if (json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddItemToObject(o, "statistic", cli_json_num(stat));
        cJSON_AddItemToObject(o, "pvalue", cli_json_num(p));
        cJSON_AddNumberToObject(o, "n1", (double)na);
        cJSON_AddNumberToObject(o, "n2", (double)nb);
        cli_print_json(o, 0);
    } else {
        printf("statistic %.17g\npvalue %.17g\nn1 %zu\nn2 %zu\n", stat, p, na, nb);
    }
    status = 0;
done:
    al_array_free(&a);
    al_array_free(&b);
    return status;
}
