/* outdir.c: output directories published in one rename; dead runs' temporaries swept under
 * proof of death (a lock held for the run's lifetime). See outdir.h. */
#include "hooks.h"
#include "outdir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef RENAME_EXCHANGE
#define RENAME_EXCHANGE (1 << 1) /* linux/fs.h */
#endif

int al__remove_flat(const char *dir) {
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dfd >= 0) {
        DIR *d = fdopendir(dfd);
        if (d) {
            struct dirent *e;
            while ((e = readdir(d)))
                if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
                    unlinkat(dirfd(d), e->d_name, 0); /* never follows: removes links as such */
            closedir(d);
        } else {
            close(dfd);
        }
    }
    return rmdir(dir);
}

/* Is name ".TOOL-PID[-K]" followed by suffix? The stem length, else 0. */
static size_t temp_stem(const char *tool, const char *name, const char *suffix) {
    size_t tl = strlen(tool);
    if (name[0] != '.' || strncmp(name + 1, tool, tl) != 0 || name[1 + tl] != '-') return 0;
    const char *p = name + 2 + tl, *digits = p;
    while (*p >= '0' && *p <= '9' && p - digits < 12) p++;
    if (p == digits) return 0;
    if (*p == '-') {
        const char *k = ++p;
        while (*p >= '0' && *p <= '9' && p - k < 4) p++;
        if (p == k) return 0;
    }
    return strcmp(p, suffix) == 0 ? (size_t)(p - name) : 0;
}

/* Do fd and PARENT/name refer to the same file (the lock was not replaced meanwhile)? */
static int same_file(int fd, const char *path) {
    struct stat a, b;
    return fstat(fd, &a) == 0 && lstat(path, &b) == 0 && S_ISREG(b.st_mode) &&
           a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

/* Removes PARENT/STEM.{tmp,old,lock} when STEM.lock can be locked: its owner is gone. */
static void sweep_stem(const char *parent, const char *stem, size_t n) {
    char lock[PATH_MAX + 96], tmp[PATH_MAX + 96], old[PATH_MAX + 96];
    snprintf(lock, sizeof lock, "%s/%.*s.lock", parent, (int)n, stem);
    snprintf(tmp, sizeof tmp, "%s/%.*s.tmp", parent, (int)n, stem);
    snprintf(old, sizeof old, "%s/%.*s.old", parent, (int)n, stem);
    int fd = open(lock, O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return;
    if (flock(fd, LOCK_EX | LOCK_NB) != 0 || !same_file(fd, lock)) { /* alive, or replaced */
        close(fd);
        return;
    }
    int bad = 0;
    struct stat st;
    if (lstat(tmp, &st) == 0 && (!S_ISDIR(st.st_mode) || al__remove_flat(tmp) != 0)) bad = 1;
    if (lstat(old, &st) == 0 && (!S_ISDIR(st.st_mode) || al__remove_flat(old) != 0)) bad = 1;
    if (bad)
        al__log(AL_LOG_WARNING, "attnlim: warning: could not remove %s or %s (a killed run's)", tmp,
                old);
    else
        unlink(lock);
    close(fd);
}

/* The temporaries of dead runs of this tool in parent (never our own). */
static void sweep_parent(const al__outdir *o) {
    DIR *d = opendir(o->parent);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t n = temp_stem(o->tool, e->d_name, ".lock");
        if (!n) continue;
        char own[PATH_MAX + 96];
        snprintf(own, sizeof own, "%s/%s", o->parent, e->d_name);
        if (o->lock_fd >= 0 && !strcmp(own, o->lock)) continue;
        sweep_stem(o->parent, e->d_name, n);
    }
    closedir(d);
}

/* o->dir and o->parent from out (DIR must not be a symbolic link, the root, "." or "..") */
static int resolve(al__outdir *o, const char *out, int *exists, al_error *err) {
    size_t n = strlen(out);
    while (n > 1 && out[n - 1] == '/') n--;
    if (n == 0 || n >= sizeof o->dir)
        return al__err(err, AL_E_INVALID, "--out '%s': bad path", out);
    memcpy(o->dir, out, n);
    o->dir[n] = 0;
    struct stat st;
    *exists = lstat(o->dir, &st) == 0;
    if (*exists) {
        if (S_ISLNK(st.st_mode))
            return al__err(err, AL_E_IO,
                           "%s: is a symbolic link: refused (attnlim writes its output only into "
                           "a directory it names; give the link's target)",
                           o->dir);
        if (!S_ISDIR(st.st_mode))
            return al__err(err, AL_E_IO, "%s: exists and is %s, not a directory", o->dir,
                           al__file_kind(st.st_mode));
        char real[PATH_MAX];
        if (!realpath(o->dir, real))
            return al__err(err, AL_E_IO, "%s: %s", o->dir, strerror(errno));
        if (!strcmp(real, "/"))
            return al__err(err, AL_E_INVALID, "--out %s: not the root directory", out);
        snprintf(o->dir, sizeof o->dir, "%s", real);
    }
    const char *base = strrchr(o->dir, '/');
    base = base ? base + 1 : o->dir;
    if (!strcmp(base, ".") || !strcmp(base, ".."))
        return al__err(err, AL_E_INVALID, "--out %s: name the directory (not '%s')", out, base);
    if (base == o->dir)
        snprintf(o->parent, sizeof o->parent, ".");
    else if (base - 1 == o->dir)
        snprintf(o->parent, sizeof o->parent, "/");
    else
        snprintf(o->parent, sizeof o->parent, "%.*s", (int)(base - 1 - o->dir), o->dir);
    return 0;
}

int al__outdir_prepare(al__outdir *o, const char *tool, int (*is_own)(const char *),
                       const char *out, int force, al_error *err) {
    memset(o, 0, sizeof *o);
    o->tool = tool, o->is_own = is_own, o->lock_fd = -1;
    int exists = 0;
    int rc = resolve(o, out, &exists, err);
    if (rc) return rc;
    sweep_parent(o);
    if (!exists) return 0;
    DIR *d = opendir(o->dir);
    if (!d) return al__err(err, AL_E_IO, "%s: cannot list: %s", o->dir, strerror(errno));
    struct dirent *e;
    char first[256] = "", foreign[256] = "", kind[64] = "";
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        if (!first[0]) snprintf(first, sizeof first, "%s", e->d_name);
        struct stat st;
        if (foreign[0]) continue;
        int ok = fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0;
        if (!ok || !is_own(e->d_name) || !S_ISREG(st.st_mode)) {
            snprintf(foreign, sizeof foreign, "%s", e->d_name);
            snprintf(kind, sizeof kind, "%s", ok ? al__file_kind(st.st_mode) : "unreadable");
        }
    }
    closedir(d);
    if (!first[0]) return 0;
    if (!force)
        return al__err(err, AL_E_INVALID,
                       "%s already holds files (%s, ...): %s writes a new or empty directory; "
                       "give --force to replace its own earlier output there, or another --out",
                       o->dir, first, tool);
    if (foreign[0])
        return al__err(err, AL_E_INVALID,
                       "%s holds %s (%s), which %s does not write: --force replaces only its own "
                       "earlier output; choose another --out",
                       o->dir, foreign, kind, tool);
    return 0;
}

/* mkdir -p of o->parent, recording what it created */
static int make_parents(al__outdir *o, al_error *err) {
    char buf[PATH_MAX];
    size_t n = strlen(o->parent);
    memcpy(buf, o->parent, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (buf[i] != '/' && buf[i] != 0) continue;
        char c = buf[i];
        buf[i] = 0;
        if (mkdir(buf, 0777) == 0) {
            if (o->n_created < (int)(sizeof o->created / sizeof o->created[0]))
                o->created[o->n_created++] = (int)i;
        } else if (errno != EEXIST) {
            return al__err(err, AL_E_IO, "%s: cannot create directory %s: %s", o->dir, buf,
                           strerror(errno));
        }
        buf[i] = c;
    }
    return 0;
}

/* Takes the lock of stem k (created O_EXCL, locked, still at its name): 1 taken, 0 name in
 * use, -1 error (errno) */
static int take_lock(al__outdir *o, int k) {
    char stem[96];
    if (k == 0)
        snprintf(stem, sizeof stem, ".%s-%ld", o->tool, (long)getpid());
    else
        snprintf(stem, sizeof stem, ".%s-%ld-%d", o->tool, (long)getpid(), k);
    snprintf(o->lock, sizeof o->lock, "%s/%s.lock", o->parent, stem);
    snprintf(o->tmp, sizeof o->tmp, "%s/%s.tmp", o->parent, stem);
    snprintf(o->old, sizeof o->old, "%s/%s.old", o->parent, stem);
    int fd = open(o->lock, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (fd < 0) return errno == EEXIST ? 0 : -1;
    if (flock(fd, LOCK_EX | LOCK_NB) != 0 || !same_file(fd, o->lock)) { /* a sweeper's race */
        close(fd);
        return 0;
    }
    struct stat st;
    if (lstat(o->tmp, &st) == 0 || lstat(o->old, &st) == 0) { /* a lock-less leftover */
        unlink(o->lock);
        close(fd);
        return 0;
    }
    o->lock_fd = fd;
    return 1;
}

int al__outdir_make_tmp(al__outdir *o, al_error *err) {
    int rc = make_parents(o, err);
    if (rc) return rc;
    int got = 0;
    for (int k = 0; k < 100 && got == 0; k++) got = take_lock(o, k);
    if (got <= 0)
        return al__err(err, AL_E_IO,
                       "%s: cannot create directory %s (the results' temporary directory, beside "
                       "it) with its lock %s: %s",
                       o->dir, o->tmp, o->lock, got < 0 ? strerror(errno) : "names taken");
    if (mkdir(o->tmp, 0777) != 0)
        return al__err(err, AL_E_IO,
                       "%s: cannot create directory %s (the results' temporary directory, beside "
                       "it): %s",
                       o->dir, o->tmp, strerror(errno));
    o->tmp_made = 1;
    return 0;
}

void al__outdir_abandon(al__outdir *o) {
    if (o->tmp_made) al__remove_flat(o->tmp);
    o->tmp_made = 0;
    if (o->lock_fd >= 0) { /* the lock file lives in the parent: before the parents go */
        unlink(o->lock);
        close(o->lock_fd);
    }
    o->lock_fd = -1;
    char buf[PATH_MAX];
    for (int i = o->n_created - 1; i >= 0; i--) {
        snprintf(buf, sizeof buf, "%.*s", o->created[i], o->parent);
        rmdir(buf);
    }
    o->n_created = 0;
}

/* DIR aside, the results in, the earlier output put back if the second rename fails */
static int publish_by_two_renames(al__outdir *o, al_error *err) {
    if (rename(o->dir, o->old) != 0)
        return al__err(err, AL_E_IO, "%s: cannot move the earlier output aside: %s", o->dir,
                       strerror(errno));
    if (rename(o->tmp, o->dir) != 0) {
        int e = errno;
        if (rename(o->old, o->dir) != 0)
            al__log(AL_LOG_NOTE, "attnlim %s: the earlier output is now %s", o->tool, o->old);
        return al__err(err, AL_E_IO, "%s: cannot move the results into place: %s", o->dir,
                       strerror(e));
    }
    return 0;
}

int al__outdir_publish(al__outdir *o, int force, al_error *err) {
    if (!force || !al__is_dir(o->dir)) {
        if (rename(o->tmp, o->dir) != 0) {
            if (errno == ENOTEMPTY || errno == EEXIST)
                return al__err(err, AL_E_IO,
                               "%s: files appeared there during the run; the results were not "
                               "published (give --force to replace them)",
                               o->dir);
            return al__err(err, AL_E_IO, "%s: cannot move the results into place: %s", o->dir,
                           strerror(errno));
        }
        o->tmp_made = 0, o->n_created = 0;
        return 0;
    }
    const char *old = o->old;
    int done = 0;
#ifdef SYS_renameat2
    if (!getenv("ATTNLIM_TEST_NO_RENAME_EXCHANGE")) {
        if (syscall(SYS_renameat2, AT_FDCWD, o->tmp, AT_FDCWD, o->dir, RENAME_EXCHANGE) == 0)
            done = 1, old = o->tmp; /* the earlier output now lives at the temporary name */
        else if (errno != ENOSYS && errno != EINVAL)
            return al__err(err, AL_E_IO, "%s: cannot exchange it with the results: %s", o->dir,
                           strerror(errno));
    }
#endif
    if (!done) {
        int rc = publish_by_two_renames(o, err);
        if (rc) return rc;
    }
    o->tmp_made = 0, o->n_created = 0;
    if (al__remove_flat(old) != 0)
        al__log(AL_LOG_WARNING,
                "attnlim %s: warning: the earlier output replaced in %s is left at %s: %s", o->tool,
                o->dir, old, strerror(errno));
    return 0;
}
