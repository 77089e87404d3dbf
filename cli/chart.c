/*
 * chart.c - the SVG charts of the pipeline-run program (chart.h): one
 * frame (title, plot area, grid, two axes, legend) shared by the chart of a
 * split-size sweep, of a schedule sweep and of training per epoch.
 */
#include "cli/chart.h"

#include <math.h>

#include "cli/outputs.h"

/* A "nice" axis maximum: 1, 2 or 5 times a power of ten, >= v. */
static double nice_max(double v)
{
    if (!(v > 0)) return 1;
    double p = pow(10, floor(log10(v)));
    for (int i = 0; i < 3; i++) {
        double m = (double[]){1, 2, 5}[i] * p;
        if (m >= v) return m;
    }
    return 10 * p;
}

static void xml_escape(FILE *f, const char *s)
{
    for (; *s; s++) {
        switch (*s) {
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '&': fputs("&amp;", f); break;
        case '"': fputs("&quot;", f); break;
        default: fputc(*s, f);
        }
    }
}

/* ---- SVG charts ------------------------------------------------------------------ */

/* The frame the charts share: a 720 x 440 picture, a plot area, the title, a
 * grid of five lines with left labels and right (0..1 scaled) labels. */
typedef struct chart {
    FILE *f;
    double W, H, L, T, pw, ph;
} chart;

static void chart_begin(chart *c, FILE *f, const char *title, const char *what)
{
    *c = (chart){f, 720, 440, 80, 50, 720 - 80 - 80, 440 - 50 - 60};
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
               "viewBox=\"0 0 %.0f %.0f\" font-family=\"sans-serif\" font-size=\"12\">\n",
            c->W, c->H, c->W, c->H);
    fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
    fprintf(f, "<text x=\"%.0f\" y=\"24\" font-size=\"15\" text-anchor=\"middle\">", c->W / 2);
    xml_escape(f, title);
    fprintf(f, ": %s</text>\n", what);
}

/* Grid lines at ymax * i / 5 labelled with left_fmt (a double), the right axis
 * labelled right_scale * i / 5 with right_fmt in right_color; the frame; the
 * x and both y axis names. */
static void chart_axes(const chart *c, double ymax, const char *left_fmt, const char *right_fmt,
                       double right_scale, const char *xlabel, const char *left,
                       const char *left_color, const char *right, const char *right_color)
{
    FILE *f = c->f;
    for (int i = 0; i <= 5; i++) {
        double y = c->T + c->ph * (1 - i / 5.0);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n",
                c->L, y, c->L + c->pw, y);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">", c->L - 6, y + 4);
        fprintf(f, left_fmt, ymax * i / 5);
        fprintf(f, "</text>\n<text x=\"%.1f\" y=\"%.1f\" fill=\"%s\">", c->L + c->pw + 6,
                y + 4, right_color);
        fprintf(f, right_fmt, right_scale * i / 5);
        fprintf(f, "</text>\n");
    }
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" "
               "stroke=\"#333\"/>\n",
            c->L, c->T, c->pw, c->ph);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n",
            c->L + c->pw / 2, c->H - 16, xlabel);
    fprintf(f, "<text transform=\"translate(22 %.1f) rotate(-90)\" text-anchor=\"middle\" "
               "fill=\"%s\">%s</text>\n",
            c->T + c->ph / 2, left_color, left);
    fprintf(f, "<text transform=\"translate(%.1f %.1f) rotate(90)\" text-anchor=\"middle\" "
               "fill=\"%s\">%s</text>\n",
            c->W - 20, c->T + c->ph / 2, right_color, right);
}

/* A series' style and its legend entry (the k-th, at x). */
typedef struct chart_series {
    const char *color, *dash, *label;
    int which;
} chart_series;

static void series_open(const chart *c, const chart_series *s)
{
    fprintf(c->f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\"%s%s%s points=\"",
            s->color, s->dash[0] ? " stroke-dasharray=\"" : "", s->dash, s->dash[0] ? "\"" : "");
}

static void series_legend(const chart *c, const chart_series *s, int k, double x)
{
    double ly = c->T + 14 + 16.0 * k;
    fprintf(c->f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
                  "stroke-width=\"2\"%s%s%s/>\n",
            x, ly, x + 24, ly, s->color, s->dash[0] ? " stroke-dasharray=\"" : "", s->dash,
            s->dash[0] ? "\"" : "");
    fprintf(c->f, "<text x=\"%.1f\" y=\"%.1f\">%s</text>\n", x + 30, ly + 4, s->label);
}

/* The row after prev (-1: the first) by increasing split size, rows of one
 * size in their order; -1 after the last. */
static int next_by_size(const pp_sweep_row *rows, int n, int prev)
{
    int best = -1;
    for (int i = 0; i < n; i++) {
        const bool after = prev < 0 || rows[i].split_size > rows[prev].split_size ||
                           (rows[i].split_size == rows[prev].split_size && i > prev);
        if (after && (best < 0 || rows[i].split_size < rows[best].split_size)) best = i;
    }
    return best;
}

bool pp_cli_write_sweep_svg(const char *path, const char *title, const pp_sweep_row *rows, int n)
{
    pp_cli_output out;
    FILE *f = pp_cli_output_open(&out, path);
    if (!f) return false;
    chart c;
    chart_begin(&c, f, title, "throughput and bubble against split size");
    const double L = c.L, T = c.T, pw = c.pw, ph = c.ph;
    double xmax = 1, ymax = 0;
    for (int i = 0; i < n; i++) {
        if (rows[i].split_size > xmax) xmax = rows[i].split_size;
        if (!rows[i].failed && rows[i].images_per_s > ymax) ymax = rows[i].images_per_s;
    }
    ymax = nice_max(ymax * 1.05);
    /* log2 x axis when the sizes span a wide range, else linear */
    bool logx = xmax >= 16;
    double xmin = logx ? 1 : 0;
#define XPOS(v) (L + pw * (logx ? log2((double)(v)) / log2(xmax > 1 ? xmax : 2) \
                                : ((double)(v) - xmin) / (xmax - xmin)))
#define YPOS(v) (T + ph * (1 - (v) / ymax))
#define BPOS(v) (T + ph * (1 - (v)))
    chart_axes(&c, ymax, "%.0f", "%.0f%%", 100, logx ? "split size (samples per micro-batch, log scale)"
                                                    : "split size (samples per micro-batch)",
               "images/s", "#1f5fa8", "bubble", "#b34");
    for (int i = 0; i < n; i++) {
        double x = XPOS(rows[i].split_size);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%d</text>\n", x, T + ph + 18,
                rows[i].split_size);
        if (!rows[i].failed) continue; /* a split size that could not run: a cross, and why */
        fprintf(f, "<g stroke=\"#c00\" stroke-width=\"2\"><line x1=\"%.1f\" y1=\"%.1f\" "
                   "x2=\"%.1f\" y2=\"%.1f\"/><line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" "
                   "y2=\"%.1f\"/></g>\n",
                x - 5, T + ph - 15, x + 5, T + ph - 5, x - 5, T + ph - 5, x + 5, T + ph - 15);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" fill=\"#c00\" text-anchor=\"middle\" "
                   "font-size=\"10\">failed<title>",
                x, T + ph - 20);
        xml_escape(f, rows[i].error);
        fprintf(f, "</title></text>\n");
    }
    static const chart_series series[] = {{"#1f5fa8", "", "images/s (measured)", 0},
                                          {"#b34", "", "bubble (measured)", 1},
                                          {"#b34", "6 4", "bubble (predicted)", 2}};
    for (int k = 0; k < 3; k++) {
        series_open(&c, &series[k]);
        /* by increasing split size, whatever the list's order: lines that do not zig-zag */
        for (int i = next_by_size(rows, n, -1); i >= 0; i = next_by_size(rows, n, i)) {
            if (rows[i].failed) continue;
            double v = series[k].which == 0   ? YPOS(rows[i].images_per_s)
                       : series[k].which == 1 ? BPOS(rows[i].bubble)
                                              : BPOS(rows[i].bubble_predicted);
            fprintf(f, "%.1f,%.1f ", XPOS(rows[i].split_size), v);
        }
        fprintf(f, "\"/>\n");
        for (int i = 0; i < n && series[k].which < 2; i++) {
            if (rows[i].failed) continue;
            double v = series[k].which == 0 ? YPOS(rows[i].images_per_s) : BPOS(rows[i].bubble);
            fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>\n",
                    XPOS(rows[i].split_size), v, series[k].color);
        }
        series_legend(&c, &series[k], k, L + 10);
    }
#undef XPOS
#undef YPOS
#undef BPOS
    fprintf(f, "</svg>\n");
    return pp_cli_output_commit(&out);
}

bool pp_cli_write_training_svg(const char *path, const char *title, const pp_epoch_row *rows,
                               int n)
{
    pp_cli_output out;
    FILE *f = pp_cli_output_open(&out, path);
    if (!f) return false;
    chart c;
    chart_begin(&c, f, title, "loss and test accuracy per epoch");
    const double L = c.L, T = c.T, pw = c.pw, ph = c.ph;
    double ymax = 0;
    for (int i = 0; i < n; i++) {
        if (rows[i].train_loss > ymax) ymax = rows[i].train_loss;
        if (rows[i].evaluated && rows[i].test_loss > ymax) ymax = rows[i].test_loss;
    }
    ymax = nice_max(ymax * 1.05);
    const int emax = n > 1 ? rows[n - 1].epoch : 2, emin = n > 1 ? rows[0].epoch : 1;
#define XPOS(e) (L + pw * ((double)(e) - emin) / (double)(emax > emin ? emax - emin : 1))
#define YPOS(v) (T + ph * (1 - (v) / ymax))
#define APOS(v) (T + ph * (1 - (v)))
    chart_axes(&c, ymax, "%.2f", "%.1f", 1, "epoch", "loss", "#333", "test accuracy", "#2a7");
    for (int i = 0; i < n; i++)
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%d</text>\n",
                XPOS(rows[i].epoch), T + ph + 18, rows[i].epoch);
    static const chart_series series[] = {{"#1f5fa8", "", "train loss", 0},
                                          {"#b34", "6 4", "test loss", 1},
                                          {"#2a7", "", "test accuracy", 2}};
    for (int k = 0; k < 3; k++) {
        series_open(&c, &series[k]);
        for (int i = 0; i < n; i++) {
            if (series[k].which > 0 && !rows[i].evaluated) continue;
            double v = series[k].which == 0   ? YPOS(rows[i].train_loss)
                       : series[k].which == 1 ? YPOS(rows[i].test_loss)
                                              : APOS(rows[i].test_acc);
            fprintf(f, "%.1f,%.1f ", XPOS(rows[i].epoch), v);
        }
        fprintf(f, "\"/>\n");
        series_legend(&c, &series[k], k, L + pw - 150);
    }
#undef XPOS
#undef YPOS
#undef APOS
    fprintf(f, "</svg>\n");
    return pp_cli_output_commit(&out);
}

bool pp_cli_write_schedule_sweep_svg(const char *path, const char *title,
                                     const pp_schedule_row *rows, int n)
{
    pp_cli_output out;
    FILE *f = pp_cli_output_open(&out, path);
    if (!f) return false;
    chart c;
    chart_begin(&c, f, title, "step time and bubble per schedule");
    double ymax = 0;
    for (int i = 0; i < n; i++) {
        if (!rows[i].failed && rows[i].step_ms > ymax) ymax = rows[i].step_ms;
        if (!rows[i].failed && rows[i].predicted_step_ms > ymax) ymax = rows[i].predicted_step_ms;
    }
    ymax = nice_max(ymax * 1.05);
    chart_axes(&c, ymax, "%.0f", "%.0f%%", 100, "schedule", "step ms", "#1f5fa8", "bubble",
               "#b34");
    double slot = c.pw / (n > 0 ? n : 1), bw = slot * 0.5;
    for (int i = 0; i < n; i++) {
        double x = c.L + slot * (i + 0.5);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">", x, c.T + c.ph + 18);
        xml_escape(f, rows[i].schedule);
        fprintf(f, "</text>\n");
        if (rows[i].failed) {
            fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" fill=\"#c00\" text-anchor=\"middle\" "
                       "font-size=\"10\">failed<title>", x, c.T + c.ph - 8);
            xml_escape(f, rows[i].error);
            fprintf(f, "</title></text>\n");
            continue;
        }
        double h = c.ph * rows[i].step_ms / ymax;
        fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" "
                   "fill=\"#1f5fa8\" opacity=\"0.8\"/>\n", x - bw / 2, c.T + c.ph - h, bw, h);
        double yp = c.T + c.ph * (1 - rows[i].predicted_step_ms / ymax);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#123\" "
                   "stroke-width=\"2\" stroke-dasharray=\"4 3\"/>\n", x - bw / 2, yp, x + bw / 2, yp);
        fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"4\" fill=\"#b34\"/>\n", x,
                c.T + c.ph * (1 - rows[i].bubble));
        fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"4\" fill=\"none\" stroke=\"#b34\"/>\n",
                x, c.T + c.ph * (1 - rows[i].bubble_predicted));
    }
    static const chart_series legend[] = {{"#1f5fa8", "", "step ms (measured)", 0},
                                          {"#123", "4 3", "step ms (predicted)", 1},
                                          {"#b34", "", "bubble (dot: measured, ring: predicted)",
                                           2}};
    for (int k = 0; k < 3; k++) series_legend(&c, &legend[k], k, c.L + 10);
    fprintf(f, "</svg>\n");
    return pp_cli_output_commit(&out);
}
