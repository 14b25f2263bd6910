/* data.c: finding the shared data files (tokenizer, corpus) and checking their pinned hashes. */
#include "hooks.h"
#include "internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct {
    const char *relpath;
    const char *sha256;
    const char *url; /* where a user outside our machines downloads it */
} data_pin;

/* The pins of ../shared/data/SHA256SUMS (facts: the hashes of public files). */
static const data_pin PINS[] = {
    {"gpt2/encoder.json", "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783",
     "https://openaipublic.blob.core.windows.net/gpt-2/encodings/main/encoder.json"},
    {"gpt2/vocab.bpe", "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5",
     "https://openaipublic.blob.core.windows.net/gpt-2/encodings/main/vocab.bpe"},
    {"war_and_peace/pg2600.txt", "aa4a454fb73861c0c84c662ed1fa3ddd71bbd7a237783932c05d5f3b2cdd6718",
     "https://www.gutenberg.org/cache/epub/2600/pg2600.txt"},
    {"gpt2/gpt2_124M_tensor_sha256.tsv",
     "e38f27ff7bc73f823d1208887408e68f739d14bc28da4f6715f15a15be9ad640", NULL},
    {"gpt2/gpt2-124M-partial.safetensors",
     "3261bf82448a9b638e53cc01130b5528c7cc94d4ddb97728689417b5bb4640e2", NULL},
};

static const data_pin *find_pin(const char *relpath) {
    for (size_t i = 0; i < sizeof PINS / sizeof PINS[0]; i++)
        if (strcmp(PINS[i].relpath, relpath) == 0) return &PINS[i];
    return NULL;
}

int al_cache_dir(char *out, size_t out_size, al_error *err) {
    const char *c = getenv("ATTNLIM_CACHE");
    const char *x = getenv("XDG_CACHE_HOME");
    const char *home = getenv("HOME");
    int n;
    if (c && *c)
        n = snprintf(out, out_size, "%s", c);
    else if (x && *x)
        n = snprintf(out, out_size, "%s/attnlim", x);
    else if (home && *home)
        n = snprintf(out, out_size, "%s/.cache/attnlim", home);
    else
        n = snprintf(out, out_size, "/tmp/attnlim-cache");
    if (n < 0 || (size_t)n >= out_size)
        return al__err(err, AL_E_INVALID, "cache directory path too long");
    return al__mkdirs(out, err);
}

static int check_pin(const char *path, const data_pin *pin, al_error *err) {
    return pin ? al__check_sha256(path, pin->sha256, pin->relpath, err) : 0;
}

static int download(const data_pin *pin, const char *dest, al_error *err) {
    char tmp[4200], dir[4096];
    snprintf(dir, sizeof dir, "%s", dest);
    char *slash = strrchr(dir, '/');
    if (slash) {
        *slash = 0;
        int rc = al__mkdirs(dir, err);
        if (rc) return rc;
    }
    snprintf(tmp, sizeof tmp, "%s.download.%ld", dest, (long)getpid());
    al__log(AL_LOG_NOTE, "attnlim: downloading %s from %s", pin->relpath, pin->url);
    char *curl[] = {"curl", "-fsSL", "--retry", "2", "-o", tmp, (char *)pin->url, NULL};
    char *wget[] = {"wget", "-q", "-O", tmp, (char *)pin->url, NULL};
    if (al__run(curl) != 0 && al__run(wget) != 0) {
        unlink(tmp);
        return al__err(
            err, AL_E_NOTFOUND,
            "%s: not found locally and the download from %s failed (no network, or neither curl "
            "nor wget); put the file under $ATTNLIM_DATA/%s or pass its path",
            pin->relpath, pin->url, pin->relpath);
    }
    int rc = check_pin(tmp, pin, err);
    if (rc) {
        unlink(tmp);
        return rc;
    }
    if (rename(tmp, dest) != 0) {
        unlink(tmp);
        return al__err(err, AL_E_IO, "%s: cannot rename the download into place: %s", dest,
                       strerror(errno));
    }
    return 0;
}

static int try_path(const char *path, const data_pin *pin, char *out, size_t out_size,
                    al_error *err, int *found) {
    *found = 0;
    if (!al__is_file(path)) return 0;
    int rc = check_pin(path, pin, err);
    if (rc) return rc;
    if (strlen(path) >= out_size) return al__err(err, AL_E_INVALID, "%s: path too long", path);
    snprintf(out, out_size, "%s", path);
    *found = 1;
    return 0;
}

int al_data_find(const char *relpath, const char *explicit_path, char *out, size_t out_size,
                 al_error *err) {
    const data_pin *pin = find_pin(relpath);
    char cand[4096];
    int found = 0, rc;
    if (explicit_path && *explicit_path) {
        if (al__is_dir(explicit_path)) {
            snprintf(cand, sizeof cand, "%s/%s", explicit_path, relpath);
            if (!al__is_file(cand)) {
                /* a flat directory: the basename directly inside it */
                const char *base = strrchr(relpath, '/');
                snprintf(cand, sizeof cand, "%s/%s", explicit_path, base ? base + 1 : relpath);
            }
        } else
            snprintf(cand, sizeof cand, "%s", explicit_path);
        if ((rc = try_path(cand, pin, out, out_size, err, &found))) return rc;
        if (found) return 0;
        return al__err(err, AL_E_NOTFOUND, "%s: not found (the path given for %s)", cand, relpath);
    }
    const char *env = getenv("ATTNLIM_DATA");
    if (env && *env) {
        snprintf(cand, sizeof cand, "%s/%s", env, relpath);
        if ((rc = try_path(cand, pin, out, out_size, err, &found))) return rc;
        if (found) return 0;
    }
    char cache[4096];
    int have_cache = al_cache_dir(cache, sizeof cache, NULL) == 0;
    if (have_cache) {
        snprintf(cand, sizeof cand, "%s/data/%s", cache, relpath);
        if ((rc = try_path(cand, pin, out, out_size, err, &found))) return rc;
        if (found) return 0;
    }
    const char *shared = getenv("ATTNLIM_SHARED_DIR"); /* overrides ../shared/data (tests) */
    if (shared && *shared) {
        snprintf(cand, sizeof cand, "%s/%s", shared, relpath);
        if ((rc = try_path(cand, pin, out, out_size, err, &found))) return rc;
        if (found) return 0;
    } else {
        snprintf(cand, sizeof cand, "../shared/data/%s", relpath);
        if ((rc = try_path(cand, pin, out, out_size, err, &found))) return rc;
        if (found) return 0;
#ifdef AL_SOURCE_DIR
        snprintf(cand, sizeof cand, "%s/../shared/data/%s", AL_SOURCE_DIR, relpath);
        if ((rc = try_path(cand, pin, out, out_size, err, &found))) return rc;
        if (found) return 0;
#endif
    }
    const char *nodl = getenv("ATTNLIM_NO_DOWNLOAD");
    int may_fetch = al__network_allowed() && !(nodl && strcmp(nodl, "1") == 0);
    if (pin && pin->url && have_cache && may_fetch) {
        snprintf(cand, sizeof cand, "%s/data/%s", cache, relpath);
        if ((rc = download(pin, cand, err))) return rc;
        snprintf(out, out_size, "%s", cand);
        return 0;
    }
    return al__err(
        err, AL_E_NOTFOUND,
        "%s: not found (looked in the flag, $ATTNLIM_DATA, the cache %s/data, ../shared/data%s); "
        "set ATTNLIM_DATA to a directory holding it",
        relpath, have_cache ? cache : "(none)",
        pin && pin->url && !al__network_allowed()
            ? "; not downloaded: this program does not allow network fetches (al_set_network)"
            : "");
}
