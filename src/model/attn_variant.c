/* attn_variant.c: attention variants inside the forward (attnlim.h, "attention variants"):
 * top-k key selection per query row and the alternative normalizers of normalize.c, applied
 * by al__attention (attention.c) to the rows of the layers and heads a variant names.
 *
 * A row of n logits z[n]: K = al_attn_kept(v, n, L); the K-th largest logit thr is found by a
 * three-way quickselect on a copy (O(n), all-equal rows included); the kept set is every
 * j with z_j > thr and the first K - #{z > thr} indices with z_j == thr (ties toward the lower
 * index, METHOD section 3). Softmax over the kept set uses the dense path's float exp and double
 * sum; K = n with softmax is the dense routine itself (bit for bit the model's own weights).
 * Other normalizers run al_norm_forward in double on the kept logits in index order. */
#include "model.h"
#include "cpu.h"
#include "ops.h"

#include <cjson/cJSON.h>
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif
#include <stdint.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ceil(x) of a positive product, 1e-9 below so that 0.25 * 64 stays 16 */
static long ceil_down(double x) {
    double c = ceil(x - 1e-9);
    return c < 1 ? 1 : c > 2147483647.0 ? 2147483647L : (long)c;
}

int al_attn_kept(const al_attn_variant *v, int n, int L) {
    if (n < 1) return 0;
    long k = n;
    switch (v ? v->rule : AL_ATTN_DENSE) {
    case AL_ATTN_DENSE:
        k = n;
        break;
    case AL_ATTN_TOPK:
        k = (long)v->param;
        break;
    case AL_ATTN_TOPK_FRAC:
        k = ceil_down(v->param * L);
        break;
    case AL_ATTN_TOPK_SQRT:
        k = ceil_down(v->param * sqrt((double)n));
        break;
    case AL_ATTN_TOPK_LOG:
        k = ceil_down(v->param * log((double)n));
        break;
    }
    return k < 1 ? 1 : k > n ? n : (int)k;
}

/* ---- parsing and names ---------------------------------------------------------------------- */

static const struct {
    const char *name;
    al_attn_rule rule;
} RULES[] = {{"topk", AL_ATTN_TOPK},
             {"topk-frac", AL_ATTN_TOPK_FRAC},
             {"topk-sqrt", AL_ATTN_TOPK_SQRT},
             {"topk-log", AL_ATTN_TOPK_LOG}};

/* A finite number filling all of s. */
static int parse_num(const char *s, double *out) {
    if (!s || !*s) return 0;
    char *end;
    double x = strtod(s, &end);
    if (*end || !isfinite(x)) return 0;
    *out = x;
    return 1;
}

int al_attn_rule_parse(const char *spec, al_attn_variant *v, al_error *err) {
    static const char usage[] = "(dense, topk:K, topk-frac:F, topk-sqrt:C, topk-log:C)";
    if (!spec) return al__err(err, AL_E_INVALID, "--attention: no value %s", usage);
    if (!strcmp(spec, "dense")) {
        v->rule = AL_ATTN_DENSE, v->param = 0;
        return 0;
    }
    const char *colon = strchr(spec, ':');
    size_t len = colon ? (size_t)(colon - spec) : strlen(spec);
    for (size_t i = 0; i < sizeof RULES / sizeof RULES[0]; i++) {
        if (strlen(RULES[i].name) != len || strncmp(spec, RULES[i].name, len)) continue;
        double x;
        if (!colon || !parse_num(colon + 1, &x))
            return al__err(err, AL_E_INVALID, "--attention %s: %s needs a number after ':' %s",
                           spec, RULES[i].name, usage);
        al_attn_rule r = RULES[i].rule;
        if (r == AL_ATTN_TOPK && (x < 1 || x > 2147483647.0 || x != floor(x)))
            return al__err(err, AL_E_INVALID, "--attention %s: K must be an integer >= 1", spec);
        if (r == AL_ATTN_TOPK_FRAC && !(x > 0 && x <= 1))
            return al__err(err, AL_E_INVALID, "--attention %s: F must be in (0, 1]", spec);
        if ((r == AL_ATTN_TOPK_SQRT || r == AL_ATTN_TOPK_LOG) && !(x > 0 && x <= 1e9))
            return al__err(err, AL_E_INVALID, "--attention %s: C must be > 0", spec);
        v->rule = r, v->param = x;
        return 0;
    }
    return al__err(err, AL_E_INVALID, "--attention %s: unknown rule %s", spec, usage);
}

int al_attn_norm_parse(const char *spec, al_norm *out, al_error *err) {
    static const char usage[] = "(softmax, sparsemax, entmax15, entmax:A, ssmax[:S])";
    if (!spec) return al__err(err, AL_E_INVALID, "normalizer: no value %s", usage);
    const char *colon = strchr(spec, ':');
    size_t len = colon ? (size_t)(colon - spec) : strlen(spec);
    static const struct {
        const char *name;
        al_norm_kind kind;
    } kinds[] = {{"softmax", AL_NORM_SOFTMAX},
                 {"sparsemax", AL_NORM_SPARSEMAX},
                 {"entmax15", AL_NORM_ENTMAX15},
                 {"entmax", AL_NORM_ENTMAX},
                 {"ssmax", AL_NORM_SSMAX}};
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        if (strlen(kinds[i].name) != len || strncmp(spec, kinds[i].name, len)) continue;
        al_norm nm = al_norm_default(kinds[i].kind);
        int takes = kinds[i].kind == AL_NORM_ENTMAX || kinds[i].kind == AL_NORM_SSMAX;
        if (colon) {
            double x;
            if (!takes)
                return al__err(err, AL_E_INVALID, "normalizer %s: %s takes no parameter %s", spec,
                               kinds[i].name, usage);
            if (!parse_num(colon + 1, &x))
                return al__err(err, AL_E_INVALID, "normalizer %s: not a number after ':'", spec);
            if (kinds[i].kind == AL_NORM_ENTMAX)
                nm.alpha = x;
            else
                nm.ssmax_s = x;
        }
        int rc = al_norm_check(&nm, err);
        if (rc) return al__err_prefix(err, (al_code)rc, "normalizer %s", spec);
        *out = nm;
        return 0;
    }
    return al__err(err, AL_E_INVALID, "normalizer %s: unknown %s", spec, usage);
}

void al_attn_rule_name(const al_attn_variant *v, char *buf, size_t cap) {
    if (!v || v->rule == AL_ATTN_DENSE) {
        snprintf(buf, cap, "dense");
        return;
    }
    for (size_t i = 0; i < sizeof RULES / sizeof RULES[0]; i++)
        if (RULES[i].rule == v->rule) {
            snprintf(buf, cap, "%s:%.12g", RULES[i].name, v->param);
            return;
        }
    snprintf(buf, cap, "unknown");
}

void al_attn_norm_name(const al_norm *nm, char *buf, size_t cap) {
    if (nm->kind == AL_NORM_ENTMAX)
        snprintf(buf, cap, "entmax:%.12g", nm->alpha);
    else if (nm->kind == AL_NORM_SSMAX)
        snprintf(buf, cap, "ssmax:%.12g", nm->ssmax_s);
    else
        snprintf(buf, cap, "%s", al_norm_name(nm->kind));
}

/* ---- the model's variant ----------------------------------------------------------------------
 */

void al__attn_clear(al_model *m) {
    free(m->attn_layers);
    free(m->attn_heads);
    m->attn_layers = m->attn_heads = NULL;
    memset(&m->attn, 0, sizeof m->attn);
    m->attn_on = m->attn_is_own = 0;
    if (m->own_on) { /* the normalizer the model was trained with */
        m->attn = m->own;
        m->attn_on = m->attn_is_own = 1;
    }
}

int al__model_own_norm(const al_model *m, int layer, int head, al_norm *out) {
    if (!m || !m->attn_on || !m->attn_is_own) return 0;
    *out = m->own.norm;
    if (m->own_s && layer >= 0 && head >= 0 && layer < m->info.n_layer && head < m->info.n_head)
        out->ssmax_s = m->own_s[(size_t)layer * m->info.n_head + head];
    return 1;
}

void al__attn_set_own(al_model *m, const al_norm *nm, float *s_per_head) {
    free(m->own_s);
    m->own_s = s_per_head;
    memset(&m->own, 0, sizeof m->own);
    m->own.rule = AL_ATTN_DENSE, m->own.norm = *nm;
    m->own_on = 1;
    al__attn_clear(m);
}

/* A copy of mask[n] (NULL stays NULL). */
static int copy_mask(const uint8_t *mask, int n, uint8_t **out, al_error *err) {
    *out = NULL;
    if (!mask) return 0;
    *out = al__malloc((size_t)n, "attention variant mask", err);
    if (!*out) return AL_E_NOMEM;
    for (int i = 0; i < n; i++) (*out)[i] = mask[i] != 0;
    return 0;
}

int al_model_set_attention(al_model *m, const al_attn_variant *v, al_error *err) {
    if (!m) return al__err(err, AL_E_INVALID, "al_model_set_attention: NULL model");
    /* dense softmax given explicitly on a model trained with another normalizer is a variant */
    int dense = !v || (v->rule == AL_ATTN_DENSE && v->norm.kind == AL_NORM_SOFTMAX &&
                       v->norm.temperature == 1.0 && !m->own_on);
    if (!dense && !(m->vt && m->vt->variants))
        return al__err(err, AL_E_UNSUPPORTED,
                       "%s: attention variants run inside the forward of causal LMs (gpt2, "
                       "llama families); family %s has none",
                       m->info.path, m->info.family);
    if (!dense) {
        al_attn_variant probe = *v;
        if (v->rule != AL_ATTN_DENSE) {
            char name[64];
            al_attn_rule_name(v, name, sizeof name);
            int rc = al_attn_rule_parse(name, &probe, err); /* the same range checks */
            if (rc) return rc;
        }
        int rc = al_norm_check(&v->norm, err);
        if (rc) return rc;
        if (v->norm.kind == AL_NORM_SA_SOFTMAX || v->norm.kind == AL_NORM_SA_SOFTMAX_NORM)
            return al__err(err, AL_E_UNSUPPORTED,
                           "normalizer %s: not for the forward (its weights do not sum to 1)",
                           al_norm_name(v->norm.kind));
    }
    uint8_t *ml = NULL, *mh = NULL;
    if (!dense) {
        int rc = copy_mask(v->layers, m->info.n_layer, &ml, err);
        if (!rc) rc = copy_mask(v->heads, m->info.n_head, &mh, err);
        if (rc) {
            free(ml);
            return rc;
        }
    }
    al__attn_clear(m);
    if (dense) return 0;
    m->attn = *v;
    m->attn.layers = m->attn_layers = ml;
    m->attn.heads = m->attn_heads = mh;
    m->attn_on = 1;
    m->attn_is_own = 0;
    return 0;
}

const al_attn_variant *al_model_get_attention(const al_model *m) {
    return m ? al__model_attn(m) : NULL;
}

/* mask[n] from idx[k] (NULL idx: *mask NULL, every index); what names the option */
static int spec_mask(const int *idx, int k, int n, const char *what, uint8_t **mask,
                     al_error *err) {
    *mask = NULL;
    if (!idx) return 0;
    if (!(*mask = al__calloc((size_t)n, 1, "attention variant mask", err))) return AL_E_NOMEM;
    for (int i = 0; i < k; i++) {
        if (idx[i] < 0 || idx[i] >= n) {
            free(*mask);
            *mask = NULL;
            return al__err(err, AL_E_RANGE, "%s: %d is outside 0..%d", what, idx[i], n - 1);
        }
        (*mask)[idx[i]] = 1;
    }
    return 0;
}

int al_model_set_attention_spec(al_model *m, const al_attn_spec *s, al_error *err) {
    if (!m) return al__err(err, AL_E_INVALID, "al_model_set_attention_spec: NULL model");
    al_attn_variant v = {.rule = AL_ATTN_DENSE, .norm = al_norm_default(AL_NORM_SOFTMAX)};
    if (!s || (!s->rule && !s->normalizer && !s->layers && !s->heads))
        return al_model_set_attention(m, NULL, err); /* nothing given: the model's own */
    int rc = s->rule ? al_attn_rule_parse(s->rule, &v, err) : 0;
    if (!rc && s->normalizer) rc = al_attn_norm_parse(s->normalizer, &v.norm, err);
    uint8_t *ml = NULL, *mh = NULL;
    if (!rc)
        rc = spec_mask(s->layers, s->n_layers, m->info.n_layer, "--attention-layers", &ml, err);
    if (!rc) rc = spec_mask(s->heads, s->n_heads, m->info.n_head, "--attention-heads", &mh, err);
    v.layers = ml, v.heads = mh;
    if (!rc) rc = al_model_set_attention(m, &v, err);
    free(ml);
    free(mh);
    return rc;
}

/* "all" or the indices i < n with mask[i] set */
cJSON *al__mask_json(const uint8_t *mask, int n) {
    if (!mask) return cJSON_CreateString("all");
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < n; i++)
        if (mask[i]) cJSON_AddItemToArray(a, cJSON_CreateNumber(i));
    return a;
}

cJSON *al__attn_json(const al_model *m) {
    const al_attn_variant *v = al__model_attn(m);
    al_attn_variant dense = {.rule = AL_ATTN_DENSE, .norm = al_norm_default(AL_NORM_SOFTMAX)};
    if (!v) v = &dense;
    cJSON *o = cJSON_CreateObject();
    char buf[96];
    al_attn_rule_name(v, buf, sizeof buf);
    cJSON_AddStringToObject(o, "rule", buf);
    al_attn_norm_name(&v->norm, buf, sizeof buf);
    cJSON_AddStringToObject(o, "normalizer", buf);
    cJSON_AddBoolToObject(o, "modified", al__model_attn(m) != NULL);
    if (v->norm.temperature != 1.0) cJSON_AddNumberToObject(o, "temperature", v->norm.temperature);
    if (m->attn_is_own) { /* the normalizer the checkpoint was trained with */
        cJSON_AddBoolToObject(o, "trained", 1);
        if (m->own_s) {
            cJSON *a = cJSON_AddArrayToObject(o, "ssmax_s_per_head");
            for (int i = 0; i < m->info.n_layer * m->info.n_head; i++)
                cJSON_AddItemToArray(a, cJSON_CreateNumber(m->own_s[i]));
        }
    }
    cJSON_AddItemToObject(o, "layers", al__mask_json(v->layers, m->info.n_layer));
    cJSON_AddItemToObject(o, "heads", al__mask_json(v->heads, m->info.n_head));
    cJSON_AddStringToObject(
        o, "kept",
        "per query row of n visible keys in a window of L: min(n, K), K = topk:K, ceil(F L), "
        "ceil(C sqrt n), ceil(C ln n) (at least 1); the K largest logits, ties at the K-th "
        "toward the lower index; the normalizer over the kept logits, the others weight 0");
    return o;
}

/* ---- one row ----------------------------------------------------------------------------------
 */

static void swapf(float *a, float *b) {
    float t = *a;
    *a = *b, *b = t;
}

/* The k-th largest (1-based) of x[n], x permuted: three-way partition around the median of
 * three, recursing into the one part that holds position k - 1 of the descending order. */
static float kth_largest(float *x, int n, int k) {
    int lo = 0, hi = n, want = k - 1; /* find the value at index want of x sorted descending */
    for (;;) {
        if (hi - lo <= 1) return x[lo];
        float a = x[lo], b = x[lo + (hi - lo) / 2], c = x[hi - 1];
        float p = a > b ? (b > c ? b : (a > c ? c : a)) : (a > c ? a : (b > c ? c : b));
        /* [lo, gt) > p, [gt, i) == p, [lt, hi) < p */
        int gt = lo, i = lo, lt = hi;
        while (i < lt) {
            if (x[i] > p)
                swapf(&x[i++], &x[gt++]);
            else if (x[i] < p)
                swapf(&x[i], &x[--lt]);
            else
                i++;
        }
        if (want < gt)
            hi = gt;
        else if (want < lt)
            return p;
        else
            lo = lt;
    }
}

/* The vector passes of a row: AVX2 versions compiled by target attribute and chosen at run time
 * (al__cpu_level, cpu.h), the scalar loops the fallback and the reference. */
#if defined(__x86_64__) && defined(__GNUC__)
#define AV_AVX2 1
__attribute__((target("avx2,fma"))) static int row_scan_avx2(const float *z, int n, float *mn,
                                                             float *mx) {
    int j = 0;
    float lo = z[0], hi = z[0], zs = 0.0f;
    if (n >= 8) {
        __m256 vl = _mm256_loadu_ps(z), vh = vl, vz = _mm256_setzero_ps(), zero = vz;
        for (; j + 8 <= n; j += 8) {
            __m256 x = _mm256_loadu_ps(z + j);
            vl = _mm256_min_ps(vl, x), vh = _mm256_max_ps(vh, x);
            vz = _mm256_add_ps(vz, _mm256_mul_ps(x, zero));
        }
        float l8[8], h8[8], z8[8];
        _mm256_storeu_ps(l8, vl), _mm256_storeu_ps(h8, vh), _mm256_storeu_ps(z8, vz);
        lo = l8[0], hi = h8[0];
        for (int i = 0; i < 8; i++)
            lo = l8[i] < lo ? l8[i] : lo, hi = h8[i] > hi ? h8[i] : hi, zs += z8[i];
    }
    for (; j < n; j++) lo = z[j] < lo ? z[j] : lo, hi = z[j] > hi ? z[j] : hi, zs += z[j] * 0.0f;
    *mn = lo, *mx = hi;
    return !(zs == 0.0f) || !isfinite(lo) || !isfinite(hi);
}

__attribute__((target("avx2,popcnt"))) static int count_ge_avx2(const float *z, int n, float t) {
    int c = 0, j = 0;
    const __m256 vt = _mm256_set1_ps(t);
    for (; j + 8 <= n; j += 8)
        c += __builtin_popcount(
            (unsigned)_mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(z + j), vt, _CMP_GE_OQ)));
    for (; j < n; j++) c += z[j] >= t;
    return c;
}
#endif

/* Is any of z[n] NaN or infinite (the sum of z * 0 is NaN exactly then)? And its min and max
 * (when finite), in one pass. avx: the AVX2 version. */
static int row_scan(const float *z, int n, float *mn, float *mx, int avx) {
#ifdef AV_AVX2
    if (avx) return row_scan_avx2(z, n, mn, mx);
#endif
    (void)avx;
    float lo = z[0], hi = z[0], zs = 0.0f;
    for (int j = 0; j < n; j++)
        lo = z[j] < lo ? z[j] : lo, hi = z[j] > hi ? z[j] : hi, zs += z[j] * 0.0f;
    *mn = lo, *mx = hi;
    return !(zs == 0.0f) || !isfinite(lo) || !isfinite(hi);
}

/* #{j : z_j >= t} */
static int count_ge(const float *z, int n, float t, int avx) {
#ifdef AV_AVX2
    if (avx) return count_ge_avx2(z, n, t);
#endif
    (void)avx;
    int c = 0;
    for (int j = 0; j < n; j++) c += z[j] >= t;
    return c;
}

/* Bisection of [*lo, *up] (count_ge(lo) = *c_lo >= k > count_ge(up) = *c_up, or up the max)
 * until at most target keys are >= lo, or the interval no longer splits. */
static void bisect(const float *z, int n, int k, int target, float *lo, float *up, int *c_lo,
                   int *c_up, int avx) {
    for (int it = 0; *c_lo > target && it < 64; it++) {
        float mid = *lo + 0.5f * (*up - *lo);
        if (!(mid > *lo && mid < *up)) return;
        int c = count_ge(z, n, mid, avx);
        if (c >= k)
            *lo = mid, *c_lo = c;
        else
            *up = mid, *c_up = c;
    }
}

/* The k kept keys of z[n] (k < n; min and max given) into hv, hi (returns k): bisection on a
 * threshold over the whole row (vectorised counts) until at most max(2k, k + 32) keys are
 * >= lo; those candidates compacted (index order); bisection among them until at most 8 lie
 * in [lo, up); every key >= up is kept, and the k - #{>= up} best of [lo, up) by
 * (value desc, index asc). Rows that do not narrow (ties at the K-th logit) go to kept_select. */
static int kept_select(const float *z, int n, int k, float *copy, float *hv, int *hi);
static int kept_bisect(const float *z, int n, int k, float mn, float mx, float *copy, float *hv,
                       int *hi, int avx) {
    float lo = mn, up = mx;
    int c_lo = n, c_up = count_ge(z, n, mx, avx);
    if (c_up >= k) return kept_select(z, n, k, copy, hv, hi); /* ties at the max */
    bisect(z, n, k, 2 * k > k + 32 ? 2 * k : k + 32, &lo, &up, &c_lo, &c_up, avx);
    if (c_lo == n) return kept_select(z, n, k, copy, hv, hi);
    int m = 0, *ci = (int *)(void *)(copy + n); /* candidates: copy [m] values, ci [m] indices */
    for (int j = 0; j < n; j++) {
        copy[m] = z[j], ci[m] = j;
        m += z[j] >= lo;
    }
    bisect(copy, m, k, c_up + 8, &lo, &up, &c_lo, &c_up, avx);
    /* kept: every candidate >= up; then the best k - c_up of [lo, up) (at most a few, or
     * ties) in index order: repeatedly the first largest */
    int got = 0, na = 0;
    float *av = copy + 2 * (size_t)n; /* the ambiguous ones: av [na], ai [na] */
    int *ai = (int *)(void *)(copy + 3 * (size_t)n);
    for (int i = 0; i < m; i++) {
        if (copy[i] >= up)
            hv[got] = copy[i], hi[got++] = ci[i];
        else if (copy[i] >= lo)
            av[na] = copy[i], ai[na++] = ci[i];
    }
    if (na > 16) { /* ties: the exact choice by quickselect over them */
        int need = k - got, *pos = (int *)(void *)(copy + 5 * (size_t)n);
        float *tmp = copy + 4 * (size_t)n;
        int g2 = kept_select(av, na, need, tmp, hv + got, pos);
        for (int i = 0; i < g2; i++) hi[got + i] = ai[pos[i]];
        return got + g2;
    }
    while (got < k) {
        int b = -1;
        for (int i = 0; i < na; i++)
            if (ai[i] >= 0 && (b < 0 || av[i] > av[b])) b = i; /* first of the largest */
        hv[got] = av[b], hi[got++] = ai[b];
        ai[b] = -1;
    }
    return got;
}

/* The same set by a three-way quickselect of the K-th largest on a copy (rows keeping many
 * keys, where the heap would take most of them in). */
static int kept_select(const float *z, int n, int k, float *copy, float *hv, int *hi) {
    memcpy(copy, z, (size_t)n * sizeof *copy);
    float thr = kth_largest(copy, n, k);
    int need_eq = k, m = 0;
    for (int j = 0; j < n; j++) need_eq -= z[j] > thr;
    for (int j = 0; j < n; j++)
        if (z[j] > thr || (z[j] == thr && need_eq-- > 0)) hv[m] = z[j], hi[m++] = j;
    return m;
}

void al__attn_variant_row(const al_attn_variant *v, float *w, const float *z, int n, int L,
                          float *scr) {
    float s = al__attn_variant_row_exp(v, w, z, n, L, scr);
    for (int j = 0; j < n && s != 1.0f; j++) w[j] *= s; /* al__softmax_row's last pass */
}

float al__attn_variant_row_exp(const al_attn_variant *v, float *w, const float *z, int n, int L,
                               float *scr) {
    const int k = al_attn_kept(v, n, L);
    const int soft = v->norm.kind == AL_NORM_SOFTMAX && v->norm.temperature == 1.0;
    const int avx = al__cpu_level() >= AL__CPU_AVX2;
    float mn, mx;
    if (row_scan(z, n, &mn, &mx, avx)) {
        for (int j = 0; j < n; j++) w[j] = NAN;
        return 1.0f;
    }
    if (k == n && soft) return al__softmax_exp(w, z, n);
    /* scratch: hv [n] floats, hi [n] ints, copy [n] floats, then dz, dp [n] doubles each */
    float *hv = scr, *copy = scr + 2 * (size_t)n;
    int *hi = (int *)(void *)(scr + n);
    double *dz = (double *)(void *)(scr + ((size_t)3 * n + 1) / 2 * 2), *dp = dz + n;
    int m = k;
    if (k == n) {
        for (int j = 0; j < n; j++) hv[j] = z[j], hi[j] = j;
    } else {
        m = kept_bisect(z, n, k, mn, mx, copy, hv, hi, avx);
    }
    /* z is read in full: now w (which may be z) is written */
    memset(w, 0, (size_t)n * sizeof *w);
    if (soft) { /* the row's max is always kept */
        double s = 0.0;
        for (int i = 0; i < m; i++) s += hv[i] = al__expf(hv[i] - mx);
        float inv = (float)(1.0 / s);
        for (int i = 0; i < m; i++) w[hi[i]] = hv[i] * inv;
        return 1.0f;
    }
    for (int i = 0; i < m; i++) dz[i] = hv[i];
    al_error e = {0};
    if (al_norm_forward(&v->norm, dz, m, dp, &e)) {
        for (int j = 0; j < n; j++) w[j] = NAN;
        return 1.0f;
    }
    for (int i = 0; i < m; i++) w[hi[i]] = (float)dp[i];
    return 1.0f;
}
