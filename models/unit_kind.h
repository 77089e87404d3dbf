/*
 * unit_kind.h - the seam between the generic unit code (unit.c) and the unit
 * kinds (unit_conv.c, unit_bn.c, unit_relu.c, unit_pool.c, unit_block.c,
 * unit_fc.c, unit_delay.c). Internal to models/.
 *
 * A kind is a table of functions, looked up once per unit from its spec's
 * kind (pp_unit_kind_ops_of). unit.c owns everything a kind has in common:
 * the named parameters and buffers (declared through pp_unit_declare), the
 * per-micro-batch saved state, argument checks and error prefixes. A kind
 * describes:
 *   - check:    whether a spec is well formed;
 *   - shape:    the output shape for an input shape (input already checked to
 *               have a batch dimension);
 *   - build:    its parameters and buffers, in torchvision state_dict order,
 *               through the declaration helpers below, into its private
 *               layout (impl, impl_size bytes, zeroed). The same build runs in
 *               counting mode (u->dev == NULL: nothing is allocated or
 *               initialised) to cost the unit, so parameter counts and bytes
 *               come from the declarations that allocate them;
 *   - saved:    the tensors a training forward keeps for backward, for an
 *               input shape: each a field of the kind's saved struct
 *               (saved_size bytes) with its dtype and shape. unit.c allocates
 *               exactly this list before forward (in the exec's stream order)
 *               and frees it after backward, and pp_unit_costs sums the same
 *               list, so the cost model cannot drift from what forward keeps;
 *   - flops:    forward multiply-adds and elementwise operations per sample;
 *   - forward:  y = unit(x); saved is NULL for inference (batch norm then uses
 *               running statistics) and otherwise holds the allocated list,
 *               which forward fills (all but the input and output it keeps,
 *               which unit.c keeps after it);
 *   - backward: dx (NULL: not needed) and parameter gradients from dy and the
 *               saved state, added (+=) to grad[e] for each learnable entry e
 *               (grad is the unit's own gradients, or tensors like them that
 *               unit.c adds in micro-batch order later: unit.h);
 *   - backward_input, backward_weight (optional, kinds with parameters or a
 *               weight time): the backward split in two. The input part gives
 *               dx and writes what the weight part needs into the saved list's
 *               PP_SAVED_GRAD tensors (allocated before it, uninitialised),
 *               leaving parameter gradients alone; the weight part adds the
 *               parameter gradients from what the list keeps until it
 *               (pp_saved_tensor.until_w). Together they give backward's bits.
 *               A kind without them runs backward (grad NULL: it has no
 *               parameters) as its input part and nothing as its weight part.
 * Kinds compute only through the op API on the exec they are given and never
 * ask which backend they run on.
 */
#ifndef PP_MODELS_UNIT_KIND_H
#define PP_MODELS_UNIT_KIND_H

#include "models/unit.h"
#include "runtime/core/ops.h"

#define PP_UNIT_MAX_ENTRIES 24 /* bottleneck: 4 convs + 4 BNs x 5 */
#define PP_UNIT_NAME_MAX 64    /* bytes of an entry's name, NUL included */
#define PP_UNIT_MAX_SAVED 24   /* tensors a training forward may keep */
#define PP_UNIT_MAX_BN 4       /* batch norms per unit */

/* Where a kept tensor's contents come from. */
typedef enum pp_saved_from {
    PP_SAVED_NEW = 0, /* the kind's forward writes it (allocated before forward) */
    PP_SAVED_INPUT,   /* the unit's input x, kept by unit.c after forward */
    PP_SAVED_OUTPUT,  /* the unit's output y, kept by unit.c after forward */
    PP_SAVED_GRAD,    /* the kind's backward_input writes it for backward_weight
                         (allocated before backward_input; a split backward only) */
} pp_saved_from;

/* One tensor a training forward keeps: where it goes and what it is. An input
 * or output kept while the caller shares it (pp_unit_forward_shared) is a
 * view holding a reference (held); otherwise unit.c copies it. A split
 * backward frees what its input part has used, keeping the tensors marked
 * until_w (and every PP_SAVED_GRAD one) for the weight part. */
typedef struct pp_saved_tensor {
    pp_tensor *t;  /* field of the kind's saved struct */
    pp_saved_from from;
    bool until_w;  /* kept until backward_weight (PP_SAVED_GRAD: always) */
    pp_dtype dtype;
    int ndim;
    int64_t shape[PP_MAX_DIMS];
    pp_unit_act *held; /* the shared activation t views; NULL: t owns its storage */
} pp_saved_tensor;

/* Collects a kind's saved list. */
typedef struct pp_saved_list {
    int n;
    pp_saved_tensor item[PP_UNIT_MAX_SAVED];
    bool overflow; /* an item beyond PP_UNIT_MAX_SAVED was dropped (unit.c refuses the list) */
} pp_saved_list;

/* A batch norm inside a unit: its five entries and the training forwards not
 * yet added to num_batches_tracked (added by pp_unit_sync_buffers). With
 * deferred statistics (bn_defer.h) a training forward of micro-batch k
 * writes its batch mean and unbiased variance to row k of slots instead of
 * the running statistics, and the step's commit counts one forward. */
typedef struct pp_bn_layer {
    int e; /* entries e..e+4: weight, bias, running_mean, running_var, num_batches_tracked */
    int c;
    int64_t pending;
    pp_tensor slots; /* deferred statistics: (cap, 2, C), zeros between steps; else empty */
    int64_t hw;      /* values per channel and sample of the last training forward */
} pp_bn_layer;

/* A convolution inside a unit, bias-free unless has_bias. */
typedef struct pp_conv_layer {
    int e; /* entry of the weight (K, C, R, S) */
    int cin, cout, kernel, stride, pad;
    bool has_bias;
    int b; /* entry of the bias (K) when has_bias */
} pp_conv_layer;

/* One micro-batch's parameter gradients, computed before its turn in the
 * step's order and kept until then (like the unit's gradients, for its
 * learnable entries; the others empty). */
typedef struct pp_unit_part {
    int mb;
    pp_tensor g[PP_UNIT_MAX_ENTRIES];
} pp_unit_part;

typedef struct pp_unit_kind_ops {
    const char *name;   /* "conv", "bottleneck block" */
    size_t impl_size;   /* the kind's parameter layout (pp_unit.impl) */
    size_t saved_size;  /* the kind's saved struct */
    bool (*check)(const pp_unit_spec *s);
    /* out (PP_MAX_DIMS, prefilled with 1 and the batch); false: the input does
     * not fit (why: a short reason for the message) */
    bool (*shape)(const pp_unit_spec *s, int in_ndim, const int64_t *in, int *out_ndim,
                  int64_t *out, const char **why);
    pp_status (*build)(pp_unit *u, uint64_t seed, pp_error *err);
    void (*saved)(const pp_unit *u, int in_ndim, const int64_t *in, void *saved,
                  pp_saved_list *list);
    void (*flops)(const pp_unit_spec *s, int in_ndim, const int64_t *in, const int64_t *out,
                  int64_t *macs, int64_t *elementwise);
    pp_status (*forward)(pp_unit *u, pp_exec *ex, const pp_tensor *x, pp_tensor *y, void *saved,
                         pp_error *err);
    pp_status (*backward)(pp_unit *u, pp_exec *ex, void *saved, const pp_tensor *dy,
                          pp_tensor *dx, pp_tensor *grad, pp_error *err);
    pp_status (*backward_input)(pp_unit *u, pp_exec *ex, void *saved, const pp_tensor *dy,
                                pp_tensor *dx, pp_error *err);
    pp_status (*backward_weight)(pp_unit *u, pp_exec *ex, void *saved, pp_tensor *grad,
                                 pp_error *err);
    void (*release)(pp_unit *u); /* frees what build made besides entries; may be NULL */
    /* Optional, for kinds that keep nothing of their output: the unit followed
     * by a ReLU as one pass, y = relu(unit(x)), the same bits as forward then
     * the ReLU; and its backward (whole, or its input part) from relu_y (that
     * ReLU's output) and dy (the gradient of relu_y), the same bits as the
     * ReLU's backward then backward (pp_unit_forward_relu_pair). */
    pp_status (*forward_relu)(pp_unit *u, pp_exec *ex, const pp_tensor *x, pp_tensor *y,
                              void *saved, pp_error *err);
    pp_status (*backward_relu)(pp_unit *u, pp_exec *ex, void *saved, const pp_tensor *relu_y,
                               const pp_tensor *dy, pp_tensor *dx, pp_tensor *grad,
                               pp_error *err);
    pp_status (*backward_input_relu)(pp_unit *u, pp_exec *ex, void *saved,
                                     const pp_tensor *relu_y, const pp_tensor *dy, pp_tensor *dx,
                                     pp_error *err);
} pp_unit_kind_ops;

/* Per-micro-batch state of one training forward. */
typedef struct pp_unit_slot {
    bool live;            /* a training forward is in flight: its backward (or input part) next */
    bool waiting;         /* the input part of its backward ran: the weight part next */
    void *saved;          /* the kind's saved struct (saved_size bytes) */
    pp_saved_list list;   /* its tensors, as allocated */
    int in_ndim;
    int64_t in_shape[PP_MAX_DIMS];
} pp_unit_slot;

struct pp_unit {
    pp_unit_spec spec;
    const pp_unit_kind_ops *ops;
    pp_device_ctx *dev;   /* NULL: counting mode (costs), nothing allocated */
    void *impl;           /* the kind's layout (impl_size bytes) */
    int n_entries;
    char names[PP_UNIT_MAX_ENTRIES][PP_UNIT_NAME_MAX];
    pp_tensor value[PP_UNIT_MAX_ENTRIES];
    pp_tensor grad[PP_UNIT_MAX_ENTRIES];
    pp_named_tensor entry[PP_UNIT_MAX_ENTRIES];
    int n_bn;
    pp_bn_layer *bn[PP_UNIT_MAX_BN]; /* into impl */
    pp_unit_slot *slots;
    int n_slots;
    int in_flight;
    /* bf16 mixed precision: each weight's bf16 copy (pp_unit_weight_like), made
     * at its first use after pp_unit_params_changed and kept until the next */
    pp_tensor low[PP_UNIT_MAX_ENTRIES];
    bool low_fresh[PP_UNIT_MAX_ENTRIES];
    /* the step's weight gradients in micro-batch order (unit.h): the
     * micro-batch added next, and those computed before their turn */
    int grad_next;
    pp_unit_part *parts;
    int n_parts, cap_parts;
    /* a recomputed forward (PP_UNIT_PASS_RECOMPUTE) runs: batch norms leave
     * their running statistics and counts alone */
    bool stats_frozen;
    bool bn_deferred; /* batch norms defer their running statistics (bn_defer.h) */
    int cur_mb;       /* the micro-batch of the forward running */
    uint64_t seed;    /* pp_unit_new's: dropout's masks draw from it too */
    pp_unit_draw draw; /* the next training forward's (pp_unit_set_draw) */
    /* incremental decoding (pp_unit_set_decode): the next inference forward's
     * first position and the sequence's most positions; a GPT-2 block's
     * cache of its positions' q, k and v rows (decode_cap rows, made at its
     * first decoding forward, freed when decoding ends) */
    bool decoding;
    int decode_at, decode_cap;
    pp_tensor cache;
};

/* A shared activation (unit.h): the tensor and its references. */
struct pp_unit_act {
    pp_tensor t;
    int refs;
};

/* Drops one reference of a (NULL is ok); the last frees the tensor, or
 * abandons it (abandon: see pp_unit_abandon). unit_act.c. */
void pp_unit_act_unref(pp_unit_act *a, bool abandon);

/* The table of a kind; NULL for an unknown kind. */
const pp_unit_kind_ops *pp_unit_kind_ops_of(pp_unit_kind kind);

extern const pp_unit_kind_ops pp_unit_conv_ops, pp_unit_bn_ops, pp_unit_relu_ops,
    pp_unit_maxpool_ops, pp_unit_identity_ops, pp_unit_avgpool_ops, pp_unit_basic_ops,
    pp_unit_bottleneck_ops, pp_unit_fc_ops, pp_unit_delay_ops, pp_unit_sigmoid_ops,
    pp_unit_avgpool2d_ops, pp_unit_flatten_ops, pp_unit_token_embedding_ops,
    pp_unit_position_embedding_ops, pp_unit_gpt2_block_ops, pp_unit_layernorm_ops,
    pp_unit_lm_head_ops;

/* ---- between unit.c and its helpers (unit_costs.c, unit_order.c) ------------------ */

/* Makes a unit of spec on dev (NULL: counting mode, nothing allocated). */
pp_status pp_unit_make(const pp_unit_spec *spec, uint64_t seed, pp_device_ctx *dev,
                       pp_unit **out, pp_error *err);
/* The kind's saved list for an input shape, its fields in saved. */
pp_status pp_unit_saved_list(const pp_unit *u, int in_ndim, const int64_t *in, void *saved,
                             pp_saved_list *l, pp_error *err);
/* Whether the unit has learnable entries. */
bool pp_unit_has_params(const pp_unit *u);
/* The step's order (unit.h): where mb's parameter gradients go (*grad: the
 * unit's, or *part's, zeroed, when mb's turn has not come), then, told how
 * that went (st), the turn passed on and the waiting parts added in order.
 * grads_end returns st, or its own failure. */
pp_status pp_unit_grads_begin(pp_unit *u, pp_exec *ex, int mb, pp_tensor **grad,
                              pp_unit_part **part, pp_error *err);
pp_status pp_unit_grads_end(pp_unit *u, pp_exec *ex, int mb, pp_unit_part *part,
                            pp_status st, pp_error *err);

/* ---- declarations (build) ------------------------------------------------------ */

typedef enum pp_fill { PP_FILL_NORMAL, PP_FILL_UNIFORM, PP_FILL_CONST } pp_fill;

/* Declares entry "<scope><unit>.<module>.<leaf>" (module may be NULL or ""), a
 * parameter when learnable (with a zeroed gradient), else a buffer, filled
 * from the stream of (seed, name): normal(0, a), uniform(-a, a) or the
 * constant a. In counting mode only the shape is recorded. *index may be
 * NULL. */
pp_status pp_unit_declare(pp_unit *u, const char *module, const char *leaf, pp_dtype dtype,
                          int ndim, const int64_t *shape, bool learnable, pp_fill fill, double a,
                          uint64_t seed, int *index, pp_error *err);

/* Declares learnable entry "<scope><unit>.<leaf>" as a copy of the parameter
 * named source, which another unit holds (a tied weight): filled from
 * source's stream, so the copy starts equal to it, and marked tied_to source
 * (unit.h). */
pp_status pp_unit_declare_tied(pp_unit *u, const char *leaf, const char *source, pp_dtype dtype,
                               int ndim, const int64_t *shape, pp_fill fill, double a,
                               uint64_t seed, int *index, pp_error *err);

/* A conv layer (weight Kaiming normal, fan_out, relu) and a batch norm
 * (weight 1, bias 0, running mean 0, variance 1, count 0), as torchvision
 * initialises them. */
pp_status pp_unit_add_conv(pp_unit *u, pp_conv_layer *c, const char *module, int cin, int cout,
                           int kernel, int stride, int pad, uint64_t seed, pp_error *err);
pp_status pp_unit_add_bn(pp_unit *u, pp_bn_layer *b, const char *module, int c, uint64_t seed,
                         pp_error *err);
/* pp_unit_add_bn with the weight starting at gamma (0: a block's last batch
 * norm under zero_init_residual). */
pp_status pp_unit_add_bn_gamma(pp_unit *u, pp_bn_layer *b, const char *module, int c,
                               double gamma, uint64_t seed, pp_error *err);
/* A convolution (and its bias when the spec asks for one) initialised by the
 * spec's rule (pp_unit_init; PP_INIT_MODEL is pp_unit_add_conv's). */
pp_status pp_unit_add_conv_spec(pp_unit *u, pp_conv_layer *c, uint64_t seed, pp_error *err);

/* ---- shapes and the saved list --------------------------------------------------- */

/* Output size of a convolution or pooling window along one dimension; 0 when
 * the input is too small. */
int64_t pp_unit_window_out(int64_t h, int kernel, int stride, int pad);

/* Output shape of a window op (conv, pooling) with cout channels on an image
 * input (N, in_c, H, W); false with *why when the input is not such an image
 * or is too small. out is (N, cout, P, Q). */
bool pp_unit_window_shape(const pp_unit_spec *s, int in_ndim, const int64_t *in, int cout,
                          int kernel, int stride, int pad, int *out_ndim, int64_t *out,
                          const char **why);

/* Helpers for kinds whose entries would otherwise repeat one another:
 * check that in_c > 0; output shape = input shape (images); no parameters;
 * nothing saved; and the saved state of kinds that keep only their input. */
bool pp_unit_check_channels(const pp_unit_spec *s);
bool pp_unit_same_shape(const pp_unit_spec *s, int in_ndim, const int64_t *in, int *out_ndim,
                        int64_t *out, const char **why);
/* Elementwise kinds: output shape = input shape for (N, C) or (N, C, H, W)
 * with C = in_c. */
bool pp_unit_elementwise_shape(const pp_unit_spec *s, int in_ndim, const int64_t *in,
                               int *out_ndim, int64_t *out, const char **why);
/* A 4-D (N, C, 1, 1) view of a 2-D (N, C) tensor (4-D tensors unchanged), for
 * the image ops batch norm runs on. */
pp_tensor pp_unit_as_image(const pp_tensor *t);
pp_status pp_unit_build_nothing(pp_unit *u, uint64_t seed, pp_error *err);
void pp_unit_saved_nothing(const pp_unit *u, int in_ndim, const int64_t *in, void *saved,
                           pp_saved_list *l);
typedef struct pp_input_saved {
    pp_tensor x; /* the input */
} pp_input_saved;
void pp_unit_keep_input(const pp_unit *u, int in_ndim, const int64_t *in, void *saved,
                         pp_saved_list *l);

/* Appends (field, dtype, shape) to the list (sets overflow when it is full):
 * a tensor the kind's forward writes (pp_saved_add), or the unit's input or
 * output (pp_saved_add_io with PP_SAVED_INPUT or PP_SAVED_OUTPUT), which unit.c
 * keeps after a successful forward, sharing the caller's activation where it
 * can, so a kind's forward never copies them itself. */
void pp_saved_add(pp_saved_list *l, pp_tensor *field, pp_dtype dtype, int ndim,
                  const int64_t *shape);
void pp_saved_add_io(pp_saved_list *l, pp_tensor *field, pp_saved_from from, pp_dtype dtype,
                     int ndim, const int64_t *shape);
/* For the split backward: appends a PP_SAVED_GRAD tensor (written by the input
 * part for the weight part), or marks the item appended last as kept until
 * the weight part. */
void pp_saved_add_grad(pp_saved_list *l, pp_tensor *field, pp_dtype dtype, int ndim,
                       const int64_t *shape);
void pp_saved_until_w(pp_saved_list *l);

/* ---- compute pieces shared by kinds (layers.c) ---------------------------------------- */

/* Gradient targets: grad[e] for each learnable entry e of the unit (its own
 * gradients or a micro-batch's part, unit_kind.h's backward). */

/* y = conv(x) into an allocated y (shape (N, cout, P, Q)). */
pp_status pp_conv_layer_forward(pp_unit *u, pp_exec *ex, const pp_conv_layer *c,
                                const pp_tensor *x, pp_tensor *y, pp_error *err);
/* grad[w] += corr(x, dy) (and the bias's); dx = conv_transpose(dy) when dx is
 * not NULL. */
pp_status pp_conv_layer_backward(pp_unit *u, pp_exec *ex, const pp_conv_layer *c,
                                 const pp_tensor *x, const pp_tensor *dy, pp_tensor *dx,
                                 pp_tensor *grad, pp_error *err);
/* As pp_conv_layer_backward, but dx += conv_transpose(dy): dx already holds
 * another branch's gradient (a residual block's identity path). */
pp_status pp_conv_layer_backward_accumulate(pp_unit *u, pp_exec *ex, const pp_conv_layer *c,
                                            const pp_tensor *x, const pp_tensor *dy,
                                            pp_tensor *dx, pp_tensor *grad, pp_error *err);
/* The two parts of pp_conv_layer_backward, with its bits: dx = (accumulate:
 * +=) conv_transpose(dy); and grad[w] += corr(x, dy) with the bias's. */
pp_status pp_conv_layer_backward_data(pp_unit *u, pp_exec *ex, const pp_conv_layer *c,
                                      const pp_tensor *dy, pp_tensor *dx, bool accumulate,
                                      pp_error *err);
pp_status pp_conv_layer_backward_weight(pp_unit *u, pp_exec *ex, const pp_conv_layer *c,
                                        const pp_tensor *x, const pp_tensor *dy, pp_tensor *grad,
                                        pp_error *err);
/* y = bn(x) into an allocated y. Training (mean, invstd allocated, (C)):
 * batch statistics, running statistics updated, one pending count; else
 * (mean == NULL) running statistics. */
pp_status pp_bn_layer_forward(pp_unit *u, pp_exec *ex, pp_bn_layer *b, const pp_tensor *x,
                              pp_tensor *y, pp_tensor *mean, pp_tensor *invstd, pp_error *err);
/* dx = the gradient of x; dgamma, dbeta += (the unit's or a part's: see
 * pp_bn_layer_grads). */
pp_status pp_bn_layer_backward(pp_unit *u, pp_exec *ex, const pp_bn_layer *b, const pp_tensor *x,
                               const pp_tensor *dy, const pp_tensor *mean,
                               const pp_tensor *invstd, pp_tensor *dx, pp_tensor *dgamma,
                               pp_tensor *dbeta, pp_error *err);
/* y = relu?(bn(x) [+ add]) as one op (pp_batchnorm_forward_act): the same bits as
 * pp_bn_layer_forward then pp_add_relu / pp_relu_forward; add may be NULL. */
pp_status pp_bn_layer_forward_act(pp_unit *u, pp_exec *ex, pp_bn_layer *b, const pp_tensor *x,
                                  const pp_tensor *add, bool relu, pp_tensor *y, pp_tensor *mean,
                                  pp_tensor *invstd, pp_error *err);
/* The backward of relu_y = relu(bn(x)) from dy, the gradient of relu_y. */
pp_status pp_bn_layer_backward_relu(pp_unit *u, pp_exec *ex, const pp_bn_layer *b,
                                    const pp_tensor *x, const pp_tensor *relu_y,
                                    const pp_tensor *dy, const pp_tensor *mean,
                                    const pp_tensor *invstd, pp_tensor *dx, pp_tensor *dgamma,
                                    pp_tensor *dbeta, pp_error *err);
/* The backward of relu_y = relu(bn(x) + add) from dy, the gradient of relu_y:
 * as pp_bn_layer_backward_relu, the ReLU's gradient (the add's too) kept in
 * g (pp_batchnorm_backward_add_relu). */
pp_status pp_bn_layer_backward_add_relu(pp_unit *u, pp_exec *ex, const pp_bn_layer *b,
                                        const pp_tensor *x, const pp_tensor *relu_y,
                                        const pp_tensor *dy, const pp_tensor *mean,
                                        const pp_tensor *invstd, pp_tensor *dx,
                                        pp_tensor *dgamma, pp_tensor *dbeta, pp_tensor *g,
                                        pp_error *err);
/* Where a batch norm's backward adds its parameter gradients: grad[weight]
 * and grad[bias] (grad non-NULL), else the rows of part, an F32 (2, C) tensor
 * the split backward's input part zeroes and keeps for the weight part. */
void pp_bn_layer_grads(const pp_bn_layer *b, pp_tensor *grad, pp_tensor *part, pp_tensor *dgamma,
                       pp_tensor *dbeta);
/* The weight part of a batch norm: grad[weight], grad[bias] += part's rows. */
pp_status pp_bn_layer_backward_weight(pp_exec *ex, const pp_bn_layer *b, const pp_tensor *part,
                                      pp_tensor *grad, pp_error *err);

/* The dtype of the unit's activations: what its saved lists and
 * temporaries hold (pp_unit_spec_in_dtype). */
pp_dtype pp_unit_act_dtype(const pp_unit *u);

/* Entry e (a convolution's or linear layer's F32 weight) in the dtype of x:
 * the entry itself for an F32 x, else the unit's bf16 copy (rounded to
 * nearest even, in the unit's layout), made in ex's stream order at its first
 * use after pp_unit_params_changed; later calls in the same stream order
 * reuse it. *w is a view: pp_tensor_free on it is a no-op. */
pp_status pp_unit_weight_like(pp_unit *u, pp_exec *ex, int e, const pp_tensor *x, pp_tensor *w,
                              pp_error *err);

/* Allocates t like `like` (dtype and shape) in ex's stream order. */
pp_status pp_unit_alloc_like(pp_tensor *t, pp_exec *ex, const pp_tensor *like, pp_error *err);

#endif
