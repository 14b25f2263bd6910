/* fileio.c: checked file reading, read-only mappings, atomic writes, SHA-256 (OpenSSL). */
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <openssl/evp.h>

int al__read_file(const char *path, size_t max_size, char **out, size_t *len, al_error *err) {
    *out = NULL;
    if (len) *len = 0;
    FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
    if (!f) return al__err(err, AL_E_IO, "%s: cannot open: %s", path, strerror(errno));
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
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return al__err(err, AL_E_IO, "%s: cannot open: %s", path, strerror(errno));
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

int al__afile_open(al__afile *a, const char *path, al_error *err) {
    memset(a, 0, sizeof *a);
    if (strlen(path) >= sizeof a->path)
        return al__err(err, AL_E_INVALID, "%s: path too long", path);
    snprintf(a->path, sizeof a->path, "%s", path);
    snprintf(a->tmp, sizeof a->tmp, "%s.tmp.%ld", path, (long)getpid());
    a->f = fopen(a->tmp, "wb");
    if (!a->f)
        return al__err(err, AL_E_IO, "%s: cannot create (temp file %s): %s", path, a->tmp,
                       strerror(errno));
    return 0;
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
    if (fclose(a->f) != 0) bad = 1;
    a->f = NULL;
    if (bad) {
        unlink(a->tmp);
        return al__err(err, AL_E_IO, "%s: write failed: %s", a->path, strerror(saved));
    }
    if (rename(a->tmp, a->path) != 0) {
        saved = errno;
        unlink(a->tmp);
        return al__err(err, AL_E_IO, "%s: cannot rename into place: %s", a->path, strerror(saved));
    }
    return 0;
}

void al__afile_abort(al__afile *a) {
    if (a->f) {
        fclose(a->f);
        a->f = NULL;
    }
    if (a->tmp[0]) unlink(a->tmp);
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
    FILE *f = fopen(path, "rb");
    if (!f) return al__err(err, AL_E_IO, "%s: cannot open: %s", path, strerror(errno));
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
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
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
