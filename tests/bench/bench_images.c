/*
 * bench_images.c - the image folder loader's speed: images/s of reading,
 * decoding, random_resized_crop(224), flip and normalisation (pp_data over
 * an image folder, through the data reader) on each thread count given.
 *
 *   bench_images ROOT [IMAGES [THREADS...]]
 *
 * ROOT is an image folder (tests/bench/images_vs_torchvision.py makes one of
 * ImageNet-sized JPEGs and runs torchvision's DataLoader beside this). Reads
 * IMAGES samples (default 512) in batches of 64, after one warm-up batch,
 * and prints one line per thread count (default: 1 and 2): images/s and per
 * thread, and images per second of the process's CPU time (what a busy
 * machine's other work changes least).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/io/data.h"
#include "runtime/io/reader.h"

static double clock_s(clockid_t id)
{
    struct timespec t;
    clock_gettime(id, &t);
    return (double)t.tv_sec + t.tv_nsec / 1e9;
}

/* images/s of `images` samples read in batches on `threads` threads. */
static int measure(pp_data *d, int threads, int images, int batch, float *x, int32_t *y)
{
    pp_data_reader *r;
    pp_error err;
    if (pp_data_reader_new(threads, &r, &err) != PP_OK) {
        fprintf(stderr, "bench_images: %s\n", err.msg);
        return 1;
    }
    int64_t pos = 0;
    if (pp_data_reader_read(r, d, pos, batch, x, y, &err) != PP_OK) { /* warm-up */
        fprintf(stderr, "bench_images: %s\n", err.msg);
        pp_data_reader_free(r);
        return 1;
    }
    pos += batch;
    const double t0 = clock_s(CLOCK_MONOTONIC), c0 = clock_s(CLOCK_PROCESS_CPUTIME_ID);
    int done = 0;
    while (done < images) {
        if (pp_data_reader_read(r, d, pos, batch, x, y, &err) != PP_OK) {
            fprintf(stderr, "bench_images: %s\n", err.msg);
            pp_data_reader_free(r);
            return 1;
        }
        pos += batch;
        done += batch;
    }
    const double s = clock_s(CLOCK_MONOTONIC) - t0, cpu = clock_s(CLOCK_PROCESS_CPUTIME_ID) - c0;
    printf("ours         %2d thread%s  %8.1f images/s  %8.1f per thread  (%.2f ms an image "
           "a thread; %.1f images a CPU second)\n", threads, threads == 1 ? " " : "s", done / s,
           done / s / threads, 1e3 * s * threads / done, done / cpu);
    fflush(stdout);
    pp_data_reader_free(r);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: bench_images ROOT [IMAGES [THREADS...]]\n");
        return 2;
    }
    const int images = argc > 2 ? atoi(argv[2]) : 512;
    const int batch = 64;
    pp_data_config cfg;
    pp_data_config_init(&cfg);
    cfg.format = PP_DATA_IMAGEFOLDER;
    cfg.classes = 0;
    snprintf(cfg.root, sizeof cfg.root, "%s", argv[1]);
    cfg.n_transforms = 2;
    cfg.transforms[0] = (pp_transform){.kind = PP_TF_RANDOM_RESIZED_CROP, .h = 224, .w = 224,
                                       .scale = {0.08, 1.0}, .ratio = {0.75, 4.0 / 3.0}};
    cfg.transforms[1] = (pp_transform){.kind = PP_TF_HORIZONTAL_FLIP, .p = 0.5};
    cfg.n_mean = cfg.n_std = 3;
    const float mean[3] = {0.485f, 0.456f, 0.406f}, std[3] = {0.229f, 0.224f, 0.225f};
    memcpy(cfg.mean, mean, sizeof mean);
    memcpy(cfg.std, std, sizeof std);
    cfg.shuffle = true;
    pp_data *d;
    pp_error err;
    if (pp_data_open(&cfg, &d, &err) != PP_OK) {
        fprintf(stderr, "bench_images: %s\n", err.msg);
        return 1;
    }
    /* aligned as the loader's batches are */
    float *x = aligned_alloc(64, (size_t)batch * 3 * 224 * 224 * sizeof(float));
    int32_t *y = malloc(batch * sizeof(int32_t));
    printf("bench_images: %s, %lld images, random_resized_crop(224) + flip + normalise, "
           "batches of %d\n", argv[1], (long long)pp_data_size(d), batch);
    int rc = 0;
    if (argc <= 3) {
        rc = measure(d, 1, images, batch, x, y);
        if (rc == 0) rc = measure(d, 2, images, batch, x, y);
    }
    for (int k = 3; k < argc && rc == 0; k++) {
        const int threads = atoi(argv[k]);
        if (threads < 1 || threads > PP_DATA_READER_MAX_THREADS) {
            fprintf(stderr, "bench_images: %s threads: 1 to %d\n", argv[k],
                    PP_DATA_READER_MAX_THREADS);
            rc = 2;
        } else {
            rc = measure(d, threads, images, batch, x, y);
        }
    }
    free(x);
    free(y);
    pp_data_close(d);
    return rc;
}
