/*
 * test_sim_comm.c - the simulator's costs for jobs of several processes:
 * message and ring-allreduce formulas, and a replicated pipeline whose
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
    c.link_gbps = 0;
    CHECK(pp_simulate(&s, &c, &two, &err) == PP_ERR_INVALID);
    pp_sim_result_free(&one);
    pp_schedule_free(&s);
}

int main(void)
{
    test_formulas();
    test_replicated_step();
    return check_summary("sim_comm");
}
