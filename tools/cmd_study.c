/* cmd_study.c: attnlim study: one model per normalizer at the same budget, the paper's
 * diagnostics on each, and a report (src/train/study.c). */
#include "cli.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The integer options first: their ids (minus 1) index the ranges in cmd_study's ints[]. */
enum {
    O_STEPS = 1,
    O_WARMUP,
    O_LAYERS,
    O_HEADS,
    O_EMBD,
    O_CTX,
    O_BATCH,
    O_SEQ,
    O_EVAL_EVERY,
    O_WINDOWS,
    O_THREADS,
    N_INTS = O_THREADS,
    O_OUT,
    O_NORMALIZERS,
    O_SCALE,
    O_LR,
    O_SEED,
    O_CORPUS,
    O_TOKENIZER,
    O_CRIT_L,
    O_QUIET,
    O_JSON
};
static const cli_opt opts[] = {
    {O_OUT, "--out", "DIR", "the output directory (required)"},
    {O_NORMALIZERS, "--normalizers", "LIST",
     "(softmax,sparsemax,entmax15,entmax:1.3,ssmax,sa-softmax;\n"
     "ssmax: s learnable per head, ssmax-fixed[:S]: fixed)"},
    {O_SCALE, "--scale", "F", "multiply the steps by F (default 1: about an hour on 2 cores)"},
    {O_STEPS, "--steps", "N", "600"},
    {O_LR, "--lr", "X", "2e-3"},
    {O_WARMUP, "--warmup", "N", "60"},
    {O_LAYERS, "--layers", "L", "4"},
    {O_HEADS, "--heads", "H", "4"},
    {O_EMBD, "--embd", "C", "128"},
    {O_CTX, "--ctx", "N", "1024"},
    {O_BATCH, "--batch", "B", "2"},
    {O_SEQ, "--seq", "T", "the context"},
    {O_SEED, "--seed", "S", "1"},
    {O_CORPUS, "--corpus", "C", "war-and-peace (default) or a FILE"},
    {O_TOKENIZER, "--tokenizer", "bytes|gpt2", "bytes (default)"},
    {O_EVAL_EVERY, "--eval-every", "K", "50"},
    {O_WINDOWS, "--windows", "W", "2: held-out windows of each L for reproduce"},
    {O_CRIT_L, "--crit-L", "LIST", "128,256,512,1024"},
    {O_THREADS, "--threads", "N", "compute threads"},
    {O_QUIET, "--quiet", NULL, "no progress (a bar on a TTY, else plain lines)"},
    {O_JSON, "--json", NULL, "print a JSON summary"},
    CLI_OPT_END,
};

static void usage(FILE *f) {
    fprintf(f,
            "usage: attnlim study --out DIR [options]\n"
            "\n"
            "Trains one GPT-2-style model per normalizer with attnlim train's trainer at the same\n"
            "budget (model, context, steps, data order, seed) into DIR/runs/NAME, then runs\n"
            "attnlim reproduce --readings all and attnlim diagnose on each checkpoint (with its\n"
            "normalizer and tokenizer) over the corpus's held-out tail (DIR/heldout.txt), and\n"
            "from their results writes DIR/study.json, study.csv, figures/ and report.html:\n"
            "vanishing, N_crit / L under every reading, N_s/N, Jacobian and gradient norms, and\n"
            "for each of the paper's predictions what it expects for that\n"
            "normalizer and what was measured. Resumable: run it again to continue.\n"
            "\n");
    cli_print_options(f, opts, 22);
}

int cmd_study(int argc, char **argv) {
    al_study_opts o;
    al_study_defaults(&o);
    al_error err = {0};
    const char *norms = o.normalizers;
    double scale = 1;
    uint64_t seed = 1;
    int json = 0, quiet = 0, threads = 0, seq = 0;
    const struct {
        int *dst;
        long lo, hi;
    } ints[N_INTS] = {{&o.base.steps, 0, 1000000000},
                      {&o.base.warmup, 0, 1000000000},
                      {&o.base.n_layer, 1, 256},
                      {&o.base.n_head, 1, 1024},
                      {&o.base.n_embd, 1, 8192},
                      {&o.base.n_ctx, 2, 8192},
                      {&o.base.B, 1, 4096},
                      {&seq, 2, 8192},
                      {&o.base.eval_every, 0, 1000000000},
                      {&o.windows, 1, 100000},
                      {&threads, 0, 4096}};
    cli_parser p = {"study", argc, argv, opts, usage};
    const char *v;
    for (int id; (id = cli_next(&p, &v)) != CLI_END;) {
        long x;
        const char *a = p.opt;
        if (id == CLI_STOP) {
            return p.status;
        } else if (id == O_JSON) {
            json = 1;
        } else if (id == O_QUIET) {
            quiet = 1;
        } else if (id <= N_INTS) {
            if (cli_parse_int(v, a, ints[id - 1].lo, ints[id - 1].hi, &x, &err))
                return cli_usage_error("study", "%s", err.msg);
            *ints[id - 1].dst = (int)x;
        } else if (id == O_OUT) {
            o.out = v;
        } else if (id == O_NORMALIZERS) {
            norms = v;
        } else if (id == O_CORPUS) {
            o.base.corpus = v;
        } else if (id == O_TOKENIZER) {
            o.base.tokenizer = v;
        } else if (id == O_SEED) {
            if (cli_parse_u64(v, a, &seed, &err)) return cli_usage_error("study", "%s", err.msg);
        } else if (id == O_SCALE || id == O_LR) {
            double d;
            if (cli_parse_double(v, a, &d, &err)) return cli_usage_error("study", "%s", err.msg);
            if (!(d > 0)) return cli_usage_error("study", "%s must be > 0", a);
            *(id == O_SCALE ? &scale : &o.base.lr) = d;
        } else if (id == O_CRIT_L) {
            int *L, n;
            if (cli_parse_int_list(v, a, &L, &n, &err))
                return cli_usage_error("study", "%s", err.msg);
            if (n > AL_STUDY_MAX_L) {
                free(L);
                return cli_usage_error("study", "--crit-L: at most %d lengths", AL_STUDY_MAX_L);
            }
            memcpy(o.crit_L, L, (size_t)n * sizeof *L);
            o.n_crit_L = n;
            free(L);
        }
    }
    if (!o.out) return cli_usage_error("study", "--out DIR is required");
    int n_norms = 0;
    if (al_study_normalizers(norms, &n_norms, &err)) return cli_usage_error("study", "%s", err.msg);
    o.normalizers = norms;
    o.base.seed = seed;
    o.base.steps = (int)ceil(o.base.steps * scale);
    o.base.T = seq ? seq : o.base.n_ctx;
    if (o.base.T > o.base.n_ctx)
        return cli_usage_error("study", "--seq %d is longer than --ctx %d", o.base.T, o.base.n_ctx);
    if (o.base.n_embd % o.base.n_head)
        return cli_usage_error("study", "--embd is not a multiple of --heads");
    int kept = 0; /* lengths past the window are dropped (a smaller --seq) */
    for (int k = 0; k < o.n_crit_L; k++)
        if (o.crit_L[k] <= o.base.T) o.crit_L[kept++] = o.crit_L[k];
    o.n_crit_L = kept;
    if (threads) al_set_threads(threads);
    o.progress = quiet ? 0 : isatty(2) ? 1 : 2; /* not a TTY: plain periodic lines */
    if (al_study(&o, &err)) return cli_fail("study", &err);
    if (json) {
        cJSON *j = cJSON_CreateObject();
        cJSON_AddStringToObject(j, "out", o.out);
        cJSON_AddNumberToObject(j, "runs", n_norms);
        cJSON_AddNumberToObject(j, "steps", o.base.steps);
        cli_print_json(j, 0);
    } else {
        printf("%s: %d models; report %s/report.html\n", o.out, n_norms, o.out);
    }
    return 0;
}
