/* cmd_reproduce.c: attnlim reproduce: the paper's experiments end to end (al_reproduce). */
#include "cli.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <string.h>
#include <unistd.h>

enum {
    O_MODEL = 1,
    O_CORPUS,
    O_TEXT,
    O_DATA,
    O_WINDOWS,
    O_VECTORS,
    O_DISTANCE,
    O_EXPECTATION,
    O_EXACT_MAX,
    O_TEMPERATURE_SCALE,
    O_DIRECTIONS,
    O_READINGS,
    O_NORMALIZER,
    O_QUICK,
    O_OUT,
    O_FORCE,
    O_RESUME,
    O_LENGTHS,
    O_LONG_LENGTH,
    O_TOP_N,
    O_CRITICAL_N,
    O_SEPARABILITY_N,
    O_TEMPERATURES,
    O_EPS,
    O_SEED,
    O_MC,
    O_EXPERIMENTS,
    O_RANDOM_WEIGHTS,
    O_THREADS,
    O_QUIET,
    O_JSON,
    O_LAYERS,
    O_HEADS
};
static const cli_opt opts[] = {
    {O_MODEL, "--model", "M",
     "a checkpoint (HF GPT-2 dir or .safetensors, llm.c .bin, .gguf) or a\n"
     "known name (gpt2, smollm2, minilm); default: the best available\n"
     "(GPT-2 124M if its weights are in the cache, else smollm2); or an\n"
     "attention dump directory (docs/dumps.md: its tokens, window 0)"},
    {O_CORPUS, "--corpus", "C", "war-and-peace (default) or a text file"},
    {O_TEXT, "--text", "PROMPT", "the prompt as the corpus (give --lengths that fit its tokens)"},
    {O_DATA, "--data", "DIR", "where the shared data files are (tokenizer, corpus)"},
    {O_WINDOWS, "--windows", "K|all",
     "windows 0..K-1 of every L (default 1); all: every window of the\n"
     "corpus at the longest L (K = tokens / L); per-head values are means"},
    {O_VECTORS, "--vectors", "V",
     "value (default) | key | hidden | residual | embedding  [reading:\n"
     "x_j; residual: the layer input before its first norm]"},
    {O_DISTANCE, "--distance", "D",
     "sum-of-norms (default) | norm-of-sum | sum-vector  [reading:\n"
     "dtilde; docs/readings.md]"},
    {O_EXPECTATION, "--expectation", "X",
     "analytic (default) | mc (needs --mc S) | exact (C(L, N) <= the cap)\n"
     "[reading: the random-selection E of Algorithms 1-3]"},
    {O_EXACT_MAX, "--exact-max", "C",
     "the cap on C(n, N) subsets per row for exact (default 10000)"},
    {O_TEMPERATURE_SCALE, "--temperature-scale", "S",
     "scaled (default: T on q.k/sqrt(d_head)) | raw (T on q.k, the\n"
     "paper's axis)  [reading: Algorithm 5]"},
    {O_DIRECTIONS, "--directions", "D",
     "shared (default: one v per row) | fresh (a new v per T, eps, head, row,\n"
     "as the paper's Algorithm 5)  [reading]"},
    {O_READINGS, "--readings", "all|LIST",
     "every claim under each reading too, on the same forward passes:\n"
     "all = each alternative one at a time plus the cross product\n"
     "vectors x distance x expectation for the critical N; LIST =\n"
     "';'-separated AXIS=VALUE[,AXIS=VALUE] (e.g. 'distance=norm-of-sum;\n"
     "vectors=key'); writes readings.json, readings.csv, readings/"},
    {O_NORMALIZER, "--normalizer", "M",
     "re-normalise the model's logits: softmax, sparsemax, entmax15,\n"
     "entmax, ssmax, sa-softmax, sa-softmax-norm (default: the model's\n"
     "own softmax weights)"},
    {O_QUICK, "--quick", NULL, "small grids for tiny test models (L 16,32,64; 9 temperatures)"},
    CLI_TEXT("The model's attention itself can be changed (the analyses then read the modified\n"
             "model's weights; recorded in results.json's model.attention; --resume refuses a "
             "change):"),
    CLI_MORE(CLI_ATTN_OPTS),
    {O_OUT, "--out", "DIR", "output directory"},
    {O_FORCE, "--force", NULL,
     "replace an earlier reproduce output in DIR, atomically (the new\n"
     "one is written beside it and exchanged in one rename); without\n"
     "it (or --resume) a DIR holding files is refused, and a DIR\n"
     "holding anything reproduce does not write always is"},
    {O_RESUME, "--resume", NULL,
     "reuse finished (window, L) results in DIR/partial whose options match\n"
     "(refused, naming them, if the model, corpus, vectors, normalizer,\n"
     "seed, --mc, temperatures or eps differ; reports reused/computed)"},
    {O_LENGTHS, "--lengths", "LIST", "Algorithms 1 and 3 (default 32,64,128,256,512,1024)"},
    {O_LONG_LENGTH, "--long-length", "L",
     "the window of the vanishing study and Algorithms 2, 4, 5\n"
     "(default min(1024, context))"},
    {O_TOP_N, "--top-n", "LIST", "Algorithm 2 (default 1,5,10,20,100)"},
    {O_CRITICAL_N, "--critical-n", "LIST",
     "Algorithm 3 (default 1-16,18-32 step 2,36-64 step 4,...,256)"},
    {O_SEPARABILITY_N, "--separability-n", "LIST", "Algorithm 4 (default 1,2,4,...,128)"},
    {O_TEMPERATURES, "--temperatures", "LIST",
     "Algorithm 5 (default 25 log-spaced over [1e-3, 1e1])"},
    {O_EPS, "--eps", "LIST", "Algorithm 5 (default 1e-3,1e-1,10)"},
    {O_SEED, "--seed", "S", "Algorithm 5 directions and Monte-Carlo E (default 1234)"},
    {O_MC, "--mc", "S", "Monte-Carlo samples for E (default 0 = off)"},
    {O_EXPERIMENTS, "--experiments", "LIST",
     "any of vanishing,alg1,alg2,alg3,alg4,alg5 (default all)"},
    {O_LAYERS, "--layers", "SET",
     "only the heads of these layers are analysed (0,3,5-7 or all, the\n"
     "default; as capture and diagnose take them): the others are NaN in\n"
     "every array and out of the verdicts; results.json and the report say which"},
    {O_HEADS, "--heads", "SET", "only these heads of each layer (0-3 or all, the default)"},
    CLI_TEXT("How the corpus becomes windows (results.json manifest.framing; docs/reproduce.md):"),
    CLI_MORE(CLI_FRAMING_OPTS),
    {O_RANDOM_WEIGHTS, "--random-weights", "yes|no|auto",
     "say whether the model has random weights (default auto)"},
    {O_THREADS, "--threads", "T", "threads over heads (default: OMP_NUM_THREADS or all cores)"},
    {O_QUIET, "--quiet", NULL,
     "no progress and no messages (a bar on a TTY, else a plain line\n"
     "every 10 s: $ATTNLIM_PROGRESS_INTERVAL)",
     "-q"},
    CLI_TEXT("Ctrl-C stops at the next layer: the jobs finished are kept; rerun with --resume."),
    {O_JSON, "--json", NULL, "print {\"out\", \"verdicts\"} on stdout at the end"},
    CLI_OPT_END,
};

static void usage(FILE *f) {
    fprintf(f, "usage: attnlim reproduce [--model PATH|NAME] [--corpus war-and-peace|FILE] [--out "
               "DIR] [options]\n"
               "\n"
               "Runs the paper's experiments (METHOD sections 2-6) on a model and a corpus: "
               "vanishing\n"
               "attention, Algorithms 1-5. Writes results.json, CSVs, NPYs, figures (SVG + PNG),\n"
               "report.md and report.html into DIR (default ./attnlim-results).\n"
               "\n");
    cli_print_options(f, opts, 22);
    fprintf(f,
            "Several processes, on one machine or many (a build with MPI):\n"
            "  mpirun -np N [--host a,b] attnlim reproduce ...  every rank runs the forwards and "
            "the\n"
            "  heads it owns (head h: rank h %% N, over --threads threads); rank 0 writes DIR\n"
            "Lists are like 1,5,10 or 1-16,18 (integers) and 0.001,0.1,10 (numbers).\n");
}

static int parse_experiments(const char *s, unsigned *out, al_error *err) {
    static const char *const names[6] = {"vanishing", "alg1", "alg2", "alg3", "alg4", "alg5"};
    *out = 0;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", s);
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        int found = 0;
        for (int i = 0; i < 6; i++)
            if (!strcmp(tok, names[i])) *out |= 1u << i, found = 1;
        if (!strcmp(tok, "all")) *out = AL_EXP_ALL, found = 1;
        if (!found) {
            snprintf(
                err->msg, sizeof err->msg,
                "--experiments: '%s' is not one of vanishing, alg1, alg2, alg3, alg4, alg5, all",
                tok);
            err->code = AL_E_INVALID;
            return AL_E_INVALID;
        }
    }
    return 0;
}

/* Under an MPI launcher every rank parses the same arguments; only rank 0 prints. */
static int reproduce_main(int argc, char **argv, al_dist *d) {
    int root = al_dist_rank(d) == 0;
#define USAGE_ERROR(...) (root ? cli_usage_error("reproduce", __VA_ARGS__) : 2)
    al_repro_opts o;
    al_repro_defaults(&o);
    al_error err = {0};
    int json = 0, rc = 0, force = 0;
    al_outdir *od = NULL; /* --force: the temporary output that replaces DIR */
    const char *out_dir = NULL;
    int *lists[4] = {NULL, NULL, NULL, NULL}, *att_lists[2] = {NULL, NULL};
    int *sel[2] = {NULL, NULL}; /* --layers, --heads */
    double *dl[2] = {NULL, NULL};
    cli_parser p = {"reproduce", argc, argv, opts, usage, 0, !root};
    const char *v;
    for (int id; (id = cli_next(&p, &v)) != CLI_END;) {
        const char *a = p.opt;
        long n;
        if (id == CLI_STOP) {
            rc = p.status; /* 0 after --help */
            goto out;
        } else if (id == O_FORCE) {
            force = 1;
        } else if (id == O_MODEL) {
            o.model = v;
        } else if (id == O_CORPUS) {
            o.corpus = v;
        } else if (id == O_TEXT) { /* a prompt: --lengths must fit its tokens */
            if (!(o.corpus = cli_text_corpus(v))) rc = USAGE_ERROR("--text: too many prompts");
        } else if (id == O_DATA) {
            o.data_path = v;
        } else if (id == O_OUT) {
            o.out_dir = v;
        } else if (id == O_WINDOWS) {
            if (!strcmp(v, "all"))
                o.windows = AL_WINDOWS_ALL;
            else if (cli_parse_int(v, "--windows", 1, 100000, &n, &err))
                goto usage_err;
            else
                o.windows = (int)n;
        } else if (id == O_VECTORS) {
            if (al_vectors_parse(v, &o.vectors, &err)) goto usage_err;
        } else if (id == O_DISTANCE) {
            if (al_distance_parse(v, &o.distance, &err)) goto usage_err;
        } else if (id == O_EXPECTATION) {
            if (al_expect_parse(v, &o.expectation, &err)) goto usage_err;
        } else if (id == O_EXACT_MAX) {
            if (cli_parse_int(v, "--exact-max", 1, AL_EXACT_MAX_LIMIT, &n, &err)) goto usage_err;
            o.exact_max = n;
        } else if (id == O_TEMPERATURE_SCALE) {
            if (strcmp(v, "scaled") && strcmp(v, "raw")) {
                rc = USAGE_ERROR("--temperature-scale: '%s' is not scaled or raw", v);
                goto out;
            }
            o.temperature_raw = !strcmp(v, "raw");
        } else if (id == O_DIRECTIONS) {
            if (strcmp(v, "shared") && strcmp(v, "fresh")) {
                rc = USAGE_ERROR("--directions: '%s' is not shared or fresh", v);
                goto out;
            }
            o.fresh_directions = !strcmp(v, "fresh");
        } else if (id == O_READINGS) {
            o.readings = v;
        } else if (id == O_NORMALIZER) {
            o.normalizer = v;
        } else if (id == O_QUICK) {
            o.quick = 1;
        } else if (id == O_RESUME) {
            o.resume = 1;
        } else if (id == O_QUIET) {
            o.quiet = 1;
        } else if (id == O_JSON) {
            json = 1;
        } else if (id >= O_LENGTHS && id <= O_SEPARABILITY_N && id != O_LONG_LENGTH) {
            int k = id == O_LENGTHS ? 0 : id - O_TOP_N + 1; /* lists[k] */
            int *cnt[4] = {&o.n_lengths, &o.n_top_n, &o.n_critical_n, &o.n_separability_n};
            const int **dst[4] = {&o.lengths, &o.top_n, &o.critical_n, &o.separability_n};
            free(lists[k]);
            lists[k] = NULL;
            if (cli_parse_int_list(v, a, &lists[k], cnt[k], &err)) goto usage_err;
            *dst[k] = lists[k];
        } else if (id == O_TEMPERATURES || id == O_EPS) {
            int k = id == O_EPS;
            free(dl[k]);
            dl[k] = NULL;
            if (cli_parse_double_list(v, a, &dl[k], k ? &o.n_eps : &o.n_temperatures, &err))
                goto usage_err;
            *(k ? &o.eps : &o.temperatures) = dl[k];
        } else if (id == O_SEED) {
            uint64_t s;
            if (cli_parse_u64(v, "--seed", &s, &err)) goto usage_err;
            o.seed = s;
        } else if (id == O_MC) {
            if (cli_parse_int(v, "--mc", 0, 1000000, &n, &err)) goto usage_err;
            o.mc_samples = (int)n;
        } else if (id == O_LONG_LENGTH) {
            if (cli_parse_int(v, "--long-length", 2, 1 << 20, &n, &err)) goto usage_err;
            o.long_length = (int)n;
        } else if (id == O_THREADS) {
            if (cli_parse_int(v, "--threads", 1, 1024, &n, &err)) goto usage_err;
            o.threads = (int)n;
        } else if (id == O_EXPERIMENTS) {
            if (parse_experiments(v, &o.experiments, &err)) goto usage_err;
        } else if (cli_framing_take(&p, id, &o.bos, &o.wrap)) {
            rc = p.status; /* 2 after a word other than on / off */
        } else if (id == O_LAYERS || id == O_HEADS) {
            int k = id == O_HEADS, *cnt = k ? &o.n_heads : &o.n_layers;
            free(sel[k]), sel[k] = NULL, *cnt = 0;
            if (strcmp(v, "all") && cli_parse_int_list(v, p.opt, &sel[k], cnt, &err))
                goto usage_err;
            o.layers = sel[0], o.heads = sel[1];
        } else if (CLI_IS_ATTN(id)) {
            if (cli_attn_arg(a, v, &o.attention, att_lists, &err) < 0) goto usage_err;
        } else if (id == O_RANDOM_WEIGHTS) {
            if (strcmp(v, "yes") && strcmp(v, "no") && strcmp(v, "auto")) {
                rc = USAGE_ERROR("--random-weights: '%s' is not yes, no or auto", v);
                goto out;
            }
            o.synthetic = !strcmp(v, "yes") ? 1 : !strcmp(v, "no") ? 0 : -1;
        }
        if (rc) goto out;
    }
    o.progress = o.quiet ? 0 : isatty(2) ? 1 : 2; /* not a TTY: plain periodic lines */
    out_dir = o.out_dir;
    if (al_dist_agree(d, root ? al_repro_out_begin(&o, force, &od, &err) : 0, &err)) {
        rc = root ? cli_fail("reproduce", &err) : 1;
        goto out;
    }
    cli_catch_interrupt();
    if (al_reproduce_dist(&o, d, &err)) {
        /* Ctrl-C: the library says how many jobs are saved and that --resume goes on (not for
         * --force's temporary output, which goes) */
        if (root && !od && err.code == AL_E_CANCELLED && strstr(err.msg, "jobs saved")) {
            if (!o.quiet) fprintf(stderr, "attnlim reproduce: %s\n", err.msg);
            rc = cli_interrupted() ? 128 + cli_interrupted() : 1;
        } else {
            if (od) al_error_prefix(&err, "%s", al_outdir_dir(od));
            rc = root ? cli_fail_or_interrupted("reproduce", &err, od ? 0 : 1, o.quiet) : 1;
        }
        goto out;
    }
    if (od && al_outdir_publish(od, &err)) {
        rc = root ? cli_fail("reproduce", &err) : 1;
        goto out;
    }
    o.out_dir = out_dir;
    if (!root) goto out; /* rank 0 wrote everything */
    if (json) {
        char path[4200];
        snprintf(path, sizeof path, "%s/results.json", o.out_dir);
        char *txt = NULL;
        cJSON *res =
            al_read_file(path, (size_t)1 << 30, &txt, NULL, NULL) ? NULL : cJSON_Parse(txt);
        cJSON *outj = cJSON_CreateObject();
        cJSON_AddStringToObject(outj, "out", o.out_dir);
        cJSON *vd = res ? cJSON_DetachItemFromObjectCaseSensitive(res, "verdicts") : NULL;
        cJSON_AddItemToObject(outj, "verdicts", vd ? vd : cJSON_CreateArray());
        cli_print_json(outj, 0);
        cJSON_Delete(res);
        free(txt);
    } else if (!o.quiet) {
        fprintf(stderr, "attnlim reproduce: wrote %s/report.html, report.md, results.json\n",
                o.out_dir);
    }
    goto out;
usage_err:
    rc = USAGE_ERROR("%s", err.msg);
out:
    al_outdir_free(od);
    for (int i = 0; i < 4; i++) free(lists[i]);
    free(att_lists[0]);
    free(att_lists[1]);
    free(dl[0]);
    free(dl[1]);
    free(sel[0]);
    free(sel[1]);
    return rc;
#undef USAGE_ERROR
}

int cmd_reproduce(int argc, char **argv) {
    return cli_with_dist("reproduce", reproduce_main, argc, argv);
}
