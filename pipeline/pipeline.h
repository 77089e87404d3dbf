/*
 * pipeline.h - the pipeline object: a plan made runnable.
 *
 * pipeline/ makes a plan runnable: this pipeline object, the memory model
 * and planner of fit.h, and the umbrella public header pipeline_run.h. Each
 * file declares what it offers the others in a header of its own (step.h,
 * schedules.h, ...; pipeline.c's in pipeline_impl.h; memory.c, limits.c,
 * optimize.c and profile.c in fit.h and fit_internal.h) over the shared
 * state (state.h). Calls run one way, from two roots:
 *
 *   - the pipeline: inprocess.c (the public calls, for every rank of a job
 *     of threads) calls checkpoints.c, step.c, report.c and pipeline.c
 *     (building a rank's pipeline); checkpoints.c calls step.c; step.c
 *     calls report.c; below them schedules.c (the plan's schedule program
 *     for any batch), planning.c (prediction, cuDNN limits; it calls
 *     schedules.c and profile.c), links.c and link_cost.c (NCCL links
 *     between ranks' CUDA stages, the cost of a message), clocks.c,
 *     prefetch.c, and at the bottom replicas.c;
 *   - the planner (fit.h): optimize.c (pp_fit_optimize) calls limits.c
 *     (caps and the fit check), profile.c (measured unit times and their
 *     cache) and memory.c (the memory model, pp_fit_predict); limits.c
 *     calls memory.c.
 *
 * It includes runtime/, models/, streams/ and partitioner/; only cli/ is
 * above.
 *
 * A pipeline assembles everything a plan names: the devices, one model stage
 * per plan stage (ResNet units, a sequential model or the delay model), the
 * data source, the schedule as a program of actions per device (a built-in
 * generated for the plan's micro-batches, or the plan's CSV file), the
 * executor that runs it with explicit copies between stages, and one SGD
 * optimizer over the parameters of every stage. pp_pipeline_step trains on
 * one mini-batch:
 *
 *   1. read the step's batch from the data source (with `epochs`, every epoch
 *      is one pass over the data, its last batch holding the rest, cut into
 *      micro-batches by the plan's rule) and place the images on stage 0's
 *      device and the labels on the last stage's device; set the learning
 *      rate of the plan's schedule for the step's epoch (or step);
 *   2. zero every gradient;
 *   3. run the schedule program: the forward and the backward (whole, or
 *      its input and weight parts) of every micro-batch, the loss (softmax
 *      cross-entropy summed over the micro-batch and divided by the global
 *      batch size) after the last stage, gradients accumulated in
 *      micro-batch order 0..m-1; with replicas, the gradients summed over
 *      them;
 *   4. one optimizer step over all parameters.
 *
 * Results therefore do not depend on the schedule or on the number of stages
 * (bitwise on the CPU backend).
 *
 * Errors: bad plans or data are PP_ERR_INPUT with "FILE:LINE:COL: message"
 * where the plan gives a place; runtime failures name the stage, device and
 * micro-batch ("stage 1 (cpu:1) micro-batch 3: ..."); a NaN or infinite loss
 * is PP_ERR_NUMERIC.
 *
 * Ownership: the pipeline copies what it needs from the plan (which may be
 * freed afterwards) and owns every device context, stage, buffer and stream.
 * Threading: one host thread drives a pipeline; internally stages run on
 * their own streams. A pipeline may be stepped any number of times.
 */
#ifndef PP_PIPELINE_H
#define PP_PIPELINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "partitioner/plan.h"
#include "runtime/comm/comm.h"
#include "runtime/core/status.h"
#include "runtime/io/checkpoint.h"
#include "streams/schedule.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pp_pipeline pp_pipeline;

/* The memory order of the stages' 4-D activations (runtime/core/tensor.h). */
typedef enum pp_pipeline_layout {
    PP_PIPELINE_LAYOUT_AUTO = 0, /* NHWC on devices whose backend computes faster so in the
                                  * plan's precision (CUDA in bf16), NCHW elsewhere */
    PP_PIPELINE_LAYOUT_NCHW,     /* NCHW everywhere */
    PP_PIPELINE_LAYOUT_NHWC,     /* NHWC everywhere (slower where a backend converts) */
} pp_pipeline_layout;

/* Whether training steps replay their device work as graphs (graph.h):
 * PLAN follows the plan's `cuda_graphs` (default on), overridden by the
 * environment variable PP_CUDA_GRAPHS=on|off; ON and OFF override both.
 * Graphs apply when every stage is on a CUDA device in one process, and are
 * "not applicable" otherwise. A model with dropout (GPT-2's model.dropout)
 * replays too: its dropout ops read the step from device memory that each
 * step sets before the graph runs, so a replay draws its own step's masks.
 * FORCE uses them on any
 * backend (CPU stages replay a recorded item list: for tests of the replay
 * path). */
typedef enum pp_pipeline_graphs {
    PP_PIPELINE_GRAPHS_PLAN = 0,
    PP_PIPELINE_GRAPHS_ON,
    PP_PIPELINE_GRAPHS_OFF,
    PP_PIPELINE_GRAPHS_FORCE,
} pp_pipeline_graphs;

typedef struct pp_pipeline_options {
    bool keep_trace;   /* keep every step's timed spans for pp_pipeline_write_trace */
    int slots;         /* executor buffers per boundary and direction; 0 = default (2) */
    pp_comm *comm;     /* the job this process belongs to (pp_comm_init), for plans whose
                        * stages name other ranks ("rank1:cpu:0"); NULL: one process. Every
                        * rank builds the pipeline from the same plan and calls step,
                        * evaluate, save and load in the same order; each runs its own
                        * stages and updates their parameters, and every rank gets the
                        * losses. Must outlive the pipeline.
                        * A plan with replicas whose devices name no rank runs them all in
                        * this process: pp_pipeline_new then makes a job of threads itself
                        * (one per replica, pp_comm_local_new) and every call below runs on
                        * all of them, returning rank 0's results (comm NULL or a job of one
                        * process). An embedder running its own threads may pass each a
                        * rank of its own job of threads instead. */
    pp_pipeline_layout layout; /* the layout of activations; results do not depend on it
                        * (bit for bit on the CPU backend) */

    pp_pipeline_graphs graphs; /* graph replay of training steps (default PLAN) */
    bool grad_allreduce_whole; /* replicas (ignored without): every parameter gradient in
                        * one sum over the whole job after the step's run: each rank
                        * copies its stages' gradients into one host buffer (zeros for
                        * the stages it does not hold), the buffer is summed over all
                        * ranks and copied back (never through NCCL). false (the
                        * default): one bucket per stage, summed over the ranks of
                        * that stage's replicas, on the stage's gradient lane as soon
                        * as its backward is done where NCCL links the replicas (CUDA
                        * stages) or the job lets threads communicate (CPU stages,
                        * pp_comm_thread_safe), else after the run through host
                        * memory. Both give every replica the same bits; with two
                        * replicas both give the same sums. */
} pp_pipeline_options;

/* What one step did. */
typedef struct pp_step_result {
    int64_t step;      /* 0-based index of the step just run */
    double loss;       /* mean cross-entropy over the mini-batch (a token model's: over every
                          token of it) */
    double accuracy;   /* fraction of the mini-batch classified correctly (before the update;
                          a token model's: of its next tokens) */
    double step_ms;    /* wall time of the whole step (data, schedule, optimizer) */
    double data_wait_ms; /* of it, the time spent waiting for the step's batch (read ahead
                            during the steps before, unless the loader fell behind) */
    double bubble;     /* measured idle fraction of the stages during the schedule */
    int64_t epoch;     /* 0-based epoch of the step (with steps: step / steps per epoch) */
    int batch;         /* samples in the step (an epoch's last batch may be smaller) */
    double lr;         /* learning rate the step used */
    bool epoch_end;    /* the plan trains for epochs and this step ended one */
    double grad_norm;  /* the gradients' total 2-norm before clipping (with
                        * optimizer.clip_grad_norm); -1 without clipping */
} pp_step_result;

/* One pass over the plan's eval data. */
typedef struct pp_eval_result {
    int64_t samples;   /* test samples (a token model's: windows of block_size tokens) */
    double loss;       /* mean cross-entropy (a token model's: per token) */
    double accuracy;   /* top-1 (a token model's: of the next token) */
    double seconds;    /* wall time of the pass */
    double images_per_s; /* pipelined inference throughput (samples per second) */
    double perplexity; /* exp(loss) */
    double top5_accuracy; /* the label among the five largest logits (ties to the lower
                           * class, as top-1's argmax; a token model's: per token) */
} pp_eval_result;

/* Per-stage figures, aggregated over the steps run so far (the first step is
 * excluded when more than one has run). */
typedef struct pp_stage_report {
    char device[16];          /* "cpu:1", "cuda:0" (without the rank) */
    int rank;                 /* the process of the job that runs the stage (0 in one process) */
    int n_layers;             /* items of the plan's layer list (0 for the delay model) */
    const char *const *layers; /* (n_layers) "conv1", ..., "layer1", "layer2.0": the plan's
                                  compact spelling; owned by the pipeline, valid until
                                  pp_pipeline_free */
    int64_t params;           /* learnable scalars */
    double forward_ms;        /* median forward time of one micro-batch */
    double backward_ms;       /* median backward time of one micro-batch */
    double busy_frac;         /* median fraction of the step the stage computed */
    double grads_ms;          /* replicas: median time of the sum of the stage's gradients
                                 over its replicas (the bucket's grads_ready span; with
                                 --grad-allreduce whole, the one sum of every gradient of
                                 the stage's rank), waiting for the slowest replica
                                 included; 0 without replicas */
    size_t peak_bytes;        /* high-water mark of memory on the stage's device */
    int max_in_flight;        /* most micro-batches whose activations were held at once */
    double link_gbps;         /* the boundary to the next stage, when the two run on two
                                 ranks as host messages: bandwidth measured when the
                                 pipeline was made (GB/s); 0 otherwise */
    double link_latency_ms;   /* ... and latency of one message (ms) */
    int schedule_device;      /* the schedule device the stage is placed on (stages that
                                 repeat a plan device share one) */
    int in_flight;            /* the schedule's peak of micro-batches in flight on the stage
                                 (pp_schedule_in_flight: F run, B or W not yet) */
    double input_ms;          /* median I (split backward for the input), 0 without one */
    double weight_ms;         /* median W (split backward for the weights), 0 without one */
    double bubble_predicted;  /* simulator, from the measured costs: the idle fraction of
                                 the stage's device over the step */
} pp_stage_report;

typedef struct pp_pipeline_report {
    int steps;                    /* steps run */
    double step_ms_median, step_ms_min, step_ms_max; /* first step excluded when steps > 1 */
    double images_per_s;          /* batch size / median step time */
    double bubble_frac;           /* median measured bubble */
    double predicted_step_ms;     /* simulator, from the measured per-stage costs */
    double bubble_frac_predicted; /* simulator */
    int devices;                  /* the schedule's devices (stages may share one) */
    const char *schedule;         /* the schedule's name ("zbv", "file") */
    const char *schedule_note;    /* how a built-in fitted the micro-batch count (padding,
                                     schedule.h), or NULL; valid while the pipeline lives */
    size_t copy_bytes;            /* per step, median bytes of all boundary copies (in a job,
                                     every rank's, each message counted once) */
    double copy_ms;               /* per step, median total copy time (the sender's side of
                                     each copy; a message's send, which waits for no compute) */
    int ranks;                    /* processes of the job (1 without mpirun, and with
                                     replicas in one process) */
    int replicas;                 /* data-parallel replicas of the pipeline (plan `replicas`);
                                     the stage figures are those of rank 0's replica */
    const char *graphs;           /* "on", "off" or "n/a" (not applicable: stages not all on
                                     CUDA, or several processes); "off" also after a refused
                                     capture (graph_refusal says why) */
    int graph_captures;           /* steps captured into a graph (then launched) */
    int graph_replays;            /* steps that launched a graph captured earlier */
    int graph_launches;           /* graph launches over all steps */
    const char *graph_refusal;    /* why a capture was refused and the steps ran eagerly,
                                     or NULL; valid while the pipeline lives */
    double data_wait_ms;          /* median time a step waited for its batch (first step
                                     excluded when more than one ran): 0 while the loader
                                     keeps ahead */
    int data_workers;             /* threads reading a batch (plan data.workers) */
    int data_prefetch;            /* batches read ahead (plan data.prefetch) */
    int64_t bad_images;           /* images skipped and replaced so far (on_bad_image: skip),
                                     training and test sets */
    const char *bad_image_first;  /* the first one's message, or NULL; valid until the next
                                     call */
    int64_t text_tokens;          /* training data read as text through GPT-2's tokenizer: its
                                     tokens (0: other data) */
    bool text_from_cache;         /* its ids mapped from the cache of texts tokenized */
    bool text_cached;             /* it was tokenized and its ids cached */
    double text_tokenize_s;       /* tokenizing it, or checking and mapping the cache file */
    const char *text_cache_path;  /* the cache file read or written, or NULL; valid until the
                                     next call */
    int text_cache_evicted;       /* files evicted from the token cache (least recently used)
                                     after its writes, to keep it within PP_TOKEN_CACHE_MAX */
    int64_t text_cache_evicted_bytes; /* their sizes */
    int64_t eval_text_tokens;     /* the test set read as text through the tokenizer: its
                                     tokens (0: no such test set) */
    bool eval_text_from_cache;    /* as text_from_cache, for the test set */
    bool eval_text_cached;        /* as text_cached */
    double eval_text_tokenize_s;  /* as text_tokenize_s */
    const char *eval_text_cache_path; /* as text_cache_path */
} pp_pipeline_report;

/* Figures of one data-parallel replica (plan `replicas`), aggregated like
 * pp_pipeline_report (median, first step excluded when more than one ran).
 * Every rank reports every replica: each replica's figures travel from the
 * rank of its first stage after each step. */
typedef struct pp_replica_report {
    int n_ranks;                  /* processes running its stages (with replicas in one
                                     process: 1, rank 0) */
    int ranks[PP_PLAN_MAX_STAGES]; /* (n_ranks) in stage order, each once */
    int batch;                    /* its piece of the full batch */
    double step_ms;               /* median whole step, as its first stage's rank measured it */
    double run_ms;                /* median time of its schedule's run (forward, backward and
                                     gradient buckets), without the optimizer and the losses */
    double images_per_s;          /* batch / step_ms */
} pp_replica_report;

/* Builds the pipeline of a resolved plan (explicit stages; see
 * pp_pipeline_resolve_plan for `stages: auto`). Devices must exist. */
pp_status pp_pipeline_new(const pp_plan *plan, const pp_pipeline_options *opts, pp_pipeline **out,
                          pp_error *err);
void pp_pipeline_free(pp_pipeline *p);

/* Resolves `stages: auto` in place: flops and memory balance from the model's
 * cost metadata, time balance by timing each unit's forward and backward on
 * the plan's first device for a few micro-batches. No-op for explicit stages. */
pp_status pp_pipeline_resolve_plan(pp_plan *plan, pp_error *err);

/* Trains on the next mini-batch (step index = steps run so far). res may be NULL. */
pp_status pp_pipeline_step(pp_pipeline *p, pp_step_result *res, pp_error *err);

/* Steps in one epoch: ceil(N / batch) for N training samples (with epochs,
 * the last one holds the rest). */
int64_t pp_pipeline_steps_per_epoch(const pp_pipeline *p);

/* What the model sees, without a pipeline: the plan's data read as a run
 * reads it (the same files, transforms, random draws, order and
 * normalisation). pp_plan_show_data draws the first n samples of the
 * training stream (1..1024), un-normalised, as a PNG grid captioned with each
 * sample's class and file. pp_plan_dump_data writes, as safetensors,
 * "images" (f32 N x C x H x W, normalised, as the first stage gets them) and
 * "labels" (i32 N) of training step `index` (0-based, the whole global batch)
 * or of the index-th evaluation batch (eval), with metadata "step" or
 * "eval_batch" and "paths", a JSON list of each sample's file (relative to
 * the image folder) or "FORMAT sample I". A token source's step is written
 * as "inputs" and "targets" (i32 N x T: each window's ids and the ids after
 * them) with "windows", a JSON list of each window's position in the stream
 * of samples (epoch x windows per epoch + i); pp_plan_show_data writes a
 * token source's first n windows (at most the source's) as text: each
 * window's ids (its inputs, then its last target) and, through the plan's
 * tokenizer or a byte a token, its tokens' bytes between | marks and its
 * text (\n \r \t \| \\ and \xHH escaped). Errors: the data source's; an evaluation batch
 * past the test set, or no eval section, PP_ERR_INPUT. */
pp_status pp_plan_show_data(const pp_plan *plan, int n, const char *path, pp_error *err);
pp_status pp_plan_dump_data(const pp_plan *plan, int64_t index, bool eval, const char *path,
                            pp_error *err);

/* Whether the pipeline can still step, evaluate, save, load and generate:
 * false after a step or evaluation failed midway (a failure to read the
 * step's batch, which comes before any work, leaves it usable: its last
 * whole step can be saved). Once false, each of those calls returns PP_ERR_INVALID ("an earlier
 * step or evaluation of this pipeline failed"): free it, make a new one and
 * load a checkpoint into that. Also false while a load that failed after it
 * began writing the parameters (a read failing after the file's checks, a
 * step count below 1) has left them partly the file's: step, evaluate, save
 * and generate then return PP_ERR_INVALID ("an earlier load failed after it
 * began writing the parameters"), and a load that succeeds makes it usable
 * again. A load refused before writing (a missing or corrupt file, another
 * model's) leaves the pipeline as it was. */
bool pp_pipeline_usable(const pp_pipeline *p);

/* True when the plan has an eval section. */
bool pp_pipeline_has_eval(const pp_pipeline *p);

/* Evaluates on the eval data: every test sample once, in batches of
 * eval.batch_size through a forward-only pipelined schedule over the same
 * stages, batch norm in inference mode (running statistics), nothing
 * trained. PP_ERR_INVALID without an eval section. out may be NULL (the
 * figures not wanted). */
pp_status pp_pipeline_evaluate(pp_pipeline *p, pp_eval_result *out, pp_error *err);

/* How pp_pipeline_generate samples. */
typedef struct pp_generate_options {
    int tokens;          /* new tokens to sample (>= 0) */
    double temperature;  /* > 0: sample from softmax(logits / temperature); 0: always the
                            most likely token (greedy) */
    int top_k;           /* > 0: sample among the k most likely tokens only; 0: all */
    uint64_t seed;       /* the sampler's stream: token i draws from (seed, i) */
    int window_step;     /* without the cache (no_cache, or past the window), a forward
                            computes the window's filled positions rounded up to a
                            multiple of this, at most block_size (0: 64; block_size or
                            more: the whole window every time) */
    bool (*on_token)(void *user, int index, int32_t token); /* NULL, or called on every
                            rank with each new token as soon as it is known (index 0 the
                            first after the prompt), in order, before the next forward: to
                            show the text as it comes. Returning false ends the generation
                            there (PP_OK; out holds the prompt and the index + 1 tokens so
                            far): every rank must return the same */
    void *user;          /* on_token's first argument */
    bool no_cache;       /* true: no cache of keys and values; every forward computes the
                            window's positions (rounded up to window_step) again */
} pp_generate_options;

/* Continues a token sequence with a token model (GPT-2): out (n_prompt +
 * o->tokens ids) receives the prompt, then each new token, sampled from the
 * logits of the last position after a forward of the sequence's last
 * block_size tokens (data.block_size: the window) through the same stages
 * (inference, one sample, nothing trained). While the sequence fits the
 * window, each block keeps its positions' keys and values (a cache on its
 * stage's device, freed at the end): the prompt's forward computes the
 * prompt's positions, and each new token's forward its own position alone,
 * its attention reading the cache; the logits are the whole window's
 * forward's within rounding (the products are of other shapes). Past the
 * window (the positions then shift), and with o->no_cache, a forward
 * computes the window's filled positions, rounded up to a multiple of
 * o->window_step; the positions after the sequence hold id 0, which the
 * causal attention keeps from the sampled position. A row's arithmetic
 * does not depend on the rows after it, so those logits are the whole
 * window's forward's (on the CPU backend, its bits).
 * Every rank of a job calls it and gets the same tokens (the last stage's
 * rank samples and tells the others). PP_ERR_INVALID for a model without
 * token inputs, an empty prompt or an id outside the vocabulary;
 * PP_ERR_UNSUPPORTED with replicas in this process. */
pp_status pp_pipeline_generate(pp_pipeline *p, const int32_t *prompt, int n_prompt,
                               const pp_generate_options *o, int32_t *out, pp_error *err);

/* Steps run so far (including steps restored by pp_pipeline_load). */
int64_t pp_pipeline_steps_done(const pp_pipeline *p);

/* Number of stages (the plan's). */
int pp_pipeline_stage_count(const pp_pipeline *p);
/* Fills *out with the figures of stage 0..count-1 (all zero for an index out
 * of range). */
void pp_pipeline_stage_report(const pp_pipeline *p, int stage, pp_stage_report *out);
/* Replica 0..replicas-1 (pp_pipeline_report.replicas); zeroed outside. */
void pp_pipeline_replica_report(const pp_pipeline *p, int replica, pp_replica_report *out);
/* Fills *out with the pipeline's figures so far: the steps' figures zero
 * before the first step; devices, replicas and the schedule always set. */
void pp_pipeline_report_get(const pp_pipeline *p, pp_pipeline_report *out);

/* Writes every parameter and buffer under its torchvision state_dict name,
 * plus (with_optimizer) the momentum buffers as "optimizer.momentum.<name>",
 * to a safetensors file, atomically, with checksums (io/checkpoint.h). The
 * metadata records the steps run ("pipeline-run.steps") and what a step
 * means under the plan: "pipeline-run.plan.<key>" for each of
 * pp_plan_step_keys. PP_ERR_UNSYNCED: the file is whole and in place but its
 * folder could not be synced (io/checkpoint.h). */
pp_status pp_pipeline_save(pp_pipeline *p, const char *path, bool with_optimizer, pp_error *err);

typedef struct pp_pipeline_save_options {
    bool with_optimizer;
    const pp_checkpoint_meta *meta; /* (n_meta) the caller's metadata, added to the file's */
    size_t n_meta;
    bool (*cancelled)(void *arg);   /* (optional) polled while rank 0 writes: true abandons
                                     * the file (pp_checkpoint_save_cancellable), and every
                                     * rank returns PP_ERR_INTERRUPTED */
    void *cancel_arg;
} pp_pipeline_save_options;

/* pp_pipeline_save with options. */
pp_status pp_pipeline_save_with(pp_pipeline *p, const char *path,
                                const pp_pipeline_save_options *opts, pp_error *err);

/* Loads a safetensors file written by pp_pipeline_save or from torchvision's
 * state_dict: every parameter and buffer must be present with the right
 * shape and dtype, its checksum right (when the file has checksums) and its
 * values finite; optimizer state is restored when present. PP_ERR_INPUT
 * naming the file and tensor otherwise. The plan the file records is not
 * compared here (a file may start another run: --load). */
pp_status pp_pipeline_load(pp_pipeline *p, const char *path, pp_error *err);

/* Writes the kept spans (options.keep_trace) as a Chrome trace: this
 * process's streams. In a job of several processes every rank calls it and
 * writes its own file: rank 0 path, rank R path with ".rankR" before the
 * extension (run.json, run.rank1.json, ...); their devices read "rank1
 * cpu:0". In one process the times start at the first kept step; in a job
 * every file is on rank 0's clock, from the instant the job synchronised
 * its clocks when the pipeline was made (offsets estimated then, written
 * with their uncertainty in each file's otherData: streams/trace.h). */
pp_status pp_pipeline_write_trace(const pp_pipeline *p, const char *path, pp_error *err);

/* The plan's schedule, printed one line per device ("device 0: 0F0 0F1 0B0 ..."). */
size_t pp_pipeline_format_schedule(const pp_pipeline *p, char *buf, size_t n);

/* The plan's schedule program for its batch (streams/schedule.h), without
 * building a pipeline: the stages placed on the plan's devices (stages that
 * repeat a device share it), then the built-in the plan names (PP_ERR_INPUT
 * at the plan's schedule key when it cannot run this placement) or the
 * program of its `schedule: {file: PATH}` (validated against the plan's
 * stages, devices and micro-batches; PP_ERR_INPUT "FILE:ROW:COL: ..."). out
 * is caller-owned (pp_schedule_free); out->note says how a built-in fitted
 * the micro-batch count, if it had to. */
pp_status pp_pipeline_plan_schedule(const pp_plan *plan, pp_schedule *out, pp_error *err);

/* What pp_pipeline_predict_plan expects of a plan's step, running nothing. */
typedef struct pp_pipeline_prediction {
    double step_ms, bubble;         /* bubble: idle fraction of the devices */
    int stages, devices;
    int stage_device[PP_PLAN_MAX_STAGES];    /* the schedule device of each stage */
    double forward_ms[PP_PLAN_MAX_STAGES];   /* per stage, one micro-batch */
    double backward_ms[PP_PLAN_MAX_STAGES];  /* a whole backward (B) */
    double input_ms[PP_PLAN_MAX_STAGES];     /* I, the backward for the input */
    double weight_ms[PP_PLAN_MAX_STAGES];    /* W, the backward for the weights */
    int in_flight[PP_PLAN_MAX_STAGES];       /* the schedule's peak per stage */
    double device_bubble[PP_PLAN_MAX_STAGES];/* per stage, the idle fraction of its device */
    int64_t memory_bytes[PP_PLAN_MAX_STAGES];/* per stage, its device's predicted peak
                                              * (pp_fit_predict's device_peak, the figure
                                              * --memory prints; 0 for the delay model) */
    char note[192];                 /* the schedule's note (schedule.h), "" when none */
} pp_pipeline_prediction;

/* Predicts one step of the plan's schedule from cost estimates, running
 * nothing: the delay model's given times (backward_input_ms and
 * backward_weight_ms for I and W, else halves of backward_ms); for ResNet
 * the catalogue's FLOPs at a nominal rate per backend (cpu 50 GFLOP/s, cuda
 * 20 TFLOP/s; backward = 2x forward, I = W = forward) and copies at a
 * nominal bandwidth. */
pp_status pp_pipeline_predict_plan(const pp_plan *plan, pp_pipeline_prediction *out,
                                   pp_error *err);

/* The same, the step, bubble and per-stage forward and backward times only. */
pp_status pp_pipeline_predict(const pp_plan *plan, double *step_ms, double *bubble,
                              double *stage_forward_ms, double *stage_backward_ms, pp_error *err);

#ifdef __cplusplus
}
#endif

#endif
