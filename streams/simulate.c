/* simulate.c - list-scheduling prediction of a schedule's step (simulate.h). */
#include "streams/simulate.h"

#include <stdlib.h>
#include <string.h>

#include "streams/program.h"

#define PP_DEFAULT_SLOTS 2

static double item_cost(const pp_schedule *s, const pp_sim_costs *c, const pp_prog_item *it)
{
    double scale = 1.0;
    if (c->ref_mb_size > 0 && it->mb >= 0)
        scale = (double)s->mb_sizes[it->mb] / (double)c->ref_mb_size;
    switch (it->kind) {
    case PP_PROG_F: return c->forward_ms[it->stage] * scale;
    case PP_PROG_B: return c->backward_ms[it->stage] * scale;
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

void pp_sim_result_free(pp_sim_result *res)
{
    if (!res) return;
    free(res->busy_ms);
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
    pp_program p;
    PP_TRY(pp_program_build(s, c->slots > 0 ? c->slots : PP_DEFAULT_SLOTS, &p, err));
    double *lane_end = calloc((size_t)p.n_lanes, sizeof *lane_end);
    double *end = malloc((size_t)p.n_items * sizeof *end);
    res->busy_ms = calloc((size_t)s->stages, sizeof *res->busy_ms);
    res->items = malloc((size_t)p.n_items * sizeof *res->items);
    if (!lane_end || !end || !res->busy_ms || !res->items) {
        free(lane_end);
        free(end);
        pp_sim_result_free(res);
        pp_program_free(&p);
        return pp_error_set(err, PP_ERR_OOM, "out of host memory (simulation)");
    }
    res->stages = s->stages;
    res->n_items = p.n_items;
    double step = 0.0;
    for (int k = 0; k < p.n_items; k++) {
        const pp_prog_item *it = &p.items[k];
        double start = lane_end[it->lane];
        for (int d = 0; d < it->ndeps; d++)
            if (end[it->deps[d]] > start) start = end[it->deps[d]];
        double dur = item_cost(s, c, it);
        end[k] = start + dur;
        lane_end[it->lane] = end[k];
        if (it->lane < s->stages) res->busy_ms[it->stage] += dur;
        if (end[k] > step) step = end[k];
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
                if (p.items[k].kind == PP_PROG_B && p.items[k].stage == st && end[k] > last_b)
                    last_b = end[k];
            double ar = pp_sim_allreduce_ms(c->grad_bytes[st], c->replicas, c->link_gbps,
                                            c->link_latency_ms);
            res->allreduce_ms += ar;
            if (last_b + ar > step) step = last_b + ar;
        }
    }
    res->step_ms = step;
    double busy = 0.0;
    for (int i = 0; i < s->stages; i++) busy += res->busy_ms[i];
    res->bubble = step > 0.0 ? 1.0 - busy / ((double)s->stages * step) : 0.0;
    free(lane_end);
    free(end);
    pp_program_free(&p);
    return PP_OK;
}
