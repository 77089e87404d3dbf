/*
 * devices.c - the devices behind a job's device-side collectives: peer
 * access between the members' devices in one process, and the claims that
 * give each device to one rank (comm/devices.h).
 *
 * Claims are process-wide (a table under one lock): a device is held by one
 * (job, rank), the job being the job of threads (its pp_local_job) or NULL
 * for the process's own rank in a job of processes.
 */
#include "runtime/comm/devices.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include "runtime/comm/local.h"

#define CLAIMS_MAX 256

typedef struct claim {
    pp_device_id id;
    const void *job;  /* the job of threads, NULL: a job of processes */
    int rank;
    int count;        /* 0: free */
} claim;

static pthread_mutex_t claims_mu = PTHREAD_MUTEX_INITIALIZER;
static claim claims[CLAIMS_MAX];

pp_status pp_comm_group_share_devices(pp_comm_group *g, pp_device_ctx *dev, pp_error *err)
{
    if (!g || !dev)
        return pp_error_set(err, PP_ERR_INVALID, "share devices: group or device is NULL");
    if (!pp_comm_local_job(g->comm) || g->size < 2) return PP_OK;
    /* 1. every member's device, broadcast by each in turn (one address space) */
    pp_device_ctx **devs = calloc((size_t)g->size, sizeof *devs);
    if (!devs) return pp_error_set(err, PP_ERR_OOM, "rank %d: out of host memory (devices)",
                                   g->comm->rank);
    pp_status st = PP_OK;
    for (int m = 0; m < g->size && st == PP_OK; m++) {
        uintptr_t p = m == g->rank ? (uintptr_t)dev : 0;
        st = pp_comm_group_broadcast(g, m, &p, sizeof p, err);
        devs[m] = (pp_device_ctx *)p;
    }
    /* 2. the others' devices reach this one's memory */
    for (int m = 0; m < g->size && st == PP_OK; m++) {
        if (m == g->rank || !devs[m] || devs[m]->id.kind != dev->id.kind) continue;
        pp_error e;
        pp_status a = pp_device_peer_access(dev, devs[m], &e);
        if (a != PP_OK && a != PP_ERR_UNSUPPORTED) {
            if (err) *err = e;
            pp_error_prefix(err, "rank %d (%s): access for member %d (%s)", g->comm->rank,
                            dev->name, m, devs[m]->name);
            st = a;
        }
    }
    free(devs);
    return st;
}

pp_status pp_comm_group_claim_device(pp_comm_group *g, const pp_device_ctx *dev, pp_error *err)
{
    if (!g || !dev) return pp_error_set(err, PP_ERR_INVALID, "claim: group or device is NULL");
    const void *job = pp_comm_local_job(g->comm);
    const int rank = g->comm->rank;
    pthread_mutex_lock(&claims_mu);
    claim *free_slot = NULL, *c = NULL;
    for (int i = 0; i < CLAIMS_MAX && !c; i++) {
        if (claims[i].count == 0) {
            if (!free_slot) free_slot = &claims[i];
        } else if (pp_device_id_equal(claims[i].id, dev->id)) {
            c = &claims[i];
        }
    }
    pp_status st = PP_OK;
    if (c && (c->job != job || c->rank != rank)) {
        st = pp_error_set(err, PP_ERR_UNSUPPORTED,
                          "rank %d: %s carries the device-side collectives of %srank %d of this "
                          "process already: collectives of two ranks on one GPU cannot be given "
                          "one order there", rank, dev->name,
                          c->job == job ? "" : "another job's ", c->rank);
    } else if (c) {
        c->count++;
    } else if (free_slot) {
        *free_slot = (claim){dev->id, job, rank, 1};
    } else {
        st = pp_error_set(err, PP_ERR_OOM, "rank %d: too many devices with collectives (%d)",
                          rank, CLAIMS_MAX);
    }
    pthread_mutex_unlock(&claims_mu);
    return st;
}

void pp_comm_group_release_device(pp_comm_group *g, const pp_device_ctx *dev)
{
    if (!g || !dev) return;
    pthread_mutex_lock(&claims_mu);
    for (int i = 0; i < CLAIMS_MAX; i++)
        if (claims[i].count > 0 && pp_device_id_equal(claims[i].id, dev->id) &&
            claims[i].job == pp_comm_local_job(g->comm) && claims[i].rank == g->comm->rank) {
            claims[i].count--;
            break;
        }
    pthread_mutex_unlock(&claims_mu);
}
