/*
 * tied.h - parameters tied across stages (tied.c). Not installed.
 *
 * A stage may hold a copy of a parameter another stage holds: GPT-2's output
 * head (lm_head, on the last stage) uses the token embedding's weight
 * (transformer.wte.weight, on the first). The copy is a parameter of its
 * unit with a gradient of its own and a name that says what it copies
 * (pp_named_tensor.tied_to), on the same stage, another device or another
 * rank. Each step:
 *   1. both gradients are formed as usual, each in micro-batch order on its
 *      own stage (and summed over replicas);
 *   2. pipe_tied_sum_grads adds the copy's to the original's, in that one
 *      order: original = embedding's gradient + head's gradient (in stream
 *      order on one device or between two CUDA devices of a rank, a peer
 *      copy then; through host memory between other devices, a message
 *      between ranks);
 *   3. the optimizer updates the original only (the copy is not among its
 *      parameters);
 *   4. pipe_tied_refresh writes the original's new values over the copy
 *      before the next forward (and after a load, and once at the start).
 * So every cut of the model into stages gives the bits of one stage, where
 * the same two gradients are summed the same way. Checkpoints hold the
 * original only (checkpoints.c leaves copies out).
 */
#ifndef PP_PIPELINE_TIED_H
#define PP_PIPELINE_TIED_H

#include "pipeline/state.h"

/* Finds every copy among the stages and its original (PP_ERR_INPUT when no
 * stage holds the parameter a copy names) and refreshes the copies. Every
 * rank calls it, after the stages and the executor are built. */
pp_status pipe_tied_init(struct pp_pipeline *p, pp_error *err);
void pipe_tied_free(struct pp_pipeline *p);

/* Step 2 above, after the run and the replicas' sums; every rank calls it. */
pp_status pipe_tied_sum_grads(struct pp_pipeline *p, pp_error *err);

/* Step 4 above, after the update is enqueued; every rank calls it. A copy
 * on the original's device or another CUDA device of the rank follows the
 * update in stream order (every stage's stream waits for the update); the
 * others move through host memory, so the parameters must be settled first
 * where pipe_tied_host says so. */
pp_status pipe_tied_refresh(struct pp_pipeline *p, pp_error *err);

/* Whether a tie of this rank moves through host memory (then the host must
 * wait for the update before pipe_tied_refresh). */
bool pipe_tied_host(const struct pp_pipeline *p);

#endif
