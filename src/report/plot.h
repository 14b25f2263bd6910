/* plot.h: the figures of `attnlim reproduce` drawn with cairo (SVG and PNG from the same
 * drawing code). A figure is one of three kinds: lines (series with markers, optional shaded
 * bands, linear or log axes), box plots (five-number summaries at x positions, plus line
 * series such as bounds), or a heatmap (a [rows, cols] grid with a colour bar).
 *
 * Each SVG carries a <metadata id="attnlim-plot"> element that lists the axes (label,
 * scale, range, ticks) and every series with its points, so that tests can check that a
 * figure has its axes and shows the data without rasterising it. */
#ifndef AL_PLOT_H
#define AL_PLOT_H

#include "internal.h"

enum {
    AL__S_LINE = 1u << 0,    /* connect the points */
    AL__S_MARKERS = 1u << 1, /* a marker at every point */
    AL__S_DASHED = 1u << 2,  /* dashed line (theory curves, bounds) */
    AL__S_THIN = 1u << 3,    /* thin line, no markers (many series) */
    AL__S_RING = 1u << 4,    /* markers drawn as open rings around other points (highlights) */
};

typedef struct al__series {
    const char *label; /* legend text; NULL = not in the legend */
    int n;             /* points */
    const double *x;   /* [n] */
    const double *y;   /* [n]; non-finite (or <= 0 on a log axis) breaks the line */
    const double *lo;  /* [n] shaded band from lo to hi, or NULL */
    const double *hi;  /* [n] or NULL */
    unsigned style;    /* AL__S_* */
    int color;         /* palette index (-1: grey) */
} al__series;

typedef struct al__box {
    double x;                      /* position on the x axis */
    double lo, q1, median, q3, hi; /* whiskers (lo, hi), box (q1, q3), median line */
    double mean;                   /* drawn as a small diamond (NaN: omitted) */
} al__box;

typedef struct al__plot {
    const char *title;
    const char *subtitle; /* second line under the title (smaller), or NULL */
    const char *xlabel, *ylabel;
    int xlog, ylog;                /* log10 axes */
    double xmin, xmax, ymin, ymax; /* NaN = from the data */
    int n_xticks;                  /* > 0: these x ticks instead of the automatic ones */
    const double *xticks;          /* [n_xticks] (e.g. the grid of L or N) */
    int n_series;
    const al__series *series; /* [n_series] */
    int n_boxes;
    const al__box *boxes;  /* [n_boxes] */
    const char *box_label; /* legend text for the boxes */
    double box_width;      /* in x units (linear) or as a factor (log); 0 = auto */
    /* heatmap (when hm != NULL; series and boxes are ignored) */
    int hm_rows, hm_cols;
    const double *hm;      /* [hm_rows, hm_cols]; NaN cells grey */
    const char *hm_clabel; /* colour bar label */
} al__plot;

/* Writes base.svg and base.png (atomically). */
int al__plot_write(const al__plot *p, const char *base, al_error *err);

/* Tick positions for an axis over [lo, hi] (linear "nice" 1-2-5 steps, or decades and,
 * for short log ranges, 2 and 5 multiples). Returns the count (<= cap). */
int al__plot_ticks(double lo, double hi, int logscale, double *ticks, int cap);

#endif
