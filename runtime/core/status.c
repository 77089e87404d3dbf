/* status.c - error record helpers. */
#include "status.h"

#include <stdio.h>
#include <string.h>

void pp_error_clear(pp_error *err)
{
    if (!err) return;
    err->code = PP_OK;
    err->msg[0] = '\0';
}

pp_status pp_error_setv(pp_error *err, pp_status code, const char *fmt, va_list ap)
{
    if (!err) return code;
    err->code = code;
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    return code;
}

pp_status pp_error_set(pp_error *err, pp_status code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    pp_error_setv(err, code, fmt, ap);
    va_end(ap);
    return code;
}

pp_status pp_error_prefix(pp_error *err, const char *fmt, ...)
{
    if (!err) return PP_ERR_INTERNAL;
    char prefix[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(prefix, sizeof prefix - 2, fmt, ap);
    va_end(ap);
    if (n < 0) return err->code;
    size_t plen = strlen(prefix);
    memcpy(prefix + plen, ": ", 3);
    plen += 2;
    size_t mlen = strnlen(err->msg, sizeof err->msg - 1);
    if (plen + mlen >= sizeof err->msg) mlen = sizeof err->msg - 1 - plen;
    memmove(err->msg + plen, err->msg, mlen);
    memcpy(err->msg, prefix, plen);
    err->msg[plen + mlen] = '\0';
    return err->code;
}

const char *pp_status_name(pp_status s)
{
    switch (s) {
    case PP_OK: return "ok";
    case PP_ERR_INPUT: return "bad input";
    case PP_ERR_INVALID: return "invalid argument";
    case PP_ERR_OOM: return "out of memory";
    case PP_ERR_IO: return "i/o error";
    case PP_ERR_BACKEND: return "backend error";
    case PP_ERR_NUMERIC: return "numeric error";
    case PP_ERR_UNSUPPORTED: return "unsupported";
    case PP_ERR_INTERRUPTED: return "interrupted";
    case PP_ERR_INTERNAL: return "internal error";
    case PP_ERR_UNSYNCED: return "in place, not synced";
    }
    return "unknown status";
}
