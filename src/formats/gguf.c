/* gguf.c: the GGUF reader (see gguf.h). Every count, length, offset and size read from the
 * file is checked against the bytes that remain before it is used. */
#include "gguf.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* A read cursor over untrusted bytes. */
typedef struct cursor {
    const unsigned char *p; /* [size] */
    size_t size, pos;
    const char *name;
} cursor;

static size_t remaining(const cursor *c) {
    return c->size - c->pos;
}

static int need(cursor *c, size_t n, const char *what, al_error *err) {
    if (n > remaining(c))
        return al__err(err, AL_E_FORMAT,
                       "%s: truncated: %s needs %zu bytes at offset %zu, only %zu left", c->name,
                       what, n, c->pos, remaining(c));
    return 0;
}

static int rd_u32(cursor *c, uint32_t *v, const char *what, al_error *err) {
    int rc = need(c, 4, what, err);
    if (rc) return rc;
    *v = al__le32(c->p + c->pos);
    c->pos += 4;
    return 0;
}

static int rd_u64(cursor *c, uint64_t *v, const char *what, al_error *err) {
    int rc = need(c, 8, what, err);
    if (rc) return rc;
    *v = al__le64(c->p + c->pos);
    c->pos += 8;
    return 0;
}

/* A string: u64 length + bytes, bounded by max and by the file. */
static int rd_str(cursor *c, const char **s, size_t *len, size_t max, const char *what,
                  al_error *err) {
    uint64_t n;
    int rc = rd_u64(c, &n, what, err);
    if (rc) return rc;
    if (n > max)
        return al__err(err, AL_E_FORMAT, "%s: %s at offset %zu has length %llu (limit %zu)",
                       c->name, what, c->pos - 8, (unsigned long long)n, max);
    if ((rc = need(c, (size_t)n, what, err))) return rc;
    *s = (const char *)c->p + c->pos;
    *len = (size_t)n;
    c->pos += (size_t)n;
    return 0;
}

static char *dup_str(const char *s, size_t n, al_error *err) {
    char *d = al__malloc(n + 1, "GGUF string", err);
    if (!d) return NULL;
    memcpy(d, s, n);
    d[n] = 0;
    return d;
}

/* Bytes of one scalar of type t (0 for STRING / ARRAY / unknown). */
static size_t scalar_size(uint32_t t) {
    switch (t) {
    case AL_GGUF_U8:
    case AL_GGUF_I8:
    case AL_GGUF_BOOL:
        return 1;
    case AL_GGUF_U16:
    case AL_GGUF_I16:
        return 2;
    case AL_GGUF_U32:
    case AL_GGUF_I32:
    case AL_GGUF_F32:
        return 4;
    case AL_GGUF_U64:
    case AL_GGUF_I64:
    case AL_GGUF_F64:
        return 8;
    default:
        return 0;
    }
}

static int known_vtype(uint32_t t) {
    return t <= AL_GGUF_F64;
}

static void decode_scalar(al__gguf_kv *kv, const unsigned char *p) {
    switch (kv->type) {
    case AL_GGUF_U8:
        kv->v.u = p[0];
        break;
    case AL_GGUF_BOOL:
        kv->v.u = p[0] != 0;
        break;
    case AL_GGUF_I8:
        kv->v.i = (int8_t)p[0];
        break;
    case AL_GGUF_U16:
        kv->v.u = al__le16(p);
        break;
    case AL_GGUF_I16:
        kv->v.i = (int16_t)al__le16(p);
        break;
    case AL_GGUF_U32:
        kv->v.u = al__le32(p);
        break;
    case AL_GGUF_I32:
        kv->v.i = (int32_t)al__le32(p);
        break;
    case AL_GGUF_U64:
        kv->v.u = al__le64(p);
        break;
    case AL_GGUF_I64:
        kv->v.i = (int64_t)al__le64(p);
        break;
    case AL_GGUF_F32: {
        uint32_t b = al__le32(p);
        float f;
        memcpy(&f, &b, 4);
        kv->v.f = f;
        break;
    }
    case AL_GGUF_F64: {
        uint64_t b = al__le64(p);
        memcpy(&kv->v.f, &b, 8);
        break;
    }
    default:
        break;
    }
}

static int parse_kv(cursor *c, al__gguf_kv *kv, al_error *err) {
    const char *key;
    size_t klen;
    int rc = rd_str(c, &key, &klen, AL_GGUF_MAX_KEY, "a metadata key", err);
    if (rc) return rc;
    if (!(kv->key = dup_str(key, klen, err))) return AL_E_NOMEM;
    if (strlen(kv->key) != klen)
        return al__err(err, AL_E_FORMAT, "%s: metadata key at offset %zu contains a NUL byte",
                       c->name, c->pos - klen);
    uint32_t t;
    if ((rc = rd_u32(c, &t, "a metadata value type", err))) return rc;
    if (!known_vtype(t))
        return al__err(err, AL_E_FORMAT, "%s: metadata '%s' has unknown value type %u", c->name,
                       kv->key, t);
    kv->type = (al__gguf_vtype)t;
    if (t == AL_GGUF_STRING)
        return rd_str(c, &kv->str, &kv->str_len, AL_GGUF_MAX_STRING, kv->key, err);
    if (t != AL_GGUF_ARRAY) {
        size_t n = scalar_size(t);
        if ((rc = need(c, n, kv->key, err))) return rc;
        decode_scalar(kv, c->p + c->pos);
        c->pos += n;
        return 0;
    }
    uint32_t et;
    uint64_t n;
    if ((rc = rd_u32(c, &et, "an array element type", err))) return rc;
    if ((rc = rd_u64(c, &n, "an array length", err))) return rc;
    if (!known_vtype(et))
        return al__err(err, AL_E_FORMAT, "%s: array '%s' has unknown element type %u", c->name,
                       kv->key, et);
    if (et == AL_GGUF_ARRAY)
        return al__err(err, AL_E_UNSUPPORTED,
                       "%s: array '%s' holds arrays (nested arrays are not supported)", c->name,
                       kv->key);
    kv->arr_type = (al__gguf_vtype)et;
    kv->arr_n = n;
    kv->arr_data = c->p + c->pos;
    /* every element needs at least its fixed size (8 bytes of length for a string) */
    size_t min_el = et == AL_GGUF_STRING ? 8 : scalar_size(et);
    if (n > remaining(c) / min_el)
        return al__err(err, AL_E_FORMAT,
                       "%s: array '%s' claims %llu elements, more than the %zu bytes left hold",
                       c->name, kv->key, (unsigned long long)n, remaining(c));
    if (et != AL_GGUF_STRING) {
        c->pos += (size_t)n * min_el;
        return 0;
    }
    for (uint64_t i = 0; i < n; i++) {
        const char *s;
        size_t len;
        if ((rc = rd_str(c, &s, &len, AL_GGUF_MAX_STRING, kv->key, err))) return rc;
    }
    return 0;
}

static int parse_tensor_info(cursor *c, al__gguf_tensor *t, al_error *err) {
    const char *name;
    size_t nlen;
    int rc = rd_str(c, &name, &nlen, AL_GGUF_MAX_KEY, "a tensor name", err);
    if (rc) return rc;
    if (!(t->name = dup_str(name, nlen, err))) return AL_E_NOMEM;
    uint32_t nd;
    if ((rc = rd_u32(c, &nd, "a tensor's n_dims", err))) return rc;
    if (nd < 1 || nd > AL_GGUF_MAX_DIMS)
        return al__err(err, AL_E_FORMAT, "%s: tensor '%s' has %u dimensions (1..%d supported)",
                       c->name, t->name, nd, AL_GGUF_MAX_DIMS);
    t->n_dims = (int)nd;
    size_t n_elem = 1;
    for (int d = 0; d < AL_GGUF_MAX_DIMS; d++) t->ne[d] = 1;
    for (uint32_t d = 0; d < nd; d++) {
        uint64_t ne;
        if ((rc = rd_u64(c, &ne, "a tensor dimension", err))) return rc;
        if (ne == 0 || ne > (uint64_t)INT64_MAX || !al__mul_ok(n_elem, (size_t)ne, &n_elem) ||
            n_elem > (size_t)INT64_MAX)
            return al__err(err, AL_E_FORMAT,
                           "%s: tensor '%s' has a bad dimension %llu (zero or overflowing)",
                           c->name, t->name, (unsigned long long)ne);
        t->ne[d] = (int64_t)ne;
    }
    t->n_elem = (int64_t)n_elem;
    if ((rc = rd_u32(c, &t->type, "a tensor type", err))) return rc;
    size_t be, bb;
    if (!al__ggml_type_size(t->type, &be, &bb))
        return al__err(err, AL_E_FORMAT, "%s: tensor '%s' has unknown GGML type %u", c->name,
                       t->name, t->type);
    if (t->ne[0] % (int64_t)be != 0)
        return al__err(
            err, AL_E_FORMAT,
            "%s: tensor '%s' (%s) has rows of %lld elements, not a multiple of its block of %zu",
            c->name, t->name, al__ggml_type_name(t->type), (long long)t->ne[0], be);
    if (!al__mul_ok(n_elem / be, bb, &t->nbytes))
        return al__err(err, AL_E_FORMAT, "%s: tensor '%s' byte size overflows", c->name, t->name);
    return rd_u64(c, &t->offset, "a tensor offset", err);
}

static int cmp_strp(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The first name that occurs twice among n records (a char* at byte offset off of each), by
 * sorting (O(n log n): a file may hold a million names). *dup = NULL when all differ. */
static int find_duplicate(const void *recs, size_t n, size_t size, size_t off, const char **dup,
                          al_error *err) {
    *dup = NULL;
    if (n < 2) return 0;
    const char **names = al__malloc(n * sizeof *names, "GGUF name index", err);
    if (!names) return AL_E_NOMEM;
    for (size_t i = 0; i < n; i++)
        memcpy(&names[i], (const char *)recs + i * size + off, sizeof(char *));
    qsort(names, n, sizeof *names, cmp_strp);
    for (size_t i = 1; i < n && !*dup; i++)
        if (strcmp(names[i - 1], names[i]) == 0) *dup = names[i];
    free(names);
    return 0;
}

static int cmp_offset(const void *a, const void *b) {
    const al__gguf_tensor *x = *(const al__gguf_tensor *const *)a;
    const al__gguf_tensor *y = *(const al__gguf_tensor *const *)b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* Rejects two tensors sharing data bytes: a lying file, whose few bytes would otherwise stand
 * for any number of tensors (a loader's float32 copy of them unbounded by the file size). */
static int check_overlap(const al__gguf *g, al_error *err) {
    size_t n = (size_t)g->n_tensors;
    if (n < 2) return 0;
    const al__gguf_tensor **by = al__malloc(n * sizeof *by, "GGUF tensor order", err);
    if (!by) return AL_E_NOMEM;
    for (size_t i = 0; i < n; i++) by[i] = &g->tensors[i];
    qsort(by, n, sizeof *by, cmp_offset);
    int rc = 0;
    for (size_t i = 1; i < n && !rc; i++)
        if (by[i - 1]->offset + by[i - 1]->nbytes > by[i]->offset)
            rc = al__err(err, AL_E_FORMAT, "%s: tensors '%s' and '%s' overlap in the data section",
                         g->name, by[i - 1]->name, by[i]->name);
    free(by);
    return rc;
}

static int parse(al__gguf *g, al_error *err) {
    cursor c = {g->data, g->size, 0, g->name};
    int rc;
    if (g->size < 4 || memcmp(g->data, "GGUF", 4) != 0)
        return al__err(err, AL_E_FORMAT, "%s: not a GGUF file (bad magic)", g->name);
    c.pos = 4;
    if ((rc = rd_u32(&c, &g->version, "the version", err))) return rc;
    if (g->version != 2 && g->version != 3)
        return al__err(err, AL_E_UNSUPPORTED, "%s: GGUF version %u is not supported (2 and 3 are)",
                       g->name, g->version);
    uint64_t nt, nkv;
    if ((rc = rd_u64(&c, &nt, "the tensor count", err))) return rc;
    if ((rc = rd_u64(&c, &nkv, "the metadata count", err))) return rc;
    /* a key/value pair takes at least 8+4+1 bytes, a tensor info 8+4+8+4+8 */
    if (nt > AL_GGUF_MAX_TENSORS || nt > remaining(&c) / 32)
        return al__err(err, AL_E_FORMAT,
                       "%s: tensor count %llu is impossible for a file of %zu bytes", g->name,
                       (unsigned long long)nt, g->size);
    if (nkv > AL_GGUF_MAX_KV || nkv > remaining(&c) / 13)
        return al__err(err, AL_E_FORMAT,
                       "%s: metadata count %llu is impossible for a file of %zu bytes", g->name,
                       (unsigned long long)nkv, g->size);
    g->kv = al__calloc(nkv ? nkv : 1, sizeof *g->kv, "GGUF metadata", err);
    g->tensors = al__calloc(nt ? nt : 1, sizeof *g->tensors, "GGUF tensor infos", err);
    if (!g->kv || !g->tensors) return AL_E_NOMEM;
    for (uint64_t i = 0; i < nkv; i++) {
        g->n_kv = (int64_t)i + 1;
        if ((rc = parse_kv(&c, &g->kv[i], err))) return rc;
    }
    const char *dup;
    if ((rc = find_duplicate(g->kv, (size_t)g->n_kv, sizeof *g->kv, offsetof(al__gguf_kv, key),
                             &dup, err)))
        return rc;
    if (dup) return al__err(err, AL_E_FORMAT, "%s: metadata key '%s' appears twice", g->name, dup);
    g->alignment = 32;
    const al__gguf_kv *al = al__gguf_find(g, "general.alignment");
    if (al) {
        if (al->type != AL_GGUF_U32 || al->v.u == 0 || al->v.u > (1u << 20) ||
            (al->v.u & (al->v.u - 1)))
            return al__err(err, AL_E_FORMAT,
                           "%s: general.alignment must be a u32 power of two (got type %d, %llu)",
                           g->name, (int)al->type, (unsigned long long)al->v.u);
        g->alignment = (size_t)al->v.u;
    }
    for (uint64_t i = 0; i < nt; i++) {
        g->n_tensors = (int64_t)i + 1;
        if ((rc = parse_tensor_info(&c, &g->tensors[i], err))) return rc;
    }
    size_t off = c.pos + (g->alignment - c.pos % g->alignment) % g->alignment;
    if (off > g->size && nt > 0)
        return al__err(err, AL_E_FORMAT,
                       "%s: truncated before the tensor data (offset %zu, file %zu bytes)", g->name,
                       off, g->size);
    g->data_offset = off;
    size_t data_size = off <= g->size ? g->size - off : 0;
    for (int64_t i = 0; i < g->n_tensors; i++) {
        al__gguf_tensor *t = &g->tensors[i];
        if (t->offset % g->alignment != 0)
            return al__err(err, AL_E_FORMAT,
                           "%s: tensor '%s' data offset %llu is not aligned to %zu", g->name,
                           t->name, (unsigned long long)t->offset, g->alignment);
        if (t->offset > data_size || t->nbytes > data_size - t->offset)
            return al__err(
                err, AL_E_FORMAT,
                "%s: tensor '%s' data [%llu, +%zu) lies outside the data section of %zu bytes "
                "(truncated file?)",
                g->name, t->name, (unsigned long long)t->offset, t->nbytes, data_size);
        t->data = g->data + off + t->offset;
    }
    if ((rc = find_duplicate(g->tensors, (size_t)g->n_tensors, sizeof *g->tensors,
                             offsetof(al__gguf_tensor, name), &dup, err)))
        return rc;
    if (dup) return al__err(err, AL_E_FORMAT, "%s: tensor '%s' appears twice", g->name, dup);
    return check_overlap(g, err);
}

int al__gguf_parse(const void *buf, size_t len, const char *name, al__gguf **out, al_error *err) {
    *out = NULL;
    al__gguf *g = al__calloc(1, sizeof *g, "GGUF reader", err);
    if (!g) return AL_E_NOMEM;
    snprintf(g->name, sizeof g->name, "%s", name ? name : "<gguf>");
    g->data = buf;
    g->size = len;
    int rc = parse(g, err);
    if (rc) {
        al__gguf_close(g);
        return rc;
    }
    *out = g;
    return 0;
}

int al__gguf_open(const char *path, al__gguf **out, al_error *err) {
    *out = NULL;
    al__map map;
    int rc = al__map_file(path, &map, err);
    if (rc) return rc;
    rc = al__gguf_parse(map.data, map.size, path, out, err);
    if (rc) {
        al__unmap(&map);
        return rc;
    }
    (*out)->map = map;
    return 0;
}

void al__gguf_close(al__gguf *g) {
    if (!g) return;
    for (int64_t i = 0; i < g->n_kv; i++) free(g->kv[i].key);
    for (int64_t i = 0; i < g->n_tensors; i++) free(g->tensors[i].name);
    free(g->kv);
    free(g->tensors);
    if (g->map.data) al__unmap(&g->map);
    free(g);
}

const al__gguf_kv *al__gguf_find(const al__gguf *g, const char *key) {
    for (int64_t i = 0; i < g->n_kv; i++)
        if (g->kv[i].key && strcmp(g->kv[i].key, key) == 0) return &g->kv[i];
    return NULL;
}

const al__gguf_tensor *al__gguf_tensor_find(const al__gguf *g, const char *name) {
    for (int64_t i = 0; i < g->n_tensors; i++)
        if (g->tensors[i].name && strcmp(g->tensors[i].name, name) == 0) return &g->tensors[i];
    return NULL;
}

static int is_int_type(al__gguf_vtype t) {
    return t == AL_GGUF_U8 || t == AL_GGUF_I8 || t == AL_GGUF_U16 || t == AL_GGUF_I16 ||
           t == AL_GGUF_U32 || t == AL_GGUF_I32 || t == AL_GGUF_U64 || t == AL_GGUF_I64 ||
           t == AL_GGUF_BOOL;
}
static int is_signed(al__gguf_vtype t) {
    return t == AL_GGUF_I8 || t == AL_GGUF_I16 || t == AL_GGUF_I32 || t == AL_GGUF_I64;
}

int al__gguf_get_int(const al__gguf *g, const char *key, int64_t lo, int64_t hi, int64_t *out,
                     al_error *err) {
    const al__gguf_kv *kv = al__gguf_find(g, key);
    if (!kv) return al__err(err, AL_E_NOTFOUND, "%s: metadata '%s' is missing", g->name, key);
    if (!is_int_type(kv->type))
        return al__err(err, AL_E_FORMAT, "%s: metadata '%s' is not an integer (type %d)", g->name,
                       key, (int)kv->type);
    int ok;
    int64_t v;
    if (is_signed(kv->type)) {
        v = kv->v.i;
        ok = v >= lo && v <= hi;
    } else {
        ok = kv->v.u <= (uint64_t)INT64_MAX && (int64_t)kv->v.u >= lo && (int64_t)kv->v.u <= hi;
        v = (int64_t)kv->v.u;
    }
    if (!ok)
        return al__err(err, AL_E_FORMAT, "%s: metadata '%s' is out of range [%lld, %lld]", g->name,
                       key, (long long)lo, (long long)hi);
    *out = v;
    return 0;
}

int al__gguf_get_float(const al__gguf *g, const char *key, double *out, al_error *err) {
    const al__gguf_kv *kv = al__gguf_find(g, key);
    if (!kv) return al__err(err, AL_E_NOTFOUND, "%s: metadata '%s' is missing", g->name, key);
    if (kv->type != AL_GGUF_F32 && kv->type != AL_GGUF_F64)
        return al__err(err, AL_E_FORMAT, "%s: metadata '%s' is not a float (type %d)", g->name, key,
                       (int)kv->type);
    *out = kv->v.f;
    return 0;
}

int al__gguf_get_str(const al__gguf *g, const char *key, char *out, size_t cap, al_error *err) {
    const al__gguf_kv *kv = al__gguf_find(g, key);
    if (!kv) return al__err(err, AL_E_NOTFOUND, "%s: metadata '%s' is missing", g->name, key);
    if (kv->type != AL_GGUF_STRING)
        return al__err(err, AL_E_FORMAT, "%s: metadata '%s' is not a string (type %d)", g->name,
                       key, (int)kv->type);
    if (kv->str_len >= cap)
        return al__err(err, AL_E_FORMAT, "%s: metadata '%s' is too long (%zu bytes)", g->name, key,
                       kv->str_len);
    memcpy(out, kv->str, kv->str_len);
    out[kv->str_len] = 0;
    return 0;
}

static int get_array(const al__gguf *g, const char *key, const al__gguf_kv **kv, al_error *err) {
    *kv = al__gguf_find(g, key);
    if (!*kv) return al__err(err, AL_E_NOTFOUND, "%s: metadata '%s' is missing", g->name, key);
    if ((*kv)->type != AL_GGUF_ARRAY)
        return al__err(err, AL_E_FORMAT, "%s: metadata '%s' is not an array", g->name, key);
    if ((*kv)->arr_n > (uint64_t)INT32_MAX)
        return al__err(err, AL_E_FORMAT, "%s: array '%s' is too long", g->name, key);
    return 0;
}

int al__gguf_get_str_array(const al__gguf *g, const char *key, char ***strs, int64_t *n,
                           al_error *err) {
    *strs = NULL;
    *n = 0;
    const al__gguf_kv *kv;
    int rc = get_array(g, key, &kv, err);
    if (rc) return rc;
    if (kv->arr_type != AL_GGUF_STRING)
        return al__err(err, AL_E_FORMAT, "%s: array '%s' does not hold strings", g->name, key);
    /* the parse checked every length against the file; sum them for one allocation */
    const unsigned char *p = kv->arr_data;
    size_t total = 0;
    for (uint64_t i = 0; i < kv->arr_n; i++) {
        size_t len = (size_t)al__le64(p);
        total += len + 1;
        p += 8 + len;
    }
    size_t ptrs = (size_t)kv->arr_n * sizeof(char *);
    char **out = al__malloc(ptrs + total + 1, "GGUF string array", err);
    if (!out) return AL_E_NOMEM;
    char *dst = (char *)out + ptrs;
    p = kv->arr_data;
    for (uint64_t i = 0; i < kv->arr_n; i++) {
        size_t len = (size_t)al__le64(p);
        out[i] = dst;
        memcpy(dst, p + 8, len);
        dst[len] = 0;
        dst += len + 1;
        p += 8 + len;
    }
    *strs = out;
    *n = (int64_t)kv->arr_n;
    return 0;
}

int al__gguf_get_i32_array(const al__gguf *g, const char *key, int32_t **vals, int64_t *n,
                           al_error *err) {
    *vals = NULL;
    *n = 0;
    const al__gguf_kv *kv;
    int rc = get_array(g, key, &kv, err);
    if (rc) return rc;
    if (!is_int_type(kv->arr_type) || scalar_size(kv->arr_type) > 4)
        return al__err(err, AL_E_FORMAT, "%s: array '%s' does not hold 32-bit integers", g->name,
                       key);
    int32_t *out = al__malloc((kv->arr_n ? kv->arr_n : 1) * sizeof *out, "GGUF integer array", err);
    if (!out) return AL_E_NOMEM;
    size_t es = scalar_size(kv->arr_type);
    for (uint64_t i = 0; i < kv->arr_n; i++) {
        al__gguf_kv tmp = {.type = kv->arr_type};
        decode_scalar(&tmp, kv->arr_data + i * es);
        out[i] = is_signed(kv->arr_type) ? (int32_t)tmp.v.i : (int32_t)tmp.v.u;
    }
    *vals = out;
    *n = (int64_t)kv->arr_n;
    return 0;
}

int al__gguf_get_f32_array(const al__gguf *g, const char *key, float **vals, int64_t *n,
                           al_error *err) {
    *vals = NULL;
    *n = 0;
    const al__gguf_kv *kv;
    int rc = get_array(g, key, &kv, err);
    if (rc) return rc;
    if (kv->arr_type != AL_GGUF_F32 && kv->arr_type != AL_GGUF_F64)
        return al__err(err, AL_E_FORMAT, "%s: array '%s' does not hold floats", g->name, key);
    float *out = al__malloc((kv->arr_n ? kv->arr_n : 1) * sizeof *out, "GGUF float array", err);
    if (!out) return AL_E_NOMEM;
    size_t es = scalar_size(kv->arr_type);
    for (uint64_t i = 0; i < kv->arr_n; i++) {
        al__gguf_kv tmp = {.type = kv->arr_type};
        decode_scalar(&tmp, kv->arr_data + i * es);
        out[i] = (float)tmp.v.f;
    }
    *vals = out;
    *n = (int64_t)kv->arr_n;
    return 0;
}

int al__gguf_check_f32(const al__gguf *g, const char *name, int n_dims, const int64_t *ne,
                       al_error *err) {
    const al__gguf_tensor *t = al__gguf_tensor_find(g, name);
    if (!t) return al__err(err, AL_E_NOTFOUND, "%s: tensor '%s' is missing", g->name, name);
    int ok = 1;
    for (int d = 0; d < AL_GGUF_MAX_DIMS; d++) ok &= t->ne[d] == (d < n_dims ? ne[d] : 1);
    if (!ok) {
        char want[128] = "", got[128] = "";
        for (int d = 0; d < n_dims; d++)
            snprintf(want + strlen(want), sizeof want - strlen(want), "%s%lld", d ? ", " : "",
                     (long long)ne[d]);
        for (int d = 0; d < t->n_dims; d++)
            snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", d ? ", " : "",
                     (long long)t->ne[d]);
        return al__err(err, AL_E_FORMAT, "%s: tensor '%s' has dims [%s], expected [%s] (ne order)",
                       g->name, name, got, want);
    }
    if (!al__ggml_can_dequant(t->type))
        return al__err(err, AL_E_UNSUPPORTED, "%s: tensor '%s' has type %s, which is not supported",
                       g->name, name, al__ggml_type_name(t->type));
    return 0;
}

int al__gguf_load_f32(const al__gguf *g, const char *name, int n_dims, const int64_t *ne,
                      float *dst, al_error *err) {
    int rc = al__gguf_check_f32(g, name, n_dims, ne, err);
    if (rc) return rc;
    const al__gguf_tensor *t = al__gguf_tensor_find(g, name);
    rc = al__ggml_dequant(t->type, t->data, t->nbytes, t->n_elem, dst, err);
    if (rc) return al__err_prefix(err, (al_code)rc, "%s: tensor '%s'", g->name, name);
    return 0;
}
