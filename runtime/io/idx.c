/* idx.c - IDX parsing and gzip-transparent file reads (io/idx.h). */
#include "runtime/io/idx.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#define IDX_MAX_DIM 65535
#define IDX_MAX_BYTES ((int64_t)1 << 46)

/* Opens path for gzip-transparent reading (plain files read as they are). */
static pp_status gz_open(const char *path, gzFile *out, int64_t *file_size, pp_error *err)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return pp_error_set(err, PP_ERR_INPUT, "%s: cannot open: %s", path, strerror(errno));
    if (!S_ISREG(st.st_mode)) return pp_error_set(err, PP_ERR_INPUT, "%s: not a regular file", path);
    errno = 0;
    gzFile f = gzopen(path, "rb");
    if (!f)
        return pp_error_set(err, errno == ENOMEM ? PP_ERR_OOM : PP_ERR_INPUT, "%s: cannot open: %s",
                            path, errno ? strerror(errno) : "out of memory");
    gzbuffer(f, 1 << 17);
    *out = f;
    *file_size = (int64_t)st.st_size;
    return PP_OK;
}

/* Reads up to n bytes; *got receives how many. A read error or a truncated
 * or corrupt gzip stream is an error. */
static pp_status gz_read(gzFile f, const char *path, uint8_t *dst, int64_t n, int64_t *got,
                         pp_error *err)
{
    *got = 0;
    while (*got < n) {
        unsigned chunk = n - *got > (1 << 30) ? 1u << 30 : (unsigned)(n - *got);
        int r = gzread(f, dst + *got, chunk);
        if (r < 0) {
            int code;
            const char *msg = gzerror(f, &code);
            return pp_error_set(err, code == Z_ERRNO ? PP_ERR_IO : PP_ERR_INPUT,
                                "%s: %s: %s", path,
                                code == Z_BUF_ERROR ? "truncated gzip data" : "cannot read",
                                code == Z_ERRNO ? strerror(errno) : msg);
        }
        if (r == 0) break;
        *got += r;
    }
    return PP_OK;
}

/* Closes f; a gzip stream that ended early is reported as truncated. */
static pp_status gz_close(gzFile f, const char *path, pp_status s, pp_error *err)
{
    int rc = gzclose_r(f);
    if (s == PP_OK && rc == Z_BUF_ERROR)
        return pp_error_set(err, PP_ERR_INPUT, "%s: truncated gzip data", path);
    if (s == PP_OK && rc != Z_OK)
        return pp_error_set(err, PP_ERR_INPUT, "%s: corrupt gzip data", path);
    return s;
}

pp_status pp_file_read_all(const char *path, uint8_t **buf, int64_t *size, pp_error *err)
{
    *buf = NULL;
    *size = 0;
    gzFile f;
    int64_t file_size;
    PP_TRY(gz_open(path, &f, &file_size, err));
    int64_t cap = file_size > 0 ? file_size : 1, used = 0;
    uint8_t *b = malloc((size_t)cap);
    pp_status s = b ? PP_OK : pp_error_set(err, PP_ERR_OOM, "%s: out of host memory", path);
    while (s == PP_OK) {
        if (used == cap) {
            if (cap >= IDX_MAX_BYTES) {
                s = pp_error_set(err, PP_ERR_INPUT, "%s: more than %lld bytes of data", path,
                                 (long long)IDX_MAX_BYTES);
                break;
            }
            uint8_t *nb = realloc(b, (size_t)(2 * cap));
            if (!nb) {
                s = pp_error_set(err, PP_ERR_OOM, "%s: out of host memory (%lld bytes)", path,
                                 (long long)(2 * cap));
                break;
            }
            b = nb;
            cap *= 2;
        }
        int64_t got;
        s = gz_read(f, path, b + used, cap - used, &got, err);
        used += got;
        if (s == PP_OK && used < cap) break; /* end of data */
    }
    s = gz_close(f, path, s, err);
    if (s != PP_OK) {
        free(b);
        return s;
    }
    *buf = b;
    *size = used;
    return PP_OK;
}

/* Parses the header in buf[0..size); with whole, the size must match it. */
static pp_status parse(const char *path, const uint8_t *buf, int64_t size, bool whole, int min_nd,
                       int max_nd, const char *what, int *nd, int64_t *dims, int64_t *data_off,
                       pp_error *err)
{
    if (size < 4)
        return pp_error_set(err, PP_ERR_INPUT, "%s: file too short (%lld bytes) for an IDX header",
                            path, (long long)size);
    if (buf[0] != 0 || buf[1] != 0)
        return pp_error_set(err, PP_ERR_INPUT,
                            "%s: not an IDX file (magic %02x %02x %02x %02x, expected 00 00 08 "
                            "0N)",
                            path, buf[0], buf[1], buf[2], buf[3]);
    if (buf[2] != 0x08)
        return pp_error_set(err, PP_ERR_INPUT,
                            "%s: IDX element type 0x%02x is not unsigned byte (0x08)", path,
                            buf[2]);
    *nd = buf[3];
    if (*nd < min_nd || *nd > max_nd)
        return pp_error_set(err, PP_ERR_INPUT, "%s: IDX %s file has %d dimensions, expected %s",
                            path, what, *nd,
                            min_nd == max_nd ? "1 (N)" : "3 (N,H,W) or 4 (N,C,H,W)");
    *data_off = 4 + 4 * (int64_t)*nd;
    if (size < *data_off)
        return pp_error_set(err, PP_ERR_INPUT, "%s: file too short (%lld bytes) for its IDX header",
                            path, (long long)size);
    int64_t total = 1;
    for (int i = 0; i < *nd; i++) {
        const uint8_t *p = buf + 4 + 4 * i;
        dims[i] = ((int64_t)p[0] << 24) | ((int64_t)p[1] << 16) | ((int64_t)p[2] << 8) | p[3];
        if (dims[i] == 0)
            return pp_error_set(err, PP_ERR_INPUT, "%s: IDX dimension %d is 0", path, i);
        if (i > 0 && dims[i] > IDX_MAX_DIM)
            return pp_error_set(err, PP_ERR_INPUT, "%s: IDX dimension %d (%lld) is over %d", path,
                                i, (long long)dims[i], IDX_MAX_DIM);
        total *= dims[i]; /* at most 2^32 * 2^48: fits */
        if (total > IDX_MAX_BYTES)
            return pp_error_set(err, PP_ERR_INPUT, "%s: IDX dims describe too much data", path);
    }
    if (whole && size != *data_off + total)
        return pp_error_set(err, PP_ERR_INPUT,
                            "%s: %lld bytes of data but its IDX header describes %lld (%s)", path,
                            (long long)size, (long long)(*data_off + total),
                            size < *data_off + total ? "truncated" : "trailing bytes");
    return PP_OK;
}

pp_status pp_idx_read(const char *path, int min_nd, int max_nd, const char *what, pp_idx *out,
                      pp_error *err)
{
    memset(out, 0, sizeof *out);
    PP_TRY(pp_file_read_all(path, &out->buf, &out->size, err));
    int64_t off = 0;
    pp_status s = parse(path, out->buf, out->size, true, min_nd, max_nd, what, &out->nd,
                        out->dims, &off, err);
    if (s != PP_OK) {
        pp_idx_free(out);
        return s;
    }
    out->data = out->buf + off;
    return PP_OK;
}

void pp_idx_free(pp_idx *idx)
{
    if (!idx) return;
    free(idx->buf);
    memset(idx, 0, sizeof *idx);
}

pp_status pp_idx_peek(const char *path, int min_nd, int max_nd, const char *what, int *nd,
                      int64_t *dims, pp_error *err)
{
    gzFile f;
    int64_t file_size, got, off = 0;
    uint8_t hdr[4 + 4 * PP_IDX_MAX_DIMS];
    PP_TRY(gz_open(path, &f, &file_size, err));
    pp_status s = gz_read(f, path, hdr, sizeof hdr, &got, err);
    gzclose_r(f); /* only the start was read: the rest of the stream is not checked here */
    PP_TRY(s);
    return parse(path, hdr, got, false, min_nd, max_nd, what, nd, dims, &off, err);
}
