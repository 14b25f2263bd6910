/* corpus.c: the texts the experiments read (METHOD section 1). */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

#define MAX_CORPUS (1u << 30) /* 1 GiB */

static const char BODY_START[] = "BOOK ONE: 1805";
static const char BODY_END[] = "*** END OF THE PROJECT GUTENBERG EBOOK";

/* Length of the line at p (up to, not including, '\n' and a '\r' before it). */
static size_t line_len(const char *p, const char *end) {
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    size_t n = (size_t)((nl ? nl : end) - p);
    if (n && p[n - 1] == '\r') n--;
    return n;
}

/* METHOD section 1: from the first line that is exactly "BOOK ONE: 1805" (column 0) up to,
 * not including, the line starting "*** END OF THE PROJECT GUTENBERG EBOOK"; CRLF -> LF. */
static int war_and_peace_body(const char *path, char *buf, size_t len, size_t *out_len,
                              al_error *err) {
    const char *end = buf + len, *start = NULL, *stop = NULL;
    for (const char *p = buf; p < end;) {
        size_t l = line_len(p, end);
        if (!start) {
            if (l == sizeof BODY_START - 1 && memcmp(p, BODY_START, l) == 0) start = p;
        } else if (l >= sizeof BODY_END - 1 && memcmp(p, BODY_END, sizeof BODY_END - 1) == 0) {
            stop = p;
            break;
        }
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        p = nl ? nl + 1 : end;
    }
    if (!start)
        return al__err(err, AL_E_FORMAT, "%s: no line that is exactly '%s' (the start of the body)",
                       path, BODY_START);
    if (!stop)
        return al__err(err, AL_E_FORMAT,
                       "%s: no line starting '%s' after '%s' (the end of the body)", path, BODY_END,
                       BODY_START);
    size_t o = 0;
    for (const char *p = start; p < stop; p++) {
        if (*p == '\r' && p + 1 < stop && p[1] == '\n') continue;
        buf[o++] = *p;
    }
    buf[o] = 0;
    *out_len = o;
    return 0;
}

int al_corpus_load(const char *name_or_path, const char *data_path, char **text, size_t *len,
                   al_error *err) {
    if (!text || !len) return al__err(err, AL_E_INVALID, "al_corpus_load: NULL output");
    *text = NULL;
    *len = 0;
    if (!name_or_path || !*name_or_path)
        return al__err(err, AL_E_INVALID, "corpus: empty name (use war-and-peace or a file path)");
    if (!strncmp(name_or_path, AL_CORPUS_TEXT, strlen(AL_CORPUS_TEXT))) { /* a prompt (--text) */
        const char *t = name_or_path + strlen(AL_CORPUS_TEXT);
        size_t n = strlen(t);
        if (!n) return al__err(err, AL_E_INVALID, "--text: empty prompt");
        if (!(*text = al__malloc(n + 1, "prompt", err))) return AL_E_NOMEM;
        memcpy(*text, t, n + 1);
        *len = n;
        return 0;
    }
    if (strcmp(name_or_path, "war-and-peace") == 0) {
        char path[4096];
        int rc = al_data_find("war_and_peace/pg2600.txt", data_path, path, sizeof path, err);
        if (rc) return rc;
        char *buf;
        size_t n;
        if ((rc = al__read_file(path, MAX_CORPUS, &buf, &n, err))) return rc;
        if ((rc = war_and_peace_body(path, buf, n, len, err))) {
            free(buf);
            return rc;
        }
        char *shrunk = realloc(buf, *len + 1);
        *text = shrunk ? shrunk : buf;
        return 0;
    }
    /* a name that is not a file: a mistyped corpus name, most likely */
    if (strcmp(name_or_path, "-") && !al__is_file(name_or_path) && !strchr(name_or_path, '/')) {
        static const char *const known[] = {"war-and-peace"};
        const char *near = al__nearest(name_or_path, known, 1);
        if (near || al__edit_distance(name_or_path, known[0]) <= 4)
            return al__err(err, AL_E_NOTFOUND,
                           "corpus '%s' is neither a known corpus nor a file: did you mean "
                           "'war-and-peace'?",
                           name_or_path);
        return al__err(err, AL_E_NOTFOUND,
                       "corpus '%s' is neither a known corpus (war-and-peace) nor a file",
                       name_or_path);
    }
    return al__read_file(name_or_path, MAX_CORPUS, text, len, err);
}
