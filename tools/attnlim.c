/* attnlim.c: the command-line tool. main dispatches to one subcommand (tools/cmd_*.c). */
#include "cli.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    const char *name;
    int (*fn)(int, char **);
    const char *summary;
} command;

/* Every array of commands (the table, the names offered for a typo) holds this many. */
enum { MAX_COMMANDS = 32 };

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
    _Static_assert(sizeof all / sizeof all[0] <= MAX_COMMANDS, "raise MAX_COMMANDS");
    static command table[MAX_COMMANDS];
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

/* ---- terminal output: every byte the CLI prints to stderr (and to stdout when it is a
 * terminal) passes al__term_text, so that a model name, path or token holding ESC, CSI or other
 * control sequences, or invalid UTF-8, is shown as \xNN / \u00NN instead of acting on the
 * terminal. A UTF-8 sequence split across two writes is held back until it is complete. */
typedef struct term_sink {
    int fd;
    unsigned char pend[4];
    size_t n_pend;
} term_sink;

static void put_fd(int fd, const char *s, size_t n) {
    for (size_t off = 0; off < n;) {
        ssize_t w = write(fd, s + off, n - off);
        if (w <= 0) return;
        off += (size_t)w;
    }
}

/* bytes at the end of s[n] that start a UTF-8 sequence not yet complete (0 .. 3) */
static size_t open_tail(const unsigned char *s, size_t n) {
    for (size_t back = 1; back <= 3 && back <= n; back++) {
        unsigned c = s[n - back];
        if ((c & 0xC0) == 0x80) continue;
        size_t len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
        return len > back ? back : 0;
    }
    return 0;
}

static void sink_text(term_sink *t, const unsigned char *s, size_t n) {
    char out[4096 * 4 + 16];
    while (n) {
        size_t chunk = n > 4096 ? 4096 : n;
        if (chunk < n) chunk -= open_tail(s, chunk); /* never cut a sequence in two */
        if (!chunk) chunk = n < 4 ? n : 4;
        put_fd(t->fd, out, al_term_text((const char *)s, chunk, out, sizeof out));
        s += chunk, n -= chunk;
    }
}

static ssize_t term_write(void *cookie, const char *buf, size_t n) {
    term_sink *t = cookie;
    const unsigned char *u = (const unsigned char *)buf;
    size_t used = 0;
    if (t->n_pend) { /* complete the held-back sequence first */
        unsigned char tmp[8];
        size_t k = t->n_pend;
        memcpy(tmp, t->pend, k);
        while (k < sizeof tmp && used < n && (u[used] & 0xC0) == 0x80 && k < 4)
            tmp[k++] = u[used++];
        t->n_pend = 0;
        sink_text(t, tmp, k);
    }
    size_t rest = n - used, hold = open_tail(u + used, rest);
    sink_text(t, u + used, rest - hold);
    memcpy(t->pend, u + n - hold, hold);
    t->n_pend = hold;
    return (ssize_t)n;
}

static int term_close(void *cookie) {
    term_sink *t = cookie;
    if (t->n_pend) sink_text(t, t->pend, t->n_pend); /* a cut sequence: shown as \xNN */
    t->n_pend = 0;
    return 0;
}

/* stderr always; stdout when it is a terminal, and also when it is not, except for tokenize
 * (whose decoded text is the user's data, kept byte for byte in a pipe) */
static void filter_terminal_output(const char *cmd) {
    static term_sink err_sink = {.fd = 2}, out_sink = {.fd = 1};
    cookie_io_functions_t io = {.write = term_write, .close = term_close};
    FILE *e = fopencookie(&err_sink, "w", io);
    if (e) {
        setvbuf(e, NULL, _IOLBF, 4096);
        stderr = e;
    }
    if (isatty(1) || !cmd || strcmp(cmd, "tokenize") != 0) {
        FILE *o = fopencookie(&out_sink, "w", io);
        if (o) {
            setvbuf(o, NULL, _IOLBF, 4096);
            stdout = o;
        }
    }
}

/* OpenMP threads that spin at a barrier while their partner is descheduled take the core from
 * it on a shared machine (docs/benchmarks.md): passive waiting unless the user chose a policy.
 * libgomp reads OMP_WAIT_POLICY once, in its initializer, before main; a setenv from the
 * executable's .preinit_array was measured to come too late (libgomp 12 still spun: GOMP_SPINCOUNT
 * 300000 under OMP_DISPLAY_ENV=verbose). So, when no policy is set, the CLI sets PASSIVE and
 * executes itself again, once (the variable is then set); if that exec fails it runs on with
 * libgomp's default. Not under valgrind, which would not follow the exec (its preload library
 * is in LD_PRELOAD; scripts/valgrind.sh sets the policy itself). */
static void passive_wait_default(char **argv) {
    if (getenv("OMP_WAIT_POLICY")) return;
    const char *pre = getenv("LD_PRELOAD");
    if (pre && strstr(pre, "vgpreload")) return;
    if (setenv("OMP_WAIT_POLICY", "PASSIVE", 0)) return;
    execv("/proc/self/exe", argv);
}

int main(int argc, char **argv) {
    passive_wait_default(argv);
    filter_terminal_output(argc > 1 ? argv[1] : NULL);
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
               al_cpu_kernels(0), al_cpu_kernels(1));
        return 0;
    }
    al_error err = {0};
    if (al_cpu_check_env(&err)) {
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
    const char *names[MAX_COMMANDS];
    for (size_t i = 0; i < n; i++) names[i] = c[i].name;
    const char *near = al_nearest(argv[1], names, (int)n);
    if (near)
        fprintf(stderr, "attnlim: unknown command '%s': did you mean '%s'?\n\n", argv[1], near);
    else
        fprintf(stderr, "attnlim: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
