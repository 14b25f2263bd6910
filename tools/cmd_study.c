/* cmd_study.c: attnlim study: one model per normalizer at the same budget, the paper's
 * diagnostics on each, and a report (src/train/study.c). */
#include "cli.h"
#include "ops.h"
#include "study.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void usage(FILE *f) {
    fprintf(
        f, "usage: attnlim study --out DIR [options]\n"
           "\n"
           "Trains one GPT-2-style model per normalizer with attnlim train's trainer at the same\n"
           "budget (model, context, steps, data order, seed) into DIR/runs/NAME, then on held-out\n"
           "windows, through each model's own forward: vanishing (max weight and entropy against\n"
           "n), N_s/N against N, the critical N / L (KS at 0.01 over the model's heads) and the\n"
           "normalizer's Jacobian norm; writes DIR/study.json, study.csv, figures/ and\n"
           "report.html with, for each of the paper's predictions, what it expects for that\n"
           "normalizer and what was measured. Resumable: run it again to continue.\n"
           "\n"
           "  --normalizers LIST  (softmax,sparsemax,entmax15,entmax:1.3,ssmax,sa-softmax;\n"
           "                      ssmax: s learnable per head, ssmax-fixed[:S]: fixed)\n"
           "  --scale F           multiply the steps by F (default 1: about an hour on 2 cores)\n"
           "  --steps N (600) --lr X (2e-3) --warmup N (60) --layers L (4) --heads H (4)\n"
           "  --embd C (128) --ctx N (1024) --batch B (2) --seq T (the context) --seed S (1)\n"
           "  --corpus war-and-peace|FILE --tokenizer bytes|gpt2 (bytes) --eval-every K (50)\n"
           "  --windows W (2: held-out windows diagnosed) --crit-L LIST (128,256,512,1024)\n"
           "  --threads N --quiet --json\n");
}

int cmd_study(int argc, char **argv) {
    al__study_opts o;
    al__study_defaults(&o);
    al_error err = {0};
    const char *norms = "softmax,sparsemax,entmax15,entmax:1.3,ssmax,sa-softmax";
    double scale = 1, seed = 1;
    int json = 0, quiet = 0, threads = 0, seq = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        long x;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--json")) {
            json = 1;
            continue;
        }
        if (!strcmp(a, "--quiet")) {
            quiet = 1;
            continue;
        }
        if (!v) return cli_usage_error("study", "unknown option or missing value: '%s'", a);
        i++;
        struct {
            const char *name;
            int *dst;
            long lo, hi;
        } ints[] = {{"--steps", &o.base.opt.steps, 0, 1000000000},
                    {"--warmup", &o.base.opt.warmup, 0, 1000000000},
                    {"--layers", &o.base.cfg.n_layer, 1, 256},
                    {"--heads", &o.base.cfg.n_head, 1, 1024},
                    {"--embd", &o.base.cfg.n_embd, 1, 8192},
                    {"--ctx", &o.base.cfg.n_ctx, 2, 8192},
                    {"--batch", &o.base.B, 1, 4096},
                    {"--seq", &seq, 2, 8192},
                    {"--eval-every", &o.base.eval_every, 0, 1000000000},
                    {"--windows", &o.windows, 1, 100000},
                    {"--threads", &threads, 0, 4096}};
        int k = -1;
        for (int j = 0; j < (int)(sizeof ints / sizeof ints[0]); j++)
            if (!strcmp(a, ints[j].name)) k = j;
        if (k >= 0) {
            if (cli_parse_int(v, a, ints[k].lo, ints[k].hi, &x, &err))
                return cli_usage_error("study", "%s", err.msg);
            *ints[k].dst = (int)x;
        } else if (!strcmp(a, "--out")) {
            o.out = v;
        } else if (!strcmp(a, "--normalizers")) {
            norms = v;
        } else if (!strcmp(a, "--corpus")) {
            o.base.corpus = v;
        } else if (!strcmp(a, "--tokenizer")) {
            o.base.tokenizer = v;
        } else if (!strcmp(a, "--scale") || !strcmp(a, "--lr") || !strcmp(a, "--seed")) {
            double d;
            if (cli_parse_double(v, a, &d, &err)) return cli_usage_error("study", "%s", err.msg);
            if (!(d > 0) && strcmp(a, "--seed"))
                return cli_usage_error("study", "%s must be > 0", a);
            *(!strcmp(a, "--scale") ? &scale : !strcmp(a, "--lr") ? &o.base.opt.lr : &seed) = d;
        } else if (!strcmp(a, "--crit-L")) {
            int *L, n;
            if (cli_parse_int_list(v, a, &L, &n, &err))
                return cli_usage_error("study", "%s", err.msg);
            if (n > AL__STUDY_MAX_L) {
                free(L);
                return cli_usage_error("study", "--crit-L: at most %d lengths", AL__STUDY_MAX_L);
            }
            memcpy(o.crit_L, L, (size_t)n * sizeof *L);
            o.n_crit_L = n;
            free(L);
        } else {
            return cli_usage_error("study", "unknown option '%s'", a);
        }
    }
    if (!o.out) return cli_usage_error("study", "--out DIR is required");
    if (al__study_parse_norms(norms, &o, &err)) return cli_usage_error("study", "%s", err.msg);
    if (seed < 0 || seed != floor(seed)) return cli_usage_error("study", "--seed: an integer >= 0");
    o.base.seed = (uint64_t)seed;
    o.base.opt.steps = (int)ceil(o.base.opt.steps * scale);
    o.base.T = seq ? seq : o.base.cfg.n_ctx;
    if (o.base.T > o.base.cfg.n_ctx)
        return cli_usage_error("study", "--seq %d is longer than --ctx %d", o.base.T,
                               o.base.cfg.n_ctx);
    if (o.base.cfg.n_embd % o.base.cfg.n_head)
        return cli_usage_error("study", "--embd is not a multiple of --heads");
    int kept = 0; /* lengths past the window are dropped (a smaller --seq) */
    for (int k = 0; k < o.n_crit_L; k++)
        if (o.crit_L[k] <= o.base.T) o.crit_L[kept++] = o.crit_L[k];
    o.n_crit_L = kept;
    if (threads) al__set_threads(threads);
    o.progress = !quiet && isatty(2);
    if (al__study_run(&o, &err)) return cli_fail("study", &err);
    if (json) {
        cJSON *j = cJSON_CreateObject();
        cJSON_AddStringToObject(j, "out", o.out);
        cJSON_AddNumberToObject(j, "runs", o.n_norms);
        cJSON_AddNumberToObject(j, "steps", o.base.opt.steps);
        cli_print_json(j, 0);
    } else {
        printf("%s: %d models; report %s/report.html\n", o.out, o.n_norms, o.out);
    }
    return 0;
}
