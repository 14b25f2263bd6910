/* cmd_guidelines.c: attnlim guidelines: the paper's guidelines tested in the model's loss
 * (al_guidelines; docs/guidelines.md). */
#include "cli.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum {
    O_MODEL = 1,
    O_CORPUS,
    O_DATA,
    O_OUT,
    O_WINDOWS,
    O_LENGTHS,
    O_K,
    O_RULES,
    O_NORMALIZERS,
    O_REPRODUCE,
    O_MONITOR_LENGTH,
    O_MONITOR_N,
    O_RESUME,
    O_THREADS,
    O_QUIET
};
static const cli_opt opts[] = {
    {O_MODEL, "--model", "M",
     "a causal LM: GPT-2 (HF dir, .safetensors, llm.c .bin), a Llama-family\n"
     ".gguf, or a known name (gpt2, smollm2)"},
    {O_CORPUS, "--corpus", "C", "war-and-peace (default) or a text file"},
    {O_DATA, "--data", "DIR", "where the shared data files are"},
    {O_OUT, "--out", "DIR", "the output directory (default ./attnlim-guidelines)"},
    {O_WINDOWS, "--windows", "K", "windows 0..K-1 of every L (default 4)"},
    {O_LENGTHS, "--lengths", "LIST", "default 128,256,512,1024 (and 2048 when the context allows)"},
    {O_K, "--k", "LIST", "fixed k of topk:k (only k < L runs; default 1,2,4,...,512)"},
    {O_RULES, "--rules", "LIST",
     "default topk-frac:0.06,topk-sqrt:1,topk-sqrt:2,topk-log:2,topk-log:4"},
    {O_NORMALIZERS, "--normalizers", "LIST",
     "default sparsemax,entmax15,entmax:1.25,ssmax (dense, every layer)"},
    {O_REPRODUCE, "--reproduce", "DIR",
     "a reproduce output of the same model: its Algorithm 3 critical N"},
    {O_MONITOR_LENGTH, "--monitor-length", "L",
     "the per-layer monitoring at that L only (default: at every L;\n-1: off)"},
    {O_MONITOR_N, "--monitor-n", "N", "N of N_s/N in the monitoring (default 16)"},
    {O_RESUME, "--resume", NULL,
     "reuse the (L, variant) results in DIR/partial of the same model,\ncorpus and K"},
    {O_THREADS, "--threads", "T", "compute threads (default: OMP_NUM_THREADS or all cores)"},
    {O_QUIET, "--quiet", NULL, "no progress bar and no messages", "-q"},
    {CLI_O_ATTENTION_LAYERS, "--attention-layers", "LIST",
     "the layers every variant modifies (default all; recorded,\n--resume refuses a change)"},
    {CLI_O_ATTENTION_HEADS, "--attention-heads", "LIST",
     "the query heads every variant modifies (default all)"},
    CLI_MORE(CLI_FRAMING_OPTS),
    CLI_OPT_END,
};

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
        "");
    cli_print_options(f, opts, 21);
    fprintf(f, "Lists: 1,2,4 or 1-16 (integers); rules and normalizers comma-separated.\n");
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

/* Under an MPI launcher every rank parses the same arguments; only rank 0 prints. */
static int guidelines_main(int argc, char **argv, al_dist *d) {
    int root = al_dist_rank(d) == 0;
#define USAGE_ERROR(...) (root ? cli_usage_error("guidelines", __VA_ARGS__) : 2)
    al_guide_opts o = {0};
    al_error err = {0};
    int rc = 0, *ks = NULL, *Ls = NULL, wrap = 0;
    char *rbuf = NULL, *nbuf = NULL;
    const char **rules = NULL, **norms = NULL;
    int *sub[2] = {NULL, NULL}; /* --attention-layers, --attention-heads */
    al_attn_spec spec = {0};
    long n;
    cli_parser p = {"guidelines", argc, argv, opts, usage, 0, !root};
    const char *v;
    for (int id; (id = cli_next(&p, &v)) != CLI_END;) {
        if (id == CLI_STOP) {
            rc = p.status; /* 0 after --help */
            goto out;
        } else if (id == O_RESUME) {
            o.resume = 1;
        } else if (cli_framing_take(&p, id, &o.bos, &wrap)) {
            if ((rc = p.status)) goto out; /* 2 after a word other than on / off */
            if (wrap) {
                rc = USAGE_ERROR("--wrap / --no-wrap are for encoders; "
                                 "guidelines runs causal LMs (--bos / --no-bos)");
                goto out;
            }
        } else if (id == O_QUIET) {
            o.quiet = 1;
        } else if (CLI_IS_ATTN(id)) {
            if (cli_attn_arg(p.opt, v, &spec, sub, &err) < 0) goto usage_err;
            o.attn_layers = spec.layers, o.n_attn_layers = spec.n_layers;
            o.attn_heads = spec.heads, o.n_attn_heads = spec.n_heads;
        } else if (id == O_MODEL) {
            o.model = v;
        } else if (id == O_CORPUS) {
            o.corpus = v;
        } else if (id == O_DATA) {
            o.data_path = v;
        } else if (id == O_OUT) {
            o.out_dir = v;
        } else if (id == O_REPRODUCE) {
            o.reproduce_dir = v;
        } else if (id == O_WINDOWS || id == O_THREADS || id == O_MONITOR_LENGTH ||
                   id == O_MONITOR_N) {
            long lo = id == O_MONITOR_LENGTH ? -1 : 1;
            if (cli_parse_int(v, p.opt, lo, 1 << 20, &n, &err)) goto usage_err;
            if (id == O_WINDOWS) o.windows = (int)n;
            if (id == O_THREADS) o.threads = (int)n;
            if (id == O_MONITOR_LENGTH) o.monitor_length = (int)n;
            if (id == O_MONITOR_N) o.monitor_n = (int)n;
        } else if (id == O_K) {
            free(ks);
            ks = NULL;
            if (cli_parse_int_list(v, "--k", &ks, &o.n_k, &err)) goto usage_err;
            o.k = ks;
        } else if (id == O_LENGTHS) {
            free(Ls);
            Ls = NULL;
            if (cli_parse_int_list(v, "--lengths", &Ls, &o.n_lengths, &err)) goto usage_err;
            o.lengths = Ls;
        } else if (id == O_RULES || id == O_NORMALIZERS) {
            int r = id == O_RULES;
            int *cnt = r ? &o.n_rules : &o.n_normalizers;
            if (split_list(v, r ? &rbuf : &nbuf, r ? &rules : &norms, cnt)) {
                rc = USAGE_ERROR("%s: an empty list", p.opt);
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
        }
    }
    if (!o.model) {
        rc = USAGE_ERROR("--model is required");
        goto out;
    }
    o.progress = o.quiet ? 0 : isatty(2) ? 1 : 2; /* not a TTY: plain periodic lines */
    if (al_guidelines_dist(&o, d, &err)) rc = root ? cli_fail("guidelines", &err) : 1;
    goto out;
usage_err:
    rc = USAGE_ERROR("%s", err.msg);
out:
    free(ks);
    free(Ls);
    free(rbuf);
    free(nbuf);
    free(rules);
    free(norms);
    free(sub[0]);
    free(sub[1]);
    return rc;
#undef USAGE_ERROR
}

int cmd_guidelines(int argc, char **argv) {
    return cli_with_dist("guidelines", guidelines_main, argc, argv);
}
