/* services.c: the public face of base services for programs built on the library (the CLI):
 * timings, threads, error prefixes, whole-file reads, number parsing, terminal-safe text, JSON
 * text, the kernels' instruction set, and output directories published in one rename
 * (include/attnlim.h "Services"). Each is a thin wrapper over the internal one. */
#include "cpu.h"
#include "internal.h"
#include "outdir.h"
#include "progress.h"
#include "textsafe.h"

#include <omp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

double al_now(void) {
    return al__now();
}

int al_get_threads(void) {
    return omp_get_max_threads();
}

int al_error_prefix(al_error *err, const char *fmt, ...) {
    if (!err) return AL_E_INVALID;
    char prefix[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    return al__err_prefix(err, AL_E_INVALID, "%s", prefix);
}

int al_read_file(const char *path, size_t max_size, char **out, size_t *len, al_error *err) {
    return al__read_file(path, max_size, out, len, err);
}

int al_parse_double(const char *s, const char *what, double *out, al_error *err) {
    if (!s || !*s) return al_error_set(err, AL_E_INVALID, "%s: empty value", what);
    double v = 0;
    int under = 0, why = al__number_token(s, &v, &under);
    if (why == AL__NUM_HEX)
        return al_error_set(err, AL_E_INVALID, "%s: '%s' is hexadecimal (give a decimal number)",
                            what, s);
    if (why == AL__NUM_NONFINITE)
        return al_error_set(err, AL_E_RANGE, "%s: '%s' is not finite (NaN and Inf are refused)",
                            what, s);
    if (why == AL__NUM_OVERFLOW || under)
        return al_error_set(err, AL_E_RANGE, "%s: '%s' is out of range (beyond the normal doubles)",
                            what, s);
    if (why) return al_error_set(err, AL_E_INVALID, "%s: '%s' is not a number", what, s);
    *out = v;
    return 0;
}

size_t al_term_text(const char *s, size_t n, char *out, size_t cap) {
    return al__term_text(s, n, out, cap);
}

char *al_json_print(const struct cJSON *j, int pretty) {
    return al__json_print(j, pretty);
}

const char *al_cpu_kernels(int supported) {
    return al__cpu_name(supported ? al__cpu_detect() : al__cpu_level());
}

int al_cpu_check_env(al_error *err) {
    return al__cpu_check_env(err);
}

/* ---- progress bars ----------------------------------------------------------------------- */

struct al_bar {
    al__progress p;
};

al_bar *al_bar_begin(int mode, double total) {
    al_bar *b = calloc(1, sizeof *b);
    if (b) al__progress_begin(&b->p, mode, stderr, total);
    return b;
}

void al_bar_add(al_bar *b, double units, const char *status) {
    if (b) al__progress_add(&b->p, units, status);
}

void al_bar_end(al_bar *b) {
    if (!b) return;
    if (b->p.on == 2 && b->p.last_draw == b->p.t0) b->p.on = 0; /* a short run: no line */
    al__progress_end(&b->p);
    free(b);
}

/* ---- output directories ------------------------------------------------------------------ */

struct al_outdir {
    al__outdir d;
    int force;
};

al_outdir *al_outdir_open(const char *dir, const char *tool, al_own_fn own, int force,
                          al_error *err) {
    al_outdir *o = al__calloc(1, sizeof *o, "an output directory", err);
    if (!o) return NULL;
    o->d.lock_fd = -1;
    o->force = force;
    if (al__outdir_prepare(&o->d, tool, own, dir, force, err)) {
        al_outdir_free(o);
        return NULL;
    }
    return o;
}

int al_outdir_make(al_outdir *d, al_error *err) {
    return al__outdir_make_tmp(&d->d, err);
}

const char *al_outdir_path(const al_outdir *d) {
    return d->d.tmp;
}

const char *al_outdir_dir(const al_outdir *d) {
    return d->d.dir;
}

int al_outdir_publish(al_outdir *d, al_error *err) {
    return al__outdir_publish(&d->d, d->force, err);
}

void al_outdir_free(al_outdir *d) {
    if (!d) return;
    al__outdir_abandon(&d->d);
    free(d);
}

int al_outdir_check_own(const char *dir, const char *tool, al_own_fn own, al_error *err) {
    return al__outdir_check_own(dir, tool, own, err);
}
