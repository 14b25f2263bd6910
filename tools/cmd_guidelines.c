/* cmd_guidelines.c: attnlim guidelines: the paper's guidelines tested in the model's loss
 * (al_guidelines; docs/guidelines.md). */
#include "cli.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void usage(FILE *f) {
    fprintf(
        f,
        "usage: attnlim guidelines --model PATH|NAME [--corpus war-and-peace|FILE] [--out DIR]\n"
        "                          [options]\n"
        "\n"
        "Tests the paper's practical advice where it matters, in the model's loss: for each L,\n"
        "the mean next-token NLL over windows 0..K-1 of the unmodified model, of top-k\n"
        "attention in every layer at each fixed k < L and at each rule, and of each\n"
        "normalizer; per L the smallest fixed k within 1%% and 5%% of the dense NLL (as k / L),\n"
        "fits k = c L, c sqrt L, c ln L, the KS critical N of a reproduce run beside it, and the\n"
        "entropy, max weight and N_s/N per layer of the modified models. Writes\n"
        "guidelines.json, guidelines.csv, monitoring.csv, guidelines.md and figures (SVG + PNG)\n"
        "into DIR (default ./attnlim-guidelines).\n"
        "\n"
        "  --model M          a causal LM: GPT-2 (HF dir, .safetensors, llm.c .bin), a "
        "Llama-family\n"
        "                     .gguf, or a known name (gpt2, smollm2)\n"
        "  --corpus C         war-and-peace (default) or a text file\n"
        "  --data DIR         where the shared data files are\n"
        "  --windows K        windows 0..K-1 of every L (default 4)\n"
        "  --lengths LIST     default 128,256,512,1024 (and 2048 when the context allows)\n"
        "  --k LIST           fixed k of topk:k (only k < L runs; default 1,2,4,...,512)\n"
        "  --rules LIST       default "
        "topk-frac:0.06,topk-sqrt:1,topk-sqrt:2,topk-log:2,topk-log:4\n"
        "  --normalizers LIST default sparsemax,entmax15,entmax:1.25,ssmax (dense, every layer)\n"
        "  --reproduce DIR    a reproduce output of the same model: its Algorithm 3 critical N\n"
        "  --monitor-length L the per-layer monitoring at that L only (default: at every L;\n"
        "                     -1: off); --monitor-n N: N of N_s/N (default 16)\n"
        "  --resume           reuse the (L, variant) results in DIR/partial of the same model,\n"
        "                     corpus and K\n"
        "  --threads T        compute threads (default: OMP_NUM_THREADS or all cores)\n"
        "  --quiet            no progress bar and no messages\n"
        "Lists: 1,2,4 or 1-16 (integers); rules and normalizers comma-separated.\n");
}

/* "a,b,c" into out[*n] pointing into the copy *buf (freed by the caller) */
static int split_list(const char *s, char **buf, const char ***out, int *n) {
    free(*buf);
    free((void *)*out);
    *buf = strdup(s);
    *out = calloc(strlen(s) + 1, sizeof **out);
    *n = 0;
    if (!*buf || !*out) return -1;
    for (char *p = strtok(*buf, ","); p; p = strtok(NULL, ",")) (*out)[(*n)++] = p;
    return *n ? 0 : -1;
}

int cmd_guidelines(int argc, char **argv) {
    al_guide_opts o = {0};
    al_error err = {0};
    int rc = 0, *ks = NULL, *Ls = NULL;
    char *rbuf = NULL, *nbuf = NULL;
    const char **rules = NULL, **norms = NULL;
    long n;
    for (int i = 1; i < argc && !rc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            goto out;
        } else if (!strcmp(a, "--resume")) {
            o.resume = 1;
            continue;
        } else if (!strcmp(a, "--quiet") || !strcmp(a, "-q")) {
            o.quiet = 1;
            continue;
        }
        if (!v) {
            rc = cli_usage_error("guidelines", "%s needs a value (or is unknown)", a);
            goto out;
        }
        i++;
        if (!strcmp(a, "--model"))
            o.model = v;
        else if (!strcmp(a, "--corpus"))
            o.corpus = v;
        else if (!strcmp(a, "--data"))
            o.data_path = v;
        else if (!strcmp(a, "--out"))
            o.out_dir = v;
        else if (!strcmp(a, "--reproduce"))
            o.reproduce_dir = v;
        else if (!strcmp(a, "--windows") || !strcmp(a, "--threads") ||
                 !strcmp(a, "--monitor-length") || !strcmp(a, "--monitor-n")) {
            long lo = !strcmp(a, "--monitor-length") ? -1 : 1;
            if (cli_parse_int(v, a, lo, 1 << 20, &n, &err)) goto usage_err;
            if (!strcmp(a, "--windows")) o.windows = (int)n;
            if (!strcmp(a, "--threads")) o.threads = (int)n;
            if (!strcmp(a, "--monitor-length")) o.monitor_length = (int)n;
            if (!strcmp(a, "--monitor-n")) o.monitor_n = (int)n;
        } else if (!strcmp(a, "--k")) {
            free(ks);
            ks = NULL;
            if (cli_parse_int_list(v, "--k", &ks, &o.n_k, &err)) goto usage_err;
            o.k = ks;
        } else if (!strcmp(a, "--lengths")) {
            free(Ls);
            Ls = NULL;
            if (cli_parse_int_list(v, "--lengths", &Ls, &o.n_lengths, &err)) goto usage_err;
            o.lengths = Ls;
        } else if (!strcmp(a, "--rules") || !strcmp(a, "--normalizers")) {
            int r = !strcmp(a, "--rules");
            int *cnt = r ? &o.n_rules : &o.n_normalizers;
            if (split_list(v, r ? &rbuf : &nbuf, r ? &rules : &norms, cnt)) {
                rc = cli_usage_error("guidelines", "%s: an empty list", a);
                goto out;
            }
            al_attn_variant probe = {0};
            al_norm nm;
            for (int k = 0; k < *cnt; k++)
                if (r ? al_attn_rule_parse(rules[k], &probe, &err)
                      : al_attn_norm_parse(norms[k], &nm, &err))
                    goto usage_err;
            if (r)
                o.rules = rules;
            else
                o.normalizers = norms;
        } else {
            rc = cli_usage_error("guidelines", "unknown option '%s'", a);
            goto out;
        }
    }
    if (!o.model) {
        rc = cli_usage_error("guidelines", "--model is required");
        goto out;
    }
    o.progress = !o.quiet && isatty(2);
    if (al_guidelines(&o, &err)) rc = cli_fail("guidelines", &err);
    goto out;
usage_err:
    rc = cli_usage_error("guidelines", "%s", err.msg);
out:
    free(ks);
    free(Ls);
    free(rbuf);
    free(nbuf);
    free(rules);
    free(norms);
    return rc;
}
