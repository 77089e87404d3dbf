/*
 * bench_checkpoint.c - what checkpoint integrity costs: milliseconds and
 * MB/s to save (data digested on the way), load (every tensor read twice:
 * checked, then loaded; with finite values checked as pipelines load) and
 * verify a file of ResNet-50's size (25.6 M float parameters in 161 tensors
 * plus as many momentum buffers: 205 MB), on CPU device memory.
 *
 * usage: bench_checkpoint [MB [REPS [DIR]]]   (defaults 205, 3, $TMPDIR or /tmp)
 *
 * Best of REPS for each. The save includes fsync, so its figure is the
 * disk's as much as the code's; load and verify read from the page cache.
 * Asserts nothing.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "runtime/core/device.h"
#include "runtime/core/tensor.h"
#include "runtime/io/checkpoint.h"

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

int main(int argc, char **argv)
{
    const double mb = argc > 1 ? atof(argv[1]) : 205;
    const int reps = argc > 2 ? atoi(argv[2]) : 3;
    const char *tmp = getenv("TMPDIR");
    const char *dir = argc > 3 ? argv[3] : tmp && *tmp ? tmp : "/tmp";
    enum { N = 322 };
    if (mb <= 0 || reps < 1) {
        fprintf(stderr, "usage: bench_checkpoint [MB [REPS [DIR]]]\n");
        return 2;
    }
    pp_error err;
    pp_registry *reg;
    pp_device_ctx *cpu;
    if (pp_registry_new(&reg, &err) != PP_OK ||
        pp_registry_get(reg, (pp_device_id){PP_DEVICE_CPU, 0}, &cpu, &err) != PP_OK) {
        fprintf(stderr, "bench_checkpoint: %s\n", err.msg);
        return 1;
    }
    static pp_tensor t[N];
    static pp_ckpt_tensor list[N];
    static char names[N][32];
    int64_t each = (int64_t)(mb * 1e6 / 4 / N);
    for (int i = 0; i < N; i++) {
        if (pp_tensor_alloc(&t[i], cpu, PP_F32, 1, (int64_t[]){each}, &err) != PP_OK) {
            fprintf(stderr, "bench_checkpoint: %s\n", err.msg);
            return 1;
        }
        float *p = malloc((size_t)each * 4);
        for (int64_t k = 0; k < each; k++) p[k] = (float)((i * 131 + k) % 1000) / 997.0f;
        pp_tensor_from_host(&t[i], p, (size_t)each * 4, &err);
        free(p);
        snprintf(names[i], sizeof names[i], "%s.layer%d.weight", i < N / 2 ? "m" : "opt", i);
        list[i] = (pp_ckpt_tensor){names[i], &t[i]};
    }
    char path[512];
    snprintf(path, sizeof path, "%s/bench_checkpoint.%d.safetensors", dir, (int)getpid());
    double best[3] = {1e30, 1e30, 1e30};
    const pp_checkpoint_load_options lo = {.finite = true};
    for (int r = 0; r < reps; r++) {
        double t0 = now_ms();
        pp_status s = pp_checkpoint_save(path, list, N, NULL, 0, &err);
        double t1 = now_ms();
        if (s == PP_OK) s = pp_checkpoint_load_with(path, list, N, &lo, &err);
        double t2 = now_ms();
        if (s == PP_OK) s = pp_checkpoint_verify(path, NULL, &err);
        double t3 = now_ms();
        if (s != PP_OK) {
            fprintf(stderr, "bench_checkpoint: %s\n", err.msg);
            unlink(path);
            return 1;
        }
        double d[3] = {t1 - t0, t2 - t1, t3 - t2};
        for (int k = 0; k < 3; k++)
            if (d[k] < best[k]) best[k] = d[k];
    }
    unlink(path);
    double bytes = (double)each * 4 * N / 1e6;
    static const char *what[3] = {"save (digest, write, fsync)", "load (check, then load)",
                                  "verify"};
    printf("checkpoint of %.0f MB in %d tensors, best of %d:\n", bytes, N, reps);
    for (int k = 0; k < 3; k++)
        printf("  %-28s %8.1f ms  %7.0f MB/s\n", what[k], best[k], bytes / (best[k] / 1e3));
    for (int i = 0; i < N; i++) pp_tensor_free(&t[i]);
    pp_registry_free(reg);
    return 0;
}
