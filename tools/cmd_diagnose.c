/* cmd_diagnose.c: attnlim diagnose: per-head health of a model's attention (al_diagnose);
 * docs/diagnose.md says what each flag means, its threshold, why and what to do. */
#include "cli.h"

#include <stdlib.h>
#include <string.h>

enum {
    O_MODEL = 1,
    O_CORPUS,
    O_TEXT,
    O_DATA,
    O_LENGTH,
    O_WINDOW,
    O_LAYERS,
    O_HEADS,
    O_NORMALIZER,
    O_OUT,
    O_FORCE,
    O_THREADS,
    O_JSON
};
static const cli_opt opts[] = {
    {O_MODEL, "--model", "M", "a checkpoint, a known name or an attention dump directory"},
    {O_CORPUS, "--corpus", "C", "war-and-peace (default) or a text file"},
    {O_TEXT, "--text", "PROMPT", "the prompt as the corpus"},
    {O_DATA, "--data", "DIR", "where the shared data files are (tokenizer, corpus)"},
    {O_LENGTH, "--length", "L", "the window length"},
    {O_WINDOW, "--window", "K", "the window (default 0)"},
    {O_LAYERS, "--layers", "LIST", "only these layers (as capture takes them; default all)"},
    {O_HEADS, "--heads", "LIST", "only these heads (default all)"},
    {O_NORMALIZER, "--normalizer", "M", "re-normalise the captured logits"},
    {O_OUT, "--out", "DIR",
     "also write DIR/diagnose.json, diagnose.md, diagnose.html (the per-head\n"
     "explorer) and diagnose_flags.svg/.png (the flags, layer x head); DIR new\n"
     "or empty, it appears in one rename"},
    {O_FORCE, "--force", NULL, "replace an earlier diagnose output in DIR, atomically"},
    {O_THREADS, "--threads", "T", "threads over heads (default: OMP_NUM_THREADS or all cores)"},
    {O_JSON, "--json", NULL,
     "print the JSON report on stdout (default: a summary, a line per flag)"},
    CLI_TEXT("Under mpirun (a build with MPI) the heads are shared out over the ranks; rank 0 "
             "reports.\n"
             "These change the model's attention itself (recorded in the report's "
             "model.attention):"),
    CLI_MORE(CLI_ATTN_OPTS),
    CLI_TEXT("How the corpus becomes the window (diagnose.json \"framing\"; docs/reproduce.md):"),
    CLI_MORE(CLI_FRAMING_OPTS),
    CLI_OPT_END,
};

static void usage(FILE *f) {
    fprintf(
        f,
        "usage: attnlim diagnose [--model PATH|NAME] [--corpus war-and-peace|FILE | --text "
        "PROMPT]\n"
        "                        [--length L]\n"
        "                        [--window K] [--layers 0,3,5-7|all] [--heads 0-3|all]\n"
        "                        [--normalizer M] [--out DIR [--force]] [--threads T] [--json]\n"
        "                        [--attention R] [--attention-normalizer M]\n"
        "                        [--attention-layers LIST] [--attention-heads LIST]\n"
        "\n"
        "Per-head health of the attention on one window (default: window 0, L = min(1024, "
        "context)):\n"
        "mean max weight, mean entropy / log n, mean weight on token 0, N_s/N at N = 4, 16, 64\n"
        "(N < L), and the mean exact Jacobian spectral norm at T = 1. Flags heads whose attention\n"
        "has collapsed (max weight > 0.9 or H/log n < 0.1), vanishes (H/log n > 0.95: near\n"
        "uniform) or sinks into token 0 (mean weight > 0.5); each flag is printed with the value\n"
        "that raised it. What the flags mean and what to do about them: docs/diagnose.md.\n"
        "A normalizer whose weights do not sum to 1 (sa-softmax) gets its numbers but no flags.\n"
        "--text PROMPT diagnoses the prompt itself: L defaults to its number of tokens.\n"
        "--model DUMPDIR reads an attention dump (docs/dumps.md): its T tokens, window 0,\n"
        "L = min(1024, T) by default (any L <= T when causal; L = T when bidirectional).\n"
        "\n");
    cli_print_options(f, opts, 14);
}

static int own_entry(const char *name, int is_dir) {
    static const char *own[] = {"diagnose.json", "diagnose.md", "diagnose.html",
                                "diagnose_flags.svg", "diagnose_flags.png"};
    for (size_t i = 0; !is_dir && i < sizeof own / sizeof *own; i++)
        if (!strcmp(name, own[i])) return 1;
    return 0;
}

/* Rank 0 with --out: the reports go to a temporary directory beside DIR, published in one
 * rename (al_outdir): DIR new or empty, or with --force its own earlier output. */
static int prepare_out(al_diag_opts *o, int force, al_outdir **od, al_error *err) {
    *od = NULL;
    if (!o->out_dir) return 0;
    al_outdir *d = al_outdir_open(o->out_dir, "diagnose", own_entry, force, err);
    int rc = d ? al_outdir_make(d, err) : (int)err->code;
    if (rc) {
        al_outdir_free(d);
        return rc;
    }
    o->out_dir = al_outdir_path(d);
    *od = d;
    return 0;
}

static double num(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : 0;
}
static const char *str(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : "?";
}

static const char *measure_name(const char *m) {
    return !strcmp(m, "mean_max_weight")           ? "mean max weight"
           : !strcmp(m, "mean_entropy_over_log_n") ? "mean H / log n"
           : !strcmp(m, "mean_weight_on_token0")   ? "mean weight on token 0"
                                                   : m;
}

/* The text report: what was diagnosed, the counts, then every flagged head with its values. */
static void print_text(const cJSON *r) {
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(r, "model");
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(r, "summary");
    printf("model %s (%s, %d layers x %d heads), corpus %s, window %d, L = %d, normalizer %s",
           str(m, "name"), str(m, "family"), (int)num(m, "n_layer"), (int)num(m, "n_head"),
           str(r, "corpus"), (int)num(r, "window"), (int)num(r, "L"), str(r, "normalizer"));
    const cJSON *fr = cJSON_GetObjectItemCaseSensitive(r, "framing"); /* absent: a dump */
    const cJSON *bos = cJSON_GetObjectItemCaseSensitive(fr, "bos");
    int used = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(bos, "used"));
    int dflt = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(bos, "default"));
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(fr, "wrap")))
        printf(", window [CLS] + %d tokens + [SEP]", (int)num(r, "L") - 2);
    else if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(fr, "encoder")))
        printf(", bare window (--no-wrap)");
    else if (bos)
        printf(", %s%s", used ? "BOS first" : "no BOS",
               used == dflt ? " (the model's default)"
               : used       ? " (--bos; the model's default: none)"
                            : " (--no-bos; the model's default: BOS)");
    printf("\n");
    printf("%d of %d heads diagnosed: %d collapsed, %d vanishing, %d sink\n", (int)num(s, "heads"),
           (int)num(s, "heads_in_model"), (int)num(s, "collapsed"), (int)num(s, "vanishing"),
           (int)num(s, "sink"));
    const cJSON *refused = cJSON_GetObjectItemCaseSensitive(r, "flags_refused");
    if (cJSON_IsString(refused)) printf("no flags: %s\n", refused->valuestring);
    const cJSON *h;
    cJSON_ArrayForEach(h, cJSON_GetObjectItemCaseSensitive(r, "heads")) {
        const cJSON *why = cJSON_GetObjectItemCaseSensitive(h, "why");
        if (cJSON_GetArraySize(why) == 0) continue;
        printf("layer %d head %d:", (int)num(h, "layer"), (int)num(h, "head"));
        const cJSON *w;
        const char *last = NULL;
        cJSON_ArrayForEach(w, why) { /* a flag raised by two rules: both values in its parens */
            const char *f = str(w, "flag");
            if (last && !strcmp(last, f))
                printf("; ");
            else
                printf("%s %s (", last ? ")," : "", f);
            printf("%s = %.3g %s", measure_name(str(w, "measure")), num(w, "value"),
                   str(w, "rule"));
            last = f;
        }
        printf(")\n");
    }
}

/* "all" or a list of indices (ranges as "5-7"); *v NULL for all. */
static int parse_list(const char *s, const char *what, int **v, int *n, al_error *err) {
    *v = NULL, *n = 0;
    if (!strcmp(s, "all")) return 0;
    return cli_parse_int_list(s, what, v, n, err);
}

/* Under an MPI launcher every rank parses the same arguments; only rank 0 prints. */
static int diagnose_main(int argc, char **argv, al_dist *d, int *att_lists[2]) {
    int root = al_dist_rank(d) == 0, rc = 0;
#define USAGE_ERROR(...) (root ? cli_usage_error("diagnose", __VA_ARGS__) : 2)
    al_diag_opts o = {.corpus = NULL}; /* NULL: war-and-peace (a dump takes none) */
    al_error err = {0};
    int json = 0, force = 0, *layers = NULL, *heads = NULL;
    cli_parser p = {"diagnose", argc, argv, opts, usage, 0, !root};
    const char *v;
    for (int id; !rc && (id = cli_next(&p, &v)) != CLI_END;) {
        long n;
        if (id == CLI_STOP) {
            rc = p.status; /* 0 after --help */
            goto out;
        } else if (CLI_IS_ATTN(id)) {
            if (cli_attn_arg(p.opt, v, &o.attention, att_lists, &err) < 0)
                rc = USAGE_ERROR("%s", err.msg);
        } else if (cli_framing_take(&p, id, &o.bos, &o.wrap)) {
            rc = p.status; /* 2 after a word other than on / off */
        } else if (id == O_JSON) {
            json = 1;
        } else if (id == O_FORCE) {
            force = 1;
        } else if (id == O_MODEL) {
            o.model = v;
        } else if (id == O_CORPUS) {
            o.corpus = v;
        } else if (id == O_TEXT) {
            if (!(o.corpus = cli_text_corpus(v))) rc = USAGE_ERROR("--text: too many prompts");
        } else if (id == O_DATA) {
            o.data_path = v;
        } else if (id == O_OUT) {
            o.out_dir = v;
        } else if (id == O_NORMALIZER) {
            o.normalizer = v;
        } else if (id == O_LAYERS || id == O_HEADS) {
            int **dst = id == O_LAYERS ? &layers : &heads;
            free(*dst);
            if (parse_list(v, p.opt, dst, id == O_LAYERS ? &o.n_layers : &o.n_heads, &err))
                rc = USAGE_ERROR("%s", err.msg);
        } else if (id == O_LENGTH) {
            if (cli_parse_int(v, "--length", 2, 1 << 20, &n, &err)) rc = USAGE_ERROR("%s", err.msg);
            o.length = (int)n;
        } else if (id == O_WINDOW) {
            if (cli_parse_int(v, "--window", 0, 1 << 30, &n, &err)) rc = USAGE_ERROR("%s", err.msg);
            o.window = (int)n;
        } else if (id == O_THREADS) {
            if (cli_parse_int(v, "--threads", 1, 1024, &n, &err)) rc = USAGE_ERROR("%s", err.msg);
            o.threads = (int)n;
        }
    }
    if (rc) goto out;
    o.layers = layers, o.heads = heads;
    char picked[64];
    if (!o.model) { /* on every rank (al_diagnose_dist checks that they opened the same) */
        if (al_dist_agree(d, al_repro_pick_model(picked, sizeof picked, &err), &err)) {
            rc = root ? cli_fail("diagnose", &err) : 1;
            goto out;
        }
        o.model = picked;
    }
    char *txt = NULL;
    al_outdir *od = NULL;
    if (al_dist_agree(d, root ? prepare_out(&o, force, &od, &err) : 0, &err)) {
        rc = root ? cli_fail("diagnose", &err) : 1;
        goto out;
    }
    cli_catch_interrupt();
    rc = al_diagnose_dist(&o, d, &txt, &err);
    if (rc) {
        al_outdir_free(od);
        rc = root ? cli_fail_or_interrupted("diagnose", &err, 0, 0) : 1;
        goto out;
    }
    if (od) rc = al_outdir_publish(od, &err);
    al_outdir_free(od);
    if (rc) {
        free(txt);
        rc = root ? cli_fail("diagnose", &err) : 1;
        goto out;
    }
    if (txt && json) {
        printf("%s\n", txt);
    } else if (txt) {
        cJSON *r = cJSON_Parse(txt);
        if (r) print_text(r);
        cJSON_Delete(r);
    }
    free(txt);
out:
    free(layers);
    free(heads);
    return rc;
#undef USAGE_ERROR
}

static int diagnose_body(int argc, char **argv, al_dist *d) {
    int *att_lists[2] = {NULL, NULL}; /* --attention-layers, --attention-heads */
    int rc = diagnose_main(argc, argv, d, att_lists);
    free(att_lists[0]);
    free(att_lists[1]);
    return rc;
}

int cmd_diagnose(int argc, char **argv) {
    return cli_with_dist("diagnose", diagnose_body, argc, argv);
}
