/* npy.c: NumPy .npy arrays in and out (format versions 1.0, 2.0, 3.0).
 * Written by hand: Debian has no C library for NPY. The header is untrusted. */
#include "internal.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#define NPY_MAX_FILE   ((size_t)1 << 40)
#define NPY_MAX_HEADER 65536u

size_t al_dtype_size(al_dtype dt) {
    return dt == AL_F64 ? 8 : 4;
}

int64_t al_array_numel(const al_array *a) {
    int64_t n = 1;
    for (int i = 0; i < a->ndim; i++) n *= a->shape[i];
    return n;
}

int al_array_alloc(al_array *a, al_dtype dt, int ndim, const int64_t *shape, al_error *err) {
    memset(a, 0, sizeof *a);
    if (ndim < 0 || ndim > AL_MAX_DIMS)
        return al__err(err, AL_E_INVALID, "array rank %d outside 0..%d", ndim, AL_MAX_DIMS);
    size_t n = al_dtype_size(dt);
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0)
            return al__err(err, AL_E_INVALID, "negative array dimension %lld", (long long)shape[i]);
        if (!al__mul_ok(n, (size_t)shape[i], &n))
            return al__err(err, AL_E_NOMEM, "array dimensions overflow the address space");
        a->shape[i] = shape[i];
    }
    a->dtype = dt;
    a->ndim = ndim;
    a->data = al__malloc_aligned(n, "array", err);
    return a->data ? 0 : AL_E_NOMEM;
}

void al_array_free(al_array *a) {
    if (!a) return;
    free(a->data);
    a->data = NULL;
    a->ndim = 0;
}

int al_array_to_f64(const al_array *a, al_array *out, al_error *err) {
    int rc = al_array_alloc(out, AL_F64, a->ndim, a->shape, err);
    if (rc) return rc;
    int64_t n = al_array_numel(a);
    double *d = out->data;
    if (a->dtype == AL_F64)
        memcpy(d, a->data, (size_t)n * 8);
    else
        for (int64_t i = 0; i < n; i++) d[i] = ((const float *)a->data)[i];
    return 0;
}

/* --- header dict parser: {'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), } --- */

typedef struct {
    const char *p, *end, *name;
    al_error *err;
} hparse;

static void skip_ws(hparse *h) {
    while (h->p < h->end && (*h->p == ' ' || *h->p == '\t' || *h->p == '\n' || *h->p == '\r'))
        h->p++;
}

static int expect(hparse *h, char c) {
    skip_ws(h);
    if (h->p >= h->end || *h->p != c)
        return al__err(h->err, AL_E_FORMAT, "%s: malformed .npy header: expected '%c'", h->name, c);
    h->p++;
    return 0;
}

static int parse_str(hparse *h, char *out, size_t cap) {
    skip_ws(h);
    if (h->p >= h->end || (*h->p != '\'' && *h->p != '"'))
        return al__err(h->err, AL_E_FORMAT, "%s: malformed .npy header: expected a string",
                       h->name);
    char q = *h->p++;
    size_t n = 0;
    while (h->p < h->end && *h->p != q) {
        if (n + 1 >= cap)
            return al__err(h->err, AL_E_FORMAT, "%s: malformed .npy header: string too long",
                           h->name);
        out[n++] = *h->p++;
    }
    if (h->p >= h->end)
        return al__err(h->err, AL_E_FORMAT, "%s: malformed .npy header: unterminated string",
                       h->name);
    h->p++;
    out[n] = 0;
    return 0;
}

static int parse_shape(hparse *h, al_array *a) {
    if (expect(h, '(')) return AL_E_FORMAT;
    a->ndim = 0;
    for (;;) {
        skip_ws(h);
        if (h->p < h->end && *h->p == ')') {
            h->p++;
            return 0;
        }
        if (h->p >= h->end || !isdigit((unsigned char)*h->p))
            return al__err(h->err, AL_E_FORMAT, "%s: malformed .npy header: bad shape entry",
                           h->name);
        if (a->ndim >= AL_MAX_DIMS)
            return al__err(h->err, AL_E_UNSUPPORTED, "%s: .npy array has more than %d dimensions",
                           h->name, AL_MAX_DIMS);
        uint64_t v = 0;
        while (h->p < h->end && isdigit((unsigned char)*h->p)) {
            v = v * 10 + (uint64_t)(*h->p - '0');
            if (v > ((uint64_t)1 << 50))
                return al__err(h->err, AL_E_FORMAT, "%s: .npy dimension %d is absurdly large",
                               h->name, a->ndim);
            h->p++;
        }
        a->shape[a->ndim++] = (int64_t)v;
        skip_ws(h);
        if (h->p < h->end && (*h->p == 'L' || *h->p == 'l')) h->p++; /* python 2 longs */
        skip_ws(h);
        if (h->p < h->end && *h->p == ',') h->p++;
    }
}

static int parse_header(hparse *h, al_array *a, int *fortran) {
    int have_descr = 0, have_order = 0, have_shape = 0;
    char key[64], val[64];
    if (expect(h, '{')) return AL_E_FORMAT;
    for (;;) {
        skip_ws(h);
        if (h->p < h->end && *h->p == '}') {
            h->p++;
            break;
        }
        if (parse_str(h, key, sizeof key) || expect(h, ':')) return AL_E_FORMAT;
        if (strcmp(key, "descr") == 0) {
            if (parse_str(h, val, sizeof val)) return AL_E_FORMAT;
            if (!strcmp(val, "<f8") || !strcmp(val, "=f8"))
                a->dtype = AL_F64;
            else if (!strcmp(val, "<f4") || !strcmp(val, "=f4"))
                a->dtype = AL_F32;
            else
                return al__err(h->err, AL_E_UNSUPPORTED,
                               "%s: .npy dtype '%s' is not supported (use little-endian float32 "
                               "'<f4' or float64 '<f8')",
                               h->name, val);
            have_descr = 1;
        } else if (strcmp(key, "fortran_order") == 0) {
            skip_ws(h);
            if ((size_t)(h->end - h->p) >= 4 && !memcmp(h->p, "True", 4)) {
                *fortran = 1;
                h->p += 4;
            } else if ((size_t)(h->end - h->p) >= 5 && !memcmp(h->p, "False", 5)) {
                *fortran = 0;
                h->p += 5;
            } else
                return al__err(h->err, AL_E_FORMAT,
                               "%s: malformed .npy header: fortran_order not True/False", h->name);
            have_order = 1;
        } else if (strcmp(key, "shape") == 0) {
            if (parse_shape(h, a)) return h->err ? (int)h->err->code : AL_E_FORMAT;
            have_shape = 1;
        } else
            return al__err(h->err, AL_E_FORMAT, "%s: malformed .npy header: unknown key '%s'",
                           h->name, key);
        skip_ws(h);
        if (h->p < h->end && *h->p == ',') h->p++;
    }
    if (!have_descr || !have_order || !have_shape)
        return al__err(h->err, AL_E_FORMAT, "%s: .npy header lacks %s", h->name,
                       !have_descr   ? "'descr'"
                       : !have_order ? "'fortran_order'"
                                     : "'shape'");
    return 0;
}

/* The first bytes of buf (at most 6) for a message: printable ASCII as is, the rest as \xNN. */
static void magic_text(const void *buf, size_t len, char out[25]) {
    const unsigned char *b = buf;
    size_t k = 0;
    for (size_t i = 0; i < len && i < 6; i++) {
        if (b[i] >= 0x20 && b[i] < 0x7f && b[i] != '\\' && b[i] != '\'')
            out[k++] = (char)b[i];
        else
            k += (size_t)snprintf(out + k, 5, "\\x%02x", b[i]);
    }
    out[k] = 0;
}

int al_npy_parse(const void *buf, size_t len, const char *name, al_array *out, al_error *err) {
    const unsigned char *b = buf;
    memset(out, 0, sizeof *out);
    if (len == 0) return al__err(err, AL_E_FORMAT, "%s: empty file (not a .npy file)", name);
    if (memcmp(b, "\x93NUMPY", len < 6 ? len : 6) != 0) {
        char shown[6 * 4 + 1];
        magic_text(b, len, shown);
        return al__err(err, AL_E_FORMAT,
                       "%s: not a .npy file (bad magic): it starts with '%s', not '\\x93NUMPY'",
                       name, shown);
    }
    if (len < 10) /* the start of a .npy file, cut inside the magic, version or header length */
        return al__err(err, AL_E_FORMAT, "%s: truncated .npy header (%zu bytes)", name, len);
    unsigned major = b[6];
    size_t hlen, hstart;
    if (major == 1) {
        hlen = al__le16(b + 8);
        hstart = 10;
    } else if (major == 2 || major == 3) {
        if (len < 12) return al__err(err, AL_E_FORMAT, "%s: truncated .npy header", name);
        hlen = al__le32(b + 8);
        hstart = 12;
    } else
        return al__err(err, AL_E_UNSUPPORTED, "%s: .npy format version %u.%u is not supported",
                       name, major, b[7]);
    if (hlen > NPY_MAX_HEADER)
        return al__err(err, AL_E_FORMAT, "%s: .npy header length %zu exceeds the limit %u", name,
                       hlen, NPY_MAX_HEADER);
    if (hlen > len - hstart) return al__err(err, AL_E_FORMAT, "%s: truncated .npy header", name);
    al_array a = {0};
    int fortran = 0;
    hparse h = {(const char *)b + hstart, (const char *)b + hstart + hlen, name, err};
    int rc = parse_header(&h, &a, &fortran);
    if (rc) return rc;
    if (fortran && a.ndim > 1)
        return al__err(err, AL_E_UNSUPPORTED,
                       "%s: Fortran-ordered .npy arrays are not supported (save with C order)",
                       name);
    size_t need = al_dtype_size(a.dtype);
    for (int i = 0; i < a.ndim; i++)
        if (!al__mul_ok(need, (size_t)a.shape[i], &need))
            return al__err(err, AL_E_FORMAT, "%s: .npy shape overflows", name);
    size_t have = len - hstart - hlen;
    if (have != need)
        return al__err(err, AL_E_FORMAT, "%s: .npy data is %zu bytes but the shape needs %zu (%s)",
                       name, have, need, have < need ? "truncated" : "trailing bytes");
    rc = al_array_alloc(out, a.dtype, a.ndim, a.shape, err);
    if (rc) return rc;
    memcpy(out->data, b + hstart + hlen, need);
    return 0;
}

int al_npy_read(const char *path, al_array *out, al_error *err) {
    char *buf;
    size_t len;
    memset(out, 0, sizeof *out);
    int rc = al__read_file(path, NPY_MAX_FILE, &buf, &len, err);
    if (rc) return rc;
    rc = al_npy_parse(buf, len, path, out, err);
    free(buf);
    return rc;
}

int al_npy_write(const char *path, const al_array *a, al_error *err) {
    if (!a || a->ndim < 0 || a->ndim > AL_MAX_DIMS || (a->dtype != AL_F32 && a->dtype != AL_F64))
        return al__err(err, AL_E_INVALID, "%s: not a valid array to write", path);
    char dict[128 + AL_MAX_DIMS * 24]; /* each dimension: at most 19 digits and ", " */
    int n = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (",
                     a->dtype == AL_F64 ? "<f8" : "<f4");
    for (int i = 0; i < a->ndim; i++)
        n += snprintf(dict + n, sizeof dict - (size_t)n, "%lld%s", (long long)a->shape[i],
                      a->ndim == 1 ? "," : (i + 1 < a->ndim ? ", " : ""));
    n += snprintf(dict + n, sizeof dict - (size_t)n, "), }");
    size_t total = 10 + (size_t)n + 1;
    size_t pad = (64 - total % 64) % 64;
    size_t hlen = (size_t)n + pad + 1;
    unsigned char pre[10] = {0x93,
                             'N',
                             'U',
                             'M',
                             'P',
                             'Y',
                             1,
                             0,
                             (unsigned char)(hlen & 0xff),
                             (unsigned char)(hlen >> 8)};
    al__afile f;
    int rc = al__afile_open(&f, path, err);
    if (rc) return rc;
    char spaces[64];
    memset(spaces, ' ', sizeof spaces);
    size_t bytes = (size_t)al_array_numel(a) * al_dtype_size(a->dtype);
    if ((rc = al__afile_write(&f, pre, 10, err)) ||
        (rc = al__afile_write(&f, dict, (size_t)n, err)) ||
        (rc = al__afile_write(&f, spaces, pad, err)) || (rc = al__afile_write(&f, "\n", 1, err)) ||
        (rc = al__afile_write(&f, a->data, bytes, err))) {
        al__afile_abort(&f);
        return rc;
    }
    return al__afile_commit(&f, err);
}
