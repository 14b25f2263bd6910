/* fuzz_cli_args.c: libFuzzer harness for the CLI's option value parsers (tools/cli.c:
 * cli_parse_int, cli_parse_double, cli_parse_int_list, cli_parse_double_list, cli_parse_u64).
 * tools/cli.c is compiled into this harness (#include below): the functions are not part of the
 * library.
 *
 * Input: byte 0 picks the parser (and, for cli_parse_int, the bounds); the rest, up to the
 * first NUL, is the option value (argv strings hold no NUL).
 * Checks, against our own reading of the value (not the parser's):
 *  - cli_parse_int: accepted exactly when the value is, as strtol base 10 reads it, optional
 *    leading white space, an optional sign and decimal digits, nothing after, and inside
 *    [lo, hi]; the value is the one we compute; else AL_E_INVALID (not a number) or
 *    AL_E_RANGE (outside), the message naming the option;
 *  - cli_parse_double: accepted exactly when the value is a decimal number
 *    [+-] digits [. digits] [(e|E) [+-] digits] (no white space, no hexadecimal, no inf/nan)
 *    whose value (libc's strtod, the reference conversion) is finite and not lost to underflow
 *    (0 only when written as 0, else at least the smallest normal double); the value is
 *    strtod's; a rejection names the option;
 *  - cli_parse_int_list: accepted exactly when the value is a comma-separated list of items
 *    N or N-M (numbers as above; no empty item, so no comma at either end or two in a row;
 *    N <= M; INT_MIN < N, M <= INT_MAX) whose total expanded length is at most CLI_MAX_LIST
 *    (tools/cli.h); the error code (AL_E_INVALID or AL_E_RANGE) is the one of the first bad
 *    item; the list is the expansion we compute (compared range by range, never expanded
 *    here). A list past the cap must be refused before it is built: no accepted list takes
 *    more than 4 MB, and the harness runs under the default -rss_limit_mb=2048 (a parser
 *    without the cap built gigabytes from a few hundred bytes of input);
 *  - cli_parse_double_list: accepted lists are non-empty and finite;
 *  - cli_parse_u64 (seeds): see fuzz_u64. */
#include "../../tools/cli.c"

#include <ctype.h>
#include <float.h>
#include <limits.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* One number as strtol(base 10) reads it at s: white space, sign, digits. Returns the end
 * (s when there is no number); *ovf when it does not fit a long. */
static const char *ref_long(const char *s, long *v, int *ovf) {
    const char *p = s;
    while (isspace((unsigned char)*p)) p++;
    int neg = 0;
    if (*p == '+' || *p == '-') neg = *p++ == '-';
    if (!isdigit((unsigned char)*p)) return s;
    unsigned long long mag = 0;
    *ovf = 0;
    for (; isdigit((unsigned char)*p); p++) {
        if (mag > (ULLONG_MAX - 9) / 10)
            *ovf = 1;
        else
            mag = mag * 10 + (unsigned)(*p - '0');
    }
    if (*ovf || (!neg && mag > (unsigned long long)LONG_MAX) ||
        (neg && mag > (unsigned long long)LONG_MAX + 1)) {
        *ovf = 1;
        *v = neg ? LONG_MIN : LONG_MAX;
    } else {
        *v = neg ? (long)(0 - mag) : (long)mag;
    }
    return p;
}

static void fuzz_int(const char *s, int which) {
    static const long bounds[][2] = {
        {LONG_MIN, LONG_MAX},    {0, 100}, {1, 1024},       {-5, 5}, {0, 1L << 40},
        {-(1L << 40), 1L << 40}, {1, 1},   {0, 2147483647L}};
    long lo = bounds[which % 8][0], hi = bounds[which % 8][1];
    long v = 12345, want = 0;
    int ovf = 0;
    al_error err = {0};
    int rc = cli_parse_int(s, "--opt", lo, hi, &v, &err);
    const char *end = ref_long(s, &want, &ovf);
    int syntax = *s && end != s && *end == 0;
    int range = syntax && (ovf || want < lo || want > hi);
    if (!syntax) {
        if (rc != AL_E_INVALID) abort();
    } else if (range) {
        if (rc != AL_E_RANGE) abort();
    } else if (rc != 0 || v != want) {
        abort();
    }
    if (rc && !strstr(err.msg, "--opt")) abort();
    if (rc && v != 12345) abort(); /* untouched on failure */
}

/* Our reading of a decimal number: 1 when s matches [+-] d+ [. d*] | [+-] . d+, with an
 * optional exponent; *nonzero when a mantissa digit is not 0. */
static int ref_decimal(const char *s, int *nonzero) {
    const char *p = s;
    int digits = 0;
    *nonzero = 0;
    if (*p == '+' || *p == '-') p++;
    for (; isdigit((unsigned char)*p); p++, digits++) *nonzero |= *p != '0';
    if (*p == '.')
        for (p++; isdigit((unsigned char)*p); p++, digits++) *nonzero |= *p != '0';
    if (!digits) return 0;
    if (*p == 'e' || *p == 'E') {
        p++;
        if (*p == '+' || *p == '-') p++;
        if (!isdigit((unsigned char)*p)) return 0;
        while (isdigit((unsigned char)*p)) p++;
    }
    return *p == 0;
}

static void fuzz_double(const char *s) {
    double v = 12345;
    al_error err = {0};
    int rc = cli_parse_double(s, "--opt", &v, &err);
    int nonzero;
    int syntax = ref_decimal(s, &nonzero);
    double want = syntax ? strtod(s, NULL) : 0;
    int normal = isfinite(want) && (want == 0 ? !nonzero : fabs(want) >= DBL_MIN);
    /* at the edge of the normal range libc may or may not report the underflow */
    int edge = isfinite(want) && want != 0 && fabs(want) < DBL_MIN * (1 + 1e-14) &&
               fabs(want) > DBL_MIN * (1 - 1e-14);
    if (rc == 0) {
        if (!syntax || !(normal || edge) || memcmp(&v, &want, sizeof v) != 0) {
            fprintf(stderr, "double '%.200s' accepted as %.17g\n", s, v);
            abort();
        }
    } else {
        if (!strstr(err.msg, "--opt") || v != 12345) abort();
        if (syntax && normal && !edge) {
            fprintf(stderr, "double '%.200s' refused: %s\n", s, err.msg);
            abort();
        }
    }
}

typedef struct seg {
    long a, b;
} seg;

static void fuzz_int_list(const char *s) {
    /* our reading: the items, without expanding them; want = the code of the first bad item */
    size_t len = strlen(s), n_seg = 0;
    seg *segs = malloc((len / 2 + 1) * sizeof *segs);
    if (!segs) return;
    int want = *s ? 0 : AL_E_INVALID;
    long long total = 0;
    for (const char *p = s; !want;) {
        long a, b;
        int ovf = 0;
        if (*p == ',' || *p == 0) {
            want = AL_E_INVALID; /* an empty item */
            break;
        }
        const char *e = ref_long(p, &a, &ovf);
        if (e == p || ovf) {
            want = e == p ? AL_E_INVALID : AL_E_RANGE;
            break;
        }
        b = a;
        if (*e == '-') {
            const char *q = e + 1;
            e = ref_long(q, &b, &ovf);
            if (e == q || ovf) {
                want = e == q ? AL_E_INVALID : AL_E_RANGE;
                break;
            }
            if (b < a) {
                want = AL_E_INVALID;
                break;
            }
        }
        if (*e != ',' && *e != 0) {
            want = AL_E_INVALID;
            break;
        }
        if (a < -2147483647L || b > 2147483647L) {
            want = AL_E_RANGE;
            break;
        }
        segs[n_seg++] = (seg){a, b};
        total += (long long)b - a + 1;
        if (total > CLI_MAX_LIST) {
            want = AL_E_RANGE;
            break;
        }
        if (*e == 0) break;
        p = e + 1;
    }
    int *v = NULL, n = -1;
    al_error err = {0};
    int rc = cli_parse_int_list(s, "--list", &v, &n, &err);
    if (rc != want) {
        fprintf(stderr, "int list '%.200s': code %d, expected %d (%lld elements): %s\n", s, rc,
                want, total, err.msg);
        abort();
    }
    if (rc) {
        if (v || n != 0 || !strstr(err.msg, "--list")) abort();
    } else {
        if ((long long)n != total) abort();
        long long k = 0;
        for (size_t i = 0; i < n_seg; i++)
            for (long x = segs[i].a; x <= segs[i].b; x++, k++)
                if (v[k] != (int)x) abort();
        free(v);
    }
    free(segs);
}

static void fuzz_double_list(const char *s) {
    double *v = NULL;
    int n = 0;
    al_error err = {0};
    if (cli_parse_double_list(s, "--list", &v, &n, &err) == 0) {
        if (n < 1) abort();
        for (int i = 0; i < n; i++)
            if (!isfinite(v[i])) abort();
        free(v);
    } else if (!err.msg[0]) {
        abort();
    }
}

/* cli_parse_u64 (seeds): accepted exactly when the value is one or more decimal digits and
 * nothing else (no sign, space, exponent) of value <= 2^64 - 1, computed here in 128 bits; the
 * value is that one; a rejection names the option and leaves *out alone. */
static void fuzz_u64(const char *s) {
    uint64_t v = 777;
    al_error err = {0};
    int rc = cli_parse_u64(s, "--seed", &v, &err);
    int ok = *s != 0, big = 0;
    unsigned __int128 want = 0;
    for (const char *p = s; *p && ok; p++) {
        if (*p < '0' || *p > '9')
            ok = 0;
        else if (!big && (want = want * 10 + (unsigned)(*p - '0')) > (unsigned __int128)UINT64_MAX)
            big = 1;
    }
    if (ok && !big) {
        if (rc != 0 || v != (uint64_t)want) abort();
    } else {
        if (rc == 0 || v != 777 || !strstr(err.msg, "--seed")) abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    size_t n = strnlen((const char *)data + 1, size - 1);
    char *s = malloc(n + 1); /* an exact-size copy: reads past the end are caught */
    if (!s) return 0;
    memcpy(s, data + 1, n);
    s[n] = 0;
    switch (data[0] & 3) {
    case 0:
        fuzz_int(s, data[0] >> 2);
        break;
    case 1:
        fuzz_double(s);
        break;
    case 2:
        fuzz_int_list(s);
        break;
    default:
        if (data[0] & 4)
            fuzz_u64(s);
        else
            fuzz_double_list(s);
        break;
    }
    free(s);
    return 0;
}
