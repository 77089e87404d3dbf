/*
 * nccl_absent.c - comm/nccl.h in a build without NCCL: every
 * communicator is refused, so callers keep to the host path.
 */
#include "runtime/comm/nccl.h"

bool pp_nccl_built(void) { return false; }

static pp_status absent(pp_error *err)
{
    return pp_error_set(err, PP_ERR_UNSUPPORTED, "this build has no NCCL (meson option nccl)");
}

pp_status pp_nccl_new(pp_comm_group *g, pp_device_ctx *dev, pp_nccl **out, pp_error *err)
{
    if (out) *out = NULL;
    return absent(err);
}

pp_status pp_nccl_allreduce_sum_f32(pp_nccl *nc, pp_exec *ex, float *buf, size_t n,
                                    pp_error *err)
{
    return absent(err);
}

pp_status pp_nccl_allreduce_many_f32(pp_nccl *nc, pp_exec *ex, float *const *bufs,
                                     const size_t *ns, int count, pp_error *err)
{
    return absent(err);
}

int pp_nccl_rank(const pp_nccl *nc) { return -1; }

pp_status pp_nccl_send(pp_nccl *nc, pp_exec *ex, int peer, const void *buf, size_t bytes,
                       pp_error *err)
{
    return absent(err);
}

pp_status pp_nccl_recv(pp_nccl *nc, pp_exec *ex, int peer, void *buf, size_t bytes,
                       pp_error *err)
{
    return absent(err);
}

void pp_nccl_abort(pp_nccl *nc) {}
void pp_nccl_free(pp_nccl *nc) {}
