/*
 * inprocess.c - data-parallel replicas that share this process, and the
 * public calls of pipeline.h that run on every rank of such a job.
 *
 * A plan with `replicas: R` whose devices name no rank (replicas_in_process)
 * runs as a job of R threads (pp_comm_local_new): rank r builds replica r as
 * a pipeline of its own, exactly as process r of an mpirun job would (its
 * devices, data piece, executor, gradient buckets summed over the ranks of
 * each stage in replica order), so R replicas in one process give the bits
 * of R replicas over R processes. The pipeline the caller holds is rank 0's;
 * every collective call on it (new, step, evaluate, save, load, write_trace)
 * runs the same call on every rank at once, each rank on a thread of its own
 * while the caller waits, and returns when all have finished; free frees the
 * ranks one after the other on the caller. The rank threads are a host
 * thread pool (runtime/core/thread_pool.h) of R workers that lives as long
 * as the pipeline: each call is a job of R tasks, one per rank, that only
 * the pool's threads take, so every rank has a thread to itself for the
 * whole call while it waits in collectives for the others (which thread
 * runs which rank may change from one call to the next). Figures and reports
 * are rank 0's, which hold every replica's (each step's times travel to all
 * ranks).
 *
 * A rank whose call fails marks the job failed, so the others' waits end at
 * once instead of at their timeout, and the caller gets the first failure's
 * error ("replica r: ..." for r > 0, unless it is a plan error, which names
 * the replica's device entry at FILE:LINE:COL).
 *
 * An embedder that runs its own threads may instead pass each rank of a job
 * of threads in pp_pipeline_options.comm: each call then acts on that rank
 * alone, as with processes.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/checkpoints.h"
#include "pipeline/generate.h"
#include "pipeline/pipeline_impl.h"
#include "pipeline/report.h"
#include "pipeline/step.h"
#include "runtime/core/thread_pool.h"

typedef struct pipe_local {
    int n;                       /* ranks: one per replica */
    pp_comm **comms;             /* (n) */
    struct pp_pipeline **ranks;  /* (n) ranks[0] is the caller's pipeline */
    pp_thread_pool *threads;     /* n workers: rank r's call runs on one of them */
} pipe_local;

/* One call on one rank. */
typedef enum call_kind { CALL_NEW, CALL_STEP, CALL_EVAL, CALL_SAVE, CALL_LOAD, CALL_TRACE } call_kind;

typedef struct rank_call {
    call_kind kind;
    int rank;
    pipe_local *L;
    /* arguments */
    const pp_plan *plan;
    pp_pipeline_options opts;
    const char *path;
    const pp_pipeline_save_options *save;
    pp_step_result *step;
    pp_eval_result *eval;
    /* result */
    pp_status st;
    pp_error err;
} rank_call;

/* Task r of a job: rank r's call (arg: the job's rank_call array). */
static void run_call(void *arg, int64_t r, int worker)
{
    rank_call *c = &((rank_call *)arg)[r];
    struct pp_pipeline *p = c->L->ranks[c->rank];
    switch (c->kind) {
    case CALL_NEW:
        c->st = pipe_new_rank(c->plan, &c->opts, &c->L->ranks[c->rank], &c->err);
        break;
    case CALL_STEP:
        c->st = pipe_step_rank(p, c->step, &c->err);
        break;
    case CALL_EVAL:
        c->st = pipe_evaluate_rank(p, c->eval, &c->err);
        break;
    case CALL_SAVE:
        c->st = pipe_save_rank(p, c->path, c->save, &c->err);
        break;
    case CALL_LOAD:
        c->st = pipe_load_rank(p, c->path, &c->err);
        break;
    case CALL_TRACE:
        c->st = pipe_write_trace_rank(p, c->path, &c->err);
        break;
    }
    if (c->st != PP_OK) pp_comm_mark_failed(c->L->comms[c->rank], c->err.msg);
}

/* Runs `proto` on every rank at once (each on a thread of the pool) and
 * returns the first failure, if any. Rank r > 0 gets its own step or
 * evaluation result to fill (rank 0's are the caller's). */
static pp_status run_all(pipe_local *L, const rank_call *proto, pp_error *err)
{
    int n = L->n;
    rank_call *calls = calloc((size_t)n, sizeof *calls);
    pp_step_result *steps = calloc((size_t)n, sizeof *steps);
    pp_eval_result *evals = calloc((size_t)n, sizeof *evals);
    pp_status s = PP_OK;
    if (!calls || !steps || !evals) {
        s = pp_error_set(err, PP_ERR_OOM, "out of host memory (replicas in one process)");
        goto done;
    }
    for (int r = 0; r < n; r++) {
        calls[r] = *proto;
        calls[r].rank = r;
        calls[r].L = L;
        calls[r].opts.comm = L->comms[r];
        if (r) {
            calls[r].step = proto->step ? &steps[r] : NULL;
            calls[r].eval = proto->eval ? &evals[r] : NULL;
        }
    }
    /* the pool has n workers: each rank gets a thread of its own */
    pp_thread_pool_run(L->threads, PP_THREAD_POOL_WORKERS_ONLY, n, run_call, calls);
    int first = -1;
    char msg[8];
    for (int r = 0; r < n && first < 0; r++)
        if (calls[r].st != PP_OK) first = r;
    int marked;
    if (first >= 0 && pp_comm_first_failure(L->comms[0], &marked, msg, sizeof msg) &&
        calls[marked].st != PP_OK)
        first = marked;
    if (first >= 0) {
        *err = calls[first].err;
        s = calls[first].st;
        /* a plan error names its place (the replica's device entry) */
        if (first > 0 && s != PP_ERR_INPUT) pp_error_prefix(err, "replica %d", first);
    }
done:
    free(calls);
    free(steps);
    free(evals);
    return s;
}

static void local_free(pipe_local *L)
{
    if (!L) return;
    for (int r = 0; r < L->n; r++) {
        if (L->ranks) pipe_free_rank(L->ranks[r]);
        if (L->comms) pp_comm_free(L->comms[r]);
    }
    pp_thread_pool_free(L->threads);
    free(L->ranks);
    free(L->comms);
    free(L);
}

/* The first line of every public call here: an error to fill (the caller's,
 * or the call's own where the caller passed NULL: the code beneath writes
 * into it, and the replicas copy theirs into it). */
#define ERROR_TO_FILL                                                                       \
    pp_error unread;                                                                        \
    if (!err) err = &unread

/* Whether pp_pipeline_new makes the job of threads itself. */
static bool makes_local_job(const pp_plan *plan, const pp_pipeline_options *opts)
{
    return plan && plan->replicas_in_process && !(opts && pp_comm_is_local(opts->comm));
}

pp_status pp_pipeline_new(const pp_plan *plan, const pp_pipeline_options *opts, pp_pipeline **out,
                          pp_error *err)
{
    ERROR_TO_FILL;
    if (!out) return pp_error_set(err, PP_ERR_INVALID, "pp_pipeline_new: out is NULL");
    if (!makes_local_job(plan, opts)) return pipe_new_rank(plan, opts, out, err);
    *out = NULL;
    int size = opts ? pp_comm_size(opts->comm) : 1;
    if (size > 1) {
        char msg[320];
        snprintf(msg, sizeof msg, "the plan's %d replicas run in one process (no device names "
                 "a rank), but the job has %d processes: start it without mpirun, or give "
                 "each replica ranks of its own (e.g. [cpu:0, rank1:cpu:0])", plan->replicas,
                 size);
        return pipe_plan_error(plan, plan->replicas_mark, err, PP_ERR_INPUT, msg);
    }
    pipe_local *L = calloc(1, sizeof *L);
    if (!L) return pp_error_set(err, PP_ERR_OOM, "out of host memory");
    L->n = plan->replicas;
    L->comms = calloc((size_t)L->n, sizeof *L->comms);
    L->ranks = calloc((size_t)L->n, sizeof *L->ranks);
    pp_status s = L->comms && L->ranks ? pp_comm_local_new(L->n, L->comms, err)
                                       : pp_error_set(err, PP_ERR_OOM, "out of host memory");
    if (s == PP_OK && opts && opts->comm) /* the process's own timeout holds for its threads */
        for (int r = 0; r < L->n && s == PP_OK; r++)
            s = pp_comm_set_timeout(L->comms[r], pp_comm_timeout(opts->comm), err);
    if (s == PP_OK) {
        s = pp_thread_pool_new(L->n, L->n, &L->threads, err);
        if (s != PP_OK && err) pp_error_prefix(err, "replicas in one process");
    }
    rank_call proto = {.kind = CALL_NEW, .plan = plan};
    if (opts) proto.opts = *opts;
    if (s == PP_OK) s = run_all(L, &proto, err);
    if (s != PP_OK) {
        local_free(L);
        return s;
    }
    L->ranks[0]->local = L;
    *out = L->ranks[0];
    return PP_OK;
}

void pp_pipeline_free(pp_pipeline *p)
{
    if (!p || !p->local) {
        pipe_free_rank(p);
        return;
    }
    pipe_local *L = p->local;
    p->local = NULL;
    local_free(L);
}

/* PP_ERR_INVALID for a call on no pipeline, or with no path where it takes
 * one (NULL). */
static pp_status entry_check(const pp_pipeline *p, const char *fn, bool takes_path,
                             const char *path, pp_error *err)
{
    if (!p) return pp_error_set(err, PP_ERR_INVALID, "%s: no pipeline (NULL)", fn);
    if (takes_path && !path) return pp_error_set(err, PP_ERR_INVALID, "%s: no path (NULL)", fn);
    return PP_OK;
}

/* The first lines of a public call on a pipeline: ERROR_TO_FILL, then
 * entry_check. */
#define PUBLIC_ENTRY(fn, takes_path, path)                                                  \
    ERROR_TO_FILL;                                                                          \
    PP_TRY(entry_check(p, fn, takes_path, path, err))

pp_status pp_pipeline_step(pp_pipeline *p, pp_step_result *res, pp_error *err)
{
    PUBLIC_ENTRY("pp_pipeline_step", false, NULL);
    if (!p->local) return pipe_step_rank(p, res, err);
    pp_step_result mine;
    return run_all(p->local, &(rank_call){.kind = CALL_STEP, .step = res ? res : &mine}, err);
}

pp_status pp_pipeline_evaluate(pp_pipeline *p, pp_eval_result *out, pp_error *err)
{
    PUBLIC_ENTRY("pp_pipeline_evaluate", false, NULL);
    if (!p->local) return pipe_evaluate_rank(p, out, err);
    pp_eval_result mine;
    return run_all(p->local, &(rank_call){.kind = CALL_EVAL, .eval = out ? out : &mine}, err);
}

pp_status pp_pipeline_generate(pp_pipeline *p, const int32_t *prompt, int n_prompt,
                               const pp_generate_options *o, int32_t *out, pp_error *err)
{
    ERROR_TO_FILL;
    if (p && p->local)
        return pp_error_set(err, PP_ERR_UNSUPPORTED,
                            "generation runs one replica (the plan has replicas in this "
                            "process)");
    return pipe_generate_rank(p, prompt, n_prompt, o, out, err);
}

pp_status pp_pipeline_save(pp_pipeline *p, const char *path, bool with_optimizer, pp_error *err)
{
    const pp_pipeline_save_options o = {.with_optimizer = with_optimizer};
    return pp_pipeline_save_with(p, path, &o, err);
}

pp_status pp_pipeline_save_with(pp_pipeline *p, const char *path,
                                const pp_pipeline_save_options *opts, pp_error *err)
{
    PUBLIC_ENTRY("pp_pipeline_save", true, path);
    const pp_pipeline_save_options none = {0};
    if (!opts) opts = &none;
    if (opts->n_meta && !opts->meta)
        return pp_error_set(err, PP_ERR_INVALID, "%s: %zu metadata entries and no array (NULL)",
                            path, opts->n_meta);
    if (!p->local) return pipe_save_rank(p, path, opts, err);
    return run_all(p->local, &(rank_call){.kind = CALL_SAVE, .path = path, .save = opts}, err);
}

pp_status pp_pipeline_load(pp_pipeline *p, const char *path, pp_error *err)
{
    PUBLIC_ENTRY("pp_pipeline_load", true, path);
    if (!p->local) return pipe_load_rank(p, path, err);
    return run_all(p->local, &(rank_call){.kind = CALL_LOAD, .path = path}, err);
}

pp_status pp_pipeline_write_trace(const pp_pipeline *p, const char *path, pp_error *err)
{
    PUBLIC_ENTRY("pp_pipeline_write_trace", true, path);
    if (!p->local) return pipe_write_trace_rank(p, path, err);
    return run_all(p->local, &(rank_call){.kind = CALL_TRACE, .path = path}, err);
}
