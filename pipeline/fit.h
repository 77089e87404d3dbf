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

/* ---- measured unit times ---------------------------------------------------------
 *
 * pp_fit_profile measures each unit's forward and backward time on a device
 * for micro-batches of a size (each unit as a one-unit stage: a warm-up,
 * then the fastest of three timed passes), or reads them from the profile
 * cache, a JSON file: PP_PROFILE_CACHE (a path, or "off"), by default
 * $XDG_CACHE_HOME/pipeline-run/unit-times.json or
 * ~/.cache/pipeline-run/unit-times.json. Entries are keyed by the model, the
 * device ("cpu" for every cpu:N: one host; "cuda:N"), the micro-batch size
 * and the precision; an entry is fresh when this version of pipeline-run
 * measured it on this host with the same CPU thread count, else stale:
 * measured again and replaced. So `balance: time`, --validate, the run and
 * the planner agree on the same figures. */

/* Where the times of one or more lookups came from (the least fresh). */
typedef enum pp_profile_source {
    PP_PROFILE_NONE = 0,  /* nothing measured or read */
    PP_PROFILE_FRESH,     /* read from the cache */
    PP_PROFILE_MEASURED,  /* not in the cache: measured now and added */
    PP_PROFILE_UNCACHED,  /* the cache is off (or has no place): measured now */
    PP_PROFILE_STALE,     /* the cache's entry was stale: measured again and replaced */
} pp_profile_source;

typedef struct pp_profile_note {
    pp_profile_source source; /* the least fresh of the lookups */
    int lookups, fresh;       /* lookups made, and how many the cache answered */
    char cache[1024];         /* the cache file; "" when off */
    char why[160];            /* stale: what differed (another version, host, thread count) */
} pp_profile_note;

/* Per-unit times of one micro-batch. */
typedef struct pp_unit_times {
    int n;                    /* the model's units */
    int mb_size;              /* samples per micro-batch */
    double *forward_ms;       /* (n) */
    double *backward_ms;      /* (n) */
} pp_unit_times;

/* Fills out (free with pp_unit_times_free) with the times of plan's units on
 * dev for micro-batches of mb_size, from the cache or measured; note (may be
 * NULL; zero it before the first lookup) gathers where they came from. A
 * cache that cannot be read or written is not an error. PP_ERR_INVALID for
 * the delay model; a failure to run a unit is reported as the ops report it. */
pp_status pp_fit_profile(const pp_plan *plan, pp_device_id dev, int mb_size, pp_unit_times *out,
                         pp_profile_note *note, pp_error *err);
void pp_unit_times_free(pp_unit_times *t);
/* "fresh", "measured", "uncached", "stale", "none" */
const char *pp_profile_source_name(pp_profile_source s);

/* pp_pipeline_resolve_plan with the note of the time balance's profile
 * (note->source stays NONE when nothing was profiled). */
pp_status pp_fit_resolve_plan(pp_plan *plan, pp_profile_note *note, pp_error *err);

/* Peak micro-batches in flight on stage s of the schedule of plan: the most
 * whose forward ran and whose backward has not, over the stage's actions. */
int pp_fit_in_flight(const pp_plan *plan, int s);

#ifdef __cplusplus
}
#endif

#endif
