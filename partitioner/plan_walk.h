/*
 * plan_walk.h - internal: the state of one plan walk over a YAML tree and the
 * typed getters that report "FILE:LINE:COL: message" problems. Shared by
 * plan.c (sections), plan_model.c (the model), plan_recipe.c (optimizer and
 * loss) and plan_stages.c (stages and layer names).
 */
#ifndef PP_PARTITIONER_PLAN_WALK_H
#define PP_PARTITIONER_PLAN_WALK_H

#include <stdbool.h>
#include <stdint.h>

#include "partitioner/plan.h"
#include "partitioner/yaml_tree.h"

#define PP_WALK_MAX_KEYS 24

/* Nodes of a data source's keys, for problems found after its walk. */
typedef struct pp_walk_nodes {
    const pp_ynode *images, *labels;              /* idx */
    const pp_ynode *classes;                      /* synthetic num_classes */
    const pp_ynode *root;                         /* imagefolder */
    const pp_ynode *file;                         /* tokens, text */
    const pp_ynode *tokenizer;                    /* tokens, text: data's tokenizer */
    const pp_ynode *section;                      /* the section's mapping */
} pp_walk_nodes;

typedef struct pp_walk {
    const char *file;          /* name used in messages */
    const char *dir;           /* folder relative data paths are resolved against */
    pp_diag *diag;
    pp_plan *plan;             /* being filled */
    int errors;                /* problems reported so far */
    bool oom;
    bool model_ok;             /* plan->model is usable */
    bool batch_ok;             /* batch sizes are usable */
    bool size_ok;              /* the input size is usable */
    bool catalogue_ok;         /* plan->catalogue was built */
    bool forward_is_list, backward_is_list, input_is_list, weight_is_list;
    const pp_ynode *forward_node, *backward_node, *input_node, *weight_node; /* delay times */
    const pp_ynode *size_node;                    /* data.image_size */
    const pp_ynode *layers_node;                  /* model.layers (sequential) */
    const pp_ynode *classes_node;                 /* model.num_classes */
    pp_walk_nodes src[2];                         /* the keys of data (0) and eval (1) */
    const pp_ynode *model_node;                   /* the model section */
} pp_walk;

void pp_walk_error(pp_walk *w, const pp_ynode *n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
pp_mark pp_walk_mark(const pp_ynode *n);
const char *pp_walk_describe(const pp_ynode *n);
/* A path of the plan (n's string) resolved against its folder: an existing
 * readable file (folder: a folder), as a malloc'd absolute path, or NULL
 * after reporting the problem at n as "WHAT: ...". */
char *pp_walk_path(pp_walk *w, const pp_ynode *n, const char *what, bool folder);

/* Checks that n is a mapping whose keys are among keys (reporting unknown and
 * duplicate keys); found[k] receives the value of keys[k] or NULL. False when
 * n is not a mapping. n_keys <= PP_WALK_MAX_KEYS. */
bool pp_walk_map(pp_walk *w, const pp_ynode *n, const char *what, const char *const *keys,
                 int n_keys, const pp_ynode **found);
bool pp_walk_str(pp_walk *w, const pp_ynode *n, const char *what, const char **out);
bool pp_walk_int(pp_walk *w, const pp_ynode *n, const char *what, int64_t lo, int64_t hi,
                 int64_t *out);
bool pp_walk_int32(pp_walk *w, const pp_ynode *n, const char *what, int lo, int hi, int *out);
bool pp_walk_num(pp_walk *w, const pp_ynode *n, const char *what, double lo, double hi,
                 double *out);
bool pp_walk_bool(pp_walk *w, const pp_ynode *n, const char *what, bool *out);
/* Index of the string value among names, or -1 after reporting. */
int pp_walk_choice(pp_walk *w, const pp_ynode *n, const char *what, const char *const *names,
                   int n_names, const char *expected);

/* A recomputation mode (never, except_last, always) as pp_plan_recompute, or -1
 * after reporting. */
int pp_walk_recompute(pp_walk *w, const pp_ynode *n, const char *what);

/* plan_model.c: the `model` section into w->plan->model (n: the section,
 * never NULL), and, once the input size is known, a sequential
 * model's layers against it (builds w->plan->catalogue). */
void pp_walk_model(pp_walk *w, const pp_ynode *n);
void pp_walk_resolve_sequential(pp_walk *w, const pp_ynode *model);

/* plan_source.c: a data source section, `data` (eval false) or `eval` (true),
 * into plan->data or plan->eval.data; needs the model walked first. */
void pp_walk_source(pp_walk *w, const pp_ynode *n, bool eval);
/* Frees a source's strings (not d itself). */
void pp_plan_data_free(pp_plan_data *d);

/* plan_data.c: the IDX files of `data` and `eval` against the model (channels,
 * label count and range), once model and data are walked. */
void pp_walk_check_data(pp_walk *w);

/* plan_gpt2.c: GPT-2's model keys into w->plan->model.gpt2: f holds the nodes of
 * preset, n_layer, n_head, n_embd, vocab_size, block_size, bias, dropout and
 * tie_embeddings (any NULL), in that order. */
enum { PP_WALK_GPT2_KEYS = 9 };
void pp_walk_gpt2(pp_walk *w, const pp_ynode *model, const pp_ynode *const *f);

/* plan_tokens.c: token data. pp_walk_token_file reads a tokens or text
 * section's file and, for data (eval false), its block_size (file and block
 * may be NULL) into d; pp_walk_check_tokens, once the plan is otherwise
 * valid, the model against its data and both files whole (the header, one
 * window at least, every id below model.vocab_size). */
void pp_walk_token_file(pp_walk *w, const pp_ynode *section, const pp_ynode *file,
                        const pp_ynode *block, bool eval, pp_plan_data *d);
/* pp_walk_tokenizer: data's `tokenizer: {vocab, merges}` (n never NULL). */
void pp_walk_tokenizer(pp_walk *w, const pp_ynode *n, pp_plan_data *d);
void pp_walk_check_tokens(pp_walk *w);
/* plan_recipe.c: the `optimizer` section (its type, decay groups, clipping and
 * lr_schedule) and the `loss` section (n never NULL). */
void pp_walk_optimizer(pp_walk *w, const pp_ynode *n);
void pp_walk_loss(pp_walk *w, const pp_ynode *n);

/* plan_stages.c: `stages` (list or auto), `devices`, `balance`; any may be NULL. */
void pp_walk_stages(pp_walk *w, const pp_ynode *stages, const pp_ynode *devices,
                    const pp_ynode *balance);

#endif
