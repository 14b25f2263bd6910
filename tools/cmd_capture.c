/* cmd_capture.c: attnlim capture: runs a model over one window and writes the requested
 * per-layer arrays as DIR/layer{l}.{what}.npy plus DIR/manifest.json.
 *
 * The arrays stream from the forward's observer straight to .npy files in a temporary
 * directory inside DIR; only after the whole run succeeded are they renamed into DIR,
 * manifest.json last. A failed run removes its temporary files and leaves DIR as it was. */
#include "cli.h"
#include "internal.h"
#include "ops.h"
#include "progress.h"
#include "run_tokens.h"

#include <cblas.h>
#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const struct {
    const char *name;
    unsigned bit;
} WHAT[] = {{"q", AL_CAP_Q},
            {"k", AL_CAP_K},
            {"v", AL_CAP_V},
            {"logits", AL_CAP_LOGITS},
            {"weights", AL_CAP_WEIGHTS},
            {"hidden", AL_CAP_HIDDEN},
            {"embed", AL_CAP_EMBED}};
#define N_WHAT ((int)(sizeof WHAT / sizeof WHAT[0]))

static void usage(FILE *f) {
    fprintf(f,
            "usage: attnlim capture --model PATH (--tokens FILE | --corpus NAME) --length L\n"
            "                       [--window K] [--layers 0,3,5-7|all] [--heads 0-3|all]\n"
            "                       [--what q,k,v,logits,weights,hidden,embed] --out DIR\n"
            "                       [--threads N] [--json]\n"
            "\n"
            "Runs the model over window K (tokens [K L, (K+1) L), default 0) and writes, for each\n"
            "selected layer l, DIR/layer{l}.{what}.npy (float32):\n"
            "  q, k, v   [n_heads, L, d_head]  selected heads (k, v: the key/value head each\n"
            "                                  query head reads)\n"
            "  logits    [n_heads, L, L]       q.k / sqrt(d_head); masked entries -inf\n"
            "  weights   [n_heads, L, L]       softmax rows; masked entries 0\n"
            "  hidden    [L, d_model]          the layer input after its first norm\n"
            "  embed     [L, d_model]          the model input (token + position embedding)\n"
            "and DIR/manifest.json (model and its SHA-256, tokens and their source hash, window,\n"
            "options, versions, timings). Files appear only when the whole run succeeded.\n"
            "  --tokens FILE   token ids separated by whitespace\n"
            "  --corpus NAME   war-and-peace (METHOD section 1) or a text file, tokenized with\n"
            "                  the model's tokenizer\n"
            "  --what LIST     default: weights\n"
            "  --threads N     compute threads (default: all cores, or OMP_NUM_THREADS)\n"
            "  --json          print the manifest on stdout\n");
}

typedef struct capture_run {
    char tmpdir[4096]; /* DIR/.capture-<pid>.tmp */
    char (*files)[64]; /* [n_files] names written into tmpdir */
    int n_files, cap_files;
    cJSON *jfiles; /* manifest entries */
    double write_s;
    al__progress prog;
} capture_run;

static int add_file(capture_run *r, const char *name, al_error *err) {
    if (r->n_files == r->cap_files) {
        int cap = r->cap_files ? 2 * r->cap_files : 64;
        char(*nf)[64] = realloc(r->files, (size_t)cap * sizeof *nf);
        if (!nf) return al__err(err, AL_E_NOMEM, "out of memory");
        r->files = nf, r->cap_files = cap;
    }
    snprintf(r->files[r->n_files++], 64, "%s", name);
    return 0;
}

/* The observer: each requested array of this layer goes to its .npy file. */
static int write_layer(void *user, const al_capture *c, al_error *err) {
    capture_run *r = user;
    double t0 = al__now();
    const float *arr[N_WHAT] = {c->q, c->k, c->v, c->logits, c->weights, c->hidden, c->embed};
    for (int i = 0; i < N_WHAT; i++) {
        if (!arr[i]) continue;
        al_array a = {.dtype = AL_F32, .data = (void *)arr[i]};
        if (i < 3)
            a.ndim = 3, a.shape[0] = c->n_sel, a.shape[1] = c->T, a.shape[2] = c->d_head;
        else if (i < 5)
            a.ndim = 3, a.shape[0] = c->n_sel, a.shape[1] = c->T, a.shape[2] = c->T;
        else
            a.ndim = 2, a.shape[0] = c->T, a.shape[1] = c->d_model;
        char name[64], path[4096 + 80];
        snprintf(name, sizeof name, "layer%d.%s.npy", c->layer, WHAT[i].name);
        snprintf(path, sizeof path, "%s/%s", r->tmpdir, name);
        int rc = add_file(r, name, err);
        if (!rc) rc = al_npy_write(path, &a, err);
        if (rc) return rc;
        cJSON *f = cJSON_CreateObject();
        cJSON_AddStringToObject(f, "file", name);
        cJSON_AddNumberToObject(f, "layer", c->layer);
        cJSON_AddStringToObject(f, "what", WHAT[i].name);
        cJSON *shape = cJSON_AddArrayToObject(f, "shape");
        for (int d = 0; d < a.ndim; d++)
            cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)a.shape[d]));
        cJSON_AddItemToArray(r->jfiles, f);
    }
    r->write_s += al__now() - t0;
    char status[64];
    snprintf(status, sizeof status, "layer %d", c->layer);
    al__progress_add(&r->prog, 1, status);
    return 0;
}

/* Removes the temporary directory and what it holds (only our own files). */
static void remove_tmp(capture_run *r) {
    if (!r->tmpdir[0]) return;
    DIR *d = opendir(r->tmpdir);
    if (d) {
        struct dirent *e;
        char path[4096 + 300];
        while ((e = readdir(d)))
            if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
                snprintf(path, sizeof path, "%s/%s", r->tmpdir, e->d_name);
                unlink(path);
            }
        closedir(d);
    }
    rmdir(r->tmpdir);
    r->tmpdir[0] = 0;
}

/* "all" or a list of indices in [0, n): mask[n] */
static int parse_sel(const char *s, const char *what, int n, uint8_t *mask, al_error *err) {
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
            return al__err(err, AL_E_RANGE, "%s: %d is outside 0..%d", what, bad, n - 1);
        }
        mask[v[i]] = 1;
    }
    free(v);
    return 0;
}

static int parse_what(const char *s, unsigned *out, al_error *err) {
    *out = 0;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", s);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        int found = 0;
        for (int i = 0; i < N_WHAT; i++)
            if (strcmp(tok, WHAT[i].name) == 0) *out |= WHAT[i].bit, found = 1;
        if (!found)
            return al__err(err, AL_E_INVALID,
                           "--what: unknown item '%s' (q, k, v, logits, weights, hidden, embed)",
                           tok);
    }
    if (!*out) return al__err(err, AL_E_INVALID, "--what: empty list");
    return 0;
}

static cJSON *mask_json(const uint8_t *mask, int n) {
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < n; i++)
        if (mask[i]) cJSON_AddItemToArray(a, cJSON_CreateNumber(i));
    return a;
}

/* The model file's SHA-256 (for an HF directory: its model.safetensors, or the shard index). */
static int model_sha256(al_model *m, char hex[65], al_error *err) {
    const al_model_info *in = al_model_get_info(m);
    struct stat st;
    if (stat(in->path, &st) == 0 && S_ISDIR(st.st_mode)) {
        char p[4096 + 64];
        snprintf(p, sizeof p, "%s/model.safetensors", in->path);
        if (access(p, R_OK) != 0)
            snprintf(p, sizeof p, "%s/model.safetensors.index.json", in->path);
        return al_sha256_file(p, hex, err);
    }
    int rc = al_model_hash(m, err);
    if (!rc) memcpy(hex, in->sha256, 65);
    return rc;
}

static cJSON *model_json(const al_model_info *in, const char *sha) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "path", in->path);
    cJSON_AddStringToObject(o, "sha256", sha);
    cJSON_AddStringToObject(o, "family", in->family);
    cJSON_AddStringToObject(o, "name", in->name);
    cJSON_AddStringToObject(o, "dtype", in->dtype);
    cJSON_AddNumberToObject(o, "n_layer", in->n_layer);
    cJSON_AddNumberToObject(o, "n_head", in->n_head);
    cJSON_AddNumberToObject(o, "n_kv_head", in->n_kv_head);
    cJSON_AddNumberToObject(o, "d_model", in->d_model);
    cJSON_AddNumberToObject(o, "d_head", in->d_head);
    cJSON_AddNumberToObject(o, "n_ctx", in->n_ctx);
    cJSON_AddNumberToObject(o, "vocab_size", in->vocab_size);
    cJSON_AddBoolToObject(o, "causal", in->causal);
    cJSON_AddNumberToObject(o, "n_params", (double)in->n_params);
    return o;
}

int cmd_capture(int argc, char **argv) {
    const char *model = NULL, *tokens = NULL, *corpus = NULL, *layers_s = NULL, *heads_s = NULL;
    const char *what_s = "weights", *out = NULL;
    long window = 0, length = -1, threads = 0;
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
            return cli_usage_error("capture", "unknown argument or missing value: '%s'", a);
        } else if (!strcmp(a, "--model")) {
            model = argv[++i];
        } else if (!strcmp(a, "--tokens")) {
            tokens = argv[++i];
        } else if (!strcmp(a, "--corpus")) {
            corpus = argv[++i];
        } else if (!strcmp(a, "--layers")) {
            layers_s = argv[++i];
        } else if (!strcmp(a, "--heads")) {
            heads_s = argv[++i];
        } else if (!strcmp(a, "--what")) {
            what_s = argv[++i];
        } else if (!strcmp(a, "--out")) {
            out = argv[++i];
        } else if (!strcmp(a, "--window")) {
            if (cli_parse_int(argv[++i], "--window", 0, 1L << 40, &window, &err))
                return cli_usage_error("capture", "%s", err.msg);
        } else if (!strcmp(a, "--length")) {
            if (cli_parse_int(argv[++i], "--length", -(1L << 40), 1L << 40, &length, &err))
                return cli_usage_error("capture", "%s", err.msg);
            have_length = 1;
        } else if (!strcmp(a, "--threads")) {
            if (cli_parse_int(argv[++i], "--threads", 1, 1024, &threads, &err))
                return cli_usage_error("capture", "%s", err.msg);
        } else {
            return cli_usage_error("capture", "unknown option '%s'", a);
        }
    }
    if (!model) return cli_usage_error("capture", "--model PATH is required");
    if (!out) return cli_usage_error("capture", "--out DIR is required");
    if (!have_length) return cli_usage_error("capture", "--length L is required");
    if (!!tokens == !!corpus)
        return cli_usage_error("capture", "give exactly one of --tokens FILE and --corpus NAME");
    if (length < 1) return cli_usage_error("capture", "--length %ld: at least 1 token", length);
    unsigned what;
    if (parse_what(what_s, &what, &err)) return cli_usage_error("capture", "%s", err.msg);
    if (threads) al__set_threads((int)threads);

    double t_start = al__now();
    al_model *m = NULL;
    run_tokens tk = {0};
    capture_run run = {0};
    uint8_t *layers = NULL, *heads = NULL;
    cJSON *man = NULL;
    int rc = al_model_open(model, &m, &err);
    if (rc) return cli_fail("capture", &err);
    const al_model_info *info = al_model_get_info(m);
    double t_loaded = al__now();
    const int32_t *win = NULL;
    if (length > info->n_ctx) {
        rc = al__err(&err, AL_E_INVALID, "--length %ld exceeds the context of %s (%d tokens)",
                     length, info->path, info->n_ctx);
        goto done;
    }
    layers = al__calloc((size_t)info->n_layer, 1, "layer mask", &err);
    heads = al__calloc((size_t)info->n_head, 1, "head mask", &err);
    if (!layers || !heads) {
        rc = AL_E_NOMEM;
        goto done;
    }
    if ((rc = parse_sel(layers_s, "--layers", info->n_layer, layers, &err))) goto done;
    if ((rc = parse_sel(heads_s, "--heads", info->n_head, heads, &err))) goto done;
    if ((rc = run_tokens_load(m, tokens, corpus, &tk, &err))) goto done;
    if ((rc = run_tokens_window(&tk, info, window, length, &win, &err))) goto done;
    double t_hash0 = al__now();
    char sha[65];
    if ((rc = model_sha256(m, sha, &err))) goto done;
    double hash_s = al__now() - t_hash0;

    /* the output directory and our temporary directory inside it */
    if ((rc = al__mkdirs(out, &err))) goto done;
    snprintf(run.tmpdir, sizeof run.tmpdir, "%s/.capture-%ld.tmp", out, (long)getpid());
    if (mkdir(run.tmpdir, 0777) != 0) {
        rc = al__err(&err, AL_E_IO, "%s: cannot create a temporary directory: %s", run.tmpdir,
                     strerror(errno));
        run.tmpdir[0] = 0;
        goto done;
    }
    run.jfiles = cJSON_CreateArray();

    int n_sel_layers = 0;
    for (int l = 0; l < info->n_layer; l++) n_sel_layers += layers[l];
    al__progress_begin(&run.prog, isatty(2), stderr, n_sel_layers);
    al_capture_request req = {
        .what = what, .layers = layers, .heads = heads, .fn = write_layer, .user = &run};
    double t_fwd0 = al__now();
    rc = al_model_forward(m, win, (int)length, &req, NULL, NULL, &err);
    double fwd_total = al__now() - t_fwd0;
    al__progress_end(&run.prog);
    if (rc) goto done;

    /* the manifest */
    man = cJSON_CreateObject();
    cJSON_AddStringToObject(man, "command", "capture");
    cJSON *ver = cJSON_AddObjectToObject(man, "versions");
    cJSON_AddStringToObject(ver, "attnlim", al_version());
    cJSON_AddStringToObject(ver, "openblas", openblas_get_config());
    cJSON_AddItemToObject(man, "model", model_json(info, sha));
    cJSON *src = cJSON_AddObjectToObject(man, "tokens");
    cJSON_AddStringToObject(src, tk.from_corpus ? "corpus" : "file", tk.source);
    cJSON_AddStringToObject(src, "sha256", tk.sha256);
    cJSON_AddStringToObject(src, "sha256_of",
                            tk.from_corpus ? "corpus text (bytes given to the tokenizer)"
                                           : "token ids file");
    cJSON_AddNumberToObject(src, "n_tokens", (double)tk.n);
    cJSON_AddNumberToObject(man, "window", (double)window);
    cJSON_AddNumberToObject(man, "length", (double)length);
    cJSON_AddNumberToObject(man, "first_token", (double)window * (double)length);
    cJSON *ids = cJSON_AddArrayToObject(man, "token_ids");
    for (long t = 0; t < length; t++) cJSON_AddItemToArray(ids, cJSON_CreateNumber(win[t]));
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
    cJSON_AddNumberToObject(opt, "threads", al__get_threads());
    cJSON_AddItemToObject(man, "files", run.jfiles);
    run.jfiles = NULL;
    cJSON *tm = cJSON_AddObjectToObject(man, "timings_s");
    cJSON_AddNumberToObject(tm, "load_model", t_loaded - t_start);
    cJSON_AddNumberToObject(tm, "tokens", tk.seconds);
    cJSON_AddNumberToObject(tm, "hash_model", hash_s);
    cJSON_AddNumberToObject(tm, "forward", fwd_total - run.write_s);
    cJSON_AddNumberToObject(tm, "write", run.write_s);
    cJSON_AddNumberToObject(tm, "total", al__now() - t_start);
    char *text = cJSON_Print(man);
    char tmp_manifest[4096 + 32], path[4096 + 80];
    snprintf(tmp_manifest, sizeof tmp_manifest, "%s/manifest.json", run.tmpdir);
    rc = text ? al__write_file_atomic(tmp_manifest, text, strlen(text), &err)
              : al__err(&err, AL_E_NOMEM, "out of memory writing the manifest");
    free(text);
    if (rc) goto done;

    /* commit: every array, then the manifest */
    for (int i = 0; i <= run.n_files && !rc; i++) {
        const char *name = i < run.n_files ? run.files[i] : "manifest.json";
        char from[4096 + 80];
        snprintf(from, sizeof from, "%s/%s", run.tmpdir, name);
        snprintf(path, sizeof path, "%s/%s", out, name);
        if (rename(from, path) != 0)
            rc = al__err(&err, AL_E_IO, "%s: cannot move into place: %s", path, strerror(errno));
    }
    if (rc) goto done;
    if (json) {
        cJSON_AddStringToObject(man, "out", out);
        cli_print_json(man, 0);
        man = NULL;
    } else {
        printf("wrote %d arrays and manifest.json to %s (forward %.3f s, writing %.3f s)\n",
               run.n_files, out, fwd_total - run.write_s, run.write_s);
    }

done:
    remove_tmp(&run);
    cJSON_Delete(run.jfiles);
    cJSON_Delete(man);
    free(run.files);
    free(layers);
    free(heads);
    run_tokens_free(&tk);
    al_model_free(m);
    return rc ? cli_fail("capture", &err) : 0;
}
