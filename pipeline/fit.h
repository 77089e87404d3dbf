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
 *                              plan's own program (built in or read from
 *                              its file), of what the micro-batches in
 *                              flight keep from forward to backward (a
 *                              recomputed micro-batch: a copy of its stage
 *                              input; after a split backward's I, what its
 *                              W needs; a backward before its turn, the
 *                              weight gradients kept apart) plus the
 *                              transient of the action running: a
 *                              forward's activations between units, a
 *                              backward's gradients and, for a recomputed
 *                              micro-batch, the forward it runs again first
 * A device's peak (device_peak) is the fixed parts of the stages on it, the
 * largest of their workspaces (one stream) and the walk over all their
 * actions in the device's order. Kept bytes come from the model's catalogue
 * (pp_catalogue_kept_bytes, pp_catalogue_iw_bytes), transients from the
 * units' shapes; in-flight micro-batches from the schedule's action lists
 * (pp_schedule_in_flight), so every schedule is modelled alike. The figures
 * are those of a step after the first (the momentum exists from the first
 * update on).
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
    int64_t activations;     /* peak over the stage's own actions of kept activations plus
                                the running action's transient */
    int in_flight;           /* most micro-batches whose forward ran and backward (or W)
                                did not (pp_schedule_in_flight) */
    int64_t peak;            /* the stage's own peak: the sum of the above */
    int64_t device_peak;     /* its device's: the stages' fixed parts, their largest
                                workspace and the walk over all their actions */
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

/* ---- the planner ------------------------------------------------------------------
 *
 * pp_fit_optimize searches, for the plan's model, batch and devices (its
 * stages' devices in order, or its `devices:` for stages: auto), over
 *   schedule      gpipe and 1f1b
 *   split size    powers of two up to the batch, the batch and the plan's own
 *                 (sizes a layer cannot train on are left out)
 *   cuts          contiguous unit ranges, one per device: a dynamic program
 *                 minimising the slowest stage's forward + backward time
 *   recompute     per stage, the fastest mode (never, except_last, always)
 *                 whose predicted peak fits the device
 * Unit times are measured on the plan's devices for every split size tried
 * (pp_fit_profile, cached); the delay model's are its own, and it keeps its
 * stages. Each candidate (schedule, split) is the dynamic program's best cut,
 * timed by the simulator (copies at a nominal bandwidth; stages on CPU devices
 * share the host's cores, so such a step takes at least the sum of their
 * work) and checked with the
 * memory model against each device's cap: its `memory:`, a CUDA card's free
 * memory, and the limit asked for, whichever is lowest, less 3% left for the
 * model's error. */

typedef struct pp_fit_options {
    int64_t memory_limit;     /* bytes each device may hold, 0: none (the caps above still hold) */
    int top;                  /* candidates to return, best first (<= 0: 5) */
    const int *splits;        /* split sizes to try, or NULL for the defaults above */
    int n_splits;
} pp_fit_options;

/* One candidate plan and its predictions. */
typedef struct pp_fit_candidate {
    pp_plan_schedule schedule;
    int split_size, micro_batches;
    int first[PP_PLAN_MAX_STAGES], last[PP_PLAN_MAX_STAGES]; /* unit ranges (-1: delay) */
    pp_plan_recompute recompute[PP_PLAN_MAX_STAGES];
    double forward_ms[PP_PLAN_MAX_STAGES];  /* per micro-batch of split_size */
    double backward_ms[PP_PLAN_MAX_STAGES]; /* recomputation's forward included */
    double step_ms, bubble, images_per_s;   /* the simulator's */
    int64_t peak[PP_PLAN_MAX_STAGES];       /* predicted device peak of each stage's device */
    int64_t cap[PP_PLAN_MAX_STAGES];        /* the cap it was checked against (0: none) */
} pp_fit_candidate;

typedef struct pp_fit_result {
    int n;                    /* candidates kept (<= options.top), best (shortest step) first */
    pp_fit_candidate *best;   /* (n) */
    int tried;                /* (schedule, split) pairs searched */
    int fitting;              /* of them, those with a cut that fits every device */
    pp_profile_note note;     /* where the unit times came from */
    char why[512];            /* n == 0: why nothing fits (the closest candidate's device,
                                 its smallest predicted peak and its cap) */
} pp_fit_result;

/* Searches as above. res is caller-owned; free with pp_fit_result_free.
 * PP_OK with res->n == 0 when nothing fits (res->why says why); PP_ERR_INPUT
 * for a plan the planner cannot search (replicas, ranks); PP_ERR_INVALID for
 * bad options. */
pp_status pp_fit_optimize(const pp_plan *plan, const pp_fit_options *opt, pp_fit_result *res,
                          pp_error *err);
void pp_fit_result_free(pp_fit_result *res);

/* The plan with candidate c applied, as plan YAML (pp_plan_emit's form:
 * explicit stages; recompute per stage where they differ, else for the
 * plan; with memory_limit > 0 every device capped at it, or at its own
 * smaller cap), in a new string *out the caller frees. */
pp_status pp_fit_emit(const pp_plan *plan, const pp_fit_candidate *c, int64_t memory_limit,
                      char **out, size_t *len, pp_error *err);

/* Peak micro-batches in flight on stage s of the plan's own schedule (built
 * in or read from its file): the most whose forward ran and whose backward
 * (or W) has not, over the stage's actions (pp_schedule_in_flight); 0 when the
 * schedule cannot be built. */
int pp_fit_in_flight(const pp_plan *plan, int s);

#ifdef __cplusplus
}
#endif

#endif
