/*
 * link_cost.h - what a message between ranks costs, measured when the
 * pipeline is made (link_cost.c). Not installed.
 */
#ifndef PP_PIPELINE_LINK_COST_H
#define PP_PIPELINE_LINK_COST_H

#include "pipeline/state.h"

/* Measures the bandwidth and latency of every boundary of rank 0's replica
 * between two ranks (host messages) into p->link_gbps and
 * p->link_latency_ms (allocated here, zeros elsewhere). Collective: every
 * rank calls it once, after pipe_links_init. */
pp_status pipe_link_cost_measure(struct pp_pipeline *p, const pp_plan *plan, pp_error *err);

#endif
