/* safetensors.c: HF safetensors reader (single file or sharded index), every byte untrusted.
 *
 * File layout: u64 LE header length N | N bytes of JSON | data. The JSON maps tensor names to
 * {"dtype": "F32", "shape": [d0, ...], "data_offsets": [begin, end]} (offsets relative to the
 * data start) plus an optional "__metadata__" {string: string}. Files are mapped read-only;
 * tensors point into the mapping (no copies). The checks are listed in safetensors.h. */
#include "safetensors.h"
#include "textsafe.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define ST_MAX_HEADER ((size_t)100 << 20) /* 100 MB: HF's own cap */
#define ST_MAX_INDEX  ((size_t)64 << 20)  /* model.safetensors.index.json */
#define ST_MAX_SHARDS 4096

struct al__safetensors {
    int n;            /* tensors */
    al__st_tensor *t; /* [n] sorted by name */
    int n_files;
    al__map *maps;        /* [n_files] read-only mappings */
    char **paths;         /* [n_files] file paths (the tensors' file fields point here) */
    char main[4096 + 64]; /* the file opened: .safetensors or the index .json */
};

/* ---- dtypes ---------------------------------------------------------------------------------- */

typedef struct {
    const char *name;
    size_t size;
    al__st_dtype dt;
} dtype_desc;

static const dtype_desc DTYPES[] = {
    {"F32", 4, AL_ST_F32},    {"F16", 2, AL_ST_F16},       {"BF16", 2, AL_ST_BF16},
    {"F64", 8, AL_ST_F64},    {"I64", 8, AL_ST_I64},       {"I32", 4, AL_ST_I32},
    {"U8", 1, AL_ST_U8},      {"I8", 1, AL_ST_OTHER},      {"I16", 2, AL_ST_OTHER},
    {"U16", 2, AL_ST_OTHER},  {"U32", 4, AL_ST_OTHER},     {"U64", 8, AL_ST_OTHER},
    {"BOOL", 1, AL_ST_OTHER}, {"F8_E4M3", 1, AL_ST_OTHER}, {"F8_E5M2", 1, AL_ST_OTHER},
};

static const dtype_desc *find_dtype(const char *name) {
    for (size_t i = 0; i < sizeof DTYPES / sizeof DTYPES[0]; i++)
        if (strcmp(DTYPES[i].name, name) == 0) return &DTYPES[i];
    return NULL;
}

size_t al__st_dtype_size(const char *dtype_name) {
    const dtype_desc *d = find_dtype(dtype_name);
    return d ? d->size : 0;
}

size_t al__st_numel(const al__st_tensor *t) {
    size_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= (size_t)t->shape[i];
    return n;
}

float al__f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 31, man = h & 1023u, bits;
    if (exp == 0) {
        if (man == 0)
            bits = sign;
        else { /* subnormal: man * 2^-24 */
            float v = (float)man * 5.9604644775390625e-8f;
            return sign ? -v : v;
        }
    } else if (exp == 31)
        bits = sign | 0x7f800000u | (man << 13); /* Inf / NaN */
    else
        bits = sign | ((exp + 112) << 23) | (man << 13);
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

float al__bf16_to_f32(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

uint16_t al__f32_to_bf16(float f) {
    uint32_t bits;
    memcpy(&bits, &f, 4);
    if ((bits & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((bits >> 16) | 0x40); /* quiet NaN */
    bits += 0x7fffu + ((bits >> 16) & 1u); /* nearest even */
    return (uint16_t)(bits >> 16);
}

int al__st_to_f32(const al__st_tensor *t, float *dst, al_error *err) {
    size_t n = al__st_numel(t);
    const unsigned char *p = t->data;
    switch (t->dtype) {
    case AL_ST_F32:
        memcpy(dst, p, n * 4);
        return 0;
    case AL_ST_F16:
        for (size_t i = 0; i < n; i++) dst[i] = al__f16_to_f32(al__le16(p + 2 * i));
        return 0;
    case AL_ST_BF16:
        for (size_t i = 0; i < n; i++) dst[i] = al__bf16_to_f32(al__le16(p + 2 * i));
        return 0;
    case AL_ST_F64:
        for (size_t i = 0; i < n; i++) {
            uint64_t b = al__le64(p + 8 * i);
            double d;
            memcpy(&d, &b, 8);
            dst[i] = (float)d;
        }
        return 0;
    default:
        return al__err(err, AL_E_UNSUPPORTED, "%s: tensor %s has dtype %s, not a float type",
                       t->file, t->name, t->dtype_name);
    }
}

/* ---- header parsing ----------------------------------------------------------------------------
 */

/* A JSON number that is an exact non-negative integer <= 2^53. */
static bool json_uint(const cJSON *j, uint64_t *out) {
    if (!cJSON_IsNumber(j)) return false;
    double v = j->valuedouble;
    if (!(v >= 0.0) || v > 9007199254740992.0 || floor(v) != v) return false;
    *out = (uint64_t)v;
    return true;
}

static int parse_entry(const cJSON *e, const unsigned char *data, size_t data_size,
                       const char *name, al__st_tensor *t, al_error *err) {
    const char *tn = e->string;
    if (strlen(tn) >= sizeof t->name)
        return al__err(err, AL_E_FORMAT, "%s: tensor name of %zu bytes is too long (max %zu)", name,
                       strlen(tn), sizeof t->name - 1);
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", tn);
    t->file = name;
    if (!cJSON_IsObject(e))
        return al__err(err, AL_E_FORMAT, "%s: tensor %s: entry is not a JSON object", name, tn);
    const cJSON *jd = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    const cJSON *js = cJSON_GetObjectItemCaseSensitive(e, "shape");
    const cJSON *jo = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    if (!cJSON_IsString(jd) || !jd->valuestring)
        return al__err(err, AL_E_FORMAT, "%s: tensor %s: missing \"dtype\" string", name, tn);
    const dtype_desc *dd = find_dtype(jd->valuestring);
    if (!dd)
        return al__err(err, AL_E_FORMAT, "%s: tensor %s: unknown dtype '%.32s'", name, tn,
                       jd->valuestring);
    t->dtype = dd->dt;
    snprintf(t->dtype_name, sizeof t->dtype_name, "%s", dd->name);
    if (!cJSON_IsArray(js))
        return al__err(err, AL_E_FORMAT, "%s: tensor %s: missing \"shape\" array", name, tn);
    int nd = cJSON_GetArraySize(js);
    if (nd > 8) return al__err(err, AL_E_FORMAT, "%s: tensor %s: rank %d exceeds 8", name, tn, nd);
    t->ndim = nd;
    size_t numel = 1;
    int i = 0;
    for (const cJSON *d = js->child; d; d = d->next, i++) {
        uint64_t v;
        if (!json_uint(d, &v))
            return al__err(err, AL_E_FORMAT,
                           "%s: tensor %s: shape[%d] is not a non-negative integer", name, tn, i);
        t->shape[i] = (int64_t)v;
        if (!al__mul_ok(numel, (size_t)v, &numel))
            return al__err(err, AL_E_FORMAT, "%s: tensor %s: shape product overflows", name, tn);
    }
    size_t nbytes;
    if (!al__mul_ok(numel, dd->size, &nbytes))
        return al__err(err, AL_E_FORMAT, "%s: tensor %s: byte size overflows", name, tn);
    uint64_t b, en;
    if (!cJSON_IsArray(jo) || cJSON_GetArraySize(jo) != 2 || !json_uint(jo->child, &b) ||
        !json_uint(jo->child->next, &en))
        return al__err(err, AL_E_FORMAT,
                       "%s: tensor %s: \"data_offsets\" must be [begin, end] integers", name, tn);
    if (b > en || en > data_size)
        return al__err(
            err, AL_E_FORMAT,
            "%s: tensor %s: data_offsets [%llu, %llu] outside the data section of %zu bytes "
            "(truncated or lying file)",
            name, tn, (unsigned long long)b, (unsigned long long)en, data_size);
    if (en - b != nbytes)
        return al__err(err, AL_E_FORMAT,
                       "%s: tensor %s: data_offsets span %llu bytes but %s shape needs %zu", name,
                       tn, (unsigned long long)(en - b), dd->name, nbytes);
    t->data = data + b;
    t->nbytes = nbytes;
    return 0;
}

static int cmp_name(const void *a, const void *b) {
    return strcmp(((const al__st_tensor *)a)->name, ((const al__st_tensor *)b)->name);
}
static int cmp_ptr(const void *a, const void *b) {
    const al__st_tensor *x = *(al__st_tensor *const *)a, *y = *(al__st_tensor *const *)b;
    return x->data < y->data ? -1 : x->data > y->data;
}

/* Rejects two non-empty tensors sharing bytes. */
static int check_overlap(al__st_tensor *t, int n, const char *name, al_error *err) {
    al__st_tensor **by = al__malloc((size_t)(n ? n : 1) * sizeof *by, "tensor order", err);
    if (!by) return AL_E_NOMEM;
    int k = 0;
    for (int i = 0; i < n; i++)
        if (t[i].nbytes) by[k++] = &t[i];
    qsort(by, (size_t)k, sizeof *by, cmp_ptr);
    int rc = 0;
    for (int i = 1; i < k; i++)
        if (by[i - 1]->data + by[i - 1]->nbytes > by[i]->data) {
            rc = al__err(err, AL_E_FORMAT, "%s: tensors %s and %s overlap in the data section",
                         name, by[i - 1]->name, by[i]->name);
            break;
        }
    free(by);
    return rc;
}

int al__st_parse_buffer(const unsigned char *buf, size_t len, const char *name, al__st_tensor **out,
                        int *n, al_error *err) {
    *out = NULL;
    *n = 0;
    if (len < 8)
        return al__err(err, AL_E_FORMAT,
                       "%s: %zu bytes: too short for the 8-byte header length (truncated?)", name,
                       len);
    uint64_t hlen = al__le64(buf);
    if (hlen > ST_MAX_HEADER)
        return al__err(err, AL_E_FORMAT, "%s: header length %llu exceeds the limit of %zu bytes",
                       name, (unsigned long long)hlen, ST_MAX_HEADER);
    if (hlen > len - 8)
        return al__err(err, AL_E_FORMAT,
                       "%s: header length %llu exceeds the %zu bytes after it (truncated?)", name,
                       (unsigned long long)hlen, len - 8);
    if (hlen < 2)
        return al__err(err, AL_E_FORMAT, "%s: header of %llu bytes is too short", name,
                       (unsigned long long)hlen);
    const char *hdr = (const char *)buf + 8;
    if (hdr[0] != '{') return al__err(err, AL_E_FORMAT, "%s: header does not start with '{'", name);
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(hdr, (size_t)hlen, &end, 0);
    if (!j || !cJSON_IsObject(j)) {
        cJSON_Delete(j);
        return al__err(err, AL_E_FORMAT, "%s: header is not a valid JSON object", name);
    }
    for (const char *p = end; p && p < hdr + hlen; p++)
        if (*p != ' ' && *p != '\n' && *p != '\t' && *p != '\r' && *p != 0) {
            cJSON_Delete(j);
            return al__err(err, AL_E_FORMAT, "%s: bytes after the header's JSON object", name);
        }
    const unsigned char *data = buf + 8 + hlen;
    size_t data_size = len - 8 - (size_t)hlen;
    int count = 0;
    for (const cJSON *e = j->child; e; e = e->next) count++;
    al__st_tensor *t =
        al__calloc((size_t)(count ? count : 1), sizeof *t, "safetensors header", err);
    if (!t) {
        cJSON_Delete(j);
        return AL_E_NOMEM;
    }
    int k = 0, rc = 0;
    for (const cJSON *e = j->child; e && !rc; e = e->next) {
        if (!e->string) {
            rc = al__err(err, AL_E_FORMAT, "%s: header entry without a name", name);
        } else if (strcmp(e->string, "__metadata__") == 0) {
            if (!cJSON_IsObject(e))
                rc = al__err(err, AL_E_FORMAT, "%s: __metadata__ is not an object", name);
            for (const cJSON *m = e->child; m && !rc; m = m->next)
                if (!cJSON_IsString(m))
                    rc = al__err(err, AL_E_FORMAT, "%s: __metadata__ value of '%s' is not a string",
                                 name, m->string ? m->string : "?");
        } else {
            rc = parse_entry(e, data, data_size, name, &t[k], err);
            if (!rc) k++;
        }
    }
    cJSON_Delete(j);
    if (!rc) {
        qsort(t, (size_t)k, sizeof *t, cmp_name);
        for (int i = 1; i < k && !rc; i++)
            if (strcmp(t[i - 1].name, t[i].name) == 0)
                rc = al__err(err, AL_E_FORMAT, "%s: tensor %s appears twice in the header", name,
                             t[i].name);
    }
    if (!rc) rc = check_overlap(t, k, name, err);
    if (rc) {
        free(t);
        return rc;
    }
    *out = t;
    *n = k;
    return 0;
}

/* ---- files ------------------------------------------------------------------------------------
 */

static bool is_dir(const char *p) {
    struct stat s;
    return stat(p, &s) == 0 && S_ISDIR(s.st_mode);
}
static bool is_file(
    const char *p) { /* present (not a directory): the reader refuses what is not a regular file */
    struct stat s;
    return stat(p, &s) == 0 && !S_ISDIR(s.st_mode);
}
static bool ends_with(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && strcmp(s + a - b, suf) == 0;
}

/* Maps file paths[i] (already in st->paths) and appends its tensors to *all. */
static int add_file(al__safetensors *st, int i, al__st_tensor **all, int *n_all, al_error *err) {
    int rc = al__map_file(st->paths[i], &st->maps[i], err);
    if (rc) return rc;
    st->n_files = i + 1;
    al__st_tensor *t;
    int n;
    rc = al__st_parse_buffer(st->maps[i].data, st->maps[i].size, st->paths[i], &t, &n, err);
    if (rc) return rc;
    al__st_tensor *grown = realloc(*all, (size_t)(*n_all + n + 1) * sizeof *grown);
    if (!grown) {
        free(t);
        return al__err(err, AL_E_NOMEM, "%s: out of memory for the tensor table", st->paths[i]);
    }
    memcpy(grown + *n_all, t, (size_t)n * sizeof *t);
    free(t);
    *all = grown;
    *n_all += n;
    return 0;
}

static int open_single(al__safetensors *st, const char *path, al_error *err) {
    st->maps = al__calloc(1, sizeof *st->maps, "mapping", err);
    st->paths = al__calloc(1, sizeof *st->paths, "paths", err);
    if (!st->maps || !st->paths) return AL_E_NOMEM;
    if (!(st->paths[0] = strdup(path))) return al__err(err, AL_E_NOMEM, "out of memory");
    return add_file(st, 0, &st->t, &st->n, err);
}

static int open_index(al__safetensors *st, const char *index, al_error *err) {
    char *text;
    size_t len;
    int rc = al__read_file(index, ST_MAX_INDEX, &text, &len, err);
    if (rc) return rc;
    cJSON *j = cJSON_ParseWithLength(text, len);
    free(text);
    if (!j) return al__err(err, AL_E_FORMAT, "%s: not valid JSON", index);
    if (al__json_check_unique(j, index, err)) {
        cJSON_Delete(j);
        return AL_E_FORMAT;
    }
    const cJSON *wm = cJSON_GetObjectItemCaseSensitive(j, "weight_map");
    if (!cJSON_IsObject(wm) || !wm->child) {
        cJSON_Delete(j);
        return al__err(err, AL_E_FORMAT, "%s: no \"weight_map\" object", index);
    }
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", index);
    char *slash = strrchr(dir, '/');
    if (slash)
        slash[1] = 0;
    else
        dir[0] = 0;
    /* distinct shard names, in order of first appearance */
    int cap = 0;
    for (const cJSON *e = wm->child; e; e = e->next) cap++;
    st->maps = al__calloc((size_t)cap, sizeof *st->maps, "mappings", err);
    st->paths = al__calloc((size_t)cap, sizeof *st->paths, "paths", err);
    if (!st->maps || !st->paths) {
        cJSON_Delete(j);
        return AL_E_NOMEM;
    }
    int n_shards = 0;
    rc = 0;
    for (const cJSON *e = wm->child; e && !rc; e = e->next) {
        const char *s = cJSON_IsString(e) ? e->valuestring : NULL;
        if (!s || !*s || strchr(s, '/') || strcmp(s, ".") == 0 || strcmp(s, "..") == 0) {
            rc = al__err(err, AL_E_FORMAT,
                         "%s: weight_map entry of %s is not a file name in the same directory",
                         index, e->string ? e->string : "?");
            break;
        }
        char full[4096 + 256];
        snprintf(full, sizeof full, "%s%s", dir, s);
        int found = 0;
        for (int i = 0; i < n_shards && !found; i++) found = strcmp(st->paths[i], full) == 0;
        if (found) continue;
        if (n_shards >= ST_MAX_SHARDS) {
            rc = al__err(err, AL_E_FORMAT, "%s: more than %d shards", index, ST_MAX_SHARDS);
            break;
        }
        if (!(st->paths[n_shards] = strdup(full)))
            rc = al__err(err, AL_E_NOMEM, "out of memory");
        else if (!is_file(full))
            rc = al__err(err, AL_E_NOTFOUND, "%s: shard %s (holding %s) is missing", index, full,
                         e->string);
        n_shards++;
    }
    for (int i = 0; i < n_shards && !rc; i++) rc = add_file(st, i, &st->t, &st->n, err);
    st->n_files = n_shards; /* paths owned even when a later shard failed */
    if (!rc) {
        qsort(st->t, (size_t)st->n, sizeof *st->t, cmp_name);
        for (int i = 1; i < st->n && !rc; i++)
            if (strcmp(st->t[i - 1].name, st->t[i].name) == 0)
                rc = al__err(err, AL_E_FORMAT, "%s: tensor %s is in two shards (%s, %s)", index,
                             st->t[i].name, st->t[i - 1].file, st->t[i].file);
    }
    for (const cJSON *e = wm->child; e && !rc; e = e->next) {
        const al__st_tensor *t = al__st_find(st, e->string);
        if (!t || strcmp(strrchr(t->file, '/') ? strrchr(t->file, '/') + 1 : t->file,
                         e->valuestring) != 0)
            rc = al__err(err, AL_E_FORMAT, "%s: weight_map puts %s in %s, which does not hold it",
                         index, e->string, e->valuestring);
    }
    cJSON_Delete(j);
    return rc;
}

int al__st_open(const char *path, al__safetensors **out, al_error *err) {
    *out = NULL;
    al__safetensors *st = al__calloc(1, sizeof *st, "safetensors", err);
    if (!st) return AL_E_NOMEM;
    int rc;
    char buf[4096 + 64];
    if (is_dir(path)) {
        snprintf(buf, sizeof buf, "%s/model.safetensors.index.json", path);
        if (is_file(buf))
            rc = open_index(st, buf, err);
        else {
            snprintf(buf, sizeof buf, "%s/model.safetensors", path);
            if (is_file(buf))
                rc = open_single(st, buf, err);
            else
                rc =
                    al__err(err, AL_E_NOTFOUND,
                            "%s: no model.safetensors or model.safetensors.index.json in it", path);
        }
    } else if (ends_with(path, ".json")) {
        rc = open_index(st, path, err);
    } else {
        rc = open_single(st, path, err);
    }
    if (rc) {
        al__st_close(st);
        return rc;
    }
    snprintf(st->main, sizeof st->main, "%s", is_dir(path) ? buf : path);
    *out = st;
    return 0;
}

const char *al__st_path(const al__safetensors *st) {
    return st->main;
}

int al__st_open_buffer(const unsigned char *buf, size_t len, const char *name,
                       al__safetensors **out, al_error *err) {
    *out = NULL;
    al__safetensors *st = al__calloc(1, sizeof *st, "safetensors", err);
    if (!st) return AL_E_NOMEM;
    snprintf(st->main, sizeof st->main, "%s", name);
    int rc = al__st_parse_buffer(buf, len, st->main, &st->t, &st->n, err);
    if (rc) {
        free(st);
        return rc;
    }
    *out = st;
    return 0;
}

void al__st_close(al__safetensors *st) {
    if (!st) return;
    for (int i = 0; i < st->n_files; i++) {
        if (st->maps) al__unmap(&st->maps[i]);
        if (st->paths) free(st->paths[i]);
    }
    free(st->maps);
    free(st->paths);
    free(st->t);
    free(st);
}

int al__st_count(const al__safetensors *st) {
    return st->n;
}

const al__st_tensor *al__st_at(const al__safetensors *st, int i) {
    return i >= 0 && i < st->n ? &st->t[i] : NULL;
}

const al__st_tensor *al__st_find(const al__safetensors *st, const char *name) {
    al__st_tensor key;
    if (!name || strlen(name) >= sizeof key.name) return NULL;
    snprintf(key.name, sizeof key.name, "%s", name);
    return bsearch(&key, st->t, (size_t)st->n, sizeof *st->t, cmp_name);
}

static void shape_str(int ndim, const int64_t *shape, char *out, size_t cap) {
    size_t k = 0;
    k += (size_t)snprintf(out, cap, "[");
    for (int i = 0; i < ndim && k < cap; i++)
        k += (size_t)snprintf(out + k, cap - k, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (k < cap) snprintf(out + k, cap - k, "]");
}

int al__st_check_f32(const al__safetensors *st, const char *name, int ndim, const int64_t *shape,
                     al_error *err) {
    const al__st_tensor *t = al__st_find(st, name);
    if (!t)
        return al__err(err, AL_E_NOTFOUND, "%s: tensor %s is missing",
                       st->n_files ? st->paths[0] : "safetensors", name);
    bool same = t->ndim == ndim;
    for (int i = 0; same && i < ndim; i++) same = t->shape[i] == shape[i];
    if (!same) {
        char want[160], have[160];
        shape_str(ndim, shape, want, sizeof want);
        shape_str(t->ndim, t->shape, have, sizeof have);
        return al__err(err, AL_E_FORMAT, "%s: expected %s, file has %s (%s)", name, want, have,
                       t->file);
    }
    return 0;
}

int al__st_load_f32(const al__safetensors *st, const char *name, int ndim, const int64_t *shape,
                    float *dst, al_error *err) {
    int rc = al__st_check_f32(st, name, ndim, shape, err);
    return rc ? rc : al__st_to_f32(al__st_find(st, name), dst, err);
}
