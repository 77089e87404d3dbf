/* exec.c - per-stream execution contexts and their workspaces. */
#include "exec.h"

#include <string.h>

#include "backend.h"

pp_status pp_exec_init(pp_exec *ex, pp_device_ctx *dev, void *native_stream, pp_error *err)
{
    memset(ex, 0, sizeof *ex);
    ex->dev = dev;
    ex->native_stream = native_stream;
    if (dev->ops->exec_init) return dev->ops->exec_init(ex, err);
    return PP_OK;
}

void pp_exec_destroy(pp_exec *ex)
{
    if (!ex || !ex->dev) return;
    if (ex->ws) {
        ex->dev->ops->free_async(ex, ex->ws);
        pp_device_unaccount(ex->dev, ex->ws_bytes);
    }
    if (ex->dev->ops->exec_destroy) ex->dev->ops->exec_destroy(ex);
    memset(ex, 0, sizeof *ex);
}

pp_status pp_exec_workspace(pp_exec *ex, size_t bytes, void **ptr, pp_error *err)
{
    if (bytes <= ex->ws_bytes) {
        *ptr = bytes ? ex->ws : NULL;
        return PP_OK;
    }
    pp_device_ctx *dev = ex->dev;
    size_t grow = bytes + bytes / 4;
    if (ex->ws) { /* gone, even if the growth fails below: ws_gen says so */
        dev->ops->free_async(ex, ex->ws);
        pp_device_unaccount(dev, ex->ws_bytes);
        ex->ws = NULL;
        ex->ws_bytes = 0;
        ex->ws_gen++;
    }
    PP_TRY(pp_device_account(dev, grow, err));
    pp_status s = dev->ops->alloc_async(ex, grow, &ex->ws, err);
    if (s != PP_OK) {
        pp_device_unaccount(dev, grow);
        ex->ws = NULL;
        return s;
    }
    ex->ws_bytes = grow;
    ex->ws_gen++;
    *ptr = ex->ws;
    return PP_OK;
}

pp_exec_ws_mark pp_exec_workspace_mark(const pp_exec *ex)
{
    return (pp_exec_ws_mark){ex->ws, ex->ws_bytes, ex->ws_gen};
}

void pp_exec_workspace_restore(pp_exec *ex, const pp_exec_ws_mark *m)
{
    if (!ex || !m || ex->ws_gen == m->gen) return;
    /* counted now: ws_bytes (the grown workspace, or 0 after a failed growth);
     * the marked workspace is still allocated and is counted again */
    if (ex->ws_bytes >= m->bytes) {
        pp_device_unaccount(ex->dev, ex->ws_bytes - m->bytes);
    } else if (pp_device_account(ex->dev, m->bytes - ex->ws_bytes, NULL) != PP_OK) {
        /* over the device's cap: give the marked workspace back instead */
        pp_device_unaccount(ex->dev, ex->ws_bytes);
        if (m->ws) ex->dev->ops->free_async(ex, m->ws);
        ex->ws = NULL;
        ex->ws_bytes = 0;
        ex->ws_gen++;
        return;
    }
    ex->ws = m->ws;
    ex->ws_bytes = m->bytes;
    ex->ws_gen++;
}

pp_status pp_exec_sync(pp_exec *ex, pp_error *err)
{
    if (ex->dev->ops->exec_sync) return ex->dev->ops->exec_sync(ex, err);
    return PP_OK;
}
