/*
 * devices.h - the devices behind a job's device-side collectives (NCCL,
 * comm/nccl.c), for groups whose members share one process (a job of
 * threads, pp_comm_local_new):
 *   - access: NCCL between devices of one process reads and writes its peers'
 *     buffers directly (peer pointers), and those buffers come from the
 *     devices' stream-ordered memory pools, which peer mappings do not cover:
 *     every member lets every other member's device reach its own
 *     (pp_device_peer_access);
 *   - one rank per device: collectives of several communicators on one device
 *     must run in one order on every rank, or their kernels (each waiting for
 *     its peers) can wait for each other across devices. The order nccl.c
 *     gives them is the order one rank enqueues them in, which is the same on
 *     every rank (its program's); two ranks enqueueing on one device from two
 *     threads would interleave at random, so a device's device-side
 *     collectives belong to one rank of the process (claims).
 * In a job of processes every process is one rank: nothing to share, and a
 * claim always succeeds.
 *
 * Thread safety: claims may be made and dropped from any thread (one lock);
 * pp_comm_group_share_devices is collective over its group, as its other
 * group calls.
 */
#ifndef PP_COMM_DEVICES_H
#define PP_COMM_DEVICES_H

#include "runtime/comm/comm.h"
#include "runtime/core/device.h"
#include "runtime/core/status.h"

/* Collective over g (every member with its device): in a job of threads,
 * every member's dev is made reachable by the other members' devices, where
 * the hardware allows (a pair without a path is left as it is: NCCL then
 * takes a path through its own buffers). A no-op in a job of processes or a
 * group of one. */
pp_status pp_comm_group_share_devices(pp_comm_group *g, pp_device_ctx *dev, pp_error *err);

/* This rank of g's job takes dev for its device-side collectives (counted:
 * one release per claim). PP_ERR_UNSUPPORTED, naming both ranks, when another
 * rank of this process holds it. Not collective: the caller agrees the
 * outcome with its group. */
pp_status pp_comm_group_claim_device(pp_comm_group *g, const pp_device_ctx *dev, pp_error *err);
void pp_comm_group_release_device(pp_comm_group *g, const pp_device_ctx *dev);

#endif
