/* cmd_ks.c: attnlim ks — the two-sample Kolmogorov-Smirnov test of METHOD section 4
 * (statistic and two-sided p-value as scipy.stats.ks_2samp(a, b), method='auto'). */
#include "cli.h"

#include <string.h>

static void usage(FILE *f) {
    fprintf(f,
            "usage: attnlim ks A B [--json]\n\n"
            "Two-sample Kolmogorov-Smirnov test, two-sided, of the numbers in A and B (.npy of\n"
            "any shape, flattened, or text: whitespace- or comma-separated, lines of any length;\n"
            "'-' reads stdin). The p-value is scipy.stats.ks_2samp's with method='auto' (scipy\n"
            "1.10): exact when both samples have at most 10000 values, else (or when the exact\n"
            "sum fails) kstwo.sf(D, round(n1 n2 / (n1 + n2))), the one-sample distribution.\n\n"
            "  --json    print {\"statistic\", \"pvalue\", \"n1\", \"n2\"}\n");
}

int cmd_ks(int argc, char **argv) {
    const char *paths[2] = {NULL, NULL};
    int np = 0, json = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--json")) {
            json = 1;
        } else if (a[0] == '-' && a[1] != 0) {
            return cli_unknown_option("ks", a, usage);
        } else {
            if (np == 2) return cli_usage_error("ks", "expected two samples, got a third '%s'", a);
            paths[np++] = a;
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
