/* partial.c: partial results of `attnlim reproduce`: each job saved atomically to OUT/partial and
 * loaded on --resume; the lock on OUT, the sweep of temp files, the run's options. */
#include "experiments.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- partial results: save atomically, load on --resume
 * ------------------------------------------ */

int al__ex_job_arrays(const plan *p, job *j, named_arr *a) {
    int n = 0;
    int64_t H = p->H;
    a[n++] = (named_arr){"dtilde", j->dtilde, 2, {H, j->nd}};
    a[n++] = (named_arr){"dmax", j->dmax, 2, {H, j->nd}};
    a[n++] = (named_arr){"E", j->E, 2, {H, j->nd}};
    a[n++] = (named_arr){"E_mc", j->E_mc, 2, {H, j->nd}};
    a[n++] = (named_arr){"E_mc_se", j->E_mc_se, 2, {H, j->nd}};
    a[n++] = (named_arr){"ns_ratio", j->ns_ratio, 2, {H, j->ns}};
    a[n++] = (named_arr){"ns_lower", j->ns_lower, 2, {H, j->ns}};
    a[n++] = (named_arr){"ns_upper", j->ns_upper, 2, {H, j->ns}};
    if (j->want_van) {
        a[n++] = (named_arr){"van_max", j->vmax, 2, {H, j->L}};
        a[n++] = (named_arr){"van_entropy", j->vent, 2, {H, j->L}};
        a[n++] = (named_arr){"van_D", j->vD, 2, {H, j->L}};
    }
    if (j->want_sens) {
        a[n++] = (named_arr){"alg5_fd", j->fd, 2, {H, (int64_t)p->nT * p->nE}};
        a[n++] = (named_arr){"alg5_spec", j->spec, 2, {H, p->nT}};
    }
    return n;
}

static void job_dir(const plan *p, const job *j, char *out, size_t size) {
    snprintf(out, size, "%s/partial/w%d_L%d", p->o.out_dir, j->window, j->L);
}

static void job_key(const plan *p, const job *j, char hex[65]) {
    char buf[8192];
    int k = snprintf(buf, sizeof buf, "%s|w%d|L%d|nd", p->fingerprint, j->window, j->L);
    for (int i = 0; i < j->nd && k < (int)sizeof buf - 16; i++)
        k += snprintf(buf + k, sizeof buf - k, ",%d", j->Nd[i]);
    k += snprintf(buf + k, sizeof buf - k, "|ns");
    for (int i = 0; i < j->ns && k < (int)sizeof buf - 16; i++)
        k += snprintf(buf + k, sizeof buf - k, ",%d", j->Ns[i]);
    k += snprintf(buf + k, sizeof buf - k, "|v%d|s%d", j->want_van, j->want_sens);
    al_sha256_buf(buf, strlen(buf), hex);
}

/* SHA-256 over the arrays' bytes in order (the hex of each array's SHA-256, concatenated, hashed):
 * what --resume checks before it reuses a job (a changed, truncated or NaN-poisoned array is
 * recomputed) */
static void arrays_sha(const named_arr *a, int n, char hex[65]) {
    char cat[16 * 64 + 1];
    size_t k = 0;
    for (int i = 0; i < n && i < 16; i++, k += 64) {
        char h[65];
        al_sha256_buf(a[i].data, sizeof(double) * (size_t)(a[i].shape[0] * a[i].shape[1]), h);
        memcpy(cat + k, h, 64);
    }
    cat[k] = 0;
    al_sha256_buf(cat, k, hex);
}

int al__ex_save_job(const plan *p, const job *j, al_error *err) {
    char dir[4096], path[4200], key[65];
    job_dir(p, j, dir, sizeof dir);
    /* OUT/partial and OUT/partial/w{k}_L{L}: real directories of ours, never a planted link
     * (al__mkdir_own), so that no saved array is written through one */
    char pdir[4200];
    snprintf(pdir, sizeof pdir, "%s/partial", p->o.out_dir);
    int rc = al__mkdirs(p->o.out_dir, err); /* OUT itself (a reading's is nested) */
    if (!rc) rc = al__mkdir_own(pdir, err);
    if (!rc) rc = al__mkdir_own(dir, err);
    if (rc) return rc;
    /* an older marker goes first: arrays being replaced must never sit next to a done.json
     * (whose key a later --resume could match) */
    snprintf(path, sizeof path, "%s/done.json", dir);
    if (unlink(path) != 0 && errno != ENOENT)
        return al__err(err, AL_E_IO, "%s: cannot remove the old marker: %s", path, strerror(errno));
    named_arr a[16];
    int n = al__ex_job_arrays(p, (job *)j, a);
    for (int i = 0; i < n; i++) {
        al_array arr = {.dtype = AL_F64, .ndim = a[i].ndim, .data = a[i].data};
        arr.shape[0] = a[i].shape[0];
        arr.shape[1] = a[i].shape[1];
        snprintf(path, sizeof path, "%s/%s.npy", dir, a[i].name);
        if ((rc = al_npy_write(path, &arr, err))) return rc;
    }
    job_key(p, j, key);
    char sha[65];
    arrays_sha(a, n, sha);
    /* the marker goes last: a job counts as done only when every array is on disk */
    snprintf(path, sizeof path, "%s/done.json", dir);
    char buf[1024];
    int len = snprintf(buf, sizeof buf,
                       "{\"key\": \"%s\", \"arrays_sha256\": \"%s\", \"window\": %d, \"L\": %d, "
                       "\"t_wall\": %.6f, "
                       "\"t_forward\": %.6f, \"t_dist\": %.6f, "
                       "\"t_sep\": %.6f, \"t_sens\": %.6f, \"t_van\": %.6f}\n",
                       key, sha, j->window, j->L, j->t_wall, j->t_forward, j->t_dist, j->t_sep,
                       j->t_sens, j->t_van);
    return al__write_file_atomic(path, buf, (size_t)len, err);
}

/* Which entries of a saved array the plan computes, so that they must be finite whatever the
 * checksum says (a done.json rewritten to match is no proof; issue 12, class 10). NaN is the
 * "not computed" marker, so it is allowed only where the plan computes nothing: the heads left
 * out by --layers / --heads (every array's row is a head), a grid N that no row of the head
 * sees more than N keys for (N at or above a layer's sliding window), dmax under the other
 * distances and past the N the job reports it at (al__ex_bound_n), E_mc without Monte Carlo and
 * E_mc_se with fewer than 2 samples. +-Inf is never
 * allowed. Columns: grid N (distance and separability readings), row (vanishing), temperature
 * and eps (Algorithm 5). */
enum { COL_ND, COL_NS, COL_ALL };

static int col_kind(const char *name, const plan *p, int *kind) {
    static const char *const nd[] = {"dtilde", "E", "dmax", "E_mc", "E_mc_se"};
    static const char *const ns[] = {"ns_ratio", "ns_lower", "ns_upper"};
    static const char *const all[] = {"van_max", "van_entropy", "van_D", "alg5_fd", "alg5_spec"};
    const int need[5] = {1, 1, p->o.distance == AL_DIST_SUM_OF_NORMS, p->o.mc_samples > 0,
                         p->o.mc_samples > 1};
    for (int k = 0; k < 5; k++)
        if (!strcmp(name, nd[k])) return *kind = COL_ND, need[k];
    for (int k = 0; k < 3; k++)
        if (!strcmp(name, ns[k])) return *kind = COL_NS, 1;
    for (int k = 0; k < 5; k++)
        if (!strcmp(name, all[k])) return *kind = COL_ALL, 1;
    return *kind = COL_ALL, 0;
}

/* The most keys any row of head h sees in a window of L (METHOD's n: L, or a sliding window). */
static int64_t max_keys(const plan *p, int h, int64_t L) {
    int64_t m = 0;
    for (int64_t t = 0; t < L; t++) {
        int64_t n = al__ex_row_n(p, h, t, L);
        m = n > m ? n : m;
    }
    return m;
}

static int finite_where_needed(const plan *p, const job *j, const named_arr *a) {
    int kind, need = col_kind(a->name, p, &kind);
    /* dmax only up to the N the job reports it at (beyond, the metrics leave it NaN) */
    int64_t top = !strcmp(a->name, "dmax") ? al__ex_bound_n(p, j) : INT64_MAX;
    for (int64_t h = 0; h < a->shape[0]; h++) {
        int sel = need && h < p->H && al__ex_head_selected(p, (int)h);
        int64_t mk = sel && kind != COL_ALL ? max_keys(p, (int)h, j->L) : 0;
        for (int64_t c = 0; c < a->shape[1]; c++) {
            double x = a->data[h * a->shape[1] + c];
            int must =
                sel && (kind == COL_ALL || (kind == COL_ND && j->Nd[c] < mk && j->Nd[c] <= top) ||
                        (kind == COL_NS && j->Ns[c] < mk));
            if (isinf(x) || (must && !isfinite(x))) return 0;
        }
    }
    return 1;
}

/* 1: loaded; 0: not there; -1: saved but stale (another key, unreadable arrays, a shape or the
 * checksum of the arrays not the saved one, or a value not finite where it must be): recompute.
 * Errors in the files only make it stale. */
int al__ex_load_job(const plan *p, job *j) {
    char dir[4096], path[4200], key[65];
    job_dir(p, j, dir, sizeof dir);
    snprintf(path, sizeof path, "%s/done.json", dir);
    char *txt = NULL;
    size_t len;
    al_error e = {0};
    if (access(path, F_OK) != 0) return 0;
    if (al__read_file(path, 1 << 16, &txt, &len, &e)) return -1;
    cJSON *js = cJSON_Parse(txt);
    free(txt);
    if (!js) return -1;
    job_key(p, j, key);
    cJSON *k = cJSON_GetObjectItemCaseSensitive(js, "key");
    cJSON *sh = cJSON_GetObjectItemCaseSensitive(js, "arrays_sha256");
    int ok = cJSON_IsString(k) && !strcmp(k->valuestring, key) && cJSON_IsString(sh) &&
             strlen(sh->valuestring) == 64;
    char want_sha[65] = "";
    if (ok) snprintf(want_sha, sizeof want_sha, "%s", sh->valuestring);
    if (ok) {
        const char *names[6] = {"t_forward", "t_dist", "t_sep", "t_sens", "t_van", "t_wall"};
        double *dst[6] = {&j->t_forward, &j->t_dist, &j->t_sep, &j->t_sens, &j->t_van, &j->t_wall};
        for (int i = 0; i < 6; i++) {
            cJSON *v = cJSON_GetObjectItemCaseSensitive(js, names[i]);
            *dst[i] = cJSON_IsNumber(v) ? v->valuedouble : 0;
        }
    }
    cJSON_Delete(js);
    if (!ok) return -1;
    named_arr a[16];
    int n = al__ex_job_arrays(p, j, a);
    for (int i = 0; i < n && ok; i++) {
        al_array arr = {0};
        snprintf(path, sizeof path, "%s/%s.npy", dir, a[i].name);
        if (al_npy_read(path, &arr, &e) || arr.dtype != AL_F64 || arr.ndim != 2 ||
            arr.shape[0] != a[i].shape[0] || arr.shape[1] != a[i].shape[1])
            ok = 0;
        else
            memcpy(a[i].data, arr.data, sizeof(double) * (size_t)(a[i].shape[0] * a[i].shape[1]));
        al_array_free(&arr);
    }
    for (int i = 0; i < n && ok; i++) ok = finite_where_needed(p, j, &a[i]);
    if (ok) { /* the arrays are the ones saved: not changed, cut or poisoned since */
        char got[65];
        arrays_sha(a, n, got);
        ok = !strcmp(got, want_sha);
    }
    return ok ? 1 : -1;
}

/* One run per output directory: an exclusive flock on OUT/.attnlim-reproduce.lock, held until
 * the run returns (the kernel drops it when the process ends, however it ends). The file holds
 * the owner's pid, for the message. *fd receives the lock (close it to release). */
int al__ex_lock_out_dir(const char *dir, int *fd, al_error *err) {
    char path[4200];
    snprintf(path, sizeof path, "%s/.attnlim-reproduce.lock", dir);
    int f = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (f < 0)
        return al__err(err, AL_E_IO, "%s: cannot create the lock file: %s", path, strerror(errno));
    if (flock(f, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        char who[32] = {0};
        ssize_t n = pread(f, who, sizeof who - 1, 0);
        long pid = n > 0 ? strtol(who, NULL, 10) : 0;
        close(f);
        if (e == EWOULDBLOCK)
            return al__err(err, AL_E_IO,
                           "%s: another `attnlim reproduce` (pid %ld) is writing this directory "
                           "(it holds %s); wait for it to finish or use another --out",
                           dir, pid, path);
        return al__err(err, AL_E_IO, "%s: cannot lock: %s", path, strerror(e));
    }
    struct stat held, named; /* the lock file is removed at exit: is ours still the one named? */
    if (fstat(f, &held) != 0 || stat(path, &named) != 0 || held.st_ino != named.st_ino ||
        held.st_dev != named.st_dev) {
        close(f);
        return al__ex_lock_out_dir(dir, fd, err); /* the previous owner just removed it */
    }
    char buf[32];
    int len = snprintf(buf, sizeof buf, "%ld\n", (long)getpid());
    if (ftruncate(f, 0) != 0 || pwrite(f, buf, (size_t)len, 0) != len) {
        int e = errno;
        close(f);
        return al__err(err, AL_E_IO, "%s: cannot write: %s", path, strerror(e));
    }
    *fd = f;
    return 0;
}

/* "NAME.tmp.PID": the temp name of al__afile_open. */
static int is_temp_name(const char *s) {
    const char *t = NULL;
    for (const char *q = strstr(s, ".tmp."); q; q = strstr(q + 1, ".tmp.")) t = q;
    if (!t || t == s || !t[5]) return 0;
    for (t += 5; *t; t++)
        if (*t < '0' || *t > '9') return 0;
    return 1;
}

/* Removes the temp files that killed runs left in dir (and, with depth 1, in its
 * subdirectories). Only called with the lock held: no other run is writing them. */
int al__ex_sweep_dir(const char *dir, int depth, int *removed, al_error *err) {
    DIR *d = opendir(dir);
    if (!d)
        return errno == ENOENT ? 0
                               : al__err(err, AL_E_IO, "%s: cannot list: %s", dir, strerror(errno));
    int rc = 0;
    struct dirent *e;
    char path[4400];
    while (!rc && (e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        struct stat st;
        if (lstat(path, &st) != 0) continue;
        if (S_ISDIR(st.st_mode)) {
            if (depth > 0) rc = al__ex_sweep_dir(path, depth - 1, removed, err);
        } else if (S_ISREG(st.st_mode) && is_temp_name(e->d_name)) {
            if (unlink(path) != 0 && errno != ENOENT)
                rc = al__err(err, AL_E_IO,
                             "%s: cannot remove this temp file of an interrupted "
                             "run: %s",
                             path, strerror(errno));
            else
                (*removed)++;
        }
    }
    closedir(d);
    return rc;
}

/* OUT/partial/run.json: the options that change every saved job's numbers (the grids are per
 * job, in each job's key). --resume refuses a directory saved with others. */
cJSON *al__ex_run_options(const plan *p, const al_model_info *mi, const char *corpus_sha) {
    cJSON *r = cJSON_CreateObject();
    cJSON_AddStringToObject(r, "fingerprint", p->fingerprint);
    cJSON_AddStringToObject(r, "attnlim", al_version());
    cJSON *mo = cJSON_AddObjectToObject(r, "model");
    cJSON_AddStringToObject(mo, "path", mi->path);
    cJSON_AddStringToObject(mo, "sha256", mi->sha256);
    cJSON *co = cJSON_AddObjectToObject(r, "corpus");
    cJSON_AddStringToObject(co, "name", p->o.corpus);
    cJSON_AddStringToObject(co, "sha256", corpus_sha);
    cJSON_AddStringToObject(r, "vectors", al_vectors_name(p->o.vectors));
    cJSON_AddStringToObject(r, "distance", al_distance_name(p->o.distance));
    cJSON_AddStringToObject(r, "expectation", al_expect_name(p->o.expectation));
    cJSON_AddStringToObject(r, "temperature_scale", p->o.temperature_raw ? "raw" : "scaled");
    cJSON_AddStringToObject(r, "directions", p->o.fresh_directions ? "fresh" : "shared");
    if (p->o.normalizer)
        cJSON_AddStringToObject(r, "normalizer", p->o.normalizer);
    else
        cJSON_AddStringToObject(r, "normalizer", "none (the model's own softmax weights)");
    char seed[24]; /* exact, as a string: a double would keep 15-17 digits of a 64-bit seed */
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)p->o.seed);
    cJSON_AddStringToObject(r, "seed", seed);
    cJSON_AddNumberToObject(r, "mc_samples", p->o.mc_samples);
    cJSON *att = cJSON_AddObjectToObject(r, "attention"); /* the variant inside the forward */
    cJSON_AddStringToObject(att, "rule", p->o.attention.rule ? p->o.attention.rule : "dense");
    cJSON_AddStringToObject(att, "normalizer",
                            p->o.attention.normalizer ? p->o.attention.normalizer : "softmax");
    cJSON_AddItemToObject(r, "temperatures", cJSON_CreateDoubleArray(p->T, p->nT));
    cJSON_AddItemToObject(r, "eps", cJSON_CreateDoubleArray(p->eps, p->nE));
    cJSON_AddStringToObject(r, "framing",
                            p->fr.encoder ? (p->fr.wrap ? "[CLS] ... [SEP]" : "bare (--no-wrap)")
                            : p->fr.bos   ? "BOS first"
                                          : "no BOS");
    char sel[600] = "all";
    size_t k = 0;
    for (int i = 0; i < p->H && k < sizeof sel - 12 && (p->lmask || p->hmask); i++)
        if (al__ex_head_selected(p, i))
            k += (size_t)snprintf(sel + k, sizeof sel - k, "%s%d", k ? "," : "", i);
    cJSON_AddStringToObject(r, "heads", sel);
    return r;
}

/* One saved option for the message; sub: an object {path|name, sha256} shown by name and hash. */
static void describe(const cJSON *v, const char *sub, char *out, size_t size) {
    if (!v) {
        snprintf(out, size, "(not saved)");
    } else if (sub) {
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(v, "path");
        if (!nm) nm = cJSON_GetObjectItemCaseSensitive(v, "name");
        const cJSON *h = cJSON_GetObjectItemCaseSensitive(v, sub);
        snprintf(out, size, "%.160s (%s %.12s...)", cJSON_IsString(nm) ? nm->valuestring : "?", sub,
                 cJSON_IsString(h) ? h->valuestring : "?");
    } else {
        char *t = cJSON_PrintUnformatted(v);
        snprintf(out, size, "%.160s", t ? t : "?");
        free(t);
    }
}

/* Appends "name old -> new" to msg when option name differs between saved and now; sub: the
 * member compared in an object. */
static void note_diff(char *msg, size_t size, const cJSON *saved, const cJSON *now,
                      const char *name, const char *sub) {
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(saved, name);
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(now, name);
    const cJSON *ka = sub ? cJSON_GetObjectItemCaseSensitive(a, sub) : a;
    const cJSON *kb = sub ? cJSON_GetObjectItemCaseSensitive(b, sub) : b;
    if (ka && kb && cJSON_Compare(ka, kb, 1)) return;
    char da[200], db[200];
    describe(a, sub, da, sizeof da);
    describe(b, sub, db, sizeof db);
    if (!strcmp(name, "seed") && cJSON_IsString(a) && cJSON_IsString(b)) { /* as given: 1234 */
        snprintf(da, sizeof da, "%.64s", a->valuestring);
        snprintf(db, sizeof db, "%.64s", b->valuestring);
    }
    size_t k = strlen(msg);
    if (k + 1 < size) snprintf(msg + k, size - k, "%s%s %s -> %s", k ? "; " : "", name, da, db);
}

/* --resume: 0 when OUT/partial/run.json is absent or was saved with the same options; else an
 * error naming every option that differs. Without --resume (or after the check) run.json is
 * written anew. */
int al__ex_check_run_options(const plan *p, const cJSON *now, al_error *err) {
    char path[4200];
    snprintf(path, sizeof path, "%s/partial/run.json", p->o.out_dir);
    if (access(path, F_OK) != 0) return 0;
    char *txt = NULL;
    size_t len;
    al_error e = {0};
    cJSON *saved = NULL;
    if (!al__read_file(path, 1 << 20, &txt, &len, &e)) saved = cJSON_Parse(txt);
    free(txt);
    if (!saved)
        return al__err(err, AL_E_FORMAT,
                       "%s: unreadable, so --resume cannot tell how the saved results were "
                       "computed; run without --resume to recompute them",
                       path);
    const cJSON *fa = cJSON_GetObjectItemCaseSensitive(saved, "fingerprint");
    const cJSON *fb = cJSON_GetObjectItemCaseSensitive(now, "fingerprint");
    int same = fa && fb && cJSON_Compare(fa, fb, 1);
    char diff[900] = "";
    if (!same) {
        note_diff(diff, sizeof diff, saved, now, "model", "sha256");
        note_diff(diff, sizeof diff, saved, now, "corpus", "sha256");
        static const char *const flat[] = {
            "vectors",    "distance", "expectation", "directions",   "temperature_scale",
            "normalizer", "seed",     "mc_samples",  "temperatures", "eps",
            "attnlim",    "framing",  "heads"};
        for (size_t i = 0; i < sizeof flat / sizeof *flat; i++)
            note_diff(diff, sizeof diff, saved, now, flat[i], NULL);
        if (!diff[0]) snprintf(diff, sizeof diff, "the fingerprint of the options");
    }
    cJSON_Delete(saved);
    if (same) return 0;
    return al__err(err, AL_E_INVALID,
                   "--resume: %s/partial holds results computed with other options: %s. Run "
                   "without --resume to recompute them, or use another --out",
                   p->o.out_dir, diff);
}
