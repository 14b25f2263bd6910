/* cmd_perplexity.c: attnlim perplexity: exp of the mean next-token negative log-likelihood
 * over windows 0..K-1 of length L (each window a separate forward from position 0). */
#include "cli.h"
#include "run_tokens.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { O_WINDOWS = 1 };
static const cli_opt opts[] = {
    CLI_MORE(RUN_OPTS),
    {O_WINDOWS, "--windows", "K", "windows 0..K-1 (default 1)"},
    {RUN_O_ALLOW_NONFINITE, "--allow-nonfinite", NULL, "report a NaN/Inf NLL instead of failing"},
    {RUN_O_JSON, "--json", NULL,
     "{\"perplexity\", \"nll\", \"windows\", \"length\", \"predictions\",\n"
     "\"per_window_nll\": [K], \"nll_spread\" and \"perplexity_spread\":\n"
     "{\"min\", \"median\", \"max\", \"p2_5\", \"p97_5\"}, \"model\",\n"
     "\"attention\": {\"rule\", \"normalizer\", \"layers\", \"heads\", ...}, ...}"},
    CLI_OPT_END,
};

/* "window_0": the ids of the first window and their strings (the model's tokenizer; "#id" where
 * one does not decode), as every manifest has them beside the ids. */
static int first_tokens_json(al_model *m, run_tokens *tk, const al_model_info *info, long L,
                             cJSON *o, al_error *err) {
    const int32_t *win;
    int rc = run_tokens_window(tk, info, 0, L, &win, err);
    al_tokenizer *tz = NULL;
    if (rc || al_model_tokenizer(m, &tz, &(al_error){0})) return rc; /* no tokenizer: ids only */
    cJSON *w = cJSON_AddObjectToObject(o, "window_0");
    cJSON_AddItemToObject(w, "token_ids", cJSON_CreateIntArray(win, (int)L));
    cJSON *t = cJSON_AddArrayToObject(w, "tokens"); /* cli_print_json repairs invalid UTF-8 */
    for (long i = 0; i < L; i++) {
        char *s = NULL, id[24];
        size_t len;
        snprintf(id, sizeof id, "#%d", win[i]);
        al_error e = {0};
        int bad = al_detokenize(tz, win + i, 1, &s, &len, &e);
        cJSON_AddItemToArray(t, cJSON_CreateString(bad ? id : s));
        free(s);
    }
    al_tokenizer_free(tz);
    return 0;
}

static void usage(FILE *f) {
    fprintf(
        f,
        "usage: attnlim perplexity --model PATH (--corpus NAME | --tokens FILE | --text PROMPT)\n"
        "                          [--length L (required with --corpus; else all tokens / K)]\n"
        "                          [--windows K] [--allow-nonfinite] [--threads N] [--json]\n"
        "                          [--attention R] [--attention-normalizer M] [--attention-layers "
        "SET]\n"
        "                          [--attention-heads SET]\n"
        "\n"
        "Runs windows 0..K-1 (window k = tokens [k L, (k+1) L), default K = 1) through the\n"
        "model and prints 'perplexity: X', X = exp(mean NLL), the mean taken over the L - 1\n"
        "next-token predictions inside each window (the first token of a window has no\n"
        "context and is not predicted), then over windows, and the spread of the per-window\n"
        "NLL over windows (METHOD section 1: min, median, max, 95%% interval = the 2.5th and\n"
        "97.5th percentiles, numpy's linear method; all equal to the NLL when K = 1). Any\n"
        "model family. A NaN/Inf NLL is an error naming the window and the model file (and\n"
        "its NaN/Inf tensor) unless --allow-nonfinite.\n");
    cli_print_options(f, opts, 20);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* {"min", "median", "max", "p2_5", "p97_5"} of v[n] (the per-window values), numpy's linear
 * percentiles (al_percentile_sorted); NaN entries (--allow-nonfinite) are left out. */
static cJSON *spread_json(const double *v, long n, double out[5]) {
    static const char *const names[5] = {"min", "median", "max", "p2_5", "p97_5"};
    static const double pct[5] = {0, 50, 100, 2.5, 97.5};
    double *s = malloc((size_t)n * sizeof *s);
    size_t k = 0;
    for (long i = 0; s && i < n; i++)
        if (!isnan(v[i])) s[k++] = v[i];
    if (s) qsort(s, k, sizeof *s, cmp_double);
    cJSON *o = cJSON_CreateObject();
    for (int i = 0; i < 5; i++) {
        out[i] = s && k ? al_percentile_sorted(s, k, pct[i]) : NAN;
        cJSON_AddItemToObject(o, names[i], cli_json_num(out[i]));
    }
    free(s);
    return o;
}

int cmd_perplexity(int argc, char **argv) {
    long windows = 1;
    int r;
    run_opts ro = {0};
    al_error err = {0};
    cli_parser p = {"perplexity", argc, argv, opts, usage};
    const char *val;
    for (int id; (id = cli_next(&p, &val)) != CLI_END;) {
        if (id == CLI_STOP) return p.status;
        if ((r = run_opts_take(&p, id, val, &ro)) > 1) return r;
        if (id == O_WINDOWS && cli_parse_int(val, "--windows", 1, 1L << 30, &windows, &err))
            return cli_usage_error("perplexity", "%s", err.msg);
    }
    if ((r = run_opts_finish("perplexity", &ro, 2, "at least 2 tokens (one prediction)"))) return r;
    const char *model = ro.model, *tokens = ro.tokens, *corpus = ro.corpus;
    long length = ro.length; /* 0 with --tokens or --text and no --length: every token */
    const int json = ro.json, allow_nonfinite = ro.allow_nonfinite;

    double t0 = al_now();
    al_model *m = NULL;
    run_tokens tk = {0};
    float *logits = NULL;
    double *nll = NULL;
    int rc = al_model_open(model, &m, &err);
    if (rc) return cli_fail("perplexity", &err);
    const al_model_info *info = al_model_get_info(m);
    const int V = info->vocab_size;
    if ((rc = run_attn_apply(m, &ro, &err))) goto done;
    if (!strcmp(info->family, "dump")) {
        rc = al_error_set(&err, AL_E_UNSUPPORTED,
                          "%s: an attention dump holds attention, not a model: no logits to score",
                          info->path);
        goto done;
    }
    const int32_t *win;
    if (length > info->n_ctx) {
        rc = al_error_set(&err, AL_E_INVALID, "--length %ld exceeds the context of %s (%d tokens)",
                          length, info->path, info->n_ctx);
        goto done;
    }
    if ((rc = run_tokens_load("perplexity", m, tokens, corpus, &tk, &err))) goto done;
    if (!ro.have_length) length = run_tokens_all_length(&tk, windows); /* the whole prompt */
    if (length < 2) {
        rc = al_error_set(&err, AL_E_INVALID, "%s: %zu tokens: a window needs at least 2",
                          tk.source, tk.n);
        goto done;
    }
    /* the last window must exist: checks every window at once */
    if ((rc = run_tokens_window(&tk, info, windows - 1, length, &win, &err))) goto done;
    size_t n_logits;
    if (__builtin_mul_overflow((size_t)length, (size_t)V, &n_logits) ||
        __builtin_mul_overflow(n_logits, sizeof(float), &n_logits)) {
        rc = al_error_set(&err, AL_E_NOMEM, "logits of %ld x %d overflow", length, V);
        goto done;
    }
    logits = cli_malloc(n_logits, "logits", &err); /* [L, V] */
    /* [2, windows]: the per-window NLL, then the per-window perplexity */
    nll = cli_calloc(2 * (size_t)windows, sizeof *nll, "per-window NLL", &err);
    if (!logits || !nll) {
        rc = AL_E_NOMEM;
        goto done;
    }
    al_bar *prog = al_bar_begin(isatty(2) ? 1 : 2, (double)windows); /* else plain lines */
    cli_catch_interrupt(); /* Ctrl-C: the forward stops at its next layer */
    double t_fwd = al_now(), sum = 0.0;
    long done_k = 0;
    for (long k = 0; k < windows; k++, done_k = k) {
        if ((rc = run_tokens_window(&tk, info, k, length, &win, &err))) break;
        /* every token's logits: each is a next-token prediction */
        if ((rc = al_model_forward_opts(m, win, (int)length, NULL,
                                        &(al_forward_opts){AL_LOGITS_ALL, -1}, logits, NULL, &err)))
            break;
        nll[k] = al_next_token_nll(logits, win, (int)length, V);
        sum += nll[k];
        if (!isfinite(nll[k])) {
            char cause[2048];
            al_model_nonfinite_cause(m, cause, sizeof cause);
            if (allow_nonfinite) {
                fprintf(stderr,
                        "attnlim perplexity: warning: window %ld: the NLL is %s; %s "
                        "(--allow-nonfinite)\n",
                        k, isnan(nll[k]) ? "NaN" : "infinite", cause);
                continue;
            }
            rc = al_error_set(
                &err, AL_E_RANGE,
                "window %ld (tokens [%ld, %ld)): the NLL is %s; %s (--allow-nonfinite "
                "reports it anyway)",
                k, k * length, (k + 1) * length, isnan(nll[k]) ? "NaN" : "infinite", cause);
            break;
        }
        char status[64];
        snprintf(status, sizeof status, "window %ld, NLL %.4f", k, nll[k]);
        al_bar_add(prog, 1, status);
    }
    al_bar_end(prog);
    if (rc && cli_interrupted()) {
        fprintf(stderr,
                "attnlim perplexity: interrupted: %ld of %ld windows done; nothing was printed "
                "(the perplexity needs every window): rerun it, with fewer --windows for a "
                "shorter run\n",
                done_k, windows);
        run_tokens_free(&tk), free(logits), free(nll), al_model_free(m);
        return 128 + cli_interrupted();
    }
    if (rc) goto done;
    double mean = sum / windows, ppl = exp(mean), fwd_s = al_now() - t_fwd;
    double nsp[5], psp[5];
    double *ppl_w = nll + windows; /* [windows] per-window perplexities */
    for (long k = 0; k < windows; k++) ppl_w[k] = exp(nll[k]);
    cJSON *nll_spread = spread_json(nll, windows, nsp);
    cJSON *ppl_spread = spread_json(ppl_w, windows, psp);
    if (json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddItemToObject(o, "perplexity", cli_json_num(ppl));
        cJSON_AddItemToObject(o, "nll", cli_json_num(mean));
        cJSON_AddNumberToObject(o, "windows", (double)windows);
        cJSON_AddNumberToObject(o, "length", (double)length);
        cJSON_AddNumberToObject(o, "predictions", (double)windows * (double)(length - 1));
        cJSON_AddItemToObject(o, "per_window_nll", cli_json_array_d(nll, windows));
        cJSON_AddItemToObject(o, "nll_spread", nll_spread);
        cJSON_AddItemToObject(o, "perplexity_spread", ppl_spread);
        nll_spread = ppl_spread = NULL;
        cJSON_AddStringToObject(o, "model", info->path);
        cJSON_AddStringToObject(o, "family", info->family);
        char *attn = al_model_attention_json(m);
        cJSON_AddItemToObject(o, "attention", attn ? cJSON_Parse(attn) : cJSON_CreateNull());
        al_free(attn);
        cJSON_AddStringToObject(o, tk.from_corpus ? "corpus" : "tokens", tk.source);
        cJSON_AddNumberToObject(o, "n_tokens", (double)tk.n);
        run_tokens_framing_json(&tk, o);
        if ((rc = first_tokens_json(m, &tk, info, length, o, &err))) {
            cJSON_Delete(o);
            goto done;
        }
        cJSON_AddNumberToObject(o, "threads", al_get_threads());
        cJSON_AddNumberToObject(o, "forward_s", fwd_s);
        cJSON_AddNumberToObject(o, "total_s", al_now() - t0);
        cli_print_json(o, 0);
    } else {
        printf("perplexity: %.6g\n", ppl);
        if (al_model_get_attention(m)) {
            const al_attn_variant *v = al_model_get_attention(m);
            char rule[96], nm[96];
            al_attn_rule_name(v, rule, sizeof rule);
            al_attn_norm_name(&v->norm, nm, sizeof nm);
            printf("attention: %s, normalizer %s, layers %s, heads %s\n", rule, nm,
                   v->layers ? ro.attn_layers : "all", v->heads ? ro.attn_heads : "all");
        }
        printf("mean NLL: %.6f nats over %ld windows of %ld tokens (%ld predictions), %.2f s\n",
               mean, windows, length, windows * (length - 1), fwd_s);
        printf("per-window NLL: min %.6f, median %.6f, max %.6f, 95%% interval [%.6f, %.6f]\n",
               nsp[0], nsp[1], nsp[2], nsp[3], nsp[4]);
        printf("per-window perplexity: min %.6g, median %.6g, max %.6g, 95%% interval "
               "[%.6g, %.6g]\n",
               psp[0], psp[1], psp[2], psp[3], psp[4]);
    }
    cJSON_Delete(nll_spread);
    cJSON_Delete(ppl_spread);

done:
    free(logits);
    free(nll);
    run_tokens_free(&tk);
    al_model_free(m);
    return rc ? cli_fail("perplexity", &err) : 0;
}
