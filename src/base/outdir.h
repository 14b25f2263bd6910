/* outdir.h: an output directory published in one rename, with the temporaries of killed runs
 * swept only when their owner is provably gone (owner: src/base/outdir.c).
 *
 * A run writes into PARENT/.TOOL-PID[-K].tmp and holds an exclusive flock on the lock file
 * PARENT/.TOOL-PID[-K].lock (created before the directory, O_EXCL | O_NOFOLLOW) for its whole
 * lifetime; the kernel drops the lock however the process ends. A later run removes a
 * temporary directory (and its .old twin and lock) only when it can take that lock itself: a
 * live run in another PID namespace, a container, or (over a file system with working locks)
 * another host is never mistaken for a dead one, as a kill(pid, 0) test would. A temporary
 * without its lock file is left alone (its owner cannot be proven gone).
 *
 * DIR itself: absent or empty, it is replaced by the temporary in one rename; holding files, it
 * is refused unless force, and with force only when every entry is a regular file of a name the
 * tool writes (is_own), its own earlier output: then exchanged atomically (renameat2
 * RENAME_EXCHANGE; without it, moved aside, the new one renamed in and the old one removed), so
 * that DIR never holds files of two runs. */
#ifndef AL_OUTDIR_H
#define AL_OUTDIR_H

#include "internal.h"

#include <limits.h>

typedef struct al__outdir {
    const char *tool;                /* "capture", "make-model": names the temporaries */
    int (*is_own)(const char *name); /* a file name the tool writes in DIR */
    char dir[PATH_MAX];              /* DIR without trailing slashes (its real path if it exists) */
    char parent[PATH_MAX];           /* where the temporary directory lives */
    char tmp[PATH_MAX + 96];         /* PARENT/.TOOL-PID[-K].tmp: write the results here */
    char old[PATH_MAX + 96];         /* PARENT/.TOOL-PID[-K].old */
    char lock[PATH_MAX + 96];        /* PARENT/.TOOL-PID[-K].lock */
    int lock_fd;
    int tmp_made;
    int created[64]; /* lengths of the parent prefixes this run created (undone on failure) */
    int n_created;
} al__outdir;

/* Resolves DIR, sweeps the parent of dead runs' temporaries, checks that DIR may receive the
 * results (absent, empty, or with force the tool's own earlier output). */
int al__outdir_prepare(al__outdir *o, const char *tool, int (*is_own)(const char *),
                       const char *out, int force, al_error *err);
/* Creates the missing parents, the lock (held) and the temporary directory o->tmp. */
int al__outdir_make_tmp(al__outdir *o, al_error *err);
/* The one rename that makes o->tmp DIR (replacing the earlier output when force). */
int al__outdir_publish(al__outdir *o, int force, al_error *err);
/* On failure: the temporary, the parents this run created and the lock go. Also after
 * publish (then it only releases the lock). Safe to call twice. */
void al__outdir_abandon(al__outdir *o);
/* Removes the regular files of dir, then dir (0 when dir is gone). */
int al__remove_flat(const char *dir);

#endif
