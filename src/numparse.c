/* numparse.c: arrays from text: whitespace- or comma-separated numbers, one row per line. */
#include "internal.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

int al_parse_numbers(const char *text, size_t len, const char *name, al_array *out, al_error *err) {
    memset(out, 0, sizeof *out);
    size_t cap = 1024, cnt = 0;
    double *v = malloc(cap * sizeof *v);
    if (!v) return al__err(err, AL_E_NOMEM, "out of memory");
    int64_t rows = 0, cols = -1, cur = 0;
    size_t line = 1;
    const char *p = text, *end = text + len;
    while (p < end) {
        char c = *p;
        if (c == '\n') {
            if (cur > 0) {
                if (cols >= 0 && cur != cols) {
                    free(v);
                    return al__err(err, AL_E_FORMAT, "%s: line %zu has %lld numbers, earlier lines %lld", name,
                                   line, (long long)cur, (long long)cols);
                }
                cols = cur;
                rows++;
                cur = 0;
            }
            line++;
            p++;
            continue;
        }
        if (c == ' ' || c == '\t' || c == '\r' || c == ',') {
            p++;
            continue;
        }
        char buf[64];
        size_t k = 0;
        while (p < end && !(*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n' || *p == ',')) {
            if (k + 1 >= sizeof buf) {
                free(v);
                return al__err(err, AL_E_FORMAT, "%s: line %zu: a value longer than %zu characters", name, line,
                               sizeof buf - 1);
            }
            buf[k++] = *p;
            p++;
        }
        buf[k] = 0;
        char *e;
        errno = 0;
        double x = strtod(buf, &e);
        if (e == buf || *e != 0) {
            free(v);
            return al__err(err, AL_E_FORMAT, "%s: line %zu: '%s' is not a number", name, line, buf);
        }
        if (!isfinite(x)) {
            free(v);
            return al__err(err, AL_E_RANGE, "%s: line %zu, value %lld: %s is not finite", name, line,
                           (long long)cur + 1, buf);
        }
        if (cnt == cap) {
            cap *= 2;
            double *nv = realloc(v, cap * sizeof *v);
            if (!nv) {
                free(v);
                return al__err(err, AL_E_NOMEM, "out of memory");
            }
            v = nv;
        }
        v[cnt++] = x;
        cur++;
    }
    if (cur > 0) {
        if (cols >= 0 && cur != cols) {
            free(v);
            return al__err(err, AL_E_FORMAT, "%s: line %zu has %lld numbers, earlier lines %lld", name, line,
                           (long long)cur, (long long)cols);
        }
        cols = cur;
        rows++;
    }
    if (cnt == 0) {
        free(v);
        return al__err(err, AL_E_INVALID, "%s: no numbers in the input", name);
    }
    int64_t shape[2] = {rows, cols};
    int rc = rows == 1 ? al_array_alloc(out, AL_F64, 1, &shape[1], err) : al_array_alloc(out, AL_F64, 2, shape, err);
    if (rc) {
        free(v);
        return rc;
    }
    memcpy(out->data, v, cnt * sizeof *v);
    free(v);
    return 0;
}

