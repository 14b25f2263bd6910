/* repro_out.c: the output directory of al_reproduce (include/attnlim.h al_repro_out_begin):
 * which entries reproduce writes in DIR, and when a run works in DIR itself (new, --resume, an
 * unfinished earlier run) or in a temporary beside it that replaces DIR in one rename (--force). */
#include "internal.h"

#include <string.h>
#include <sys/stat.h>

/* An entry reproduce writes in DIR: the outputs, partial/, its lock and temp files. */
static int own_entry(const char *name, int is_dir) {
    if (is_dir) return !strcmp(name, "partial") || !strcmp(name, "readings");
    static const char *fixed[] = {"results.json", "readings.json", "report.md", "report.html",
                                  ".attnlim-reproduce.lock"};
    for (size_t i = 0; i < sizeof fixed / sizeof *fixed; i++)
        if (!strcmp(name, fixed[i])) return 1;
    const char *t = strstr(name, ".tmp.");
    if (t && t > name && t[5] && strspn(t + 5, "0123456789") == strlen(t + 5)) return 1;
    const char *dot = strrchr(name, '.');
    if (!dot || dot == name ||
        strspn(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_") !=
            (size_t)(dot - name))
        return 0;
    return !strcmp(dot, ".csv") || !strcmp(dot, ".npy") || !strcmp(dot, ".png") ||
           !strcmp(dot, ".svg");
}

/* Rank 0, before the run: DIR absent or empty, or --resume over its own earlier output, or an
 * earlier run's that never finished (no results.json): the run works in DIR (a killed run
 * leaves partial/ for --resume). --force over its own earlier
 * output: the run works in a temporary directory beside DIR (*od) that replaces it in one
 * rename at the end. Anything else is refused. */
int al_repro_out_begin(al_repro_opts *o, int force, al_outdir **od, al_error *err) {
    *od = NULL;
    const char *out = o->out_dir;
    struct stat st;
    if (lstat(out, &st) != 0) return 0; /* a new directory: made by the run */
    if (S_ISLNK(st.st_mode))
        return al_error_set(err, AL_E_IO,
                            "%s: is a symbolic link: refused (give the link's target)", out);
    if (!S_ISDIR(st.st_mode))
        return al_error_set(err, AL_E_IO, "%s: exists and is %s, not a directory", out,
                            al__file_kind(st.st_mode));
    int rc = al_outdir_check_own(out, "reproduce", own_entry, err);
    if (rc || o->resume) return rc;
    char res[4200];
    snprintf(res, sizeof res, "%s/results.json", out);
    if (lstat(res, &st) != 0) return 0; /* an interrupted or failed run's: continued in place */
    al_outdir *d = al_outdir_open(out, "reproduce", own_entry, force, err);
    if (!d) return err->code;
    if (!force) { /* empty: the run works in it */
        al_outdir_free(d);
        return 0;
    }
    if ((rc = al_outdir_make(d, err))) {
        al_outdir_free(d);
        return rc;
    }
    o->out_dir = al_outdir_path(d);
    *od = d;
    return 0;
}
