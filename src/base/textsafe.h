/* textsafe.h: every string that comes from a model, dump, corpus or path is escaped where it is
 * written (owner: src/base/textsafe.c). Invalid UTF-8 never reaches a file or a terminal, and
 * control characters never act: ESC, CSI (U+009B) and the rest of C0 / DEL / C1 are made
 * visible or replaced. */
#ifndef AL_TEXTSAFE_H
#define AL_TEXTSAFE_H

#include <stddef.h>
#include <stdint.h>

#define AL__BAD_UTF8 0xFFFFFFFFu
/* The code point at s[0 .. n) (n >= 1) into *cp and its length in bytes; an invalid sequence
 * (a stray continuation, overlong, a surrogate, past U+10FFFF, cut short) is one byte long with
 * *cp = AL__BAD_UTF8. */
size_t al__utf8_next(const unsigned char *s, size_t n, uint32_t *cp);
/* Is cp a control character (C0 but tab and newline, DEL, C1)? */
int al__is_control(uint32_t cp);

/* The terminal form of s[n] into out[cap] (NUL-terminated, cut at a character): controls as
 * \xNN / \u00NN (tab, newline and carriage return kept), invalid bytes as \xNN. Returns the
 * length written. */
size_t al__term_text(const char *s, size_t n, char *out, size_t cap);
/* Valid UTF-8 without controls (each invalid byte and control -> U+FFFD) into out[cap]: for
 * figure labels (cairo refuses invalid UTF-8). */
void al__plain_text(const char *s, char *out, size_t cap);
/* JSON text as printed by cJSON (ASCII outside strings) made valid for every JSON reader and
 * inert on a terminal: each invalid byte -> U+FFFD, each C1 control -> \u00NN, DEL -> \u007f.
 * Returns a malloc'ed copy (NULL when out of memory). */
char *al__json_repair(const char *json);
/* s as HTML or XML text (also inside a quoted attribute) into out[cap]: < > & " ' as entities,
 * invalid UTF-8 and controls as U+FFFD. Output needs up to 6 bytes per input byte. */
void al__html_text(const char *s, char *out, size_t cap);
/* The same for XML text and double-quoted attributes (SVG metadata): ' is left as it is. */
void al__xml_text(const char *s, char *out, size_t cap);
/* s as inert Markdown text (CommonMark) into out[cap]: \ < > | backslash-escaped, and ] where
 * ( [ or : follows, so that no raw HTML (<script>), autolink, table cell, link or image can be
 * formed (emphasis and code spans are left: they change how text looks, not what it is); newline
 * and tab as a space; invalid UTF-8 and controls as U+FFFD. Up to 3 bytes per input byte. */
void al__md_text(const char *s, char *out, size_t cap);
/* The streaming forms, for writers of whole pages (report.html, the explorer): s as HTML text
 * (al__html_text's escaping: newline and tab kept) written to f. */
struct al__afile;
struct al_error;
int al__html_escape(struct al__afile *f, const char *s, struct al_error *err);
/* s[n] as a JSON string literal (with the quotes) that is also safe inside an HTML <script>
 * element: < > & as \u003c \u003e \u0026, U+2028/9, DEL and C0 controls as \uXXXX (\n and
 * \t as \n \t), invalid UTF-8 as \ufffd. */
int al__json_string_html(struct al__afile *f, const char *s, size_t n, struct al_error *err);
/* s (NUL-terminated) as valid UTF-8: every byte that does not begin a valid sequence becomes
 * U+FFFD. malloc'ed; NULL when out of memory. */
char *al__utf8_valid(const char *s);
/* cJSON_Print (pretty) / cJSON_PrintUnformatted, repaired as above: every JSON attnlim writes
 * goes through it. malloc'ed (free()); NULL when out of memory. */
struct cJSON;
char *al__json_print(const struct cJSON *j, int pretty);
/* The first key that occurs twice in one object anywhere in j, else NULL. cJSON keeps both and
 * finds the first, Python and HF take the last: a file read differently by two tools is refused
 * (every JSON input checks this after parsing; the message names the key and the file). */
const char *al__json_duplicate_key(const struct cJSON *j);
/* 0, or AL_E_FORMAT naming path and the duplicate key. */
int al__json_check_unique(const struct cJSON *j, const char *path, struct al_error *err);

#endif
