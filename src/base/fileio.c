/* fileio.c: checked file reading, read-only mappings, atomic writes, SHA-256 (OpenSSL). */
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <stdint.h>
#include <unistd.h>

#include <openssl/evp.h>

const char *al__file_kind(unsigned mode) {
    switch (mode & S_IFMT) {
    case S_IFREG:
        return "a regular file";
    case S_IFDIR:
        return "a directory";
    case S_IFIFO:
        return "a FIFO (named pipe)";
    case S_IFCHR:
        return "a character device";
    case S_IFBLK:
        return "a block device";
    case S_IFSOCK:
        return "a socket";
    case S_IFLNK:
        return "a symbolic link";
    }
    return "not a regular file";
}

int al__open_read(const char *path, int *fd, al_error *err) {
    *fd = -1;
    int f = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (f < 0) return al__err(err, AL_E_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(f, &st) != 0) {
        int e = errno;
        close(f);
        return al__err(err, AL_E_IO, "%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(f);
        return al__err(err, AL_E_IO, "%s: is %s, not a regular file: refused", path,
                       al__file_kind(st.st_mode));
    }
    int fl = fcntl(f, F_GETFL);
    if (fl >= 0) fcntl(f, F_SETFL, fl & ~O_NONBLOCK);
    *fd = f;
    return 0;
}

FILE *al__fopen_read(const char *path, al_error *err) {
    int fd;
    if (al__open_read(path, &fd, err)) return NULL;
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        al__err(err, AL_E_NOMEM, "%s: cannot open a stream: %s", path, strerror(errno));
        close(fd);
    }
    return f;
}

int al__read_file(const char *path, size_t max_size, char **out, size_t *len, al_error *err) {
    *out = NULL;
    if (len) *len = 0;
    FILE *f = strcmp(path, "-") == 0 ? stdin : al__fopen_read(path, err);
    if (!f) return err ? (int)err->code : AL_E_IO;
    size_t cap = 1 << 16, n = 0;
    char *buf = al__malloc(cap, path, err);
    if (!buf) goto fail;
    for (;;) {
        if (n + 1 >= cap) {
            if (cap >= max_size + 1) {
                al__err(err, AL_E_FORMAT, "%s: larger than the limit of %zu bytes", path, max_size);
                goto fail;
            }
            size_t ncap = cap * 2 > max_size + 1 ? max_size + 1 : cap * 2;
            char *nb = realloc(buf, ncap);
            if (!nb) {
                al__err(err, AL_E_NOMEM, "%s: out of memory reading the file", path);
                goto fail;
            }
            buf = nb;
            cap = ncap;
        }
        size_t got = fread(buf + n, 1, cap - 1 - n, f);
        n += got;
        if (got == 0) {
            if (ferror(f)) {
                al__err(err, AL_E_IO, "%s: read error: %s", path, strerror(errno));
                goto fail;
            }
            break;
        }
    }
    if (n > max_size) {
        al__err(err, AL_E_FORMAT, "%s: larger than the limit of %zu bytes", path, max_size);
        goto fail;
    }
    buf[n] = 0;
    if (f != stdin) fclose(f);
    *out = buf;
    if (len) *len = n;
    return 0;
fail:
    free(buf);
    if (f && f != stdin) fclose(f);
    return err ? (int)err->code : AL_E_IO;
}

int al__map_file(const char *path, al__map *m, al_error *err) {
    m->data = NULL;
    m->size = 0;
    int fd;
    int rc = al__open_read(path, &fd, err);
    if (rc) return rc;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        close(fd);
        return al__err(err, AL_E_IO, "%s: cannot stat: %s", path, strerror(errno));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return al__err(err, AL_E_IO, "%s: not a regular file", path);
    }
    if (st.st_size == 0) {
        close(fd);
        m->data = (const unsigned char *)"";
        return 0;
    }
    void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (p == MAP_FAILED) return al__err(err, AL_E_IO, "%s: cannot map: %s", path, strerror(errno));
    m->data = p;
    m->size = (size_t)st.st_size;
    return 0;
}

void al__unmap(al__map *m) {
    if (m->data && m->size) munmap((void *)m->data, m->size);
    m->data = NULL;
    m->size = 0;
}

/* "NAME.tmp.<pid><9 random digits>": unique across PID namespaces sharing the directory */
static void temp_name(char *out, size_t cap, const char *name) {
    unsigned r = 0;
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd < 0 || read(fd, &r, sizeof r) != (ssize_t)sizeof r)
        r = (unsigned)(al__now() * 1e9) ^ (unsigned)(uintptr_t)out;
    if (fd >= 0) close(fd);
    snprintf(out, cap, "%s.tmp.%ld%09u", name, (long)getpid(), r % 1000000000u);
}

/* path's directory opened (O_DIRECTORY) into a->dirfd and its last component into a->name */
static int open_parent(al__afile *a, const char *path, al_error *err) {
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    if (!*base || !strcmp(base, ".") || !strcmp(base, "..") || strlen(base) >= sizeof a->name)
        return al__err(err, AL_E_INVALID, "%s: not a file name to write", path);
    snprintf(a->name, sizeof a->name, "%s", base);
    char dir[4096];
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else if (slash == path)
        snprintf(dir, sizeof dir, "/");
    else
        snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    a->dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (a->dirfd < 0)
        return al__err(err, AL_E_IO, "%s: cannot open its directory %s: %s", path, dir,
                       strerror(errno));
    a->have_dir = true;
    return 0;
}

/* The destination, if present, must be a regular file of ours (it is replaced, never followed) */
static int check_dest(const al__afile *a, al_error *err) {
    struct stat st;
    if (fstatat(a->dirfd, a->name, &st, AT_SYMLINK_NOFOLLOW) != 0)
        return errno == ENOENT
                   ? 0
                   : al__err(err, AL_E_IO, "%s: cannot stat: %s", a->path, strerror(errno));
    if (!S_ISREG(st.st_mode))
        return al__err(err, AL_E_IO,
                       "%s: exists and is %s, which attnlim does not replace: remove it or "
                       "choose another output",
                       a->path, al__file_kind(st.st_mode));
    if (st.st_uid != geteuid())
        return al__err(err, AL_E_IO,
                       "%s: exists and belongs to another user (uid %ld): not replaced; remove it "
                       "or choose another output",
                       a->path, (long)st.st_uid);
    return 0;
}

static void afile_close_dir(al__afile *a) {
    if (a->have_dir) close(a->dirfd);
    a->have_dir = false;
}

int al__afile_open(al__afile *a, const char *path, al_error *err) {
    memset(a, 0, sizeof *a);
    if (strlen(path) >= sizeof a->path)
        return al__err(err, AL_E_INVALID, "%s: path too long", path);
    snprintf(a->path, sizeof a->path, "%s", path);
    int rc = open_parent(a, path, err);
    if (!rc) rc = check_dest(a, err);
    int fd = -1;
    for (int tries = 0; !rc && fd < 0 && tries < 8; tries++) {
        temp_name(a->tmpname, sizeof a->tmpname, a->name);
        snprintf(a->tmp, sizeof a->tmp, "%s.tmp.%s", path, a->tmpname + strlen(a->name) + 5);
        fd = openat(a->dirfd, a->tmpname, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                    0666);
        if (fd < 0 && errno != EEXIST)
            rc = al__err(err, AL_E_IO, "%s: cannot create (temp file %s): %s", path, a->tmp,
                         strerror(errno));
    }
    if (!rc && fd < 0)
        rc = al__err(err, AL_E_IO, "%s: cannot create a temp file beside it (names taken)", path);
    struct stat st;
    if (!rc && (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid())) {
        rc = al__err(err, AL_E_IO, "%s: the temp file %s is not a regular file of ours", path,
                     a->tmp);
        unlinkat(a->dirfd, a->tmpname, 0);
    }
    if (!rc && !(a->f = fdopen(fd, "wb"))) {
        rc = al__err(err, AL_E_NOMEM, "%s: cannot open a stream: %s", path, strerror(errno));
        unlinkat(a->dirfd, a->tmpname, 0);
    }
    if (rc) {
        if (fd >= 0 && !a->f) close(fd);
        afile_close_dir(a);
        a->tmpname[0] = a->tmp[0] = 0;
    }
    return rc;
}

int al__afile_write(al__afile *a, const void *buf, size_t n, al_error *err) {
    if (a->failed) return al__err(err, AL_E_IO, "%s: an earlier write failed", a->path);
    if (n && fwrite(buf, 1, n, a->f) != n) {
        a->failed = true;
        return al__err(err, AL_E_IO, "%s: write failed: %s", a->path, strerror(errno));
    }
    return 0;
}

int al__afile_printf(al__afile *a, al_error *err, const char *fmt, ...) {
    if (a->failed) return al__err(err, AL_E_IO, "%s: an earlier write failed", a->path);
    va_list ap;
    va_start(ap, fmt);
    int r = vfprintf(a->f, fmt, ap);
    va_end(ap);
    if (r < 0) {
        a->failed = true;
        return al__err(err, AL_E_IO, "%s: write failed: %s", a->path, strerror(errno));
    }
    return 0;
}

int al__afile_commit(al__afile *a, al_error *err) {
    if (!a->f) return al__err(err, AL_E_IO, "%s: not open", a->path);
    int bad = a->failed || fflush(a->f) != 0 || fsync(fileno(a->f)) != 0;
    int saved = errno;
    if (fclose(a->f) != 0 && !bad) bad = 1, saved = errno;
    a->f = NULL;
    int rc = 0;
    if (bad)
        rc = al__err(err, AL_E_IO, "%s: write failed: %s", a->path, strerror(saved));
    else if ((rc = check_dest(a, err))) /* planted while we wrote? */
        ;
    else if (renameat(a->dirfd, a->tmpname, a->dirfd, a->name) != 0)
        rc = al__err(err, AL_E_IO, "%s: cannot rename into place: %s", a->path, strerror(errno));
    else
        a->tmpname[0] = 0;
    if (a->tmpname[0]) unlinkat(a->dirfd, a->tmpname, 0);
    a->tmpname[0] = a->tmp[0] = 0;
    afile_close_dir(a);
    return rc;
}

void al__afile_abort(al__afile *a) {
    if (a->f) {
        fclose(a->f);
        a->f = NULL;
    }
    if (a->have_dir && a->tmpname[0]) unlinkat(a->dirfd, a->tmpname, 0);
    a->tmpname[0] = a->tmp[0] = 0;
    afile_close_dir(a);
}

int al__write_file_atomic(const char *path, const void *buf, size_t n, al_error *err) {
    al__afile a;
    int rc = al__afile_open(&a, path, err);
    if (rc) return rc;
    if ((rc = al__afile_write(&a, buf, n, err))) {
        al__afile_abort(&a);
        return rc;
    }
    return al__afile_commit(&a, err);
}

int al__mkdirs(const char *path, al_error *err) {
    char buf[4096];
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof buf)
        return al__err(err, AL_E_INVALID, "bad directory path '%s'", path);
    memcpy(buf, path, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (buf[i] == '/' || buf[i] == 0) {
            char c = buf[i];
            buf[i] = 0;
            if (mkdir(buf, 0777) != 0 && errno != EEXIST)
                return al__err(err, AL_E_IO, "%s: cannot create directory: %s", buf,
                               strerror(errno));
            buf[i] = c;
        }
    }
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
        return al__err(err, AL_E_IO, "%s: not a directory", path);
    if (access(path, W_OK) != 0)
        return al__err(err, AL_E_IO, "%s: directory not writable: %s", path, strerror(errno));
    return 0;
}

static void hex_of(const unsigned char *d, char hex[65]) {
    static const char digits[] = "0123456789abcdef";
    for (int i = 0; i < 32; i++) {
        hex[2 * i] = digits[d[i] >> 4];
        hex[2 * i + 1] = digits[d[i] & 15];
    }
    hex[64] = 0;
}

void al_sha256_buf(const void *buf, size_t len, char hex[65]) {
    unsigned char d[32];
    unsigned int dl = 0;
    EVP_Digest(buf, len, d, &dl, EVP_sha256(), NULL);
    hex_of(d, hex);
}

int al_sha256_file(const char *path, char hex[65], al_error *err) {
    FILE *f = al__fopen_read(path, err);
    if (!f) return err ? (int)err->code : AL_E_IO;
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    if (!ctx || !EVP_DigestInit_ex(ctx, EVP_sha256(), NULL)) {
        fclose(f);
        EVP_MD_CTX_free(ctx);
        return al__err(err, AL_E_NOMEM, "SHA-256: cannot create a digest context");
    }
    unsigned char buf[1 << 16];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) EVP_DigestUpdate(ctx, buf, n);
    int bad = ferror(f);
    fclose(f);
    unsigned char d[32];
    unsigned int dl = 0;
    EVP_DigestFinal_ex(ctx, d, &dl);
    EVP_MD_CTX_free(ctx);
    if (bad) return al__err(err, AL_E_IO, "%s: read error", path);
    hex_of(d, hex);
    return 0;
}

bool al__is_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && !S_ISDIR(st.st_mode);
}

int al__mkdir_own(const char *path, al_error *err) {
    if (mkdir(path, 0777) == 0) return 0;
    if (errno != EEXIST)
        return al__err(err, AL_E_IO, "%s: cannot create directory: %s", path, strerror(errno));
    struct stat st;
    if (lstat(path, &st) != 0)
        return al__err(err, AL_E_IO, "%s: cannot stat: %s", path, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return al__err(err, AL_E_IO, "%s: exists and is %s, not a directory attnlim made: refused",
                       path, al__file_kind(st.st_mode));
    if (st.st_uid != geteuid())
        return al__err(err, AL_E_IO, "%s: a directory of another user (uid %ld): refused", path,
                       (long)st.st_uid);
    return 0;
}

bool al__is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

int al__check_sha256(const char *path, const char *want, const char *what, al_error *err) {
    const char *nv = getenv("ATTNLIM_NO_VERIFY");
    if (nv && strcmp(nv, "1") == 0) return 0;
    char hex[65];
    int rc = al_sha256_file(path, hex, err);
    if (rc) return rc;
    if (strcmp(hex, want) != 0)
        return al__err(
            err, AL_E_FORMAT,
            "%s: SHA-256 %s does not match the pinned %s for %s (a different or corrupted file; "
            "remove it, or set ATTNLIM_NO_VERIFY=1 to use it anyway)",
            path, hex, want, what);
    return 0;
}

int al__run(char *const argv[]) {
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        dup2(2, 1);
        execvp(argv[0], argv);
        _exit(127);
    }
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR) return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}
