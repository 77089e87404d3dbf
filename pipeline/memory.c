/*
 * memory.c - the memory model of fit.h: what each stage's device holds at its
 * peak, predicted from the plan before anything runs, in numbered passes:
 *
 *   1. per unit, from its spec and shapes: input and output bytes per sample,
 *      what its forward and backward allocate beside what it keeps, its
 *      convolutions' workspace for a micro-batch (fit_stage_units);
 *   2. per stage and micro-batch size: what a micro-batch keeps (all, or its
 *      input when recomputed), and the peak of a forward and of a backward
 *      over the stage's units (stage_mb);
 *   3. the walk over a device's actions in the plan's own schedule (built-in
 *      or loaded from a file, the one the run executes): a micro-batch holds
 *      what it keeps from its F to its B, or to its I and then what the W
 *      needs until its W; a backward of a micro-batch before its turn keeps
 *      its parameter gradients apart until then; the running action adds its
 *      transient (fit_walk). Per stage (its own actions) for the table, per
 *      device (every stage on it) for the device's peak;
 *   4. the fixed parts (parameters, gradients, momentum, bf16 weight copies,
 *      batch tensors, boundary buffers) and the sum per device.
 *
 * The rules follow what models/stage.c, models/unit_block.c and
 * streams/executor.c allocate; tests/fit measures them against the devices'
 * peaks.
 */
#include "pipeline/fit.h"
#include "pipeline/fit_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/model.h"
#include "models/unit.h"
#include "runtime/core/batch_split.h"
#include "runtime/core/ops.h"
#include "pipeline/schedules.h"
#include "streams/program.h"
#include "streams/schedule.h"

#define WORKSPACE_GROWTH 1.25 /* pp_exec_workspace grows to 1.25x the request */

/* ---- 1. units ------------------------------------------------------------------ */

/* The convolutions of a unit, for its input shape (per sample). */
static int unit_convs(const pp_unit_spec *u, const int64_t *in, int n, pp_conv2d_desc *out)
{
    const int h = (int)in[2], w = (int)in[3];
    int k = 0;
    pp_conv2d_desc d;
    switch (u->kind) {
    case PP_UNIT_CONV:
        if (pp_conv2d_desc_init(&d, n, u->in_c, h, w, u->out_c, u->kernel, u->stride, u->pad,
                                NULL) == PP_OK)
            out[k++] = d;
        break;
    case PP_UNIT_BASIC:
    case PP_UNIT_BOTTLENECK: {
        const bool bottle = u->kind == PP_UNIT_BOTTLENECK;
        const int p = u->planes;
        int ch = h, cw = w;
        if (bottle) {
            if (pp_conv2d_desc_init(&d, n, u->in_c, h, w, p, 1, 1, 0, NULL) == PP_OK) out[k++] = d;
            if (pp_conv2d_desc_init(&d, n, p, h, w, p, 3, u->stride, 1, NULL) == PP_OK) {
                out[k++] = d;
                ch = d.p, cw = d.q;
            }
            if (pp_conv2d_desc_init(&d, n, p, ch, cw, u->out_c, 1, 1, 0, NULL) == PP_OK)
                out[k++] = d;
        } else {
            if (pp_conv2d_desc_init(&d, n, u->in_c, h, w, p, 3, u->stride, 1, NULL) == PP_OK) {
                out[k++] = d;
                ch = d.p, cw = d.q;
            }
            if (pp_conv2d_desc_init(&d, n, p, ch, cw, p, 3, 1, 1, NULL) == PP_OK) out[k++] = d;
        }
        if (u->downsample &&
            pp_conv2d_desc_init(&d, n, u->in_c, h, w, u->out_c, 1, u->stride, 0, NULL) == PP_OK)
            out[k++] = d;
        break;
    }
    default: break;
    }
    return k;
}

/* Weights a unit's convolutions and linear layer hold (bf16 keeps a copy). */
static int64_t unit_weights(const pp_unit_spec *u)
{
    const int64_t p = u->planes;
    switch (u->kind) {
    case PP_UNIT_CONV: return (int64_t)u->out_c * u->in_c * u->kernel * u->kernel;
    case PP_UNIT_FC: return (int64_t)u->out_c * u->in_c;
    case PP_UNIT_BASIC:
        return u->in_c * p * 9 + p * p * 9 + (u->downsample ? (int64_t)u->in_c * u->out_c : 0);
    case PP_UNIT_BOTTLENECK:
        return u->in_c * p + p * p * 9 + p * u->out_c +
               (u->downsample ? (int64_t)u->in_c * u->out_c : 0);
    default: return 0;
    }
}

/* What a block's backward allocates beside dy and dx, per sample (element
 * size e): the gradient of the add (unless written straight into dx), the
 * downsample's, then per main pair its conv output's gradient next to the
 * gradient of the ReLU before it (unit_block.c's order). */
static int64_t block_backward_extra(const pp_unit_spec *u, const int64_t *in, const int64_t *out,
                                    int64_t e, bool has_dx)
{
    const int64_t hw = in[2] * in[3], pq = out[2] * out[3], p = u->planes;
    const bool bottle = u->kind == PP_UNIT_BOTTLENECK;
    const int64_t o = u->out_c * pq;
    /* conv outputs and inner ReLU outputs, elements per sample */
    int64_t conv_out[3], relu_out[2];
    int n;
    if (bottle) {
        conv_out[0] = p * hw, conv_out[1] = p * pq, conv_out[2] = o;
        relu_out[0] = p * hw, relu_out[1] = p * pq;
        n = 3;
    } else {
        conv_out[0] = p * pq, conv_out[1] = o;
        relu_out[0] = p * pq;
        n = 2;
    }
    const int64_t g = u->downsample || !has_dx ? o : 0;
    int64_t most = u->downsample ? g + o : g;
    for (int i = n - 1; i >= 0; i--) {
        int64_t before = i < n - 1 ? relu_out[i] : 0; /* d of the ReLU after conv i */
        int64_t after = i > 0 ? relu_out[i - 1] : 0;  /* d of the ReLU before it */
        int64_t live = g + conv_out[i] + (before > after ? before : after);
        if (live > most) most = live;
    }
    return most * e;
}

pp_status pipe_fit_units_new(const pp_plan *plan, pipe_fit_units *fu, pp_error *err)
{
    memset(fu, 0, sizeof *fu);
    if (plan->model.kind == PP_MODEL_DELAY) return PP_OK;
    pp_model_config cfg = plan->model;
    cfg.bf16 = plan->precision == PP_PLAN_PRECISION_BF16;
    pp_unit_spec *specs = NULL;
    int n = 0;
    PP_TRY(pp_model_units(&cfg, &specs, &n, NULL, err));
    pp_status st = pp_catalogue_build(&cfg, &fu->cat, err);
    fu->units = calloc((size_t)n + 1, sizeof *fu->units);
    if (st == PP_OK && !fu->units) st = pp_error_set(err, PP_ERR_OOM, "out of host memory");
    int ndim;
    int64_t shape[PP_MAX_DIMS], next[PP_MAX_DIMS];
    pp_dtype in_dtype;
    pp_model_input(&cfg, &ndim, shape, &in_dtype);
    for (int i = 0; i < n && st == PP_OK; i++) {
        pipe_fit_unit *u = &fu->units[i];
        const pp_unit_spec *sp = &specs[i];
        st = pp_unit_output_shape(sp, ndim, shape, &ndim, next, err);
        if (st != PP_OK) break;
        int64_t in_e = 1, out_e = 1;
        for (int d = 1; d < PP_MAX_DIMS; d++) in_e *= shape[d], out_e *= next[d];
        const int64_t ie = (int64_t)pp_dtype_size(pp_unit_spec_in_dtype(sp));
        const int64_t oe = (int64_t)pp_dtype_size(pp_unit_spec_out_dtype(sp));
        u->kind = sp->kind;
        u->in_bytes = in_e * ie;
        u->out_bytes = out_e * oe;
        u->weights = unit_weights(sp);
        u->fuses_relu = sp->kind == PP_UNIT_BN && i + 1 < n && specs[i + 1].kind == PP_UNIT_RELU;
        if (sp->kind == PP_UNIT_BASIC || sp->kind == PP_UNIT_BOTTLENECK) {
            u->bwd_extra = block_backward_extra(sp, shape, next, ie, true);
            u->bwd_extra_first = block_backward_extra(sp, shape, next, ie, false);
            u->fwd_extra = sp->downsample ? u->out_bytes : 0; /* the downsample's BN output */
        }
        if (sp->kind == PP_UNIT_GPT2_BLOCK) {
            /* models/transformer/gpt2_block.c's backward: dh (4C), dx2 (C), dqkv (3C)
             * and two (C) scratch rows per position; dx's own when there is none */
            u->bwd_extra = 10 * u->in_bytes;
            u->bwd_extra_first = 11 * u->in_bytes;
        }
        if (sp->kind == PP_UNIT_LAYERNORM) u->bwd_extra_first = u->in_bytes;
        u->spec = *sp;
        memcpy(u->in_shape, shape, sizeof shape);
        memcpy(shape, next, sizeof shape);
    }
    fu->n = n;
    free(specs);
    if (st != PP_OK) pipe_fit_units_free(fu);
    return st;
}

void pipe_fit_units_free(pipe_fit_units *fu)
{
    if (!fu) return;
    pp_catalogue_free(&fu->cat);
    free(fu->units);
    memset(fu, 0, sizeof *fu);
}

/* The largest workspace one of units first..last asks a `kind` device for,
 * for micro-batches of n samples (before the exec's growth margin). */
static int64_t stage_workspace(const pipe_fit_units *fu, int first, int last, int n,
                               pp_device_kind kind)
{
    int64_t most = 0;
    for (int i = first; i <= last; i++) {
        pp_conv2d_desc d[4];
        int k = unit_convs(&fu->units[i].spec, fu->units[i].in_shape, n, d);
        for (int j = 0; j < k; j++) {
            int64_t b = (int64_t)pp_conv2d_workspace_bytes(kind, &d[j]);
            if (b > most) most = b;
        }
    }
    return most;
}

/* ---- 2. one micro-batch on one stage ----------------------------------------------- */

void pipe_fit_stage_mb(const pipe_fit_units *fu, int first, int last, int64_t n,
                       pipe_fit_mb *out)
{
    const pp_catalogue *cat = &fu->cat;
    memset(out, 0, sizeof *out);
    out->kept = pp_catalogue_kept_bytes(cat, first, last, n);
    /* recomputation keeps a copy of the input in the units' dtype */
    out->kept_input = fu->units[first].in_bytes * n;
    /* forward: while unit j runs, what units first..j keep exists already, and
     * so do its input (until it has run) and its output (until the next unit
     * has) where nobody keeps them. A discarding forward (the first of a
     * recomputed micro-batch) holds unit j's saved list during the call only;
     * the forward again starts from the kept copy (shared with a first unit
     * that keeps its input, else alive while it runs) and writes the stage's
     * output into a tensor of its own (alive while the last unit runs unless
     * it keeps it) */
    for (int j = first; j <= last; j++) {
        const pipe_fit_unit *u = &fu->units[j];
        const pp_unit_info *ui = &cat->units[j];
        const int64_t in = u->in_bytes * n, out_b = u->out_bytes * n;
        int64_t live = pp_catalogue_kept_bytes(cat, first, j, n);
        bool in_kept = ui->keeps_input || (j > first && cat->units[j - 1].keeps_output);
        if (j > first && !in_kept) live += in;
        if (j < last && !ui->keeps_output) live += out_b;
        live += u->fwd_extra * n;
        if (live > out->forward) out->forward = live;
        int64_t again = live + (j == first && !ui->keeps_input ? in : 0) +
                        (j == last && !ui->keeps_output ? out_b : 0);
        if (again > out->recompute) out->recompute = again;
        int64_t discard = ui->act_bytes * n + ui->act_fixed_bytes + u->fwd_extra * n +
                          (j > first && !ui->keeps_input ? in : 0) +
                          (j < last && !ui->keeps_output ? out_b : 0);
        if (discard > out->discard) out->discard = discard;
    }
    /* backward, last unit first: units after j have freed what they kept; dy
     * of j is a buffer of the stage unless j is the last unit (the executor's),
     * dx one unless j is the first (the executor's, or none). The input part
     * of a split backward frees only what the weight part does not need: the
     * units after j hold their part for W, and j's is allocated before it
     * runs (a tensor both lists name counted once: the larger of the two) */
    out->iw = pp_catalogue_iw_bytes(cat, first, last, n);
    for (int j = last; j >= first; j--) {
        int i = j; /* units i..j: a batch norm and its ReLU run as one */
        if (j > first && fu->units[j - 1].fuses_relu && fu->units[j].kind == PP_UNIT_RELU) i = j - 1;
        const pipe_fit_unit *u = &fu->units[i];
        int64_t grads = 0; /* the gradients in flight beside what is kept */
        if (j < last) grads += fu->units[j].out_bytes * n;
        if (i > first) grads += u->in_bytes * n;
        grads += (i > first ? u->bwd_extra : u->bwd_extra_first) * n;
        int64_t live = pp_catalogue_kept_bytes(cat, first, j, n) + grads;
        if (live > out->backward) out->backward = live;
        int64_t before = i > first ? pp_catalogue_kept_bytes(cat, first, i - 1, n) : 0;
        int64_t own = pp_catalogue_kept_bytes(cat, i, j, n), own_w = pp_catalogue_iw_bytes(cat, i, j, n);
        int64_t input = before + (own > own_w ? own : own_w) +
                        (j < last ? pp_catalogue_iw_bytes(cat, j + 1, last, n) : 0) + grads;
        if (input > out->input) out->input = input;
        j = i;
    }
}

/* ---- 3. the schedule ----------------------------------------------------------------- */

/* Where a micro-batch of a stage stands in the walk. */
enum { HELD_NONE = 0, HELD_KEPT, HELD_IW, HELD_DONE };

/* The walk over device d's action list: what the micro-batches of its stages
 * (of stage `only` alone when >= 0) hold, and the peak of that plus the
 * running action's transient. Stage s's figures are run->mbs[s * m + i] and
 * run->rec[...]; its parameter gradients run->part[s] bytes, kept apart by a
 * backward that runs before its micro-batch's turn (models/unit_order.c)
 * until every micro-batch before it has been added. */
static int64_t fit_walk(const pipe_fit_run *run, int d, int only)
{
    const pp_schedule *sc = &run->sched;
    const int m = sc->micro_batches, S = sc->stages;
    unsigned char *held = calloc((size_t)S * (size_t)m, 1);
    unsigned char *parted = calloc((size_t)S * (size_t)m, 1);
    int *next = calloc((size_t)S, sizeof *next);
    int64_t total = 0, peak = 0;
    for (int k = 0; held && parted && next && k < sc->n_actions[d]; k++) {
        const pp_action a = sc->actions[d][k];
        const int s = a.stage, i = a.mb;
        if (s < 0 || s >= S || i < 0 || i >= m || (only >= 0 && s != only)) continue;
        if (a.kind != PP_ACT_F && a.kind != PP_ACT_B && a.kind != PP_ACT_I && a.kind != PP_ACT_W)
            continue;
        const pipe_fit_mb *x = &run->mbs[(size_t)s * m + i];
        const bool rec = run->rec[(size_t)s * m + i];
        const int64_t keeps = rec ? x->kept_input : x->kept;
        unsigned char *h = &held[(size_t)s * m + i];
        int64_t now = total;
        if (a.kind == PP_ACT_F) {
            /* a recomputed micro-batch: its input copy, and a forward keeping nothing */
            now += rec ? x->kept_input + x->discard : x->forward;
            if (*h == HELD_NONE) {
                *h = HELD_KEPT;
                total += keeps;
            }
        } else if (a.kind == PP_ACT_B || a.kind == PP_ACT_I) {
            if (*h == HELD_KEPT) {
                total -= keeps;
                now = total;
            }
            /* a recomputed micro-batch runs its forward again first */
            const int64_t pass = a.kind == PP_ACT_B ? x->backward : x->input;
            now += rec && x->recompute > pass ? x->recompute : pass;
            if (a.kind == PP_ACT_I) {
                *h = HELD_IW;
                total += x->iw;
            } else {
                *h = HELD_DONE;
            }
        } else { /* W: the weight part from what I kept, freed after it */
            if (*h == HELD_IW) total -= x->iw;
            *h = HELD_DONE;
        }
        /* B and W add the weight gradients: in turn, or into a part of their own */
        if (a.kind == PP_ACT_B || a.kind == PP_ACT_W) {
            if (i == next[s]) {
                for (next[s]++; next[s] < m && parted[(size_t)s * m + next[s]]; next[s]++) {
                    parted[(size_t)s * m + next[s]] = 0;
                    total -= run->part[s];
                }
            } else if (i > next[s]) {
                parted[(size_t)s * m + i] = 1;
                total += run->part[s];
                now += run->part[s];
            }
        }
        if (now > peak) peak = now;
    }
    free(held);
    free(parted);
    free(next);
    return peak;
}

/* The micro-batch sizes one replica runs (the plan's, or replica 0's piece
 * cut by the plan's rule). *m receives their count; the caller frees. */
static int *replica_sizes(const pp_plan *plan, int *m)
{
    int batch = plan->batch_size;
    if (plan->replicas > 1) batch = (plan->batch_size + plan->replicas - 1) / plan->replicas;
    int micro = plan->batch_by_micro ? (plan->micro_batches < batch ? plan->micro_batches : batch)
                                     : 0;
    int split = micro ? 0 : plan->split_size;
    if (plan->replicas <= 1) {
        *m = plan->micro_batches;
        int *s = malloc((size_t)*m * sizeof *s);
        if (s) memcpy(s, plan->micro_sizes, (size_t)*m * sizeof *s);
        return s;
    }
    *m = pp_batch_split_count(batch, split, micro);
    int *s = malloc((size_t)*m * sizeof *s);
    if (s) pp_batch_split_sizes(batch, split, micro, s);
    return s;
}

pp_status pipe_fit_schedule(const pp_plan *plan, pp_schedule *sched, pp_error *err)
{
    memset(sched, 0, sizeof *sched);
    int m;
    int *sizes = replica_sizes(plan, &m);
    if (!sizes) return pp_error_set(err, PP_ERR_OOM, "out of host memory");
    /* the program the run executes: the plan's built-in or its file's */
    pipe_sched ps;
    pp_status st = pipe_sched_init(&ps, plan, m, sizes, err);
    if (st == PP_OK) {
        st = pipe_sched_make(&ps, m, sizes, false, sched, err);
        pipe_sched_free(&ps);
    }
    free(sizes);
    return st;
}

int pp_fit_in_flight(const pp_plan *plan, int s)
{
    pp_schedule sched;
    if (!plan || s < 0 || s >= plan->n_stages || pipe_fit_schedule(plan, &sched, NULL) != PP_OK)
        return 0;
    int peak[PP_PLAN_MAX_STAGES];
    const int S = sched.stages;
    if (S <= PP_PLAN_MAX_STAGES) pp_schedule_in_flight(&sched, peak);
    pp_schedule_free(&sched);
    return s < S && S <= PP_PLAN_MAX_STAGES ? peak[s] : 0;
}

/* ---- 4. stages and devices ----------------------------------------------------------- */

static bool same_device(const pp_plan *plan, int a, int b)
{
    return plan->stages[a].rank == plan->stages[b].rank &&
           pp_device_id_equal(plan->stages[a].device, plan->stages[b].device);
}

pp_status pipe_fit_run_new(const pp_plan *plan, pipe_fit_run *run, pp_error *err)
{
    memset(run, 0, sizeof *run);
    PP_TRY(pipe_fit_schedule(plan, &run->sched, err));
    pp_program prog;
    pp_status st = pp_program_build(&run->sched, 2, &prog, err);
    if (st != PP_OK) {
        pp_schedule_free(&run->sched);
        return st;
    }
    const int m = run->sched.micro_batches, S = run->sched.stages;
    run->slots = prog.slots;
    run->cross = calloc((size_t)S, sizeof *run->cross);
    for (int b = 0; run->cross && b + 1 < S; b++) run->cross[b] = prog.cross[b];
    pp_program_free(&prog);
    for (int i = 0; i < m; i++)
        if (run->sched.mb_sizes[i] > run->n_max) run->n_max = run->sched.mb_sizes[i];
    run->mbs = calloc((size_t)S * (size_t)m, sizeof *run->mbs);
    run->rec = calloc((size_t)S * (size_t)m, sizeof *run->rec);
    run->part = calloc((size_t)S, sizeof *run->part);
    if (!run->mbs || !run->rec || !run->part || !run->cross) {
        pipe_fit_run_free(run);
        return pp_error_set(err, PP_ERR_OOM, "out of host memory");
    }
    return PP_OK;
}

void pipe_fit_run_free(pipe_fit_run *run)
{
    pp_schedule_free(&run->sched);
    free(run->mbs);
    free(run->rec);
    free(run->part);
    free(run->cross);
    memset(run, 0, sizeof *run);
}

void pipe_fit_stage_predict(const pp_plan *plan, const pipe_fit_units *fu, pipe_fit_run *run,
                            int s, int first, int last, pp_plan_recompute rec, pp_fit_stage *o)
{
    const int S = plan->n_stages, m = run->sched.micro_batches, n_max = run->n_max;
    const pp_plan_stage *ps = &plan->stages[s];
    const bool delay = plan->model.kind == PP_MODEL_DELAY;
    const int classes = plan->model.num_classes;
    int in_ndim;
    int64_t in_shape[PP_MAX_DIMS];
    pp_dtype in_dtype;
    pp_model_input(&plan->model, &in_ndim, in_shape, &in_dtype);
    const int64_t image = in_shape[1] * in_shape[2] * in_shape[3] * 4; /* F32 or I32 */
    const int64_t targets = pp_model_targets_per_sample(&plan->model);
    memset(o, 0, sizeof *o);
    o->cap = pp_plan_device_memory(plan, s);
    /* the stage's output per sample: what its boundary buffers hold */
    const int64_t out_b = delay ? (int64_t)classes * 4 : fu->units[last].out_bytes;
    pipe_fit_mb *mbs = &run->mbs[(size_t)s * m];
    bool *recs = &run->rec[(size_t)s * m];
    memset(mbs, 0, (size_t)m * sizeof *mbs);
    memset(recs, 0, (size_t)m * sizeof *recs);
    run->part[s] = 0;
    if (!delay) {
        const pp_catalogue *cat = &fu->cat;
        int64_t params = 0, count = 0, weights = 0, tied = 0;
        for (int u = first; u <= last; u++) {
            params += cat->units[u].param_bytes;
            count += cat->units[u].param_count;
            tied += cat->units[u].tied_count;
            weights += fu->units[u].weights;
        }
        /* the catalogue's parameter bytes hold the bf16 weight copies (bf16) */
        o->weight_copies = plan->precision == PP_PLAN_PRECISION_BF16 ? weights * 2 : 0;
        o->params = params - o->weight_copies;
        o->grads = count * 4;
        /* a tied copy has a gradient but no optimizer state (pipeline/tied.h) */
        o->optimizer = (count - tied) * 4 * pp_plan_optimizer_states(plan);
        run->part[s] = o->grads;
        int64_t ws = stage_workspace(fu, first, last, n_max, ps->device.kind);
        o->workspace = (int64_t)((double)ws * WORKSPACE_GROWTH);
        for (int i = 0; i < m; i++) {
            pipe_fit_stage_mb(fu, first, last, run->sched.mb_sizes[i], &mbs[i]);
            recs[i] = rec == PP_PLAN_RECOMPUTE_ALWAYS ||
                      (rec == PP_PLAN_RECOMPUTE_EXCEPT_LAST && i != m - 1);
        }
        pipe_fit_mb full;
        pipe_fit_stage_mb(fu, first, last, plan->split_size, &full);
        o->kept_full_per_mb = full.kept;
        o->kept_per_mb = rec == PP_PLAN_RECOMPUTE_NEVER ? full.kept : full.kept_input;
        o->activations = fit_walk(run, run->sched.stage_device[s], s);
    }
    int flight[PP_PLAN_MAX_STAGES];
    if (S <= PP_PLAN_MAX_STAGES) {
        pp_schedule_in_flight(&run->sched, flight);
        o->in_flight = flight[s];
    }
    /* the batch tensors (pipeline.c's alloc_buffers and open_eval; the
     * training batch twice, upload.c's two buffers) */
    if (s == 0) {
        o->batch += 2 * image * plan->batch_size;
        if (plan->eval.enabled) o->batch += image * plan->eval.batch_size;
    }
    if (s == S - 1) {
        /* per target: its label and its row of dlogits in the logits' dtype
         * (GPT-2's under bf16: bf16) */
        const int64_t row = 4 + out_b / targets;
        o->batch += (int64_t)plan->batch_size * targets * row + (int64_t)m * 8;
        if (plan->eval.enabled) {
            int eb = plan->eval.batch_size, em = (eb + plan->split_size - 1) / plan->split_size;
            o->batch += (int64_t)eb * targets * row + (int64_t)em * 8;
        }
        /* the last stage's output; GPT-2's goes to its gradient's rows (the
         * executor's own_output) */
        if (plan->model.kind != PP_MODEL_GPT2) o->slots += out_b * n_max;
    }
    /* a tied head's copy on another device: the stage holding the token
     * embedding (unit 0) stages the copy's gradient there (pipeline/tied.c) */
    if (!delay && first == 0)
        for (int t = 0; t < S; t++) {
            const pp_plan_stage *ts = &plan->stages[t];
            if (t == s || same_device(plan, s, t)) continue;
            for (int u = ts->first; u >= 0 && u <= ts->last; u++)
                o->batch += fu->cat.units[u].tied_count * 4;
        }
    /* boundary buffers (streams/executor.c): across devices, activations out
     * and gradients in on each side; between stages of one device, the
     * activation the lower one writes and the gradient the upper one writes,
     * each read where it is */
    if (s + 1 < S) o->slots += (run->cross[s] ? 2 : 1) * (int64_t)run->slots * out_b * n_max;
    if (s > 0) {
        int64_t prev = delay ? (int64_t)classes * 4 : fu->units[first - 1].out_bytes;
        o->slots += (run->cross[s - 1] ? 2 : 1) * (int64_t)run->slots * prev * n_max;
    }
    o->peak = o->params + o->grads + o->optimizer + o->weight_copies + o->batch + o->slots +
              o->workspace + o->activations;
}

void pipe_fit_device_peaks(const pp_plan *plan, const pipe_fit_run *run, pp_fit_stage *out)
{
    const bool delay = plan->model.kind == PP_MODEL_DELAY;
    for (int s = 0; s < plan->n_stages; s++) {
        /* the fixed parts of every stage on the device, and the walk over all
         * of their actions: stages of one device compute one at a time on one
         * stream (streams/executor.c), so they share its workspace, and their
         * activations peak together only as the device's order allows */
        int64_t fixed = 0, workspace = 0;
        for (int t = 0; t < plan->n_stages; t++) {
            if (!same_device(plan, s, t)) continue;
            fixed += out[t].peak - out[t].activations - out[t].workspace;
            if (out[t].workspace > workspace) workspace = out[t].workspace;
        }
        out[s].device_peak = fixed + workspace +
                             (delay ? 0 : fit_walk(run, run->sched.stage_device[s], -1));
    }
}

pp_status pipe_fit_predict_with(const pp_plan *plan, const pipe_fit_units *fu, pp_fit_stage *out,
                                pp_error *err)
{
    pipe_fit_run run;
    PP_TRY(pipe_fit_run_new(plan, &run, err));
    for (int s = 0; s < plan->n_stages; s++)
        pipe_fit_stage_predict(plan, fu, &run, s, plan->stages[s].first, plan->stages[s].last,
                               pp_plan_stage_recompute(plan, s), &out[s]);
    pipe_fit_device_peaks(plan, &run, out);
    pipe_fit_run_free(&run);
    return PP_OK;
}

pp_status pp_fit_predict(const pp_plan *plan, pp_fit_stage *out, pp_error *err)
{
    if (!plan || !out) return pp_error_set(err, PP_ERR_INVALID, "pp_fit_predict: NULL argument");
    if (plan->stages_auto)
        return pp_error_set(err, PP_ERR_INVALID, "pp_fit_predict: unresolved automatic stages");
    pipe_fit_units fu;
    PP_TRY(pipe_fit_units_new(plan, &fu, err));
    pp_status st = pipe_fit_predict_with(plan, &fu, out, err);
    pipe_fit_units_free(&fu);
    return st;
}
