/* test_hooks.c: what the caller hands the library (include/attnlim.h): the progress/cancel
 * callback (a forward stopped at a given layer returns AL_E_CANCELLED and writes nothing more;
 * the callback runs on the calling thread only; head metrics stop likewise and leave out[]
 * untouched), the log callback (a model with NaN weights warns through it, not on stderr),
 * the network permission (off by default: a known model not in an empty cache is refused
 * saying why, without running pip), OpenBLAS's thread count as it was after a call, al_free
 * and the version macros. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <cblas.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "attnlim.h"

static char tmpdir[256];

static void make_model(char *dir, size_t cap, int n_layer) {
    snprintf(dir, cap, "%s/m%d", tmpdir, n_layer);
    al_gpt2_make_opts o = {.n_layer = n_layer,
                           .n_head = 2,
                           .n_embd = 16,
                           .n_ctx = 32,
                           .vocab_size = 50,
                           .seed = 7,
                           .format = AL_CKPT_SAFETENSORS};
    al_error err = {0};
    assert_int_equal(al_gpt2_make_model(&o, dir, &err), 0);
}

/* ---- progress and cancellation ---------------------------------------------------------- */

typedef struct {
    int calls, stop_at; /* stop when done == stop_at */
    int64_t last_done;
    pthread_t owner;
    int other_thread;
    char stage[32];
} prog;

static int on_progress(void *user, const char *stage, int64_t done, int64_t total) {
    prog *p = user;
    (void)total;
    p->calls++;
    p->last_done = done;
    if (!pthread_equal(pthread_self(), p->owner)) p->other_thread = 1;
    snprintf(p->stage, sizeof p->stage, "%s", stage);
    return done == p->stop_at;
}

typedef struct {
    int layers_seen[16];
} seen;

static int observer(void *user, const al_capture *cap, al_error *err) {
    (void)err;
    ((seen *)user)->layers_seen[cap->layer] = 1;
    return 0;
}

static void test_forward_stops_at_the_layer_asked(void **state) {
    (void)state;
    char dir[512];
    make_model(dir, sizeof dir, 6);
    al_model *m = NULL;
    al_error err = {0};
    assert_int_equal(al_model_open(dir, &m, &err), 0);
    int32_t tok[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    float *logits = calloc(8 * 50, sizeof(float));
    /* no callback: runs through, every layer captured */
    seen s0 = {{0}};
    al_capture_request req = {.what = AL_CAP_WEIGHTS, .fn = observer, .user = &s0};
    assert_int_equal(al_model_forward(m, tok, 8, &req, logits, NULL, &err), 0);
    for (int l = 0; l < 6; l++) assert_int_equal(s0.layers_seen[l], 1);
    /* a callback that stops at layer 3: layers 0..2 ran, nothing after, logits untouched */
    prog p = {.stop_at = 3, .owner = pthread_self()};
    seen s1 = {{0}};
    req.user = &s1;
    for (int i = 0; i < 8 * 50; i++) logits[i] = 12345.0f;
    al_set_progress(on_progress, &p);
    int rc = al_model_forward(m, tok, 8, &req, logits, NULL, &err);
    assert_int_equal(rc, AL_E_CANCELLED);
    assert_int_equal(err.code, AL_E_CANCELLED);
    assert_non_null(strstr(err.msg, "cancelled"));
    assert_string_equal(p.stage, "forward");
    assert_int_equal(p.calls, 4); /* layers 0, 1, 2, then 3 asked to stop */
    for (int l = 0; l < 6; l++) assert_int_equal(s1.layers_seen[l], l < 3);
    for (int i = 0; i < 8 * 50; i++) assert_true(logits[i] == 12345.0f);
    assert_int_equal(p.other_thread, 0);
    /* stopped stays stopped (without calling again) until al_set_progress */
    assert_int_equal(al_model_forward(m, tok, 8, NULL, logits, NULL, &err), AL_E_CANCELLED);
    assert_int_equal(p.calls, 4);
    al_set_progress(NULL, NULL);
    assert_int_equal(al_model_forward(m, tok, 8, NULL, logits, NULL, &err), 0);
    free(logits);
    al_model_free(m);
}

static void test_head_metrics_stop_leaves_out_untouched(void **state) {
    (void)state;
    enum { L = 200, D = 4 };
    double *w = calloc(L * L, sizeof(double)), *x = calloc(L * D, sizeof(double));
    for (int t = 0; t < L; t++) {
        for (int j = 0; j <= t; j++) w[t * L + j] = 1.0 / (t + 1);
        for (int k = 0; k < D; k++) x[t * D + k] = sin(t * 0.7 + k);
    }
    int N[1] = {2};
    al_metrics_opts o = {.top_n = N, .n_top = 1, .distance = 1, .separability = 1, .causal = 1};
    al_topn_stats out = {.N = -7};
    al_error err = {0};
    prog p = {.stop_at = 128, .owner = pthread_self()};
    al_set_progress(on_progress, &p);
    assert_int_equal(al_head_metrics(w, x, L, D, &o, &out, NULL, NULL, &err), AL_E_CANCELLED);
    assert_int_equal(out.N, -7);
    assert_int_equal(p.calls, 3); /* rows 0, 64, 128 */
    assert_string_equal(p.stage, "head metrics");
    al_set_progress(NULL, NULL);
    assert_int_equal(al_head_metrics(w, x, L, D, &o, &out, NULL, NULL, &err), 0);
    assert_int_equal(out.N, 2);
    free(w);
    free(x);
}

/* ---- messages --------------------------------------------------------------------------- */

typedef struct {
    int n;
    al_log_level level;
    char msg[512];
} logged;

static void on_log(void *user, al_log_level level, const char *msg) {
    logged *l = user;
    l->n++;
    l->level = level;
    snprintf(l->msg, sizeof l->msg, "%s", msg);
}

/* A checkpoint with a NaN in a weight: al_model_open warns (and opens it). */
static void test_warnings_go_to_the_log_callback(void **state) {
    (void)state;
    char dir[512], st[600];
    make_model(dir, sizeof dir, 1);
    snprintf(st, sizeof st, "%s/model.safetensors", dir);
    FILE *f = fopen(st, "r+b");
    assert_non_null(f);
    uint64_t hlen = 0;
    assert_int_equal(fread(&hlen, 8, 1, f), 1);
    float nan = NAN; /* the first float of the data section: some tensor's first element */
    fseek(f, (long)(8 + hlen), SEEK_SET);
    assert_int_equal(fwrite(&nan, 4, 1, f), 1);
    fclose(f);
    /* stderr to a file, to see the library write nothing there */
    char errpath[600];
    snprintf(errpath, sizeof errpath, "%s/stderr.txt", tmpdir);
    fflush(stderr);
    int saved = dup(2);
    FILE *ef = fopen(errpath, "w");
    dup2(fileno(ef), 2);
    logged lg = {0};
    al_set_log(on_log, &lg);
    al_model *m = NULL;
    al_error err = {0};
    int rc = al_model_open(dir, &m, &err);
    al_set_log(NULL, NULL);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    fclose(ef);
    assert_int_equal(rc, 0);
    al_model_free(m);
    assert_int_equal(lg.n, 1);
    assert_int_equal(lg.level, AL_LOG_WARNING);
    assert_non_null(strstr(lg.msg, "NaN/Inf"));
    f = fopen(errpath, "r");
    fseek(f, 0, SEEK_END);
    assert_int_equal(ftell(f), 0);
    fclose(f);
}

/* ---- network, threads, al_free, version ------------------------------------------------- */

static void test_network_is_off_by_default(void **state) {
    (void)state;
    char cache[400];
    snprintf(cache, sizeof cache, "%s/cache", tmpdir);
    setenv("ATTNLIM_CACHE", cache, 1);
    unsetenv("ATTNLIM_ALLOW_NETWORK");
    setenv("ATTNLIM_PYTHON", "/nonexistent/python-must-not-run", 1);
    unsetenv("ATTNLIM_WHEELHOUSE");
    assert_int_equal(al_set_network(0), 0); /* the default: off */
    al_model *m = NULL;
    al_error err = {0};
    assert_int_equal(al_model_open("minilm", &m, &err), AL_E_NOTFOUND);
    assert_non_null(strstr(err.msg, "does not allow network fetches"));
    assert_non_null(strstr(err.msg, "attnlim fetch minilm"));
    /* allowed: pip is tried (here it cannot run: the message says so) */
    assert_int_equal(al_set_network(1), 0);
    assert_int_equal(al_model_open("minilm", &m, &err), AL_E_NOTFOUND);
    assert_non_null(strstr(err.msg, "could not run"));
    assert_int_equal(al_set_network(0), 1);
    unsetenv("ATTNLIM_CACHE");
    unsetenv("ATTNLIM_PYTHON");
}

static void test_openblas_threads_are_left_as_they_were(void **state) {
    (void)state;
    openblas_set_num_threads(2);
    char dir[512];
    make_model(dir, sizeof dir, 2);
    al_model *m = NULL;
    al_error err = {0};
    assert_int_equal(al_model_open(dir, &m, &err), 0);
    int32_t tok[4] = {1, 2, 3, 4};
    assert_int_equal(al_model_forward(m, tok, 4, NULL, NULL, NULL, &err), 0);
    assert_int_equal(openblas_get_num_threads(), 2);
    al_model_free(m);
    double w[4] = {1, 0, 0.5, 0.5}, x[4] = {1, 0, 0, 1};
    int N[1] = {1};
    al_metrics_opts o = {.top_n = N, .n_top = 1, .distance = 1, .causal = 1};
    al_topn_stats out;
    assert_int_equal(al_head_metrics(w, x, 2, 2, &o, &out, NULL, NULL, &err), 0);
    assert_int_equal(openblas_get_num_threads(), 2);
}

static void test_free_and_version(void **state) {
    (void)state;
    al_free(NULL);
    al_free(malloc(16));
    char v[32];
    snprintf(v, sizeof v, "%d.%d.%d", AL_VERSION_MAJOR, AL_VERSION_MINOR, AL_VERSION_PATCH);
    assert_string_equal(v, al_version());
    assert_true(AL_VERSION_NUMBER ==
                AL_VERSION_ENCODE(AL_VERSION_MAJOR, AL_VERSION_MINOR, AL_VERSION_PATCH));
    assert_true(AL_VERSION_ENCODE(0, 1, 0) < AL_VERSION_ENCODE(0, 2, 0));
    assert_true(AL_VERSION_ENCODE(0, 99, 99) < AL_VERSION_ENCODE(1, 0, 0));
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/attnlim-test-hooks-XXXXXX");
    if (!mkdtemp(tmpdir)) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_forward_stops_at_the_layer_asked),
        cmocka_unit_test(test_head_metrics_stop_leaves_out_untouched),
        cmocka_unit_test(test_warnings_go_to_the_log_callback),
        cmocka_unit_test(test_network_is_off_by_default),
        cmocka_unit_test(test_openblas_threads_are_left_as_they_were),
        cmocka_unit_test(test_free_and_version),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) return 1;
    return rc;
}
