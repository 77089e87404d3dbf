/*
 * clocks.c - the job's clocks on one time base, for traces (see
 * streams/trace.h): how far each rank's clock (pp_stream_clock_ns) is from
 * rank 0's, estimated once when the pipeline is made.
 *
 * Rank r > 0 and rank 0, one rank after another in rank order, run
 * PIPE_CLOCK_ROUNDS ping-pongs: r reads its clock (t1) and sends it; rank 0
 * answers at once with its own clock (t0); r reads its clock again (t2). If
 * rank 0 read t0 halfway through the round trip, rank 0's clock minus r's is
 * t0 - (t1 + t2) / 2 (NTP's estimate), and wherever t0 fell in the round
 * trip the error is at most (t2 - t1) / 2. The round with the shortest round
 * trip (least queueing, least scheduling noise) gives the offset and that
 * bound. Then rank 0 gives every rank its clock's present reading, the
 * origin every trace file of the job counts from.
 */
#include <stdint.h>

#include "pipeline/clocks.h"
#include "streams/stream.h"

#define PIPE_CLOCK_ROUNDS 8
#define TAG_CLOCK 30002 /* above the executor's boundary tags, beside TAG_CKPT */

/* Rank 0's side of rank peer's rounds: each request answered with its clock. */
static pp_status answer(pp_comm *c, int peer, pp_error *err)
{
    for (int k = 0; k < PIPE_CLOCK_ROUNDS; k++) {
        int64_t t;
        PP_TRY(pp_comm_recv(c, peer, TAG_CLOCK, &t, sizeof t, err));
        t = pp_stream_clock_ns();
        PP_TRY(pp_comm_send(c, peer, TAG_CLOCK, &t, sizeof t, err));
    }
    return PP_OK;
}

/* Rank r's side: the rounds, and the estimate of the shortest. */
static pp_status ask(pp_comm *c, int64_t *offset, int64_t *uncertainty, pp_error *err)
{
    int64_t best_rtt = INT64_MAX;
    for (int k = 0; k < PIPE_CLOCK_ROUNDS; k++) {
        int64_t t1 = pp_stream_clock_ns(), t0;
        PP_TRY(pp_comm_send(c, 0, TAG_CLOCK, &t1, sizeof t1, err));
        PP_TRY(pp_comm_recv(c, 0, TAG_CLOCK, &t0, sizeof t0, err));
        int64_t t2 = pp_stream_clock_ns(), rtt = t2 - t1;
        if (rtt < best_rtt) {
            best_rtt = rtt;
            *offset = t0 - (t1 + (t2 - t1) / 2);
            *uncertainty = (rtt + 1) / 2;
        }
    }
    return PP_OK;
}

pp_status pipe_clocks_sync(struct pp_pipeline *p, pp_error *err)
{
    p->clock_offset_ns = 0;
    p->clock_uncertainty_ns = 0;
    p->clock_origin_ns = 0;
    int size = pp_comm_size(p->comm);
    if (size < 2) return PP_OK;
    pp_status s = PP_OK;
    if (p->rank == 0) {
        for (int r = 1; r < size && s == PP_OK; r++) s = answer(p->comm, r, err);
    } else {
        s = ask(p->comm, &p->clock_offset_ns, &p->clock_uncertainty_ns, err);
    }
    if (s != PP_OK) return pp_error_prefix(err, "rank %d: clock synchronisation", p->rank);
    int64_t origin = pp_stream_clock_ns();
    s = pp_comm_broadcast(p->comm, 0, &origin, sizeof origin, err);
    if (s != PP_OK) return pp_error_prefix(err, "rank %d: clock synchronisation", p->rank);
    p->clock_origin_ns = origin;
    return PP_OK;
}
