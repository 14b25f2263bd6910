/* nearest.c: "did you mean" for the names people type (options, corpora, normalizers). */
#include "internal.h"

#include <ctype.h>
#include <string.h>

/* Optimal string alignment distance (insertions, deletions, substitutions, adjacent
 * transpositions), case-insensitive; names longer than 63 bytes compare as far apart. */
int al__edit_distance(const char *a, const char *b) {
    size_t n = strlen(a), m = strlen(b);
    if (n > 63 || m > 63) return 1 << 20;
    int d[64][64];
    for (size_t i = 0; i <= n; i++) d[i][0] = (int)i;
    for (size_t j = 0; j <= m; j++) d[0][j] = (int)j;
    for (size_t i = 1; i <= n; i++)
        for (size_t j = 1; j <= m; j++) {
            int ca = tolower((unsigned char)a[i - 1]), cb = tolower((unsigned char)b[j - 1]);
            int v = d[i - 1][j - 1] + (ca != cb);
            if (d[i - 1][j] + 1 < v) v = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < v) v = d[i][j - 1] + 1;
            if (i > 1 && j > 1 && ca == tolower((unsigned char)b[j - 2]) &&
                tolower((unsigned char)a[i - 2]) == cb && d[i - 2][j - 2] + 1 < v)
                v = d[i - 2][j - 2] + 1;
            d[i][j] = v;
        }
    return d[n][m];
}

const char *al__nearest(const char *s, const char *const *cand, int n) {
    const char *best = NULL;
    int bd = 1 << 20, ties = 0;
    size_t ls = strlen(s);
    int limit = ls <= 4 ? 1 : ls <= 8 ? 2 : 3;
    for (int i = 0; i < n; i++) {
        if (!cand[i] || !strcmp(cand[i], s)) continue;
        int dist = al__edit_distance(s, cand[i]);
        /* a unique prefix of at least 3 characters after the dashes counts as near */
        size_t skip = strspn(s, "-");
        if (ls - skip >= 3 && !strncmp(s, cand[i], ls) && dist > limit) dist = limit;
        if (dist < bd)
            bd = dist, best = cand[i], ties = 0;
        else if (dist == bd && best && strcmp(best, cand[i]))
            ties++;
    }
    return best && bd <= limit && !ties ? best : NULL;
}

const char *al_nearest(const char *s, const char *const *cand, int n) {
    return al__nearest(s, cand, n);
}
