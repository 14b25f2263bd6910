/* plot.c: line, box and heatmap figures with cairo. One drawing routine renders onto an SVG
 * surface and an image surface (PNG); both are written atomically. See plot.h. */
#include "plot.h"
#include "textsafe.h"

#include <cairo-svg.h>
#include <cairo.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define FIG_W     820.0
#define FIG_H     540.0
#define PNG_SCALE 1.5
#define FONT      "DejaVu Sans"

/* ---- colours ---------------------------------------------------------------------------- */

static const double palette[10][3] = {
    {0.122, 0.467, 0.706}, {1.000, 0.498, 0.055}, {0.173, 0.627, 0.173}, {0.839, 0.153, 0.157},
    {0.580, 0.404, 0.741}, {0.549, 0.337, 0.294}, {0.890, 0.467, 0.761}, {0.498, 0.498, 0.498},
    {0.737, 0.741, 0.133}, {0.090, 0.745, 0.812},
};

static void set_color(cairo_t *cr, int idx, double alpha) {
    if (idx < 0) {
        cairo_set_source_rgba(cr, 0.45, 0.45, 0.45, alpha);
        return;
    }
    const double *c = palette[idx % 10];
    cairo_set_source_rgba(cr, c[0], c[1], c[2], alpha);
}

/* viridis, 5 control points, linear in between */
static void colormap(double t, double rgb[3]) {
    static const double cp[5][3] = {{0.267, 0.005, 0.329},
                                    {0.231, 0.322, 0.545},
                                    {0.129, 0.569, 0.549},
                                    {0.369, 0.788, 0.384},
                                    {0.993, 0.906, 0.144}};
    if (!(t >= 0)) t = 0;
    if (t > 1) t = 1;
    double s = t * 4;
    int i = (int)s;
    if (i >= 4) i = 3;
    double f = s - i;
    for (int c = 0; c < 3; c++) rgb[c] = cp[i][c] * (1 - f) + cp[i + 1][c] * f;
}

/* ---- ticks and number formatting ------------------------------------------------------------ */

int al__plot_ticks(double lo, double hi, int logscale, double *ticks, int cap) {
    int n = 0;
    if (!(hi > lo) || !isfinite(lo) || !isfinite(hi)) return 0;
    if (logscale) {
        if (!(lo > 0)) return 0;
        int e0 = (int)ceil(log10(lo) - 1e-9), e1 = (int)floor(log10(hi) + 1e-9);
        int decades = e1 - e0 + 1;
        if (decades >= 2) {
            int step = decades > 8 ? (decades + 7) / 8 : 1;
            for (int e = e0; e <= e1 && n < cap; e += step) ticks[n++] = pow(10.0, e);
            return n;
        }
        /* less than two decades: 1, 2, 5 multiples */
        static const double mult[3] = {1, 2, 5};
        for (int e = e0 - 1; e <= e1 && n < cap; e++)
            for (int m = 0; m < 3 && n < cap; m++) {
                double v = mult[m] * pow(10.0, e);
                if (v >= lo * (1 - 1e-9) && v <= hi * (1 + 1e-9)) ticks[n++] = v;
            }
        return n;
    }
    double raw = (hi - lo) / 6.0;
    double mag = pow(10.0, floor(log10(raw)));
    double step = mag;
    if (raw / mag > 5)
        step = 10 * mag;
    else if (raw / mag > 2)
        step = 5 * mag;
    else if (raw / mag > 1)
        step = 2 * mag;
    double start = ceil(lo / step - 1e-9) * step;
    for (double v = start; v <= hi + step * 1e-9 && n < cap; v += step) {
        ticks[n++] = fabs(v) < step * 1e-9 ? 0.0 : v;
    }
    return n;
}

static void fmt_num(double v, int logscale, char *buf, size_t size) {
    if (logscale && v > 0) {
        double e = log10(v);
        if (fabs(e - round(e)) < 1e-9 && (e >= 4 || e <= -4)) {
            snprintf(buf, size, "1e%d", (int)round(e));
            return;
        }
    }
    if (v != 0 && (fabs(v) >= 1e5 || fabs(v) < 1e-4))
        snprintf(buf, size, "%.0e", v);
    else
        snprintf(buf, size, "%.6g", v);
}

/* ---- axis geometry ------------------------------------------------------------------------ */

typedef struct frame {
    double left, top, width, height; /* plot area in figure units */
    double xmin, xmax, ymin, ymax;   /* data range */
    int xlog, ylog;
} frame;

static double fx(const frame *f, double x) {
    double a = f->xlog ? log10(x) : x, lo = f->xlog ? log10(f->xmin) : f->xmin,
           hi = f->xlog ? log10(f->xmax) : f->xmax;
    return f->left + (a - lo) / (hi - lo) * f->width;
}
static double fy(const frame *f, double y) {
    double a = f->ylog ? log10(y) : y, lo = f->ylog ? log10(f->ymin) : f->ymin,
           hi = f->ylog ? log10(f->ymax) : f->ymax;
    return f->top + f->height - (a - lo) / (hi - lo) * f->height;
}
static int ok_x(const frame *f, double x) {
    return isfinite(x) && (!f->xlog || x > 0);
}
static int ok_y(const frame *f, double y) {
    return isfinite(y) && (!f->ylog || y > 0);
}

static void grow(double v, int logscale, double *lo, double *hi) {
    if (!isfinite(v) || (logscale && !(v > 0))) return;
    if (v < *lo) *lo = v;
    if (v > *hi) *hi = v;
}

static void pad_range(double *lo, double *hi, int logscale) {
    if (!(*hi >= *lo)) { /* no data */
        *lo = logscale ? 0.1 : 0;
        *hi = logscale ? 10 : 1;
        return;
    }
    if (logscale) {
        double a = log10(*lo), b = log10(*hi);
        if (b - a < 1e-9) {
            a -= 0.5;
            b += 0.5;
        }
        double p = (b - a) * 0.05;
        *lo = pow(10, a - p);
        *hi = pow(10, b + p);
    } else {
        double a = *lo, b = *hi;
        if (b - a < 1e-12 * (fabs(a) + fabs(b)) || b == a) {
            double d = fabs(a) > 0 ? fabs(a) * 0.1 : 0.5;
            a -= d;
            b += d;
        }
        double p = (b - a) * 0.05;
        *lo = a - p;
        *hi = b + p;
    }
}

static void data_range(const al__plot *p, frame *f) {
    double xlo = INFINITY, xhi = -INFINITY, ylo = INFINITY, yhi = -INFINITY;
    for (int s = 0; s < p->n_series; s++) {
        const al__series *se = &p->series[s];
        for (int i = 0; i < se->n; i++) {
            if (!isfinite(se->x[i]) || (p->xlog && !(se->x[i] > 0))) continue;
            grow(se->x[i], p->xlog, &xlo, &xhi);
            grow(se->y[i], p->ylog, &ylo, &yhi);
            if (se->lo) grow(se->lo[i], p->ylog, &ylo, &yhi);
            if (se->hi) grow(se->hi[i], p->ylog, &ylo, &yhi);
        }
    }
    for (int b = 0; b < p->n_boxes; b++) {
        const al__box *bx = &p->boxes[b];
        grow(bx->x, p->xlog, &xlo, &xhi);
        grow(bx->lo, p->ylog, &ylo, &yhi);
        grow(bx->hi, p->ylog, &ylo, &yhi);
    }
    if (p->n_boxes > 0 && xhi >= xlo) { /* room for the boxes at the ends */
        if (p->xlog) {
            xlo /= 1.6;
            xhi *= 1.6;
        } else {
            double w = p->n_boxes > 1 ? (xhi - xlo) / (p->n_boxes - 1) : 1;
            xlo -= w * 0.6;
            xhi += w * 0.6;
        }
    } else {
        pad_range(&xlo, &xhi, p->xlog);
    }
    pad_range(&ylo, &yhi, p->ylog);
    f->xmin = isnan(p->xmin) ? xlo : p->xmin;
    f->xmax = isnan(p->xmax) ? xhi : p->xmax;
    f->ymin = isnan(p->ymin) ? ylo : p->ymin;
    f->ymax = isnan(p->ymax) ? yhi : p->ymax;
    if (f->xlog && !(f->xmin > 0)) f->xmin = f->xmax > 0 ? f->xmax / 100 : 0.1;
    if (f->ylog && !(f->ymin > 0)) f->ymin = f->ymax > 0 ? f->ymax / 100 : 0.1;
    if (!(f->xmax > f->xmin)) f->xmax = f->xmin + (f->xlog ? f->xmin * 9 : 1);
    if (!(f->ymax > f->ymin)) f->ymax = f->ymin + (f->ylog ? f->ymin * 9 : 1);
}

/* ---- text helpers ---------------------------------------------------------------------------- */

static void text_at(cairo_t *cr, const char *s, double x, double y, double size, double ax,
                    double ay, int bold) {
    cairo_select_font_face(cr, FONT, CAIRO_FONT_SLANT_NORMAL,
                           bold ? CAIRO_FONT_WEIGHT_BOLD : CAIRO_FONT_WEIGHT_NORMAL);
    cairo_set_font_size(cr, size);
    char safe[1024]; /* cairo refuses invalid UTF-8: labels from model files made plain */
    al__plain_text(s, safe, sizeof safe);
    cairo_text_extents_t e;
    cairo_text_extents(cr, safe, &e);
    (void)ay; /* every label is centred vertically on y */
    cairo_move_to(cr, x - e.x_advance * ax, y + size * 0.35);
    cairo_show_text(cr, safe);
}

static double text_width(cairo_t *cr, const char *s, double size) {
    cairo_select_font_face(cr, FONT, CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);
    cairo_set_font_size(cr, size);
    char safe[1024];
    al__plain_text(s, safe, sizeof safe);
    cairo_text_extents_t e;
    cairo_text_extents(cr, safe, &e);
    return e.x_advance;
}

static void title_block(cairo_t *cr, const al__plot *p) {
    cairo_set_source_rgb(cr, 0.1, 0.1, 0.1);
    if (p->title) text_at(cr, p->title, FIG_W / 2, 20, 16, 0.5, 0.5, 1);
    if (p->subtitle) {
        cairo_set_source_rgb(cr, 0.3, 0.3, 0.3);
        text_at(cr, p->subtitle, FIG_W / 2, 40, 11.5, 0.5, 0.5, 0);
    }
}

/* ---- axes ------------------------------------------------------------------------------------ */

static int x_ticks(const frame *f, const al__plot *p, double *xt, int cap) {
    if (p->n_xticks <= 0) return al__plot_ticks(f->xmin, f->xmax, f->xlog, xt, cap);
    int n = 0;
    for (int i = 0; i < p->n_xticks && n < cap; i++)
        if (ok_x(f, p->xticks[i]) && p->xticks[i] >= f->xmin && p->xticks[i] <= f->xmax)
            xt[n++] = p->xticks[i];
    return n;
}

static void draw_axes(cairo_t *cr, const frame *f, const al__plot *p) {
    double xt[64], yt[64];
    int nx = x_ticks(f, p, xt, 64);
    int ny = al__plot_ticks(f->ymin, f->ymax, f->ylog, yt, 64);
    /* grid */
    cairo_set_line_width(cr, 0.6);
    cairo_set_source_rgb(cr, 0.88, 0.88, 0.88);
    for (int i = 0; i < nx; i++) {
        double X = fx(f, xt[i]);
        cairo_move_to(cr, X, f->top);
        cairo_line_to(cr, X, f->top + f->height);
    }
    for (int i = 0; i < ny; i++) {
        double Y = fy(f, yt[i]);
        cairo_move_to(cr, f->left, Y);
        cairo_line_to(cr, f->left + f->width, Y);
    }
    cairo_stroke(cr);
    /* frame */
    cairo_set_source_rgb(cr, 0.15, 0.15, 0.15);
    cairo_set_line_width(cr, 1.2);
    cairo_rectangle(cr, f->left, f->top, f->width, f->height);
    cairo_stroke(cr);
    /* ticks and labels */
    char buf[64];
    cairo_set_line_width(cr, 1.0);
    for (int i = 0; i < nx; i++) {
        double X = fx(f, xt[i]);
        cairo_move_to(cr, X, f->top + f->height);
        cairo_line_to(cr, X, f->top + f->height + 5);
        cairo_stroke(cr);
        fmt_num(xt[i], f->xlog, buf, sizeof buf);
        text_at(cr, buf, X, f->top + f->height + 16, 11, 0.5, 0.5, 0);
    }
    double maxw = 0;
    for (int i = 0; i < ny; i++) {
        double Y = fy(f, yt[i]);
        cairo_move_to(cr, f->left - 5, Y);
        cairo_line_to(cr, f->left, Y);
        cairo_stroke(cr);
        fmt_num(yt[i], f->ylog, buf, sizeof buf);
        double w = text_width(cr, buf, 11);
        if (w > maxw) maxw = w;
        text_at(cr, buf, f->left - 8, Y, 11, 1.0, 0.5, 0);
    }
    /* axis labels */
    if (p->xlabel)
        text_at(cr, p->xlabel, f->left + f->width / 2, f->top + f->height + 40, 13, 0.5, 0.5, 0);
    if (p->ylabel) {
        cairo_save(cr);
        double x = f->left - maxw - 24;
        if (x < 14) x = 14;
        cairo_translate(cr, x, f->top + f->height / 2);
        cairo_rotate(cr, -M_PI / 2);
        text_at(cr, p->ylabel, 0, 0, 13, 0.5, 0.5, 0);
        cairo_restore(cr);
    }
}

/* ---- series ------------------------------------------------------------------------------------
 */

static void marker(cairo_t *cr, int kind, double x, double y, double r) {
    switch (kind % 4) {
    case 0:
        cairo_arc(cr, x, y, r, 0, 2 * M_PI);
        break;
    case 1:
        cairo_rectangle(cr, x - r * 0.9, y - r * 0.9, 1.8 * r, 1.8 * r);
        break;
    case 2:
        cairo_move_to(cr, x, y - r * 1.15);
        cairo_line_to(cr, x + r * 1.05, y + r * 0.75);
        cairo_line_to(cr, x - r * 1.05, y + r * 0.75);
        cairo_close_path(cr);
        break;
    default:
        cairo_move_to(cr, x, y - r * 1.2);
        cairo_line_to(cr, x + r * 1.0, y);
        cairo_line_to(cr, x, y + r * 1.2);
        cairo_line_to(cr, x - r * 1.0, y);
        cairo_close_path(cr);
    }
}

static void line_style(cairo_t *cr, unsigned style) {
    static const double dash[2] = {7, 4};
    cairo_set_line_width(cr, (style & AL__S_THIN) ? 1.0 : 2.0);
    if (style & AL__S_DASHED)
        cairo_set_dash(cr, dash, 2, 0);
    else
        cairo_set_dash(cr, NULL, 0, 0);
}

static void draw_series(cairo_t *cr, const frame *f, const al__series *se, int idx) {
    /* band */
    if (se->lo && se->hi) {
        set_color(cr, se->color, 0.18);
        int i = 0;
        while (i < se->n) {
            while (i < se->n && !(ok_x(f, se->x[i]) && ok_y(f, se->lo[i]) && ok_y(f, se->hi[i])))
                i++;
            int j = i;
            while (j < se->n && ok_x(f, se->x[j]) && ok_y(f, se->lo[j]) && ok_y(f, se->hi[j])) j++;
            if (j - i >= 2) {
                cairo_move_to(cr, fx(f, se->x[i]), fy(f, se->hi[i]));
                for (int k = i + 1; k < j; k++)
                    cairo_line_to(cr, fx(f, se->x[k]), fy(f, se->hi[k]));
                for (int k = j - 1; k >= i; k--)
                    cairo_line_to(cr, fx(f, se->x[k]), fy(f, se->lo[k]));
                cairo_close_path(cr);
                cairo_fill(cr);
            } else if (j - i == 1) { /* a single point: an error bar */
                set_color(cr, se->color, 0.6);
                cairo_set_line_width(cr, 1.5);
                cairo_move_to(cr, fx(f, se->x[i]), fy(f, se->lo[i]));
                cairo_line_to(cr, fx(f, se->x[i]), fy(f, se->hi[i]));
                cairo_stroke(cr);
                set_color(cr, se->color, 0.18);
            }
            i = j;
        }
    }
    /* line */
    if (se->style & (AL__S_LINE | AL__S_DASHED | AL__S_THIN)) {
        set_color(cr, se->color, (se->style & AL__S_THIN) ? 0.55 : 1.0);
        line_style(cr, se->style);
        int pen = 0;
        for (int i = 0; i < se->n; i++) {
            if (!(ok_x(f, se->x[i]) && ok_y(f, se->y[i]))) {
                pen = 0;
                continue;
            }
            if (pen)
                cairo_line_to(cr, fx(f, se->x[i]), fy(f, se->y[i]));
            else
                cairo_move_to(cr, fx(f, se->x[i]), fy(f, se->y[i]));
            pen = 1;
        }
        cairo_stroke(cr);
        cairo_set_dash(cr, NULL, 0, 0);
    }
    if (se->style & AL__S_RING) {
        set_color(cr, se->color, 1.0);
        cairo_set_line_width(cr, 1.6);
        for (int i = 0; i < se->n; i++) {
            if (!(ok_x(f, se->x[i]) && ok_y(f, se->y[i]))) continue;
            cairo_new_sub_path(cr);
            cairo_arc(cr, fx(f, se->x[i]), fy(f, se->y[i]), 7.5, 0, 2 * M_PI);
        }
        cairo_stroke(cr);
        return;
    }
    if (se->style & AL__S_MARKERS) {
        for (int i = 0; i < se->n; i++) {
            if (!(ok_x(f, se->x[i]) && ok_y(f, se->y[i]))) continue;
            marker(cr, idx, fx(f, se->x[i]), fy(f, se->y[i]), 4.0);
            set_color(cr, se->color, 1.0);
            cairo_fill_preserve(cr);
            cairo_set_source_rgb(cr, 1, 1, 1);
            cairo_set_line_width(cr, 0.8);
            cairo_stroke(cr);
        }
    }
}

static void draw_boxes(cairo_t *cr, const frame *f, const al__plot *p) {
    for (int b = 0; b < p->n_boxes; b++) {
        const al__box *bx = &p->boxes[b];
        if (!ok_x(f, bx->x) || !ok_y(f, bx->q1) || !ok_y(f, bx->q3)) continue;
        double X = fx(f, bx->x), half;
        if (p->xlog) {
            double fac = p->box_width > 0 ? p->box_width : 1.25;
            half = (fx(f, bx->x * fac) - fx(f, bx->x / fac)) / 2;
        } else {
            double w = p->box_width > 0 ? p->box_width : 0.5;
            half = (fx(f, bx->x + w / 2) - fx(f, bx->x - w / 2)) / 2;
        }
        if (half > 28) half = 28;
        double Y1 = fy(f, bx->q1), Y3 = fy(f, bx->q3);
        /* whiskers */
        cairo_set_source_rgb(cr, 0.2, 0.2, 0.2);
        cairo_set_line_width(cr, 1.2);
        if (ok_y(f, bx->lo)) {
            cairo_move_to(cr, X, Y1);
            cairo_line_to(cr, X, fy(f, bx->lo));
            cairo_move_to(cr, X - half * 0.5, fy(f, bx->lo));
            cairo_line_to(cr, X + half * 0.5, fy(f, bx->lo));
        }
        if (ok_y(f, bx->hi)) {
            cairo_move_to(cr, X, Y3);
            cairo_line_to(cr, X, fy(f, bx->hi));
            cairo_move_to(cr, X - half * 0.5, fy(f, bx->hi));
            cairo_line_to(cr, X + half * 0.5, fy(f, bx->hi));
        }
        cairo_stroke(cr);
        /* box */
        cairo_rectangle(cr, X - half, Y3, 2 * half, Y1 - Y3);
        set_color(cr, 0, 0.35);
        cairo_fill_preserve(cr);
        set_color(cr, 0, 1.0);
        cairo_set_line_width(cr, 1.4);
        cairo_stroke(cr);
        /* median */
        if (ok_y(f, bx->median)) {
            cairo_set_source_rgb(cr, 0.85, 0.37, 0.0);
            cairo_set_line_width(cr, 2.4);
            cairo_move_to(cr, X - half, fy(f, bx->median));
            cairo_line_to(cr, X + half, fy(f, bx->median));
            cairo_stroke(cr);
        }
        if (ok_y(f, bx->mean)) {
            cairo_set_source_rgb(cr, 0.1, 0.1, 0.1);
            marker(cr, 3, X, fy(f, bx->mean), 3.2);
            cairo_fill(cr);
        }
    }
}

/* ---- legend ------------------------------------------------------------------------------------
 */

typedef struct legend_item {
    const char *label;
    int color, kind; /* kind: series index for the marker; -1 box; -2 median line */
    unsigned style;
    int band;
} legend_item;

/* Picks the corner of the plot area with the fewest data points under the legend box. */
static void legend_place(const frame *f, const al__plot *p, double w, double h, double *lx,
                         double *ly) {
    double cx[4] = {f->left + f->width - w - 8, f->left + 8, f->left + f->width - w - 8,
                    f->left + 8};
    double cy[4] = {f->top + 8, f->top + 8, f->top + f->height - h - 8, f->top + f->height - h - 8};
    int best = 0;
    long best_hits = -1;
    for (int c = 0; c < 4; c++) {
        long hits = 0;
        for (int s = 0; s < p->n_series; s++) {
            const al__series *se = &p->series[s];
            for (int i = 0; i < se->n; i++) {
                if (!(ok_x(f, se->x[i]) && ok_y(f, se->y[i]))) continue;
                double X = fx(f, se->x[i]), Y = fy(f, se->y[i]);
                if (X >= cx[c] - 6 && X <= cx[c] + w + 6 && Y >= cy[c] - 6 && Y <= cy[c] + h + 6)
                    hits += 4;
                /* also the line between points */
                if (i + 1 < se->n && ok_x(f, se->x[i + 1]) && ok_y(f, se->y[i + 1])) {
                    double X2 = fx(f, se->x[i + 1]), Y2 = fy(f, se->y[i + 1]);
                    for (int k = 1; k < 8; k++) {
                        double xm = X + (X2 - X) * k / 8.0, ym = Y + (Y2 - Y) * k / 8.0;
                        if (xm >= cx[c] && xm <= cx[c] + w && ym >= cy[c] && ym <= cy[c] + h)
                            hits++;
                    }
                }
            }
        }
        for (int b = 0; b < p->n_boxes; b++) {
            const al__box *bx = &p->boxes[b];
            if (!ok_x(f, bx->x)) continue;
            double X = fx(f, bx->x);
            if (X < cx[c] - 20 || X > cx[c] + w + 20) continue;
            double ya = ok_y(f, bx->hi) ? fy(f, bx->hi) : f->top,
                   yb = ok_y(f, bx->lo) ? fy(f, bx->lo) : f->top + f->height;
            if (!(yb < cy[c] || ya > cy[c] + h)) hits += 6;
        }
        if (best_hits < 0 || hits < best_hits) {
            best_hits = hits;
            best = c;
        }
    }
    *lx = cx[best];
    *ly = cy[best];
}

/* The legend's entries of p into items[32]; returns their count. */
static int legend_items(const al__plot *p, legend_item *items) {
    int n = 0;
    if (p->n_boxes > 0 && p->box_label && n < 32)
        items[n++] = (legend_item){p->box_label, 0, -1, 0, 0};
    if (p->n_boxes > 0 && n < 32) items[n++] = (legend_item){"median over heads", 0, -2, 0, 0};
    for (int s = 0; s < p->n_series && n < 32; s++)
        if (p->series[s].label)
            items[n++] = (legend_item){p->series[s].label, p->series[s].color, s,
                                       p->series[s].style, p->series[s].lo != NULL};
    return n;
}

/* Where the legend goes: a box inside the plot area (legend_place), or, past LEGEND_INSIDE
 * entries (which would cover the data), in columns below the figure, which grows by h. */
#define LEGEND_INSIDE 8
#define LEGEND_ROW    17.0
typedef struct legend_layout {
    int n, below, cols;
    double colw, w, h; /* one column's width; the whole legend's */
} legend_layout;

static legend_layout legend_measure(cairo_t *cr, const al__plot *p) {
    legend_item items[32];
    legend_layout l = {.n = p->hm ? 0 : legend_items(p, items)};
    double maxw = 0;
    for (int i = 0; i < l.n; i++) {
        double w = text_width(cr, items[i].label, 11);
        if (w > maxw) maxw = w;
    }
    l.colw = maxw + 48;
    l.below = l.n > LEGEND_INSIDE;
    l.cols = l.below ? (int)((FIG_W - 40) / l.colw) : 1;
    if (l.cols < 1) l.cols = 1;
    int rows = (l.n + l.cols - 1) / l.cols;
    l.w = l.cols * l.colw;
    l.h = rows * LEGEND_ROW + 8;
    return l;
}

/* The figure's height: FIG_H, and a legend below it. */
static double fig_height(const legend_layout *l) {
    return FIG_H + (l->below ? l->h + 8 : 0);
}

static void draw_legend(cairo_t *cr, const frame *f, const al__plot *p, const legend_layout *l) {
    legend_item items[32];
    int n = legend_items(p, items);
    if (n == 0) return;
    double size = 11, row = LEGEND_ROW, w = l->w, h = l->h, lx, ly;
    if (l->below) {
        lx = (FIG_W - w) / 2;
        ly = FIG_H;
    } else {
        legend_place(f, p, w, h, &lx, &ly);
    }
    cairo_rectangle(cr, lx, ly, w, h);
    cairo_set_source_rgba(cr, 1, 1, 1, 0.88);
    cairo_fill_preserve(cr);
    cairo_set_source_rgb(cr, 0.7, 0.7, 0.7);
    cairo_set_line_width(cr, 0.8);
    cairo_stroke(cr);
    int rows = (n + l->cols - 1) / l->cols;
    for (int i = 0; i < n; i++) { /* column by column */
        double y = ly + 4 + row * (i % rows) + row / 2, x0 = lx + 8 + l->colw * (i / rows),
               x1 = x0 + 26;
        legend_item *it = &items[i];
        if (it->kind == -1) {
            cairo_rectangle(cr, x0 + 4, y - 5, x1 - x0 - 8, 10);
            set_color(cr, 0, 0.35);
            cairo_fill_preserve(cr);
            set_color(cr, 0, 1);
            cairo_set_line_width(cr, 1.2);
            cairo_stroke(cr);
        } else if (it->kind == -2) {
            cairo_set_source_rgb(cr, 0.85, 0.37, 0.0);
            cairo_set_line_width(cr, 2.4);
            cairo_move_to(cr, x0, y);
            cairo_line_to(cr, x1, y);
            cairo_stroke(cr);
        } else {
            if (it->band) {
                set_color(cr, it->color, 0.18);
                cairo_rectangle(cr, x0, y - 6, x1 - x0, 12);
                cairo_fill(cr);
            }
            if (it->style & (AL__S_LINE | AL__S_DASHED | AL__S_THIN)) {
                set_color(cr, it->color, 1);
                line_style(cr, it->style);
                cairo_move_to(cr, x0, y);
                cairo_line_to(cr, x1, y);
                cairo_stroke(cr);
                cairo_set_dash(cr, NULL, 0, 0);
            }
            if (it->style & AL__S_RING) {
                set_color(cr, it->color, 1);
                cairo_set_line_width(cr, 1.6);
                cairo_new_sub_path(cr);
                cairo_arc(cr, (x0 + x1) / 2, y, 6.0, 0, 2 * M_PI);
                cairo_stroke(cr);
            } else if (it->style & AL__S_MARKERS) {
                marker(cr, it->kind, (x0 + x1) / 2, y, 4.0);
                set_color(cr, it->color, 1);
                cairo_fill(cr);
            }
        }
        cairo_set_source_rgb(cr, 0.1, 0.1, 0.1);
        text_at(cr, it->label, x1 + 6, y, size, 0, 0.5, 0);
    }
}

/* ---- heatmap -----------------------------------------------------------------------------------
 */

static void hm_range(const al__plot *p, double *lo, double *hi) {
    *lo = INFINITY;
    *hi = -INFINITY;
    for (int i = 0; i < p->hm_rows * p->hm_cols; i++)
        if (isfinite(p->hm[i])) {
            if (p->hm[i] < *lo) *lo = p->hm[i];
            if (p->hm[i] > *hi) *hi = p->hm[i];
        }
    if (!(*hi >= *lo)) {
        *lo = 0;
        *hi = 1;
    }
    if (*hi == *lo) {
        double d = fabs(*lo) > 0 ? fabs(*lo) * 0.05 : 0.5;
        *lo -= d;
        *hi += d;
    }
}

static void draw_heatmap(cairo_t *cr, const al__plot *p) {
    int R = p->hm_rows, C = p->hm_cols;
    double left = 80, top = 62, right = FIG_W - 130, bottom = FIG_H - 62;
    double cw = (right - left) / C, ch = (bottom - top) / R;
    double lo, hi;
    hm_range(p, &lo, &hi);
    char buf[64];
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++) {
            double v = p->hm[(size_t)r * C + c], rgb[3] = {0.8, 0.8, 0.8};
            if (isfinite(v)) colormap((v - lo) / (hi - lo), rgb);
            cairo_set_source_rgb(cr, rgb[0], rgb[1], rgb[2]);
            cairo_rectangle(cr, left + c * cw, top + r * ch, cw + 0.3, ch + 0.3);
            cairo_fill(cr);
            if (cw >= 34 && ch >= 16 && isfinite(v)) {
                double lum = 0.299 * rgb[0] + 0.587 * rgb[1] + 0.114 * rgb[2];
                if (lum > 0.5)
                    cairo_set_source_rgb(cr, 0, 0, 0);
                else
                    cairo_set_source_rgb(cr, 1, 1, 1);
                snprintf(buf, sizeof buf, "%.3g", v);
                text_at(cr, buf, left + (c + 0.5) * cw, top + (r + 0.5) * ch, ch > 24 ? 10 : 8.5,
                        0.5, 0.5, 0);
            }
        }
    cairo_set_source_rgb(cr, 0.15, 0.15, 0.15);
    cairo_set_line_width(cr, 1.0);
    cairo_rectangle(cr, left, top, right - left, bottom - top);
    cairo_stroke(cr);
    int cstep = C > 16 ? (C + 15) / 16 : 1, rstep = R > 24 ? (R + 23) / 24 : 1;
    for (int c = 0; c < C; c += cstep) {
        snprintf(buf, sizeof buf, "%d", c);
        text_at(cr, buf, left + (c + 0.5) * cw, bottom + 14, 11, 0.5, 0.5, 0);
    }
    for (int r = 0; r < R; r += rstep) {
        snprintf(buf, sizeof buf, "%d", r);
        text_at(cr, buf, left - 6, top + (r + 0.5) * ch, 11, 1.0, 0.5, 0);
    }
    if (p->xlabel) text_at(cr, p->xlabel, (left + right) / 2, bottom + 38, 13, 0.5, 0.5, 0);
    if (p->ylabel) {
        cairo_save(cr);
        cairo_translate(cr, left - 46, (top + bottom) / 2);
        cairo_rotate(cr, -M_PI / 2);
        text_at(cr, p->ylabel, 0, 0, 13, 0.5, 0.5, 0);
        cairo_restore(cr);
    }
    /* colour bar */
    double bx = right + 24, bw = 18;
    for (int i = 0; i < 200; i++) {
        double rgb[3];
        colormap(i / 199.0, rgb);
        cairo_set_source_rgb(cr, rgb[0], rgb[1], rgb[2]);
        double y = bottom - (bottom - top) * (i + 1) / 200.0;
        cairo_rectangle(cr, bx, y, bw, (bottom - top) / 200.0 + 0.5);
        cairo_fill(cr);
    }
    cairo_set_source_rgb(cr, 0.15, 0.15, 0.15);
    cairo_rectangle(cr, bx, top, bw, bottom - top);
    cairo_stroke(cr);
    double t[64];
    int nt = al__plot_ticks(lo, hi, 0, t, 64);
    for (int i = 0; i < nt; i++) {
        double y = bottom - (t[i] - lo) / (hi - lo) * (bottom - top);
        cairo_move_to(cr, bx + bw, y);
        cairo_line_to(cr, bx + bw + 4, y);
        cairo_stroke(cr);
        fmt_num(t[i], 0, buf, sizeof buf);
        text_at(cr, buf, bx + bw + 7, y, 10, 0, 0.5, 0);
    }
    if (p->hm_clabel) {
        cairo_save(cr);
        cairo_translate(cr, FIG_W - 14, (top + bottom) / 2);
        cairo_rotate(cr, -M_PI / 2);
        text_at(cr, p->hm_clabel, 0, 0, 12, 0.5, 0.5, 0);
        cairo_restore(cr);
    }
}

/* ---- one figure ---------------------------------------------------------------------------------
 */

static void draw(cairo_t *cr, const al__plot *p, const legend_layout *l) {
    cairo_set_source_rgb(cr, 1, 1, 1);
    cairo_paint(cr);
    title_block(cr, p);
    if (p->hm) {
        draw_heatmap(cr, p);
        return;
    }
    frame f = {.left = 92,
               .top = 58,
               .width = FIG_W - 92 - 28,
               .height = FIG_H - 58 - 62,
               .xlog = p->xlog,
               .ylog = p->ylog};
    data_range(p, &f);
    draw_axes(cr, &f, p);
    cairo_save(cr);
    cairo_rectangle(cr, f.left, f.top, f.width, f.height);
    cairo_clip(cr);
    draw_boxes(cr, &f, p);
    for (int s = 0; s < p->n_series; s++) draw_series(cr, &f, &p->series[s], s);
    cairo_restore(cr);
    draw_legend(cr, &f, p, l);
}

/* ---- output: memory streams, metadata, atomic files ---------------------------------------------
 */

typedef struct membuf {
    char *p;
    size_t n, cap;
    int failed;
} membuf;

static int mb_put(membuf *b, const void *data, size_t n) {
    if (b->failed) return -1;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->n + n + 1) cap *= 2;
        char *q = realloc(b->p, cap);
        if (!q) {
            b->failed = 1;
            return -1;
        }
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->n, data, n);
    b->n += n;
    b->p[b->n] = 0;
    return 0;
}

static void mb_printf(membuf *b, const char *fmt, ...) AL_PRINTF(2, 3);
static void mb_printf(membuf *b, const char *fmt, ...) {
    char small[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n < sizeof small) {
        mb_put(b, small, (size_t)n);
        return;
    }
    char *big = malloc((size_t)n + 1);
    if (!big) {
        b->failed = 1;
        return;
    }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    mb_put(b, big, (size_t)n);
    free(big);
}

static void mb_xml(membuf *b, const char *s) { /* untrusted labels: textsafe.h */
    if (!s) return;
    size_t cap = strlen(s) * 6 + 1;
    char *t = malloc(cap);
    if (!t) return;
    al__xml_text(s, t, cap);
    mb_put(b, t, strlen(t));
    free(t);
}

static void mb_nums(membuf *b, const double *v, int n) {
    for (int i = 0; i < n; i++) {
        if (isfinite(v[i]))
            mb_printf(b, "%s%.10g", i ? " " : "", v[i]);
        else
            mb_printf(b, "%snan", i ? " " : "");
    }
}

static cairo_status_t mb_write(void *closure, const unsigned char *data, unsigned int length) {
    return mb_put(closure, data, length) ? CAIRO_STATUS_WRITE_ERROR : CAIRO_STATUS_SUCCESS;
}

static void axis_meta(membuf *b, const char *name, const char *label, int logscale, double lo,
                      double hi, const double *given, int n_given) {
    double t[64];
    int nt = 0;
    if (n_given > 0) {
        for (int i = 0; i < n_given && nt < 64; i++)
            if (given[i] >= lo && given[i] <= hi) t[nt++] = given[i];
    } else {
        nt = al__plot_ticks(lo, hi, logscale, t, 64);
    }
    mb_printf(b, "<al:axis name=\"%s\" label=\"", name);
    mb_xml(b, label ? label : "");
    mb_printf(b, "\" scale=\"%s\" min=\"%.10g\" max=\"%.10g\" ticks=\"",
              logscale ? "log" : "linear", lo, hi);
    mb_nums(b, t, nt);
    mb_printf(b, "\"/>\n");
}

static void plot_meta(membuf *b, const al__plot *p) {
    mb_printf(b,
              "<metadata id=\"attnlim-plot\">\n<al:plot xmlns:al=\"https://attnlim.invalid/plot\" "
              "kind=\"%s\" title=\"",
              p->hm        ? "heatmap"
              : p->n_boxes ? "box"
                           : "lines");
    mb_xml(b, p->title ? p->title : "");
    mb_printf(b, "\" subtitle=\"");
    mb_xml(b, p->subtitle ? p->subtitle : "");
    mb_printf(b, "\">\n");
    if (p->hm) {
        double lo, hi;
        hm_range(p, &lo, &hi);
        axis_meta(b, "x", p->xlabel, 0, -0.5, p->hm_cols - 0.5, NULL, 0);
        axis_meta(b, "y", p->ylabel, 0, -0.5, p->hm_rows - 0.5, NULL, 0);
        mb_printf(b, "<al:heatmap rows=\"%d\" cols=\"%d\" min=\"%.10g\" max=\"%.10g\" label=\"",
                  p->hm_rows, p->hm_cols, lo, hi);
        mb_xml(b, p->hm_clabel ? p->hm_clabel : "");
        mb_printf(b, "\" values=\"");
        mb_nums(b, p->hm, p->hm_rows * p->hm_cols);
        mb_printf(b, "\"/>\n");
    } else {
        frame f = {.xlog = p->xlog, .ylog = p->ylog};
        data_range(p, &f);
        axis_meta(b, "x", p->xlabel, p->xlog, f.xmin, f.xmax, p->xticks, p->n_xticks);
        axis_meta(b, "y", p->ylabel, p->ylog, f.ymin, f.ymax, NULL, 0);
        for (int s = 0; s < p->n_series; s++) {
            const al__series *se = &p->series[s];
            mb_printf(b, "<al:series label=\"");
            mb_xml(b, se->label ? se->label : "");
            mb_printf(
                b, "\" style=\"%s%s%s%s%s\" n=\"%d\" x=\"", se->style & AL__S_LINE ? " line" : "",
                se->style & AL__S_MARKERS ? " markers" : "",
                se->style & AL__S_DASHED ? " dashed" : "", se->style & AL__S_THIN ? " thin" : "",
                se->style & AL__S_RING ? " ring" : "", se->n);
            mb_nums(b, se->x, se->n);
            mb_printf(b, "\" y=\"");
            mb_nums(b, se->y, se->n);
            mb_printf(b, "\"/>\n");
        }
        for (int i = 0; i < p->n_boxes; i++) {
            const al__box *bx = &p->boxes[i];
            mb_printf(b,
                      "<al:box x=\"%.10g\" lo=\"%.10g\" q1=\"%.10g\" median=\"%.10g\" q3=\"%.10g\" "
                      "hi=\"%.10g\"/>\n",
                      bx->x, bx->lo, bx->q1, bx->median, bx->q3, bx->hi);
        }
    }
    mb_printf(b, "</al:plot>\n</metadata>\n");
}

static int check_plot(const al__plot *p, const char *base, al_error *err) {
    if (p->hm) {
        if (p->hm_rows <= 0 || p->hm_cols <= 0 || p->hm_rows > 4096 || p->hm_cols > 4096)
            return al__err(err, AL_E_INVALID, "%s: heatmap of %d x %d cells", base, p->hm_rows,
                           p->hm_cols);
        return 0;
    }
    for (int s = 0; s < p->n_series; s++)
        if (p->series[s].n < 0 || (p->series[s].n > 0 && (!p->series[s].x || !p->series[s].y)))
            return al__err(err, AL_E_INVALID, "%s: series %d has no data", base, s);
    return 0;
}

int al__plot_write(const al__plot *p, const char *base, al_error *err) {
    int rc = check_plot(p, base, err);
    if (rc) return rc;
    char path[4096];
    membuf svg = {0}, png = {0};
    /* the legend's size first (text widths: a scratch surface) */
    cairo_surface_t *s = cairo_image_surface_create(CAIRO_FORMAT_RGB24, 1, 1);
    cairo_t *cr = cairo_create(s);
    legend_layout lay = legend_measure(cr, p);
    cairo_destroy(cr);
    cairo_surface_destroy(s);
    double H = fig_height(&lay);
    /* SVG */
    s = cairo_svg_surface_create_for_stream(mb_write, &svg, FIG_W, H);
    cr = cairo_create(s);
    draw(cr, p, &lay);
    cairo_destroy(cr);
    cairo_surface_finish(s);
    cairo_status_t st = cairo_surface_status(s);
    cairo_surface_destroy(s);
    if (st != CAIRO_STATUS_SUCCESS || svg.failed || !svg.p) {
        rc = al__err(err, AL_E_IO, "%s.svg: cairo could not draw the figure: %s", base,
                     cairo_status_to_string(st));
        goto done;
    }
    {
        /* insert the metadata before the closing tag */
        char *end = strstr(svg.p, "</svg>");
        if (!end) {
            rc = al__err(err, AL_E_IO, "%s.svg: cairo wrote no closing </svg>", base);
            goto done;
        }
        membuf out = {0};
        mb_put(&out, svg.p, (size_t)(end - svg.p));
        plot_meta(&out, p);
        mb_put(&out, end, strlen(end));
        if (out.failed) {
            free(out.p);
            rc = al__err(err, AL_E_NOMEM, "%s.svg: out of memory", base);
            goto done;
        }
        snprintf(path, sizeof path, "%s.svg", base);
        rc = al__write_file_atomic(path, out.p, out.n, err);
        free(out.p);
        if (rc) goto done;
    }
    /* PNG */
    s = cairo_image_surface_create(CAIRO_FORMAT_RGB24, (int)(FIG_W * PNG_SCALE),
                                   (int)(H * PNG_SCALE));
    cr = cairo_create(s);
    cairo_scale(cr, PNG_SCALE, PNG_SCALE);
    draw(cr, p, &lay);
    cairo_destroy(cr);
    cairo_surface_flush(s);
    st = cairo_surface_write_to_png_stream(s, mb_write, &png);
    cairo_surface_destroy(s);
    if (st != CAIRO_STATUS_SUCCESS || png.failed) {
        rc = al__err(err, AL_E_IO, "%s.png: cairo could not write the PNG: %s", base,
                     cairo_status_to_string(st));
        goto done;
    }
    snprintf(path, sizeof path, "%s.png", base);
    rc = al__write_file_atomic(path, png.p, png.n, err);
done:
    free(svg.p);
    free(png.p);
    return rc;
}
