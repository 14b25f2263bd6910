/* textsafe.c: escaping of untrusted strings where they are written (see textsafe.h). */
#include "textsafe.h"

#include "internal.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

size_t al__utf8_next(const unsigned char *s, size_t n, uint32_t *cp) {
    unsigned c = s[0];
    *cp = AL__BAD_UTF8;
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    size_t len = c >= 0xC2 && c <= 0xDF   ? 2
                 : c >= 0xE0 && c <= 0xEF ? 3
                 : c >= 0xF0 && c <= 0xF4 ? 4
                                          : 0;
    if (!len || n < len) return 1;
    uint32_t v = c & (0x7F >> len);
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 1;
        v = v << 6 | (s[i] & 0x3F);
    }
    if ((len == 3 && v < 0x800) || (len == 4 && (v < 0x10000 || v > 0x10FFFF)) ||
        (v >= 0xD800 && v <= 0xDFFF))
        return 1;
    *cp = v;
    return len;
}

int al__is_control(uint32_t cp) {
    return (cp < 0x20 && cp != '\t' && cp != '\n') || cp == 0x7F || (cp >= 0x80 && cp <= 0x9F);
}

size_t al__term_text(const char *s, size_t n, char *out, size_t cap) {
    const unsigned char *u = (const unsigned char *)s;
    size_t k = 0;
    if (!cap) return 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t len = al__utf8_next(u + i, n - i, &cp);
        char esc[12];
        const char *piece = (const char *)u + i;
        size_t plen = len;
        if (cp == AL__BAD_UTF8)
            plen = (size_t)snprintf(esc, sizeof esc, "\\x%02x", u[i]), piece = esc;
        else if (al__is_control(cp) && cp != '\r')
            plen =
                (size_t)snprintf(esc, sizeof esc, cp >= 0x80 ? "\\u%04x" : "\\x%02x", (unsigned)cp),
            piece = esc;
        if (k + plen + 1 > cap) break;
        memcpy(out + k, piece, plen);
        k += plen;
        i += len;
    }
    out[k] = 0;
    return k;
}

void al__plain_text(const char *s, char *out, size_t cap) {
    const unsigned char *u = (const unsigned char *)s;
    size_t n = strlen(s), k = 0;
    if (!cap) return;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t len = al__utf8_next(u + i, n - i, &cp);
        int bad = cp == AL__BAD_UTF8 || al__is_control(cp) || cp == '\n' || cp == '\t';
        const char *piece = bad ? "\xEF\xBF\xBD" : (const char *)u + i;
        size_t plen = bad ? 3 : len;
        if (k + plen + 1 > cap) break;
        memcpy(out + k, piece, plen);
        k += plen;
        i += len;
    }
    out[k] = 0;
}

char *al__json_repair(const char *json) {
    size_t n = strlen(json);
    if (n > (SIZE_MAX - 1) / 6) return NULL;
    char *out = malloc(6 * n + 1); /* at most 6 bytes for each input byte */
    if (!out) return NULL;
    const unsigned char *u = (const unsigned char *)json;
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t len = al__utf8_next(u + i, n - i, &cp);
        if (cp == AL__BAD_UTF8) {
            memcpy(out + k, "\xEF\xBF\xBD", 3), k += 3;
        } else if (cp == 0x7F || (cp >= 0x80 && cp <= 0x9F)) {
            k += (size_t)snprintf(out + k, 7, "\\u%04x", (unsigned)cp);
        } else {
            memcpy(out + k, u + i, len), k += len;
        }
        i += len;
    }
    out[k] = 0;
    return out;
}

char *al__json_print(const cJSON *j, int pretty) {
    char *t = pretty ? cJSON_Print(j) : cJSON_PrintUnformatted(j);
    if (!t) return NULL;
    char *r = al__json_repair(t);
    cJSON_free(t);
    return r;
}

/* one code point of s as HTML/XML text or Markdown; *len its bytes */
static const char *markup_piece(const unsigned char *s, size_t n, int md, size_t *len, char *buf,
                                size_t *plen) {
    uint32_t cp;
    *len = al__utf8_next(s, n, &cp);
    if (cp == AL__BAD_UTF8 || al__is_control(cp) || (cp == '\n' || cp == '\t')) {
        if (md == 1 || cp == AL__BAD_UTF8 || al__is_control(cp)) {
            *plen = cp == '\n' || cp == '\t' ? 1 : 3;
            return cp == '\n' || cp == '\t' ? " " : "\xEF\xBF\xBD";
        }
    }
    if (md != 1) {
        const char *specials = md == 2 ? "<>&\"" : "<>&\"'"; /* XML: ' may stay */
        static const char *ent[] = {"&lt;", "&gt;", "&amp;", "&quot;", "&#39;"};
        const char *hit = cp && cp < 0x80 ? strchr(specials, (int)cp) : NULL; /* ASCII only */
        if (hit) {
            const char *e = ent[hit - specials];
            *plen = strlen(e);
            return e;
        }
    } else if (cp && cp < 0x80 &&
               (strchr("\\<>|", (int)cp) ||
                (cp == ']' && n > 1 && (s[1] == '(' || s[1] == '[' || s[1] == ':')))) {
        buf[0] = '\\', buf[1] = (char)cp; /* no raw HTML, autolink, table break, link, image */
        *plen = 2;
        return buf;
    }
    *plen = *len;
    return (const char *)s;
}

static void markup_text(const char *s, char *out, size_t cap, int md) {
    const unsigned char *u = (const unsigned char *)s;
    size_t n = strlen(s), k = 0;
    if (!cap) return;
    for (size_t i = 0; i < n;) {
        char buf[4];
        size_t len, plen;
        const char *piece = markup_piece(u + i, n - i, md, &len, buf, &plen);
        if (k + plen + 1 > cap) break;
        memcpy(out + k, piece, plen);
        k += plen;
        i += len;
    }
    out[k] = 0;
}

int al__html_escape(al__afile *f, const char *s, al_error *err) {
    const unsigned char *u = (const unsigned char *)s;
    size_t n = strlen(s);
    for (size_t i = 0; i < n;) {
        char buf[4];
        size_t len, plen;
        const char *piece = markup_piece(u + i, n - i, 0, &len, buf, &plen);
        al__afile_write(f, piece, plen, err);
        i += len;
    }
    return f->failed ? AL_E_IO : 0;
}

int al__json_string_html(al__afile *f, const char *s, size_t n, al_error *err) {
    const unsigned char *u = (const unsigned char *)s;
    al__afile_write(f, "\"", 1, err);
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t len = al__utf8_next(u + i, n - i, &cp);
        char esc[8];
        const char *rep = NULL;
        if (cp == AL__BAD_UTF8)
            rep = "\\ufffd";
        else if (cp == '"')
            rep = "\\\"";
        else if (cp == '\\')
            rep = "\\\\";
        else if (cp == '\n')
            rep = "\\n";
        else if (cp < 0x20 || cp == '<' || cp == '>' || cp == '&' || cp == 0x7F) {
            snprintf(esc, sizeof esc, "\\u%04x", (unsigned)cp);
            rep = esc;
        } else if (cp == 0x2028 || cp == 0x2029)
            rep = cp == 0x2028 ? "\\u2028" : "\\u2029";
        if (rep)
            al__afile_write(f, rep, strlen(rep), err);
        else
            al__afile_write(f, u + i, len, err);
        i += len;
    }
    al__afile_write(f, "\"", 1, err);
    return f->failed ? AL_E_IO : 0;
}

char *al__utf8_valid(const char *s) {
    size_t n = strlen(s), k = 0;
    char *out = malloc(3 * n + 1);
    if (!out) return NULL;
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t len = al__utf8_next(u + i, n - i, &cp);
        if (cp == AL__BAD_UTF8)
            memcpy(out + k, "\xEF\xBF\xBD", 3), k += 3;
        else
            memcpy(out + k, u + i, len), k += len;
        i += len;
    }
    out[k] = 0;
    return out;
}

void al__html_text(const char *s, char *out, size_t cap) {
    markup_text(s, out, cap, 0);
}

void al__md_text(const char *s, char *out, size_t cap) {
    markup_text(s, out, cap, 1);
}

void al__xml_text(const char *s, char *out, size_t cap) {
    markup_text(s, out, cap, 2);
}

static int cmp_key(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* the first duplicate key among the n members of object o (NULL if none): sorted keys for large
 * objects (safetensors headers, vocabularies), pairs for small ones */
static const char *object_dup(const cJSON *o, int n) {
    if (n <= 16) {
        for (const cJSON *a = o->child; a; a = a->next)
            for (const cJSON *b = a->next; b; b = b->next)
                if (a->string && b->string && !strcmp(a->string, b->string)) return a->string;
        return NULL;
    }
    const char **keys = malloc((size_t)n * sizeof *keys);
    if (!keys) return NULL;
    int k = 0;
    for (const cJSON *a = o->child; a; a = a->next)
        if (a->string) keys[k++] = a->string;
    qsort(keys, (size_t)k, sizeof *keys, cmp_key);
    const char *dup = NULL;
    for (int i = 1; i < k && !dup; i++)
        if (!strcmp(keys[i - 1], keys[i])) dup = keys[i];
    free(keys);
    return dup;
}

const char *al__json_duplicate_key(const cJSON *j) {
    if (!j) return NULL;
    if (cJSON_IsObject(j)) {
        const char *d = object_dup(j, cJSON_GetArraySize(j));
        if (d) return d;
    }
    if (cJSON_IsObject(j) || cJSON_IsArray(j))
        for (const cJSON *c = j->child; c; c = c->next) {
            const char *d = al__json_duplicate_key(c);
            if (d) return d;
        }
    return NULL;
}

int al__json_check_unique(const cJSON *j, const char *path, al_error *err) {
    const char *d = al__json_duplicate_key(j);
    if (!d) return 0;
    return al__err(err, AL_E_FORMAT,
                   "%s: duplicate key \"%.200s\" in one JSON object (readers disagree on which "
                   "counts: refused)",
                   path, d);
}
