/*
 * yaml_tree.c - libyaml events -> pp_ynode tree, with limits on size, depth,
 * node count, aliases and documents (see yaml_tree.h).
 */
#include "partitioner/yaml_tree.h"

#include <stdlib.h>
#include <string.h>

#include <yaml.h>

void pp_ytree_free(pp_ytree *t)
{
    if (!t) return;
    pp_ynode *n = t->all;
    while (n) {
        pp_ynode *next = n->next_alloc;
        free(n->str);
        free(n->kids);
        free(n);
        n = next;
    }
    t->all = NULL;
    t->root = NULL;
    t->n_nodes = 0;
}

int pp_ynode_is_null(const pp_ynode *n)
{
    if (!n || n->kind != PP_YNODE_SCALAR || n->quoted) return 0;
    return n->len == 0 || strcmp(n->str, "~") == 0 || strcmp(n->str, "null") == 0 ||
           strcmp(n->str, "Null") == 0 || strcmp(n->str, "NULL") == 0;
}

/* Line and column (1-based) of a byte offset, for reader errors whose mark
 * libyaml leaves unset. */
static void offset_position(const char *text, size_t len, size_t off, int *line, int *col)
{
    int l = 1, c = 1;
    if (off > len) off = len;
    for (size_t i = 0; i < off; i++) {
        if (text[i] == '\n') {
            l++;
            c = 1;
        } else {
            c++;
        }
    }
    *line = l;
    *col = c;
}

static pp_ynode *node_new(pp_ytree *t, pp_ynode_kind kind, const yaml_mark_t *m)
{
    pp_ynode *n = calloc(1, sizeof *n);
    if (!n) return NULL;
    n->kind = kind;
    n->line = (int)m->line + 1;
    n->col = (int)m->column + 1;
    n->next_alloc = t->all;
    t->all = n;
    t->n_nodes++;
    return n;
}

typedef struct open_node {
    pp_ynode *node;
    int entries;               /* kids used so far (map: keys and values) */
} open_node;

static int kids_push(pp_ynode *parent, open_node *o, pp_ynode *kid)
{
    if (o->entries == parent->cap) {
        int cap = parent->cap ? parent->cap * 2 : 8;
        pp_ynode **k = realloc(parent->kids, (size_t)cap * sizeof *k);
        if (!k) return -1;
        parent->kids = k;
        parent->cap = cap;
    }
    parent->kids[o->entries++] = kid;
    parent->n = parent->kind == PP_YNODE_MAP ? o->entries / 2 : o->entries;
    return 0;
}

static const char *error_kind(yaml_error_type_t e)
{
    switch (e) {
    case YAML_READER_ERROR: return "cannot read the YAML text";
    case YAML_SCANNER_ERROR: return "YAML syntax error";
    case YAML_PARSER_ERROR: return "YAML syntax error";
    case YAML_MEMORY_ERROR: return "out of memory while reading YAML";
    default: return "YAML error";
    }
}

pp_status pp_ytree_parse(const char *file, const char *text, size_t len, pp_ytree *t, pp_diag *d)
{
    memset(t, 0, sizeof *t);
    if (len > PP_YAML_MAX_BYTES)
        return pp_diag_add(d, PP_ERR_INPUT, file, 0, 0,
                           "the plan is too large (%zu bytes; at most %u)", len,
                           PP_YAML_MAX_BYTES);
    yaml_parser_t parser;
    if (!yaml_parser_initialize(&parser))
        return pp_diag_add(d, PP_ERR_OOM, file, 0, 0, "out of memory (YAML parser)");
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);

    open_node stack[PP_YAML_MAX_DEPTH + 1];
    int depth = 0;
    int documents = 0;
    pp_status st = PP_OK;
    int done = 0;

    while (!done && st == PP_OK) {
        yaml_event_t ev;
        if (!yaml_parser_parse(&parser, &ev)) {
            int line = (int)parser.problem_mark.line + 1;
            int col = (int)parser.problem_mark.column + 1;
            if (parser.error == YAML_READER_ERROR)
                offset_position(text, len, parser.problem_offset, &line, &col);
            const char *problem = parser.problem ? parser.problem : "unknown problem";
            if (parser.error == YAML_MEMORY_ERROR)
                st = pp_diag_add(d, PP_ERR_OOM, file, 0, 0, "%s", error_kind(parser.error));
            else if (parser.context)
                st = pp_diag_add(d, PP_ERR_INPUT, file, line, col, "%s: %s %s",
                                 error_kind(parser.error), problem, parser.context);
            else
                st = pp_diag_add(d, PP_ERR_INPUT, file, line, col, "%s: %s",
                                 error_kind(parser.error), problem);
            break;
        }
        const yaml_mark_t *m = &ev.start_mark;
        pp_ynode *node = NULL;
        switch (ev.type) {
        case YAML_STREAM_START_EVENT:
            break;
        case YAML_STREAM_END_EVENT:
            done = 1;
            break;
        case YAML_DOCUMENT_START_EVENT:
            if (++documents > 1)
                st = pp_diag_add(d, PP_ERR_INPUT, file, (int)m->line + 1, (int)m->column + 1,
                                 "a plan is one YAML document; found a second one here");
            break;
        case YAML_DOCUMENT_END_EVENT:
            break;
        case YAML_ALIAS_EVENT:
            st = pp_diag_add(d, PP_ERR_INPUT, file, (int)m->line + 1, (int)m->column + 1,
                             "YAML aliases (*%s) are not allowed in a plan",
                             ev.data.alias.anchor ? (const char *)ev.data.alias.anchor : "");
            break;
        case YAML_SCALAR_EVENT:
            node = node_new(t, PP_YNODE_SCALAR, m);
            if (!node) {
                st = pp_diag_add(d, PP_ERR_OOM, file, 0, 0, "out of memory (YAML tree)");
                break;
            }
            if (memchr(ev.data.scalar.value, '\0', ev.data.scalar.length)) {
                st = pp_diag_add(d, PP_ERR_INPUT, file, node->line, node->col,
                                 "a string contains a NUL character");
                break;
            }
            node->str = malloc(ev.data.scalar.length + 1);
            if (!node->str) {
                st = pp_diag_add(d, PP_ERR_OOM, file, 0, 0, "out of memory (YAML tree)");
                break;
            }
            memcpy(node->str, ev.data.scalar.value, ev.data.scalar.length);
            node->str[ev.data.scalar.length] = '\0';
            node->len = ev.data.scalar.length;
            node->quoted = ev.data.scalar.style != YAML_PLAIN_SCALAR_STYLE;
            break;
        case YAML_SEQUENCE_START_EVENT:
        case YAML_MAPPING_START_EVENT:
            if (depth >= PP_YAML_MAX_DEPTH) {
                st = pp_diag_add(d, PP_ERR_INPUT, file, (int)m->line + 1, (int)m->column + 1,
                                 "the plan is nested too deeply (more than %d levels)",
                                 PP_YAML_MAX_DEPTH);
                break;
            }
            node = node_new(t, ev.type == YAML_SEQUENCE_START_EVENT ? PP_YNODE_SEQ : PP_YNODE_MAP,
                            m);
            if (!node) st = pp_diag_add(d, PP_ERR_OOM, file, 0, 0, "out of memory (YAML tree)");
            break;
        case YAML_SEQUENCE_END_EVENT:
        case YAML_MAPPING_END_EVENT:
            if (depth > 0) depth--;
            break;
        default:
            break;
        }
        if (st == PP_OK && node) {
            if (t->n_nodes > PP_YAML_MAX_NODES) {
                st = pp_diag_add(d, PP_ERR_INPUT, file, node->line, node->col,
                                 "the plan has too many YAML nodes (more than %d)",
                                 PP_YAML_MAX_NODES);
            } else if (depth == 0) {
                if (!t->root) t->root = node;
            } else if (kids_push(stack[depth - 1].node, &stack[depth - 1], node) != 0) {
                st = pp_diag_add(d, PP_ERR_OOM, file, 0, 0, "out of memory (YAML tree)");
            }
            if (st == PP_OK && node->kind != PP_YNODE_SCALAR) {
                stack[depth].node = node;
                stack[depth].entries = 0;
                depth++;
            }
        }
        yaml_event_delete(&ev);
    }
    yaml_parser_delete(&parser);
    if (st == PP_OK && !t->root)
        st = pp_diag_add(d, PP_ERR_INPUT, file, 0, 0, "the plan is empty");
    if (st != PP_OK) pp_ytree_free(t);
    return st;
}
