/*
 * reduce.h - deterministic double-precision reductions over float arrays,
 * shared by the CPU kernels. Each sums in eight interleaved double lanes
 * (lane j takes elements i with i % 8 == j) and then adds the lanes in a
 * fixed order, so the result depends only on the data, and the loops
 * vectorise without reassociation flags.
 *
 * The pp_lanes_* functions continue a reduction over several pieces (the N
 * planes of one batch-norm channel): element k of the concatenation goes to
 * lane k % 8 whatever the piece sizes, `lane` carrying the position across
 * calls, so small planes still fill whole vectors and a piece costs no
 * lane total of its own.
 */
#ifndef PP_CPU_REDUCE_H
#define PP_CPU_REDUCE_H

#include <stddef.h>

#define PP_REDUCE_LANES 8

static inline double pp_lanes_total(const double *acc)
{
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

/* sum_i x[i] */
static inline double pp_sum_f32(const float *x, size_t n)
{
    double acc[PP_REDUCE_LANES] = {0};
    size_t i = 0;
    for (; i + PP_REDUCE_LANES <= n; i += PP_REDUCE_LANES)
        for (int j = 0; j < PP_REDUCE_LANES; j++) acc[j] += (double)x[i + j];
    for (int j = 0; i < n; i++, j++) acc[j] += (double)x[i];
    return pp_lanes_total(acc);
}

/* sum_i (x[i] - mean)^2 */
static inline double pp_sum_sqdev_f32(const float *x, size_t n, double mean)
{
    double acc[PP_REDUCE_LANES] = {0};
    size_t i = 0;
    for (; i + PP_REDUCE_LANES <= n; i += PP_REDUCE_LANES)
        for (int j = 0; j < PP_REDUCE_LANES; j++) {
            double t = (double)x[i + j] - mean;
            acc[j] += t * t;
        }
    for (int j = 0; i < n; i++, j++) {
        double t = (double)x[i] - mean;
        acc[j] += t * t;
    }
    return pp_lanes_total(acc);
}

/* Adds sum_i dy[i] to *sum_dy and sum_i dy[i] * (x[i] - mean) to *dot. */
static inline void pp_sum_dy_dot_f32(const float *dy, const float *x, size_t n, double mean,
                                     double *sum_dy, double *dot)
{
    double a[PP_REDUCE_LANES] = {0}, b[PP_REDUCE_LANES] = {0};
    size_t i = 0;
    for (; i + PP_REDUCE_LANES <= n; i += PP_REDUCE_LANES)
        for (int j = 0; j < PP_REDUCE_LANES; j++) {
            double g = (double)dy[i + j];
            a[j] += g;
            b[j] += g * ((double)x[i + j] - mean);
        }
    for (int j = 0; i < n; i++, j++) {
        double g = (double)dy[i];
        a[j] += g;
        b[j] += g * ((double)x[i] - mean);
    }
    *sum_dy += pp_lanes_total(a);
    *dot += pp_lanes_total(b);
}

/* acc[lane..] += x[i] (see above); returns the lane of the next element. */
static inline unsigned pp_lanes_sum_f32(double *acc, const float *x, size_t n, unsigned lane)
{
    size_t i = 0;
    for (; lane != 0 && i < n; i++, lane = (lane + 1) % PP_REDUCE_LANES) acc[lane] += (double)x[i];
    for (; i + PP_REDUCE_LANES <= n; i += PP_REDUCE_LANES)
        for (int j = 0; j < PP_REDUCE_LANES; j++) acc[j] += (double)x[i + j];
    for (; i < n; i++, lane = (lane + 1) % PP_REDUCE_LANES) acc[lane] += (double)x[i];
    return lane;
}

/* acc[lane..] += (x[i] - mean)^2 */
static inline unsigned pp_lanes_sqdev_f32(double *acc, const float *x, size_t n, double mean,
                                          unsigned lane)
{
    size_t i = 0;
    double t;
    for (; lane != 0 && i < n; i++, lane = (lane + 1) % PP_REDUCE_LANES) {
        t = (double)x[i] - mean;
        acc[lane] += t * t;
    }
    for (; i + PP_REDUCE_LANES <= n; i += PP_REDUCE_LANES)
        for (int j = 0; j < PP_REDUCE_LANES; j++) {
            double u = (double)x[i + j] - mean;
            acc[j] += u * u;
        }
    for (; i < n; i++, lane = (lane + 1) % PP_REDUCE_LANES) {
        t = (double)x[i] - mean;
        acc[lane] += t * t;
    }
    return lane;
}

/* a[lane..] += dy[i]; b[lane..] += dy[i] * (x[i] - mean) */
static inline unsigned pp_lanes_dy_dot_f32(double *a, double *b, const float *dy, const float *x,
                                           size_t n, double mean, unsigned lane)
{
    size_t i = 0;
    for (; lane != 0 && i < n; i++, lane = (lane + 1) % PP_REDUCE_LANES) {
        a[lane] += (double)dy[i];
        b[lane] += (double)dy[i] * ((double)x[i] - mean);
    }
    for (; i + PP_REDUCE_LANES <= n; i += PP_REDUCE_LANES)
        for (int j = 0; j < PP_REDUCE_LANES; j++) {
            double g = (double)dy[i + j];
            a[j] += g;
            b[j] += g * ((double)x[i + j] - mean);
        }
    for (; i < n; i++, lane = (lane + 1) % PP_REDUCE_LANES) {
        a[lane] += (double)dy[i];
        b[lane] += (double)dy[i] * ((double)x[i] - mean);
    }
    return lane;
}

#endif
