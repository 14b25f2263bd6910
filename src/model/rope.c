/* rope.c: rotary position embeddings as HF transformers' modeling_rope_utils computes them
 * (default, linear, dynamic, llama3, yarn), shared by the decoder families. */
#include "rope.h"

#include <math.h>
#include <stddef.h>

/* ---- RoPE ----------------------------------------------------------------------------------- */

const char *al__rope_type_name(al__rope_type t) {
    static const char *names[] = {"default", "linear", "dynamic", "llama3", "yarn"};
    return t >= AL__ROPE_DEFAULT && t <= AL__ROPE_YARN ? names[t] : "?";
}

/* yarn's inverse dimension formula: the dimension that turns num_rot times over max_pos */
static double yarn_dim(double num_rot, int dim, double base, int max_pos) {
    return (dim * log(max_pos / (num_rot * 2 * M_PI))) / (2 * log(base));
}

static void yarn_inv_freq(const al__rope *r, double *inv, double *scale) {
    int half = r->dim / 2;
    double lo = floor(yarn_dim(r->beta_fast, r->dim, r->base, r->max_pos));
    double hi = ceil(yarn_dim(r->beta_slow, r->dim, r->base, r->max_pos));
    if (lo < 0) lo = 0;
    if (hi > r->dim - 1) hi = r->dim - 1;
    if (lo == hi) hi += 0.001;
    for (int i = 0; i < half; i++) {
        double extra = pow(r->base, -2.0 * i / r->dim), inter = extra / r->factor;
        double ramp = (i - lo) / (hi - lo);
        ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
        double ef = 1 - ramp; /* the share of extrapolation */
        inv[i] = inter * (1 - ef) + extra * ef;
    }
    *scale = r->attn_factor > 0 ? r->attn_factor : 0.1 * log(r->factor) + 1.0;
}

static void llama3_inv_freq(const al__rope *r, double *inv) {
    double low_wl = r->orig_max_pos / r->low_freq, high_wl = r->orig_max_pos / r->high_freq;
    for (int i = 0; i < r->dim / 2; i++) {
        double f = pow(r->base, -2.0 * i / r->dim), wl = 2 * M_PI / f;
        double g = wl > low_wl ? f / r->factor : f;
        if (!(wl < high_wl) && !(wl > low_wl)) {
            double s = (r->orig_max_pos / wl - r->low_freq) / (r->high_freq - r->low_freq);
            g = (1 - s) * g / r->factor + s * g;
        }
        inv[i] = g;
    }
}

static void rope_inv_freq_type(const al__rope *r, int T, double *inv, double *scale) {
    double base = r->base;
    *scale = 1.0;
    if (r->type == AL__ROPE_YARN) {
        yarn_inv_freq(r, inv, scale);
        return;
    }
    if (r->type == AL__ROPE_LLAMA3) {
        llama3_inv_freq(r, inv);
        return;
    }
    if (r->type == AL__ROPE_DYNAMIC && T > r->max_pos)
        base *= pow(r->factor * T / r->max_pos - (r->factor - 1), (double)r->dim / (r->dim - 2));
    for (int i = 0; i < r->dim / 2; i++) {
        inv[i] = pow(base, -2.0 * i / r->dim);
        if (r->type == AL__ROPE_LINEAR) inv[i] /= r->factor;
    }
}

void al__rope_inv_freq(const al__rope *r, int T, double *inv, double *scale) {
    rope_inv_freq_type(r, T, inv, scale);
    for (int i = 0; r->freq_factors && i < r->dim / 2; i++) inv[i] /= r->freq_factors[i];
}

/* cos/sin of every (position, frequency) pair: tab [T, dim/2, 2], computed in double. */
void al__rope_table(float *tab, int T, const al__rope *r) {
    int half = r->dim / 2;
    double inv[512], scale; /* dim <= 1024 (checked with the config) */
    al__rope_inv_freq(r, T, inv, &scale);
    for (int i = 0; i < half; i++)
        for (int t = 0; t < T; t++) {
            double a = t * inv[i];
            tab[((size_t)t * half + i) * 2] = (float)(cos(a) * scale);
            tab[((size_t)t * half + i) * 2 + 1] = (float)(sin(a) * scale);
        }
}

/* Rotates the first dim entries of the heads of x [T, n_heads*d] in place: pairs (i, i + dim/2),
 * HF's rotate_half (dim < d: partial rotary, the rest passes through). */
void al__rope_apply(float *x, const float *tab, int T, int n_heads, int d, int dim) {
    int half = dim / 2;
#pragma omp parallel for schedule(dynamic, 16) if (T >= 64)
    for (int t = 0; t < T; t++) {
        const float *cs = tab + (size_t)t * half * 2; /* [dim/2, 2] */
        for (int h = 0; h < n_heads; h++) {
            float *v = x + ((size_t)t * n_heads + h) * d; /* [d] */
            for (int i = 0; i < half; i++) {
                float c = cs[2 * i], s = cs[2 * i + 1], a = v[i], b = v[i + half];
                v[i] = a * c - b * s;
                v[i + half] = b * c + a * s;
            }
        }
    }
}
