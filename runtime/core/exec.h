/*
 * exec.h - the execution context every op runs in.
 *
 * A pp_exec binds one device to one stream. On the CPU backend an op runs
 * synchronously on the calling thread (a stream's worker thread when run
 * through streams/); on CUDA it enqueues work on native_stream and returns.
 * Each stream owns one pp_exec, so ops on one exec are never concurrent.
 *
 * The workspace is scratch memory private to the exec, valid until the next
 * pp_exec_workspace call on the same exec (in stream order): an op may use it
 * for im2col buffers and the like but must not keep it across ops.
 */
#ifndef PP_EXEC_H
#define PP_EXEC_H

#include <stddef.h>

#include "device.h"
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pp_exec {
    pp_device_ctx *dev;
    void *native_stream;   /* cudaStream_t on CUDA; NULL on CPU */
    void *backend_state;   /* per-stream backend state (cuDNN/cuBLAS handles); owned by the backend */
    void *ws;              /* workspace, device memory */
    size_t ws_bytes;
    unsigned ws_gen;       /* bumped whenever ws, or other memory of the exec's that
                              captured work reads (cuBLASLt's ones vector), is
                              reallocated: work captured with the old one (a graph)
                              must not run again */
} pp_exec;

/* Initialises an exec for dev on the given native stream (NULL on CPU: the
 * calling thread). The backend may create per-stream handles. */
pp_status pp_exec_init(pp_exec *ex, pp_device_ctx *dev, void *native_stream, pp_error *err);
/* Releases the workspace and backend state. Safe on a zeroed exec. */
void pp_exec_destroy(pp_exec *ex);

/* Returns workspace of at least bytes, growing it if needed (growth is stream
 * ordered on CUDA). *ptr is NULL when bytes is 0. */
pp_status pp_exec_workspace(pp_exec *ex, size_t bytes, void **ptr, pp_error *err);

/* The workspace as it is now, for pp_exec_workspace_restore. */
typedef struct pp_exec_ws_mark {
    void *ws;
    size_t bytes;
    unsigned gen;
} pp_exec_ws_mark;
pp_exec_ws_mark pp_exec_workspace_mark(const pp_exec *ex);

/* For a workspace that grew (ws_gen moved on from m's) inside a graph
 * capture whose graph was then refused or discarded: neither the captured
 * allocation nor the captured free (or the refused one) of the old
 * workspace ever ran, so the grown pointer is dropped without being freed
 * and the workspace marked in m is the exec's again (the grown bytes leave
 * the device's count). ws_gen still moves on: no graph may keep the grown
 * pointer. Nothing to do when ws_gen did not move. */
void pp_exec_workspace_restore(pp_exec *ex, const pp_exec_ws_mark *m);

/* Waits until all work enqueued on this exec has finished (no-op on CPU). */
pp_status pp_exec_sync(pp_exec *ex, pp_error *err);

#ifdef __cplusplus
}
#endif

#endif
