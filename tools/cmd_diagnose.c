/* cmd_diagnose.c: attnlim diagnose: per-head health of a model's attention (al_diagnose). */
#include "cli.h"

#include <stdlib.h>
#include <string.h>

static void usage(FILE *f) {
    fprintf(
        f,
        "usage: attnlim diagnose [--model PATH|NAME] [--corpus war-and-peace|FILE] [--length L]\n"
        "                        [--window K] [--normalizer M] [--out DIR] [--threads T] [--json]\n"
        "                        [--attention R] [--attention-normalizer M]\n"
        "                        [--attention-layers LIST] [--attention-heads LIST]\n"
        "\n"
        "Per-head health of the attention on one window (default: window 0, L = min(1024, "
        "context)):\n"
        "mean max weight, mean entropy / log n, mean weight on token 0, N_s/N at N = 1, 4, 16, "
        "64,\n"
        "and the mean exact Jacobian spectral norm at T = 1. Flags heads whose attention has\n"
        "collapsed (max weight > 0.9 or H/log n < 0.1), vanishes (H/log n > 0.95: near uniform)\n"
        "or sinks into token 0 (mean weight > 0.5).\n"
        "--model DUMPDIR reads an attention dump (docs/dumps.md): its T tokens, window 0,\n"
        "L = min(1024, T) by default (any L <= T when causal; L = T when bidirectional).\n"
        "  --out DIR   also write DIR/diagnose.json and DIR/diagnose.md\n"
        "  --json      print the JSON report on stdout (default: a summary line per flag)\n"
        "Under mpirun (a build with MPI) the heads are shared out over the ranks; rank 0 "
        "reports.\n"
        "--normalizer re-normalises the captured logits; the options below change the model's\n"
        "attention itself (recorded in the report's model.attention):\n");
    fputs(CLI_ATTN_USAGE, f);
}

/* Under an MPI launcher every rank parses the same arguments; only rank 0 prints. */
static int diagnose_main(int argc, char **argv, al_dist *d, int *att_lists[2]) {
    int root = al_dist_rank(d) == 0;
#define USAGE_ERROR(...) (root ? cli_usage_error("diagnose", __VA_ARGS__) : 2)
    al_diag_opts o = {.corpus = NULL}; /* NULL: war-and-peace (a dump takes none) */
    al_error err = {0};
    int json = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        long n;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            if (root) usage(stdout);
            return 0;
        } else if (!strcmp(a, "--json")) {
            json = 1;
            continue;
        }
        if (!v) return USAGE_ERROR("%s needs a value (or is unknown)", a);
        i++;
        int ar = cli_attn_arg(a, v, &o.attention, att_lists, &err);
        if (ar < 0) return USAGE_ERROR("%s", err.msg);
        if (ar > 0) continue;
        if (!strcmp(a, "--model"))
            o.model = v;
        else if (!strcmp(a, "--corpus"))
            o.corpus = v;
        else if (!strcmp(a, "--data"))
            o.data_path = v;
        else if (!strcmp(a, "--out"))
            o.out_dir = v;
        else if (!strcmp(a, "--normalizer"))
            o.normalizer = v;
        else if (!strcmp(a, "--length")) {
            if (cli_parse_int(v, "--length", 2, 1 << 20, &n, &err))
                return USAGE_ERROR("%s", err.msg);
            o.length = (int)n;
        } else if (!strcmp(a, "--window")) {
            if (cli_parse_int(v, "--window", 0, 1 << 30, &n, &err))
                return USAGE_ERROR("%s", err.msg);
            o.window = (int)n;
        } else if (!strcmp(a, "--threads")) {
            if (cli_parse_int(v, "--threads", 1, 1024, &n, &err)) return USAGE_ERROR("%s", err.msg);
            o.threads = (int)n;
        } else
            return USAGE_ERROR("unknown option '%s'", a);
    }
    char picked[64];
    if (!o.model) { /* on every rank (al_diagnose_dist checks that they opened the same) */
        if (al_dist_agree(d, al_repro_pick_model(picked, sizeof picked, &err), &err))
            return root ? cli_fail("diagnose", &err) : 1;
        o.model = picked;
    }
    char *txt = NULL;
    cli_catch_interrupt();
    if (al_diagnose_dist(&o, d, &txt, &err))
        return root ? cli_fail_or_interrupted("diagnose", &err, 0, 0) : 1;
    if (!txt) return 0; /* not rank 0 */
    if (json) {
        printf("%s\n", txt);
    } else {
        cJSON *r = cJSON_Parse(txt);
        cJSON *s = r ? cJSON_GetObjectItemCaseSensitive(r, "summary") : NULL;
        cJSON *hs = r ? cJSON_GetObjectItemCaseSensitive(r, "heads") : NULL;
        if (s)
            printf("%d heads: %d collapsed, %d vanishing, %d sink\n",
                   cJSON_GetObjectItemCaseSensitive(s, "heads")->valueint,
                   cJSON_GetObjectItemCaseSensitive(s, "collapsed")->valueint,
                   cJSON_GetObjectItemCaseSensitive(s, "vanishing")->valueint,
                   cJSON_GetObjectItemCaseSensitive(s, "sink")->valueint);
        cJSON *h;
        cJSON_ArrayForEach(h, hs) {
            cJSON *fl = cJSON_GetObjectItemCaseSensitive(h, "flags");
            if (cJSON_GetArraySize(fl) == 0) continue;
            printf("layer %d head %d:", cJSON_GetObjectItemCaseSensitive(h, "layer")->valueint,
                   cJSON_GetObjectItemCaseSensitive(h, "head")->valueint);
            cJSON *f;
            cJSON_ArrayForEach(f, fl) printf(" %s", f->valuestring);
            printf(" (max weight %.3f, H/log n %.3f)\n",
                   cJSON_GetObjectItemCaseSensitive(h, "mean_max_weight")->valuedouble,
                   cJSON_GetObjectItemCaseSensitive(h, "mean_entropy_over_log_n")->valuedouble);
        }
        cJSON_Delete(r);
    }
    free(txt);
    return 0;
#undef USAGE_ERROR
}

int cmd_diagnose(int argc, char **argv) {
    al_dist *d = NULL; /* several processes under mpirun (MPI builds), else this one */
    al_error err = {0};
    if (al_dist_open(&d, &err)) return cli_fail("diagnose", &err);
    int *att_lists[2] = {NULL, NULL}; /* --attention-layers, --attention-heads */
    int rc = diagnose_main(argc, argv, d, att_lists);
    free(att_lists[0]);
    free(att_lists[1]);
    al_dist_close(d);
    return rc;
}
