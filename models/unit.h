/*
 * unit.h - layer units: one torchvision module at plan granularity (conv1,
 * bn1, relu, maxpool, layer1.0 ... layer4.N, avgpool, fc) with its parameters,
 * buffers, gradients, forward and backward. Each kind is a table of functions
 * in its own file (unit_kind.h lists them); this interface is the same for
 * all.
 *
 * All compute goes through the checked op API (runtime/core/ops.h) on the exec
 * the caller passes, so the same code runs on every backend; on CUDA the calls
 * enqueue work on the exec's stream and return.
 *
 * Micro-batches: a training forward for micro-batch index mb keeps what the
 * backward of that micro-batch needs (allocated on the unit's device with
 * pp_tensor_alloc_on so per-device accounting sees them) until
 * pp_unit_backward(mb) or pp_unit_release(mb) frees it. What it keeps of its
 * own input or output is a copy, unless the caller shares that activation
 * (pp_unit_forward_shared): then the unit keeps a reference instead, so two
 * neighbouring units that both keep the activation between them hold one
 * tensor and nobody spends a pass copying it. Any number of micro-batches may
 * be in flight at once, in any order. Inference forwards (train = false) keep
 * nothing.
 *
 * Split backward: the backward of mb may run as two parts instead,
 * pp_unit_backward_input (I: dx, parameter gradients untouched) then
 * pp_unit_backward_weight (W: parameter gradients); I keeps what W needs (the
 * inputs of the unit's convolutions and linear layer, their output
 * gradients, its batch norms' parameter gradients) and frees the rest. I then
 * W gives the bits of pp_unit_backward.
 *
 * Weight gradients sum in micro-batch order, whatever order the backwards (B
 * or W) of a step run in: a step begins at pp_unit_zero_grads (or
 * pp_unit_grads_reset) with micro-batch 0 next; a backward of the next
 * micro-batch adds to the parameter gradients, and one of a later
 * micro-batch computes its gradients into zeroed tensors of its own (a
 * "part", the size of the unit's parameter gradients) that are added once
 * every micro-batch before it has been (each op adds its gradient once:
 * ops.h, so the bits do not depend on the order). Memory: one part per
 * micro-batch whose backward ran before its turn, held until then (a reverse
 * order of m micro-batches holds m - 1 at its peak; an order that runs
 * backwards in micro-batch order, none). A backward of a micro-batch already
 * added while none waits begins a new step (for callers that zero the
 * gradients themselves).
 *
 * Tensors: activations are f32, (N, C, H, W) for images and (N, F) after
 * avgpool or flatten (batch norm, ReLU and sigmoid take either). With
 * spec.bf16 (mixed precision) a unit's input, its output and their
 * gradients are BF16 (pp_unit_spec_in_dtype, pp_unit_spec_out_dtype), as is
 * what it keeps of them for backward; parameters, their gradients and
 * batch-norm statistics stay F32, and convolutions and linear layers run on
 * bf16 copies of their weights. The caller allocates y (forward) and dx (backward) with the shapes
 * pp_unit_output_shape gives; x and dy are only read during the call.
 * Parameter gradients accumulate (+=) in the order backwards are called.
 *
 * Ownership and threading: a unit owns its parameters, gradients, buffers and
 * saved state. A unit is not thread-safe: use it from one thread (one stream)
 * at a time.
 */
#ifndef PP_MODELS_UNIT_H
#define PP_MODELS_UNIT_H

#include <stdbool.h>
#include <stdint.h>

#include "models/catalogue.h"
#include "runtime/core/dropout.h"
#include "runtime/core/exec.h"
#include "runtime/core/status.h"
#include "runtime/core/tensor.h"

typedef enum pp_unit_kind {
    PP_UNIT_CONV = 0,   /* bias-free conv (the stem's conv1) */
    PP_UNIT_BN,         /* batch norm (bn1) */
    PP_UNIT_RELU,       /* relu */
    PP_UNIT_MAXPOOL,    /* max pool (imagenet stem's maxpool) */
    PP_UNIT_IDENTITY,   /* identity (the cifar stem's maxpool) */
    PP_UNIT_BASIC,      /* BasicBlock: 3x3, 3x3, expansion 1 */
    PP_UNIT_BOTTLENECK, /* Bottleneck v1.5: 1x1, 3x3 (stride), 1x1, expansion 4 */
    PP_UNIT_AVGPOOL,    /* adaptive average pool to 1x1, flattened: (N,C,H,W) -> (N,C) */
    PP_UNIT_FC,         /* linear layer with bias */
    PP_UNIT_DELAY,      /* delay model: sleeps, passes a small activation; no parameters */
    PP_UNIT_SIGMOID,    /* logistic sigmoid, any shape (N, C, ...) */
    PP_UNIT_AVGPOOL2D,  /* average pool over kernel x kernel windows (count_include_pad) */
    PP_UNIT_FLATTEN,    /* (N, C, H, W) -> (N, C*H*W); (N, F) passes unchanged */
    /* transformers (models/transformer/): activations (N, T, C) */
    PP_UNIT_TOKEN_EMBEDDING,    /* wte: token ids (N, T) -> their rows of a (vocab, C) table */
    PP_UNIT_POSITION_EMBEDDING, /* wpe: x + the rows of a (positions, C) table, by position */
    PP_UNIT_GPT2_BLOCK,         /* h.K: x + attn(ln_1(x)), then + mlp(ln_2(.)) */
    PP_UNIT_LAYERNORM,          /* ln_f: layer norm over C */
    PP_UNIT_LM_HEAD,            /* lm_head: logits (N, T, vocab) = x E^T, no bias */
} pp_unit_kind;

/* How a unit's convolution and linear weights start. */
typedef enum pp_unit_init {
    PP_INIT_MODEL = 0, /* the model family's rule: torchvision's for ResNet (conv Kaiming
                          normal, fan_out; linear weight and bias uniform +-1/sqrt(in)) */
    PP_INIT_TORCH,     /* PyTorch's layer defaults: conv and linear weight and bias uniform
                          +-1/sqrt(fan_in) (kaiming_uniform_ with a = sqrt(5)) */
    PP_INIT_NORMAL,    /* weight normal(0, init_std), bias 0 */
} pp_unit_init;

/* What a unit is: enough to build it and to cost it. */
typedef struct pp_unit_spec {
    pp_unit_kind kind;
    char name[32];      /* torchvision module name: "conv1", "layer3.2", "fc" */
    int in_c;           /* input channels (features for fc; unused for delay) */
    int out_c;          /* output channels (classes for fc; features for delay) */
    int planes;         /* blocks: width of the inner convs (out_c = planes * expansion) */
    int kernel;         /* conv and maxpool kernel size */
    int stride;         /* conv, maxpool, blocks (applied to the 3x3 conv) */
    int pad;            /* conv and maxpool padding */
    bool downsample;    /* blocks: 1x1 conv (stride) + BN on the identity path */
    bool zero_last_bn;  /* blocks: the last batch norm's weight starts at 0, not 1 */
    double forward_ms;  /* delay: time spent in each forward */
    double backward_ms; /* delay: time spent in each backward (B, whole) */
    bool split_ms;      /* delay: the next two are given; else each is backward_ms / 2 */
    double backward_input_ms;  /* delay: time of the backward's input part (I) */
    double backward_weight_ms; /* delay: time of its weight part (W) */
    bool bias;          /* conv: has a bias (ResNet's convs have none; fc always has one) */
    pp_unit_init init;  /* conv and linear weights */
    double init_std;    /* PP_INIT_NORMAL's standard deviation */
    bool bf16;          /* mixed precision: activations and their gradients BF16 */
    bool f32_out;       /* with bf16, a final fc layer: the output (logits) and its
                           gradient stay F32; GPT-2's residual stream likewise (its
                           head's logits are BF16) */
    bool f32_in;        /* with bf16: the input and its gradient stay F32 (GPT-2's
                           residual stream, as torch.autocast keeps it) */
    bool nhwc;          /* 4-D activations, their gradients and the unit's temporaries
                           NHWC (pp_unit_spec_layout); the unit accepts either layout */
    /* transformers (models/transformer/); in_c is the width C (wte: the vocabulary),
     * bias whether the linear layers and layer norms have biases, init_std the
     * weights' normal std */
    bool tokens;        /* the input is token ids: I32 (N, T) (wte) */
    int heads;          /* a block's attention heads */
    int vocab;          /* wte's and lm_head's vocabulary */
    int positions;      /* wpe's rows: the model's positions */
    int depth;          /* the model's blocks: a block's output projections start at
                           init_std / sqrt(2 depth) (GPT-2's residual scaling) */
    bool tied;          /* lm_head: its weight is a copy of wte's (tied_to) */
    float dropout;      /* wpe and blocks: training forwards' dropout probability, [0, 1)
                           (0: none, no extra work) */
    int site;           /* wpe and blocks: the unit's first dropout site (pp_unit_draw) */
    char scope[16];     /* prefix of the unit's entry names ("transformer.") */
} pp_unit_spec;

/* The dtype of a unit's input and of its output (and of their gradients):
 * F32, or BF16 with spec.bf16 (F32 again with f32_in, f32_out). Read from
 * the spec alone, by every file of models/ (inline: no call into unit.c). */
static inline pp_dtype pp_unit_spec_in_dtype(const pp_unit_spec *spec)
{
    return spec->tokens ? PP_I32 : spec->bf16 && !spec->f32_in ? PP_BF16 : PP_F32;
}

static inline pp_dtype pp_unit_spec_out_dtype(const pp_unit_spec *spec)
{
    return spec->bf16 && !spec->f32_out ? PP_BF16 : PP_F32;
}

/* The layout of the unit's activations of rank ndim: NHWC for 4-D ones with
 * spec.nhwc, else NCHW. */
static inline pp_layout pp_unit_spec_layout(const pp_unit_spec *spec, int ndim)
{
    return spec->nhwc && ndim == 4 ? PP_NHWC : PP_NCHW;
}

/* One entry of a unit's state: a parameter or a buffer under its torchvision
 * state_dict name. value and grad are owned by the unit and live as long as
 * it; grad (same shape, dtype and device) is non-NULL exactly for learnable
 * parameters. Buffers: running_mean, running_var (F32, (C)) and
 * num_batches_tracked (I64 scalar, ndim 0). */
typedef struct pp_named_tensor {
    const char *name; /* e.g. "layer1.0.downsample.1.running_var" */
    pp_tensor *value;
    pp_tensor *grad;
    /* what an optimizer needs to know of a parameter: */
    bool norm;        /* a parameter of a normalisation layer (batch norm, layer norm): the
                       * optimizer's norm weight-decay group (runtime/train/optimizer.h) */
    const char *tied_to; /* non-NULL: this parameter is a copy of the one of that name (a
                         tied output head's weight, on the last stage): its gradient is
                         the copy's own, which whoever owns both adds to the original's;
                         the optimizer, a gradient norm and checkpoints count the
                         original only, and the copy is refreshed from it */
} pp_named_tensor;

typedef struct pp_unit pp_unit;

/* Builds a unit on dev and initialises it as torchvision does: conv weights
 * Kaiming normal (fan_out, relu), BN weight 1, bias 0, running mean 0,
 * running variance 1, num_batches_tracked 0; linear weight and bias uniform
 * (-1/sqrt(in), 1/sqrt(in)). Each tensor draws from a stream derived from
 * seed and its full name, so values do not depend on the stage split.
 * Gradients start at zero. Synchronous. */
pp_status pp_unit_new(const pp_unit_spec *spec, uint64_t seed, pp_device_ctx *dev, pp_unit **out,
                      pp_error *err);
/* Frees the unit, its tensors and every micro-batch's saved state. NULL is ok. */
void pp_unit_free(pp_unit *u);

const char *pp_unit_name(const pp_unit *u);
const pp_unit_spec *pp_unit_get_spec(const pp_unit *u);
pp_device_ctx *pp_unit_device(const pp_unit *u);

/* State in torchvision state_dict order (each module's parameters, then its
 * buffers, modules in registration order). 0 <= i < pp_unit_state_count(u). */
int pp_unit_state_count(const pp_unit *u);
const pp_named_tensor *pp_unit_state(const pp_unit *u, int i);

/* Output shape for an input shape (dimension 0 is the batch). PP_ERR_INVALID
 * when the input does not fit the unit (wrong rank or channels, too small). */
pp_status pp_unit_output_shape(const pp_unit_spec *spec, int in_ndim, const int64_t *in_shape,
                               int *out_ndim, int64_t *out_shape, pp_error *err);

/* Per-sample costs of a unit for a per-sample input shape (in_shape[0] == 1):
 * fwd_macs, fwd_flops, param_count, param_bytes, act_bytes (bytes the
 * training forward keeps until backward, per sample), act_fixed_bytes (kept
 * per micro-batch whatever its size: batch-norm statistics) and out_bytes.
 * The name is copied from the spec. Parameter figures come from the
 * declarations that build the unit and activation figures from the list of
 * tensors a training forward allocates, so they equal what pp_unit_new and
 * pp_unit_forward allocate. */
pp_status pp_unit_costs(const pp_unit_spec *spec, int in_ndim, const int64_t *in_shape,
                        pp_unit_info *info, pp_error *err);

/* Forward of micro-batch mb (mb >= 0). y must have the output shape. In
 * training mode batch norm uses and updates batch statistics (running stats
 * with momentum 0.1, unbiased variance; num_batches_tracked + 1) and the unit
 * keeps what backward needs; forwarding an mb that is still in flight is
 * PP_ERR_INVALID. With train = false batch norm uses running statistics and
 * nothing is kept. */
pp_status pp_unit_forward(pp_unit *u, pp_exec *ex, int mb, const pp_tensor *x, pp_tensor *y,
                          bool train, pp_error *err);

/* An activation shared by the code that chains units (a stage) with the units
 * that keep it: a tensor owned by the activation and freed, in the stream
 * order of the exec that allocated it, when the last reference goes. The
 * creator holds the first reference; each training forward that keeps it adds
 * one, dropped with that micro-batch's saved state. Neither the creator nor a
 * unit writes the tensor once it has been shared with a forward as its input
 * or output (the unit that produces it writes it during that forward). Not
 * thread-safe on its own: a micro-batch's forward, backward and release are
 * ordered by the stream that runs them. */
typedef struct pp_unit_act pp_unit_act;
/* Takes ownership of *t (which is zeroed) into a new activation; on failure *t
 * is freed. */
pp_status pp_unit_act_new(pp_tensor *t, pp_unit_act **out, pp_error *err);
/* The activation's tensor (to pass as x or y). */
pp_tensor *pp_unit_act_tensor(pp_unit_act *a);
/* Adds a reference (for a second holder), or drops one (NULL is ok). */
void pp_unit_act_hold(pp_unit_act *a);
void pp_unit_act_drop(pp_unit_act *a);

/* What a forward does (pp_unit_forward_pass):
 *   INFER:         running statistics; nothing kept;
 *   TRAIN:         batch statistics, running statistics updated and the
 *                  forward counted (num_batches_tracked); keeps what backward
 *                  needs (pp_unit_forward with train = true);
 *   TRAIN_DISCARD: as TRAIN, but keeps nothing (what backward would need lives
 *                  during the call only): the first forward of a micro-batch
 *                  whose forward runs again before its backward;
 *   RECOMPUTE:     that second forward: batch statistics as TRAIN (the same
 *                  bits from the same input), the running statistics and
 *                  counts left as the first forward set them; keeps what
 *                  backward needs. */
typedef enum pp_unit_pass {
    PP_UNIT_PASS_INFER = 0,
    PP_UNIT_PASS_TRAIN,
    PP_UNIT_PASS_TRAIN_DISCARD,
    PP_UNIT_PASS_RECOMPUTE,
} pp_unit_pass;

/* pp_unit_forward with x and/or y shared (xa, ya; either may be NULL, and
 * where given, x is pp_unit_act_tensor(xa) and y pp_unit_act_tensor(ya)). A
 * training forward keeps a reference to a shared activation it keeps, where
 * its dtype, shape and memory order are those it would copy into; else a
 * copy. Results are the same bits as pp_unit_forward's. */
pp_status pp_unit_forward_shared(pp_unit *u, pp_exec *ex, int mb, pp_unit_act *xa,
                                 const pp_tensor *x, pp_unit_act *ya, pp_tensor *y, bool train,
                                 pp_error *err);
/* pp_unit_forward_shared in a pass (train = false: INFER, true: TRAIN). */
pp_status pp_unit_forward_pass(pp_unit *u, pp_exec *ex, int mb, pp_unit_act *xa,
                               const pp_tensor *x, pp_unit_act *ya, pp_tensor *y,
                               pp_unit_pass pass, pp_error *err);

/* Where a training forward's random draws come from (GPT-2's dropout): the
 * mask of a value is a pure function of the unit's seed (pp_unit_new's),
 * step, the global index in the step's mini-batch of the value's sample
 * (first_sample + its index in x), the dropout site (spec.site and the sites
 * after it) and the value's index within its sample, through
 * runtime/core/dropout.h's hash. The caller sets the draw before each
 * training forward of a micro-batch (a recomputed forward gets the first
 * forward's draw again); the forward keeps what its backward needs of it.
 * Neither the micro-batch index nor the stage enters a mask. Inference
 * forwards draw nothing (dropout is off). The draw of a unit never set is
 * step 0, first sample 0. step_at, where the caller replays captured work
 * (graphs): the same step in memory on the unit's device (one I64 element,
 * set by the caller before the forward runs and kept until the backward
 * has), which the dropout ops then read as they run (pp_dropout_desc.step). */
typedef struct pp_unit_draw {
    int64_t step;               /* the training step */
    int64_t first_sample;       /* the global index of the micro-batch's sample 0 */
    const pp_tensor *step_at;   /* NULL, or step in the device's memory */
} pp_unit_draw;
void pp_unit_set_draw(pp_unit *u, const pp_unit_draw *d);
/* The dropout op of site spec.site + offset for the draw set: p, key and
 * first sample (p 0 when spec.dropout is 0). */
pp_dropout_desc pp_unit_dropout(const pp_unit *u, int offset);

/* Incremental decoding, for a token model's generation with a cache of keys
 * and values: after pp_unit_set_decode(u, at, cap) (0 <= at < cap), an
 * inference forward of one sample, (1, t) or (1, t, C) with at + t <= cap,
 * computes the positions at .. at + t - 1 of a sequence whose positions
 * before at the unit's earlier decoding forwards computed: wpe adds its
 * rows at.., a GPT-2 block writes the rows' q, k and v into its cache (cap
 * rows, made at its first decoding forward) and attends its t queries over
 * the cache's first at + t rows (pp_attention_forward_from); the other
 * kinds compute row by row as ever. Training forwards are refused while it
 * lasts; at -1 ends it and frees the cache. PP_ERR_INVALID for at or cap
 * out of range. */
pp_status pp_unit_set_decode(pp_unit *u, int at, int cap, pp_error *err);

/* Backward of micro-batch mb: dx = dL/dx (skipped when dx is NULL, e.g. for
 * the first unit of the net), parameter gradients += dL/dparam. Frees the
 * micro-batch's saved state. PP_ERR_INVALID if mb has no training forward in
 * flight. */
pp_status pp_unit_backward(pp_unit *u, pp_exec *ex, int mb, const pp_tensor *dy, pp_tensor *dx,
                           pp_error *err);

/* The split backward of mb (see above). Input part: dx (NULL: skipped) from
 * dy; PP_ERR_INVALID if mb has no training forward in flight. Weight part:
 * parameter gradients, in micro-batch order; PP_ERR_INVALID if mb's input
 * part has not run. Each frees mb's state on failure. */
pp_status pp_unit_backward_input(pp_unit *u, pp_exec *ex, int mb, const pp_tensor *dy,
                                 pp_tensor *dx, pp_error *err);
pp_status pp_unit_backward_weight(pp_unit *u, pp_exec *ex, int mb, pp_error *err);

/* A unit followed by a ReLU unit, run as one pass over the activations where
 * pp_unit_fuses_relu(u, relu) (a batch norm and the ReLU after it, as in
 * ResNet's stem): y = relu(u(x)) in one op, with the bits of u's forward then
 * relu's, and afterwards each unit in flight for mb as if both had run (what
 * each keeps: u its input, relu its output y). The backward takes dy, the
 * gradient of relu's output, and gives dx, the gradient of u's input, in one
 * op with the bits of relu's backward then u's; it ends mb in both. Either
 * unit's pp_unit_release still works on its own. */
bool pp_unit_fuses_relu(const pp_unit *u, const pp_unit *relu);
pp_status pp_unit_forward_relu_pair(pp_unit *u, pp_unit *relu, pp_exec *ex, int mb,
                                    pp_unit_act *xa, const pp_tensor *x, pp_unit_act *ya,
                                    pp_tensor *y, bool train, pp_error *err);
pp_status pp_unit_forward_relu_pair_pass(pp_unit *u, pp_unit *relu, pp_exec *ex, int mb,
                                         pp_unit_act *xa, const pp_tensor *x, pp_unit_act *ya,
                                         pp_tensor *y, pp_unit_pass pass, pp_error *err);
pp_status pp_unit_backward_relu_pair(pp_unit *u, pp_unit *relu, pp_exec *ex, int mb,
                                     const pp_tensor *dy, pp_tensor *dx, pp_error *err);
/* The input part of the pair's backward; then each unit's weight part
 * (pp_unit_backward_weight) ends mb in it. */
pp_status pp_unit_backward_input_relu_pair(pp_unit *u, pp_unit *relu, pp_exec *ex, int mb,
                                           const pp_tensor *dy, pp_tensor *dx, pp_error *err);

/* Drops the saved state of mb without a backward or its weight part (no-op if
 * none). */
void pp_unit_release(pp_unit *u, int mb);
/* The same for saved state made inside a CUDA graph capture that was then
 * discarded: what was allocated in stream order then belonged to the graph
 * and never existed, so it is abandoned (pp_tensor_abandon), not freed. */
void pp_unit_abandon(pp_unit *u, int mb);
/* Number of micro-batches with saved state (a forward in flight, or an input
 * part waiting for its weight part). */
int pp_unit_in_flight(const pp_unit *u);
/* True when mb has a training forward in flight (its backward or input part
 * next); then *ndim and shape (PP_MAX_DIMS entries) receive the shape of the
 * input its forward was given. Either may be NULL. */
bool pp_unit_saved_input(const pp_unit *u, int mb, int *ndim, int64_t *shape);
/* True when mb has saved state of either kind; when it waits for its weight
 * part. */
bool pp_unit_holds(const pp_unit *u, int mb);
bool pp_unit_waits_for_weight(const pp_unit *u, int mb);

/* Sets every gradient to zero, in ex's stream order, and begins a step
 * (pp_unit_grads_reset). */
pp_status pp_unit_zero_grads(pp_unit *u, pp_exec *ex, pp_error *err);
/* Begins a step of the weight gradients' order without touching them (for a
 * caller that zeroes them itself): micro-batch 0 next, every part waiting
 * for its turn dropped. */
void pp_unit_grads_reset(pp_unit *u);
/* Number of micro-batches whose weight gradients wait for their turn. */
int pp_unit_grads_waiting(const pp_unit *u);

/* Brings num_batches_tracked buffers up to date. Training forwards count
 * batch norms on the host (on every backend: a stream-ordered integer update
 * would cost a launch per batch norm and a host round trip would stall the
 * stream); this adds the counts, synchronously. Call it while no op of this
 * unit is in flight, before reading buffers (saving a checkpoint) and before
 * writing them (loading one), so that no pending count is added to loaded
 * values. */
pp_status pp_unit_sync_buffers(pp_unit *u, pp_error *err);
/* Tells the unit its parameters changed (an optimizer step, a load): the
 * bf16 copies of its weights (mixed precision) are made again at their next
 * use. Until then every forward and backward reuses them, one copy per
 * weight per step instead of one per call. */
void pp_unit_params_changed(pp_unit *u);

/* The pending counts above, one per batch norm of u in network order: how
 * many there are, copied into out (up to cap of them), replaced from in, or
 * each raised by n (not with deferred statistics, whose forwards count
 * nothing: their step's commit counts one). For a caller that replays
 * captured device work without the forwards that counted it, or abandons a
 * capture whose forwards counted work that never ran. */
int pp_unit_batch_counts(const pp_unit *u, int64_t *out, int cap);
void pp_unit_set_batch_counts(pp_unit *u, const int64_t *in);
void pp_unit_add_batches(pp_unit *u, int64_t n);

#endif
