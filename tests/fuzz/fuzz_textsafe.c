/* fuzz_textsafe.c: libFuzzer harness for the escaping of untrusted strings (src/base/textsafe.c,
 * issue 12) and the duplicate-key check of JSON inputs. Every output must be valid UTF-8 (checked
 * here by an independent decoder) and inert: the terminal form without control bytes, the HTML
 * form without a raw < > " ', the Markdown form without an unescaped < > |, the JSON repair
 * without invalid UTF-8, C1 or DEL; al__json_duplicate_key agrees with a pairwise search. */
#include "textsafe.h"

#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Strict UTF-8 (no overlongs, surrogates or code points past U+10FFFF); *c1: a C1 or DEL seen */
static int valid_utf8(const unsigned char *s, size_t n, int *c1) {
    *c1 = 0;
    for (size_t i = 0; i < n;) {
        unsigned c = s[i];
        if (c < 0x80) {
            if (c == 0x7F) *c1 = 1;
            i++;
            continue;
        }
        size_t len;
        unsigned v, min;
        if ((c & 0xE0) == 0xC0)
            len = 2, v = c & 0x1F, min = 0x80;
        else if ((c & 0xF0) == 0xE0)
            len = 3, v = c & 0x0F, min = 0x800;
        else if ((c & 0xF8) == 0xF0)
            len = 4, v = c & 0x07, min = 0x10000;
        else
            return 0;
        if (i + len > n) return 0;
        for (size_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xC0) != 0x80) return 0;
            v = v << 6 | (s[i + k] & 0x3F);
        }
        if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0;
        if (v >= 0x80 && v <= 0x9F) *c1 = 1;
        i += len;
    }
    return 1;
}

static void check_markup(const char *in) {
    size_t n = strlen(in), cap = 6 * n + 1;
    char *out = malloc(cap);
    if (!out) return;
    int c1;
    al__html_text(in, out, cap);
    if (!valid_utf8((const unsigned char *)out, strlen(out), &c1) || c1) __builtin_trap();
    for (const char *p = out; *p; p++)
        if (*p == '<' || *p == '>' || *p == '"' || *p == '\'' ||
            ((unsigned char)*p < 0x20 && *p != '\t' && *p != '\n')) /* tab, newline: inert */
            __builtin_trap();
    al__md_text(in, out, cap);
    if (!valid_utf8((const unsigned char *)out, strlen(out), &c1) || c1) __builtin_trap();
    for (const char *p = out; *p; p++) {
        if ((*p == '<' || *p == '>' || *p == '|') && (p == out || p[-1] != '\\')) __builtin_trap();
        if ((unsigned char)*p < 0x20) __builtin_trap();
    }
    al__plain_text(in, out, cap);
    if (!valid_utf8((const unsigned char *)out, strlen(out), &c1) || c1) __builtin_trap();
    free(out);
}

static void check_term(const uint8_t *data, size_t size) {
    size_t cap = 6 * size + 1;
    char *out = malloc(cap);
    if (!out) return;
    int c1;
    size_t k = al__term_text((const char *)data, size, out, cap);
    if (k != strlen(out) || !valid_utf8((const unsigned char *)out, k, &c1) || c1) __builtin_trap();
    for (size_t i = 0; i < k; i++) {
        unsigned char c = (unsigned char)out[i];
        if (c < 0x20 && c != '\t' && c != '\n' && c != '\r') __builtin_trap();
    }
    free(out);
}

static const char *pairwise_dup(const cJSON *j) {
    if (cJSON_IsObject(j))
        for (const cJSON *a = j->child; a; a = a->next)
            for (const cJSON *b = a->next; b; b = b->next)
                if (a->string && b->string && !strcmp(a->string, b->string)) return a->string;
    if (cJSON_IsObject(j) || cJSON_IsArray(j))
        for (const cJSON *c = j->child; c; c = c->next) {
            const char *d = pairwise_dup(c);
            if (d) return d;
        }
    return NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 1 << 16) return 0;
    char *s = malloc(size + 1);
    if (!s) return 0;
    memcpy(s, data, size);
    s[size] = 0;
    check_term(data, size);
    check_markup(s);
    char *r = al__json_repair(s);
    int c1;
    if (r && (!valid_utf8((const unsigned char *)r, strlen(r), &c1) || c1)) __builtin_trap();
    free(r);
    cJSON *j = cJSON_ParseWithLength(s, size);
    if (j) {
        const char *a = al__json_duplicate_key(j), *b = pairwise_dup(j);
        if ((a == NULL) != (b == NULL)) __builtin_trap();
        char *p = al__json_print(j, 0); /* what attnlim writes is valid UTF-8 */
        if (p && (!valid_utf8((const unsigned char *)p, strlen(p), &c1) || c1)) __builtin_trap();
        free(p);
        cJSON_Delete(j);
    }
    free(s);
    return 0;
}
