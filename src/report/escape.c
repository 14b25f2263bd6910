/* escape.c: HTML text and script-safe JSON strings (escape.h). */
#include "escape.h"

#include <stdlib.h>
#include <string.h>

int al__utf8_len(const unsigned char *s, size_t n) {
    if (n == 0) return 0;
    unsigned c = s[0];
    if (c < 0x80) return 1;
    int len = c >= 0xF0 && c <= 0xF4 ? 4 : c >= 0xE0 ? (c <= 0xEF ? 3 : 0) : c >= 0xC2 ? 2 : 0;
    if (!len || (size_t)len > n) return 0;
    for (int i = 1; i < len; i++)
        if ((s[i] & 0xC0) != 0x80) return 0;
    if (c == 0xE0 && s[1] < 0xA0) return 0;  /* overlong */
    if (c == 0xED && s[1] >= 0xA0) return 0; /* surrogate */
    if (c == 0xF0 && s[1] < 0x90) return 0;
    if (c == 0xF4 && s[1] >= 0x90) return 0;
    return len;
}

int al__html_escape(al__afile *f, const char *s, al_error *err) {
    const unsigned char *u = (const unsigned char *)s;
    size_t n = strlen(s);
    for (size_t i = 0; i < n;) {
        unsigned c = u[i];
        int len = al__utf8_len(u + i, n - i);
        const char *rep = NULL;
        if (!len)
            rep = "\xEF\xBF\xBD", len = 1;
        else if (c == '<')
            rep = "&lt;";
        else if (c == '>')
            rep = "&gt;";
        else if (c == '&')
            rep = "&amp;";
        else if (c == '"')
            rep = "&quot;";
        else if (c == '\'')
            rep = "&#39;";
        else if (c < 0x20 && c != '\n' && c != '\t')
            rep = "";
        if (rep)
            al__afile_write(f, rep, strlen(rep), err);
        else
            al__afile_write(f, u + i, (size_t)len, err);
        i += (size_t)len;
    }
    return f->failed ? AL_E_IO : 0;
}

int al__json_string_html(al__afile *f, const char *s, size_t n, al_error *err) {
    const unsigned char *u = (const unsigned char *)s;
    al__afile_write(f, "\"", 1, err);
    for (size_t i = 0; i < n;) {
        unsigned c = u[i];
        int len = al__utf8_len(u + i, n - i);
        char esc[8];
        const char *rep = NULL;
        if (!len)
            rep = "\\ufffd", len = 1;
        else if (c == '"')
            rep = "\\\"";
        else if (c == '\\')
            rep = "\\\\";
        else if (c == '\n')
            rep = "\\n";
        else if (c < 0x20 || c == '<' || c == '>' || c == '&' || c == 0x7F) {
            snprintf(esc, sizeof esc, "\\u%04x", c);
            rep = esc;
        } else if (len == 3 && c == 0xE2 && u[i + 1] == 0x80 && (u[i + 2] | 1) == 0xA9)
            rep = u[i + 2] == 0xA8 ? "\\u2028" : "\\u2029";
        if (rep)
            al__afile_write(f, rep, strlen(rep), err);
        else
            al__afile_write(f, u + i, (size_t)len, err);
        i += (size_t)len;
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
        int len = al__utf8_len(u + i, n - i);
        if (!len) {
            memcpy(out + k, "\xEF\xBF\xBD", 3), k += 3, i++;
            continue;
        }
        memcpy(out + k, u + i, (size_t)len);
        k += (size_t)len, i += (size_t)len;
    }
    out[k] = 0;
    return out;
}
