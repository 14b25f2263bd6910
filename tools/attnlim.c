/* attnlim.c: the command-line tool. main dispatches to one subcommand (tools/cmd_*.c). */
#include "cli.h"
#include "cpu.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *name;
    int (*fn)(int, char **);
    const char *summary;
} command;

static const command *commands(size_t *n) {
    const command all[] = {
        {"reproduce", cmd_reproduce,
         "run the paper's Algorithms 1-5 and write figures and a report"},
        {"diagnose", cmd_diagnose,
         "per-head health report of a model (entropy, N_s/N, Jacobian norm)"},
        {"guidelines", cmd_guidelines,
         "top-k attention and normalizers inside the forward, scored by NLL (the paper's advice)"},
        {"demo", cmd_demo,
         "normalizers side by side and Jacobian norms against T on synthetic logits"},
        {"normalize", cmd_normalize, "map logits to weights with a normalizer"},
        {"jacobian", cmd_jacobian, "spectral and Frobenius norms of a normalizer's Jacobian"},
        {"metrics", cmd_metrics, "METHOD sections 2-5 on weights and vectors"},
        {"ks", cmd_ks, "two-sample Kolmogorov-Smirnov test"},
        {"tokenize", cmd_tokenize, "GPT-2 byte-level BPE encode/decode"},
        {"capture", cmd_capture, "run a model and write q, k, v, logits, weights as .npy"},
        {"perplexity", cmd_perplexity, "perplexity of a model on a corpus"},
        {"embed", cmd_embed, "mean-pooled sentence embeddings (encoders)"},
        {"verify", cmd_verify, "check a GPT-2 checkpoint's tensors against the pinned hashes"},
        {"info", cmd_info, "a model's config, parameter count, dtypes, file hash"},
        {"make-model", cmd_make_model, "write a deterministic random GPT-2 checkpoint"},
        {"train", cmd_train, "train a small GPT-2 in C with a chosen attention normalizer"},
        {"study", cmd_study, "train one model per normalizer, diagnose each, report"},
        {"fetch", cmd_fetch, "fetch a known model (smollm2, minilm) into the cache"},
    };
    static command table[sizeof all / sizeof all[0]]; /* sized by the list: never overflows */
    size_t k = 0;
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (all[i].fn) table[k++] = all[i];
    *n = k;
    return table;
}

static void usage(FILE *f) {
    size_t n;
    const command *c = commands(&n);
    fprintf(f,
            "attnlim %s: the limits of normalization in attention (arXiv 2508.17821)\n\n"
            "usage: attnlim COMMAND [OPTIONS]   (attnlim COMMAND --help for its "
            "options)\n\ncommands:\n",
            al_version());
    for (size_t i = 0; i < n; i++) fprintf(f, "  %-12s %s\n", c[i].name, c[i].summary);
}

int main(int argc, char **argv) {
    al_set_network(1); /* the CLI fetches known models and pinned data files when missing */
    /* a file-size limit (ulimit -f) makes a write fail with EFBIG, which every writer reports
     * (naming its file) and cleans up after, instead of killing the process mid-write */
    signal(SIGXFSZ, SIG_IGN);
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("attnlim %s\n", al_version());
        printf("kernels: %s (this CPU supports %s; ATTNLIM_CPU=scalar|avx2|avx512 picks one)\n",
               al__cpu_name(al__cpu_level()), al__cpu_name(al__cpu_detect()));
        return 0;
    }
    al_error err = {0};
    if (al__cpu_check_env(&err)) {
        fprintf(stderr, "attnlim: %s\n", err.msg);
        return 2;
    }
    size_t n;
    const command *c = commands(&n);
    for (size_t i = 0; i < n; i++) {
        if (strcmp(argv[1], c[i].name)) continue;
        int ac = 0;
        char **owned = NULL, **av = cli_split_equals(argc - 1, argv + 1, &ac, &owned);
        if (!av) return c[i].fn(argc - 1, argv + 1);
        int rc = c[i].fn(ac, av);
        for (char **o = owned; *o; o++) free(*o);
        free(owned);
        free(av);
        return rc;
    }
    const char *names[16];
    for (size_t i = 0; i < n; i++) names[i] = c[i].name;
    const char *near = al_nearest(argv[1], names, (int)n);
    if (near)
        fprintf(stderr, "attnlim: unknown command '%s': did you mean '%s'?\n\n", argv[1], near);
    else
        fprintf(stderr, "attnlim: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
