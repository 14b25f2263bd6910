/* numparse.c: arrays from text: whitespace- or comma-separated numbers, one row per line.
 *
 * A number is a decimal float: [+-] digits [. digits] [(e|E) [+-] digits] (".5" and "5." too).
 * strtod's other forms are refused by name: hexadecimal ("0x10", "0x1p4"), and the words inf,
 * infinity and nan. Fields are separated by white space and/or one comma: an empty field (a
 * comma at the start or end of a line, or two commas with nothing between) is an error naming
 * the line and the field, as is every refused value. */
#include "internal.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MAX_TOKEN 1023 /* characters in one value */

static int is_digit(char c) {
    return c >= '0' && c <= '9';
}

static int lower(char c) {
    return c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c;
}

/* s (NUL-terminated) equals word, ignoring ASCII case */
static int word_is(const char *s, const char *word) {
    for (; *s && *word; s++, word++)
        if (lower(*s) != *word) return 0;
    return *s == 0 && *word == 0;
}

int al__number_token(const char *tok, double *out, int *underflow) {
    const char *p = tok;
    if (underflow) *underflow = 0;
    if (*p == '+' || *p == '-') p++;
    if (p[0] == '0' && (p[1] == 'x' || p[1] == 'X')) return AL__NUM_HEX;
    if (word_is(p, "inf") || word_is(p, "infinity") || word_is(p, "nan") ||
        ((p[0] | 0x20) == 'n' && (p[1] | 0x20) == 'a' && (p[2] | 0x20) == 'n' && p[3] == '('))
        return AL__NUM_NONFINITE;
    int digits = 0;
    while (is_digit(*p)) p++, digits++;
    if (*p == '.') {
        p++;
        while (is_digit(*p)) p++, digits++;
    }
    if (digits == 0) return AL__NUM_SYNTAX;
    if (*p == 'e' || *p == 'E') {
        p++;
        if (*p == '+' || *p == '-') p++;
        if (!is_digit(*p)) return AL__NUM_SYNTAX;
        while (is_digit(*p)) p++;
    }
    if (*p != 0) return AL__NUM_SYNTAX;
    char *end;
    errno = 0;
    double v = strtod(tok, &end);
    if (*end != 0) return AL__NUM_SYNTAX; /* a locale with another decimal point */
    if (!isfinite(v)) return AL__NUM_OVERFLOW;
    if (errno == ERANGE && underflow) *underflow = 1; /* rounds to 0 or a subnormal */
    *out = v;
    return 0;
}

/* tok [n] for a message: printable ASCII as is, other bytes as \xNN, cut at 40 characters. */
static void shown(const char *tok, size_t n, char out[200]) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)tok[i];
        if (c >= 0x20 && c < 0x7f)
            out[k++] = (char)c;
        else
            k += (size_t)snprintf(out + k, 5, "\\x%02x", c);
        if (i == 39 && i + 1 < n) {
            memcpy(out + k, "...", 3);
            k += 3;
            break;
        }
    }
    out[k] = 0;
}

static int is_space(char c) {
    return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f';
}

int al_parse_numbers(const char *text, size_t len, const char *name, al_array *out, al_error *err) {
    if (out) memset(out, 0, sizeof *out);
    if (!name) name = "<numbers>";
    if (!out || (!text && len)) return al__err(err, AL_E_INVALID, "%s: NULL argument", name);
    size_t cap = 1024, cnt = 0;
    double *v = malloc(cap * sizeof *v);
    if (!v) return al__err(err, AL_E_NOMEM, "out of memory");
    int64_t rows = 0, cols = -1, cur = 0;
    size_t line = 1;
    int comma = 0; /* a comma was seen since the last field of this line */
    const char *p = text, *end = text + len;
    char buf[MAX_TOKEN + 1], show[200];
    int rc = 0;
    for (;;) {
        char c = p < end ? *p : '\n';
        if (c == '\n') {
            if (comma) {
                rc = al__err(err, AL_E_FORMAT,
                             "%s: line %zu, field %lld: empty field (the line ends with a comma)",
                             name, line, (long long)cur + 1);
                goto fail;
            }
            if (cur > 0) {
                if (cols >= 0 && cur != cols) {
                    rc = al__err(err, AL_E_FORMAT,
                                 "%s: line %zu has %lld numbers, earlier lines %lld", name, line,
                                 (long long)cur, (long long)cols);
                    goto fail;
                }
                cols = cur;
                rows++;
                cur = 0;
            }
            if (p >= end) break;
            line++;
            p++;
            continue;
        }
        if (is_space(c)) {
            p++;
            continue;
        }
        if (c == ',') {
            if (comma || cur == 0) {
                rc = al__err(err, AL_E_FORMAT, "%s: line %zu, field %lld: empty field (%s)", name,
                             line, (long long)cur + 1,
                             cur == 0 ? "the line starts with a comma" : "two commas in a row");
                goto fail;
            }
            comma = 1;
            p++;
            continue;
        }
        size_t k = 0;
        while (p < end && !(is_space(*p) || *p == '\n' || *p == ',')) {
            if (k >= MAX_TOKEN) {
                rc = al__err(err, AL_E_FORMAT,
                             "%s: line %zu, field %lld: a value longer than %d characters", name,
                             line, (long long)cur + 1, MAX_TOKEN);
                goto fail;
            }
            buf[k++] = *p++;
        }
        buf[k] = 0;
        comma = 0;
        double x = 0;
        int why = memchr(buf, 0, k) ? AL__NUM_SYNTAX : al__number_token(buf, &x, NULL);
        if (why) {
            shown(buf, k, show);
            long long f = (long long)cur + 1;
            if (why == AL__NUM_HEX)
                rc = al__err(
                    err, AL_E_FORMAT,
                    "%s: line %zu, field %lld: '%s' is hexadecimal (only decimal numbers are read)",
                    name, line, f, show);
            else if (why == AL__NUM_NONFINITE)
                rc = al__err(err, AL_E_RANGE,
                             "%s: line %zu, field %lld: %s is not finite (NaN and Inf are refused)",
                             name, line, f, show);
            else if (why == AL__NUM_OVERFLOW)
                rc = al__err(err, AL_E_RANGE,
                             "%s: line %zu, field %lld: %s is beyond the double range", name, line,
                             f, show);
            else
                rc = al__err(err, AL_E_FORMAT, "%s: line %zu, field %lld: '%s' is not a number",
                             name, line, f, show);
            goto fail;
        }
        if (cnt == cap) {
            cap *= 2;
            double *nv = realloc(v, cap * sizeof *v);
            if (!nv) {
                rc = al__err(err, AL_E_NOMEM, "%s: out of memory at line %zu", name, line);
                goto fail;
            }
            v = nv;
        }
        v[cnt++] = x;
        cur++;
    }
    if (cnt == 0) {
        rc = al__err(err, AL_E_INVALID, "%s: no numbers in the input", name);
        goto fail;
    }
    int64_t shape[2] = {rows, cols};
    rc = rows == 1 ? al_array_alloc(out, AL_F64, 1, &shape[1], err)
                   : al_array_alloc(out, AL_F64, 2, shape, err);
    if (rc) goto fail;
    memcpy(out->data, v, cnt * sizeof *v);
    free(v);
    return 0;
fail:
    free(v);
    return rc;
}
