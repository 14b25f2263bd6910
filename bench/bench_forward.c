/* bench_forward.c: seconds per GPT-2 forward with every head's attention weights streamed to
 * a consumer that touches them, side by side in one run with PyTorch CPU (Debian's
 * python3-torch running bench/forward_torch.py, same threads, explicit attention weights) and
 * a straightforward llm.c-style loop implementation (bench/forward_loops.c).
 *
 * usage: bench_forward [--threads 2] [--T 1024] [--reps 3] [--model PATH] [--no-torch]
 *                      [--no-loops] [--loops-reps 1] [--ab R] [--contention R]
 * --ab R: R rounds of (forward at the best level, at avx2, its matmuls through our tiles and
 * through OpenBLAS's own threads; the matmuls' CPU seconds too), medians and per-round ratios.
 * --contention R: R rounds of (attnlim quiet, beside a forked busy loop, PyTorch the same),
 * medians of --reps forwards.
 * Without --model, a random GPT-2 124M-shape model (12 layers, 12 heads, 768 channels, 1024
 * positions, 50257 tokens) is built in memory in llm.c's layout, which both C implementations
 * read. Not run by the tests.
 *
 * On a machine shared with other work, run with OMP_WAIT_POLICY=passive: OpenMP threads that
 * spin at a barrier while their partner is descheduled steal its core (measured here with
 * 2 threads under a load of ~4: 4.3 s active vs 3.4 s passive per forward). CPU time is
 * printed beside wall time because it is less disturbed by other load. */
#include "forward_loops.c"

#include "model.h"
#include "touch.h"
#include "ops.h"
#include "cpu.h"

#include <cblas.h>
#include <signal.h>
#include <stdio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

/* ---- a random 124M-shape model in memory ---------------------------------------------------- */

static al_model *build_random_gpt2(int L, int H, int C, int n_ctx, int V, uint64_t seed) {
    al__gpt2 *g = calloc(1, sizeof *g);
    g->n_layer = L, g->n_head = H, g->d_model = C, g->n_ctx = n_ctx, g->vocab_size = V;
    g->padded_vocab = V, g->out_in = 1;
    size_t per_layer = (size_t)12 * C * C + 13 * (size_t)C;
    size_t total = (size_t)V * C + (size_t)n_ctx * C + L * per_layer + 2 * (size_t)C;
    g->arena = malloc(total * sizeof(float));
    g->layers = calloc((size_t)L, sizeof *g->layers);
    float *p = g->arena;
    al__rng r;
    al__rng_seed(&r, seed);
#define TAKE(dst, n, kind)                                                                         \
    do {                                                                                           \
        float *q_ = p;                                                                             \
        for (size_t i_ = 0; i_ < (size_t)(n); i_++)                                                \
            q_[i_] = kind == 0 ? (float)(0.07 * (al__rng_uniform(&r) - 0.5))                       \
                               : (kind == 1 ? 1.0f : 0.0f);                                        \
        (dst) = q_;                                                                                \
        p += (n);                                                                                  \
    } while (0)
    TAKE(g->wte, (size_t)V * C, 0);
    TAKE(g->wpe, (size_t)n_ctx * C, 0);
    for (int l = 0; l < L; l++) {
        al__gpt2_layer *w = &g->layers[l];
        TAKE(w->ln1_w, C, 1);
        TAKE(w->ln1_b, C, 2);
        TAKE(w->attn_w, (size_t)3 * C * C, 0);
        TAKE(w->attn_b, 3 * C, 0);
        TAKE(w->proj_w, (size_t)C * C, 0);
        TAKE(w->proj_b, C, 0);
        TAKE(w->ln2_w, C, 1);
        TAKE(w->ln2_b, C, 2);
        TAKE(w->fc_w, (size_t)4 * C * C, 0);
        TAKE(w->fc_b, 4 * C, 0);
        TAKE(w->fcproj_w, (size_t)4 * C * C, 0);
        TAKE(w->fcproj_b, C, 0);
    }
    TAKE(g->lnf_w, C, 1);
    TAKE(g->lnf_b, C, 2);
#undef TAKE
    al_model *m = calloc(1, sizeof *m);
    m->vt = &al__gpt2_vtable;
    m->impl = g;
    al_model_info *in = &m->info;
    snprintf(in->family, sizeof in->family, "gpt2");
    snprintf(in->name, sizeof in->name, "random-%dL-%dH-%dC", L, H, C);
    snprintf(in->path, sizeof in->path, "<memory>");
    in->n_layer = L, in->n_head = H, in->n_kv_head = H, in->d_model = C, in->d_head = C / H;
    in->d_ff = 4 * C, in->n_ctx = n_ctx, in->vocab_size = V, in->causal = 1;
    return m;
}

/* ---- consumers: touch every attention weight (touch.h; the loops get the same) ------------------
 */

static void touch_loops(const float *att, int layer, int H, int T, void *user) {
    (void)layer;
    touch *s = user;
    size_t n = (size_t)T * T;
    double total = 0.0;
#pragma omp parallel for reduction(+ : total) schedule(static)
    for (int h = 0; h < H; h++) total += touch_sum(att + h * n, n);
    s->sum += total;
    s->heads += H;
}

/* CPU seconds of the whole process (all threads): a measure less disturbed by other load */
static double cpu_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* ---- --ab and --contention: paired rounds, ratios (a loaded machine: see docs/benchmarks.md) ---
 */

/* n floats, written, as the forward's activations are (NULL when out of memory): calloc's
 * untouched pages all map the one zero page, which cost our SGEMM (A read in place) ~18% more
 * CPU and OpenBLAS (A packed) nothing (docs/benchmarks.md, session 25, s25-thr) */
static float *activations(size_t n) {
    float *x = malloc(n * sizeof *x);
    for (size_t i = 0; x && i < n; i++) x[i] = 0.01f * (float)(i % 97) - 0.48f;
    return x;
}

/* one forward with the capture at level isa: wall seconds */
static double fwd_once(al_model *m, const int32_t *tok, int T, al_capture_request *req,
                       float *final, al__cpu_isa isa) {
    al_error err = {0};
    al__cpu_force(isa);
    double s = al__now();
    al_model_forward(m, tok, T, req, NULL, final, &err);
    double e = al__now() - s;
    al__cpu_force((al__cpu_isa)-1);
    return e;
}

/* the forward's four matmuls per layer: through al__matmul_nt (our tiles over single-threaded
 * OpenBLAS, blas 0) or one cblas_sgemm each with OpenBLAS's own threads (blas = threads): wall
 * seconds, and the process's CPU seconds in *cpu (all threads; OpenBLAS's include their spinning,
 * ours under OMP_WAIT_POLICY=PASSIVE not their sleeping: ours' CPU / wall below the thread count
 * is time a thread waited, for a wake-up or at the end of a product) */
static double mm_once(const al_model *m, float *xa, float *ya, int T, int blas, double *cpu) {
    const al__gpt2 *g = m->impl;
    const int C = g->d_model;
    if (blas) openblas_set_num_threads(blas);
    double s = al__now(), c = cpu_now();
    for (int l = 0; l < g->n_layer; l++) {
        const al__gpt2_layer *w = &g->layers[l];
        const float *W[4] = {w->attn_w, w->proj_w, w->fc_w, w->fcproj_w};
        const int K[4] = {C, C, C, 4 * C}, N[4] = {3 * C, C, 4 * C, C};
        for (int i = 0; i < 4; i++)
            if (blas)
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, N[i], K[i], 1.0f, xa, K[i],
                            W[i], K[i], 0.0f, ya, N[i]);
            else
                al__matmul_nt(ya, xa, W[i], NULL, T, K[i], N[i]);
    }
    double e = al__now() - s;
    *cpu = cpu_now() - c;
    if (blas) openblas_set_num_threads(1);
    return e;
}

static double median(double *x, int n) {
    qsort(x, (size_t)n, sizeof *x, cmp_double);
    return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

/* --ab R: R rounds of [forward avx512, forward avx2, matmuls (ours), matmuls (OpenBLAS
 * threads)], wall seconds each; the medians and the medians of the per-round ratios */
static void ab_rounds(al_model *m, const int32_t *tok, int T, al_capture_request *req, float *final,
                      int threads, int R) {
    const int C = ((const al__gpt2 *)m->impl)->d_model;
    float *xa = activations((size_t)T * 4 * C), *ya = calloc((size_t)T * 4 * C, 4);
    double *t = calloc((size_t)R * 8, sizeof *t); /* t[k * R + r] */
    if (!xa || !ya || !t) {
        fprintf(stderr, "bench_forward: out of memory\n");
        free(t), free(xa), free(ya);
        return;
    }
    const al__cpu_isa top = al__cpu_detect();
    for (int r = 0; r < R; r++) {
        t[0 * R + r] = fwd_once(m, tok, T, req, final, top);
        t[1 * R + r] = fwd_once(m, tok, T, req, final, AL__CPU_AVX2);
        t[2 * R + r] = mm_once(m, xa, ya, T, 0, &t[6 * R + r]);
        t[3 * R + r] = mm_once(m, xa, ya, T, threads, &t[7 * R + r]);
        t[4 * R + r] = t[3 * R + r] / t[0 * R + r]; /* floor / forward */
        t[5 * R + r] = t[1 * R + r] / t[0 * R + r]; /* avx2 / best */
        printf("round %d: forward %s %.3f s, avx2 %.3f s | matmuls ours %.3f s, OpenBLAS "
               "threaded %.3f s (CPU s: ours %.3f, OpenBLAS %.3f)\n",
               r, al__cpu_name(top), t[r], t[R + r], t[2 * R + r], t[3 * R + r], t[6 * R + r],
               t[7 * R + r]);
        fflush(stdout);
    }
    const char *names[8] = {"forward (best level)",
                            "forward (avx2)",
                            "matmuls (ours)",
                            "matmuls (OpenBLAS threads)",
                            "ratio matmuls(OpenBLAS)/forward",
                            "ratio forward avx2/best",
                            "matmuls (ours) CPU s",
                            "matmuls (OpenBLAS threads) CPU s"};
    for (int k = 0; k < 8; k++) printf("median %-34s %.3f\n", names[k], median(t + k * R, R));
    free(t), free(xa), free(ya);
}

/* a competing single-threaded process (a busy loop, pinned nowhere): its pid */
static pid_t spin_start(void) {
    pid_t pid = fork();
    if (pid == 0)
        for (volatile unsigned long i = 0;; i++) {
        }
    return pid;
}
static void spin_stop(pid_t pid) {
    if (pid > 0) kill(pid, SIGKILL), waitpid(pid, NULL, 0);
}

/* PyTorch's median of reps forwards (bench/forward_torch.py), 0 if it did not run */
static double torch_run(const char *dir, int threads, int T, const al_model_info *in, int reps) {
    char cmd[8192], line[8192] = {0};
    snprintf(cmd, sizeof cmd,
             "/usr/bin/python3 %s/forward_torch.py --threads %d --T %d --reps %d --layers %d "
             "--heads %d --embd %d --vocab %d",
             dir, threads, T, reps, in->n_layer, in->n_head, in->d_model, in->vocab_size);
    FILE *p = popen(cmd, "r");
    double v = 0;
    if (p && fgets(line, sizeof line, p)) {
        char *med = strstr(line, "\"median\": ");
        if (med) v = atof(med + 10);
    }
    if (p) pclose(p);
    return v;
}

/* --contention R: R rounds of [attnlim quiet, attnlim beside a busy process, and the same for
 * PyTorch (do_torch)], each the median of reps forwards; the slowdowns */
static void contention_rounds(al_model *m, const int32_t *tok, int T, al_capture_request *req,
                              float *final, int threads, int R, int reps, int do_torch,
                              const char *dir) {
    double *t = calloc((size_t)R * 6, sizeof *t), *one = calloc((size_t)reps, sizeof *one);
    const al__cpu_isa top = al__cpu_detect();
    for (int r = 0; r < R; r++) {
        for (int busy = 0; busy < 2; busy++) {
            pid_t pid = busy ? spin_start() : 0;
            for (int i = 0; i < reps; i++) one[i] = fwd_once(m, tok, T, req, final, top);
            t[busy * R + r] = median(one, reps);
            if (do_torch)
                t[(2 + busy) * R + r] = torch_run(dir, threads, T, al_model_get_info(m), reps);
            spin_stop(pid);
        }
        t[4 * R + r] = t[R + r] / t[r];
        t[5 * R + r] = t[2 * R + r] > 0 ? t[3 * R + r] / t[2 * R + r] : 0;
        printf("round %d: attnlim quiet %.3f s, busy %.3f s (%.2fx) | pytorch quiet %.3f s, busy "
               "%.3f s (%.2fx)\n",
               r, t[r], t[R + r], t[4 * R + r], t[2 * R + r], t[3 * R + r], t[5 * R + r]);
        fflush(stdout);
    }
    const char *names[8] = {"attnlim quiet", "attnlim busy",     "pytorch quiet",
                            "pytorch busy",  "attnlim slowdown", "pytorch slowdown"};
    for (int k = 0; k < 6; k++) printf("median %-18s %.3f\n", names[k], median(t + k * R, R));
    free(t), free(one);
}

/* ---- main --------------------------------------------------------------------------------------
 */

int main(int argc, char **argv) {
    int threads = 2, T = 1024, reps = 3, loops_reps = 1, do_torch = 1, do_loops = 1, ab = 0,
        contention = 0;
    const char *model_path = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--T") && i + 1 < argc)
            T = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--loops-reps") && i + 1 < argc)
            loops_reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--model") && i + 1 < argc)
            model_path = argv[++i];
        else if (!strcmp(argv[i], "--ab") && i + 1 < argc)
            ab = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--contention") && i + 1 < argc)
            contention = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--no-torch"))
            do_torch = 0;
        else if (!strcmp(argv[i], "--no-loops"))
            do_loops = 0;
        else {
            fprintf(stderr,
                    "usage: bench_forward [--threads N] [--T T] [--reps R] [--model PATH] "
                    "[--no-torch] [--no-loops] [--loops-reps R] [--ab R] [--contention R]\n");
            return 2;
        }
    }
    if (reps < 1 || T < 1 || threads < 1) return 2;
    al__set_threads(threads);
    al_error err = {0};
    al_model *m = NULL;
    double t0 = al__now();
    if (model_path) {
        if (al_model_open(model_path, &m, &err)) {
            fprintf(stderr, "bench_forward: %s\n", err.msg);
            return 1;
        }
    } else {
        m = build_random_gpt2(12, 12, 768, 1024, 50257, 1);
    }
    const al_model_info *in = al_model_get_info(m);
    if (T > in->n_ctx) T = in->n_ctx;
    const int L = in->n_layer, H = in->n_head, C = in->d_model, D = C / H;
    printf("model %s (%d layers, %d heads, %d channels), built/loaded in %.1f s\n", in->name, L, H,
           C, al__now() - t0);
    printf("T = %d, threads = %d, consumer touches the weights of all %d heads\n", T, threads,
           L * H);
    double mm_flop = 2.0 * T * L * (12.0 * C * C);
    double att_flop = 2.0 * 2.0 * L * H * D * ((double)T * (T + 1) / 2);
    printf("FLOP per forward: matmuls %.1f G + attention (causal) %.1f G = %.1f G\n", mm_flop / 1e9,
           att_flop / 1e9, (mm_flop + att_flop) / 1e9);

    int32_t *tokens = malloc((size_t)T * sizeof *tokens);
    al__rng r;
    al__rng_seed(&r, 42);
    for (int t = 0; t < T; t++) tokens[t] = (int32_t)(al__rng_next(&r) % (uint64_t)in->vocab_size);
    float *final = malloc((size_t)T * C * sizeof(float)); /* [T, C] */

    /* attnlim */
    touch tc = {0};
    al_capture_request req = {.what = AL_CAP_WEIGHTS, .fn = touch_capture, .user = &tc};
    double *ts = calloc((size_t)reps, sizeof *ts), *cs = calloc((size_t)reps, sizeof *cs);
    if (al_model_forward(m, tokens, T, &req, NULL, final, &err)) { /* warm-up */
        fprintf(stderr, "bench_forward: %s\n", err.msg);
        return 1;
    }
    if (ab || contention) { /* paired rounds only */
        char dir[4096];
        snprintf(dir, sizeof dir, "%s", __FILE__);
        char *slash = strrchr(dir, '/');
        if (slash) *slash = 0;
        if (ab) ab_rounds(m, tokens, T, &req, final, threads, ab);
        if (contention)
            contention_rounds(m, tokens, T, &req, final, threads, contention, reps, do_torch, dir);
        free(ts), free(cs), free(final), free(tokens);
        al_model_free(m);
        return 0;
    }
    for (int i = 0; i < reps; i++) {
        double s = al__now(), c = cpu_now();
        al_model_forward(m, tokens, T, &req, NULL, final, &err);
        ts[i] = al__now() - s;
        cs[i] = cpu_now() - c;
    }
    qsort(ts, (size_t)reps, sizeof *ts, cmp_double);
    qsort(cs, (size_t)reps, sizeof *cs, cmp_double);
    double ours = ts[reps / 2];
    printf("attnlim   : CPU time per forward: median %.3f s, min %.3f s (all threads; / %d "
           "threads = %.3f s)\n",
           cs[reps / 2], cs[0], threads, cs[0] / threads);
    printf("attnlim   : median %.3f s, min %.3f s per forward (%d reps; %.1f GFLOP/s); "
           "heads consumed per forward %ld\n",
           ours, ts[0], reps, (mm_flop + att_flop) / ours / 1e9, tc.heads / (reps + 1));
    double nocap;
    {
        double s = al__now();
        al_model_forward(m, tokens, T, NULL, NULL, final, &err);
        nocap = al__now() - s;
        printf("attnlim   : %.3f s without capture (one run)\n", nocap);
    }

    /* the matmuls alone (the forward's four per layer, same layout and threads) */
    {
        const al__gpt2 *g = m->impl;
        size_t big = (size_t)T * 4 * C;
        float *xa = activations(big), *ya = calloc(big, sizeof(float));
        double best = 1e30;
        for (int rep = 0; rep < 2 && xa && ya; rep++) {
            double s = al__now();
            for (int l = 0; l < L; l++) {
                const al__gpt2_layer *w = &g->layers[l];
                al__matmul_nt(ya, xa, w->attn_w, w->attn_b, T, C, 3 * C);
                al__matmul_nt(ya, xa, w->proj_w, w->proj_b, T, C, C);
                al__matmul_nt(ya, xa, w->fc_w, w->fc_b, T, C, 4 * C);
                al__matmul_nt(ya, xa, w->fcproj_w, w->fcproj_b, T, 4 * C, C);
            }
            double e = al__now() - s;
            best = e < best ? e : best;
        }
        printf("matmuls   : %.3f s per forward's worth (best of 2): %.1f GFLOP/s\n", best,
               mm_flop / best / 1e9);
        free(xa);
        free(ya);
    }

    /* loops */
    double loops = 0;
    if (do_loops && in->family[0] && ((al__gpt2 *)m->impl)->out_in) {
        loops_acts la;
        loops_build(&la, T, C, H);
        float *final2 = malloc((size_t)T * C * sizeof(float));
        touch tl = {0};
        double best = 1e30;
        for (int i = 0; i < loops_reps; i++) {
            double s = al__now();
            loops_forward(m->impl, tokens, T, &la, touch_loops, &tl, final2);
            double e = al__now() - s;
            best = e < best ? e : best;
        }
        loops = best;
        double md = 0;
        for (size_t i = 0; i < (size_t)T * C; i++) {
            double d = fabs((double) final[i] - final2[i]);
            md = d > md ? d : md;
        }
        printf("loops     : %.3f s per forward (best of %d); max |final hidden diff| vs attnlim "
               "%.2e\n",
               loops, loops_reps, md);
        free(final2);
        loops_free(&la);
    } else if (do_loops) {
        printf("loops     : skipped (needs the llm.c layout: run without --model)\n");
    }

    /* PyTorch */
    double torch = 0, torch_cpu = 0;
    if (do_torch) {
        /* forward_torch.py sits beside this file (CMake compiles it by absolute path) */
        char dir[4096];
        snprintf(dir, sizeof dir, "%s", __FILE__);
        char *slash = strrchr(dir, '/');
        if (slash)
            *slash = 0;
        else
            snprintf(dir, sizeof dir, "bench");
        char cmd[8192];
        snprintf(cmd, sizeof cmd,
                 "/usr/bin/python3 %s/forward_torch.py --threads %d --T %d --reps %d "
                 "--layers %d --heads %d --embd %d --vocab %d",
                 dir, threads, T, reps, L, H, C, in->vocab_size);
        FILE *p = popen(cmd, "r");
        char line[8192] = {0};
        if (p && fgets(line, sizeof line, p)) {
            char *med = strstr(line, "\"median\": ");
            if (med) torch = atof(med + 10);
            char *cm = strstr(line, "\"cpu_min\": ");
            if (cm) torch_cpu = atof(cm + 11);
        }
        if (p) pclose(p);
        if (torch > 0)
            printf("pytorch   : median %.3f s per forward (%s)\n", torch, line);
        else
            printf("pytorch   : failed to run: %s\n", cmd);
    }

    printf("\nsummary (T=%d, %d threads): attnlim %.3f s", T, threads, ours);
    if (torch > 0) printf(" | pytorch %.3f s (%.2fx)", torch, torch / ours);
    if (torch_cpu > 0)
        printf(" | CPU time (min): attnlim %.3f s, pytorch %.3f s (%.2fx)", cs[0], torch_cpu,
               torch_cpu / cs[0]);
    if (loops > 0) printf(" | loops %.3f s (%.2fx)", loops, loops / ours);
    printf("\n");
    free(ts);
    free(cs);
    free(final);
    free(tokens);
    al_model_free(m);
    return 0;
}
