/* touch.h: the capture consumer every forward benchmark uses, so that their numbers compare:
 * it reads every captured attention weight of every head (threads over heads), in 8 float
 * lanes combined in double, so the capture cannot be optimised away. */
#ifndef AL_BENCH_TOUCH_H
#define AL_BENCH_TOUCH_H

#include "attnlim.h"

#include <stddef.h>

typedef struct touch {
    double sum;
    long heads;
} touch;

/* sum of w[n] in 8 float lanes (vectorised), combined in double */
static inline double touch_sum(const float *w, size_t n) {
    float acc[8] = {0};
    size_t n8 = n & ~(size_t)7;
    for (size_t i = 0; i < n8; i += 8)
        for (int l = 0; l < 8; l++) acc[l] += w[i + l];
    double s = 0.0;
    for (int l = 0; l < 8; l++) s += acc[l];
    for (size_t i = n8; i < n; i++) s += w[i];
    return s;
}

/* An al_observer: user is a touch*. */
static inline int touch_capture(void *user, const al_capture *c, al_error *err) {
    (void)err;
    touch *s = user;
    size_t n = (size_t)c->T * c->T;
    double total = 0.0;
#pragma omp parallel for reduction(+ : total) schedule(dynamic, 1)
    for (int h = 0; h < c->n_sel; h++) total += touch_sum(c->weights + h * n, n); /* [T, T] */
    s->sum += total;
    s->heads += c->n_sel;
    return 0;
}

#endif
