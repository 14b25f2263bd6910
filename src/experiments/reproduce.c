/* reproduce.c: `attnlim reproduce`, the paper's experiments end to end (METHOD sections 2-6);
 * the driver. The other files of src/experiments hold one concern each (experiments.h).
 *
 * Top-down:
 *   al_reproduce
 *     build_plan          grids and the (window, L) jobs: one forward per job
 *     lock_out_dir, check_run_options, sweep_dir   one run per OUT (flock); --resume only over
 *                         the same options (partial/run.json); temp files of killed runs removed
 *     run_job             forward with a capture request; observe() computes, for every head of
 *                         the layer in parallel, everything that job's L needs; results saved
 *                         atomically to OUT/partial/w{k}_L{L}/ (skipped on --resume)
 *     aggregate           window means per head, summaries over heads, KS / critical N, verdicts
 *     write_json/csv/npy  results.json, alg*.csv, *.npy
 *     al__report_figures / al__report_write (report.c)
 * Memory: one layer's capture at a time; per thread, one head's [L, L] weights and logits. */
#include "hooks.h"
#include "experiments.h"
#include "textsafe.h"

#include <errno.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- model and corpus
 * ------------------------------------------------------------------------------- */

/* Random weights? -1 auto: the config.json beside the checkpoint names attnlim's make-model. */
static int detect_synthetic(const al_model_info *mi) {
    if (strstr(mi->name, "random") || strstr(mi->name, "synthetic") ||
        strstr(mi->name, "make-model"))
        return 1;
    char dir[1024], path[1100];
    snprintf(dir, sizeof dir, "%s", mi->path);
    struct stat st;
    if (!(stat(dir, &st) == 0 && S_ISDIR(st.st_mode))) {
        char *slash = strrchr(dir, '/');
        if (slash)
            *slash = 0;
        else
            snprintf(dir, sizeof dir, ".");
    }
    snprintf(path, sizeof path, "%s/config.json", dir);
    char *txt = NULL;
    size_t len;
    al_error e = {0};
    if (al__read_file(path, 1 << 20, &txt, &len, &e)) return 0;
    int r = strstr(txt, "make-model") || strstr(txt, "make_model") || strstr(txt, "\"random\"") ||
            strstr(txt, "synthetic") || strstr(txt, "random weights");
    free(txt);
    return r;
}

/* Collective: every process's host, threads and CPU seconds so far, onto rank 0 (p->ranks). */
static int gather_ranks(plan *p, al_error *err) {
    rank_info me;
    memset(&me, 0, sizeof me); /* padding included: the bytes go over the wire */
    snprintf(me.host, sizeof me.host, "%s", al__dist_host(p->dist));
    me.cpu_s = al__ex_process_cpu();
    me.threads = p->o.threads > 0 ? p->o.threads : omp_get_max_threads();
    int rc = 0;
    if (p->rank == 0 && !(p->ranks = al__calloc((size_t)p->size, sizeof(rank_info), "ranks", err)))
        rc = AL_E_NOMEM;
    if ((rc = al__dist_agree(p->dist, rc, err))) return rc;
    return al__dist_agree(p->dist, al__dist_gather(p->dist, &me, sizeof me, p->ranks, err), err);
}

/* ---- al_reproduce: the run as phases
 * ---------------------------------------------------------------------------------------- */

/* One run of al_reproduce_dist: what its phases share. */
typedef struct run {
    al_repro_opts o; /* the options after the defaults (and a dump's grids) */
    const al_repro_opts *given;
    al_dist *dist;
    int rank, root;
    double t_start;
    char started[32], picked[64];
    cJSON *run_opts;
    int lock_fd;
    char made[4200]; /* the first directory of OUT's path that did not exist ("" none): a run
                      * that fails before writing into OUT removes it again, down from OUT */
    al_model *m;
    const al_model_info *mi;
    al_tokenizer *tk;
    char *text;
    size_t text_len;
    int32_t *tokens; /* [n_tokens] */
    size_t n_tokens;
    plan p;
    agg a;
    const int32_t *own; /* the model's own tokens (an attention dump), [n_own] */
    int n_own, own_L;
    char own_label[160], wopt[32];
    char corpus_sha[65];
    char titles[6][160]; /* the heatmaps' titles (a.s points at them) */
    char stale[160];     /* the jobs --resume found saved but stale */
    variant *var;        /* [n_var] --readings: the variants sharing the forward passes */
    int n_var;
    char *skipped; /* --readings all: "name: why" per line for each reading left out (heap) */
    al__reading_col *cols; /* [n_var + 1] the report's section */
    double *col_buf;
    char robust[512];
} run;

/* Every rank: the output directory named (rank 0; created once the inputs are read) and the
 * model rank 0 picked when none is given. */
static int run_start(run *r, al_error *err) {
    int rc = 0;
    if (r->root) {
        if (!r->o.out_dir) rc = al__err(err, AL_E_INVALID, "no output directory (--out)");
        if (!rc) rc = al__ex_check_reading_opts(&r->o, err);
        if (!rc && !r->o.model && !(rc = al_repro_pick_model(r->picked, sizeof r->picked, err)) &&
            !r->o.quiet)
            al__log(AL_LOG_NOTE,
                    "attnlim reproduce: no --model given; using the best available: %s", r->picked);
    }
    if ((rc = al__dist_agree(r->dist, rc, err)) ||
        (rc = al__dist_bcast(r->dist, r->picked, sizeof r->picked, err)))
        return rc;
    if (!r->o.model) r->o.model = r->picked;
    return 0;
}

/* The fingerprint of what changes the numbers (p->fingerprint) of plan p with options o. */
static void plan_fingerprint(const run *r, const al_repro_opts *o, plan *p) {
    char buf[2048];
    snprintf(buf, sizeof buf, "attnlim-repro-1|%s|%s|%s|%s|%s|seed%llu|mc%d|T", r->mi->sha256,
             r->corpus_sha, al_vectors_name(o->vectors), o->normalizer ? o->normalizer : "-",
             al_version(), (unsigned long long)o->seed, o->mc_samples);
    /* the readings of METHOD 9 other than vectors (their defaults add nothing: the
     * fingerprints of earlier runs stay valid for --resume); "fresh-f32": the fresh directions'
     * stream of session 25 (single-precision Box-Muller), so that --resume refuses the partials
     * of the earlier stream */
    if (o->distance || o->expectation || o->temperature_raw || o->fresh_directions)
        snprintf(buf + strlen(buf), sizeof buf - strlen(buf), "|%s|%s|x%lld|%s|%s",
                 al_distance_name(o->distance), al_expect_name(o->expectation),
                 (long long)(o->exact_max > 0 ? o->exact_max : AL_EXACT_MAX_DEFAULT),
                 o->temperature_raw ? "raw" : "scaled",
                 o->fresh_directions ? "fresh-f32" : "shared");
    size_t k = strlen(buf);
    for (int i = 0; i < p->nT && k < sizeof buf - 40; i++)
        k += (size_t)snprintf(buf + k, sizeof buf - k, ",%.17g", p->T[i]);
    for (int i = 0; i < p->nE && k < sizeof buf - 40; i++)
        k += (size_t)snprintf(buf + k, sizeof buf - k, "|%.17g", p->eps[i]);
    cJSON *att = al__attn_json(r->m); /* the attention inside the forward */
    char *att_s = att ? cJSON_PrintUnformatted(att) : NULL;
    if (att_s && k < sizeof buf) snprintf(buf + k, sizeof buf - k, "|%s", att_s);
    free(att_s);
    cJSON_Delete(att);
    /* the windows (BOS first, an encoder's [CLS] ... [SEP]) and --layers / --heads; their
     * defaults add nothing for a decoder (earlier runs' fingerprints stay valid) */
    const al_framing *f = &r->p.fr;
    k = strlen(buf);
    if ((f->bos || (f->encoder && f->wrap)) && k < sizeof buf - 16)
        k += (size_t)snprintf(buf + k, sizeof buf - k, "|%s", f->bos ? "bos" : "cls-sep");
    for (int i = 0; p->lmask && i < p->n_layer && k < sizeof buf - 8; i++)
        k += (size_t)snprintf(buf + k, sizeof buf - k, "%sl%d", i ? "" : "|", p->lmask[i]);
    for (int i = 0; p->hmask && i < p->n_head && k < sizeof buf - 8; i++)
        k += (size_t)snprintf(buf + k, sizeof buf - k, "%sh%d", i ? "" : "|", p->hmask[i]);
    al_sha256_buf(buf, strlen(buf), p->fingerprint);
}

static void run_fingerprint(run *r) {
    plan_fingerprint(r, &r->o, &r->p);
    for (int v = 0; v < r->n_var; v++) plan_fingerprint(r, &r->var[v].o, &r->var[v].p);
}

/* --readings: the variants' plans, checked before any work. An explicit list refuses a reading
 * that does not apply (exact over the cap, mc without samples, vectors the model does not give);
 * "all" leaves it out, saying why in r->skipped. */
/* Appends "name: why\n" to *list (heap, grown as needed; newlines in why become spaces). */
static int skip_add(char **list, const char *name, const char *why) {
    size_t n = *list ? strlen(*list) : 0, add = strlen(name) + strlen(why) + 4;
    char *t = realloc(*list, n + add);
    if (!t) return -1;
    snprintf(t + n, add, "%s: %s\n", name, why);
    for (char *c = t + n; c[1]; c++)
        if (*c == '\n') *c = ' ';
    *list = t;
    return 0;
}

static int run_variants(run *r, al_error *err) {
    int rc = al__ex_readings_variants(&r->o, &r->var, &r->n_var, err);
    if (rc) return rc;
    int all = r->o.readings && !strcmp(r->o.readings, "all"), k = 0;
    for (int i = 0; i < r->n_var; i++) {
        variant *v = &r->var[i];
        al_error e = {0};
        int bad = 0;
        if (!v->o.experiments)
            bad = al__err(&e, AL_E_INVALID, "none of the experiments it changes was run");
        if (!bad) bad = al__ex_build_plan(&v->p, &v->o, r->mi, r->rank, &e);
        v->p.m = r->m;
        if (!bad && v->p.n_jobs == 0)
            bad = al__err(&e, AL_E_INVALID, "its experiments have no length to run at");
        if (!bad && r->n_own) bad = al__ex_own_tokens_preflight(&v->p, r->m, &e);
        if (bad && !all) {
            al__ex_free_plan(&v->p);
            memset(&v->p, 0, sizeof v->p);
            if (err) *err = e;
            return al__err_prefix(err, bad, "--readings %s", v->name);
        }
        if (bad) {
            if (skip_add(&r->skipped, v->name, e.msg))
                return al__err(err, AL_E_NOMEM, "out of memory (--readings %s)", v->name);
            al__ex_free_plan(&v->p);
            memset(&v->p, 0, sizeof v->p);
            continue;
        }
        v->p.dist = r->dist;
        v->p.rank = r->rank;
        v->p.size = al__dist_size(r->dist);
        if (k != i) r->var[k] = *v;
        k++;
    }
    r->n_var = k;
    for (int i = 0; i < k; i++) /* the structs moved: their own directory again */
        r->var[i].o.out_dir = r->var[i].p.o.out_dir = r->var[i].out_dir;
    return 0;
}

/* Rank 0: enough tokens for every window of every L, each inside the model's vocabulary. */
static int run_check_tokens(const run *r, al_error *err) {
    int maxL = 0;
    for (int i = 0; i < r->p.n_jobs; i++)
        if (r->p.jobs[i].L > maxL) maxL = r->p.jobs[i].L;
    long body = al_framing_body(&r->p.fr, maxL), minL = maxL;
    for (int i = 0; i < r->p.n_jobs; i++)
        if (r->p.jobs[i].L < minL) minL = r->p.jobs[i].L;
    if (al_framing_body(&r->p.fr, minL) < 1)
        return al__err(err, AL_E_INVALID,
                       "L = %ld: an encoder window [CLS] ... [SEP] needs L >= 3 (L counts the "
                       "two; --no-wrap for bare windows)",
                       minL);
    if ((size_t)r->o.windows * (size_t)body > r->n_tokens)
        return al__err(err, AL_E_INVALID, "%s: %zu tokens, but %d window(s) of L = %d need %zu%s",
                       r->o.corpus, r->n_tokens, r->o.windows, maxL, (size_t)r->o.windows * body,
                       body < maxL ? " (L - 2 per window, between [CLS] and [SEP])" : "");
    for (size_t i = 0; i < r->n_tokens; i++)
        if (r->tokens[i] < 0 || r->tokens[i] >= r->mi->vocab_size)
            return al__err(err, AL_E_INVALID,
                           "%s: token id %d at %zu is outside the model's vocabulary of %d",
                           r->o.corpus, r->tokens[i], i, r->mi->vocab_size);
    return 0;
}

/* Rank 0: the temp files of interrupted runs removed (the lock says no other run is writing
 * them); partial/run.json anew. */
static int run_sweep(run *r, al_error *err) {
    char pdir[4200], path[4300];
    snprintf(pdir, sizeof pdir, "%s/partial", r->o.out_dir);
    int rc;
    if ((rc = al__ex_sweep_dir(r->o.out_dir, 0, &r->p.n_swept, err)) ||
        (rc = al__ex_sweep_dir(pdir, 1, &r->p.n_swept, err)))
        return rc;
    if (r->p.n_swept && !r->o.quiet)
        al__log(AL_LOG_NOTE,
                "attnlim reproduce: removed %d temporary file(s) an interrupted run left in %s",
                r->p.n_swept, r->o.out_dir);
    char *txt = al__json_print(r->run_opts, 1);
    snprintf(path, sizeof path, "%s/run.json", pdir);
    if (!txt) rc = al__err(err, AL_E_NOMEM, "out of memory (run options)");
    if (!rc) rc = al__mkdirs(r->o.out_dir, err); /* OUT itself (a reading's is nested) */
    if (!rc) rc = al__mkdir_own(pdir, err);      /* partial/: not through a planted link */
    if (!rc) rc = al__write_file_atomic(path, txt, strlen(txt), err);
    free(txt);
    return rc;
}

/* The shortest prefix of path (at a '/') that does not exist into made[cap] ("" when path
 * exists). */
static void first_missing(const char *path, char *made, size_t cap) {
    struct stat st;
    made[0] = 0;
    if (lstat(path, &st) == 0 || strlen(path) >= cap) return;
    snprintf(made, cap, "%s", path);
    for (char *e = strrchr(made, '/'); e && e > made; e = strrchr(made, '/')) {
        *e = 0;
        if (lstat(made, &st) == 0) { /* made + '/' ... is the first missing one */
            *e = '/';
            e[1 + strcspn(e + 1, "/")] = 0;
            return;
        }
    }
    made[strcspn(made, "/")] = 0; /* a relative path: its first component */
    if (!made[0]) snprintf(made, cap, "%s", path);
}

/* Removes the empty directories from path up to made (what mkdirs created; only empty ones:
 * nothing written is lost). */
static void remove_made(const char *path, const char *made) {
    char p[4200];
    snprintf(p, sizeof p, "%s", path);
    size_t n = strlen(made);
    while (strlen(p) >= n && rmdir(p) == 0 && strlen(p) > n) {
        char *e = strrchr(p, '/');
        if (!e) break;
        *e = 0;
    }
}

/* Rank 0: the corpus and its identity, the lock on OUT, --resume's check (before the costly
 * tokenization), the tokens, the sweep. */
static int run_setup_root(run *r, al_error *err) {
    al_repro_opts *o = &r->o;
    int rc;
    if (r->n_own) /* a dump's tokens: the corpus identity is the SHA-256 of the int32 ids */
        al_sha256_buf(r->own, sizeof(int32_t) * (size_t)r->n_own, r->corpus_sha);
    else if ((!r->tk && (rc = al_model_tokenizer(r->m, &r->tk, err))) ||
             (rc = al_framing_make(r->tk, al__ex_switch(o->bos), al__ex_switch(o->wrap), &r->p.fr,
                                   err)
                       ? al__err_prefix(err, AL_E_INVALID, "%s", r->mi->path)
                       : 0) ||
             (!r->text && (rc = al_corpus_load(o->corpus, o->data_path, &r->text, &r->text_len,
                                               err)))) /* (--windows all loaded it already) */
        return rc;
    if (!r->n_own) al_sha256_buf(r->text, r->text_len, r->corpus_sha);
    run_fingerprint(r);
    /* OUT only now: a bad model, corpus or option leaves no empty directory behind (and one
     * found bad below, a corpus too short, removes the directory it made: run_free) */
    first_missing(o->out_dir, r->made, sizeof r->made);
    if ((rc = al__mkdirs(o->out_dir, err)) ||
        (rc = al__ex_lock_out_dir(o->out_dir, &r->lock_fd, err)))
        return rc;
    if (!(r->run_opts = al__ex_run_options(&r->p, r->mi, r->corpus_sha)))
        return al__err(err, AL_E_NOMEM, "out of memory (run options)");
    if (o->resume && (rc = al__ex_check_run_options(&r->p, r->run_opts, err))) return rc;
    if (!r->n_own) {
        free(r->tokens); /* --windows all counted the bare tokens: now framed */
        r->tokens = NULL;
        rc = al_framing_tokenize(r->tk, &r->p.fr, r->text, r->text_len, &r->tokens, &r->n_tokens,
                                 err);
    } else if (!(r->tokens = al__malloc(sizeof(int32_t) * (size_t)r->n_own, "tokens", err)))
        rc = AL_E_NOMEM;
    else
        memcpy(r->tokens, r->own, sizeof(int32_t) * (size_t)r->n_own),
            r->n_tokens = (size_t)r->n_own;
    if (rc || (rc = run_check_tokens(r, err))) return rc;
    return run_sweep(r, err);
}

/* --windows all (AL_WINDOWS_ALL): K = every window of the corpus at the longest L of the plan,
 * floor(tokens / L); rank 0 tokenizes the corpus (kept for its setup) and sends K to the others.
 * A dump's tokens refuse the option before (al__ex_own_tokens_opts). */
static int run_windows_all(run *r, al_error *err) {
    al_repro_opts o1 = r->o;
    o1.windows = 1;
    plan p1;
    int rc = al__ex_build_plan(&p1, &o1, r->mi, r->rank, err), maxL = 0;
    for (int i = 0; !rc && i < p1.n_jobs; i++) maxL = p1.jobs[i].L > maxL ? p1.jobs[i].L : maxL;
    al__ex_free_plan(&p1);
    int32_t K = 0;
    if (!rc && r->root) {
        rc = al_model_tokenizer(r->m, &r->tk, err);
        if (!rc) rc = al_corpus_load(r->o.corpus, r->o.data_path, &r->text, &r->text_len, err);
        if (!rc) rc = al_tokenize(r->tk, r->text, r->text_len, 0, &r->tokens, &r->n_tokens, err);
        if (!rc && maxL > 0)
            K = (int32_t)(r->n_tokens / (size_t)maxL > 100000 ? 100000
                                                              : r->n_tokens / (size_t)maxL);
        if (!rc && K < 1)
            rc = al__err(err, AL_E_INVALID,
                         "--windows all: %s has %zu tokens, not one window of L = %d",
                         r->o.corpus ? r->o.corpus : "war-and-peace", r->n_tokens, maxL);
    }
    if ((rc = al__dist_agree(r->dist, rc, err))) return rc;
    if ((rc = al__dist_bcast(r->dist, &K, sizeof K, err))) return rc;
    r->o.windows = (int)K;
    if (r->root && !r->o.quiet && r->o.progress)
        al__log(AL_LOG_NOTE, "attnlim reproduce: --windows all: %d windows of L = %d", (int)K,
                maxL);
    return 0;
}

/* Every rank: the model (rank 0 opens it first: a known name fetched on first use is in place
 * before the other ranks open it), its identity, the plan; then rank 0's setup. Returns the
 * status agreed over the ranks. */
static int run_setup(run *r, al_error *err) {
    int rc = r->root ? al_model_open(r->o.model, &r->m, err) : 0;
    if ((rc = al__dist_agree(r->dist, rc, err))) return rc;
    if (!r->root) rc = al_model_open(r->o.model, &r->m, err);
    if (!rc && !r->o.quiet && r->o.progress)
        al__log(AL_LOG_NOTE, "attnlim reproduce: hashing %s", al_model_get_info(r->m)->path);
    if (!rc) rc = al_model_hash(r->m, err);
    if (!rc) rc = al_model_set_attention_spec(r->m, &r->o.attention, err);
    if (!rc) {
        r->mi = al_model_get_info(r->m);
        if (r->o.windows > 1) snprintf(r->wopt, sizeof r->wopt, "--windows %d", r->o.windows);
        if (r->o.windows == AL_WINDOWS_ALL) snprintf(r->wopt, sizeof r->wopt, "--windows all");
        rc = al__ex_own_tokens_opts(r->m, r->given->corpus, r->wopt[0] ? r->wopt : NULL, &r->o,
                                    &r->own_L, &r->own, &r->n_own, r->own_label,
                                    sizeof r->own_label, err);
    }
    if (!rc && r->o.windows == AL_WINDOWS_ALL) rc = run_windows_all(r, err);
    if (!rc) rc = al__ex_build_plan(&r->p, &r->o, r->mi, r->rank, err);
    r->p.m = r->m;
    if (!rc && r->n_own) rc = al__ex_own_tokens_preflight(&r->p, r->m, err);
    if (!rc) rc = run_variants(r, err);
    if (!rc) {
        r->p.dist = r->dist;
        r->p.rank = r->rank;
        r->p.size = al__dist_size(r->dist);
        if (r->root) rc = run_setup_root(r, err);
    }
    return al__dist_agree(r->dist, rc, err);
}

/* Collective: every rank checks it opened rank 0's model (the SHA-256 identity). Not agreed:
 * the caller agrees on the status. */
int al__ex_same_model(al_dist *dist, const al_model_info *mi, al_error *err) {
    char sha0[65];
    memcpy(sha0, mi->sha256, sizeof sha0);
    int rc = al__dist_bcast(dist, sha0, sizeof sha0, err);
    if (!rc && strcmp(sha0, mi->sha256))
        rc = al__err(err, AL_E_INVALID,
                     "%s: this model (identity %.16s...) is not rank 0's (identity %.16s...): "
                     "every rank must open the same model",
                     mi->path, mi->sha256, sha0);
    return rc;
}

/* Collective: every rank checks it opened rank 0's model and receives rank 0's tokens. */
static int run_share_tokens(run *r, al_error *err) {
    uint64_t nt = r->n_tokens;
    int32_t fr[4] = {r->p.fr.encoder, r->p.fr.wrap, r->p.fr.cls, r->p.fr.sep};
    int rc = al__ex_same_model(r->dist, r->mi, err);
    if (!rc) rc = al__dist_bcast(r->dist, &nt, sizeof nt, err);
    if (!rc) rc = al__dist_bcast(r->dist, fr, sizeof fr, err); /* how windows are framed */
    r->p.fr.encoder = fr[0], r->p.fr.wrap = fr[1], r->p.fr.cls = fr[2], r->p.fr.sep = fr[3];
    if (!rc && !r->root &&
        !(r->tokens = al__malloc(sizeof(int32_t) * (size_t)(nt ? nt : 1), "tokens", err)))
        rc = AL_E_NOMEM;
    if (!(rc = al__dist_agree(r->dist, rc, err)))
        rc = al__dist_agree(r->dist, al__dist_bcast(r->dist, r->tokens, sizeof(int32_t) * nt, err),
                            err);
    r->n_tokens = (size_t)nt;
    return rc;
}

/* Does job j feed experiment e (bit e of AL_EXP_*)? Algorithms 1 and 3 use the lengths, the
 * others the long L. */
static int job_feeds(const plan *p, const job *j, int e) {
    int uses = (e == 1 || e == 3) ? j->in_lengths : j->is_long;
    return uses && (p->exp & (1u << e));
}

/* The job of variant v with the (window, L) of j, or NULL. */
static job *variant_job(const variant *v, const job *j) {
    for (int i = 0; i < v->p.n_jobs; i++)
        if (v->p.jobs[i].window == j->window && v->p.jobs[i].L == j->L) return &v->p.jobs[i];
    return NULL;
}

/* A job's progress units with every reading's job of the same (window, L). */
static double units_all(const run *r, const job *j) {
    int with = 1;
    for (int v = 0; v < r->n_var; v++) with += variant_job(&r->var[v], j) != NULL;
    return al__ex_job_units(j) * with;
}

/* Rank 0: which jobs to run (todo[i] = 1), --resume loading the others; the stale ones named
 * in r->stale. order: the jobs by L descending. */

static void run_decide(run *r, const int *order, uint8_t *todo) {
    plan *p = &r->p;
    for (int q = 0; q < p->n_jobs; q++) {
        job *j = &p->jobs[order[q]];
        int got = r->o.resume ? al__ex_load_job(p, j) : 0;
        for (int v = 0; v < r->n_var && got == 1; v++) { /* every variant's job too */
            job *vj = variant_job(&r->var[v], j);
            if (vj && al__ex_load_job(&r->var[v].p, vj) != 1) got = 0;
        }
        if (got == 1) {
            j->loaded = 1;
            p->n_reused++;
            continue;
        }
        todo[order[q]] = 1;
        if (got < 0) {
            size_t k = strlen(r->stale);
            if (k < 120)
                snprintf(r->stale + k, sizeof r->stale - k, "%sw%d_L%d", k ? ", " : "", j->window,
                         j->L);
            else if (!strstr(r->stale, "..."))
                snprintf(r->stale + k, sizeof r->stale - k, ", ...");
            p->n_stale++;
        }
    }
}

/* Collective: the jobs rank 0 decided to run, in order (every rank computes its heads, rank 0
 * saves each job), with the progress bar and its per-experiment tasks. */
static int run_loop(run *r, const int *order, const uint8_t *todo, al__progress *pg,
                    al_error *err) {
    plan *p = &r->p;
    static const char *const tn[6] = {"van", "alg1", "alg2", "alg3", "alg4", "alg5"};
    int task[6], rc = 0;
    for (int e = 0; e < 6; e++) {
        int cnt = 0;
        for (int i = 0; i < p->n_jobs; i++) cnt += job_feeds(p, &p->jobs[i], e);
        task[e] = (p->exp & (1u << e)) ? al__progress_task(pg, tn[e], cnt) : -1;
    }
    for (int q = 0; q < p->n_jobs && !rc; q++) {
        job *j = &p->jobs[order[q]];
        if (al__cancelled()) rc = al__err(err, AL_E_CANCELLED, "interrupted");
        rc = al__dist_agree(r->dist, rc, err);
        if (rc) break;
        if (!todo[order[q]]) {
            al__progress_add(pg, units_all(r, j), "resumed");
        } else {
            /* between jobs the caller may stop the run (every saved job stays for --resume) */
            if ((rc = al__dist_agree(r->dist, al__poll("reproduce", q, p->n_jobs, err), err)))
                break;
            const plan *vp[64];
            job *vj[64];
            int nv = r->n_var < 64 ? r->n_var : 64;
            for (int v = 0; v < nv; v++) vp[v] = &r->var[v].p, vj[v] = variant_job(&r->var[v], j);
            if ((rc = al__ex_run_job(p, r->m, r->tokens, j, vp, vj, nv, pg, err))) break;
            if (r->root) rc = al__ex_save_job(p, j, err);
            for (int v = 0; v < nv && r->root && !rc; v++)
                if (vj[v]) rc = al__ex_save_job(vp[v], vj[v], err);
            if ((rc = al__dist_agree(r->dist, rc, err))) break;
            p->n_recomputed++;
        }
        for (int e = 0; e < 6; e++)
            if (job_feeds(p, j, e) && task[e] >= 0) al__progress_task_step(pg, task[e]);
    }
    return rc;
}

/* Collective: every job, largest L first (the ETA settles early); then the ranks' manifest. */
static int run_jobs(run *r, al_error *err) {
    plan *p = &r->p;
    al__progress pg;
    double total = 0;
    for (int i = 0; i < p->n_jobs; i++) total += units_all(r, &p->jobs[i]);
    al__progress_begin(&pg, r->o.quiet ? 0 : r->o.progress, stderr, total);
    int n = p->n_jobs ? p->n_jobs : 1;
    int *order = al__malloc(sizeof(int) * (size_t)n, "job order", err);
    uint8_t *todo = order ? al__calloc((size_t)n, 1, "jobs", err) : NULL;
    int rc = al__dist_agree(r->dist, todo ? 0 : AL_E_NOMEM, err);
    if (!rc) {
        for (int i = 0; i < p->n_jobs; i++) order[i] = i;
        for (int i = 1; i < p->n_jobs; i++) /* insertion sort by L descending */
            for (int k = i; k > 0 && p->jobs[order[k]].L > p->jobs[order[k - 1]].L; k--) {
                int t = order[k];
                order[k] = order[k - 1];
                order[k - 1] = t;
            }
        if (r->root) run_decide(r, order, todo);
        rc = al__dist_agree(r->dist, al__dist_bcast(r->dist, todo, (size_t)p->n_jobs, err), err);
    }
    if (!rc) rc = run_loop(r, order, todo, &pg, err);
    if (rc == AL_E_CANCELLED) { /* Ctrl-C: what is saved stays for --resume */
        al__err(err, AL_E_CANCELLED,
                "interrupted: %d of %d jobs saved in %s/partial; rerun with --resume",
                p->n_reused + p->n_recomputed, p->n_jobs, r->o.out_dir);
    }
    free(order);
    free(todo);
    al__progress_end(&pg);
    if (!rc) rc = gather_ranks(p, err);
    if (rc || !r->o.resume || r->o.quiet) return rc;
    char stale[400] = "";
    if (p->n_stale)
        snprintf(stale, sizeof stale,
                 " (%d recomputed: saved with other grids or options, unreadable, of another "
                 "shape, not finite where they must be, or not matching their checksum: %s)",
                 p->n_stale, r->stale);
    al__log(AL_LOG_NOTE,
            "attnlim reproduce: --resume: reused %d and computed %d of %d (window, L) jobs in "
            "%s/partial%s",
            p->n_reused, p->n_recomputed, p->n_jobs, r->o.out_dir, stale);
    return 0;
}

/* Rank 0: the summary's setup (what the report and results.json say about the run). */
static void run_timings(const plan *p, al__summary *s);

/* The report's "window framing" and "heads analysed" rows. */
static void summary_framing(const plan *p, al__summary *s) {
    const al_framing *f = &p->fr;
    if (strcmp(s->family, "dump"))
        snprintf(s->framing, sizeof s->framing, "%s",
                 f->encoder && f->wrap ? "[CLS] + L - 2 corpus tokens + [SEP] per window (L "
                                         "counts the two; --no-wrap: bare windows)"
                 : f->encoder          ? "bare windows of the corpus body (--no-wrap)"
                 : f->bos              ? "BOS first in the text: window 0 starts with it"
                                       : "no BOS (the tokenized text as it is)");
    if (f->bos_from && !f->encoder) {
        size_t k = strlen(s->framing);
        snprintf(s->framing + k, sizeof s->framing - k, "; the model's default: %s (%s)",
                 f->bos_default ? "BOS" : "no BOS", f->bos_from);
    }
    if (!p->lmask && !p->hmask) return;
    size_t k = 0;
    const uint8_t *mask[2] = {p->lmask, p->hmask};
    int count[2] = {p->n_layer, p->n_head};
    for (int m = 0; m < 2; m++) {
        k += (size_t)snprintf(s->selection + k, sizeof s->selection - k, "%s",
                              m ? "; heads " : "layers ");
        for (int i = 0, first = 1; i < count[m] && k < sizeof s->selection - 16; i++)
            if (!mask[m] || mask[m][i])
                k += (size_t)snprintf(s->selection + k, sizeof s->selection - k, "%s%d",
                                      first ? "" : ",", i),
                    first = 0;
    }
    snprintf(s->selection + k, sizeof s->selection - k,
             " (--layers/--heads: %d of %d heads; the others are NaN and left out)",
             p->n_sel_layers * p->n_sel_heads, p->H);
}

static int summary_fill(run *r, al__summary *s, const al_repro_opts *o, const plan *p,
                        al_error *err) {
    const al_model_info *mi = r->mi;
    s->out_dir = o->out_dir;
    snprintf(s->model_name, sizeof s->model_name, "%s", mi->name);
    snprintf(s->model_path, sizeof s->model_path, "%s", mi->path);
    snprintf(s->model_sha, sizeof s->model_sha, "%s", mi->sha256);
    if (!(s->model_json = al__model_json(r->m, o->model, 1, err)))
        return err && err->code ? err->code : AL_E_NOMEM;
    /* each layer's sliding window: the keys a row sees (METHOD's n) */
    cJSON_AddItemToObject(s->model_json, "sliding_window", al__ex_window_json(r->m));
    snprintf(s->family, sizeof s->family, "%s", mi->family);
    s->corpus = o->corpus;
    s->vectors = al_vectors_name(o->vectors);
    s->distance = al_distance_name(o->distance);
    s->expectation = al_expect_name(o->expectation);
    s->temperature_scale = o->temperature_raw ? "raw" : "scaled";
    s->directions = o->fresh_directions ? "fresh" : "shared";
    al_norm own; /* the model's own trained normalizer (an attnlim train checkpoint), if any */
    int has_own = al__model_own_norm(r->m, 0, 0, &own);
    s->normalizer = o->normalizer ? o->normalizer
                    : has_own ? "the model's own weights (its trained normalizer: model.attention)"
                              : "softmax (the model's own weights)";
    s->synthetic = o->synthetic >= 0 ? o->synthetic : detect_synthetic(mi);
    s->sums_to_one = p->have_nm ? al_norm_sums_to_one(&p->nm)
                     : has_own  ? al_norm_sums_to_one(&own)
                                : 1;
    s->causal = mi->causal;
    s->n_layer = mi->n_layer;
    s->n_head = mi->n_head;
    s->d_head = mi->d_head;
    s->n_ctx = mi->n_ctx;
    s->windows = o->windows;
    s->long_L = p->long_L;
    s->quick = o->quick;
    s->n_tokens = (int64_t)r->n_tokens;
    s->experiments = p->exp;
    s->seed = o->seed;
    s->mc_samples = o->mc_samples;
    s->nL = p->nL, s->Ls = p->Ls;
    s->nN2 = p->nN2, s->N2 = p->N2;
    s->nN3 = p->nN3, s->N3 = p->N3;
    s->nN4 = p->nN4, s->N4 = p->N4;
    s->nT = p->nT, s->nE = p->nE;
    s->T = p->T, s->eps = p->eps;
    summary_framing(p, s);
    return 0;
}

static int run_summary(run *r, al_error *err) {
    return summary_fill(r, &r->a.s, &r->o, &r->p, err);
}

/* Rank 0, --readings: each variant aggregated and judged, its results.json and NPYs in
 * OUT/readings/<name>; then OUT/readings.json and readings.csv, and the report's section. */
static int run_write_variants(run *r, al_error *err) {
    int rc = 0;
    for (int i = 0; i < r->n_var && !rc; i++) {
        variant *v = &r->var[i];
        v->p.fr = r->p.fr; /* the same windows */
        if ((rc = summary_fill(r, &v->a.s, &v->o, &v->p, err)) ||
            (rc = al__ex_aggregate(&v->p, &v->a, err)))
            break;
        al__ex_verdicts(&v->a.s);
        run_timings(&v->p, &v->a.s);
        if (r->p.ranks && !v->p.ranks &&
            (v->p.ranks = al__malloc(sizeof(rank_info) * (size_t)v->p.size, "ranks", err)))
            memcpy(v->p.ranks, r->p.ranks, sizeof(rank_info) * (size_t)v->p.size);
        if ((rc = al__mkdirs(v->out_dir, err)) || (rc = al__ex_write_npys(&v->p, &v->a, err)) ||
            (rc = al__ex_write_json(&v->p, &v->a, r->corpus_sha, r->started, err)))
            break;
    }
    if (!rc) rc = al__ex_write_readings(&r->p, &r->a, r->var, r->n_var, r->skipped, err);
    if (!rc)
        rc = al__ex_reading_cols(&r->p, &r->a, r->var, r->n_var, &r->cols, &r->col_buf, r->robust,
                                 sizeof r->robust, err);
    if (!rc) {
        r->a.s.n_readings = r->n_var + 1;
        r->a.s.readings = r->cols;
        r->a.s.robust = r->robust;
        r->a.s.readings_skipped = r->skipped;
    }
    return rc;
}

/* The jobs' times summed, into the summary's timings. */
static void run_timings(const plan *p, al__summary *s) {
    static const char *const names[6] = {"jobs_wall_s",
                                         "forward_cpu_s",
                                         "distance_alg1_alg2_alg3_cpu_s",
                                         "separability_alg4_cpu_s",
                                         "sensitivity_alg5_cpu_s",
                                         "vanishing_cpu_s"};
    double t[6] = {0, 0, 0, 0, 0, 0};
    for (int i = 0; i < p->n_jobs; i++) {
        const job *j = &p->jobs[i];
        t[0] += j->t_wall, t[1] += j->t_forward, t[2] += j->t_dist;
        t[3] += j->t_sep, t[4] += j->t_sens, t[5] += j->t_van;
    }
    for (int k = 0; k < 6; k++) {
        s->timing_name[k] = names[k];
        s->timing_s[k] = t[k];
    }
    s->n_timings = 6;
}

/* Rank 0: aggregate, judge, write. results.json goes last (an older one first): its presence
 * means every output beside it is complete and of this run. */
static int run_write(run *r, al_error *err) {
    al__summary *s = &r->a.s;
    int rc;
    if ((rc = run_summary(r, err)) || (rc = al__ex_aggregate(&r->p, &r->a, err)) ||
        (rc = al__ex_build_heatmaps(&r->p, &r->a, r->titles, err)))
        return rc;
    al__ex_verdicts(s);
    /* an attention dump runs no forward of its own choosing: its curves only (0 tokens) */
    if ((rc = al__ex_explorer_window(&r->p, r->m, r->tk, r->tokens, r->n_own ? 0 : r->n_tokens,
                                     &r->a, err)))
        return rc;
    run_timings(&r->p, s);
    if (r->o.readings && (rc = run_write_variants(r, err))) return rc;
    double t_w0 = al__now();
    if (r->o.progress && !r->o.quiet)
        al__log(AL_LOG_NOTE,
                "attnlim reproduce: writing results.json, CSV, NPY, figures and reports");
    char rpath[4200];
    snprintf(rpath, sizeof rpath, "%s/results.json", r->o.out_dir);
    if (unlink(rpath) != 0 && errno != ENOENT)
        return al__err(err, AL_E_IO, "%s: cannot replace: %s", rpath, strerror(errno));
    if ((rc = al__ex_write_csvs(&r->p, &r->a, err)) ||
        (rc = al__ex_write_npys(&r->p, &r->a, err)) ||
        (rc = al__ex_write_explorer(&r->p, &r->a, err)) || (rc = al__report_figures(s, err)))
        return rc;
    s->timing_name[s->n_timings] = "outputs_wall_s";
    s->timing_s[s->n_timings++] = al__now() - t_w0;
    s->seconds_total = al__now() - r->t_start;
    if ((rc = al__report_write(s, err))) return rc;
    return al__ex_write_json(&r->p, &r->a, r->corpus_sha, r->started, err);
}

static void run_free(run *r, int failed) {
    cJSON_Delete(r->run_opts);
    if (r->lock_fd >= 0) { /* removed while still held: no run is left out (partial.c) */
        char path[4200];
        snprintf(path, sizeof path, "%s/.attnlim-reproduce.lock", r->o.out_dir);
        unlink(path);
        close(r->lock_fd);
    }
    if (r->made[0] && failed) remove_made(r->o.out_dir, r->made);
    al__ex_free_agg(&r->a);
    al__ex_free_plan(&r->p);
    al__ex_free_variants(r->var, r->n_var);
    free(r->skipped);
    free(r->cols);
    free(r->col_buf);
    free(r->tokens);
    free(r->text);
    if (r->tk) al_tokenizer_free(r->tk);
    if (r->m) al_model_free(r->m);
}

int al_reproduce(const al_repro_opts *opts, al_error *err) {
    return al_reproduce_dist(opts, NULL, err);
}

/* Over several processes (dist.h): rank 0 reads the corpus, holds the lock, decides what
 * --resume reuses, writes every output and prints; every rank runs the forwards and computes
 * the heads it owns. Every collective step below is reached by every rank or by none: an error
 * on any rank is agreed on (al__dist_agree) and stops all of them at the same step. */
int al_reproduce_dist(const al_repro_opts *opts, al_dist *dist, al_error *err) {
    run r;
    memset(&r, 0, sizeof r);
    r.t_start = al__now();
    al__ex_now_iso(r.started, sizeof r.started);
    r.o = *opts;
    r.given = opts;
    r.dist = dist;
    r.rank = al__dist_rank(dist);
    r.root = r.rank == 0;
    r.lock_fd = -1;
    if (!r.root) r.o.quiet = 1, r.o.progress = 0;
    if (!r.o.corpus) r.o.corpus = "war-and-peace";
    int rc = run_start(&r, err);
    if (!rc) rc = run_setup(&r, err);
    if (!rc) rc = run_share_tokens(&r, err);
    if (!rc) rc = run_jobs(&r, err);
    /* the last chance to stop: once the outputs are being written they are written whole */
    if (!rc) rc = al__dist_agree(dist, al__poll("reproduce", r.p.n_jobs, r.p.n_jobs, err), err);
    if (!rc) rc = al__dist_agree(dist, r.root ? run_write(&r, err) : 0, err);
    run_free(&r, rc != 0);
    return rc;
}
