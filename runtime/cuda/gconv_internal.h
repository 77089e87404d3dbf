/*
 * gconv_internal.h - what gconv.c (heuristics, execution plans,
 * timing, the cache and the call) and, below it, gconv_graph.c (the checked
 * cuDNN backend calls and phase 1: the operation graph) share: a plan's key
 * and entry, the build context, and gconv_graph.c's functions; the checked
 * calls, heuristics, plans and execution are shared with sdpa*.c (cuDNN's
 * fused attention), which builds with key NULL and what always set. Not
 * installed; only runtime/cuda/gconv*.c and sdpa*.c include it.
 */
#ifndef PP_CUDA_GCONV_INTERNAL_H
#define PP_CUDA_GCONV_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cudnn_graph.h>

#include "gconv.h"
#include "internal.h"

/* Unique ids of the graph's tensors. */
enum { UID_X = 1, UID_W = 2, UID_Y = 3 };

typedef struct gconv_key {
    pp_conv2d_desc d;
    int dir, dt, nhwc, math;
    uint32_t alpha, beta; /* bits of the floats */
} gconv_key;

/* How the plan was chosen (the probe prints it). */
typedef struct gconv_stats {
    int mode;          /* CUDNN_HEUR_MODE_A or CUDNN_HEUR_MODE_FALLBACK: where configs came from */
    int found;         /* engine configs offered by that mode */
    int refused;       /* refused by numerical notes */
    int failed;        /* did not finalize */
    int over;          /* finalized but wanted more workspace than the cap */
    int64_t over_mb;   /* the most one of those wanted, MiB rounded up */
    int timed;         /* execution plans timed */
    int64_t engine;    /* CUDNN_ATTR_ENGINE_GLOBAL_INDEX of the chosen engine */
    float ms;          /* its timed run */
} gconv_stats;

typedef struct gconv_entry {
    gconv_key key;
    cudnnBackendDescriptor_t tensor[3]; /* X, W, Y */
    cudnnBackendDescriptor_t conv, op, graph;
    cudnnBackendDescriptor_t cfg, plan; /* the chosen engine config and its plan */
    size_t ws;                          /* workspace bytes of plan */
    cudnnBackendDescriptor_t lean_cfg, lean_plan; /* of the candidates that ran, the one
                                           with the least workspace when it is less than
                                           plan's (NULL otherwise): run when plan's
                                           workspace cannot be had */
    size_t lean_ws;                     /* workspace bytes of lean_plan */
    gconv_stats stats;
    bool unsupported;                   /* no acceptable engine: every call is refused at
                                           once, with why (descriptors freed) */
    char why[sizeof(((pp_error *)0)->msg)];
} gconv_entry;

/* What a plan is being made for, for messages. */
typedef struct gbuild {
    pp_exec *ex;
    pp_cuda_exec *ce;
    const gconv_key *key;
    char what[200];
    pp_error *err;
} gbuild;

/* ---- checked backend calls (gconv_graph.c) ------------------------------ */

/* The key as words for messages: direction, dtype, layout, math, shapes. */
void pp_gconv_describe(char *buf, size_t n, const gconv_key *k);


/* A failed cuDNN backend call: names call, descriptor and attribute, status,
 * cuDNN's last error message and the convolution, at file:line. */
pp_status pp_gconv_fail(const gbuild *g, cudnnStatus_t st, const char *call, const char *desc,
                        const char *attr, const char *file, int line);
/* pp_gconv_fail at the caller's file. */
#define gfail(g, st, call, desc, attr, line) \
    pp_gconv_fail((g), (st), (call), (desc), (attr), __FILE__, (line))

/* cudnnBackendSetAttribute with the attribute's name in the message. */
#define GSET(g, d, desc, attr, type, count, val)                                          \
    do {                                                                                  \
        cudnnStatus_t st_ = cudnnBackendSetAttribute((d), (attr), (type), (count), (val)); \
        if (st_ != CUDNN_STATUS_SUCCESS)                                                  \
            return gfail((g), st_, "cudnnBackendSetAttribute", desc, #attr, __LINE__);    \
    } while (0)

/* Creates a descriptor of type (*out NULL on failure). */
pp_status pp_gconv_create(const gbuild *g, cudnnBackendDescriptorType_t type, const char *desc,
                          cudnnBackendDescriptor_t *out);
pp_status pp_gconv_finalize(const gbuild *g, cudnnBackendDescriptor_t d, const char *desc);
/* One value of attribute attr (named attrn in messages). */
pp_status pp_gconv_set_attr(const gbuild *g, cudnnBackendDescriptor_t d, const char *desc,
                            cudnnBackendAttributeName_t attr, const char *attrn,
                            cudnnBackendAttributeType_t type, const void *val);

/* ---- heuristics, plans, execution (gconv.c) ------------------------------ */

/* Engine configs asked of the heuristics at most. */
#define GCONV_HEUR_MAX 64

typedef struct cfg_list {
    cudnnBackendDescriptor_t cfg[GCONV_HEUR_MAX];
    int n;
} cfg_list;

/* Destroys l's configs (those taken out of it are NULL). */
void pp_gconv_cfgs_free(cfg_list *l);
/* The engine configs heuristics mode offers for graph, best first. */
pp_status pp_gconv_heuristics(const gbuild *g, cudnnBackendDescriptor_t graph,
                              cudnnBackendHeurMode_t mode, cfg_list *l);
/* An execution plan of cfg and its workspace. Fails (the caller skips the
 * config) when it does not finalize (*ws 0) or wants more than its device's
 * workspace cap (pp_cuda_device.ws_mb MiB: PP_ERR_UNSUPPORTED, *ws the bytes
 * it wanted, so that the caller can count what the cap left out). */
pp_status pp_gconv_make_plan(const gbuild *g, cudnnBackendDescriptor_t cfg,
                             cudnnBackendDescriptor_t *plan, size_t *ws);
/* Runs plan on ex's cuDNN handle: n tensors (uids[i] at ptrs[i]) and workspace ws. */
pp_status pp_gconv_execute(const gbuild *g, cudnnBackendDescriptor_t plan, int n,
                           const int64_t *uids, void *const *ptrs, void *ws);

/* ---- phase 1: the operation graph (gconv_graph.c) ----------------------- */

/* e->tensor: X, W and Y of g's key. */
pp_status pp_gconv_make_tensors(const gbuild *g, gconv_entry *e);
/* *out: the convolution descriptor of g's key. */
pp_status pp_gconv_make_conv(const gbuild *g, cudnnBackendDescriptor_t *out);
/* e->op: the operation of g's key's direction on e's tensors and conv. */
pp_status pp_gconv_make_op(const gbuild *g, gconv_entry *e);
/* e->graph: the operation graph of e->op. */
pp_status pp_gconv_make_graph(const gbuild *g, gconv_entry *e);

#endif
