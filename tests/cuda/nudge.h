/*
 * nudge.h - the conditioning yardstick of the CUDA-against-CPU tests.
 *
 * A ResNet-50 step at small batches is ill-conditioned: fp32 rounding alone
 * moves its gradients by percents (PyTorch's own fp32 step against float64:
 * median 2e-2, worst 2.4e-1 per tensor at batch 4, 32x32, torchvision's
 * initialisation), so a fixed tolerance either fails a correct backend or
 * passes a wrong one. The tests measure the amplification instead: the CPU
 * backend runs the same step from the same weights each moved by one ulp (up
 * or down at random: rounding-sized noise in every layer, as a backend's own
 * rounding is), and each figure of CUDA against CPU is allowed a multiple of
 * what that nudge moved it (plus a floor). In PyTorch a one-ulp perturbation
 * moves the gradients by the same order as its whole fp32 error does.
 */
#ifndef PP_TESTS_CUDA_NUDGE_H
#define PP_TESTS_CUDA_NUDGE_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/core/device.h"
#include "runtime/core/tensor.h"
#include "runtime/io/checkpoint.h"
#include "tests/check.h"

/* Writes dst: the checkpoint src with every value of its f32 parameters
 * (names ending in .weight or .bias, optimizer state excluded; zeros stay
 * zero) moved up or down (a fixed pseudo-random sign per value) by one fp32 ulp when scale is
 * 0, else by the relative amount scale (2^-9: half a bf16 step, for bf16
 * runs), metadata and everything else unchanged; seed picks the signs (0:
 * the sequence nudge_checkpoint uses, others independent of it). Records a
 * check failure and returns false when it cannot. (In a header: the checks
 * count in the including test's summary.) */
static bool nudge_checkpoint_seed(const char *src, const char *dst, double scale, unsigned seed)
{
    pp_error err = {0};
    pp_registry *reg = NULL;
    pp_device_ctx *cpu = NULL;
    pp_checkpoint_info info;
    memset(&info, 0, sizeof info);
    pp_status s = pp_registry_new(&reg, &err);
    if (s == PP_OK) s = pp_registry_get(reg, (pp_device_id){PP_DEVICE_CPU, 0}, &cpu, &err);
    if (s == PP_OK) s = pp_checkpoint_list(src, &info, &err);
    pp_tensor *t = s == PP_OK ? calloc(info.n ? info.n : 1, sizeof *t) : NULL;
    pp_ckpt_tensor *list = t ? calloc(info.n ? info.n : 1, sizeof *list) : NULL;
    size_t built = 0;
    if (s == PP_OK && !list) s = pp_error_set(&err, PP_ERR_OOM, "out of memory");
    for (; s == PP_OK && built < info.n; built++) {
        const pp_checkpoint_entry *e = &info.entries[built];
        s = pp_tensor_alloc(&t[built], cpu, e->dtype, e->ndim, e->shape, &err);
        list[built] = (pp_ckpt_tensor){e->name, &t[built]};
    }
    if (s == PP_OK) s = pp_checkpoint_load(src, list, info.n, false, &err);
    uint64_t rng = 0x9e3779b97f4a7c15ull ^ (uint64_t)seed * 0x2545f4914f6cdd1dull;
    size_t moved = 0;
    for (size_t i = 0; s == PP_OK && i < info.n; i++) {
        const pp_checkpoint_entry *e = &info.entries[i];
        const char *dot = strrchr(e->name, '.');
        if (e->dtype != PP_F32 || !strncmp(e->name, "optimizer.", 10) || !dot ||
            (strcmp(dot, ".weight") && strcmp(dot, ".bias")))
            continue;
        float *v = t[i].data; /* a CPU tensor: host memory */
        for (int64_t k = 0; k < pp_tensor_numel(&t[i]); k++, moved++) {
            rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17; /* xorshift64 */
            const bool up = rng >> 63;
            if (v[k] == 0) continue; /* as exact as rounding leaves it (0 * x is 0) */
            v[k] = scale > 0 ? (float)(v[k] * (up ? 1 + scale : 1 - scale))
                             : nextafterf(v[k], up ? INFINITY : -INFINITY);
        }
    }
    if (s == PP_OK && !moved) s = pp_error_set(&err, PP_ERR_INPUT, "no f32 parameters");
    if (s == PP_OK) {
        /* the metadata but the writer's own checksum keys (it writes them anew) */
        pp_checkpoint_meta *meta = calloc(info.n_meta ? info.n_meta : 1, sizeof *meta);
        size_t nm = 0;
        for (size_t i = 0; meta && i < info.n_meta; i++)
            if (strncmp(info.meta[i].key, "checksum.", 9)) meta[nm++] = info.meta[i];
        s = meta ? pp_checkpoint_save(dst, list, info.n, meta, nm, &err)
                 : pp_error_set(&err, PP_ERR_OOM, "out of memory");
        free(meta);
    }
    CHECK_MSG(s == PP_OK, "nudging %s: %s", src, err.msg);
    for (size_t i = 0; t && i < built; i++) pp_tensor_free(&t[i]);
    free(t);
    free(list);
    pp_checkpoint_info_free(&info);
    pp_registry_free(reg);
    return s == PP_OK;
}

/* nudge_checkpoint_seed with seed 0 */
static inline bool nudge_checkpoint(const char *src, const char *dst, double scale)
{
    return nudge_checkpoint_seed(src, dst, scale, 0);
}

#endif
