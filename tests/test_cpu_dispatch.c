/* test_cpu_dispatch.c: the run-time choice of kernels (src/base/cpu.h). The level picked is the
 * best the CPU has (checked against cpuid through the compiler's own __builtin_cpu_supports),
 * ATTNLIM_CPU lowers it and never raises it, and every variant the CPU can run gives the results
 * of the scalar path (within float tolerance: the vector paths fuse multiply-adds) and of a
 * double-precision reference. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"
#include "ops.h"

static void test_detect(void **state) {
    (void)state;
    __builtin_cpu_init();
    int avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    int avx512 = avx2 && __builtin_cpu_supports("avx512f");
    al__cpu_isa want = avx512 ? AL__CPU_AVX512 : (avx2 ? AL__CPU_AVX2 : AL__CPU_SCALAR);
    assert_int_equal(al__cpu_detect(), want);
    unsetenv("ATTNLIM_CPU");
    assert_int_equal(al__cpu_force((al__cpu_isa)-1), want); /* no variable: the best */
    print_message("this CPU: %s\n", al__cpu_name(want));
}

static void test_env(void **state) {
    (void)state;
    al__cpu_isa have = al__cpu_detect();
    al_error err = {0};
    for (int i = 0; i < 3; i++) {
        setenv("ATTNLIM_CPU", al__cpu_name((al__cpu_isa)i), 1);
        al__cpu_isa got = al__cpu_force((al__cpu_isa)-1);
        assert_int_equal(got, i <= (int)have ? i : (int)have); /* lowered, never raised */
        assert_int_equal(al__cpu_check_env(&err) != 0, i > (int)have);
    }
    setenv("ATTNLIM_CPU", "sse9", 1);
    assert_int_equal(al__cpu_force((al__cpu_isa)-1), have);
    assert_int_not_equal(al__cpu_check_env(&err), 0);
    assert_non_null(strstr(err.msg, "'sse9' is not one of scalar, avx2, avx512"));
    unsetenv("ATTNLIM_CPU");
    assert_int_equal(al__cpu_check_env(&err), 0);
    al__cpu_force((al__cpu_isa)-1);
}

static float *randv(al__rng *r, size_t n, double scale) {
    float *x = malloc(n * sizeof *x);
    assert_non_null(x);
    for (size_t i = 0; i < n; i++) x[i] = (float)(scale * al__rng_normal(r));
    return x;
}

/* |a - b| <= atol + rtol |b| for every element */
static void assert_near(const float *a, const float *b, size_t n, double atol, double rtol,
                        const char *what, const char *isa) {
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (!(d <= atol + rtol * fabs((double)b[i])))
            fail_msg("%s (%s vs scalar): element %zu: %.9g vs %.9g", what, isa, i, a[i], b[i]);
    }
}

enum { N_PT = 1000 + 13 }; /* not a multiple of 8 or 16: the tails too */

/* the element-wise kernels and softmax at level isa, into out[5][N_PT] */
static void run_pointwise(al__cpu_isa isa, const float *x, const float *up, float *out) {
    assert_int_equal(al__cpu_force(isa), isa);
    float *o = out;
    memcpy(o, x, N_PT * sizeof *o), al__exp_inplace(o, N_PT), o += N_PT;
    memcpy(o, x, N_PT * sizeof *o), al__gelu_tanh(o, N_PT), o += N_PT;
    memcpy(o, x, N_PT * sizeof *o), al__silu_mul(o, up, N_PT), o += N_PT;
    al__softmax_row(o, x, N_PT), o += N_PT;
    al__softmax_row(o, x, 7); /* shorter than one vector */
}

static void test_pointwise_variants(void **state) {
    (void)state;
    al__rng r;
    al__rng_seed(&r, 12);
    float *x = randv(&r, N_PT, 6.0), *up = randv(&r, N_PT, 1.0);
    float *ref = malloc(5 * N_PT * sizeof *ref), *got = malloc(5 * N_PT * sizeof *got);
    run_pointwise(AL__CPU_SCALAR, x, up, ref);
    /* the scalar path against double precision */
    double s = 0.0, mx = -INFINITY;
    for (int i = 0; i < N_PT; i++) mx = x[i] > mx ? x[i] : mx;
    for (int i = 0; i < N_PT; i++) s += exp(x[i] - mx);
    for (int i = 0; i < N_PT; i++) {
        double e = exp(x[i]), v = x[i];
        double gelu = 0.5 * v * (1 + tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
        assert_true(fabs(ref[i] - e) <= 1e-6 * e);
        assert_true(fabs(ref[N_PT + i] - gelu) <= 1e-5 * (1 + fabs(gelu)));
        assert_true(fabs(ref[2 * N_PT + i] - v / (1 + exp(-v)) * up[i]) <= 1e-5 * (1 + fabs(v)));
        assert_true(fabs(ref[3 * N_PT + i] - exp(x[i] - mx) / s) <=
                    1e-6 * exp(x[i] - mx) / s + 1e-12);
    }
    for (int isa = AL__CPU_AVX2; isa <= (int)al__cpu_detect(); isa++) {
        run_pointwise((al__cpu_isa)isa, x, up, got);
        const char *name = al__cpu_name((al__cpu_isa)isa);
        assert_near(got, ref, N_PT, 0, 1e-6, "exp", name);
        assert_near(got + N_PT, ref + N_PT, N_PT, 1e-7, 1e-6, "gelu_tanh", name);
        assert_near(got + 2 * N_PT, ref + 2 * N_PT, N_PT, 1e-7, 1e-6, "silu_mul", name);
        assert_near(got + 3 * N_PT, ref + 3 * N_PT, N_PT, 1e-12, 1e-6, "softmax", name);
        assert_near(got + 4 * N_PT, ref + 4 * N_PT, 7, 1e-12, 1e-6, "softmax (7)", name);
        print_message("%s: element-wise kernels and softmax agree with scalar\n", name);
    }
    if (al__cpu_detect() == AL__CPU_SCALAR) print_message("no vector level on this CPU\n");
    al__cpu_force((al__cpu_isa)-1);
    free(x), free(up), free(ref), free(got);
}

/* attention at level isa: out [T, H*D] and the captured weights of every head [H, T, T] */
typedef struct cap_copy {
    float *w;
    size_t n;
} cap_copy;
static int grab(void *user, const al_capture *c, al_error *err) {
    (void)err;
    cap_copy *cc = user;
    memcpy(cc->w, c->weights, cc->n * sizeof(float));
    return 0;
}
static void run_attention(al__cpu_isa isa, int T, int H, int G, int D, int causal, const float *q,
                          const float *k, const float *v, float *out, float *w) {
    assert_int_equal(al__cpu_force(isa), isa);
    cap_copy cc = {w, (size_t)H * T * T};
    al_capture_request req = {.what = AL_CAP_WEIGHTS, .fn = grab, .user = &cc};
    al__attn a = {.layer = 0,
                  .T = T,
                  .n_head = H,
                  .n_kv_head = G,
                  .d_head = D,
                  .d_model = H * D,
                  .causal = causal,
                  .q = q,
                  .q_stride = (size_t)H * D,
                  .k = k,
                  .k_stride = (size_t)G * D,
                  .v = v,
                  .v_stride = (size_t)G * D,
                  .out = out,
                  .req = &req};
    al_error err = {0};
    assert_int_equal(al__attention(&a, &err), 0);
}

static void test_attention_variants(void **state) {
    (void)state;
    /* tails of the 6-row, 16- and 32-column tiles (AVX2, AVX-512): T and D not multiples of
     * them, one panel (D 16), two, and two plus a lone one (D 80) */
    const int shapes[][5] = {{77, 4, 2, 24, 1}, {130, 2, 2, 64, 0}, {5, 3, 1, 7, 1},
                             {70, 2, 1, 80, 1}, {47, 1, 1, 16, 0},  {101, 2, 2, 40, 0}};
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        int T = shapes[s][0], H = shapes[s][1], G = shapes[s][2], D = shapes[s][3];
        int causal = shapes[s][4];
        al__rng r;
        al__rng_seed(&r, 100 + s);
        float *q = randv(&r, (size_t)T * H * D, 1.0), *k = randv(&r, (size_t)T * G * D, 1.0);
        float *v = randv(&r, (size_t)T * G * D, 1.0);
        size_t no = (size_t)T * H * D, nw = (size_t)H * T * T;
        float *o0 = malloc(no * 4), *w0 = malloc(nw * 4), *o1 = malloc(no * 4),
              *w1 = malloc(nw * 4);
        run_attention(AL__CPU_SCALAR, T, H, G, D, causal, q, k, v, o0, w0);
        for (int isa = AL__CPU_AVX2; isa <= (int)al__cpu_detect(); isa++) {
            run_attention((al__cpu_isa)isa, T, H, G, D, causal, q, k, v, o1, w1);
            const char *name = al__cpu_name((al__cpu_isa)isa);
            assert_near(o1, o0, no, 1e-5, 1e-4, "attention output", name);
            assert_near(w1, w0, nw, 1e-7, 1e-4, "attention weights", name);
            print_message("%s: attention T %d H %d G %d D %d causal %d agrees with scalar\n", name,
                          T, H, G, D, causal);
        }
        free(q), free(k), free(v), free(o0), free(w0), free(o1), free(w1);
    }
    if (al__cpu_detect() < AL__CPU_AVX512)
        print_message("avx512 attention kernels: compiled, not run (this CPU has no AVX-512 F)\n");
    al__cpu_force((al__cpu_isa)-1);
}

/* A random causal head: x[L, D] Gaussian, z[L, L] logits 2 N(0, 1), w[L, L] their causal
 * softmax rows (zero above the diagonal). */
static void random_head(al__rng *r, int L, int D, double *x, double *z, double *w) {
    for (int i = 0; i < L * D; i++) x[i] = al__rng_normal(r);
    for (int t = 0; t < L; t++) {
        double s = 0;
        for (int j = 0; j < L; j++) z[t * L + j] = 2 * al__rng_normal(r);
        for (int j = 0; j <= t; j++) s += (w[t * L + j] = exp(z[t * L + j]));
        for (int j = 0; j < L; j++) w[t * L + j] = j <= t ? w[t * L + j] / s : 0;
    }
}

/* The multi-versioned files (src/base/mv.h): al_head_metrics, al_norm_forward and
 * al_norm_spectral_norm, al_head_sensitivity at every level against the baseline copy. */
static void test_multiversioned_math(void **state) {
    (void)state;
    enum { L = 96, D = 16, NT = 3 };
    al__rng r;
    al__rng_seed(&r, 77);
    double *w = malloc(sizeof(double) * L * L), *x = malloc(sizeof(double) * L * D);
    double *z = malloc(sizeof(double) * L * L);
    random_head(&r, L, D, x, z, w);
    const int top[NT] = {1, 4, 16};
    al_metrics_opts o = {.top_n = top, .n_top = NT, .distance = 1, .separability = 1, .causal = 1};
    double temps[2] = {0.5, 2.0}, eps[2] = {1e-3, 1e-1};
    al_norm nm = {.kind = AL_NORM_ENTMAX15, .temperature = 1, .alpha = 1.5, .ssmax_s = 0.43};
    al_norm sm = {.kind = AL_NORM_SOFTMAX, .temperature = 1, .alpha = 1.5, .ssmax_s = 0.43};
    al_topn_stats ref[NT], got[NT];
    double pref[L], pgot[L], sref, sgot, fref[4], fgot[4], spref[2], spgot[2];
    al_error err = {0};
    for (int isa = AL__CPU_SCALAR; isa <= (int)al__cpu_detect(); isa++) {
        assert_int_equal(al__cpu_force((al__cpu_isa)isa), isa);
        al_topn_stats *o_ = isa ? got : ref;
        double *p_ = isa ? pgot : pref, *s_ = isa ? &sgot : &sref, *f_ = isa ? fgot : fref;
        double *sp_ = isa ? spgot : spref;
        assert_int_equal(al_head_metrics(w, x, L, D, &o, o_, NULL, NULL, &err), 0);
        assert_int_equal(al_norm_forward(&nm, z + (L - 1) * L, L, p_, &err), 0);
        assert_int_equal(al_norm_spectral_norm(&sm, z + (L - 1) * L, L, s_, &err), 0);
        assert_int_equal(
            al_head_sensitivity(z, L, 1, &sm, temps, 2, eps, 2, 5, 0, 0, f_, sp_, &err), 0);
        if (!isa) continue;
        const char *name = al__cpu_name((al__cpu_isa)isa);
        for (int k = 0; k < NT; k++) {
            const double a[5] = {got[k].dtilde, got[k].dmax, got[k].E, got[k].ns_ratio,
                                 got[k].ns_lower};
            const double b[5] = {ref[k].dtilde, ref[k].dmax, ref[k].E, ref[k].ns_ratio,
                                 ref[k].ns_lower};
            for (int q = 0; q < 5; q++)
                if (!(fabs(a[q] - b[q]) <= 1e-10 * (1 + fabs(b[q]))))
                    fail_msg("al_head_metrics N=%d field %d (%s vs scalar): %.17g vs %.17g", top[k],
                             q, name, a[q], b[q]);
        }
        for (int j = 0; j < L; j++) assert_true(fabs(pgot[j] - pref[j]) <= 1e-12);
        assert_true(fabs(sgot - sref) <= 1e-12 * (1 + fabs(sref)));
        for (int q = 0; q < 4; q++)
            assert_true(fabs(fgot[q] - fref[q]) <= 1e-9 * (1 + fabs(fref[q])));
        for (int q = 0; q < 2; q++)
            assert_true(fabs(spgot[q] - spref[q]) <= 1e-9 * (1 + fabs(spref[q])));
        print_message("%s: metrics, entmax15, spectral norm, Algorithm 5 agree with scalar\n",
                      name);
    }
    al__cpu_force((al__cpu_isa)-1);
    free(w), free(x), free(z);
}

/* The readings module (src/math/readings.c, multi-versioned too): every distance reading with its
 * analytic, Monte-Carlo and exact expectations, at every level the CPU has against the baseline
 * copy. The AVX-512 copy is built on every x86-64 host and runs only where the CPU has AVX-512
 * (ATTNLIM_CPU lowers the level, never raises it). */
static void test_multiversioned_readings(void **state) {
    (void)state;
    enum { L = 40, D = 12, NT = 4 };
    al__rng r;
    al__rng_seed(&r, 78);
    double *w = malloc(sizeof(double) * L * L), *x = malloc(sizeof(double) * L * D);
    double *z = malloc(sizeof(double) * L * L);
    random_head(&r, L, D, x, z, w);
    const int top[NT] = {1, 2, 3, 39};
    al_reading_stats ref[3][NT], got[NT];
    al_error err = {0};
    for (int isa = AL__CPU_SCALAR; isa <= (int)al__cpu_detect(); isa++) {
        assert_int_equal(al__cpu_force((al__cpu_isa)isa), isa);
        for (int kind = 0; kind < 3; kind++) {
            al_reading_opts o = {.distance = (al_distance_kind)kind,
                                 .top_n = top,
                                 .n_top = NT,
                                 .mc_samples = 5,
                                 .mc_seed = 9,
                                 .exact = 1,
                                 .exact_max = 10000,
                                 .causal = 1};
            al_reading_stats *o_ = isa ? got : ref[kind];
            assert_int_equal(al_head_reading(w, x, L, D, &o, o_, &err), 0);
            if (!isa) continue;
            for (int k = 0; k < NT; k++) {
                const double a[5] = {got[k].dist, got[k].analytic, got[k].mc, got[k].mc_se,
                                     got[k].exact};
                const double b[5] = {ref[kind][k].dist, ref[kind][k].analytic, ref[kind][k].mc,
                                     ref[kind][k].mc_se, ref[kind][k].exact};
                for (int q = 0; q < 5; q++)
                    if (!(fabs(a[q] - b[q]) <= 1e-11 * (1 + fabs(b[q]))) ||
                        isnan(a[q]) != isnan(b[q]))
                        fail_msg("al_head_reading %s N=%d field %d (%s vs scalar): %.17g vs %.17g",
                                 al_distance_name((al_distance_kind)kind), top[k], q,
                                 al__cpu_name((al__cpu_isa)isa), a[q], b[q]);
            }
        }
        if (isa)
            print_message("%s: the three distance readings and their expectations agree with "
                          "scalar\n",
                          al__cpu_name((al__cpu_isa)isa));
    }
    if (al__cpu_detect() < AL__CPU_AVX512)
        print_message("avx512: built, not run (this CPU has no AVX-512)\n");
    al__cpu_force((al__cpu_isa)-1);
    free(w), free(x), free(z);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_detect),
        cmocka_unit_test(test_env),
        cmocka_unit_test(test_pointwise_variants),
        cmocka_unit_test(test_attention_variants),
        cmocka_unit_test(test_multiversioned_math),
        cmocka_unit_test(test_multiversioned_readings),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
