/* verify.c: SHA-256 of every tensor of a GPT-2 checkpoint, in the HF float32 little-endian
 * layout (Conv1D [in, out]), against a table of pinned hashes (default: the GPT-2 124M table
 * the project ships, data/gpt2_124M_tensor_sha256.tsv, itself pinned by its SHA-256).
 *
 * Names: a file's tensor is compared under its HF name with the "transformer." prefix (added
 * when absent; lm_head.weight stays as is). llm.c files are mapped to HF names and layout:
 * matrices transposed back to [in, out], wte cut to its V real rows; a bf16 (v5) file is
 * converted to float32 and cannot match hashes of a float32 original (said in the note).
 * Absent HF buffers (h.N.attn.bias, h.N.attn.masked_bias) and the tied lm_head.weight are
 * "optional", not missing: the model does not need them. */
#include "checkpoint.h"
#include "safetensors.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define TABLE_NAME "gpt2_124M_tensor_sha256.tsv"
/* SHA-256 of the shipped table (a copy of ../shared/data/gpt2/gpt2_124M_tensor_sha256.tsv). */
#define TABLE_SHA256 "e38f27ff7bc73f823d1208887408e68f739d14bc28da4f6715f15a15be9ad640"

typedef struct row {
    char name[160];
    int64_t bytes;
    char sha[65];
} row;

/* One tensor of the checkpoint, as float32 HF bytes (hash computed on the fly). */
typedef struct found {
    char name[160]; /* canonical: transformer.* or lm_head.weight */
    int64_t bytes;
    char sha[65];
    char note[128];
    int used; /* matched a table row */
} found;

static bool file_exists(
    const char *p) { /* present (not a directory): the reader refuses what is not a regular file */
    struct stat s;
    return stat(p, &s) == 0 && !S_ISDIR(s.st_mode);
}

/* The default table: share/attnlim next to the installed executable, then the source tree. */
static int default_table(char *out, size_t cap, al_error *err) {
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = 0;
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = 0;
            snprintf(out, cap, "%s/../share/attnlim/%s", exe, TABLE_NAME);
            if (file_exists(out)) return 0;
        }
    }
    const char *src = getenv("ATTNLIM_SOURCE_DIR");
    if (src && *src) {
        snprintf(out, cap, "%s/data/%s", src, TABLE_NAME);
        if (file_exists(out)) return 0;
    }
#ifdef AL_SOURCE_DIR
    snprintf(out, cap, "%s/data/%s", AL_SOURCE_DIR, TABLE_NAME);
    if (file_exists(out)) return 0;
#endif
    return al__err(
        err, AL_E_NOTFOUND,
        "the pinned table %s is neither in share/attnlim beside the executable nor in the source "
        "tree's data/ (give --table)",
        TABLE_NAME);
}

static bool is_hex64(const char *s) {
    for (int i = 0; i < 64; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return false;
    return s[64] == 0;
}

/* Parses "name<TAB>bytes<TAB>sha256" lines ('#' comments, blank lines skipped). */
static int read_table(const char *path, row **out, int *n_out, al_error *err) {
    char *text;
    size_t len;
    int rc = al__read_file(path, 16 << 20, &text, &len, err);
    if (rc) return rc;
    if (memchr(text, 0, len)) {
        free(text);
        return al__err(err, AL_E_FORMAT, "%s: binary data in a text table", path);
    }
    int cap = 1;
    for (size_t i = 0; i < len; i++) cap += text[i] == '\n';
    row *r = al__calloc((size_t)cap, sizeof *r, "hash table", err);
    if (!r) {
        free(text);
        return AL_E_NOMEM;
    }
    int n = 0, line = 0;
    char *save = NULL;
    for (char *l = strtok_r(text, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
        line++;
        size_t ll = strlen(l);
        if (ll && l[ll - 1] == '\r') l[--ll] = 0;
        if (ll == 0 || l[0] == '#') continue;
        char *t1 = strchr(l, '\t'), *t2 = t1 ? strchr(t1 + 1, '\t') : NULL;
        if (!t1 || !t2 || t1 == l || (size_t)(t1 - l) >= sizeof r[n].name) {
            rc = al__err(err, AL_E_FORMAT, "%s: line %d: expected name<TAB>bytes<TAB>sha256", path,
                         line);
            break;
        }
        *t1 = *t2 = 0;
        char *end;
        long long b = strtoll(t1 + 1, &end, 10);
        if (*end || b < 0 || !is_hex64(t2 + 1)) {
            rc = al__err(err, AL_E_FORMAT,
                         "%s: line %d: bad byte count or SHA-256 (64 lowercase hex digits)", path,
                         line);
            break;
        }
        snprintf(r[n].name, sizeof r[n].name, "%s", l);
        r[n].bytes = b;
        memcpy(r[n].sha, t2 + 1, 65);
        for (int k = 0; k < n && !rc; k++)
            if (!strcmp(r[k].name, r[n].name))
                rc = al__err(err, AL_E_FORMAT, "%s: line %d: %s listed twice", path, line,
                             r[n].name);
        n++;
    }
    free(text);
    if (!rc && n == 0) rc = al__err(err, AL_E_FORMAT, "%s: no entries", path);
    if (rc) {
        free(r);
        return rc;
    }
    *out = r;
    *n_out = n;
    return 0;
}

static void canonical(const char *name, char *out, size_t cap) {
    if (!strncmp(name, "transformer.", 12) || !strcmp(name, "lm_head.weight"))
        snprintf(out, cap, "%s", name);
    else
        snprintf(out, cap, "transformer.%s", name);
}

/* Hashes the tensors of a safetensors checkpoint. */
static int hash_safetensors(const char *path, found **out, int *n_out, al_error *err) {
    al__safetensors *st;
    int rc = al__st_open(path, &st, err);
    if (rc) return rc;
    int n = al__st_count(st);
    found *f = al__calloc((size_t)(n ? n : 1), sizeof *f, "tensor hashes", err);
    float *buf = NULL;
    if (!f) {
        al__st_close(st);
        return AL_E_NOMEM;
    }
    for (int i = 0; i < n && !rc; i++) {
        const al__st_tensor *t = al__st_at(st, i);
        canonical(t->name, f[i].name, sizeof f[i].name);
        if (t->dtype == AL_ST_F32) {
            al_sha256_buf(t->data, t->nbytes, f[i].sha);
            f[i].bytes = (int64_t)t->nbytes;
            al__model_scan_nonfinite(NULL, t->file, t->name, t->data, t->nbytes / 4);
        } else if (t->dtype == AL_ST_F16 || t->dtype == AL_ST_BF16 || t->dtype == AL_ST_F64) {
            size_t numel = al__st_numel(t);
            free(buf);
            if (!(buf = al__malloc(numel ? numel * 4 : 4, "float32 copy", err))) {
                rc = AL_E_NOMEM;
                break;
            }
            al__st_to_f32(t, buf, err);
            al_sha256_buf(buf, numel * 4, f[i].sha);
            al__model_scan_nonfinite(NULL, t->file, t->name, buf, numel);
            f[i].bytes = (int64_t)(numel * 4);
            snprintf(
                f[i].note, sizeof f[i].note, "stored as %s, hashed as float32%s", t->dtype_name,
                t->dtype == AL_ST_F64 ? ""
                                      : ": a lossy copy cannot match a float32 original's hash");
        } else {
            al_sha256_buf(t->data, t->nbytes, f[i].sha);
            f[i].bytes = (int64_t)t->nbytes;
            snprintf(f[i].note, sizeof f[i].note, "dtype %s is not float32", t->dtype_name);
        }
    }
    free(buf);
    al__st_close(st);
    if (rc) {
        free(f);
        return rc;
    }
    *out = f;
    *n_out = n;
    return 0;
}

/* Hashes the tensors of an llm.c checkpoint in the HF layout. */
static int hash_llmc(const char *path, found **out, int *n_out, char *format, size_t fcap,
                     al_error *err) {
    al__map map;
    al__llmc_hdr h;
    int rc = al__llmc_open(path, &map, &h, err);
    if (rc) return rc;
    snprintf(format, fcap, "llm.c v%d (%s)", h.version, h.version == 3 ? "fp32" : "bf16");
    int n = al__gpt2_n_tensors(&h.cfg);
    size_t biggest = 0;
    for (int i = 0; i < n; i++) {
        al__gpt2_spec s;
        al__gpt2_spec_at(&h.cfg, i, &s);
        size_t numel = (size_t)s.shape[0] * (s.ndim == 2 ? (size_t)s.shape[1] : 1);
        if (numel > biggest) biggest = numel;
    }
    found *f = al__calloc((size_t)n, sizeof *f, "tensor hashes", err);
    float *a = al__malloc(biggest * sizeof *a, "float32 copy", err);    /* [numel] as stored */
    float *b = al__malloc(biggest * sizeof *b, "transposed copy", err); /* [numel] HF layout */
    if (!f || !a || !b) rc = AL_E_NOMEM;
    size_t off = AL_LLMC_HEADER_BYTES;
    for (int i = 0; i < n && !rc; i++) {
        al__gpt2_spec s;
        al__gpt2_spec_at(&h.cfg, i, &s);
        size_t stored;
        al__llmc_offset(&h, i, &stored);
        const unsigned char *p = map.data + off;
        off += stored * h.elsize;
        size_t numel =
            (size_t)s.shape[0] * (s.ndim == 2 ? (size_t)s.shape[1] : 1); /* wte: V rows only */
        if (h.version == 3)
            memcpy(a, p, numel * 4);
        else
            for (size_t k = 0; k < numel; k++) a[k] = al__bf16_to_f32(al__le16(p + 2 * k));
        const float *hf = a;
        if (s.is_matrix) { /* llm.c [out, in] -> HF [in, out] */
            size_t in = (size_t)s.shape[0], o = (size_t)s.shape[1];
            for (size_t r = 0; r < in; r++)
                for (size_t k = 0; k < o; k++) b[r * o + k] = a[k * in + r];
            hf = b;
        }
        canonical(s.name, f[i].name, sizeof f[i].name);
        al_sha256_buf(hf, numel * 4, f[i].sha);
        al__model_scan_nonfinite(NULL, path, s.name, hf, numel);
        f[i].bytes = (int64_t)(numel * 4);
        if (h.version == 5)
            snprintf(
                f[i].note, sizeof f[i].note,
                "stored as bf16 (llm.c v5): a lossy copy cannot match a float32 original's hash");
    }
    free(a);
    free(b);
    al__unmap(&map);
    if (rc) {
        free(f);
        return rc;
    }
    *out = f;
    *n_out = n;
    return 0;
}

static bool is_llmc(const char *path) {
    FILE *fp = al__fopen_read(path, NULL);
    if (!fp) return false;
    unsigned char m[4] = {0};
    size_t got = fread(m, 1, 4, fp);
    fclose(fp);
    return got == 4 && al__le32(m) == AL_LLMC_MAGIC;
}

static void add_entry(al_verify_report *r, const char *name, al_verify_status st, const found *f,
                      const row *t) {
    al_verify_entry *e = &r->entries[r->n++];
    memset(e, 0, sizeof *e);
    snprintf(e->name, sizeof e->name, "%s", name);
    e->status = st;
    e->bytes = f ? f->bytes : -1;
    e->expected_bytes = t ? t->bytes : -1;
    if (f) memcpy(e->sha256, f->sha, 65), snprintf(e->note, sizeof e->note, "%s", f->note);
    if (t) memcpy(e->expected, t->sha, 65);
    if (f && t && f->bytes != t->bytes && !e->note[0])
        snprintf(e->note, sizeof e->note, "%lld bytes, the table has %lld (another shape)",
                 (long long)f->bytes, (long long)t->bytes);
}

int al_gpt2_verify(const char *model_path, const char *table, al_verify_report *out,
                   al_error *err) {
    memset(out, 0, sizeof *out);
    if (!model_path || !*model_path) return al__err(err, AL_E_INVALID, "verify: no model path");
    int rc;
    if (!table || !*table) {
        if ((rc = default_table(out->table, sizeof out->table, err))) return rc;
        char sha[65];
        if ((rc = al_sha256_file(out->table, sha, err))) return rc;
        if (strcmp(sha, TABLE_SHA256))
            return al__err(err, AL_E_FORMAT,
                           "%s: the pinned table was modified (SHA-256 %s, expected %s)",
                           out->table, sha, TABLE_SHA256);
    } else {
        snprintf(out->table, sizeof out->table, "%s", table);
    }
    row *rows = NULL;
    int n_rows = 0;
    if ((rc = read_table(out->table, &rows, &n_rows, err))) return rc;
    found *fs = NULL;
    int n_found = 0;
    if (is_llmc(model_path))
        rc = hash_llmc(model_path, &fs, &n_found, out->format, sizeof out->format, err);
    else {
        snprintf(out->format, sizeof out->format, "safetensors");
        rc = hash_safetensors(model_path, &fs, &n_found, err);
    }
    if (rc) {
        free(rows);
        return rc;
    }
    out->entries =
        al__calloc((size_t)(n_rows + n_found + 1), sizeof *out->entries, "verify report", err);
    if (!out->entries) {
        free(rows);
        free(fs);
        return AL_E_NOMEM;
    }
    for (int i = 0; i < n_rows; i++) {
        found *f = NULL;
        for (int k = 0; k < n_found && !f; k++)
            if (!fs[k].used && !strcmp(fs[k].name, rows[i].name)) f = &fs[k];
        if (f) {
            f->used = 1;
            bool ok = f->bytes == rows[i].bytes && !strcmp(f->sha, rows[i].sha);
            add_entry(out, rows[i].name, ok ? AL_VERIFY_MATCH : AL_VERIFY_MISMATCH, f, &rows[i]);
            ok ? out->matched++ : out->mismatched++;
        } else {
            const char *shortname =
                strncmp(rows[i].name, "transformer.", 12) ? rows[i].name : rows[i].name + 12;
            bool opt = al__gpt2_is_buffer(shortname);
            add_entry(out, rows[i].name, opt ? AL_VERIFY_OPTIONAL : AL_VERIFY_MISSING, NULL,
                      &rows[i]);
            opt ? out->optional_absent++ : out->missing++;
        }
    }
    for (int k = 0; k < n_found; k++)
        if (!fs[k].used) {
            add_entry(out, fs[k].name, AL_VERIFY_UNEXPECTED, &fs[k], NULL);
            out->unexpected++;
        }
    out->complete =
        out->missing == 0 && out->mismatched == 0 && out->unexpected == 0 && out->matched > 0;
    free(rows);
    free(fs);
    return 0;
}

void al_verify_report_free(al_verify_report *r) {
    if (!r) return;
    free(r->entries);
    memset(r, 0, sizeof *r);
}
