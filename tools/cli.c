/* cli.c: argument and input parsing, errors and JSON output shared by the subcommands. */
#include "cli.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

int cli_fail(const char *cmd, const al_error *err) {
    fprintf(stderr, "attnlim %s: %s\n", cmd, err && err->msg[0] ? err->msg : "failed");
    return 1;
}

int cli_usage_error(const char *cmd, const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "attnlim %s: ", cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, " (see 'attnlim %s --help')\n", cmd);
    return 2;
}

static int set_err(al_error *err, al_code code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int set_err(al_error *err, al_code code, const char *fmt, ...) {
    if (err) {
        err->code = code;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return (int)code;
}

int cli_parse_double(const char *s, const char *what, double *out, al_error *err) {
    if (!s || !*s) return set_err(err, AL_E_INVALID, "%s: empty value", what);
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (*end != 0 || end == s) return set_err(err, AL_E_INVALID, "%s: '%s' is not a number", what, s);
    if (errno == ERANGE || !isfinite(v)) return set_err(err, AL_E_RANGE, "%s: '%s' is out of range", what, s);
    *out = v;
    return 0;
}

int cli_parse_int(const char *s, const char *what, long lo, long hi, long *out, al_error *err) {
    if (!s || !*s) return set_err(err, AL_E_INVALID, "%s: empty value", what);
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (*end != 0 || end == s) return set_err(err, AL_E_INVALID, "%s: '%s' is not an integer", what, s);
    if (errno == ERANGE || v < lo || v > hi)
        return set_err(err, AL_E_RANGE, "%s: %s is outside %ld..%ld", what, s, lo, hi);
    *out = v;
    return 0;
}

int cli_parse_int_list(const char *s, const char *what, int **out, int *n, al_error *err) {
    *out = NULL;
    *n = 0;
    if (!s || !*s) return set_err(err, AL_E_INVALID, "%s: empty list", what);
    size_t cap = 16, cnt = 0;
    int *v = malloc(cap * sizeof *v);
    if (!v) return set_err(err, AL_E_NOMEM, "out of memory");
    const char *p = s;
    while (*p) {
        char *end;
        errno = 0;
        long a = strtol(p, &end, 10), b;
        if (end == p || errno) goto bad;
        b = a;
        if (*end == '-') {
            const char *q = end + 1;
            b = strtol(q, &end, 10);
            if (end == q || errno || b < a) goto bad;
        }
        if (a < -2147483647L || b > 2147483647L || b - a > 10000000L) goto bad;
        for (long x = a; x <= b; x++) {
            if (cnt == cap) {
                cap *= 2;
                int *nv = realloc(v, cap * sizeof *v);
                if (!nv) {
                    free(v);
                    return set_err(err, AL_E_NOMEM, "out of memory");
                }
                v = nv;
            }
            v[cnt++] = (int)x;
        }
        if (*end == ',') end++;
        else if (*end != 0) goto bad;
        p = end;
    }
    *out = v;
    *n = (int)cnt;
    return 0;
bad:
    free(v);
    return set_err(err, AL_E_INVALID, "%s: '%s' is not a list of integers like 1,5,10 or 1-16,18", what, s);
}

int cli_parse_double_list(const char *s, const char *what, double **out, int *n, al_error *err) {
    *out = NULL;
    *n = 0;
    if (!s || !*s) return set_err(err, AL_E_INVALID, "%s: empty list", what);
    al_array a;
    int rc = cli_parse_numbers(s, strlen(s), what, &a, err);
    if (rc) return rc;
    if (a.ndim != 1) {
        al_array_free(&a);
        return set_err(err, AL_E_INVALID, "%s: expected one list of numbers", what);
    }
    *out = a.data; /* f64, malloc'ed (posix_memalign: free() is fine) */
    *n = (int)a.shape[0];
    return 0;
}

int cli_parse_numbers(const char *text, size_t len, const char *name, al_array *out, al_error *err) {
    return al_parse_numbers(text, len, name, out, err);
}

int cli_read_array(const char *path, al_array *out, al_error *err) {
    const char *name = (!path || strcmp(path, "-") == 0) ? "<stdin>" : path;
    FILE *f = (!path || strcmp(path, "-") == 0) ? stdin : fopen(path, "rb");
    if (!f) return set_err(err, AL_E_IO, "%s: cannot open: %s", path, strerror(errno));
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (!buf) break;
        if (n + 1 >= cap) {
            char *nb = (cap >= ((size_t)1 << 36)) ? NULL : realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap *= 2;
        }
        size_t got = fread(buf + n, 1, cap - 1 - n, f);
        n += got;
        if (got == 0) break;
    }
    int ferr = ferror(f);
    if (f != stdin) fclose(f);
    if (!buf) return set_err(err, AL_E_NOMEM, "%s: out of memory reading", name);
    if (ferr) {
        free(buf);
        return set_err(err, AL_E_IO, "%s: read error", name);
    }
    buf[n] = 0;
    int rc;
    if (n >= 1 && (unsigned char)buf[0] == 0x93) { /* .npy (a text file cannot start so) */
        al_array raw;
        rc = al_npy_parse(buf, n, name, &raw, err);
        if (rc == 0) {
            rc = al_array_to_f64(&raw, out, err);
            al_array_free(&raw);
        }
        if (rc == 0) { /* NaN/Inf are refused here, naming the file and the position */
            const double *v = out->data;
            int64_t cnt = al_array_numel(out);
            for (int64_t i = 0; i < cnt; i++)
                if (!isfinite(v[i])) {
                    rc = set_err(err, AL_E_RANGE, "%s: element %lld (flat, 0-based) is %s", name, (long long)i,
                                 isnan(v[i]) ? "NaN" : "infinite");
                    al_array_free(out);
                    break;
                }
        }
    } else
        rc = cli_parse_numbers(buf, n, name, out, err);
    free(buf);
    return rc;
}

void cli_print_json(cJSON *obj, int pretty) {
    char *s = pretty ? cJSON_Print(obj) : cJSON_PrintUnformatted(obj);
    if (s) {
        fputs(s, stdout);
        fputc('\n', stdout);
        free(s);
    }
    cJSON_Delete(obj);
}

cJSON *cli_json_num(double v) { return isfinite(v) ? cJSON_CreateNumber(v) : cJSON_CreateNull(); }

cJSON *cli_json_array_d(const double *v, int64_t n) {
    cJSON *a = cJSON_CreateArray();
    for (int64_t i = 0; i < n; i++) cJSON_AddItemToArray(a, cli_json_num(v[i]));
    return a;
}

int cli_read_rows(const char *input, al_array *out, al_error *err) {
    int rc = cli_read_array(input, out, err);
    if (rc) return rc;
    if (out->ndim != 1 && out->ndim != 2) {
        int nd = out->ndim;
        al_array_free(out);
        return set_err(err, AL_E_INVALID, "%s: expected a 1-D row or 2-D rows of logits, got %d dimensions",
                       input && strcmp(input, "-") ? input : "<stdin>", nd);
    }
    return 0;
}
