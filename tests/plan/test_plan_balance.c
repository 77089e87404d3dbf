/*
 * test_plan_balance.c - the partitioner's exact balancer against brute force
 * (costs, memory, infeasible problems and their messages), automatic stages
 * by FLOPs, time and memory, device maps.
 *
 * Usage: test_plan_balance SOURCE_DIR (the folder holding data/ test files).
 */
#define PP_CHECK_COUNTERS
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "partitioner/balance.h"
#include "partitioner/emit.h"
#include "tests/check.h"
#include "tests/plan/plan_common.h"

/* ------------------------------------------------------------------ */
/* balancer                                                             */

static unsigned g_rng = 12345;
static unsigned rnd(void)
{
    g_rng = g_rng * 1103515245u + 12345u;
    return (g_rng >> 16) & 0x7fff;
}

typedef struct brute {
    const pp_balance_problem *pb;
    int cut[16];
    double best;
    int found;
} brute;

static double seg_sum(const double *v, int i, int j)
{
    double s = 0;
    for (int u = i; u <= j; u++) s += v ? v[u] : 0;
    return s;
}

/* Enumerates every partition of units [start, n) into stages s..S-1. */
static void brute_rec(brute *b, int s, int start, double cur)
{
    const pp_balance_problem *pb = b->pb;
    int n = pb->n_units, S = pb->n_stages;
    if (s == S) {
        if (start == n && cur < b->best) b->best = cur;
        if (start == n) b->found++;
        return;
    }
    for (int end = start; end <= n - (S - s); end++) {
        if (s == S - 1 && end != n - 1) continue;
        double mem = seg_sum(pb->unit_fixed_bytes, start, end) +
                     pb->stage_in_flight[s] * seg_sum(pb->unit_flight_bytes, start, end);
        if (pb->capacity && pb->capacity[s] > 0 && mem > pb->capacity[s]) continue;
        double c = seg_sum(pb->cost, start, end);
        brute_rec(b, s + 1, end + 1, c > cur ? c : cur);
    }
}

static void test_balance_random(void)
{
    int checked = 0, infeasible = 0;
    for (int trial = 0; trial < 3000; trial++) {
        int n = 1 + (int)(rnd() % 9);
        int S = 1 + (int)(rnd() % (unsigned)n);
        bool integer = trial % 2 == 0;
        bool mem = trial % 3 != 0;
        double cost[16], fixed[16], flight[16], inflight[16], cap[16];
        for (int u = 0; u < n; u++) {
            cost[u] = integer ? (double)(rnd() % 20) : (double)rnd() / 327.68;
            fixed[u] = (double)(rnd() % 50);
            flight[u] = (double)(rnd() % 30);
        }
        for (int s = 0; s < S; s++) {
            inflight[s] = 1 + rnd() % 4;
            cap[s] = rnd() % 5 == 0 ? 0 : (double)(40 + rnd() % 300);
        }
        pp_balance_problem pb = {.n_units = n,
                                 .cost = cost,
                                 .n_stages = S,
                                 .unit_fixed_bytes = mem ? fixed : NULL,
                                 .unit_flight_bytes = mem ? flight : NULL,
                                 .stage_in_flight = inflight,
                                 .capacity = mem ? cap : NULL};
        brute b = {.pb = &pb, .best = INFINITY};
        brute_rec(&b, 0, 0, 0.0);
        int first[16];
        double best = -1;
        pp_error err;
        pp_status s = pp_balance_partition(&pb, first, &best, &err);
        if (!b.found) {
            infeasible++;
            CHECK_MSG(s == PP_ERR_INPUT, "trial %d: brute force finds nothing, DP says %s", trial,
                      pp_status_name(s));
            CHECK(strstr(err.msg, "memory too small") != NULL);
            continue;
        }
        CHECK_MSG(s == PP_OK, "trial %d: %s", trial, err.msg);
        if (s != PP_OK) continue;
        checked++;
        double tol = integer ? 0 : 1e-9 * (1 + b.best);
        CHECK_MSG(fabs(best - b.best) <= tol, "trial %d: DP %.17g brute %.17g", trial, best,
                  b.best);
        /* the returned partition is valid and achieves the reported optimum */
        CHECK(first[0] == 0);
        double worst = 0;
        for (int st = 0; st < S; st++) {
            int last = st + 1 < S ? first[st + 1] - 1 : n - 1;
            CHECK_MSG(last >= first[st], "trial %d: empty stage %d", trial, st);
            double c = seg_sum(cost, first[st], last);
            if (c > worst) worst = c;
            if (mem && cap[st] > 0)
                CHECK_MSG(seg_sum(fixed, first[st], last) +
                                  inflight[st] * seg_sum(flight, first[st], last) <=
                              cap[st],
                          "trial %d: stage %d over memory", trial, st);
        }
        CHECK_MSG(fabs(worst - best) <= tol, "trial %d: partition cost %.17g != %.17g", trial,
                  worst, best);
    }
    CHECK_MSG(checked > 1500 && infeasible > 20, "checked %d infeasible %d", checked, infeasible);
}

static void test_balance_errors(void)
{
    double cost[3] = {1, 2, 3};
    int first[4];
    pp_error err;
    pp_balance_problem pb = {.n_units = 3, .cost = cost, .n_stages = 4};
    CHECK(pp_balance_partition(&pb, first, NULL, &err) == PP_ERR_INPUT);
    CHECK(strstr(err.msg, "cannot split 3 units into 4 stages") != NULL);

    double bad[3] = {1, -2, 3};
    pb.n_stages = 2;
    pb.cost = bad;
    CHECK(pp_balance_partition(&pb, first, NULL, &err) == PP_ERR_INVALID);
    bad[1] = NAN;
    CHECK(pp_balance_partition(&pb, first, NULL, &err) == PP_ERR_INVALID);

    /* the last stage cannot hold what is left */
    double fixed[3] = {10, 10, 10}, cap[2] = {15, 15};
    const char *names[2] = {"cuda:0", "cuda:1"};
    const char *units[3] = {"a", "b", "c"};
    pp_balance_problem m = {.n_units = 3,
                            .cost = cost,
                            .n_stages = 2,
                            .unit_fixed_bytes = fixed,
                            .capacity = cap,
                            .stage_names = names,
                            .unit_names = units};
    CHECK(pp_balance_partition(&m, first, NULL, &err) == PP_ERR_INPUT);
    CHECK_MSG(strstr(err.msg, "cuda:1 (stage 1) has 15 bytes but would need at least 20 bytes for "
                              "the remaining units b..c") != NULL,
              "%s", err.msg);
    /* the first stage cannot hold even one unit */
    cap[0] = 5;
    cap[1] = 100;
    CHECK(pp_balance_partition(&m, first, NULL, &err) == PP_ERR_INPUT);
    CHECK_MSG(strstr(err.msg, "cuda:0 (stage 0) has 5 bytes but the next unit it could hold, a, "
                              "needs 10 bytes") != NULL,
              "%s", err.msg);
    /* memory moves the optimum: costs favour [a b | c], memory forces [a | b c] */
    double c2[3] = {1, 1, 5};
    cap[0] = 10;
    m.cost = c2;
    double best;
    CHECK_OK(pp_balance_partition(&m, first, &best, &err), &err);
    CHECK(first[0] == 0 && first[1] == 1 && best == 6);
    cap[0] = 0; /* unlimited */
    CHECK_OK(pp_balance_partition(&m, first, &best, &err), &err);
    CHECK(first[1] == 2 && best == 5);
}

/* Brute-force optimum of catalogue FLOPs over S stages (S <= 4). */
static double brute_flops(const pp_catalogue *cat, int S)
{
    double cost[128];
    for (int u = 0; u < cat->n; u++) cost[u] = (double)cat->units[u].fwd_flops;
    double in[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    pp_balance_problem pb = {.n_units = cat->n, .cost = cost, .n_stages = S, .stage_in_flight = in};
    brute b = {.pb = &pb, .best = INFINITY};
    brute_rec(&b, 0, 0, 0.0);
    return b.best;
}

static void test_auto_plans(void)
{
    pp_plan *p;
    pp_diag d;
    pp_error err;
    char msg[2048];
    const char *text = "model: {name: resnet50}\nbatch: {size: 32, split_size: 8}\n"
                       "stages: auto\ndevices: [cuda:0, cuda:1, {device: cpu:0}]\nbalance: flops\n";
    CHECK_MSG(parse(text, strlen(text), &p, &d) == PP_OK, "%s",
              pp_diag_format(&d, msg, sizeof msg));
    if (!p) return;
    CHECK(p->stages_auto && p->balance == PP_PLAN_BALANCE_FLOPS && p->n_stages == 3);
    char *yaml = NULL;
    CHECK(pp_plan_emit(p, &yaml, NULL, &err) == PP_ERR_INVALID && yaml == NULL);
    CHECK_OK(pp_plan_resolve_auto(p, NULL, NULL, &err), &err);
    CHECK(!p->stages_auto);
    double worst = 0;
    for (int s = 0; s < 3; s++) {
        double c = 0;
        for (int u = p->stages[s].first; u <= p->stages[s].last; u++)
            c += (double)p->catalogue.units[u].fwd_flops;
        if (c > worst) worst = c;
        CHECK(p->stages[s].last >= p->stages[s].first);
    }
    CHECK_MSG(worst == brute_flops(&p->catalogue, 3), "auto flops not optimal");
    check_round_trip("auto flops", p);

    /* balance: time needs costs; given costs, they are used */
    pp_plan_free(p);
    text = "model: {name: resnet18}\nbatch: {size: 4, micro_batches: 2}\n"
           "stages: auto\ndevices: [cpu:0, cpu:1]\nbalance: time\n";
    CHECK(parse(text, strlen(text), &p, &d) == PP_OK);
    if (!p) return;
    CHECK(pp_plan_resolve_auto(p, NULL, NULL, &err) == PP_ERR_INVALID);
    double costs[14];
    for (int u = 0; u < 14; u++) costs[u] = 1;
    costs[13] = 100; /* most of the time in fc: fc alone on the last stage */
    CHECK_OK(pp_plan_resolve_auto(p, NULL, costs, &err), &err);
    CHECK(p->stages[0].first == 0 && p->stages[0].last == 12 && p->stages[1].first == 13);
    check_round_trip("auto time", p);
    pp_plan_free(p);

    /* balance: memory with limits: respected, and infeasible names the device */
    text = "model: {name: resnet50}\nbatch: {size: 32, split_size: 8}\nschedule: 1f1b\n"
           "optimizer: {momentum: 0.9}\n"
           "stages: auto\ndevices: [{device: cuda:0, memory: 2GiB}, {device: cuda:1, memory: "
           "2GiB}]\nbalance: memory\n";
    CHECK(parse(text, strlen(text), &p, &d) == PP_OK);
    if (!p) return;
    pp_status s = pp_plan_resolve_auto(p, NULL, NULL, &err);
    if (s == PP_OK) {
        for (int st = 0; st < 2; st++)
            CHECK(pp_plan_stage_memory_estimate(p, p->stages[st].first, p->stages[st].last,
                                                pp_plan_in_flight(p, st)) <=
                  p->stages[st].memory_bytes);
    } else {
        CHECK_MSG(0, "2GiB x2 should fit resnet50 at split 8: %s", err.msg);
    }
    pp_plan_free(p);
    text = "model: {name: resnet50}\nbatch: {size: 32, split_size: 8}\n"
           "stages: auto\ndevices: [{device: cuda:0, memory: 1MiB}, {device: cuda:1, memory: "
           "1GiB}]\nbalance: flops\n";
    CHECK(parse(text, strlen(text), &p, &d) == PP_OK);
    if (!p) return;
    s = pp_plan_resolve_auto(p, NULL, NULL, &err);
    CHECK(s == PP_ERR_INPUT && p->stages_auto);
    CHECK_MSG(strstr(err.msg, ":3:9: memory too small: cuda:0 (stage 0) has 1.00 MiB") != NULL,
              "%s", err.msg);
    pp_plan_free(p);
}

/* ------------------------------------------------------------------ */
/* device maps                                                          */

static void test_device_map(void)
{
    static const struct {
        const char *map;
        pp_status status;
        const char *result; /* devices after mapping, or a message fragment */
    } cases[] = {
        {"cuda:1=cuda:0", PP_OK, "cpu:0 cuda:0 cuda:0 cuda:3"},
        {"cuda:*=cpu", PP_OK, "cpu:0 cpu:1 cpu:0 cpu:3"},
        {"cuda:*=cpu:*", PP_OK, "cpu:0 cpu:1 cpu:0 cpu:3"},
        {"cuda:*=cpu:2", PP_OK, "cpu:0 cpu:2 cpu:2 cpu:2"},
        {"cuda:1=cpu, cuda:*=cuda:0", PP_OK, "cpu:0 cpu:0 cuda:0 cuda:0"},
        {"cpu:0=cuda:1,cuda:1=cpu:0", PP_OK, "cuda:1 cpu:0 cuda:0 cuda:3"},
        {"cpu:*=cuda", PP_OK, "cuda:0 cuda:1 cuda:0 cuda:3"},
        {"cuda=cpu", PP_OK, "cpu:0 cpu:1 cpu:0 cpu:3"},          /* a bare kind: every one */
        {"cuda=cpu:0", PP_OK, "cpu:0 cpu:0 cpu:0 cpu:0"},
        {"cuda:1=cpu", PP_OK, "cpu:0 cpu:0 cuda:0 cuda:3"},       /* one device: "cpu" is cpu:0 */
        {"cuda:7=cpu:7", PP_ERR_INPUT, "names cuda:7, which the plan does not use (its devices: "
                                       "cpu:0, cuda:1, cuda:0, cuda:3)"},
        {"cpu:*=cpu:1,cuda:*=cpu:0", PP_OK, "cpu:1 cpu:0 cpu:0 cpu:0"}, /* wildcards need no match */
        {"cuda:*=cpu,cpu:5=cpu:0", PP_ERR_INPUT, "names cpu:5"},
        {"", PP_ERR_INPUT, "entry 1 is empty"},
        {"cuda:1=cuda:0,", PP_ERR_INPUT, "entry 2 is empty"},
        {"cuda:1", PP_ERR_INPUT, "must have the form FROM=TO"},
        {"cuda:1=cuda:0=cpu", PP_ERR_INPUT, "must have the form FROM=TO"},
        {"gpu:1=cuda:0", PP_ERR_INPUT, "bad device 'gpu:1'"},
        {"cuda:1=tpu", PP_ERR_INPUT, "bad device 'tpu'"},
        {"cuda:1=cpu:*", PP_ERR_INPUT, "a wildcard target needs a wildcard source"},
        {"cuda:1=cpu,cuda:1=cuda:0", PP_ERR_INPUT, "names cuda:1 twice"},
        {"cuda:*=cpu,cuda:*=cuda:0", PP_ERR_INPUT, "names cuda:* twice"},
        {"*=cpu", PP_ERR_INPUT, "bad device '*'"},
    };
    const char *text = "model: {name: delay}\nbatch: {size: 4, split_size: 1}\n"
                       "stages: [{device: cpu:0}, {device: cuda:1}, {device: cuda:0}, "
                       "{device: cuda:3}]\n";
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pp_plan *p;
        pp_diag d;
        CHECK(parse(text, strlen(text), &p, &d) == PP_OK);
        if (!p) return;
        pp_error err;
        pp_status s = pp_plan_apply_device_map(p, cases[i].map, &err);
        CHECK_MSG(s == cases[i].status, "map '%s': %s", cases[i].map, pp_status_name(s));
        char got[128] = "";
        size_t k = 0;
        for (int st = 0; st < p->n_stages; st++)
            k += (size_t)snprintf(got + k, sizeof got - k, "%s%s", st ? " " : "",
                                  p->stages[st].device_name);
        if (s == PP_OK) {
            CHECK_MSG(strcmp(got, cases[i].result) == 0, "map '%s': got '%s'", cases[i].map, got);
            char fmt[16];
            for (int st = 0; st < p->n_stages; st++)
                CHECK(strcmp(pp_device_id_format(p->stages[st].device, fmt, sizeof fmt),
                             p->stages[st].device_name) == 0);
        } else {
            CHECK_MSG(strstr(err.msg, cases[i].result) != NULL, "map '%s': %s", cases[i].map,
                      err.msg);
            CHECK_MSG(strcmp(got, "cpu:0 cuda:1 cuda:0 cuda:3") == 0, "map '%s' changed the plan",
                      cases[i].map);
        }
        CHECK(p->stages[1].device_mark.line == 3);
        pp_plan_free(p);
    }
    /* stages that cap their devices' memory differently may not share one after the
     * map (the plan itself refuses that); the same cap may */
    const char *capped = "model: {name: delay}\nbatch: {size: 4, split_size: 1}\n"
                         "stages: [{device: cuda:0, memory: 40GiB}, {device: cuda:1, memory: "
                         "80GiB}, {device: cuda:2, memory: 40GiB}]\n";
    static const struct {
        const char *map;
        pp_status status;
        const char *result;
    } caps[] = {
        {"cuda:*=cuda:0", PP_ERR_INPUT, "device map puts stage 1 (cuda:1, memory 80GiB) and "
                                        "stage 0 (cuda:0, memory 40GiB) on cuda:0: a device "
                                        "has one memory figure"},
        {"cuda:2=cuda:0", PP_OK, "cuda:0 cuda:1 cuda:0"},
        {"cuda:*=cpu", PP_OK, "cpu:0 cpu:1 cpu:2"},
    };
    for (size_t i = 0; i < sizeof caps / sizeof caps[0]; i++) {
        pp_plan *p;
        pp_diag d;
        CHECK(parse(capped, strlen(capped), &p, &d) == PP_OK);
        if (!p) return;
        pp_error err;
        pp_status s = pp_plan_apply_device_map(p, caps[i].map, &err);
        char got[128] = "";
        size_t k = 0;
        for (int st = 0; st < p->n_stages; st++)
            k += (size_t)snprintf(got + k, sizeof got - k, "%s%s", st ? " " : "",
                                  p->stages[st].device_name);
        CHECK_MSG(s == caps[i].status, "map '%s': %s", caps[i].map, pp_status_name(s));
        if (s == PP_OK)
            CHECK_MSG(strcmp(got, caps[i].result) == 0, "map '%s': got '%s'", caps[i].map, got);
        else
            CHECK_MSG(strstr(err.msg, caps[i].result) && !strcmp(got, "cuda:0 cuda:1 cuda:2"),
                      "map '%s': %s (devices %s)", caps[i].map, err.msg, got);
        pp_plan_free(p);
    }
}

int main(int argc, char **argv)
{
    const char *dir = argc > 1 ? argv[1] : ".";
    plan_test_init(dir);
    test_balance_random();
    test_balance_errors();
    test_auto_plans();
    test_device_map();
    return check_summary("test_plan_balance");
}
