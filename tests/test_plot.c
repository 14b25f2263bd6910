/* test_plot.c: the figure writer (src/plot.c). Ticks against hand-derived positions; every kind
 * of figure written as SVG (well-formed enough to find its metadata, axes and series) and PNG
 * (signature, size read back by cairo); bad input is an error, never a crash. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "plot.h"

#include <cairo.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void tmpbase(char *out, size_t size, const char *name) {
    snprintf(out, size, "/tmp/attnlim_test_plot_%d_%s", (int)getpid(), name);
}

static char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    size_t got = fread(b, 1, (size_t)n, f);
    fclose(f);
    b[got] = 0;
    if (len) *len = got;
    return b;
}

static int count(const char *hay, const char *needle) {
    int n = 0;
    for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle)) n++;
    return n;
}

/* PNG: 8-byte signature, IHDR width/height, and cairo reads it back at 1230 x height; returns
 * how many sampled pixels below row `below` are dark (text, lines). */
static int check_png_h(const char *path, int height, int below) {
    size_t len;
    char *b = slurp(path, &len);
    assert_non_null(b);
    assert_true(len > 1000);
    assert_memory_equal(b, "\x89PNG\r\n\x1a\n", 8);
    free(b);
    cairo_surface_t *s = cairo_image_surface_create_from_png(path);
    assert_int_equal(cairo_surface_status(s), CAIRO_STATUS_SUCCESS);
    assert_int_equal(cairo_image_surface_get_width(s), 1230);
    assert_int_equal(cairo_image_surface_get_height(s), height);
    /* not blank: some pixels are dark (axes, text) */
    cairo_surface_flush(s);
    const unsigned char *px = cairo_image_surface_get_data(s);
    int stride = cairo_image_surface_get_stride(s), dark = 0, dark_below = 0;
    for (int y = 0; y < height; y += 3)
        for (int x = 0; x < 1230; x += 3) {
            const unsigned char *q = px + (size_t)y * stride + 4 * x;
            int d = q[0] < 80 && q[1] < 80 && q[2] < 80;
            dark += d;
            dark_below += d && y >= below;
        }
    assert_true(dark > 200);
    cairo_surface_destroy(s);
    return dark_below;
}

static void check_png(const char *path) {
    check_png_h(path, 810, 810);
}

static void test_ticks_linear(void **state) {
    (void)state;
    double t[64];
    int n = al__plot_ticks(0, 1, 0, t, 64); /* step 0.2 */
    assert_int_equal(n, 6);
    for (int i = 0; i < n; i++) assert_true(fabs(t[i] - 0.2 * i) < 1e-12);
    n = al__plot_ticks(-3, 27, 0, t, 64); /* raw 5 -> step 5: -0? start at 0 */
    assert_int_equal(n, 6);
    assert_true(fabs(t[0] - 0) < 1e-12 && fabs(t[5] - 25) < 1e-12);
    assert_int_equal(al__plot_ticks(1, 1, 0, t, 64), 0);
    assert_int_equal(al__plot_ticks(NAN, 1, 0, t, 64), 0);
}

static void test_ticks_log(void **state) {
    (void)state;
    double t[64];
    int n = al__plot_ticks(0.0009, 11, 1, t, 64); /* decades 1e-3 .. 1e1 */
    assert_int_equal(n, 5);
    for (int i = 0; i < n; i++) assert_true(fabs(log10(t[i]) - (i - 3)) < 1e-12);
    n = al__plot_ticks(15, 90, 1, t, 64); /* 20, 50 */
    assert_int_equal(n, 2);
    assert_true(fabs(t[0] - 20) < 1e-9 && fabs(t[1] - 50) < 1e-9);
    n = al__plot_ticks(1e-20, 1e20, 1, t, 64); /* 41 decades thinned to <= 9 */
    assert_true(n >= 5 && n <= 9);
    assert_int_equal(al__plot_ticks(0, 10, 1, t, 64), 0); /* log of 0 */
}

/* A line figure of se[n] with its ranges from the data. */
static al__plot lines_plot(const char *title, const char *xl, const char *yl, const al__series *se,
                           int n) {
    return (al__plot){.title = title,
                      .xlabel = xl,
                      .ylabel = yl,
                      .xmin = NAN,
                      .xmax = NAN,
                      .ymin = NAN,
                      .ymax = NAN,
                      .n_series = n,
                      .series = se};
}

/* Writes p as base = tmpbase(name): it must succeed. */
static void write_ok(const al__plot *p, const char *name, char *base, size_t size) {
    tmpbase(base, size, name);
    al_error err = {0};
    assert_int_equal(al__plot_write(p, base, &err), 0);
}

static void test_lines(void **state) {
    (void)state;
    double x[6] = {32, 64, 128, 256, 512, 1024}, y[6], lo[6], hi[6], y2[6];
    for (int i = 0; i < 6; i++) {
        y[i] = 0.01 * x[i];
        lo[i] = y[i] * 0.7;
        hi[i] = y[i] * 1.4;
        y2[i] = i == 3 ? NAN : 0.5 * sqrt(x[i]);
    }
    al__series se[2] = {
        {.label = "dtilde (mean over heads)",
         .n = 6,
         .x = x,
         .y = y,
         .lo = lo,
         .hi = hi,
         .style = AL__S_LINE | AL__S_MARKERS,
         .color = 0},
        {.label = "E & <bound>", .n = 6, .x = x, .y = y2, .style = AL__S_DASHED, .color = 1},
    };
    al__plot p = lines_plot("Distance vs L", "L", "distance", se, 2);
    p.subtitle = "N = 5";
    p.xlog = p.ylog = 1;
    char base[256], path[300];
    write_ok(&p, "lines", base, sizeof base);
    snprintf(path, sizeof path, "%s.svg", base);
    char *svg = slurp(path, NULL);
    assert_non_null(svg);
    assert_non_null(strstr(svg, "<svg"));
    assert_non_null(strstr(svg, "</svg>"));
    assert_int_equal(count(svg, "<al:axis "), 2);
    assert_int_equal(count(svg, "<al:series "), 2);
    assert_non_null(strstr(svg, "scale=\"log\""));
    assert_non_null(strstr(svg, "E &amp; &lt;bound&gt;")); /* escaped */
    assert_non_null(strstr(svg, "x=\"32 64 128 256 512 1024\""));
    assert_non_null(strstr(svg, "nan")); /* the gap is kept in the data */
    assert_true(count(svg, "<path") >= 10);
    free(svg);
    unlink(path);
    snprintf(path, sizeof path, "%s.png", base);
    check_png(path);
    unlink(path);
}

/* Past 8 legend entries (they would cover the data) the legend goes below the plot, in columns,
 * and the figure grows by its rows of 17 px + 8 + 8 below the 540 px. */
static void test_legend_below(void **state) {
    (void)state;
    double x[3] = {1, 2, 3}, y[12][3];
    char labels[12][48];
    al__series se[12];
    for (int s = 0; s < 12; s++) {
        for (int i = 0; i < 3; i++) y[s][i] = s + 0.1 * i;
        snprintf(labels[s], sizeof labels[s], "series %02d: a label of forty characters", s);
        se[s] = (al__series){.label = labels[s],
                             .n = 3,
                             .x = x,
                             .y = y[s],
                             .style = AL__S_LINE | AL__S_MARKERS,
                             .color = s};
    }
    al__plot p = lines_plot("many series", "x", "y", se, 12);
    char base[256], path[300];
    write_ok(&p, "legend", base, sizeof base);
    snprintf(path, sizeof path, "%s.png", base);
    /* the legend's rows (the columns depend on the font's widths): 540 + rows 17 + 16, x 1.5 */
    cairo_surface_t *im = cairo_image_surface_create_from_png(path);
    int h = cairo_image_surface_get_height(im), rows = (int)lround((h / 1.5 - 556) / 17);
    cairo_surface_destroy(im);
    assert_true(rows >= 2 && rows <= 6); /* 12 entries in 2 to 6 columns */
    assert_int_equal(h, (int)((556.0 + rows * 17.0) * 1.5));
    assert_true(check_png_h(path, h, 810) > 50); /* the legend's text below the plot */
    unlink(path);
    snprintf(path, sizeof path, "%s.svg", base);
    char *svg = slurp(path, NULL);
    assert_non_null(svg);
    assert_int_equal(count(svg, "<al:series "), 12);
    free(svg);
    unlink(path);
}

static void test_boxes_and_heatmap(void **state) {
    (void)state;
    al__box b[4];
    double bx[4] = {1, 2, 4, 8}, bound[4];
    for (int i = 0; i < 4; i++) {
        b[i] = (al__box){bx[i], 0.1, 0.3, 0.5, 0.7, 0.9, 0.52};
        bound[i] = 0.95;
    }
    al__series se = {
        .label = "upper bound", .n = 4, .x = bx, .y = bound, .style = AL__S_DASHED, .color = 3};
    al__plot p = {.title = "N_s/N",
                  .xlabel = "N",
                  .ylabel = "ratio",
                  .xlog = 1,
                  .xmin = NAN,
                  .xmax = NAN,
                  .ymin = 0,
                  .ymax = 1.05,
                  .n_series = 1,
                  .series = &se,
                  .n_boxes = 4,
                  .boxes = b,
                  .box_label = "heads"};
    char base[256], path[300];
    tmpbase(base, sizeof base, "box");
    al_error err = {0};
    assert_int_equal(al__plot_write(&p, base, &err), 0);
    snprintf(path, sizeof path, "%s.svg", base);
    char *svg = slurp(path, NULL);
    assert_non_null(svg);
    assert_int_equal(count(svg, "<al:box "), 4);
    assert_non_null(strstr(svg, "kind=\"box\""));
    free(svg);
    unlink(path);
    snprintf(path, sizeof path, "%s.png", base);
    check_png(path);
    unlink(path);

    double hm[12 * 12];
    for (int i = 0; i < 144; i++) hm[i] = i == 7 ? NAN : sin(i * 0.3);
    al__plot h = {.title = "heatmap",
                  .xlabel = "head",
                  .ylabel = "layer",
                  .hm_rows = 12,
                  .hm_cols = 12,
                  .hm = hm,
                  .hm_clabel = "value"};
    tmpbase(base, sizeof base, "hm");
    assert_int_equal(al__plot_write(&h, base, &err), 0);
    snprintf(path, sizeof path, "%s.svg", base);
    svg = slurp(path, NULL);
    assert_non_null(strstr(svg, "kind=\"heatmap\""));
    assert_non_null(strstr(svg, "rows=\"12\" cols=\"12\""));
    free(svg);
    unlink(path);
    snprintf(path, sizeof path, "%s.png", base);
    check_png(path);
    unlink(path);
}

static void test_bad_input(void **state) {
    (void)state;
    al__plot h = {.title = "bad", .hm_rows = 0, .hm_cols = 3, .hm = (const double[3]){1, 2, 3}};
    al_error err = {0};
    assert_int_not_equal(al__plot_write(&h, "/tmp/attnlim_never", &err), 0);
    assert_non_null(strstr(err.msg, "heatmap"));
    double x = 1;
    al__series se = {.n = 1, .x = &x, .y = &x, .style = AL__S_LINE};
    al__plot p = {.n_series = 1, .series = &se, .xmin = NAN, .xmax = NAN, .ymin = NAN, .ymax = NAN};
    /* a directory that does not exist: an I/O error naming the file */
    assert_int_not_equal(al__plot_write(&p, "/nonexistent-dir/fig", &err), 0);
    assert_non_null(strstr(err.msg, "/nonexistent-dir/fig"));
    /* no data at all: still a valid empty frame */
    al__plot empty = {
        .title = "empty", .xmin = NAN, .xmax = NAN, .ymin = NAN, .ymax = NAN, .ylog = 1};
    char base[256], path[300];
    tmpbase(base, sizeof base, "empty");
    assert_int_equal(al__plot_write(&empty, base, &err), 0);
    snprintf(path, sizeof path, "%s.svg", base);
    unlink(path);
    snprintf(path, sizeof path, "%s.png", base);
    unlink(path);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ticks_linear), cmocka_unit_test(test_ticks_log),
        cmocka_unit_test(test_lines),        cmocka_unit_test(test_boxes_and_heatmap),
        cmocka_unit_test(test_bad_input),    cmocka_unit_test(test_legend_below),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
