/*
 * fit.h - whether a plan fits its devices' memory before anything runs, and
 * a planner that searches for the fastest plan that fits.
 *
 * The memory model (pp_fit_predict) adds up, per stage, what its device will
 * hold at its peak:
 *   params, grads, optimizer   parameters and buffers, their gradients, the
 *                              SGD momentum (with momentum > 0); bf16: the
 *                              bf16 copies of convolution and linear weights
 *   batch                      the step's images (stage 0's device), labels,
 *                              losses and logit gradients (the last stage's)
 *   slots                      the executor's boundary buffers on the device
 *                              (slots x activation and gradient, both ways)
 *   workspace                  the largest scratch one of the stage's ops asks
 *                              its stream for (pp_conv2d_workspace_bytes)
 *   activations                the peak, over the stage's actions in the
 *                              schedule, of what the micro-batches in flight
 *                              keep from forward to backward (a recomputed
 *                              micro-batch: a copy of its stage input) plus
 *                              the transient of the action running: a
 *                              forward's activations between units, a
 *                              backward's gradients and, for a recomputed
 *                              micro-batch, the forward it runs again first
 * Stages sharing a device add up. Kept bytes come from the model's catalogue
 * (pp_catalogue_kept_bytes), transients from the units' shapes; in-flight
 * micro-batches from the schedule's action lists, so every schedule is
 * modelled alike. The figures are those of a step after the first (the
 * momentum exists from the first update on).
 *
 * Limits: one figure per device, the `memory:` of its stages (plan.h); a CUDA
 * card without one is capped by its free memory when checked. pp_fit_check
 * refuses a plan whose predicted device peak exceeds its cap, at the cap's
 * FILE:LINE:COL (or the stage's), naming the stage, the predicted and allowed
 * bytes and what would fit.
 *
 * Threading: reentrant; nothing here keeps state. Results are plain data.
 */
#ifndef PP_PIPELINE_FIT_H
#define PP_PIPELINE_FIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "partitioner/plan.h"
#include "runtime/core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Predicted bytes of one stage at its peak (see the header). */
typedef struct pp_fit_stage {
    int64_t params;          /* parameters and buffers (batch-norm running statistics) */
    int64_t grads;           /* parameter gradients */
    int64_t optimizer;       /* momentum buffers */
    int64_t weight_copies;   /* bf16: the bf16 copies of convolution and linear weights */
    int64_t batch;           /* the pipeline's batch tensors placed on this stage's device */
    int64_t slots;           /* executor boundary buffers on this stage's device */
    int64_t workspace;       /* the stage's stream's scratch */
    int64_t kept_per_mb;     /* what a micro-batch of split_size keeps from its forward to
                                its backward: every activation backward needs, or a copy of
                                the stage input when the stage recomputes it */
    int64_t kept_full_per_mb; /* the same without recomputation */
    int64_t activations;     /* peak over the schedule of kept activations plus the running
                                action's transient */
    int in_flight;           /* most micro-batches whose forward ran and backward did not */
    int64_t peak;            /* the stage's own peak: the sum of the above */
    int64_t device_peak;     /* its device's: the sum over the stages sharing the device */
    int64_t cap;             /* the device's cap (`memory:`, or a CUDA card's free memory
                                when pp_fit_caps found one); 0: none */
    bool cap_from_card;      /* cap is the card's free memory, not the plan's */
} pp_fit_stage;

/* Predicts every stage of a resolved plan (explicit stages) into out
 * (plan->n_stages entries). cap is the plan's `memory:` only; see
 * pp_fit_caps. PP_ERR_INVALID for unresolved stages or NULL arguments;
 * PP_ERR_INPUT when the plan's schedule cannot be built. */
pp_status pp_fit_predict(const pp_plan *plan, pp_fit_stage *out, pp_error *err);

/* Fills each stage's cap with its CUDA card's free memory where the plan
 * gives none (opening the card; nothing for CPU devices or in a build without
 * CUDA). */
pp_status pp_fit_caps(const pp_plan *plan, pp_fit_stage *stages, pp_error *err);

/* PP_ERR_INPUT when a device's predicted peak (pred from pp_fit_predict, with
 * caps) exceeds its cap: "FILE:LINE:COL: stage S (DEV): predicted peak X
 * exceeds the memory cap Y of DEV; would fit: ..." at the cap's node (the
 * stage's device for a card's free memory), naming what would fit: a smaller
 * split size, recomputation, the other schedule, or moving units off the
 * stage (each checked with the model). PP_OK when every device fits. */
pp_status pp_fit_check(const pp_plan *plan, const pp_fit_stage *pred, pp_error *err);

/* Peak micro-batches in flight on stage s of the schedule of plan: the most
 * whose forward ran and whose backward has not, over the stage's actions. */
int pp_fit_in_flight(const pp_plan *plan, int s);

#ifdef __cplusplus
}
#endif

#endif
