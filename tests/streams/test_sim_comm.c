/*
 * test_sim_comm.c - the simulator's costs for jobs of several processes:
 * message, ring and hierarchical allreduce formulas (against values worked
 * out by hand), the choice between them, and a replicated pipeline whose
 * per-stage gradient sums start after each stage's last backward.
 */
#include <math.h>
#include <string.h>

#include "streams/schedule.h"
#include "streams/simulate.h"
#include "tests/check.h"

static bool near(double a, double b) { return fabs(a - b) <= 1e-9 * (fabs(b) + 1); }

static void test_formulas(void)
{
    /* 1 MB at 1 GB/s is 1 ms, plus the latency */
    CHECK(near(pp_sim_message_ms(1e6, 1.0, 0.05), 1.05));
    CHECK(near(pp_sim_message_ms(0, 1.0, 0.05), 0.05));
    /* ring: 2(r-1)/r x bytes / bandwidth + 2(r-1) latencies */
    static const struct { int r; double bytes, gbps, lat, want; } cases[] = {
        {1, 1e9, 10, 0.1, 0.0},
        {2, 1e9, 10, 0.0, 100.0},          /* 2*1/2 * 1e9 / 1e10 s */
        {4, 1e9, 10, 0.0, 150.0},          /* 2*3/4 */
        {4, 1e9, 10, 0.01, 150.06},        /* + 6 messages */
        {8, 4e6, 1, 0.5, 7.0 + 7.0},       /* 2*7/8 * 4 ms + 14 * 0.5 */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        double got = pp_sim_allreduce_ms(cases[i].bytes, cases[i].r, cases[i].gbps, cases[i].lat);
        CHECK_MSG(near(got, cases[i].want), "case %zu: %g, want %g", i, got, cases[i].want);
    }
}

static void test_hierarchical(void)
{
    /* ring(B, L, intra) + ring(B / L, N, inter) */
    static const struct {
        double bytes;
        int local, nodes;
        double in_gbps, in_lat, out_gbps, out_lat, want;
    } cases[] = {
        {1e9, 1, 1, 10, 0.1, 1, 0.1, 0.0},            /* one process */
        /* 4 x 2: 2*3/4 * 0.8 ms + 6 * 1 us = 0.126; 2*1/2 * 2 MB at
         * 10 GB/s = 0.2 ms + 2 * 10 us = 0.22 */
        {8e6, 4, 2, 100, 0.001, 10, 0.01, 0.126 + 0.22},
        {8e6, 4, 1, 100, 0.001, 10, 0.01, 0.126},     /* one node: the ring within it */
        {8e6, 1, 8, 100, 0.001, 10, 0.01, 1.4 + 0.14}, /* one per node: the flat ring */
        /* 8 x 64, 100 MB, NVLink 450 GB/s 5 us, 50 GB/s 10 us:
         * 2*7/8 * 100e6 / 450e9 s = 0.38889 ms + 14 * 0.005;
         * 2*63/64 * 12.5e6 / 50e9 s = 0.49219 ms + 126 * 0.01 */
        {100e6, 8, 64, 450, 0.005, 50, 0.01,
         1.75 * 100e6 / 450e9 * 1e3 + 0.07 + 2.0 * 63 / 64 * 12.5e6 / 50e9 * 1e3 + 1.26},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        double got = pp_sim_allreduce_hier_ms(cases[i].bytes, cases[i].local, cases[i].nodes,
                                              cases[i].in_gbps, cases[i].in_lat,
                                              cases[i].out_gbps, cases[i].out_lat);
        CHECK_MSG(near(got, cases[i].want), "hier case %zu: %g, want %g", i, got, cases[i].want);
    }
    /* the per-stage choice: 8 replicas, 4 per node */
    pp_sim_costs c = {.replicas = 8, .link_gbps = 100, .link_latency_ms = 0.001,
                      .replicas_per_node = 4, .node_gbps = 10, .node_latency_ms = 0.01};
    pp_sim_allreduce_algo used;
    CHECK(near(pp_sim_stage_allreduce_ms(&c, 8e6, &used), 0.346) &&
          used == PP_SIM_ALLREDUCE_HIER);
    c.allreduce = PP_SIM_ALLREDUCE_FLAT; /* 2*7/8 * 0.8 ms + 14 * 10 us */
    CHECK(near(pp_sim_stage_allreduce_ms(&c, 8e6, &used), 1.54) &&
          used == PP_SIM_ALLREDUCE_FLAT);
    /* a node link faster than the one within the node: automatic takes the flat ring */
    c.allreduce = PP_SIM_ALLREDUCE_AUTO;
    c.link_gbps = 1;
    c.link_latency_ms = 0;
    c.node_latency_ms = 0;
    CHECK(near(pp_sim_stage_allreduce_ms(&c, 8e6, &used), 1.4) && used == PP_SIM_ALLREDUCE_FLAT);
    c.allreduce = PP_SIM_ALLREDUCE_HIER; /* 2*3/4 * 8 ms + 0.2 ms */
    CHECK(near(pp_sim_stage_allreduce_ms(&c, 8e6, NULL), 12.2));
    /* all in one node: the flat ring over the link within it, whatever is asked */
    c.replicas_per_node = 8;
    CHECK(near(pp_sim_stage_allreduce_ms(&c, 8e6, &used), 14.0) && used == PP_SIM_ALLREDUCE_FLAT);
    c.replicas = 1;
    CHECK(pp_sim_stage_allreduce_ms(&c, 8e6, NULL) == 0.0);
}

static void test_replicated_step(void)
{
    pp_error err;
    pp_schedule s;
    int sizes[4] = {1, 1, 1, 1};
    CHECK_OK(pp_schedule_build(&s, PP_SCHEDULE_GPIPE, 2, 4, sizes, &err), &err);
    double f[2] = {1, 1}, b[2] = {2, 2}, bytes[2] = {4e6, 1e6};
    pp_sim_costs c = {.stages = 2, .forward_ms = f, .backward_ms = b};
    pp_sim_result one, two;
    CHECK_OK(pp_simulate(&s, &c, &one, &err), &err);
    /* GPipe, uniform: (m + S - 1)(f + b) = 15 ms; stage 1's last backward
     * ends at 13 ms, stage 0's at 15 ms */
    CHECK_MSG(near(one.step_ms, 15.0), "step %g", one.step_ms);
    c.replicas = 2;
    c.grad_bytes = bytes;
    c.link_gbps = 1.0;
    c.link_latency_ms = 0.0;
    CHECK_OK(pp_simulate(&s, &c, &two, &err), &err);
    /* stage 0: 15 + 4 ms (2*1/2 * 4 MB at 1 GB/s); stage 1: 13 + 1 ms, hidden */
    CHECK_MSG(near(two.step_ms, 19.0), "replicated step %g", two.step_ms);
    CHECK_MSG(near(two.allreduce_ms, 5.0), "allreduce %g", two.allreduce_ms);
    pp_sim_result_free(&two);
    /* the sum of the last stage overlaps the first stage's backward */
    bytes[0] = 0;
    bytes[1] = 3e6; /* 13 + 3 = 16 > 15 */
    CHECK_OK(pp_simulate(&s, &c, &two, &err), &err);
    CHECK_MSG(near(two.step_ms, 16.0), "replicated step %g", two.step_ms);
    pp_sim_result_free(&two);
    /* 4 replicas, 2 per node (4 GB/s within, 1 GB/s between): stage 0's
     * 4 MB take 2*1/2 * 4 MB at 4 GB/s = 1 ms + 2*1/2 * 2 MB at 1 GB/s = 2 ms
     * hierarchically (a flat ring: 2*3/4 * 4 ms = 6 ms); stage 1's 1 MB,
     * 0.75 ms (flat 1.5 ms) */
    bytes[0] = 4e6;
    bytes[1] = 1e6;
    c.replicas = 4;
    c.link_gbps = 4.0;
    c.replicas_per_node = 2;
    c.node_gbps = 1.0;
    CHECK_OK(pp_simulate(&s, &c, &two, &err), &err);
    CHECK_MSG(near(two.step_ms, 18.0) && near(two.allreduce_ms, 3.75) && two.hier_stages == 2,
              "hierarchical: step %g, allreduce %g, %d stages", two.step_ms, two.allreduce_ms,
              two.hier_stages);
    pp_sim_result_free(&two);
    c.allreduce = PP_SIM_ALLREDUCE_FLAT;
    CHECK_OK(pp_simulate(&s, &c, &two, &err), &err);
    CHECK_MSG(near(two.step_ms, 21.0) && near(two.allreduce_ms, 7.5) && two.hier_stages == 0,
              "flat: step %g, allreduce %g", two.step_ms, two.allreduce_ms);
    pp_sim_result_free(&two);
    c.replicas_per_node = 3; /* nodes of unequal shares */
    CHECK(pp_simulate(&s, &c, &two, &err) == PP_ERR_INVALID && strstr(err.msg, "per node"));
    c.replicas_per_node = 2;
    c.node_gbps = 0;
    CHECK(pp_simulate(&s, &c, &two, &err) == PP_ERR_INVALID);
    c.node_gbps = 1.0;
    c.link_gbps = 0;
    CHECK(pp_simulate(&s, &c, &two, &err) == PP_ERR_INVALID);
    pp_sim_result_free(&one);
    pp_schedule_free(&s);
}

int main(void)
{
    test_formulas();
    test_hierarchical();
    test_replicated_step();
    return check_summary("sim_comm");
}
