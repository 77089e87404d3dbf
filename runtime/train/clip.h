/*
 * clip.h - gradient clipping's arithmetic, torch.nn.utils.clip_grad_norm_'s
 * (norm type 2): the total norm of every gradient taken together and the
 * coefficient that scales them. The gradients' sums of squares come from
 * pp_optimizer_grad_sumsq (or pp_sumsq_multi); the caller adds them in a
 * fixed order (the model's parameter order, whatever the stages, schedule
 * or ranks), so the norm's bits do not depend on how the model is cut.
 * Plain functions, thread-safe.
 */
#ifndef PP_TRAIN_CLIP_H
#define PP_TRAIN_CLIP_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* sqrt(sums[0] + sums[1] + ... + sums[n-1]), added in that order in double
 * and rounded to float once (NaN or infinite when a sum is). */
float pp_clip_total_norm(const double *sums, size_t n);

/* The factor clip_grad_norm_ multiplies every gradient by, in torch's float
 * arithmetic: min(1, max_norm * (1 / (norm + 1e-6))) (its max_norm / t is
 * t.reciprocal() * max_norm), for max_norm > 0 and a finite norm. */
float pp_clip_coefficient(float norm, double max_norm);

#ifdef __cplusplus
}
#endif

#endif
