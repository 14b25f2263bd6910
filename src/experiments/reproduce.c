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
#include "experiments.h"

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

/* ---- al_reproduce
 * ---------------------------------------------------------------------------------------- */

int al_reproduce(const al_repro_opts *opts, al_error *err) {
    return al_reproduce_dist(opts, NULL, err);
}

/* Over several processes (dist.h): rank 0 reads the corpus, holds the lock, decides what
 * --resume reuses, writes every output and prints; every rank runs the forwards and computes
 * the heads it owns. Every collective step below is reached by every rank or by none: an error
 * on any rank is agreed on (al__dist_agree) and stops all of them at the same step. */
int al_reproduce_dist(const al_repro_opts *opts, al_dist *dist, al_error *err) {
    double t_start = al__now();
    char started[32];
    al__ex_now_iso(started, sizeof started);
    al_repro_opts o = *opts;
    int rank = al__dist_rank(dist), root = rank == 0, rc = 0;
    if (!root) o.quiet = 1, o.progress = 0;
    if (!o.corpus) o.corpus = "war-and-peace";
    char picked[64] = "";
    if (root) {
        if (!o.out_dir) rc = al__err(err, AL_E_INVALID, "no output directory (--out)");
        if (!rc) rc = al__mkdirs(o.out_dir, err);
        if (!rc && !o.model && !(rc = al_repro_pick_model(picked, sizeof picked, err)) && !o.quiet)
            fprintf(stderr, "attnlim reproduce: no --model given; using the best available: %s\n",
                    picked);
    }
    if ((rc = al__dist_agree(dist, rc, err)) ||
        (rc = al__dist_bcast(dist, picked, sizeof picked, err)))
        return rc;
    if (!o.model) o.model = picked;
    cJSON *run_opts = NULL;
    int lock_fd = -1;
    al_model *m = NULL;
    al_tokenizer *tk = NULL;
    char *text = NULL;
    int32_t *tokens = NULL;
    size_t n_tokens = 0, text_len = 0;
    plan p;
    memset(&p, 0, sizeof p);
    agg a;
    memset(&a, 0, sizeof a);
    const int32_t *own = NULL; /* the model's own tokens (an attention dump), [n_own] */
    int n_own = 0, own_L = 0;
    char own_label[160] = "", wopt[32] = "";
    const al_model_info *mi = NULL;
    char corpus_sha[65] = "";
    /* rank 0 opens the model first: a known name fetched on first use is in place before the
     * other ranks open it */
    if (root) rc = al_model_open(o.model, &m, err);
    if ((rc = al__dist_agree(dist, rc, err))) goto done;
    if (!root && (rc = al_model_open(o.model, &m, err))) goto setup_end;
    if (!o.quiet && o.progress)
        fprintf(stderr, "attnlim reproduce: hashing %s\n", al_model_get_info(m)->path);
    if ((rc = al_model_hash(m, err))) goto setup_end;
    mi = al_model_get_info(m);
    if (o.windows > 1) snprintf(wopt, sizeof wopt, "--windows %d", o.windows);
    if ((rc = al__ex_own_tokens_opts(m, opts->corpus, wopt[0] ? wopt : NULL, &o, &own_L, &own,
                                     &n_own, own_label, sizeof own_label, err)) ||
        (rc = al__ex_build_plan(&p, &o, mi, err)) ||
        (n_own && (rc = al__ex_own_tokens_preflight(&p, m, err))))
        goto setup_end;
    p.dist = dist;
    p.rank = rank;
    p.size = al__dist_size(dist);
    if (!root) goto setup_end; /* rank 0 alone: the corpus, the lock, --resume's check, run.json */
    if (n_own) /* a dump's tokens: the corpus identity is the SHA-256 of the int32 ids */
        al_sha256_buf(own, sizeof(int32_t) * (size_t)n_own, corpus_sha);
    else if ((rc = al_model_tokenizer(m, &tk, err)) ||
             (rc = al_corpus_load(o.corpus, o.data_path, &text, &text_len, err)))
        goto setup_end;
    if (!n_own) al_sha256_buf(text, text_len, corpus_sha);
    /* fingerprint of what changes the numbers */
    {
        char buf[2048];
        snprintf(buf, sizeof buf, "attnlim-repro-1|%s|%s|%s|%s|%s|seed%llu|mc%d|T", mi->sha256,
                 corpus_sha, al_vectors_name(o.vectors), o.normalizer ? o.normalizer : "-",
                 al_version(), (unsigned long long)o.seed, o.mc_samples);
        size_t k = strlen(buf);
        for (int i = 0; i < p.nT && k < sizeof buf - 40; i++)
            k += (size_t)snprintf(buf + k, sizeof buf - k, ",%.17g", p.T[i]);
        for (int i = 0; i < p.nE && k < sizeof buf - 40; i++)
            k += (size_t)snprintf(buf + k, sizeof buf - k, "|%.17g", p.eps[i]);
        al_sha256_buf(buf, strlen(buf), p.fingerprint);
    }
    /* one run at a time in OUT; --resume only over saved results of the same options (checked
     * before the costly tokenization) */
    if ((rc = al__ex_lock_out_dir(o.out_dir, &lock_fd, err))) goto setup_end;
    if (!(run_opts = al__ex_run_options(&p, mi, corpus_sha))) {
        rc = al__err(err, AL_E_NOMEM, "out of memory (run options)");
        goto setup_end;
    }
    if (o.resume && (rc = al__ex_check_run_options(&p, run_opts, err))) goto setup_end;
    if (!n_own)
        rc = al_tokenize(tk, text, text_len, 0, &tokens, &n_tokens, err);
    else if (!(tokens = al__malloc(sizeof(int32_t) * (size_t)n_own, "tokens", err)))
        rc = AL_E_NOMEM;
    else
        memcpy(tokens, own, sizeof(int32_t) * (size_t)n_own), n_tokens = (size_t)n_own;
    if (rc) goto setup_end;
    {
        int maxL = 0;
        for (int i = 0; i < p.n_jobs; i++)
            if (p.jobs[i].L > maxL) maxL = p.jobs[i].L;
        if ((size_t)o.windows * (size_t)maxL > n_tokens) {
            rc = al__err(err, AL_E_INVALID, "%s: %zu tokens, but %d window(s) of L = %d need %zu",
                         o.corpus, n_tokens, o.windows, maxL, (size_t)o.windows * maxL);
            goto setup_end;
        }
    }
    for (size_t i = 0; i < n_tokens; i++)
        if (tokens[i] < 0 || tokens[i] >= mi->vocab_size) {
            rc = al__err(err, AL_E_INVALID,
                         "%s: token id %d at %zu is outside the model's vocabulary of %d", o.corpus,
                         tokens[i], i, mi->vocab_size);
            goto setup_end;
        }
    /* temp files of interrupted runs removed (the lock says no other run is writing them);
     * partial/run.json anew */
    {
        char pdir[4200], path[4300];
        snprintf(pdir, sizeof pdir, "%s/partial", o.out_dir);
        if ((rc = al__ex_sweep_dir(o.out_dir, 0, &p.n_swept, err)) ||
            (rc = al__ex_sweep_dir(pdir, 1, &p.n_swept, err)))
            goto setup_end;
        if (p.n_swept && !o.quiet)
            fprintf(stderr,
                    "attnlim reproduce: removed %d temporary file(s) an interrupted run left in "
                    "%s\n",
                    p.n_swept, o.out_dir);
        char *txt = cJSON_Print(run_opts);
        snprintf(path, sizeof path, "%s/run.json", pdir);
        if (!txt) rc = al__err(err, AL_E_NOMEM, "out of memory (run options)");
        if (!rc) rc = al__mkdirs(pdir, err);
        if (!rc) rc = al__write_file_atomic(path, txt, strlen(txt), err);
        free(txt);
        if (rc) goto setup_end;
    }
setup_end:
    if ((rc = al__dist_agree(dist, rc, err))) goto done;
    /* every rank: rank 0's model identity and tokens */
    {
        char sha0[65];
        uint64_t nt = n_tokens;
        memcpy(sha0, mi->sha256, sizeof sha0);
        if (!(rc = al__dist_bcast(dist, sha0, sizeof sha0, err)) && strcmp(sha0, mi->sha256))
            rc = al__err(err, AL_E_INVALID,
                         "%s: this model (sha256 %.16s...) is not rank 0's (sha256 %.16s...): "
                         "every rank must open the same model",
                         mi->path, mi->sha256, sha0);
        if (!rc) rc = al__dist_bcast(dist, &nt, sizeof nt, err);
        if (!rc && !root &&
            !(tokens = al__malloc(sizeof(int32_t) * (size_t)(nt ? nt : 1), "tokens", err)))
            rc = AL_E_NOMEM;
        if (!(rc = al__dist_agree(dist, rc, err)))
            rc = al__dist_agree(dist, al__dist_bcast(dist, tokens, sizeof(int32_t) * nt, err), err);
        n_tokens = (size_t)nt;
        if (rc) goto done;
    }
    /* run the jobs (largest L first: the ETA settles early) */
    {
        al__progress pg;
        double total = 0;
        for (int i = 0; i < p.n_jobs; i++) total += al__ex_job_units(&p.jobs[i]);
        al__progress_begin(&pg, o.progress && !o.quiet, stderr, total);
        int tk_alg[6];
        const char *tn[6] = {"van", "alg1", "alg2", "alg3", "alg4", "alg5"};
        for (int e = 0; e < 6; e++) {
            int cnt = 0;
            for (int i = 0; i < p.n_jobs; i++) {
                job *j = &p.jobs[i];
                int uses = (e == 1 || e == 3) ? j->in_lengths : j->is_long;
                cnt += uses && (p.exp & (1u << e));
            }
            tk_alg[e] = (p.exp & (1u << e)) ? al__progress_task(&pg, tn[e], cnt) : -1;
        }
        int *order = al__malloc(sizeof(int) * (size_t)(p.n_jobs ? p.n_jobs : 1), "job order", err);
        uint8_t *todo =
            order ? al__calloc((size_t)(p.n_jobs ? p.n_jobs : 1), 1, "jobs", err) : NULL;
        if ((rc = al__dist_agree(dist, todo ? 0 : AL_E_NOMEM, err))) {
            free(order);
            al__progress_end(&pg);
            goto done;
        }
        for (int i = 0; i < p.n_jobs; i++) order[i] = i;
        for (int i = 1; i < p.n_jobs; i++) /* insertion sort by L descending */
            for (int k = i; k > 0 && p.jobs[order[k]].L > p.jobs[order[k - 1]].L; k--) {
                int t = order[k];
                order[k] = order[k - 1];
                order[k - 1] = t;
            }
        char stale[160] = "";
        /* rank 0 decides which jobs to run (--resume loads the others); every rank learns it */
        for (int q = 0; q < p.n_jobs && root; q++) {
            job *j = &p.jobs[order[q]];
            int got = o.resume ? al__ex_load_job(&p, j) : 0;
            if (got == 1) {
                j->loaded = 1;
                p.n_reused++;
            } else {
                todo[order[q]] = 1;
                if (got < 0) {
                    size_t k = strlen(stale);
                    if (k < 120)
                        snprintf(stale + k, sizeof stale - k, "%sw%d_L%d", k ? ", " : "", j->window,
                                 j->L);
                    else if (!strstr(stale, "..."))
                        snprintf(stale + k, sizeof stale - k, ", ...");
                    p.n_stale++;
                }
            }
        }
        rc = al__dist_agree(dist, al__dist_bcast(dist, todo, (size_t)p.n_jobs, err), err);
        for (int q = 0; q < p.n_jobs && !rc; q++) {
            job *j = &p.jobs[order[q]];
            if (!todo[order[q]]) {
                al__progress_add(&pg, al__ex_job_units(j), "resumed");
            } else {
                if ((rc = al__ex_run_job(&p, m, tokens, j, &pg, err))) break;
                if (root) rc = al__ex_save_job(&p, j, err);
                if ((rc = al__dist_agree(dist, rc, err))) break;
                p.n_recomputed++;
            }
            for (int e = 0; e < 6; e++) {
                int uses = (e == 1 || e == 3) ? j->in_lengths : j->is_long;
                if (uses && tk_alg[e] >= 0) al__progress_task_step(&pg, tk_alg[e]);
            }
        }
        free(order);
        free(todo);
        al__progress_end(&pg);
        if (!rc) rc = gather_ranks(&p, err);
        if (rc) goto done;
        if (o.resume && !o.quiet) {
            fprintf(stderr,
                    "attnlim reproduce: --resume: reused %d and computed %d of %d (window, L) "
                    "jobs in %s/partial",
                    p.n_reused, p.n_recomputed, p.n_jobs, o.out_dir);
            if (p.n_stale)
                fprintf(stderr, " (%d saved with other grids or options, or unreadable: %s)",
                        p.n_stale, stale);
            fprintf(stderr, "\n");
        }
    }
    /* aggregate and write (rank 0 alone) */
    if (!root) goto written;
    {
        al__summary *s = &a.s;
        s->out_dir = o.out_dir;
        snprintf(s->model_name, sizeof s->model_name, "%s", mi->name);
        snprintf(s->model_path, sizeof s->model_path, "%s", mi->path);
        snprintf(s->model_sha, sizeof s->model_sha, "%s", mi->sha256);
        if (!(s->model_json = al__model_json(m, o.model, 1, err))) {
            rc = err && err->code ? err->code : AL_E_NOMEM;
            goto written;
        }
        snprintf(s->family, sizeof s->family, "%s", mi->family);
        s->corpus = o.corpus;
        s->vectors = al_vectors_name(o.vectors);
        s->normalizer = o.normalizer ? o.normalizer : "softmax (the model's own weights)";
        s->synthetic = o.synthetic >= 0 ? o.synthetic : detect_synthetic(mi);
        s->sums_to_one = p.have_nm ? al_norm_sums_to_one(&p.nm) : 1;
        s->causal = mi->causal;
        s->n_layer = mi->n_layer;
        s->n_head = mi->n_head;
        s->d_head = mi->d_head;
        s->n_ctx = mi->n_ctx;
        s->windows = o.windows;
        s->long_L = p.long_L;
        s->quick = o.quick;
        s->n_tokens = (int64_t)n_tokens;
        s->experiments = p.exp;
        s->seed = o.seed;
        s->mc_samples = o.mc_samples;
        s->nL = p.nL;
        s->Ls = p.Ls;
        s->nN2 = p.nN2;
        s->N2 = p.N2;
        s->nN3 = p.nN3;
        s->N3 = p.N3;
        s->nN4 = p.nN4;
        s->N4 = p.N4;
        s->nT = p.nT;
        s->nE = p.nE;
        s->T = p.T;
        s->eps = p.eps;
        if ((rc = al__ex_aggregate(&p, &a, err))) goto written;
        char titles[6][160];
        if ((rc = al__ex_build_heatmaps(&p, &a, titles, err))) goto written;
        al__ex_verdicts(&a.s);
        double tw = 0, tf = 0, td = 0, tsp = 0, tse = 0, tv = 0;
        for (int i = 0; i < p.n_jobs; i++) {
            tw += p.jobs[i].t_wall;
            tf += p.jobs[i].t_forward;
            td += p.jobs[i].t_dist;
            tsp += p.jobs[i].t_sep;
            tse += p.jobs[i].t_sens;
            tv += p.jobs[i].t_van;
        }
        s->n_timings = 0;
        s->timing_name[s->n_timings] = "jobs_wall_s", s->timing_s[s->n_timings++] = tw;
        s->timing_name[s->n_timings] = "forward_cpu_s", s->timing_s[s->n_timings++] = tf;
        s->timing_name[s->n_timings] = "distance_alg1_alg2_alg3_cpu_s";
        s->timing_s[s->n_timings++] = td;
        s->timing_name[s->n_timings] = "separability_alg4_cpu_s", s->timing_s[s->n_timings++] = tsp;
        s->timing_name[s->n_timings] = "sensitivity_alg5_cpu_s", s->timing_s[s->n_timings++] = tse;
        s->timing_name[s->n_timings] = "vanishing_cpu_s", s->timing_s[s->n_timings++] = tv;
        double t_w0 = al__now();
        if (o.progress && !o.quiet)
            fprintf(stderr,
                    "attnlim reproduce: writing results.json, CSV, NPY, figures and reports\n");
        /* results.json goes last (an older one first): its presence means every output
         * beside it is complete and of this run */
        char rpath[4200];
        snprintf(rpath, sizeof rpath, "%s/results.json", o.out_dir);
        if (unlink(rpath) != 0 && errno != ENOENT) {
            rc = al__err(err, AL_E_IO, "%s: cannot replace: %s", rpath, strerror(errno));
            goto written;
        }
        if ((rc = al__ex_write_csvs(&p, &a, err))) goto written;
        if ((rc = al__ex_write_npys(&p, &a, err))) goto written;
        if ((rc = al__report_figures(s, err))) goto written;
        s->timing_name[s->n_timings] = "outputs_wall_s";
        s->timing_s[s->n_timings++] = al__now() - t_w0;
        s->seconds_total = al__now() - t_start;
        if ((rc = al__report_write(s, err))) goto written;
        if ((rc = al__ex_write_json(&p, &a, corpus_sha, started, err))) goto written;
    }
written:
    rc = al__dist_agree(dist, rc, err); /* every rank returns rank 0's status */
done:
    cJSON_Delete(run_opts);
    if (lock_fd >= 0) close(lock_fd);
    al__ex_free_agg(&a);
    al__ex_free_plan(&p);
    free(tokens);
    free(text);
    if (tk) al_tokenizer_free(tk);
    if (m) al_model_free(m);
    return rc;
}
