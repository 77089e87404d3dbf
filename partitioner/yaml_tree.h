/*
 * yaml_tree.h - internal: a YAML document read into a small tree of nodes
 * that keeps the position of every node, with hard limits for hostile input.
 * Only partitioner/ includes this; libyaml stays inside yaml_tree.c.
 *
 * Limits: document size PP_YAML_MAX_BYTES, nesting depth PP_YAML_MAX_DEPTH,
 * PP_YAML_MAX_NODES nodes; aliases are rejected (no expansion at all), anchors
 * and tags are ignored, exactly one document is accepted, scalars may not
 * contain NUL characters.
 */
#ifndef PP_PARTITIONER_YAML_TREE_H
#define PP_PARTITIONER_YAML_TREE_H

#include <stddef.h>

#include "partitioner/diag.h"

#define PP_YAML_MAX_BYTES (1u << 20)
#define PP_YAML_MAX_DEPTH 32
#define PP_YAML_MAX_NODES 100000

typedef enum pp_ynode_kind {
    PP_YNODE_SCALAR = 0,
    PP_YNODE_SEQ = 1,
    PP_YNODE_MAP = 2,
} pp_ynode_kind;

typedef struct pp_ynode {
    pp_ynode_kind kind;
    int line, col;             /* 1-based position of the node's start */
    char *str;                 /* scalar: value, NUL-terminated (no NUL inside) */
    size_t len;                /* scalar: strlen(str) */
    int quoted;                /* scalar: 1 when written in quotes or as a block scalar */
    int n;                     /* seq: item count; map: pair count */
    struct pp_ynode **kids;    /* seq: n items; map: 2n nodes, key then value */
    int cap;                   /* allocated entries of kids */
    struct pp_ynode *next_alloc; /* allocation list (owned by the tree) */
} pp_ynode;

typedef struct pp_ytree {
    pp_ynode *root;            /* NULL until parsed */
    pp_ynode *all;             /* every node, for freeing */
    int n_nodes;
} pp_ytree;

/* Parses text (len bytes, need not be NUL-terminated) into t. On failure adds
 * a positioned problem to d, returns PP_ERR_INPUT (PP_ERR_OOM when out of
 * memory) and leaves t empty. The caller frees t with pp_ytree_free either way. */
pp_status pp_ytree_parse(const char *file, const char *text, size_t len, pp_ytree *t, pp_diag *d);
void pp_ytree_free(pp_ytree *t);

/* True for a plain scalar that YAML reads as null ("", "~", "null"). */
int pp_ynode_is_null(const pp_ynode *n);

#endif
