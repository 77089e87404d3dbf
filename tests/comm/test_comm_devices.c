/*
 * test_comm_devices.c - the devices behind device-side collectives
 * (runtime/comm/devices.h), without a GPU:
 *   - access: in a job of 3 threads whose ranks each drive a device of their
 *     own, pp_comm_group_share_devices makes every member grant every other
 *     member's device access to its own, exactly once per ordered pair, never
 *     to itself nor to a member on the same device; in a job of one process
 *     it does nothing. The devices are CPU devices running the CPU backend's
 *     table with a peer_access entry that records its calls (the CUDA
 *     backend's entry sets peer mappings and the memory pool's access);
 *   - claims: a device carries the collectives of one rank of the process:
 *     another rank of the same job of threads, or of another job, is refused
 *     (PP_ERR_UNSUPPORTED naming the holder), the holder may claim it again
 *     (counted), and the device is free once every claim is released; in a
 *     job of processes (one rank per process) claims succeed.
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "runtime/comm/comm.h"
#include "runtime/comm/devices.h"
#include "runtime/core/backend.h"
#include "runtime/core/device.h"
#include "tests/check.h"

enum { RANKS = 3, MAX_CALLS = 64 };

/* ---- the recording peer_access ------------------------------------------------ */

static pthread_mutex_t calls_mu = PTHREAD_MUTEX_INITIALIZER;
static struct { int dev, peer; } calls[MAX_CALLS];
static int n_calls;

static pp_status record_peer_access(pp_device_ctx *dev, pp_device_ctx *peer, pp_error *err)
{
    pthread_mutex_lock(&calls_mu);
    if (n_calls < MAX_CALLS) {
        calls[n_calls].dev = dev->id.index;
        calls[n_calls].peer = peer->id.index;
        n_calls++;
    }
    pthread_mutex_unlock(&calls_mu);
    return PP_OK;
}

static int count_calls(int dev, int peer)
{
    int n = 0;
    for (int i = 0; i < n_calls; i++) n += calls[i].dev == dev && calls[i].peer == peer;
    return n;
}

/* ---- one thread per rank ------------------------------------------------------- */

typedef struct rank_arg {
    pp_comm *c;
    pp_device_ctx *dev;
    pp_status st;
    pp_error err;
} rank_arg;

static void *share_rank(void *p)
{
    rank_arg *a = p;
    pp_comm_group *g = NULL;
    a->st = pp_comm_group_new(a->c, true, 0, &g, &a->err);
    if (a->st == PP_OK) a->st = pp_comm_group_share_devices(g, a->dev, &a->err);
    pp_comm_group_free(g);
    return NULL;
}

/* devs[r]: the device index of rank r */
static void share_in_threads(pp_device_ctx **devs)
{
    pp_error err;
    pp_comm *comms[RANKS] = {0};
    CHECK_OK(pp_comm_local_new(RANKS, comms, &err), &err);
    pthread_t th[RANKS];
    rank_arg a[RANKS];
    for (int r = 0; r < RANKS; r++) {
        a[r] = (rank_arg){.c = comms[r], .dev = devs[r]};
        CHECK(pthread_create(&th[r], NULL, share_rank, &a[r]) == 0);
    }
    for (int r = 0; r < RANKS; r++) {
        pthread_join(th[r], NULL);
        CHECK_OK(a[r].st, &a[r].err);
        pp_comm_free(comms[r]);
    }
}

static void test_share(pp_device_ctx **dev)
{
    static pp_backend_ops fake;
    fake = *pp_backend_cpu();
    fake.peer_access = record_peer_access;
    for (int i = 0; i < RANKS; i++) dev[i]->ops = &fake;

    /* three devices, one per rank: every ordered pair once */
    n_calls = 0;
    share_in_threads(dev);
    CHECK_MSG(n_calls == RANKS * (RANKS - 1), "%d grants, want %d", n_calls, RANKS * (RANKS - 1));
    for (int d = 0; d < RANKS; d++)
        for (int p = 0; p < RANKS; p++)
            CHECK_MSG(count_calls(d, p) == (d != p), "cpu:%d granted to cpu:%d %d times", d, p,
                      count_calls(d, p));

    /* ranks 1 and 2 on one device: they need nothing from each other */
    n_calls = 0;
    pp_device_ctx *shared[RANKS] = {dev[0], dev[1], dev[1]};
    share_in_threads(shared);
    CHECK_MSG(n_calls == 4 && count_calls(1, 1) == 0 && count_calls(0, 1) == 2 &&
                  count_calls(1, 0) == 2,
              "%d grants", n_calls);

    /* a job of one process: nothing to share */
    n_calls = 0;
    pp_comm *one[1] = {0};
    pp_error err;
    CHECK_OK(pp_comm_local_new(1, one, &err), &err);
    rank_arg a = {.c = one[0], .dev = dev[0]};
    share_rank(&a);
    CHECK_OK(a.st, &a.err);
    CHECK(n_calls == 0);
    pp_comm_free(one[0]);

    for (int i = 0; i < RANKS; i++) dev[i]->ops = pp_backend_cpu();
    /* devices without the entry (host memory): granting is a no-op */
    CHECK_OK(pp_device_peer_access(dev[0], dev[1], &err), &err);
}

/* ---- claims -------------------------------------------------------------------- */

typedef struct claim_arg {
    pp_comm *c;
    pp_comm_group *g;
} claim_arg;

static void *make_group(void *p)
{
    claim_arg *a = p;
    pp_error err;
    CHECK_OK(pp_comm_group_new(a->c, true, 0, &a->g, &err), &err);
    return NULL;
}

/* The groups of a job of 2 threads (g[r] for rank r). */
static void job_of_two(pp_comm **c, pp_comm_group **g)
{
    pp_error err;
    CHECK_OK(pp_comm_local_new(2, c, &err), &err);
    pthread_t th[2];
    claim_arg a[2] = {{c[0], NULL}, {c[1], NULL}};
    for (int r = 0; r < 2; r++) CHECK(pthread_create(&th[r], NULL, make_group, &a[r]) == 0);
    for (int r = 0; r < 2; r++) {
        pthread_join(th[r], NULL);
        g[r] = a[r].g;
    }
}

static void test_claims(void)
{
    pp_device_ctx gpu0 = {.id = {PP_DEVICE_CUDA, 0}, .name = "cuda:0"};
    pp_device_ctx gpu1 = {.id = {PP_DEVICE_CUDA, 1}, .name = "cuda:1"};
    pp_comm *a[2], *b[2];
    pp_comm_group *ga[2], *gb[2];
    job_of_two(a, ga);
    job_of_two(b, gb);
    pp_error err;
    CHECK_OK(pp_comm_group_claim_device(ga[0], &gpu0, &err), &err);
    pp_status s = pp_comm_group_claim_device(ga[1], &gpu0, &err);
    CHECK_MSG(s == PP_ERR_UNSUPPORTED && strstr(err.msg, "rank 1: cuda:0 carries") &&
                  strstr(err.msg, "of rank 0 of this process"),
              "%s: %s", pp_status_name(s), err.msg);
    CHECK_OK(pp_comm_group_claim_device(ga[1], &gpu1, &err), &err);
    CHECK_OK(pp_comm_group_claim_device(ga[0], &gpu0, &err), &err); /* the holder again */
    s = pp_comm_group_claim_device(gb[0], &gpu1, &err);
    CHECK_MSG(s == PP_ERR_UNSUPPORTED && strstr(err.msg, "another job's rank 1"), "%s: %s",
              pp_status_name(s), err.msg);
    pp_comm_group_release_device(ga[0], &gpu0);
    CHECK(pp_comm_group_claim_device(ga[1], &gpu0, &err) == PP_ERR_UNSUPPORTED);
    pp_comm_group_release_device(ga[0], &gpu0);
    CHECK_OK(pp_comm_group_claim_device(ga[1], &gpu0, &err), &err); /* free again */
    pp_comm_group_release_device(ga[1], &gpu0);
    pp_comm_group_release_device(ga[1], &gpu1);
    CHECK_OK(pp_comm_group_claim_device(gb[0], &gpu1, &err), &err);
    pp_comm_group_release_device(gb[0], &gpu1);
    /* a release by a rank that holds nothing changes nothing */
    CHECK_OK(pp_comm_group_claim_device(ga[0], &gpu1, &err), &err);
    pp_comm_group_release_device(gb[1], &gpu1);
    CHECK(pp_comm_group_claim_device(gb[1], &gpu1, &err) == PP_ERR_UNSUPPORTED);
    pp_comm_group_release_device(ga[0], &gpu1);
    for (int r = 0; r < 2; r++) {
        pp_comm_group_free(ga[r]);
        pp_comm_group_free(gb[r]);
        pp_comm_free(a[r]);
        pp_comm_free(b[r]);
    }

    /* a job of processes: this process is one rank */
    pp_comm *c = NULL;
    CHECK_OK(pp_comm_init(NULL, NULL, &c, &err), &err);
    pp_comm_group *g = NULL;
    CHECK_OK(pp_comm_group_new(c, true, 0, &g, &err), &err);
    CHECK_OK(pp_comm_group_claim_device(g, &gpu0, &err), &err);
    CHECK_OK(pp_comm_group_claim_device(g, &gpu0, &err), &err);
    CHECK_OK(pp_comm_group_share_devices(g, &gpu0, &err), &err); /* nothing to share */
    pp_comm_group_release_device(g, &gpu0);
    pp_comm_group_release_device(g, &gpu0);
    pp_comm_group_free(g);
    pp_comm_free(c);
}

int main(void)
{
    pp_error err;
    pp_registry *reg;
    if (pp_registry_new(&reg, &err) != PP_OK) return 1;
    pp_device_ctx *dev[RANKS];
    for (int i = 0; i < RANKS; i++)
        CHECK_OK(pp_registry_get(reg, (pp_device_id){PP_DEVICE_CPU, i}, &dev[i], &err), &err);
    test_share(dev);
    test_claims();
    pp_registry_free(reg);
    return check_summary("test_comm_devices");
}
