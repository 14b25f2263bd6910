/* cmd_capture.c: attnlim capture: runs a model over one window and writes the requested
 * per-layer arrays as DIR/layer{l}.{what}.npy plus DIR/manifest.json.
 *
 * Publication is one rename: the arrays stream from the forward's observer to .npy files in a
 * sibling temporary directory PARENT/.capture-PID.tmp, the manifest last, through the library's
 * dump writer (al_dump_writer_*, src/model/dump/dump_write.c, which write_dump of the Python
 * package uses too); only when the whole run succeeded does that directory become DIR:
 *   - DIR absent, or an empty directory: rename(tmp, DIR) (POSIX replaces an empty directory);
 *   - DIR holding files: refused unless --force; with --force (and only over an earlier
 *     capture's files) the two directories are exchanged atomically (renameat2
 *     RENAME_EXCHANGE), else DIR is renamed aside, tmp renamed in and the old one removed.
 * At no moment does DIR hold a mix of two runs. A failed run removes its temporary directory
 * and any parent directory it created. A killed run (SIGKILL) leaves its temporary directory
 * and its lock file .capture-PID.lock; the next capture into the same parent removes them once
 * it can take that lock (the owner is gone, in whatever PID namespace or host it ran).
 *
 * SIGINT / SIGTERM: the handler only records the signal in a volatile sig_atomic_t (the one
 * thing a handler may do safely while other threads allocate and write files); the run checks
 * it between phases and between layers (the observer returns AL_E_CANCELLED, which stops the
 * forward), removes the temporary directory and then re-raises the signal with its default
 * action, so the exit status says what happened. SA_RESETHAND: a second signal ends the process
 * at once (its temporary directory is swept by the next run). A signal inherited as ignored
 * (a background job of a non-interactive shell) stays ignored, as the shell intended. */
#include "cli.h"
#include "run_tokens.h"

#include <cjson/cJSON.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <cairo.h>
#include <cblas.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <openssl/crypto.h>
#include <pcre2.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef AL_GIT_COMMIT
#define AL_GIT_COMMIT "unknown"
#endif

static const struct {
    const char *name;
    unsigned bit;
} WHAT[] = {{"q", AL_CAP_Q},
            {"k", AL_CAP_K},
            {"v", AL_CAP_V},
            {"logits", AL_CAP_LOGITS},
            {"weights", AL_CAP_WEIGHTS},
            {"hidden", AL_CAP_HIDDEN},
            {"embed", AL_CAP_EMBED},
            {"logits_precap", AL_CAP_LOGITS_PRECAP}}; /* Gemma 2: before soft-capping */
#define N_WHAT ((int)(sizeof WHAT / sizeof WHAT[0]))

static const char MASK_CONVENTION[] =
    "causal models: for query row t, keys j > t are masked: logits -inf, weights 0 (above the "
    "diagonal of each [L, L] array); encoders mask nothing";

enum { O_WINDOW = 1, O_LAYERS, O_HEADS, O_WHAT, O_OUT, O_FORCE, O_DRY_RUN };
static const cli_opt opts[] = {
    CLI_MORE(RUN_OPTS),
    {O_WINDOW, "--window", "K", "the window (default 0)"},
    {O_LAYERS, "--layers", "SET", "the layers captured (0,3,5-7 or all, the default)"},
    {O_HEADS, "--heads", "SET", "the heads captured (0-3 or all, the default)"},
    {O_WHAT, "--what", "LIST", "default: weights"},
    {O_OUT, "--out", "DIR", "the output directory"},
    {O_FORCE, "--force", NULL, "replace an earlier capture in DIR (atomically)"},
    {O_DRY_RUN, "--dry-run", NULL, "print only the size the capture would write, and stop"},
    {RUN_O_ALLOW_NONFINITE, "--allow-nonfinite", NULL,
     "write arrays holding NaN/Inf (counted in the manifest)"},
    {RUN_O_JSON, "--json", NULL, "print the manifest on stdout"},
    CLI_TEXT("The attention variant (recorded as the manifest's model.attention; the weights\n"
             "captured are the variant's, the logits the model's full rows): --attention,\n"
             "--attention-normalizer, --attention-layers, --attention-heads above."),
    CLI_OPT_END,
};

static void usage(FILE *f) {
    fprintf(
        f,
        "usage: attnlim capture --model PATH (--tokens FILE | --corpus NAME | --text PROMPT)\n"
        "                       [--length L]\n"
        "                       [--window K] [--layers 0,3,5-7|all] [--heads 0-3|all]\n"
        "                       [--what q,k,v,logits,weights,hidden,embed,logits_precap]\n"
        "                       --out DIR\n"
        "                       [--force] [--dry-run] [--allow-nonfinite] [--threads N] [--json]\n"
        "                       [--attention R] [--attention-normalizer M] [--attention-layers "
        "SET]\n"
        "                       [--attention-heads SET]\n"
        "\n"
        "Runs the model over window K (tokens [K L, (K+1) L), default 0) and writes, for each\n"
        "selected layer l, DIR/layer{l}.{what}.npy (float32):\n"
        "  q, k, v   [n_heads, L, d_head]  selected heads (k, v: the key/value head each\n"
        "                                  query head reads)\n"
        "  logits    [n_heads, L, L]       q.k / sqrt(d_head); masked entries -inf\n"
        "  weights   [n_heads, L, L]       softmax rows; masked entries 0\n"
        "  hidden    [L, d_model]          the layer input after its first norm\n"
        "  embed     [L, d_model]          the model input (token + position embedding)\n"
        "and DIR/manifest.json (the model's files and their SHA-256s, the model identity,\n"
        "tokens and their strings, tokenizer files, window, options, load warnings, versions,\n"
        "timings). It first prints the size it will write (--dry-run: only that).\n"
        "DIR appears only when the whole run succeeded, in one rename; it must be new or\n"
        "empty. A NaN/Inf in a captured array (masked entries aside) is an error naming the\n"
        "layer, the array, the position and the model file (and its NaN/Inf tensor).\n"
        "\n");
    cli_print_options(f, opts, 21);
}

/* ---- SIGINT / SIGTERM ------------------------------------------------------------------------ */

static volatile sig_atomic_t stop_signal; /* the CLI's state, not the library's */

static void on_stop_signal(int sig) {
    stop_signal = sig;
}

static void catch_stop_signals(void) {
    const int sigs[2] = {SIGINT, SIGTERM};
    for (int i = 0; i < 2; i++) {
        struct sigaction old, sa;
        if (sigaction(sigs[i], NULL, &old) != 0 || old.sa_handler == SIG_IGN) continue;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_stop_signal;
        sigemptyset(&sa.sa_mask);
        sa.sa_flags = SA_RESETHAND | SA_RESTART;
        sigaction(sigs[i], &sa, NULL);
    }
}

static int check_stop(al_error *err) {
    int sig = stop_signal;
    if (!sig) return 0;
    return al_error_set(err, AL_E_CANCELLED, "interrupted by %s",
                        sig == SIGINT    ? "SIGINT"
                        : sig == SIGTERM ? "SIGTERM"
                                         : "a signal");
}

/* ---- the run --------------------------------------------------------------------------------- */

typedef struct capture_run {
    al_dump_writer *out;
    al_model *model;
    int allow_nonfinite;
    int n_files;
    size_t n_nonfinite; /* over all arrays (--allow-nonfinite) */
    double write_s;
    al_bar *prog;
} capture_run;

/* Non-finite entries of captured array `what` (index into WHAT) of c, with the masked entries
 * of a causal model's logits (-inf) and weights (0) excepted; *first = the flat index of the
 * first. */
static size_t count_nonfinite(const al_capture *c, int what, const float *a, size_t numel,
                              size_t *first) {
    size_t bad = 0, T = (size_t)c->T;
    for (size_t i = 0; i < numel; i++) {
        float x = a[i];
        if (isfinite(x)) continue;
        size_t j = i % T, t = (i / T) % T;
        if ((what == 3 || what == 7) && c->causal && x == -INFINITY &&
            (j > t || (c->window > 0 && j + (size_t)c->window <= t)))
            continue; /* a masked logit: column j above row t, or before its sliding window */
        if (!bad) *first = i;
        bad++;
    }
    return bad;
}

/* "head 3, row 5, column 2" for a flat index of a captured array. */
static void describe_index(const al_capture *c, int what, size_t i, char *buf, size_t cap) {
    if (what == 5 || what == 6) {
        snprintf(buf, cap, "row %zu, column %zu", i / (size_t)c->d_model, i % (size_t)c->d_model);
        return;
    }
    size_t inner = what < 3 ? (size_t)c->d_head : (size_t)c->T;
    size_t per_head = (size_t)c->T * inner;
    snprintf(buf, cap, "head %d, row %zu, column %zu", c->heads[i / per_head],
             (i % per_head) / inner, i % inner);
}

/* The observer: each requested array of this layer goes to its .npy file. */
static int write_layer(void *user, const al_capture *c, al_error *err) {
    capture_run *r = user;
    int rc = check_stop(err);
    if (rc) return rc;
    double t0 = al_now();
    const float *arr[N_WHAT] = {c->q,       c->k,      c->v,     c->logits,
                                c->weights, c->hidden, c->embed, c->logits_precap};
    for (int i = 0; i < N_WHAT; i++) {
        if (!arr[i]) continue;
        al_array a = {.dtype = AL_F32, .data = (void *)arr[i]};
        if (i < 3)
            a.ndim = 3, a.shape[0] = c->n_sel, a.shape[1] = c->T, a.shape[2] = c->d_head;
        else if (i < 5 || i == 7)
            a.ndim = 3, a.shape[0] = c->n_sel, a.shape[1] = c->T, a.shape[2] = c->T;
        else
            a.ndim = 2, a.shape[0] = c->T, a.shape[1] = c->d_model;
        size_t numel = 1, first = 0;
        for (int d = 0; d < a.ndim; d++) numel *= (size_t)a.shape[d];
        size_t bad = count_nonfinite(c, i, arr[i], numel, &first);
        char where[96] = "";
        if (bad) describe_index(c, i, first, where, sizeof where);
        if (bad && !r->allow_nonfinite) {
            char cause[2048];
            al_model_nonfinite_cause(r->model, cause, sizeof cause);
            return al_error_set(err, AL_E_RANGE,
                                "layer %d %s: %zu NaN/Inf values (first at %s: %g); %s "
                                "(--allow-nonfinite writes them anyway)",
                                c->layer, WHAT[i].name, bad, where, (double)arr[i][first], cause);
        }
        char extra[160] = "";
        if (bad)
            snprintf(extra, sizeof extra, "{\"nonfinite\": %zu, \"first_nonfinite_at\": \"%s\"}",
                     bad, where);
        if ((rc = al_dump_writer_add(r->out, c->layer, WHAT[i].name, AL_F32, a.ndim, a.shape,
                                     arr[i], bad ? extra : NULL, err)))
            return rc;
        r->n_files++;
        if (bad) {
            fprintf(stderr,
                    "attnlim capture: warning: layer %d %s: %zu NaN/Inf values (first at "
                    "%s), written (--allow-nonfinite)\n",
                    c->layer, WHAT[i].name, bad, where);
            r->n_nonfinite += bad;
        }
    }
    r->write_s += al_now() - t0;
    char status[64];
    snprintf(status, sizeof status, "layer %d", c->layer);
    al_bar_add(r->prog, 1, status);
    return 0;
}

/* Comma-separated names of WHAT; an empty item (",,", a trailing comma) is an error. */
static int parse_what(const char *s, unsigned *out, al_error *err) {
    *out = 0;
    for (const char *p = s;;) {
        const char *e = strchr(p, ',');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        int found = 0;
        for (int i = 0; i < N_WHAT && !found; i++)
            if (strlen(WHAT[i].name) == n && !strncmp(p, WHAT[i].name, n))
                *out |= WHAT[i].bit, found = 1;
        if (!found && n == 0) return al_error_set(err, AL_E_INVALID, "--what %s: an empty item", s);
        if (!found)
            return al_error_set(
                err, AL_E_INVALID,
                "--what: unknown item '%.*s' (q, k, v, logits, weights, hidden, embed)", (int)n, p);
        if (!e) break;
        p = e + 1;
    }
    return 0;
}

static cJSON *mask_json(const uint8_t *mask, int n) {
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < n; i++)
        if (mask[i]) cJSON_AddItemToArray(a, cJSON_CreateNumber(i));
    return a;
}

static cJSON *versions_json(void) {
    cJSON *v = cJSON_CreateObject();
    cJSON_AddStringToObject(v, "attnlim", al_version());
    cJSON_AddStringToObject(v, "git_commit", AL_GIT_COMMIT);
    cJSON_AddStringToObject(v, "openblas", openblas_get_config());
    char pcre[64] = "unknown";
    if (pcre2_config(PCRE2_CONFIG_VERSION, NULL) <= (int)sizeof pcre)
        pcre2_config(PCRE2_CONFIG_VERSION, pcre);
    cJSON_AddStringToObject(v, "pcre2", pcre);
    cJSON_AddStringToObject(v, "openssl", OpenSSL_version(OPENSSL_VERSION));
    cJSON_AddStringToObject(v, "cjson", cJSON_Version());
    cJSON_AddStringToObject(v, "cairo", cairo_version_string());
#if defined(__clang__)
    cJSON_AddStringToObject(v, "compiler", "clang " __clang_version__);
#elif defined(__GNUC__)
    cJSON_AddStringToObject(v, "compiler", "gcc " __VERSION__);
#else
    cJSON_AddStringToObject(v, "compiler", "unknown");
#endif
    return v;
}

/* s [n] as valid UTF-8: each byte that does not begin a valid sequence becomes U+FFFD. */
static char *valid_utf8_copy(const char *s, size_t n) {
    char *out = malloc(3 * n + 1);
    size_t k = 0;
    for (size_t i = 0; out && i < n;) {
        size_t v = al_utf8_valid_len(s + i, n - i);
        memcpy(out + k, s + i, v);
        k += v, i += v;
        if (i < n) memcpy(out + k, "\xEF\xBF\xBD", 3), k += 3, i++;
    }
    if (out) out[k] = 0;
    return out;
}

/* "token_strings": the model tokenizer's bytes of every id of the window (UTF-8; a byte that is not
 * UTF-8 on its own, a piece of a character, reads U+FFFD: the ids are exact). */
static int token_strings_json(al_model *m, const int32_t *win, long n, int required, cJSON *man,
                              al_error *err) {
    al_tokenizer *tz = NULL;
    al_error e = {0};
    int rc = al_model_tokenizer(m, &tz, &e);
    if (rc && !required) return 0; /* --tokens for a model without a tokenizer: ids only */
    if (rc) return err ? (*err = e, rc) : rc;
    cJSON *arr = cJSON_AddArrayToObject(man, "token_strings");
    for (long t = 0; t < n && !rc; t++) {
        char *s = NULL, *v = NULL;
        size_t len;
        if (!(rc = al_detokenize(tz, win + t, 1, &s, &len, err))) {
            v = valid_utf8_copy(s, len);
            if (!v)
                rc = al_error_set(err, AL_E_NOMEM, "out of memory (token strings)");
            else
                cJSON_AddItemToArray(arr, cJSON_CreateString(v));
        }
        free(s);
        free(v);
    }
    al_tokenizer_free(tz);
    return rc;
}

/* The tokenizer's files object {sha256, sha256_of, files} of the manifest's "tokens". */
static int tokenizer_files(al_model *m, cJSON **out, al_error *err) {
    char *text = al_model_tokenizer_json(m, err);
    if (!text) return err->code ? err->code : AL_E_NOMEM;
    *out = cJSON_Parse(text);
    al_free(text);
    return *out ? 0 : al_error_set(err, AL_E_NOMEM, "out of memory (tokenizer files)");
}

/* man's members, in order, into the dump writer: "model" and "files" (null in man) are the
 * writer's own. */
static int write_manifest(al_dump_writer *w, const cJSON *man, al_model *m, const char *given,
                          al_error *err) {
    int rc = 0;
    for (const cJSON *it = man->child; it && !rc; it = it->next) {
        if (!strcmp(it->string, "model")) {
            rc = al_dump_writer_model(w, m, given, err);
            continue;
        }
        char *text = cJSON_IsNull(it) ? NULL : al_json_print(it, 0);
        if (!cJSON_IsNull(it) && !text)
            return al_error_set(err, AL_E_NOMEM, "out of memory writing the manifest");
        rc = al_dump_writer_set(w, it->string, text, err);
        al_free(text);
    }
    return rc;
}

/* "about X MB in N arrays (...) to DIR": every selected layer's arrays, float32, before the
 * forward (the manifest adds a few kB). */
static void size_estimate(const al_model_info *info, const uint8_t *layers, const uint8_t *heads,
                          unsigned what, long L, const char *out, char *buf, size_t size) {
    int nl = 0, nh = 0, n_arr = 0;
    for (int l = 0; l < info->n_layer; l++) nl += layers[l] != 0;
    for (int h = 0; h < info->n_head; h++) nh += heads[h] != 0;
    double per_layer = 0, l2 = (double)L * L, ld = (double)L * info->d_head;
    for (int i = 0; i < N_WHAT; i++) {
        if (!(what & WHAT[i].bit)) continue;
        unsigned b = WHAT[i].bit;
        per_layer += b & (AL_CAP_LOGITS | AL_CAP_WEIGHTS) ? nh * l2
                     : b & (AL_CAP_HIDDEN | AL_CAP_EMBED) ? (double)L * info->d_model
                                                          : nh * ld;
        n_arr += nl;
    }
    double bytes = per_layer * 4 * nl + 128.0 * n_arr; /* + each .npy header */
    const char *unit = bytes >= 1e9 ? "GB" : bytes >= 1e6 ? "MB" : "kB";
    double v = bytes >= 1e9 ? bytes / 1e9 : bytes >= 1e6 ? bytes / 1e6 : bytes / 1e3;
    snprintf(buf, size, "about %.3g %s in %d arrays (%d layers x %d heads, L = %ld, float32)%s%s",
             v, unit, n_arr, nl, nh, L, out ? " to " : "", out ? out : "");
}

int cmd_capture(int argc, char **argv) {
    const char *layers_s = NULL, *heads_s = NULL, *what_s = "weights", *out = NULL;
    long window = 0;
    int force = 0, dry_run = 0, r;
    run_opts ro = {0};
    al_error err = {0};
    cli_parser p = {"capture", argc, argv, opts, usage};
    const char *v;
    for (int id; (id = cli_next(&p, &v)) != CLI_END;) {
        if (id == CLI_STOP) return p.status;
        if ((r = run_opts_take(&p, id, v, &ro)) > 1) return r;
        if (id == O_FORCE) force = 1;
        if (id == O_DRY_RUN) dry_run = 1;
        if (id == O_LAYERS) layers_s = v;
        if (id == O_HEADS) heads_s = v;
        if (id == O_WHAT) what_s = v;
        if (id == O_OUT) out = v;
        if (id == O_WINDOW && cli_parse_int(v, "--window", 0, 1L << 40, &window, &err))
            return cli_usage_error("capture", "%s", err.msg);
    }
    if ((r = run_opts_finish("capture", &ro, 1, "at least 1 token"))) return r;
    if (!out && !dry_run) return cli_usage_error("capture", "--out DIR is required");
    unsigned what;
    if (parse_what(what_s, &what, &err)) return cli_usage_error("capture", "%s", err.msg);
    const char *model = ro.model, *tokens = ro.tokens, *corpus = ro.corpus;
    long length = ro.length; /* 0 with --tokens or --text and no --length: every token */
    const int json = ro.json, allow_nonfinite = ro.allow_nonfinite;

    double t_start = al_now();
    al_model *m = NULL;
    run_tokens tk = {0};
    al_dump_writer *od =
        NULL; /* DIR first: a refused --out costs no model load (--dry-run: none) */
    if (!dry_run && !(od = al_dump_writer_open(out, "capture", force, &err)))
        return cli_fail("capture", &err);
    capture_run run = {.out = od, .allow_nonfinite = allow_nonfinite};
    uint8_t *layers = NULL, *heads = NULL;
    cJSON *man = NULL;
    cJSON *tz_files = NULL; /* the tokenizer's files object (tokens from text) */
    int rc = 0;
    catch_stop_signals();
    if ((rc = al_model_open(model, &m, &err))) goto done;
    run.model = m;
    const al_model_info *info = al_model_get_info(m);
    double t_loaded = al_now();
    if ((rc = run_attn_apply(m, &ro, &err))) goto done;
    const int32_t *win = NULL;
    if (length > info->n_ctx) {
        rc = al_error_set(&err, AL_E_INVALID, "--length %ld exceeds the context of %s (%d tokens)",
                          length, info->path, info->n_ctx);
        goto done;
    }
    layers = cli_calloc((size_t)info->n_layer, 1, "layer mask", &err);
    heads = cli_calloc((size_t)info->n_head, 1, "head mask", &err);
    if (!layers || !heads) {
        rc = AL_E_NOMEM;
        goto done;
    }
    if ((rc = cli_parse_sel(layers_s, "--layers", info->n_layer, layers, &err))) goto done;
    if ((rc = cli_parse_sel(heads_s, "--heads", info->n_head, heads, &err))) goto done;
    if ((rc = check_stop(&err))) goto done;
    if ((rc = run_tokens_load("capture", m, tokens, corpus, &tk, &err))) goto done;
    if (!ro.have_length) length = run_tokens_all_length(&tk, 1); /* the whole prompt or file */
    if (!ro.have_length && window) {
        rc = al_error_set(&err, AL_E_INVALID,
                          "--window %ld needs --length (without it the window is "
                          "every token)",
                          window);
        goto done;
    }
    if ((rc = run_tokens_window(&tk, info, window, length, &win, &err))) goto done;
    if ((rc = check_stop(&err))) goto done;
    { /* the size first; --dry-run: only that */
        char est[256];
        size_estimate(info, layers, heads, what, length, out, est, sizeof est);
        if (dry_run) {
            printf("%s\n", est);
            goto done;
        }
        if (!json) fprintf(stderr, "attnlim capture: %s\n", est);
    }
    double t_hash0 = al_now();
    if ((rc = al_model_hash(m, &err))) goto done; /* every file's SHA-256, kept in m */
    if (tk.from_corpus && (rc = tokenizer_files(m, &tz_files, &err))) goto done;
    double hash_s = al_now() - t_hash0;
    if ((rc = check_stop(&err))) goto done;

    int n_sel_layers = 0;
    for (int l = 0; l < info->n_layer; l++) n_sel_layers += layers[l];
    run.prog = al_bar_begin(isatty(2) ? 1 : 2, n_sel_layers); /* else plain lines */
    al_capture_request req = {
        .what = what, .layers = layers, .heads = heads, .fn = write_layer, .user = &run};
    double t_fwd0 = al_now();
    /* no logits, no layer above the last one captured */
    rc = al_model_forward_opts(m, win, (int)length, &req, &(al_forward_opts){AL_LOGITS_NONE, -1},
                               NULL, NULL, &err);
    double fwd_total = al_now() - t_fwd0;
    al_bar_end(run.prog);
    if (rc) goto done;

    /* the manifest */
    man = cJSON_CreateObject();
    cJSON_AddStringToObject(man, "command", "capture");
    cJSON_AddItemToObject(man, "versions", versions_json());
    cJSON_AddNullToObject(man, "model"); /* the writer's (al_dump_writer_model) */
    cJSON *src = cJSON_AddObjectToObject(man, "tokens");
    cJSON_AddStringToObject(src, tk.from_corpus ? "corpus" : "file", tk.source);
    cJSON_AddStringToObject(src, "sha256", tk.sha256);
    cJSON_AddStringToObject(src, "sha256_of",
                            tk.from_corpus ? "corpus text (bytes given to the tokenizer)"
                                           : "token ids file");
    cJSON_AddNumberToObject(src, "n_tokens", (double)tk.n);
    if (tk.from_corpus) {
        if (tk.invalid_utf8_at >= 0)
            cJSON_AddNumberToObject(src, "invalid_utf8_at", (double)tk.invalid_utf8_at);
        else
            cJSON_AddNullToObject(src, "invalid_utf8_at");
        cJSON_AddItemToObject(src, "tokenizer", tz_files);
        tz_files = NULL;
    }
    run_tokens_framing_json(&tk, man);
    cJSON_AddNumberToObject(man, "window", (double)window);
    /* each layer's causal sliding window (0 = none): keys before it are masked as the future */
    cJSON *swl = cJSON_AddArrayToObject(cJSON_AddObjectToObject(man, "sliding_window"), "of_layer");
    for (int l = 0; l < info->n_layer; l++)
        cJSON_AddItemToArray(swl, cJSON_CreateNumber(al_model_layer_window(m, l)));
    cJSON_AddNumberToObject(man, "length", (double)length);
    cJSON_AddNumberToObject(man, "first_token",
                            (double)window *
                                (double)(tk.framed ? al_framing_body(&tk.fr, length) : length));
    cJSON *ids = cJSON_AddArrayToObject(man, "token_ids");
    for (long t = 0; t < length; t++) cJSON_AddItemToArray(ids, cJSON_CreateNumber(win[t]));
    if ((rc = token_strings_json(m, win, length, tk.from_corpus, man, &err))) goto done;
    cJSON *opt = cJSON_AddObjectToObject(man, "options");
    cJSON_AddItemToObject(opt, "layers", mask_json(layers, info->n_layer));
    cJSON_AddItemToObject(opt, "heads", mask_json(heads, info->n_head));
    cJSON *kv = cJSON_AddArrayToObject(opt, "kv_head_of_heads");
    for (int h = 0; h < info->n_head; h++)
        if (heads[h])
            cJSON_AddItemToArray(kv, cJSON_CreateNumber(h / (info->n_head / info->n_kv_head)));
    cJSON *w = cJSON_AddArrayToObject(opt, "what");
    for (int i = 0; i < N_WHAT; i++)
        if (what & WHAT[i].bit) cJSON_AddItemToArray(w, cJSON_CreateString(WHAT[i].name));
    cJSON_AddNumberToObject(opt, "threads", al_get_threads());
    cJSON_AddBoolToObject(opt, "allow_nonfinite", allow_nonfinite);
    cJSON_AddBoolToObject(opt, "force", force);
    cJSON *conv = cJSON_AddObjectToObject(man, "conventions");
    cJSON_AddStringToObject(conv, "masked_entries", MASK_CONVENTION);
    cJSON_AddStringToObject(conv, "dtype", "float32, C order");
    cJSON_AddNumberToObject(man, "nonfinite_values", (double)run.n_nonfinite);
    cJSON_AddNullToObject(man, "files"); /* the arrays written (al_dump_writer_add) */
    cJSON *tm = cJSON_AddObjectToObject(man, "timings_s");
    cJSON_AddNumberToObject(tm, "load_model", t_loaded - t_start);
    cJSON_AddNumberToObject(tm, "tokens", tk.seconds);
    cJSON_AddNumberToObject(tm, "hash_files", hash_s);
    cJSON_AddNumberToObject(tm, "forward", fwd_total - run.write_s);
    cJSON_AddNumberToObject(tm, "write", run.write_s);
    cJSON_AddNumberToObject(tm, "total", al_now() - t_start);
    if ((rc = check_stop(&err))) goto done;
    if ((rc = write_manifest(od, man, m, model, &err))) goto done;
    cJSON_Delete(man);
    man = NULL;
    char *text = NULL;
    if ((rc = al_dump_writer_finish(od, 0, json ? &text : NULL, &err))) goto done;
    man = text ? cJSON_Parse(text) : NULL;
    al_free(text);
    if (json && man) {
        cJSON_AddStringToObject(man, "out", al_dump_writer_dir(od));
        cli_print_json(man, 0);
        man = NULL;
    } else {
        printf("wrote %d arrays and manifest.json to %s (forward %.3f s, writing %.3f s)\n",
               run.n_files, al_dump_writer_dir(od), fwd_total - run.write_s, run.write_s);
    }

done:
    al_dump_writer_free(od); /* on success: only releases the lock */
    cJSON_Delete(man);
    cJSON_Delete(tz_files);
    free(layers);
    free(heads);
    run_tokens_free(&tk);
    al_model_free(m);
    if (rc && stop_signal) {
        int sig = stop_signal;
        fprintf(stderr,
                "attnlim capture: %s: 0 of 1 capture saved; nothing was written to %s (a capture "
                "appears whole, in one rename): rerun it\n",
                err.msg, out);
        signal(sig, SIG_DFL);
        raise(sig); /* the default action: the exit status says which signal */
    }
    return rc ? cli_fail("capture", &err) : 0;
}
