/*
 * bench_data.c - milliseconds to read one training batch on the host: the
 * synthetic data ResNet-50 trains on (BATCH x 3 x 224 x 224, 1000 classes,
 * ImageNet normalisation, shuffled), read by a data reader
 * (runtime/io/reader.h) of 1, 2 and 4 threads, as the pipeline's
 * prefetcher reads it.
 *
 * usage: bench_data [BATCH [REPS [IMAGE]]]   (defaults 128, 5, 224)
 *
 * One warm-up read per thread count, then REPS reads of successive batches;
 * prints the best and mean ms per batch and the images per second of the
 * best. Figures depend on the cores free while it runs (a reader of more
 * threads than free cores gains nothing). Asserts nothing.
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "runtime/io/data.h"
#include "runtime/io/reader.h"

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

int main(int argc, char **argv)
{
    const int batch = argc > 1 ? atoi(argv[1]) : 128;
    const int reps = argc > 2 ? atoi(argv[2]) : 5;
    const int image = argc > 3 ? atoi(argv[3]) : 224;
    if (batch < 1 || reps < 1 || image < 1) {
        fprintf(stderr, "usage: bench_data [BATCH [REPS [IMAGE]]]\n");
        return 2;
    }
    static const float mean[3] = {0.485f, 0.456f, 0.406f}, std[3] = {0.229f, 0.224f, 0.225f};
    pp_data_config cfg;
    pp_data_config_init(&cfg);
    cfg.height = cfg.width = image;
    cfg.classes = 1000;
    cfg.shuffle = true;
    cfg.n_mean = cfg.n_std = 3;
    for (int c = 0; c < 3; c++) {
        cfg.mean[c] = mean[c];
        cfg.std[c] = std[c];
    }
    pp_error err;
    pp_data *d;
    if (pp_data_open(&cfg, &d, &err) != PP_OK) {
        fprintf(stderr, "bench_data: %s\n", err.msg);
        return 1;
    }
    float *images = malloc((size_t)batch * 3 * image * image * sizeof *images);
    int32_t *labels = malloc((size_t)batch * sizeof *labels);
    if (!images || !labels) {
        fprintf(stderr, "bench_data: out of memory\n");
        return 1;
    }
    printf("batch read: %d x 3 x %d x %d synthetic, normalised (%.1f M values), %ld online CPUs\n",
           batch, image, image, (double)batch * 3 * image * image / 1e6,
           sysconf(_SC_NPROCESSORS_ONLN));
    static const int thread_counts[] = {1, 2, 4};
    int64_t pos = 0;
    for (int t = 0; t < 3; t++) {
        pp_data_reader *r;
        if (pp_data_reader_new(thread_counts[t], &r, &err) != PP_OK) {
            fprintf(stderr, "bench_data: %s\n", err.msg);
            return 1;
        }
        double best = 0, sum = 0;
        for (int i = -1; i < reps; i++, pos += batch) {
            double t0 = now_ms();
            if (pp_data_reader_read(r, d, pos, batch, images, labels, &err) != PP_OK) {
                fprintf(stderr, "bench_data: %s\n", err.msg);
                return 1;
            }
            double ms = now_ms() - t0;
            if (i < 0) continue; /* warm-up */
            sum += ms;
            if (i == 0 || ms < best) best = ms;
        }
        printf("threads %d: best %.1f ms, mean %.1f ms per batch (%.0f images/s at best)\n",
               pp_data_reader_threads(r), best, sum / reps, batch / best * 1e3);
        pp_data_reader_free(r);
    }
    free(images);
    free(labels);
    pp_data_close(d);
    return 0;
}
