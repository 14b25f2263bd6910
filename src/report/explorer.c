/* explorer.c: the interactive per-head explorer (explorer.h). The data go into one
 * <script type="application/json"> element (strings through al__json_string_html, numbers to
 * 6 significant digits (weights 5), NaN as null); a short inline script builds the heatmaps, the
 * metric row, the sparklines and the pattern from it with createElement/textContent only. */
#include "explorer.h"

#include "textsafe.h"

#include <math.h>
#include <string.h>

static const char ex_css[] =
    "<style>#al-ex{--c:15px;--p:15px;border-top:2px solid #ccc;margin-top:2em}"
    ".al-hms{display:flex;flex-wrap:wrap;gap:14px 22px}.al-hm{font-size:12px}"
    ".al-hm-t{font-weight:bold;max-width:22em;min-height:2.8em}.al-hm-l{color:#555}"
    ".al-grid{display:grid;gap:1px;align-items:center;margin:4px 0}"
    ".al-rl,.al-cl{font-size:9px;color:#666;text-align:center}"
    ".al-cell{width:var(--c);height:var(--c);padding:0;border:0;margin:0;cursor:pointer}"
    ".al-cell.sel{outline:3px solid #d62728;outline-offset:-1px;position:relative;z-index:1}"
    ".al-cell:focus-visible{box-shadow:0 0 0 3px #000}"
    "#al-ex-metrics td,#al-ex-metrics th{font-size:0.85em}"
    ".al-sparks{display:flex;flex-wrap:wrap;gap:12px}.al-spark{margin:0}"
    ".al-spark svg{border:1px solid #ddd;background:#fff}"
    ".al-line{fill:none;stroke:#1f77b4;stroke-width:1.5}.al-dot{fill:#1f77b4}"
    ".al-pat{display:grid;gap:0;justify-content:start;font:10px DejaVu Sans Mono,monospace;"
    "overflow:auto;max-width:100%}"
    ".al-pat:focus-visible{outline:2px solid #000}"
    ".al-ck{writing-mode:vertical-rl;transform:rotate(180deg);white-space:pre;max-height:8em;"
    "overflow:hidden;text-align:left}"
    ".al-rk{white-space:pre;text-align:right;padding-right:4px;max-width:11em;overflow:hidden}"
    ".al-pc{width:var(--p);height:var(--p)}.al-pc.cur{outline:2px solid #d62728;"
    "position:relative}"
    ".al-mask{background:repeating-linear-gradient(45deg,#eee 0 2px,#fff 2px 4px)}"
    "#al-ex-weight{font-family:DejaVu Sans Mono,monospace;min-height:1.4em}"
    "@media print{#al-ex{display:none}}</style>\n";

static const char ex_js[] =
    "(function () {\n"
    " 'use strict';\n"
    " var D = JSON.parse(document.getElementById('al-ex-data').textContent);\n"
    " var NL = D.layers, NH = D.heads, H = NL * NH, cur = -1, grids = [];\n"
    " var SVG = 'http://www.w3.org/2000/svg';\n"
    " function $(id) { return document.getElementById(id); }\n"
    " function el(t, c, x) {\n"
    "  var e = document.createElement(t);\n"
    "  if (c) e.className = c;\n"
    "  if (x != null) e.textContent = x;\n"
    "  return e;\n"
    " }\n"
    " function fmt(v) {\n"
    "  if (v == null) return 'n/a';\n"
    "  var a = Math.abs(v);\n"
    "  if (a !== 0 && (a < 1e-3 || a >= 1e5)) return v.toExponential(3);\n"
    "  return String(+v.toPrecision(4));\n"
    " }\n"
    " var RAMP = [[255, 255, 217], [161, 218, 180], [65, 182, 196], [34, 94, 168], [8, 29, 88]];\n"
    " function ramp(t) {\n"
    "  t = Math.max(0, Math.min(1, t)) * (RAMP.length - 1);\n"
    "  var i = Math.min(Math.floor(t), RAMP.length - 2), f = t - i, c = [];\n"
    "  for (var k = 0; k < 3; k++) c.push(Math.round(RAMP[i][k] + (RAMP[i + 1][k] - RAMP[i][k]) * "
    "f));\n"
    "  return 'rgb(' + c.join(',') + ')';\n"
    " }\n"
    " function headName(h) { return 'layer ' + Math.floor(h / NH) + ' head ' + (h % NH); }\n"
    " function vis(s) {\n"
    "  return s.replace(/ /g, '\\u2423').replace(/\\n/g, '\\u21b5').replace(/\\t/g, '\\u21e5');\n"
    " }\n"
    " function range(v) {\n"
    "  var lo = Infinity, hi = -Infinity;\n"
    "  v.forEach(function (x) { if (x != null) { lo = Math.min(lo, x); hi = Math.max(hi, x); } "
    "});\n"
    "  return [lo, hi];\n"
    " }\n"
    " function buildGrid(m) {\n"
    "  var r = range(m.v), box = el('div', 'al-hm'), cells = [];\n"
    "  box.appendChild(el('div', 'al-hm-t', m.label));\n"
    "  var g = el('div', 'al-grid');\n"
    "  g.setAttribute('role', 'grid');\n"
    "  g.setAttribute('aria-label', m.label + ': rows are layers, columns heads; arrow keys "
    "move');\n"
    "  g.style.gridTemplateColumns = '2.2em repeat(' + NH + ', var(--c))';\n"
    "  g.appendChild(el('span', 'al-rl', ''));\n"
    "  for (var k = 0; k < NH; k++) g.appendChild(el('span', 'al-cl', NH <= 16 || k % 4 === 0 ? "
    "String(k) : ''));\n"
    "  for (var h = 0; h < H; h++) {\n"
    "   if (h % NH === 0) g.appendChild(el('span', 'al-rl', String(h / NH)));\n"
    "   var v = m.v[h], b = el('button', 'al-cell'), lab = headName(h) + ': ' + m.key + ' = ' + "
    "fmt(v);\n"
    "   b.type = 'button';\n"
    "   b.dataset.head = h;\n"
    "   b.style.background = v == null ? '#ccc' : ramp(r[1] > r[0] ? (v - r[0]) / (r[1] - r[0]) : "
    "0.5);\n"
    "   b.title = lab;\n"
    "   b.setAttribute('aria-label', lab);\n"
    "   b.tabIndex = h ? -1 : 0;\n"
    "   g.appendChild(b);\n"
    "   cells.push(b);\n"
    "  }\n"
    "  g.addEventListener('click', function (e) {\n"
    "   var t = e.target.closest('.al-cell');\n"
    "   if (t) choose(+t.dataset.head);\n"
    "  });\n"
    "  g.addEventListener('keydown', function (e) {\n"
    "   var t = e.target.closest('.al-cell');\n"
    "   if (!t) return;\n"
    "   var h = +t.dataset.head, l = Math.floor(h / NH), k = h % NH;\n"
    "   var d = {ArrowLeft: [0, -1], ArrowRight: [0, 1], ArrowUp: [-1, 0], ArrowDown: [1, 0],\n"
    "       Home: [0, -k], End: [0, NH - 1 - k]}[e.key];\n"
    "   if (!d) return;\n"
    "   e.preventDefault();\n"
    "   l = Math.max(0, Math.min(NL - 1, l + d[0]));\n"
    "   k = Math.max(0, Math.min(NH - 1, k + d[1]));\n"
    "   choose(l * NH + k);\n"
    "   cells[l * NH + k].focus();\n"
    "  });\n"
    "  box.appendChild(g);\n"
    "  box.appendChild(el('div', 'al-hm-l', r[0] <= r[1] ? 'light ' + fmt(r[0]) + ' to dark ' + "
    "fmt(r[1])\n"
    "                          : 'not computed'));\n"
    "  $('al-ex-grids').appendChild(box);\n"
    "  grids.push(cells);\n"
    " }\n"
    " function metricsRow(h) {\n"
    "  var tb = $('al-ex-metrics'), hr = el('tr'), vr = el('tr');\n"
    "  tb.textContent = '';\n"
    "  D.metrics.forEach(function (m) {\n"
    "   hr.appendChild(el('th', null, m.key));\n"
    "   var td = el('td', null, fmt(m.v[h]));\n"
    "   td.dataset.metric = m.key;\n"
    "   vr.appendChild(td);\n"
    "  });\n"
    "  if (D.flags) {\n"
    "   hr.appendChild(el('th', null, 'flags'));\n"
    "   var td = el('td', null, D.flags[h] || 'none');\n"
    "   td.dataset.metric = 'flags';\n"
    "   vr.appendChild(td);\n"
    "  }\n"
    "  tb.appendChild(hr);\n"
    "  tb.appendChild(vr);\n"
    " }\n"
    " function spark(c, h) {\n"
    "  var ys = c.v[h], w = 240, ht = 70, p = 8, xs = c.x.map(Math.log), pts = [];\n"
    "  var x0 = Math.min.apply(null, xs), x1 = Math.max.apply(null, xs), r = range(ys);\n"
    "  var fig = el('figure', 'al-spark'), svg = document.createElementNS(SVG, 'svg'), desc = [];\n"
    "  svg.setAttribute('viewBox', '0 0 ' + w + ' ' + ht);\n"
    "  svg.setAttribute('width', w);\n"
    "  svg.setAttribute('height', ht);\n"
    "  svg.setAttribute('role', 'img');\n"
    "  for (var i = 0; i < ys.length; i++) {\n"
    "   desc.push('N = ' + c.x[i] + ': ' + fmt(ys[i]));\n"
    "   if (ys[i] == null) continue;\n"
    "   var X = p + (x1 > x0 ? (xs[i] - x0) / (x1 - x0) : 0.5) * (w - 2 * p);\n"
    "   var Y = ht - p - (r[1] > r[0] ? (ys[i] - r[0]) / (r[1] - r[0]) : 0.5) * (ht - 2 * p);\n"
    "   pts.push(X.toFixed(1) + ',' + Y.toFixed(1));\n"
    "   var dot = document.createElementNS(SVG, 'circle'), tt = document.createElementNS(SVG, "
    "'title');\n"
    "   dot.setAttribute('cx', X.toFixed(1));\n"
    "   dot.setAttribute('cy', Y.toFixed(1));\n"
    "   dot.setAttribute('r', 2.5);\n"
    "   dot.setAttribute('class', 'al-dot');\n"
    "   dot.dataset.n = c.x[i];\n"
    "   dot.dataset.v = ys[i];\n"
    "   tt.textContent = 'N = ' + c.x[i] + ': ' + c.name + ' = ' + fmt(ys[i]);\n"
    "   dot.appendChild(tt);\n"
    "   svg.appendChild(dot);\n"
    "  }\n"
    "  var line = document.createElementNS(SVG, 'polyline');\n"
    "  line.setAttribute('points', pts.join(' '));\n"
    "  line.setAttribute('class', 'al-line');\n"
    "  svg.insertBefore(line, svg.firstChild);\n"
    "  svg.setAttribute('aria-label', c.name + ' against N for ' + headName(h) + ': ' + "
    "desc.join('; '));\n"
    "  fig.appendChild(svg);\n"
    "  fig.appendChild(el('figcaption', null, c.name + ' against N = ' + c.x[0] + ' to ' +\n"
    "    c.x[c.x.length - 1] + ' (log x): ' +\n"
    "                       (r[0] <= r[1] ? fmt(r[0]) + ' to ' + fmt(r[1]) : 'not computed')));\n"
    "  return fig;\n"
    " }\n"
    " function sparks(h) {\n"
    "  var box = $('al-ex-sparks');\n"
    "  box.textContent = '';\n"
    "  D.curves.forEach(function (c) { box.appendChild(spark(c, h)); });\n"
    " }\n"
    " var pat = {t: 0, j: 0, h: -1};\n"
    " function q(s) { return '\\u201c' + vis(s) + '\\u201d'; }\n"
    " function showWeight(t, j) {\n"
    "  var W = D.window.tokens.length, tk = D.window.tokens, v = D.window.w[pat.h][t * W + j];\n"
    "  var masked = D.window.causal && j > t;\n"
    "  pat.t = t;\n"
    "  pat.j = j;\n"
    "  var old = $('al-ex-pattern').querySelector('.al-pc.cur');\n"
    "  if (old) old.classList.remove('cur');\n"
    "  var c = $('al-ex-pattern').querySelector('.al-pc[data-t=\"' + t + '\"][data-j=\"' + j + "
    "'\"]');\n"
    "  if (c) c.classList.add('cur');\n"
    "  $('al-ex-weight').textContent = 'query ' + t + ' ' + q(tk[t]) + ' \\u2192 key ' + j + ' ' + "
    "q(tk[j]) +\n"
    "                  ': weight ' + (masked ? '0 (masked: causal)' : fmt(v));\n"
    " }\n"
    " function pattern(h) {\n"
    "  var box = $('al-ex-pattern');\n"
    "  if (!D.window) return;\n"
    "  var W = D.window.tokens.length, tk = D.window.tokens, w = D.window.w[h];\n"
    "  pat.h = h;\n"
    "  box.textContent = '';\n"
    "  var g = el('div', 'al-pat');\n"
    "  g.style.gridTemplateColumns = 'max-content repeat(' + W + ', var(--p))';\n"
    "  g.tabIndex = 0;\n"
    "  g.setAttribute('role', 'img');\n"
    "  g.setAttribute('aria-label', 'attention pattern of ' + headName(h) +\n"
    "                 ': arrow keys move over the cells, the weight is read out below');\n"
    "  g.appendChild(el('span', 'al-corner', 'query \\u2193 key \\u2192'));\n"
    "  for (var j = 0; j < W; j++) {\n"
    "   var s = el('span', 'al-ck', vis(tk[j]));\n"
    "   s.title = 'key ' + j + ': ' + q(tk[j]);\n"
    "   g.appendChild(s);\n"
    "  }\n"
    "  for (var t = 0; t < W; t++) {\n"
    "   var rl = el('span', 'al-rk', vis(tk[t]));\n"
    "   rl.title = 'query ' + t + ': ' + q(tk[t]);\n"
    "   g.appendChild(rl);\n"
    "   for (j = 0; j < W; j++) {\n"
    "    var c = el('span', 'al-pc'), v = w[t * W + j], masked = D.window.causal && j > t;\n"
    "    c.dataset.t = t;\n"
    "    c.dataset.j = j;\n"
    "    if (masked) c.classList.add('al-mask');\n"
    "    else c.style.background = v == null ? '#ccc' : ramp(v);\n"
    "    c.title = q(tk[t]) + ' \\u2192 ' + q(tk[j]) + ': ' + (masked ? 'masked' : fmt(v));\n"
    "    g.appendChild(c);\n"
    "   }\n"
    "  }\n"
    "  g.addEventListener('mouseover', function (e) {\n"
    "   var c = e.target.closest('.al-pc');\n"
    "   if (c) showWeight(+c.dataset.t, +c.dataset.j);\n"
    "  });\n"
    "  g.addEventListener('keydown', function (e) {\n"
    "   var d = {ArrowLeft: [0, -1], ArrowRight: [0, 1], ArrowUp: [-1, 0], ArrowDown: [1, "
    "0]}[e.key];\n"
    "   if (!d) return;\n"
    "   e.preventDefault();\n"
    "   showWeight(Math.max(0, Math.min(W - 1, pat.t + d[0])), Math.max(0, Math.min(W - 1, pat.j + "
    "d[1])));\n"
    "  });\n"
    "  box.appendChild(g);\n"
    "  showWeight(Math.min(pat.t, W - 1), Math.min(pat.j, W - 1));\n"
    " }\n"
    " function choose(h) {\n"
    "  if (h === cur || h < 0 || h >= H) return;\n"
    "  cur = h;\n"
    "  grids.forEach(function (cells) {\n"
    "   cells.forEach(function (b, i) {\n"
    "    b.classList.toggle('sel', i === h);\n"
    "    b.setAttribute('aria-selected', i === h ? 'true' : 'false');\n"
    "    b.tabIndex = i === h ? 0 : -1;\n"
    "   });\n"
    "  });\n"
    "  $('al-ex-title').textContent = headName(h);\n"
    "  $('al-ex').dataset.head = h;\n"
    "  metricsRow(h);\n"
    "  sparks(h);\n"
    "  pattern(h);\n"
    " }\n"
    " D.metrics.forEach(function (m) { if (m.map) buildGrid(m); });\n"
    " var first = -1;\n"
    " for (var h0 = 0; h0 < H && first < 0; h0++) if (D.flags && D.flags[h0]) first = h0;\n"
    " for (h0 = 0; h0 < H && first < 0; h0++)\n"
    "  if (D.metrics.some(function (m) { return m.v[h0] != null; })) first = h0;\n"
    " choose(first < 0 ? 0 : first);\n"
    "})();\n";

static void put(al__afile *f, const char *s, al_error *err) {
    al__afile_write(f, s, strlen(s), err);
}

static void num(al__afile *f, double v, int digits, al_error *err) {
    if (isfinite(v))
        al__afile_printf(f, err, "%.*g", digits, v);
    else
        put(f, "null", err);
}

static void jstr(al__afile *f, const char *s, al_error *err) {
    if (s)
        al__json_string_html(f, s, strlen(s), err);
    else
        put(f, "null", err);
}

static void ex_metrics(al__afile *f, const al__explorer *x, int H, al_error *err) {
    put(f, ",\"metrics\":[", err);
    for (int m = 0; m < x->n_metrics; m++) {
        put(f, m ? ",{\"key\":" : "{\"key\":", err);
        jstr(f, x->metric_key[m], err);
        put(f, ",\"label\":", err);
        jstr(f, x->metric_label[m], err);
        al__afile_printf(f, err, ",\"map\":%d,\"v\":[", x->metric_map[m] ? 1 : 0);
        for (int h = 0; h < H; h++) {
            if (h) put(f, ",", err);
            num(f, x->metric[m][h], 6, err);
        }
        put(f, "]}", err);
    }
    put(f, "]", err);
}

static void ex_curves(al__afile *f, const al__explorer *x, int H, al_error *err) {
    put(f, ",\"curves\":[", err);
    for (int c = 0; c < x->n_curves; c++) {
        const al__explorer_curve *k = &x->curve[c];
        put(f, c ? ",{\"name\":" : "{\"name\":", err);
        jstr(f, k->name, err);
        put(f, ",\"x\":[", err);
        for (int i = 0; i < k->n; i++) al__afile_printf(f, err, "%s%d", i ? "," : "", k->x[i]);
        put(f, "],\"v\":[", err); /* per head: [n] */
        for (int h = 0; h < H; h++) {
            put(f, h ? ",[" : "[", err);
            for (int i = 0; i < k->n; i++) {
                if (i) put(f, ",", err);
                num(f, k->v[(size_t)i * H + h], 5, err);
            }
            put(f, "]", err);
        }
        put(f, "]}", err);
    }
    put(f, "]", err);
}

static void ex_window(al__afile *f, const al__explorer *x, int H, al_error *err) {
    if (!x->weights || x->W <= 0) {
        put(f, ",\"window\":null", err);
        return;
    }
    size_t W = (size_t)x->W;
    al__afile_printf(f, err, ",\"window\":{\"causal\":%s,\"tokens\":[",
                     x->causal ? "true" : "false");
    for (size_t t = 0; t < W; t++) {
        if (t) put(f, ",", err);
        jstr(f, x->token[t], err);
    }
    put(f, "],\"ids\":[", err);
    for (size_t t = 0; x->token_id && t < W; t++)
        al__afile_printf(f, err, "%s%d", t ? "," : "", x->token_id[t]);
    put(f, "],\"w\":[", err); /* per head: [W * W] row-major */
    for (int h = 0; h < H; h++) {
        const float *w = x->weights + (size_t)h * W * W;
        put(f, h ? ",[" : "[", err);
        for (size_t i = 0; i < W * W; i++) {
            if (i) put(f, ",", err);
            num(f, w[i], 5, err);
        }
        put(f, "]", err);
    }
    put(f, "]}", err);
}

static void para(al__afile *f, const char *cls, const char *text, al_error *err) {
    if (!text) return;
    al__afile_printf(f, err, "<p class=\"%s\">", cls);
    al__html_escape(f, text, err);
    put(f, "</p>\n", err);
}

int al__head_flags(double max_w, double ent, double sink, char *buf, size_t size) {
    int n = 0;
    size_t k = 0;
    buf[0] = 0;
    const char *f[3] = {NULL, NULL, NULL};
    if (max_w > AL__FLAG_COLLAPSED_MAX_W || ent < AL__FLAG_COLLAPSED_ENT) f[n++] = "collapsed";
    if (ent > AL__FLAG_VANISHING_ENT) f[n++] = "vanishing";
    if (sink > AL__FLAG_SINK) f[n++] = "sink";
    for (int i = 0; i < n && k < size; i++)
        k += (size_t)snprintf(buf + k, size - k, "%s%s", i ? " " : "", f[i]);
    return n;
}

int al__explorer_html(al__afile *f, const al__explorer *x, al_error *err) {
    int H = x->n_layer * x->n_head;
    if (x->n_layer <= 0 || x->n_head <= 0 || x->n_metrics > AL__EXPLORER_MAX_METRICS ||
        x->n_curves > AL__EXPLORER_MAX_CURVES)
        return al__err(err, AL_E_INVALID, "explorer: bad shape (%d layers, %d heads)", x->n_layer,
                       x->n_head);
    put(f, ex_css, err);
    put(f,
        "<section id=\"al-ex\" aria-labelledby=\"al-ex-h\"><h2 id=\"al-ex-h\">Explore a "
        "head</h2>\n<p>Choose a head: click a cell of any heatmap, or Tab to a heatmap and move "
        "with the arrow keys. Its metrics, its curves against N and its attention pattern "
        "appear below (hover over the pattern, or focus it and use the arrow keys, to read a "
        "weight). The static figures further down show the same values for print.</p>\n"
        "<noscript><p>The explorer needs JavaScript; the static figures show the same "
        "values.</p></noscript>\n<div id=\"al-ex-grids\" class=\"al-hms\"></div>\n"
        "<h3 id=\"al-ex-title\" aria-live=\"polite\">no head chosen</h3>\n",
        err);
    para(f, "al-exnote", x->head_note, err);
    put(f, "<table id=\"al-ex-metrics\"></table>\n", err);
    para(f, "al-exnote", x->flags_note, err);
    put(f, "<div id=\"al-ex-sparks\" class=\"al-sparks\"></div>\n", err);
    if (x->weights && x->W > 0) {
        put(f, "<h4>Attention pattern</h4>\n", err);
        para(f, "al-exnote", x->window_note, err);
        put(f,
            "<p class=\"al-exnote\">Rows: queries, columns: keys; colour: the weight, linear from "
            "0 (light) to 1 (dark); hatched: masked (a causal head cannot see later tokens); "
            "\xE2\x90\xA3 = space, \xE2\x86\xB5 = newline.</p>\n<p id=\"al-ex-weight\" "
            "aria-live=\"polite\"></p>\n<div id=\"al-ex-pattern\"></div>\n",
            err);
    }
    al__afile_printf(f, err,
                     "<script type=\"application/json\" id=\"al-ex-data\">{\"layers\":%d,"
                     "\"heads\":%d",
                     x->n_layer, x->n_head);
    ex_metrics(f, x, H, err);
    if (x->flags) {
        put(f, ",\"flags\":[", err);
        for (int h = 0; h < H; h++) {
            if (h) put(f, ",", err);
            jstr(f, x->flags[h] ? x->flags[h] : "", err);
        }
        put(f, "]", err);
    } else
        put(f, ",\"flags\":null", err);
    ex_curves(f, x, H, err);
    ex_window(f, x, H, err);
    put(f, "}</script>\n<script>\n", err);
    put(f, ex_js, err);
    put(f, "</script></section>\n", err);
    return f->failed ? AL_E_IO : 0;
}

int al__explorer_page(const char *path, const char *title, const char *intro, const al__explorer *x,
                      al_error *err) {
    al__afile f;
    int rc = al__afile_open(&f, path, err);
    if (rc) return rc;
    put(&f, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>", err);
    al__html_escape(&f, title, err);
    put(&f,
        "</title>\n<style>body{font-family:DejaVu Sans,Helvetica,Arial,sans-serif;"
        "max-width:1100px;margin:2em auto;padding:0 1em;color:#222;line-height:1.45}"
        "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #bbb;padding:3px "
        "7px;text-align:left}th{background:#eee}.al-exnote{color:#333}</style></head><body>\n<h1>",
        err);
    al__html_escape(&f, title, err);
    put(&f, "</h1>\n", err);
    para(&f, "intro", intro, err);
    if ((rc = al__explorer_html(&f, x, err))) {
        al__afile_abort(&f);
        return rc;
    }
    put(&f, "</body></html>\n", err);
    return al__afile_commit(&f, err);
}
