/* diag.c - the list of input diagnostics. */
#include "partitioner/diag.h"

#include <stdio.h>
#include <string.h>

void pp_diag_clear(pp_diag *d)
{
    if (!d) return;
    d->count = 0;
    d->items[0].text[0] = '\0';
}

pp_status pp_diag_addv(pp_diag *d, pp_status code, const char *file, int line, int col,
                       const char *fmt, va_list ap)
{
    if (!d) return code;
    if (d->count < PP_DIAG_MAX) {
        pp_diag_item *it = &d->items[d->count];
        it->code = code;
        it->line = line;
        it->col = col;
        if (!file) file = "<input>";
        int k;
        if (line > 0)
            k = snprintf(it->text, sizeof it->text, "%s:%d:%d: ", file, line, col);
        else
            k = snprintf(it->text, sizeof it->text, "%s: ", file);
        if (k < 0) k = 0;
        if ((size_t)k < sizeof it->text)
            vsnprintf(it->text + k, sizeof it->text - (size_t)k, fmt, ap);
    }
    d->count++;
    return code;
}

pp_status pp_diag_add(pp_diag *d, pp_status code, const char *file, int line, int col,
                      const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    pp_diag_addv(d, code, file, line, col, fmt, ap);
    va_end(ap);
    return code;
}

const char *pp_diag_format(const pp_diag *d, char *buf, size_t n)
{
    if (n == 0) return buf;
    buf[0] = '\0';
    if (!d) return buf;
    int kept = d->count < PP_DIAG_MAX ? d->count : PP_DIAG_MAX;
    size_t used = 0;
    int shown = 0;
    /* room kept back for the "(N more problems)" line */
    const size_t reserve = 40;
    for (int i = 0; i < kept; i++) {
        size_t len = strlen(d->items[i].text);
        size_t need = len + (i > 0 ? 1 : 0);
        if (used + need + 1 + (i + 1 < d->count ? reserve : 0) > n) break;
        if (i > 0) buf[used++] = '\n';
        memcpy(buf + used, d->items[i].text, len);
        used += len;
        buf[used] = '\0';
        shown++;
    }
    if (shown < d->count && used + 1 < n)
        snprintf(buf + used, n - used, "%s(%d more problem%s)", used ? "\n" : "",
                 d->count - shown, d->count - shown == 1 ? "" : "s");
    return buf;
}

pp_status pp_diag_to_error(const pp_diag *d, pp_error *err)
{
    if (!d || d->count == 0) {
        pp_error_clear(err);
        return PP_OK;
    }
    pp_status code = d->items[0].code;
    if (!err) return code;
    err->code = code;
    pp_diag_format(d, err->msg, sizeof err->msg);
    return code;
}
