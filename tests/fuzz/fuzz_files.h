/* fuzz_files.h: what the harnesses that write files share: a private scratch directory
 * (under /dev/shm when it is writable, else /tmp), removed with everything in it when the
 * harness exits, and a checked whole-file write. Each harness is one translation unit, so the
 * static state here is that harness's own. */
#ifndef AL_FUZZ_FILES_H
#define AL_FUZZ_FILES_H

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static char fuzz_root_[256];

static int fuzz_remove_one_(const char *path, const struct stat *sb, int type, struct FTW *ftw) {
    (void)sb, (void)type, (void)ftw;
    remove(path);
    return 0;
}

static void fuzz_remove_root_(void) {
    if (fuzz_root_[0]) nftw(fuzz_root_, fuzz_remove_one_, 16, FTW_DEPTH | FTW_PHYS);
}

/* Makes the scratch directory ".../al_fuzz_NAME_XXXXXX" once and returns its path. */
static const char *fuzz_root(const char *name) {
    if (!fuzz_root_[0]) {
        const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
        snprintf(fuzz_root_, sizeof fuzz_root_, "%s/al_fuzz_%s_XXXXXX", base, name);
        if (!mkdtemp(fuzz_root_)) abort();
        atexit(fuzz_remove_root_);
    }
    return fuzz_root_;
}

/* Writes p[0, n) to path (replacing it); any failure aborts the harness. */
static void fuzz_put(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) abort();
    if (n && fwrite(p, 1, n, f) != n) abort();
    if (fclose(f)) abort();
}

#endif
