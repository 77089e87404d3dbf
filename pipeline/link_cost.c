/*
 * link_cost.c - what a message between two ranks costs, measured once when
 * the pipeline is made, for the simulator's prediction of a job's steps
 * (report.c): each boundary of rank 0's replica whose stages run on two
 * ranks and travel as host messages (not an NCCL link) gets a bandwidth and
 * a latency, so that a message of B bytes costs latency + B / bandwidth
 * (pp_sim_message_ms).
 *
 * The boundary's two ranks run PIPE_LINK_ROUNDS ping-pongs of 8 bytes (the
 * latency: half the shortest round trip) and then of PIPE_LINK_BYTES (the
 * bandwidth: those bytes over half the shortest round trip, less the
 * latency); the shortest round trip is the one least disturbed by
 * scheduling. Then the lower rank tells every rank. Every rank walks the
 * boundaries in the same order (the broadcasts are collective).
 */
#include <stdint.h>
#include <stdlib.h>

#include "pipeline/link_cost.h"
#include "pipeline/links.h"
#include "pipeline/replicas.h"
#include "streams/stream.h"

#define PIPE_LINK_ROUNDS 6
#define PIPE_LINK_BYTES ((size_t)1 << 20)
#define TAG_LINK 30003 /* above the executor's boundary tags, beside TAG_CLOCK */

/* The shortest round trip of `bytes` between this rank and peer, in ns; the
 * first side sends first, the other answers with the same bytes. */
static pp_status ping(pp_comm *c, int peer, bool first, void *buf, size_t bytes, int64_t *best,
                      pp_error *err)
{
    *best = INT64_MAX;
    for (int k = 0; k < PIPE_LINK_ROUNDS; k++) {
        int64_t t0 = pp_stream_clock_ns();
        if (first) {
            PP_TRY(pp_comm_send(c, peer, TAG_LINK, buf, bytes, err));
            PP_TRY(pp_comm_recv(c, peer, TAG_LINK, buf, bytes, err));
        } else {
            PP_TRY(pp_comm_recv(c, peer, TAG_LINK, buf, bytes, err));
            PP_TRY(pp_comm_send(c, peer, TAG_LINK, buf, bytes, err));
        }
        int64_t rtt = pp_stream_clock_ns() - t0;
        if (rtt < *best) *best = rtt;
    }
    return PP_OK;
}

/* Boundary b between ranks lo and hi: its figures on both, {gbps, latency_ms}. */
static pp_status measure(pp_comm *c, int rank, int lo, int hi, double out[2], pp_error *err)
{
    void *buf = calloc(1, PIPE_LINK_BYTES);
    if (!buf) return pp_error_set(err, PP_ERR_OOM, "out of host memory (link measurement)");
    int64_t small, large;
    int peer = rank == lo ? hi : lo;
    pp_status s = ping(c, peer, rank == lo, buf, 8, &small, err);
    if (s == PP_OK) s = ping(c, peer, rank == lo, buf, PIPE_LINK_BYTES, &large, err);
    free(buf);
    if (s != PP_OK) return s;
    double latency_ms = (double)small / 2e6;
    double transfer_ms = (double)large / 2e6 - latency_ms;
    if (transfer_ms < 1e-6) transfer_ms = 1e-6;
    out[0] = (double)PIPE_LINK_BYTES / (transfer_ms * 1e6); /* bytes per ns = GB/s */
    out[1] = latency_ms;
    return PP_OK;
}

pp_status pipe_link_cost_measure(struct pp_pipeline *p, const pp_plan *plan, pp_error *err)
{
    int S = p->n_stages;
    if (S < 2) return PP_OK;
    p->link_gbps = calloc((size_t)S - 1, sizeof *p->link_gbps);
    p->link_latency_ms = calloc((size_t)S - 1, sizeof *p->link_latency_ms);
    if (!p->link_gbps || !p->link_latency_ms)
        return pp_error_set(err, PP_ERR_OOM, "out of host memory (links)");
    if (pp_comm_size(p->comm) < 2 || p->in_process) return PP_OK;
    int home = pipe_replica_of(plan, 0) > 0 ? pipe_replica_of(plan, 0) : 0;
    for (int b = 0; b + 1 < S; b++) {
        int lo = p->home_rank[b], hi = p->home_rank[b + 1];
        if (lo == hi || pipe_cuda_link(plan, b, home)) continue;
        double v[2] = {0, 0};
        if (p->rank == lo || p->rank == hi) {
            pp_status s = measure(p->comm, p->rank, lo, hi, v, err);
            if (s != PP_OK)
                return pp_error_prefix(err, "rank %d: measuring the link of stages %d and %d",
                                       p->rank, b, b + 1);
        }
        PP_TRY(pp_comm_broadcast(p->comm, lo, v, sizeof v, err));
        p->link_gbps[b] = v[0];
        p->link_latency_ms[b] = v[1];
    }
    return PP_OK;
}
