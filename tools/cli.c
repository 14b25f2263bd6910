/* cli.c: argument and input parsing, errors and JSON output shared by the subcommands. */
#include "cli.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static volatile sig_atomic_t interrupted; /* the CLI's state, not the library's */

static void on_interrupt(int sig) {
    interrupted = sig;
}

static int poll_interrupt(void *user, const char *stage, int64_t done, int64_t total) {
    (void)user, (void)stage, (void)done, (void)total;
    return interrupted != 0;
}

void cli_catch_interrupt(void) {
    const int sigs[2] = {SIGINT, SIGTERM};
    for (int i = 0; i < 2; i++) {
        struct sigaction old;
        if (sigaction(sigs[i], NULL, &old) == 0 && old.sa_handler == SIG_IGN) continue;
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_interrupt;
        sa.sa_flags = SA_RESETHAND; /* a second signal ends the process at once */
        sigemptyset(&sa.sa_mask);
        sigaction(sigs[i], &sa, NULL);
    }
    al_set_progress(poll_interrupt, NULL);
}

int cli_interrupted(void) {
    return interrupted;
}

int cli_fail_or_interrupted(const char *cmd, const al_error *err, int resumable, int quiet) {
    if (!interrupted || !err || err->code != AL_E_CANCELLED) return cli_fail(cmd, err);
    if (!quiet)
        fprintf(stderr, "attnlim %s: interrupted%s\n", cmd,
                resumable ? "; rerun with --resume to continue" : "");
    return 128 + (int)interrupted;
}

int cli_fail(const char *cmd, const al_error *err) {
    fprintf(stderr, "attnlim %s: %s\n", cmd, err && err->msg[0] ? err->msg : "failed");
    return 1;
}

int cli_with_dist(const char *cmd, int (*body)(int, char **, al_dist *), int argc, char **argv) {
    al_dist *d = NULL; /* several processes under mpirun (MPI builds), else this one */
    al_error err = {0};
    if (al_dist_open(&d, &err)) return cli_fail(cmd, &err);
    int rc = body(argc, argv, d);
    al_dist_close(d);
    return rc;
}

int cli_usage_error(const char *cmd, const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "attnlim %s: ", cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, " (see 'attnlim %s --help')\n", cmd);
    return 2;
}

/* The entry of opts (and of the tables it includes) named name (or aliased), else NULL. */
static const cli_opt *find_opt(const cli_opt *opts, const char *name) {
    for (const cli_opt *o = opts; o->id || o->name || o->help || o->more; o++) {
        if (!o->name && o->more) {
            const cli_opt *m = find_opt(o->more, name);
            if (m) return m;
        } else if (o->name && (!strcmp(o->name, name) || (o->alias && !strcmp(o->alias, name))))
            return o;
    }
    return NULL;
}

/* The names of opts (and of the tables it includes) into names[max]; returns how many. */
static int opt_names(const cli_opt *opts, const char **names, int n, int max) {
    for (const cli_opt *o = opts; (o->id || o->name || o->help || o->more) && n < max; o++) {
        if (!o->name && o->more)
            n = opt_names(o->more, names, n, max);
        else if (o->name)
            names[n++] = o->name;
    }
    return n;
}

int cli_parse_error(cli_parser *p, const char *fmt, ...) {
    p->status = 2;
    if (p->quiet) return 2;
    char m[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m, sizeof m, fmt, ap);
    va_end(ap);
    return cli_usage_error(p->cmd, "%s", m);
}

int cli_next(cli_parser *p, const char **val) {
    *val = NULL;
    p->opt = NULL;
    if (++p->i >= p->argc) return CLI_END;
    const char *a = p->argv[p->i];
    if (p->positional && (a[0] != '-' || a[1] == 0)) {
        *val = a;
        return CLI_POS;
    }
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
        if (!p->quiet && p->usage) p->usage(stdout);
        p->status = 0;
        return CLI_STOP;
    }
    const cli_opt *o = find_opt(p->opts, a);
    if (!o) {
        const char *names[256];
        const char *near = al_nearest(a, names, opt_names(p->opts, names, 0, 256));
        if (near)
            cli_parse_error(p, "unknown option '%s': did you mean '%s'?", a, near);
        else
            cli_parse_error(p, "unknown option '%s'", a);
        return CLI_STOP;
    }
    p->opt = o->name;
    if (o->arg) {
        if (p->i + 1 >= p->argc) {
            cli_parse_error(p, "%s needs a value", o->name);
            return CLI_STOP;
        }
        *val = p->argv[++p->i];
    }
    return o->id;
}

void cli_print_options(FILE *f, const cli_opt *opts, int col) {
    for (const cli_opt *o = opts; o->id || o->name || o->help || o->more; o++) {
        if (!o->name) {
            if (o->more)
                cli_print_options(f, o->more, col);
            else
                fprintf(f, "%s\n", o->help);
            continue;
        }
        int w = fprintf(f, "  %s%s%s%s%s", o->name, o->alias ? ", " : "", o->alias ? o->alias : "",
                        o->arg ? " " : "", o->arg ? o->arg : "");
        const char *h = o->help ? o->help : "";
        for (int line = 0;; line++) {
            const char *nl = strchr(h, '\n');
            int len = nl ? (int)(nl - h) : (int)strlen(h);
            int pad = line ? col : w < col ? col - w : 2;
            fprintf(f, "%*s%.*s\n", pad, "", len, h);
            if (!nl) break;
            h = nl + 1;
        }
    }
}

static char *prompts[8];
static int n_prompts;
static void free_prompts(void) {
    for (int i = 0; i < n_prompts; i++) free(prompts[i]);
    n_prompts = 0;
}

const char *cli_text_corpus(const char *text) {
    if (n_prompts == (int)(sizeof prompts / sizeof *prompts)) return NULL;
    size_t n = strlen(AL_CORPUS_TEXT) + strlen(text) + 1;
    char *s = malloc(n);
    if (!s) return NULL;
    snprintf(s, n, "%s%s", AL_CORPUS_TEXT, text);
    if (!n_prompts) atexit(free_prompts);
    prompts[n_prompts++] = s;
    return s;
}

const cli_opt CLI_FRAMING_OPTS[] = {
    {CLI_O_BOS, "--bos", NULL,
     "(also --bos on|off) BOS first in the text (decoders; default: the\n"
     "model's own: tokenizer_config.json add_bos_token / the tokenizer.json\n"
     "template, GGUF tokenizer.ggml.add_bos_token; GPT-2 none); recorded"},
    {CLI_O_NO_BOS, "--no-bos", NULL, "no BOS (--bos off)"},
    {CLI_O_WRAP, "--wrap", NULL,
     "(also --wrap on|off) encoders: each window is [CLS] + L - 2 corpus\n"
     "tokens + [SEP] (the default: L counts the two)"},
    {CLI_O_NO_WRAP, "--no-wrap", NULL, "encoders: bare windows of corpus tokens (--wrap off)"},
    CLI_OPT_END,
};

int cli_switch_take(cli_parser *p, int on, int off, int id, int *dst) {
    if (id != on && id != off) return 0;
    *dst = id == on ? 1 : 2;
    const char *v = id == on && p->i + 1 < p->argc ? p->argv[p->i + 1] : NULL;
    if (!v || v[0] == '-') return 1; /* the bare switch */
    p->i++;                          /* --NAME on|off, --NAME=on|off */
    if (!strcmp(v, "on") || !strcmp(v, "off")) {
        *dst = v[1] == 'n' ? 1 : 2;
        return 1;
    }
    const char *name = p->opt ? p->opt + 2 : "?";
    return cli_parse_error(p, "--%s '%s': expected on or off (or --%s / --no-%s)", name, v, name,
                           name);
}

int cli_framing_take(cli_parser *p, int id, int *bos, int *wrap) {
    int r = cli_switch_take(p, CLI_O_BOS, CLI_O_NO_BOS, id, bos);
    return r ? r : cli_switch_take(p, CLI_O_WRAP, CLI_O_NO_WRAP, id, wrap);
}

int cli_is_prompt(const char *corpus) {
    return corpus && !strncmp(corpus, AL_CORPUS_TEXT, strlen(AL_CORPUS_TEXT));
}

char **cli_split_equals(int argc, char **argv, int *out_argc, char ***owned) {
    char **out = calloc((size_t)argc * 2 + 1, sizeof *out);
    char **own = calloc((size_t)argc + 1, sizeof *own);
    if (!out || !own) {
        free(out);
        free(own);
        return NULL;
    }
    int k = 0, o = 0;
    for (int i = 0; i < argc; i++) {
        char *a = argv[i], *eq = a[0] == '-' && a[1] == '-' ? strchr(a, '=') : NULL;
        char *name = i > 0 && eq && eq > a + 2 ? strndup(a, (size_t)(eq - a)) : NULL;
        if (name) {
            out[k++] = own[o++] = name;
            out[k++] = eq + 1;
        } else
            out[k++] = a;
    }
    *out_argc = k;
    *owned = own;
    return out;
}

void *cli_malloc(size_t n, const char *what, al_error *err) {
    void *p = malloc(n ? n : 1);
    if (!p) al_error_set(err, AL_E_NOMEM, "out of memory: %zu bytes for %s", n, what);
    return p;
}

void *cli_calloc(size_t count, size_t size, const char *what, al_error *err) {
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (!p)
        al_error_set(err, AL_E_NOMEM, "out of memory: %zu x %zu bytes for %s", count, size, what);
    return p;
}

int cli_parse_double(const char *s, const char *what, double *out, al_error *err) {
    return al_parse_double(s, what, out, err); /* the library's number policy */
}

int cli_parse_int(const char *s, const char *what, long lo, long hi, long *out, al_error *err) {
    if (!s || !*s) return al_error_set(err, AL_E_INVALID, "%s: empty value", what);
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (*end != 0 || end == s)
        return al_error_set(err, AL_E_INVALID, "%s: '%s' is not an integer", what, s);
    if (errno == ERANGE || v < lo || v > hi)
        return al_error_set(err, AL_E_RANGE, "%s: %s is outside %ld..%ld", what, s, lo, hi);
    *out = v;
    return 0;
}

int cli_parse_u64(const char *s, const char *what, uint64_t *out, al_error *err) {
    if (!s || !*s) return al_error_set(err, AL_E_INVALID, "%s: empty value", what);
    uint64_t v = 0;
    for (const char *p = s; *p; p++) {
        unsigned d = (unsigned)(unsigned char)*p - '0';
        if (d > 9 || v > (UINT64_MAX - d) / 10)
            return al_error_set(err, d > 9 ? AL_E_INVALID : AL_E_RANGE,
                                "%s: '%s' is not an integer in [0, 2^64 - 1]", what, s);
        v = v * 10 + d;
    }
    *out = v;
    return 0;
}

/* One item of an integer list at p: N or N-M (strtol numbers). Returns 0 with [*a, *b] and *end
 * just past the item, or an error code with the message. */
static int int_item(const char *p, const char *what, int item, long *a, long *b, const char **end,
                    al_error *err) {
    char *e;
    if (*p == ',' || *p == 0)
        return al_error_set(err, AL_E_INVALID, "%s: item %d is empty (%s)", what, item,
                            *p == 0     ? "a comma at the end"
                            : item == 1 ? "a comma at the start"
                                        : "two commas in a row");
    errno = 0;
    *a = strtol(p, &e, 10);
    if (e == p) goto bad;
    if (errno == ERANGE) goto big;
    *b = *a;
    if (*e == '-') {
        const char *q = e + 1;
        errno = 0;
        *b = strtol(q, &e, 10);
        if (e == q) goto bad;
        if (errno == ERANGE) goto big;
        if (*b < *a)
            return al_error_set(err, AL_E_INVALID, "%s: item %d: the range %ld-%ld runs backwards",
                                what, item, *a, *b);
    }
    if (*e != ',' && *e != 0) goto bad;
    if (*a < -2147483647L || *b > 2147483647L) goto big;
    *end = e;
    return 0;
bad:;
    const char *stop = p;
    while (*stop && *stop != ',') stop++;
    return al_error_set(
        err, AL_E_INVALID,
        "%s: item %d, '%.*s', is not an integer N or a range N-M (e.g. 1,5,10 or 1-16,18)", what,
        item, (int)(stop - p > 64 ? 64 : stop - p), p);
big:
    return al_error_set(err, AL_E_RANGE, "%s: item %d is outside the int range", what, item);
}

int cli_parse_int_list(const char *s, const char *what, int **out, int *n, al_error *err) {
    *out = NULL;
    *n = 0;
    if (!s || !*s) return al_error_set(err, AL_E_INVALID, "%s: empty list", what);
    /* first pass: check every item and the expanded length (before any allocation) */
    long long total = 0;
    int item = 1;
    for (const char *p = s;; item++) {
        long a = 0, b = -1;
        const char *end = p;
        int rc = int_item(p, what, item, &a, &b, &end, err);
        if (rc) return rc;
        total += (long long)b - a + 1;
        if (total > CLI_MAX_LIST)
            return al_error_set(err, AL_E_RANGE,
                                "%s: the list expands to more than %d entries (item %d%s%ld-%ld)",
                                what, CLI_MAX_LIST, item, a == b ? "" : ", the range ", a, b);
        if (*end == 0) break;
        p = end + 1;
    }
    int *v = malloc((size_t)total * sizeof *v);
    if (!v) return al_error_set(err, AL_E_NOMEM, "%s: out of memory", what);
    size_t cnt = 0;
    for (const char *p = s;;) {
        long a = 0, b = -1;
        const char *end = p;
        int_item(p, what, 1, &a, &b, &end, NULL); /* checked above */
        for (long x = a; x <= b; x++) v[cnt++] = (int)x;
        if (*end == 0) break;
        p = end + 1;
    }
    *out = v;
    *n = (int)cnt;
    return 0;
}

int cli_parse_double_list(const char *s, const char *what, double **out, int *n, al_error *err) {
    *out = NULL;
    *n = 0;
    if (!s || !*s) return al_error_set(err, AL_E_INVALID, "%s: empty list", what);
    al_array a;
    int rc = cli_parse_numbers(s, strlen(s), what, &a, err);
    if (rc) return rc;
    if (a.ndim != 1) {
        al_array_free(&a);
        return al_error_set(err, AL_E_INVALID, "%s: expected one list of numbers", what);
    }
    *out = a.data; /* f64, malloc'ed (posix_memalign: free() is fine) */
    *n = (int)a.shape[0];
    return 0;
}

int cli_parse_numbers(const char *text, size_t len, const char *name, al_array *out,
                      al_error *err) {
    return al_parse_numbers(text, len, name, out, err);
}

/* All the numbers of a text in order, one 1-D array: lines may hold different counts, all
 * else is cli_parse_numbers's. The text is parsed with its newlines made spaces; then each
 * line that could be judged otherwise alone (one with a comma: empty fields are per line), or
 * every line after a failure, is parsed alone, and the first bad one is reported by parsing
 * the text up to it with the earlier lines blanked (newlines kept: the message names it). */
static int parse_flat(const char *text, size_t len, const char *name, al_array *out,
                      al_error *err) {
    char *t = malloc(len + 1);
    if (!t) return al_error_set(err, AL_E_NOMEM, "%s: out of memory", name);
    for (size_t i = 0; i < len; i++) t[i] = text[i] == '\n' ? ' ' : text[i];
    t[len] = 0;
    int rc = cli_parse_numbers(t, len, name, out, err);
    int check = rc == AL_E_FORMAT || rc == AL_E_RANGE || (rc == 0 && memchr(text, ',', len));
    for (size_t start = 0; check && start < len;) {
        const char *nl = memchr(text + start, '\n', len - start);
        size_t end = nl ? (size_t)(nl - text) : len;
        al_array row;
        int r = 0;
        if (rc || memchr(text + start, ',', end - start)) {
            r = cli_parse_numbers(text + start, end - start, name, &row, NULL);
            if (r == 0) al_array_free(&row);
        }
        if (r != 0 && r != AL_E_INVALID) { /* (AL_E_INVALID: a line without numbers) */
            if (rc == 0) al_array_free(out);
            for (size_t i = 0; i < end; i++) t[i] = (i < start && text[i] != '\n') ? ' ' : text[i];
            rc = cli_parse_numbers(t, end, name, out, err);
            break;
        }
        start = end + 1;
    }
    free(t);
    return rc;
}

static int read_input(const char *path, int flat, al_array *out, al_error *err) {
    const char *name = (!path || strcmp(path, "-") == 0) ? "<stdin>" : path;
    char *buf = NULL;
    size_t n = 0;
    int rc = al_read_file(path ? path : "-", ((size_t)1 << 36) - 2, &buf, &n, err);
    if (rc) return rc;

    if (n == 0) {
        free(buf);
        return al_error_set(err, AL_E_INVALID, "%s: empty %s", name,
                            strcmp(name, "<stdin>") ? "file" : "input");
    }
    /* .npy: by the name, by the first byte (a text file cannot start with 0x93), or by bytes no
     * text of numbers holds (NUL and other control characters): a bad magic is named as such */
    size_t nl = strlen(name);
    int npy = (nl >= 4 && strcasecmp(name + nl - 4, ".npy") == 0) || (unsigned char)buf[0] == 0x93;
    for (size_t i = 0; i < n && !npy; i++) {
        unsigned char c = (unsigned char)buf[i];
        npy = (c < 0x20 && c != '\t' && c != '\n' && c != '\r' && c != '\v' && c != '\f') ||
              c == 0x7f;
    }
    if (npy) {
        al_array raw;
        rc = al_npy_parse(buf, n, name, &raw, err);
        if (rc == 0) {
            rc = al_array_to_f64(&raw, out, err);
            al_array_free(&raw);
        }
        if (rc == 0) { /* NaN/Inf are refused here, naming the file and the position */
            const double *v = out->data;
            int64_t cnt = al_array_numel(out);
            for (int64_t i = 0; i < cnt; i++)
                if (!isfinite(v[i])) {
                    rc = al_error_set(err, AL_E_RANGE, "%s: element %lld (flat, 0-based) is %s",
                                      name, (long long)i, isnan(v[i]) ? "NaN" : "infinite");
                    al_array_free(out);
                    break;
                }
        }
    } else {
        size_t bom =
            n >= 3 && !memcmp(buf, "\xef\xbb\xbf", 3) ? 3 : 0; /* a UTF-8 byte-order mark */
        rc = (flat ? parse_flat : cli_parse_numbers)(buf + bom, n - bom, name, out, err);
    }
    free(buf);
    if (rc == 0 && al_array_numel(out) == 0) { /* (a .npy of shape (0,), (0, 3), (2, 0), ...) */
        char shape[64 + 24 * AL_MAX_DIMS];
        size_t k = 0;
        for (int i = 0; i < out->ndim; i++)
            k += (size_t)snprintf(shape + k, sizeof shape - k, "%s%lld", i ? ", " : "",
                                  (long long)out->shape[i]);
        shape[k] = 0;
        rc = al_error_set(err, AL_E_INVALID, "%s: empty array (shape (%s%s)): no numbers", name,
                          shape, out->ndim == 1 ? "," : "");
        al_array_free(out);
    }
    return rc;
}

const char *cli_input_name(const char *path) {
    return (!path || strcmp(path, "-") == 0) ? "<stdin>" : path;
}

int cli_read_array(const char *path, al_array *out, al_error *err) {
    return read_input(path, 0, out, err);
}
int cli_read_flat(const char *path, al_array *out, al_error *err) {
    return read_input(path, 1, out, err);
}

void cli_print_json(cJSON *obj, int pretty) {
    char *s = al_json_print(obj, pretty);
    if (s) {
        fputs(s, stdout);
        fputc('\n', stdout);
        free(s);
    }
    cJSON_Delete(obj);
}

cJSON *cli_json_num(double v) {
    return isfinite(v) ? cJSON_CreateNumber(v) : cJSON_CreateNull();
}

cJSON *cli_json_array_d(const double *v, int64_t n) {
    cJSON *a = cJSON_CreateArray();
    for (int64_t i = 0; i < n; i++) cJSON_AddItemToArray(a, cli_json_num(v[i]));
    return a;
}

int cli_read_rows(const char *input, al_array *out, al_error *err) {
    int rc = cli_read_array(input, out, err);
    if (rc) return rc;
    if (out->ndim != 1 && out->ndim != 2) {
        int nd = out->ndim;
        al_array_free(out);
        return al_error_set(err, AL_E_INVALID,
                            "%s: expected a 1-D row or 2-D rows of logits, got %d dimensions",
                            cli_input_name(input), nd);
    }
    return 0;
}

void cli_row_error(const char *input, const al_array *a, int64_t row, al_error *err) {
    char m[sizeof err->msg];
    if (a->ndim == 2)
        snprintf(m, sizeof m, "%s: row %lld: %s", cli_input_name(input), (long long)row, err->msg);
    else
        snprintf(m, sizeof m, "%s: %s", cli_input_name(input), err->msg);
    memcpy(err->msg, m, sizeof m);
}

int cli_parse_sel(const char *s, const char *what, int n, uint8_t *mask, al_error *err) {
    if (!s || strcmp(s, "all") == 0) {
        memset(mask, 1, (size_t)n);
        return 0;
    }
    int *v, nv;
    int rc = cli_parse_int_list(s, what, &v, &nv, err);
    if (rc) return rc;
    memset(mask, 0, (size_t)n);
    for (int i = 0; i < nv; i++) {
        if (v[i] < 0 || v[i] >= n) {
            int bad = v[i];
            free(v);
            return al_error_set(err, AL_E_RANGE, "%s: %d is outside 0..%d", what, bad, n - 1);
        }
        mask[v[i]] = 1;
    }
    free(v);
    return 0;
}

const cli_opt CLI_ATTN_OPTS[] = {
    {CLI_O_ATTENTION, "--attention", "R",
     "the attention inside the forward, in every layer (later layers see\n"
     "the change): dense (default), topk:K, topk-frac:F (K = ceil(F L)),\n"
     "topk-sqrt:C (ceil(C sqrt n)), topk-log:C (ceil(C ln n)): each query\n"
     "row of n keys keeps its min(n, K) largest logits (ties: lower index)"},
    {CLI_O_ATTENTION_NORMALIZER, "--attention-normalizer", "M",
     "over the kept logits: softmax (default), sparsemax,\n"
     "entmax15, entmax:A, ssmax[:S]"},
    {CLI_O_ATTENTION_LAYERS, "--attention-layers", "LIST", "the layers modified (default all)"},
    {CLI_O_ATTENTION_HEADS, "--attention-heads", "LIST", "the query heads modified (default all)"},
    CLI_OPT_END,
};

const char CLI_NORMALIZER_MOVED[] =
    "--normalizer is reproduce's and diagnose's re-normalisation of captured logits; the "
    "normalizer inside the model's forward is --attention-normalizer M (docs/guidelines.md)";

int cli_attn_arg(const char *a, const char *v, al_attn_spec *s, int *lists[2], al_error *err) {
    al_attn_variant probe = {0};
    al_norm nm;
    if (!strcmp(a, "--attention")) {
        s->rule = v;
        return al_attn_rule_parse(v, &probe, err) ? -1 : 1;
    }
    if (!strcmp(a, "--attention-normalizer")) {
        s->normalizer = v;
        return al_attn_norm_parse(v, &nm, err) ? -1 : 1;
    }
    int which = !strcmp(a, "--attention-layers") ? 0 : !strcmp(a, "--attention-heads") ? 1 : -1;
    if (which < 0) return 0;
    free(lists[which]);
    lists[which] = NULL;
    int n = 0;
    if (!v || strcmp(v, "all") != 0) {
        if (cli_parse_int_list(v, a, &lists[which], &n, err)) return -1;
    }
    if (which == 0)
        s->layers = lists[0], s->n_layers = n;
    else
        s->heads = lists[1], s->n_heads = n;
    return 1;
}
