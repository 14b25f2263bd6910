/* bench_topk.c: the cost of a top-k attention forward against the dense forward of the same
 * model at the same L, side by side in one run (the two interleaved rep by rep, so that load
 * from other work falls on both alike). Prints per variant the median wall and CPU seconds
 * per forward (logits included) and their ratio to dense; the target (issue 16) is a ratio of
 * at most 1.2 for k << L.
 *
 * usage: bench_topk [--model PATH|NAME] [--T 1024] [--reps 5] [--threads 2]
 *                   [--attention topk:16,topk-sqrt:1,...] [--normalizer M]
 * Default model: smollm2 (fetched into the cache on first use). Tokens: War and Peace, window 0
 * (the model's tokenizer). Not run by the tests. */
#include "model.h"
#include "ops.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static void die(const char *what, const al_error *e) {
    fprintf(stderr, "bench_topk: %s: %s\n", what, e->msg);
    exit(1);
}

int main(int argc, char **argv) {
    const char *model = "smollm2", *rules = "topk:16,topk:64,topk-sqrt:1,topk-log:4,topk-frac:0.06",
               *norm = "softmax";
    int T = 1024, reps = 5, threads = 2;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--model"))
            model = argv[i + 1];
        else if (!strcmp(argv[i], "--T"))
            T = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--reps"))
            reps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--threads"))
            threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--attention"))
            rules = argv[i + 1];
        else if (!strcmp(argv[i], "--normalizer"))
            norm = argv[i + 1];
        else {
            fprintf(stderr, "bench_topk: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if (reps < 1 || T < 2) return 2;
    al__set_threads(threads);
    al_error err = {0};
    al_model *m = NULL;
    if (al_model_open(model, &m, &err)) die(model, &err);
    const al_model_info *info = al_model_get_info(m);
    if (T > info->n_ctx) T = info->n_ctx;
    al_tokenizer *tk = NULL;
    char *text = NULL;
    size_t len = 0, n_ids = 0;
    int32_t *ids = NULL;
    if (al_corpus_load("war-and-peace", NULL, &text, &len, &err) ||
        al_model_tokenizer(m, &tk, &err) || al_tokenize(tk, text, len, 0, &ids, &n_ids, &err))
        die("tokens", &err);
    if (n_ids < (size_t)T) return 1;
    float *logits = malloc((size_t)T * info->vocab_size * sizeof(float));
    if (!logits) return 1;

    /* the variants: "dense" first (the model's own attention), then each rule of the list */
    char list[1024];
    snprintf(list, sizeof list, "dense,%s", rules);
    al_attn_variant vs[32];
    char names[32][64];
    int nv = 0;
    for (char *s = strtok(list, ","); s && nv < 32; s = strtok(NULL, ","), nv++) {
        memset(&vs[nv], 0, sizeof vs[nv]);
        if (al_attn_rule_parse(s, &vs[nv], &err) || al_attn_norm_parse(norm, &vs[nv].norm, &err))
            die(s, &err);
        snprintf(names[nv], sizeof names[nv], "%s", s);
    }
    double *wall = calloc((size_t)nv * reps, sizeof *wall),
           *cpu = calloc((size_t)nv * reps, sizeof *cpu);
    /* one warm-up forward of each (buffers grown, pages touched) */
    for (int v = 0; v < nv; v++) {
        if (al_model_set_attention(m, v ? &vs[v] : NULL, &err) ||
            al_model_forward(m, ids, T, NULL, logits, NULL, &err))
            die(names[v], &err);
    }
    for (int r = 0; r < reps; r++)
        for (int v = 0; v < nv; v++) {
            if (al_model_set_attention(m, v ? &vs[v] : NULL, &err)) die(names[v], &err);
            double w0 = al__now(), c0 = cpu_now();
            if (al_model_forward(m, ids, T, NULL, logits, NULL, &err)) die(names[v], &err);
            wall[v * reps + r] = al__now() - w0;
            cpu[v * reps + r] = cpu_now() - c0;
        }
    printf("model %s (%s, %d layers x %d heads), L = %d, %d threads, %d reps interleaved, "
           "normalizer %s\n",
           info->name, info->family, info->n_layer, info->n_head, T, threads, reps, norm);
    printf("%-20s %10s %10s %12s %12s\n", "attention", "wall s", "cpu s", "wall/dense",
           "cpu/dense");
    double w_dense = 0, c_dense = 0;
    for (int v = 0; v < nv; v++) {
        double w = median(wall + v * reps, reps), c = median(cpu + v * reps, reps);
        if (v == 0) w_dense = w, c_dense = c;
        printf("%-20s %10.3f %10.3f %12.3f %12.3f\n", names[v], w, c, w / w_dense, c / c_dense);
    }
    free(wall), free(cpu), free(logits), free(ids), free(text);
    al_tokenizer_free(tk);
    al_model_free(m);
    return 0;
}
