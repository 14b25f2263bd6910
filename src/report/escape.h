/* escape.h: the one place where strings that came from outside (model files, corpora, paths,
 * prompts) are made safe for the HTML and JSON we write. Every such string in report.html and
 * diagnose.html goes through these. */
#ifndef AL_ESCAPE_H
#define AL_ESCAPE_H

#include "internal.h"

/* Writes s (NUL-terminated) to f as HTML text or attribute value: & < > " ' escaped; bytes
 * that are not valid UTF-8 become U+FFFD; control characters other than \n and \t dropped. */
int al__html_escape(al__afile *f, const char *s, al_error *err);
/* Writes s as a JSON string literal (with the quotes) that is also safe inside an HTML
 * <script> element: < > & as \u003c \u003e \u0026, U+2028/9 and controls as \uXXXX, invalid
 * UTF-8 as \ufffd. n: bytes of s. */
int al__json_string_html(al__afile *f, const char *s, size_t n, al_error *err);
/* Length in bytes of the valid UTF-8 sequence at s[0..n) (1..4), or 0 when it is not one. */
int al__utf8_len(const unsigned char *s, size_t n);

/* s (NUL-terminated) as valid UTF-8: every byte that does not begin a valid sequence becomes
 * U+FFFD (as al__json_string_html does). malloc'ed; NULL when out of memory. */
char *al__utf8_valid(const char *s);

#endif
