/*
 * plan.h - the plan: what a plan YAML file (docs/PLAN.md) resolves to,
 * and the functions that read, check, compare and remap it.
 *
 * partitioner/ turns a plan file into a checked plan: the YAML tree
 * (yaml_tree.h), this plan with its reader (plan.c over plan_walk.h,
 * plan_model.c, plan_stages.c), comparison (plan_equal.c) and device
 * remapping (device_map.c), automatic stage boundaries (balance.h),
 * diagnostics (diag.h) and the plan written back (emit.h). It includes
 * runtime/ and, of models/, only models/catalogue.h.
 *
 * A pp_plan is plain data. It owns its heap strings, its micro-batch size
 * list and the layer catalogue its stages were resolved against; free it with
 * pp_plan_free. Every field that came from the file keeps the 1-based
 * line/column of its YAML node (pp_mark; 0/0 when not from a file) so later
 * checks (the runtime's device checks, data loaders) can report
 * "FILE:LINE:COL: message". Functions here are reentrant; a plan is not
 * shared between threads while it is being modified.
 *
 * Defaults for keys a plan leaves out: schedule gpipe, precision fp32,
 * optimizer sgd (lr 0.1, momentum 0, weight_decay 0, nesterov false; type
 * adamw: lr 0.001, betas 0.9 and 0.999, eps 1e-8, weight_decay 0.01 and
 * none on biases and batch norms), no gradient clipping, no label
 * smoothing, running statistics per micro-batch, data synthetic at the
 * model's input size, seed 0, steps 1; model fields (classes, channels,
 * stem, delay times) as pp_model_config_default gives them. `model` (with a name), `batch` and `stages` are required.
 *
 * Micro-batches: with `split_size: s` the batch of B samples is cut into
 * chunks of s (the last one smaller): B=8, s=3 -> 3,3,2. With
 * `micro_batches: m` it is cut into m chunks whose sizes differ by at most one,
 * larger first (torch.tensor_split): B=9, m=4 -> 3,2,2,2; split_size is then
 * the largest chunk. micro_sizes is authoritative.
 */
#ifndef PP_PARTITIONER_PLAN_H
#define PP_PARTITIONER_PLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "models/catalogue.h"
#include "runtime/io/data.h"
#include "partitioner/diag.h"
#include "runtime/core/device.h"
#include "runtime/core/status.h"
#include "runtime/train/lr_schedule.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PP_PLAN_MAX_STAGES PP_MAX_DELAY_STAGES
#define PP_PLAN_MAX_CHANNELS 64
#define PP_PLAN_MAX_BATCH (1 << 20)
#define PP_PLAN_MAX_STEPS 1000000000
#define PP_PLAN_MAX_EPOCHS 100000

typedef struct pp_mark {
    int line, col; /* 1-based; 0, 0 when the value was not read from a file */
} pp_mark;

/* `schedule:` a built-in by name (docs/SCHEDULES.md), or `{file: PATH}`. */
typedef enum pp_plan_schedule {
    PP_PLAN_SCHEDULE_GPIPE = 0,
    PP_PLAN_SCHEDULE_1F1B = 1,
    PP_PLAN_SCHEDULE_INTERLEAVED_1F1B,
    PP_PLAN_SCHEDULE_LOOPED_BFS,
    PP_PLAN_SCHEDULE_INTERLEAVED_ZB,
    PP_PLAN_SCHEDULE_ZBH1,
    PP_PLAN_SCHEDULE_ZBH2,
    PP_PLAN_SCHEDULE_ZBV,
    PP_PLAN_SCHEDULE_DUALPIPEV,
    PP_PLAN_SCHEDULE_FILE,       /* a program in torch's schedule CSV grammar (schedule_file) */
} pp_plan_schedule;

typedef enum pp_plan_precision {
    PP_PLAN_PRECISION_FP32 = 0, /* IEEE fp32 */
    PP_PLAN_PRECISION_TF32 = 1, /* TF32 tensor-core math for convolutions and GEMMs on CUDA;
                                   fp32 on the CPU backend */
    PP_PLAN_PRECISION_BF16 = 2, /* mixed: fp32 master weights, gradients, optimizer state and
                                   batch-norm statistics; activations, and convolution and
                                   linear inputs and weights in bf16, accumulating in fp32;
                                   logits and loss in fp32; no loss scaling */
} pp_plan_precision;

typedef enum pp_plan_data_format {
    PP_PLAN_DATA_SYNTHETIC = 0,
    PP_PLAN_DATA_IDX = 1,
    PP_PLAN_DATA_CIFAR10 = 2,
    PP_PLAN_DATA_IMAGEFOLDER = 3, /* a folder of class folders of images (torchvision's
                                   * ImageFolder), decoded and transformed as read */
    PP_PLAN_DATA_TOKENS = 4,    /* llm.c's or nanoGPT's .bin token files (runtime/io/tokens.h) */
    PP_PLAN_DATA_TEXT = 5,      /* any file, a byte a token (vocabulary 256) */
} pp_plan_data_format;

typedef enum pp_plan_balance {
    PP_PLAN_BALANCE_NONE = 0,   /* explicit stages */
    PP_PLAN_BALANCE_TIME = 1,   /* measured per-unit times, given by the caller */
    PP_PLAN_BALANCE_FLOPS = 2,  /* catalogue forward FLOPs */
    PP_PLAN_BALANCE_MEMORY = 3, /* catalogue parameter + activation bytes */
} pp_plan_balance;

/* `recompute:` - activation recomputation (plan-wide, and per stage, whose own key wins).
 * A recomputed micro-batch keeps only a copy of its stage input between its forward and
 * its backward and runs the stage's forward again just before the backward; results,
 * batch-norm running statistics included, are the same bits as without. */
typedef enum pp_plan_recompute {
    PP_PLAN_RECOMPUTE_NEVER = 0,   /* keep what backward needs (the default) */
    PP_PLAN_RECOMPUTE_EXCEPT_LAST, /* every micro-batch of a step but its last (torchgpipe's
                                    * except_last: the last one's backward follows at once) */
    PP_PLAN_RECOMPUTE_ALWAYS,      /* every micro-batch */
} pp_plan_recompute;

typedef enum pp_plan_optimizer_type {
    PP_PLAN_OPTIMIZER_SGD = 0,
    PP_PLAN_OPTIMIZER_ADAMW = 1,
} pp_plan_optimizer_type;

/* `optimizer:` (the name is the section's first kind's) */
typedef struct pp_plan_sgd {
    double lr;                  /* >= 0 */
    double momentum;            /* >= 0 (sgd) */
    double weight_decay;        /* >= 0 */
    bool nesterov;              /* requires momentum > 0 (sgd) */
    pp_mark mark;               /* the optimizer mapping */
    /* the training recipe (docs/PLAN.md, optimizer; partitioner/plan_recipe.c) */
    pp_plan_optimizer_type type; /* `type:` (default sgd) */
    double beta1, beta2;        /* adamw `betas:`, in [0, 1) (default 0.9, 0.999) */
    double eps;                 /* adamw, >= 0 (default 1e-8) */
    bool has_norm_weight_decay; /* `norm_weight_decay:` given (adamw: default 0) */
    double norm_weight_decay;   /* batch norms' weights and biases */
    bool has_bias_weight_decay; /* `bias_weight_decay:` given (adamw: default 0) */
    double bias_weight_decay;   /* biases (a batch norm's too) */
    double clip_grad_norm;      /* > 0: clip the total gradient norm to it; 0: no clipping */
} pp_plan_sgd;

/* `loss:` - the softmax cross-entropy after the last stage. */
typedef struct pp_plan_loss {
    double label_smoothing;     /* in [0, 1) (default 0) */
    pp_mark mark;
} pp_plan_loss;

/* An image folder's index as the plan's reading found it: by a scan (and
 * cached) or from the image index cache (runtime/io/image_index.h). */
typedef struct pp_plan_index {
    int64_t images;         /* the images found */
    bool from_cache;        /* read from the cache */
    bool cached;            /* scanned, and written to the cache */
    double seconds;
    int evicted;            /* index files a write evicted from the cache */
    int64_t evicted_bytes;
    char cache_path[4096];  /* the cache file ("": none) */
} pp_plan_index;

/* A data source: the `data` section, or the test set of `eval`. */
typedef struct pp_plan_data {
    pp_plan_data_format format;
    int image_h, image_w;       /* synthetic: image_size; cifar10: 32x32; idx: from the file
                                 * header when readable, else the model default; imagefolder:
                                 * the transforms' size, else the first image's */
    int num_classes;            /* synthetic: labels in [0, num_classes); = model's by default */
    int64_t samples;            /* synthetic: the data set's size (0: 50,000) */
    char *root;                 /* imagefolder: absolute path of the folder */
    pp_mark root_mark;
    int n_transforms;           /* imagefolder: `transforms`, applied in order */
    pp_transform transforms[PP_TRANSFORMS_MAX];
    pp_mark transforms_mark;
    bool skip_bad_images;       /* imagefolder: `on_bad_image: skip` (default: error) */
    int classes_found;          /* imagefolder: class folders found when the plan was read */
    pp_plan_index index;        /* imagefolder: its images, and how the index came */
    int workers;                /* data: threads reading a batch (0: the default, from the
                                 * cores and PP_READ_THREADS) */
    int prefetch;               /* data: batches read ahead while steps run (default 1) */
    bool drop_last;             /* data: an epoch's last batch, when short, is left out
                                 * (every batch whole, so it cuts evenly over replicas) */
    char *images, *labels;      /* idx: absolute paths (resolved against the plan's folder) */
    pp_mark images_mark, labels_mark;
    int n_files;                /* cifar10: number of batch files */
    char **files;               /* cifar10: n_files absolute paths */
    pp_mark *files_marks;       /* cifar10: n_files marks */
    char *file;                 /* tokens, text: the tokens, absolute path */
    pp_mark file_mark;
    int block_size;             /* tokens, text: positions per sample, at most the model's
                                 * block_size (its default); = model.gpt2.seq_len */
    char *vocab, *merges;       /* data, tokens and text: `tokenizer: {vocab, merges}`, GPT-2's
                                 * (runtime/io/bpe.h), absolute paths, or NULL: text is read
                                 * as bytes; with tokens it serves --generate's text;
                                 * `tokenizer: {file}`: vocab the tokenizer.json, merges NULL */
    bool tokenizer_special;     /* tokenizer.special: <|...|> tokens read as themselves */
    pp_mark tokenizer_mark;
    bool shuffle;
    bool has_norm;              /* mean/std given (in_channels values each) */
    double mean[PP_PLAN_MAX_CHANNELS];
    double std[PP_PLAN_MAX_CHANNELS];
    pp_mark mark;               /* the data mapping */
} pp_plan_data;

/* `eval:` - a test set evaluated with batch norm in inference mode (running
 * statistics) through a forward-only pipelined schedule over the same stages. */
typedef struct pp_plan_eval {
    bool enabled;               /* the plan has an eval section */
    pp_plan_data data;          /* the test set: any format of `data` (default idx; token data's
                                 * format for token data), normalised by data's mean and std,
                                 * never shuffled; token data: data.file the validation
                                 * tokens, windows of the training data's block_size */
    pp_mark mark;
    int batch_size;             /* default: batch.size */
    int every;                  /* evaluate after every K-th epoch (steps: every K steps); default 1 */
} pp_plan_eval;

/* `checkpoint:` - periodic checkpoints during training (with optimizer state,
 * so a run resumes from them exactly). */
typedef struct pp_plan_checkpoint {
    bool enabled;
    int every;                  /* after every K-th epoch (steps: every K steps); default 1 */
    char *path;                 /* with "{epoch}" (steps: "{step}") replaced by the number;
                                 * relative paths are relative to the current folder */
    int keep;                   /* keep the newest K files, delete older ones; 0 keeps all;
                                 * default 3 */
    pp_mark mark;
} pp_plan_checkpoint;

#define PP_PLAN_MAX_WORKERS 64  /* data.workers */
#define PP_PLAN_MAX_PREFETCH 8  /* data.prefetch */
#define PP_PLAN_MAX_RANKS 4096
#define PP_PLAN_MAX_REPLICAS 64

typedef struct pp_plan_stage {
    int rank;                   /* the process of the job that runs the stage: `rankN:` before
                                 * the device ("rank1:cpu:0"); 0 when the device has none */
    pp_device_id device;
    char device_name[16];       /* canonical "cpu:N" / "cuda:N" (without the rank) */
    pp_mark device_mark;        /* the device node (kept through device maps) */
    int first, last;            /* inclusive unit range into the catalogue; -1, -1 for the
                                 * delay model and for unresolved automatic stages */
    int64_t memory_bytes;       /* `memory:` of the stage (or devices entry): the cap of its
                                 * device, one figure per device (stages sharing a device give
                                 * the same value or none: pp_plan_device_memory); 0 = none */
    pp_mark memory_mark;        /* the memory node; 0/0 when none */
    bool has_recompute;         /* the stage gives `recompute:` (else the plan's applies) */
    pp_plan_recompute recompute;
    pp_mark recompute_mark;
    pp_mark mark;               /* the stage (or device-list entry) node */
    pp_mark layers_mark;        /* the layers node; 0/0 when none */
    /* with `replicas: R` (R > 1) `device` is a list of R devices, one per replica; entry 0 is
     * also in rank/device/device_name/device_mark above. With R = 1 entry 0 only. */
    int replica_rank[PP_PLAN_MAX_REPLICAS];
    pp_device_id replica_device[PP_PLAN_MAX_REPLICAS];
    pp_mark replica_mark[PP_PLAN_MAX_REPLICAS];
} pp_plan_stage;

typedef struct pp_plan {
    char *path;                 /* the plan file as given (or the name passed to parse) */

    pp_model_config model;      /* name, classes, channels, stem, image size, delay times */
    pp_mark model_mark;
    pp_mark forward_ms_mark, backward_ms_mark; /* delay model */
    pp_catalogue catalogue;     /* units of the model (n = 0 for the delay model); owned */

    int batch_size;             /* global mini-batch, 1..PP_PLAN_MAX_BATCH */
    int split_size;             /* largest micro-batch */
    int micro_batches;          /* number of micro-batches */
    bool batch_by_micro;        /* the plan gave micro_batches (else split_size) */
    int *micro_sizes;           /* micro_batches entries, summing to batch_size; owned */
    pp_mark batch_mark;

    pp_plan_schedule schedule;
    pp_mark schedule_mark;
    char *schedule_file;        /* PP_PLAN_SCHEDULE_FILE: absolute path (resolved against the
                                 * plan's folder, readable when the plan was read) */
    pp_plan_precision precision;
    pp_plan_recompute recompute; /* `recompute:` (default never); stages may override it */
    pp_mark recompute_mark;
    bool cuda_graphs;           /* `cuda_graphs: on|off` (default on): replay a step's CUDA
                                 * work as a graph once its shapes are known; no effect on
                                 * CPU stages */
    pp_plan_sgd optimizer;
    pp_plan_loss loss;
    bool deferred_batch_norm;   /* `batch.deferred_batch_norm` (default false): batch norms
                                 * normalise each micro-batch by its own statistics and update
                                 * their running statistics once per step from the combined
                                 * moments of the step's micro-batches, in micro-batch order */
    pp_lr_schedule lr_schedule; /* `optimizer.lr_schedule`; base_lr = optimizer.lr; periods
                                 * are epochs with `epochs`, steps otherwise */
    pp_mark lr_schedule_mark;
    pp_plan_data data;
    pp_plan_eval eval;
    pp_plan_checkpoint checkpoint;
    uint64_t seed;
    int steps;                  /* 1..PP_PLAN_MAX_STEPS (0 when the plan gives epochs; 1
                                 * when it gives neither) */
    pp_mark steps_mark;         /* the `steps` node; 0/0 when the plan gives none */
    int epochs;                 /* `epochs: N` (passes over the training data), else 0 */
    pp_mark epochs_mark;

    int replicas;               /* data-parallel copies of the pipeline (`replicas: R`, default
                                 * 1): the batch is cut into R pieces by the micro-batch rule
                                 * (by count), each replica runs its piece on its own ranks,
                                 * and gradients are summed over replicas before the step */
    pp_mark replicas_mark;
    bool replicas_in_process;   /* R > 1 and no device names a rank: the job is one process
                                 * that runs replica r as its rank r, on a thread of its own */
    int n_stages;               /* 1..PP_PLAN_MAX_STAGES */
    pp_plan_stage stages[PP_PLAN_MAX_STAGES];
    bool stages_auto;           /* `stages: auto` not yet resolved (first/last are -1) */
    pp_plan_balance balance;    /* how automatic stages are (or were) chosen */
    pp_mark stages_mark;
} pp_plan;

/* Reads and checks the plan file at path. On success *out is a new plan
 * (free with pp_plan_free). diag is cleared first. On failure *out is NULL,
 * the problems are in diag
 * (several where practical, each "FILE:LINE:COL: message") and the status is
 * PP_ERR_INPUT (PP_ERR_OOM when out of memory). Files larger than 1 MiB,
 * YAML aliases, more than one document and deep nesting are rejected.
 * Relative data paths are resolved against the plan file's folder and must
 * exist and be readable; their contents are not read (except the IDX header
 * for the input size). Automatic stages stay unresolved (stages_auto) except
 * for the delay model, whose stages are the devices. */
pp_status pp_plan_load(const char *path, pp_plan **out, pp_diag *diag);

/* As pp_plan_load, from len bytes of text; name is used in messages and its
 * folder for relative data paths (the current folder when it has none). */
pp_status pp_plan_parse_string(const char *name, const char *text, size_t len, pp_plan **out,
                               pp_diag *diag);

/* Frees a plan and everything it owns. plan may be NULL. */
void pp_plan_free(pp_plan *plan);

/* Resolves `stages: auto`: chooses contiguous, non-empty unit ranges, one per
 * device, that minimise the largest stage cost within each stage's memory
 * (see balance.h). cat is the catalogue to balance (NULL: the plan's own; else
 * one with the same units, e.g. with measured metadata).
 * unit_costs has cat->n entries and is required for `balance: time` (per-unit
 * measured milliseconds, forward + backward); for flops and memory it may be
 * NULL (the catalogue's metadata is used) or override them. A plan whose
 * stages are explicit is left unchanged. PP_ERR_INPUT with a message naming
 * the device when no partition fits; PP_ERR_INVALID for API misuse. */
pp_status pp_plan_resolve_auto(pp_plan *plan, const pp_catalogue *cat, const double *unit_costs,
                               pp_error *err);
/* The same with each stage's micro-batches in flight given (stage_in_flight,
 * n_stages entries: the schedule's own count, pp_schedule_in_flight, which
 * the pipeline's pp_fit_resolve_plan passes) instead of pp_plan_in_flight's
 * bound. NULL: pp_plan_in_flight. */
pp_status pp_plan_resolve_auto_in_flight(pp_plan *plan, const pp_catalogue *cat,
                                         const double *unit_costs, const int *stage_in_flight,
                                         pp_error *err);

/* Estimated bytes a unit range needs on its device: parameters, gradients and
 * momentum (when used), plus what backward keeps (act_bytes x split_size +
 * act_fixed_bytes per unit) for `in_flight` micro-batches. The estimate the
 * memory check of pp_plan_resolve_auto uses; `balance: memory` balances the
 * same quantity for one micro-batch. */
int64_t pp_plan_stage_memory_estimate(const pp_plan *plan, int first, int last, int in_flight);

/* A bound on the micro-batches a stage holds at once under the plan's
 * schedule, from the plan alone (1f1b: min(m, S - stage); any other: all m);
 * the schedule's exact count per stage is pp_schedule_in_flight
 * (streams/schedule.h), which the pipeline's memory model and planning use. */
int pp_plan_in_flight(const pp_plan *plan, int stage);

/* The optimizer's state tensors per parameter under the plan, each of the
 * parameter's size (sgd: 1 with momentum, else 0; adamw: exp_avg and
 * exp_avg_sq), and the checkpoint prefix of the first one (NULL when there
 * is none): what memory predictions count and what resuming needs. */
int pp_plan_optimizer_states(const pp_plan *plan);
const char *pp_plan_optimizer_state_prefix(const pp_plan *plan);

/* The recomputation mode of stage s: its own `recompute:`, else the plan's. */
pp_plan_recompute pp_plan_stage_recompute(const pp_plan *plan, int s);

/* Whether micro-batch mb of a step of m micro-batches recomputes its forward
 * on stage s (except_last: every one but mb = m - 1). */
bool pp_plan_recomputes(const pp_plan *plan, int s, int mb, int m);

/* The memory cap of stage s's device: the `memory:` any stage on the same
 * device (same rank and device) gives, 0 when none does. Plans are checked
 * when parsed: stages sharing a device give one figure. */
int64_t pp_plan_device_memory(const pp_plan *plan, int s);

/* The first stage of the plan on stage s's device (same rank and device):
 * s itself unless an earlier stage shares it. */
int pp_plan_device_first_stage(const pp_plan *plan, int s);

/* The devices of the plan's stages (replica 0's, a rank and a device each),
 * numbered by first appearance: stage s runs on device stage_device[s] (n_stages
 * entries written); returns the number of devices. Stages that repeat a
 * device share it: they compute on one stream, in the schedule's order. */
int pp_plan_devices(const pp_plan *plan, int *stage_device);

/* Cuts the plan's model anew into n_stages stages, stage s on the plan's
 * device stage_device[s] (numbered as pp_plan_devices does; every device
 * gets one at least), each device keeping its share of the work: the delay
 * model's times of a device (summed over its stages) split evenly over its
 * new stages; a ResNet's units balanced by forward FLOPs over the new stages
 * (pp_plan_resolve_auto, balance flops), a device's memory cap split evenly.
 * For running one plan under schedules that place stages differently
 * (--sweep-schedule). PP_ERR_INPUT when the model has too few units or the
 * plan has replicas. */
pp_status pp_plan_restage(pp_plan *plan, int n_stages, const int *stage_device, pp_error *err);

/* Remaps devices: map is "A=B[,C=D...]" where A is a device (cpu:N, cuda:N)
 * or a wildcard (cpu:*, cuda:*) and B is a device, or a kind (cpu, cuda,
 * cpu:*, cuda:*) for a wildcard source, which keeps the index: "cuda:*=cpu"
 * maps cuda:N to cpu:N. Exact sources take precedence over wildcards; every
 * device is mapped once (no chaining). On a syntax error the plan is left
 * unchanged and PP_ERR_INPUT names the bad entry; so too where the map puts
 * stages that cap their devices' memory differently on one device (a device
 * has one memory figure, as in a plan). */
pp_status pp_plan_apply_device_map(pp_plan *plan, const char *map, pp_error *err);

/* Semantic equality of two plans (ignores path and marks). When they differ
 * and why is non-NULL, writes the first difference there. */
bool pp_plan_equal(const pp_plan *a, const pp_plan *b, char *why, size_t why_n);

/* What a training step means under a plan: the keys (plan spellings such as
 * "batch.size", "data.images", "seed") whose values decide which samples a
 * step reads and what it computes from them, with those values as text
 * ("256", "train-images-idx3-ubyte.gz (47040016 bytes)"). A checkpoint
 * records them; a run resumed under a plan whose values differ would give
 * its steps another meaning. Listed: the model and its input, batch.size,
 * batch.micro_batches (models with batch norm: the micro-batches' sizes over
 * every replica, "4 (2+2+2+2)"; batch.deferred_batch_norm "true" when the
 * plan defers their statistics), the data (format, size, files by name and
 * size, shuffle, normalisation) and seed. Not listed: stages, devices,
 * schedule, precision, optimizer, learning rate, steps and epochs. */
#define PP_PLAN_STEP_KEYS_MAX 24
typedef struct pp_plan_step_keys {
    int n;
    char *keys[PP_PLAN_STEP_KEYS_MAX];   /* owned */
    char *values[PP_PLAN_STEP_KEYS_MAX]; /* owned */
} pp_plan_step_keys;

/* Fills *out (free with pp_plan_step_keys_free); PP_ERR_OOM when out of
 * memory (then *out is empty). */
pp_status pp_plan_step_keys_get(const pp_plan *plan, pp_plan_step_keys *out, pp_error *err);
void pp_plan_step_keys_free(pp_plan_step_keys *keys);

/* What else tells one training run from another under plans whose steps mean
 * the same: how the parameters move (the optimizer and its settings, decay
 * groups and clipping, the learning-rate schedule, the loss's label
 * smoothing, the precision). Checkpoints record them beside the
 * step keys; --resume auto continues only a run whose keys are the plan's
 * (--resume FILE may change them on purpose). Same form as the step keys. */
pp_status pp_plan_run_keys_get(const pp_plan *plan, pp_plan_step_keys *out, pp_error *err);

/* Cuts the plan's batch anew by the micro-batch rule (runtime/core/batch_split.h;
 * docs/PLAN.md, `batch`): into micro-batches of split_size (split_size > 0,
 * micro_batches 0) or into micro_batches pieces (split_size 0). Updates split_size, micro_batches,
 * micro_sizes and batch_by_micro; the plan is unchanged on failure.
 * PP_ERR_INPUT when the size or count exceeds the batch, PP_ERR_INVALID
 * when not exactly one of the two is positive. For split-size sweeps. */
pp_status pp_plan_split(pp_plan *plan, int split_size, int micro_batches, pp_error *err);

/* Whether every unit can train on the plan's micro-batches: PP_ERR_INPUT
 * naming the batch, split and layer when a micro-batch is smaller than a
 * unit accepts (a batch norm over one value per channel needs two samples).
 * Plans are checked when parsed; call it after pp_plan_split. */
pp_status pp_plan_check_micro_batches(const pp_plan *plan, pp_error *err);

/* Spells the layer-list item that starts at unit u of a stage ending at unit
 * last: the whole group ("layer3") when u starts a group that ends at or
 * before last, else the unit's own name. Writes it to name (n bytes) and
 * returns the unit after the item, so a loop from first while u <= last
 * lists a stage's items. */
int pp_plan_spell_item(const pp_catalogue *cat, int u, int last, char *name, size_t n);

/* Writes the units first..last in the compact form plans use, joined with
 * ", " ("conv1, bn1, relu, maxpool, layer1, layer2.0"): a whole "layerN"
 * when the range holds every block of it. Empty for a bad range. Returns buf. */
const char *pp_plan_spell_units(const pp_catalogue *cat, int first, int last, char *buf,
                                size_t n);

/* Parses a size as plans write `memory:` ("40GiB", "512MiB", "1.5 GB", a byte
 * count; 1 byte to 1 EiB) into *out. PP_ERR_INPUT naming the text otherwise. */
pp_status pp_plan_parse_bytes(const char *text, int64_t *out, pp_error *err);
/* A cache folder's bound from the environment variable env: a size as above,
 * or "none" (0: no bound); dflt where env is unset or empty. PP_ERR_INPUT
 * naming env and its text otherwise. */
pp_status pp_plan_cache_max(const char *env, int64_t dflt, int64_t *max, pp_error *err);

/* Static names: "gpipe", "1f1b", "interleaved1f1b", ..., "file"; "synthetic", ...; "time", ... */
const char *pp_plan_schedule_name(pp_plan_schedule s);
/* "fp32", "tf32", "bf16" */
const char *pp_plan_precision_name(pp_plan_precision p);
const char *pp_plan_data_format_name(pp_plan_data_format f);
const char *pp_plan_balance_name(pp_plan_balance b);
/* "never", "except_last", "always" */
const char *pp_plan_recompute_name(pp_plan_recompute r);

#ifdef __cplusplus
}
#endif

#endif
