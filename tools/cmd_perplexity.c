/* cmd_perplexity.c: attnlim perplexity: exp of the mean next-token negative log-likelihood
 * over windows 0..K-1 of length L (each window a separate forward from position 0). */
#include "cli.h"
#include "internal.h"
#include "ops.h"
#include "progress.h"
#include "run_tokens.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void usage(FILE *f) {
    fprintf(f,
            "usage: attnlim perplexity --model PATH (--corpus NAME | --tokens FILE) --length L\n"
            "                          [--windows K] [--threads N] [--json]\n"
            "\n"
            "Runs windows 0..K-1 (window k = tokens [k L, (k+1) L), default K = 1) through the\n"
            "model and prints 'perplexity: X', X = exp(mean NLL), the mean taken over the L - 1\n"
            "next-token predictions inside each window (the first token of a window has no\n"
            "context and is not predicted), then over windows. Any model family.\n"
            "  --corpus NAME   war-and-peace (METHOD section 1) or a text file, tokenized with\n"
            "                  the model's tokenizer\n"
            "  --tokens FILE   token ids separated by whitespace\n"
            "  --threads N     compute threads (default: all cores, or OMP_NUM_THREADS)\n"
            "  --json          {\"perplexity\", \"nll\", \"windows\", \"length\", \"per_window\": "
            "[...], ...}\n");
}

/* Mean over t < T-1 of -log softmax(logits[t])[tokens[t+1]], in double. */
static double window_nll(const float *logits, const int32_t *tokens, int T, int V) {
    double total = 0.0;
#pragma omp parallel for reduction(+ : total) schedule(static)
    for (int t = 0; t < T - 1; t++) {
        const float *row = logits + (size_t)t * V; /* [V] */
        double mx = -INFINITY, s = 0.0;
        for (int j = 0; j < V; j++) mx = row[j] > mx ? row[j] : mx;
        for (int j = 0; j < V; j++) s += exp((double)row[j] - mx);
        total += mx + log(s) - row[tokens[t + 1]];
    }
    return total / (T - 1);
}

int cmd_perplexity(int argc, char **argv) {
    const char *model = NULL, *tokens = NULL, *corpus = NULL;
    long windows = 1, length = -1, threads = 0;
    int json = 0, have_length = 0;
    al_error err = {0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--json")) {
            json = 1;
        } else if (i + 1 >= argc || a[0] != '-') {
            return cli_usage_error("perplexity", "unknown argument or missing value: '%s'", a);
        } else if (!strcmp(a, "--model")) {
            model = argv[++i];
        } else if (!strcmp(a, "--tokens")) {
            tokens = argv[++i];
        } else if (!strcmp(a, "--corpus")) {
            corpus = argv[++i];
        } else if (!strcmp(a, "--windows")) {
            if (cli_parse_int(argv[++i], "--windows", 1, 1L << 30, &windows, &err))
                return cli_usage_error("perplexity", "%s", err.msg);
        } else if (!strcmp(a, "--length")) {
            if (cli_parse_int(argv[++i], "--length", -(1L << 40), 1L << 40, &length, &err))
                return cli_usage_error("perplexity", "%s", err.msg);
            have_length = 1;
        } else if (!strcmp(a, "--threads")) {
            if (cli_parse_int(argv[++i], "--threads", 1, 1024, &threads, &err))
                return cli_usage_error("perplexity", "%s", err.msg);
        } else {
            return cli_usage_error("perplexity", "unknown option '%s'", a);
        }
    }
    if (!model) return cli_usage_error("perplexity", "--model PATH is required");
    if (!have_length) return cli_usage_error("perplexity", "--length L is required");
    if (!!tokens == !!corpus)
        return cli_usage_error("perplexity", "give exactly one of --tokens FILE and --corpus NAME");
    if (length < 2)
        return cli_usage_error("perplexity", "--length %ld: at least 2 tokens (one prediction)",
                               length);
    if (threads) al__set_threads((int)threads);

    double t0 = al__now();
    al_model *m = NULL;
    run_tokens tk = {0};
    float *logits = NULL;
    double *nll = NULL;
    int rc = al_model_open(model, &m, &err);
    if (rc) return cli_fail("perplexity", &err);
    const al_model_info *info = al_model_get_info(m);
    const int V = info->vocab_size;
    const int32_t *win;
    if (length > info->n_ctx) {
        rc = al__err(&err, AL_E_INVALID, "--length %ld exceeds the context of %s (%d tokens)",
                     length, info->path, info->n_ctx);
        goto done;
    }
    if ((rc = run_tokens_load(m, tokens, corpus, &tk, &err))) goto done;
    /* the last window must exist: checks every window at once */
    if ((rc = run_tokens_window(&tk, info, windows - 1, length, &win, &err))) goto done;
    size_t n_logits;
    if (!al__mul_ok((size_t)length, (size_t)V, &n_logits) ||
        !al__mul_ok(n_logits, sizeof(float), &n_logits)) {
        rc = al__err(&err, AL_E_NOMEM, "logits of %ld x %d overflow", length, V);
        goto done;
    }
    logits = al__malloc(n_logits, "logits", &err);                          /* [L, V] */
    nll = al__calloc((size_t)windows, sizeof *nll, "per-window NLL", &err); /* [windows] */
    if (!logits || !nll) {
        rc = AL_E_NOMEM;
        goto done;
    }
    al__progress prog;
    al__progress_begin(&prog, isatty(2), stderr, (double)windows);
    double t_fwd = al__now(), sum = 0.0;
    for (long k = 0; k < windows; k++) {
        if ((rc = run_tokens_window(&tk, info, k, length, &win, &err))) break;
        if ((rc = al_model_forward(m, win, (int)length, NULL, logits, NULL, &err))) break;
        nll[k] = window_nll(logits, win, (int)length, V);
        sum += nll[k];
        char status[64];
        snprintf(status, sizeof status, "window %ld, NLL %.4f", k, nll[k]);
        al__progress_add(&prog, 1, status);
    }
    al__progress_end(&prog);
    if (rc) goto done;
    double mean = sum / windows, ppl = exp(mean), fwd_s = al__now() - t_fwd;
    if (json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddItemToObject(o, "perplexity", cli_json_num(ppl));
        cJSON_AddItemToObject(o, "nll", cli_json_num(mean));
        cJSON_AddNumberToObject(o, "windows", (double)windows);
        cJSON_AddNumberToObject(o, "length", (double)length);
        cJSON_AddNumberToObject(o, "predictions", (double)windows * (double)(length - 1));
        cJSON_AddItemToObject(o, "per_window_nll", cli_json_array_d(nll, windows));
        cJSON_AddStringToObject(o, "model", info->path);
        cJSON_AddStringToObject(o, "family", info->family);
        cJSON_AddStringToObject(o, tk.from_corpus ? "corpus" : "tokens", tk.source);
        cJSON_AddNumberToObject(o, "n_tokens", (double)tk.n);
        cJSON_AddNumberToObject(o, "threads", al__get_threads());
        cJSON_AddNumberToObject(o, "forward_s", fwd_s);
        cJSON_AddNumberToObject(o, "total_s", al__now() - t0);
        cli_print_json(o, 0);
    } else {
        printf("perplexity: %.6g\n", ppl);
        printf("mean NLL: %.6f nats over %ld windows of %ld tokens (%ld predictions), %.2f s\n",
               mean, windows, length, windows * (length - 1), fwd_s);
    }

done:
    free(logits);
    free(nll);
    run_tokens_free(&tk);
    al_model_free(m);
    return rc ? cli_fail("perplexity", &err) : 0;
}
