/* simulate.c - list-scheduling prediction of a schedule's step (simulate.h). */
#include "streams/simulate.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "streams/program.h"

#define PP_DEFAULT_SLOTS 2

typedef struct sim_arg {
    const pp_schedule *s;
    const pp_sim_costs *c;
} sim_arg;

static double item_cost(const pp_prog_item *it, void *arg)
{
    const pp_schedule *s = ((const sim_arg *)arg)->s;
    const pp_sim_costs *c = ((const sim_arg *)arg)->c;
    double scale = 1.0;
    if (c->ref_mb_size > 0 && it->mb >= 0)
        scale = (double)s->mb_sizes[it->mb] / (double)c->ref_mb_size;
    switch (it->kind) {
    case PP_PROG_F: return c->forward_ms[it->stage] * scale;
    case PP_PROG_B: return c->backward_ms[it->stage] * scale;
    case PP_PROG_I:
        return (c->input_ms ? c->input_ms[it->stage] : c->backward_ms[it->stage] / 2) * scale;
    case PP_PROG_W:
        return (c->weight_ms ? c->weight_ms[it->stage] : c->backward_ms[it->stage] / 2) * scale;
    case PP_PROG_STEP: return c->step_ms ? c->step_ms[it->stage] : 0.0;
    case PP_PROG_COPY_ACT: return c->copy_act_ms ? c->copy_act_ms[it->stage] * scale : 0.0;
    case PP_PROG_COPY_GRAD: return c->copy_grad_ms ? c->copy_grad_ms[it->stage] * scale : 0.0;
    }
    return 0.0;
}

double pp_sim_message_ms(double bytes, double gbps, double latency_ms)
{
    return latency_ms + (gbps > 0 ? bytes / (gbps * 1e9) * 1e3 : 0.0);
}

double pp_sim_allreduce_ms(double bytes, int r, double gbps, double latency_ms)
{
    if (r <= 1) return 0.0;
    double rounds = 2.0 * (r - 1);
    return rounds * latency_ms + (gbps > 0 ? rounds / r * bytes / (gbps * 1e9) * 1e3 : 0.0);
}

double pp_sim_allreduce_hier_ms(double bytes, int local, int nodes, double intra_gbps,
                                double intra_latency_ms, double inter_gbps,
                                double inter_latency_ms)
{
    if (local < 1) local = 1;
    return pp_sim_allreduce_ms(bytes, local, intra_gbps, intra_latency_ms) +
           pp_sim_allreduce_ms(bytes / local, nodes, inter_gbps, inter_latency_ms);
}

/* Whether c's replicas span several nodes. */
static bool several_nodes(const pp_sim_costs *c)
{
    return c->replicas_per_node > 0 && c->replicas_per_node < c->replicas;
}

double pp_sim_stage_allreduce_ms(const pp_sim_costs *c, double bytes,
                                 pp_sim_allreduce_algo *used)
{
    if (used) *used = PP_SIM_ALLREDUCE_FLAT;
    if (c->replicas <= 1) return 0.0;
    if (!several_nodes(c))
        return pp_sim_allreduce_ms(bytes, c->replicas, c->link_gbps, c->link_latency_ms);
    double flat = pp_sim_allreduce_ms(bytes, c->replicas, c->node_gbps, c->node_latency_ms);
    double hier = pp_sim_allreduce_hier_ms(bytes, c->replicas_per_node,
                                           c->replicas / c->replicas_per_node, c->link_gbps,
                                           c->link_latency_ms, c->node_gbps, c->node_latency_ms);
    bool take_hier = c->allreduce == PP_SIM_ALLREDUCE_HIER ||
                     (c->allreduce == PP_SIM_ALLREDUCE_AUTO && hier < flat);
    if (used && take_hier) *used = PP_SIM_ALLREDUCE_HIER;
    return take_hier ? hier : flat;
}

void pp_sim_result_free(pp_sim_result *res)
{
    if (!res) return;
    free(res->busy_ms);
    free(res->device_busy_ms);
    free(res->items);
    memset(res, 0, sizeof *res);
}

pp_status pp_simulate(const pp_schedule *s, const pp_sim_costs *c, pp_sim_result *res,
                      pp_error *err)
{
    memset(res, 0, sizeof *res);
    if (!c || !c->forward_ms || !c->backward_ms)
        return pp_error_set(err, PP_ERR_INVALID, "simulate: missing forward/backward costs");
    if (c->stages != s->stages)
        return pp_error_set(err, PP_ERR_INVALID, "simulate: costs for %d stages, schedule has %d",
                            c->stages, s->stages);
    if (c->replicas > 1 && (!c->grad_bytes || !(c->link_gbps > 0) || c->link_latency_ms < 0))
        return pp_error_set(err, PP_ERR_INVALID, "simulate: replicas need grad_bytes, a "
                            "positive link_gbps and a latency >= 0");
    if (c->replicas > 1 && several_nodes(c) &&
        (c->replicas % c->replicas_per_node != 0 || !(c->node_gbps > 0) ||
         c->node_latency_ms < 0))
        return pp_error_set(err, PP_ERR_INVALID, "simulate: %d replicas, %d per node: the "
                            "nodes must hold equal shares, and need a positive node_gbps and "
                            "a node latency >= 0", c->replicas, c->replicas_per_node);
    if ((unsigned)c->allreduce > PP_SIM_ALLREDUCE_HIER)
        return pp_error_set(err, PP_ERR_INVALID, "simulate: unknown allreduce algorithm %d",
                            (int)c->allreduce);
    pp_program p;
    PP_TRY(pp_program_build(s, c->slots > 0 ? c->slots : PP_DEFAULT_SLOTS, &p, err));
    double *end = malloc((size_t)(p.n_items > 0 ? p.n_items : 1) * sizeof *end);
    res->busy_ms = calloc((size_t)s->stages, sizeof *res->busy_ms);
    res->device_busy_ms = calloc((size_t)s->devices, sizeof *res->device_busy_ms);
    res->items = malloc((size_t)p.n_items * sizeof *res->items);
    if (!end || !res->busy_ms || !res->device_busy_ms || !res->items) {
        free(end);
        pp_sim_result_free(res);
        pp_program_free(&p);
        return pp_error_set(err, PP_ERR_OOM, "out of host memory (simulation)");
    }
    res->stages = s->stages;
    res->devices = s->devices;
    res->n_items = p.n_items;
    sim_arg arg = {s, c};
    double step = pp_program_time(&p, item_cost, &arg, end);
    for (int k = 0; k < p.n_items; k++) {
        const pp_prog_item *it = &p.items[k];
        double dur = item_cost(it, &arg), start = end[k] - dur;
        if (it->lane < s->stages) {
            res->busy_ms[it->stage] += dur;
            res->device_busy_ms[s->stage_device[it->stage]] += dur;
        }
        pp_sim_item *out = &res->items[k];
        pp_prog_item_label(it, out->name, sizeof out->name);
        out->lane = it->lane;
        out->start_ms = start;
        out->end_ms = end[k];
    }
    /* replicas: each stage's gradient sum after its last backward, on its own lane */
    if (c->replicas > 1) {
        for (int st = 0; st < s->stages; st++) {
            double last_b = 0.0;
            for (int k = 0; k < p.n_items; k++)
                if ((p.items[k].kind == PP_PROG_B || p.items[k].kind == PP_PROG_W) &&
                    p.items[k].stage == st && end[k] > last_b)
                    last_b = end[k];
            pp_sim_allreduce_algo used;
            double ar = pp_sim_stage_allreduce_ms(c, c->grad_bytes[st], &used);
            res->allreduce_ms += ar;
            res->hier_stages += used == PP_SIM_ALLREDUCE_HIER;
            if (last_b + ar > step) step = last_b + ar;
        }
    }
    res->step_ms = step;
    double busy = 0.0;
    for (int i = 0; i < s->stages; i++) busy += res->busy_ms[i];
    res->bubble = step > 0.0 ? 1.0 - busy / ((double)s->devices * step) : 0.0;
    free(end);
    pp_program_free(&p);
    return PP_OK;
}
