/*
 * checkpoint_file.c - the reading side of safetensors checkpoints: the
 * validated header (pp_checkpoint_list and its accessors), a tensor's bytes
 * read with their checksum and values checked, and pp_checkpoint_verify.
 *
 * The header is parsed with jansson and validated whole against the file
 * before any tensor data is touched: fields, dtypes, shapes, offsets that
 * tile the data section exactly, and the checksum entries (all or none, each
 * well formed, the header's own digest matching); see io/checkpoint.h for
 * the format and the error contract, io/checksum.h for the digests.
 */
#include "runtime/io/checkpoint_internal.h"
#include "runtime/io/checksum.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
static const pp_dtype all_dtypes[] = {PP_F32, PP_BF16, PP_F16, PP_I64, PP_I32, PP_U8};

static bool dtype_parse(const char *s, pp_dtype *out)
{
    for (size_t i = 0; i < sizeof all_dtypes / sizeof all_dtypes[0]; i++) {
        if (strcmp(s, pp_dtype_name(all_dtypes[i])) == 0) {
            *out = all_dtypes[i];
            return true;
        }
    }
    return false;
}

const char *pp_ckpt_shape_str(int ndim, const int64_t *shape, char *buf, size_t n)
{
    pp_tensor t = {.ndim = ndim};
    for (int i = 0; i < ndim; i++) t.shape[i] = shape[i];
    return pp_tensor_shape_str(&t, buf, n);
}

/* ---- low-level file helpers ---------------------------------------------- */

static pp_status pread_full(int fd, void *buf, size_t len, uint64_t off, const char *path,
                            pp_error *err)
{
    char *p = buf;
    while (len > 0) {
        ssize_t r = pread(fd, p, len, (off_t)off);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0)
            return pp_error_set(err, PP_ERR_IO, "%s: read failed: %s", path, strerror(errno));
        if (r == 0) return pp_error_set(err, PP_ERR_INPUT, "%s: file truncated while reading", path);
        p += r;
        len -= (size_t)r;
        off += (uint64_t)r;
    }
    return PP_OK;
}

/* ---- header parsing ------------------------------------------------------ */

static int entry_cmp_name(const void *a, const void *b)
{
    return strcmp(((const pp_checkpoint_entry *)a)->name, ((const pp_checkpoint_entry *)b)->name);
}

static int meta_cmp_key(const void *a, const void *b)
{
    return strcmp(((const pp_checkpoint_meta *)a)->key, ((const pp_checkpoint_meta *)b)->key);
}

static int entry_cmp_offset(const void *a, const void *b)
{
    const pp_checkpoint_entry *x = *(const pp_checkpoint_entry *const *)a;
    const pp_checkpoint_entry *y = *(const pp_checkpoint_entry *const *)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

static pp_status parse_metadata(const char *path, json_t *md, pp_checkpoint_info *info,
                                pp_error *err)
{
    if (!json_is_object(md))
        return pp_error_set(err, PP_ERR_INPUT, "%s: header field '__metadata__' is not an object",
                            path);
    size_t n = json_object_size(md);
    info->meta = calloc(n ? n : 1, sizeof *info->meta);
    if (!info->meta) return pp_error_set(err, PP_ERR_OOM, "out of host memory (checkpoint header)");
    const char *key;
    json_t *v;
    json_object_foreach(md, key, v) {
        if (!json_is_string(v))
            return pp_error_set(err, PP_ERR_INPUT,
                                "%s: metadata '%s' is not a string (safetensors metadata maps "
                                "strings to strings)",
                                path, key);
        pp_checkpoint_meta *m = &info->meta[info->n_meta];
        m->key = strdup(key);
        m->value = strdup(json_string_value(v));
        info->n_meta++;
        if (!m->key || !m->value)
            return pp_error_set(err, PP_ERR_OOM, "out of host memory (checkpoint header)");
    }
    qsort(info->meta, info->n_meta, sizeof *info->meta, meta_cmp_key);
    return PP_OK;
}

static pp_status parse_uint(const char *path, const char *name, const char *field, json_t *v,
                            uint64_t limit, uint64_t *out, pp_error *err)
{
    if (!json_is_integer(v) || json_integer_value(v) < 0 ||
        (uint64_t)json_integer_value(v) > limit)
        return pp_error_set(err, PP_ERR_INPUT,
                            "%s: tensor '%s': '%s' must hold integers in [0, %llu]", path, name,
                            field, (unsigned long long)limit);
    *out = (uint64_t)json_integer_value(v);
    return PP_OK;
}

static pp_status parse_entry(const char *path, const char *name, json_t *obj,
                             pp_checkpoint_entry *e, pp_error *err)
{
    if (!json_is_object(obj))
        return pp_error_set(err, PP_ERR_INPUT, "%s: tensor '%s': header entry is not an object",
                            path, name);
    static const char *const fields[] = {"dtype", "shape", "data_offsets"};
    for (size_t i = 0; i < 3; i++)
        if (!json_object_get(obj, fields[i]))
            return pp_error_set(err, PP_ERR_INPUT, "%s: tensor '%s': missing field '%s'", path,
                                name, fields[i]);
    const char *key;
    json_t *v;
    json_object_foreach(obj, key, v) {
        if (strcmp(key, "dtype") && strcmp(key, "shape") && strcmp(key, "data_offsets"))
            return pp_error_set(err, PP_ERR_INPUT,
                                "%s: tensor '%s': unexpected field '%s' (expected dtype, shape, "
                                "data_offsets)",
                                path, name, key);
    }

    json_t *dt = json_object_get(obj, "dtype");
    if (!json_is_string(dt))
        return pp_error_set(err, PP_ERR_INPUT, "%s: tensor '%s': 'dtype' is not a string", path,
                            name);
    if (!dtype_parse(json_string_value(dt), &e->dtype))
        return pp_error_set(err, PP_ERR_INPUT,
                            "%s: tensor '%s': unsupported dtype '%s' (expected F32, BF16, F16, "
                            "I64, I32 or U8)",
                            path, name, json_string_value(dt));

    json_t *sh = json_object_get(obj, "shape");
    if (!json_is_array(sh))
        return pp_error_set(err, PP_ERR_INPUT, "%s: tensor '%s': 'shape' is not an array", path,
                            name);
    if (json_array_size(sh) > PP_MAX_DIMS)
        return pp_error_set(err, PP_ERR_INPUT, "%s: tensor '%s': rank %zu exceeds %d", path, name,
                            json_array_size(sh), PP_MAX_DIMS);
    e->ndim = (int)json_array_size(sh);
    for (int i = 0; i < PP_MAX_DIMS; i++) e->shape[i] = 1;
    uint64_t bytes = pp_dtype_size(e->dtype);
    for (int i = 0; i < e->ndim; i++) {
        uint64_t d = 0;
        PP_TRY(parse_uint(path, name, "shape", json_array_get(sh, (size_t)i), (uint64_t)1 << 40, &d,
                          err));
        e->shape[i] = (int64_t)d;
        if (__builtin_mul_overflow(bytes, d, &bytes) || bytes > ((uint64_t)1 << 62))
            return pp_error_set(err, PP_ERR_INPUT, "%s: tensor '%s': shape too large", path, name);
    }

    json_t *off = json_object_get(obj, "data_offsets");
    if (!json_is_array(off) || json_array_size(off) != 2)
        return pp_error_set(err, PP_ERR_INPUT,
                            "%s: tensor '%s': 'data_offsets' is not an array [begin, end]", path,
                            name);
    PP_TRY(parse_uint(path, name, "data_offsets", json_array_get(off, 0), (uint64_t)1 << 62,
                      &e->begin, err));
    PP_TRY(parse_uint(path, name, "data_offsets", json_array_get(off, 1), (uint64_t)1 << 62,
                      &e->end, err));
    if (e->end < e->begin)
        return pp_error_set(err, PP_ERR_INPUT, "%s: tensor '%s': data_offsets [%llu, %llu] end "
                            "before begin", path, name, (unsigned long long)e->begin,
                            (unsigned long long)e->end);
    if (e->end - e->begin != bytes) {
        char sbuf[96];
        return pp_error_set(err, PP_ERR_INPUT,
                            "%s: tensor '%s': data_offsets [%llu, %llu] span %llu bytes but "
                            "%s %s needs %llu",
                            path, name, (unsigned long long)e->begin, (unsigned long long)e->end,
                            (unsigned long long)(e->end - e->begin), pp_dtype_name(e->dtype),
                            pp_ckpt_shape_str(e->ndim, e->shape, sbuf, sizeof sbuf),
                            (unsigned long long)bytes);
    }
    return PP_OK;
}

/* Checks that the tensors tile the data section [0, data_len) exactly. */
static pp_status check_layout(const char *path, const pp_checkpoint_info *info, uint64_t data_len,
                              pp_error *err)
{
    const pp_checkpoint_entry **order = calloc(info->n ? info->n : 1, sizeof *order);
    if (!order) return pp_error_set(err, PP_ERR_OOM, "out of host memory (checkpoint header)");
    for (size_t i = 0; i < info->n; i++) order[i] = &info->entries[i];
    qsort(order, info->n, sizeof *order, entry_cmp_offset);
    pp_status s = PP_OK;
    uint64_t expected = 0;
    const pp_checkpoint_entry *prev = NULL;
    for (size_t i = 0; i < info->n && s == PP_OK; i++) {
        const pp_checkpoint_entry *e = order[i];
        if (e->begin < expected)
            s = pp_error_set(err, PP_ERR_INPUT,
                             "%s: tensors '%s' and '%s' overlap (data_offsets [%llu, %llu] and "
                             "[%llu, %llu])",
                             path, prev->name, e->name, (unsigned long long)prev->begin,
                             (unsigned long long)prev->end, (unsigned long long)e->begin,
                             (unsigned long long)e->end);
        else if (e->begin > expected)
            s = pp_error_set(err, PP_ERR_INPUT,
                             "%s: data bytes [%llu, %llu) belong to no tensor (before '%s')", path,
                             (unsigned long long)expected, (unsigned long long)e->begin, e->name);
        else if (e->end > data_len)
            s = pp_error_set(err, PP_ERR_INPUT,
                             "%s: tensor '%s': data_offsets [%llu, %llu] beyond the %llu data "
                             "bytes in the file (truncated?)",
                             path, e->name, (unsigned long long)e->begin,
                             (unsigned long long)e->end, (unsigned long long)data_len);
        expected = e->end;
        prev = e;
    }
    if (s == PP_OK && expected != data_len)
        s = pp_error_set(err, PP_ERR_INPUT,
                         "%s: %llu trailing bytes after the last tensor (header describes %llu "
                         "data bytes, file holds %llu)",
                         path, (unsigned long long)(data_len - expected),
                         (unsigned long long)expected, (unsigned long long)data_len);
    free(order);
    return s;
}

/* The checksum entries: none, or one per tensor plus the header's, each of
 * the form "xxh3-64:<hex>", and the header's digest matching. Fills each
 * entry's checksum and info->checksums. */
static pp_status check_checksums(const char *path, pp_checkpoint_info *info, pp_error *err)
{
    const size_t plen = strlen(PP_CKSUM_PREFIX);
    const char *header = pp_checkpoint_info_meta(info, PP_CKSUM_HEADER);
    size_t found = 0;
    for (size_t i = 0; i < info->n_meta; i++) {
        const pp_checkpoint_meta *m = &info->meta[i];
        if (strncmp(m->key, PP_CKSUM_PREFIX, plen) != 0) continue;
        uint64_t v;
        if (!pp_cksum_parse(m->value, &v))
            return pp_error_set(err, PP_ERR_INPUT,
                                "%s: metadata '%s': '%.40s' is not a checksum of the form "
                                "xxh3-64:<16 hex digits>",
                                path, m->key, m->value);
        if (strcmp(m->key, PP_CKSUM_HEADER) == 0) continue;
        if (!header)
            return pp_error_set(err, PP_ERR_INPUT,
                                "%s: metadata '%s' without '%s': the header is damaged", path,
                                m->key, PP_CKSUM_HEADER);
        pp_checkpoint_entry *e =
            (pp_checkpoint_entry *)pp_checkpoint_info_find(info, m->key + plen);
        if (!e)
            return pp_error_set(err, PP_ERR_INPUT,
                                "%s: metadata '%s' names no tensor of the file: the header is "
                                "damaged",
                                path, m->key);
        e->checksum = v;
        found++;
    }
    if (!header) return PP_OK;
    if (found != info->n) {
        for (size_t i = 0; i < info->n; i++) {
            size_t len = plen + strlen(info->entries[i].name) + 1;
            char *key = malloc(len);
            if (!key) return pp_error_set(err, PP_ERR_OOM, "out of host memory");
            snprintf(key, len, "%s%s", PP_CKSUM_PREFIX, info->entries[i].name);
            bool has = pp_checkpoint_info_meta(info, key) != NULL;
            free(key);
            if (!has)
                return pp_error_set(err, PP_ERR_INPUT,
                                    "%s: tensor '%s' has no checksum while the file has them: "
                                    "the header is damaged",
                                    path, info->entries[i].name);
        }
    }
    uint64_t want = 0, got = pp_cksum_header(info->meta, info->n_meta, info->entries, info->n);
    pp_cksum_parse(header, &want);
    if (want != got) {
        char g[PP_CKSUM_TEXT_LEN + 1];
        pp_cksum_format(got, g);
        return pp_error_set(err, PP_ERR_INPUT,
                            "%s: header checksum mismatch (stored %s, computed %s): the "
                            "metadata or the tensor table changed after the file was written",
                            path, header, g);
    }
    info->checksums = true;
    return PP_OK;
}

static pp_status parse_header(const char *path, const char *text, size_t len,
                              pp_checkpoint_info *info, uint64_t data_len, pp_error *err)
{
    json_error_t jerr;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return pp_error_set(err, PP_ERR_INPUT,
                            "%s: header is not valid JSON (line %d, column %d: %s)", path,
                            jerr.line, jerr.column, jerr.text);
    pp_status s = PP_OK;
    if (!json_is_object(root)) {
        s = pp_error_set(err, PP_ERR_INPUT, "%s: header is not a JSON object", path);
        goto out;
    }
    size_t n = json_object_size(root);
    info->entries = calloc(n ? n : 1, sizeof *info->entries);
    if (!info->entries) {
        s = pp_error_set(err, PP_ERR_OOM, "out of host memory (checkpoint header)");
        goto out;
    }
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v) {
        if (strcmp(key, "__metadata__") == 0) {
            s = parse_metadata(path, v, info, err);
        } else {
            pp_checkpoint_entry *e = &info->entries[info->n];
            e->name = strdup(key);
            if (!e->name) {
                s = pp_error_set(err, PP_ERR_OOM, "out of host memory (checkpoint header)");
                goto out;
            }
            info->n++;
            s = parse_entry(path, key, v, e, err);
        }
        if (s != PP_OK) goto out;
    }
    qsort(info->entries, info->n, sizeof *info->entries, entry_cmp_name);
    s = check_layout(path, info, data_len, err);
    if (s == PP_OK) s = check_checksums(path, info, err);
out:
    json_decref(root);
    return s;
}

pp_status pp_ckpt_open(const char *path, pp_checkpoint_info *info, int *fd_out, pp_error *err)
{
    memset(info, 0, sizeof *info);
    *fd_out = -1;
    if (!path) return pp_error_set(err, PP_ERR_INVALID, "checkpoint: NULL path");
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return pp_error_set(err, PP_ERR_INPUT, "%s: cannot open: %s", path, strerror(errno));
    pp_status s = PP_OK;
    char *text = NULL;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        s = pp_error_set(err, PP_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
        goto fail;
    }
    if (!S_ISREG(st.st_mode)) {
        s = pp_error_set(err, PP_ERR_INPUT, "%s: not a regular file", path);
        goto fail;
    }
    uint64_t size = (uint64_t)st.st_size;
    if (size < 8) {
        s = pp_error_set(err, PP_ERR_INPUT,
                         "%s: file too short (%llu bytes) to be a safetensors file", path,
                         (unsigned long long)size);
        goto fail;
    }
    unsigned char lenbuf[8];
    if ((s = pread_full(fd, lenbuf, 8, 0, path, err)) != PP_OK) goto fail;
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | lenbuf[i];
    if (hlen > PP_CHECKPOINT_MAX_HEADER) {
        s = pp_error_set(err, PP_ERR_INPUT,
                         "%s: header length %llu is absurd (limit %llu bytes): not a safetensors "
                         "file?",
                         path, (unsigned long long)hlen, PP_CHECKPOINT_MAX_HEADER);
        goto fail;
    }
    if (hlen > size - 8) {
        s = pp_error_set(err, PP_ERR_INPUT,
                         "%s: header length %llu exceeds the file size (%llu bytes): truncated "
                         "or not a safetensors file",
                         path, (unsigned long long)hlen, (unsigned long long)size);
        goto fail;
    }
    if (hlen < 2) {
        s = pp_error_set(err, PP_ERR_INPUT, "%s: header length %llu too short for a JSON object",
                         path, (unsigned long long)hlen);
        goto fail;
    }
    text = malloc(hlen);
    if (!text) {
        s = pp_error_set(err, PP_ERR_OOM, "out of host memory (checkpoint header)");
        goto fail;
    }
    if ((s = pread_full(fd, text, hlen, 8, path, err)) != PP_OK) goto fail;
    if (text[0] != '{') {
        s = pp_error_set(err, PP_ERR_INPUT, "%s: header does not start with '{'", path);
        goto fail;
    }
    info->data_offset = 8 + hlen;
    if ((s = parse_header(path, text, hlen, info, size - 8 - hlen, err)) != PP_OK) goto fail;
    free(text);
    *fd_out = fd;
    return PP_OK;
fail:
    free(text);
    close(fd);
    pp_checkpoint_info_free(info);
    return s;
}

pp_status pp_checkpoint_list(const char *path, pp_checkpoint_info *info, pp_error *err)
{
    int fd;
    PP_TRY(pp_ckpt_open(path, info, &fd, err));
    close(fd);
    return PP_OK;
}

void pp_checkpoint_info_free(pp_checkpoint_info *info)
{
    if (!info) return;
    for (size_t i = 0; i < info->n; i++) free(info->entries[i].name);
    for (size_t i = 0; i < info->n_meta; i++) {
        free((char *)info->meta[i].key);
        free((char *)info->meta[i].value);
    }
    free(info->entries);
    free(info->meta);
    memset(info, 0, sizeof *info);
}

const pp_checkpoint_entry *pp_checkpoint_info_find(const pp_checkpoint_info *info,
                                                   const char *name)
{
    if (!info || !name || info->n == 0) return NULL;
    pp_checkpoint_entry key = {.name = (char *)name};
    return bsearch(&key, info->entries, info->n, sizeof key, entry_cmp_name);
}

const char *pp_checkpoint_info_meta(const pp_checkpoint_info *info, const char *key)
{
    if (!info || !key || info->n_meta == 0) return NULL;
    pp_checkpoint_meta k = {.key = key};
    const pp_checkpoint_meta *m = bsearch(&k, info->meta, info->n_meta, sizeof k, meta_cmp_key);
    return m ? m->value : NULL;
}

/* ---- tensor data --------------------------------------------------------- */

pp_status pp_ckpt_read_checked(int fd, const char *path, const pp_checkpoint_info *info,
                               const pp_checkpoint_entry *e, bool finite, void *buf,
                               pp_error *err)
{
    size_t bytes = (size_t)(e->end - e->begin);
    PP_TRY(pread_full(fd, buf, bytes, info->data_offset + e->begin, path, err));
    if (info->checksums) {
        uint64_t got = pp_cksum_data(buf, bytes);
        if (got != e->checksum) {
            char want[PP_CKSUM_TEXT_LEN + 1], have[PP_CKSUM_TEXT_LEN + 1];
            pp_cksum_format(e->checksum, want);
            pp_cksum_format(got, have);
            return pp_error_set(err, PP_ERR_INPUT,
                                "%s: tensor '%s': checksum mismatch (stored %s, data gives %s): "
                                "the file changed after it was written",
                                path, e->name, want, have);
        }
    }
    size_t at;
    if (finite && pp_cksum_find_nonfinite(e->dtype, buf, bytes, &at)) {
        char sbuf[96];
        return pp_error_set(err, PP_ERR_INPUT,
                            "%s: tensor '%s' (%s %s) holds NaN or Inf (element %zu): refusing "
                            "to load it",
                            path, e->name, pp_dtype_name(e->dtype),
                            pp_ckpt_shape_str(e->ndim, e->shape, sbuf, sizeof sbuf), at);
    }
    return PP_OK;
}

pp_status pp_checkpoint_verify(const char *path, pp_checkpoint_verify_result *out,
                               pp_error *err)
{
    if (out) memset(out, 0, sizeof *out);
    pp_checkpoint_info info;
    int fd;
    PP_TRY(pp_ckpt_open(path, &info, &fd, err));
    size_t max_bytes = 0;
    uint64_t total = 0;
    for (size_t i = 0; i < info.n; i++) {
        size_t b = (size_t)(info.entries[i].end - info.entries[i].begin);
        if (b > max_bytes) max_bytes = b;
        total += b;
    }
    pp_status s = PP_OK;
    void *buf = malloc(max_bytes ? max_bytes : 1);
    if (!buf)
        s = pp_error_set(err, PP_ERR_OOM, "out of host memory (%zu-byte checkpoint buffer)",
                         max_bytes);
    /* in file order: one sequential pass over the data */
    const pp_checkpoint_entry **order = calloc(info.n ? info.n : 1, sizeof *order);
    if (s == PP_OK && !order) s = pp_error_set(err, PP_ERR_OOM, "out of host memory");
    for (size_t i = 0; s == PP_OK && i < info.n; i++) order[i] = &info.entries[i];
    if (s == PP_OK) qsort(order, info.n, sizeof *order, entry_cmp_offset);
    for (size_t i = 0; s == PP_OK && i < info.n; i++)
        s = pp_ckpt_read_checked(fd, path, &info, order[i], true, buf, err);
    if (s == PP_OK && out)
        *out = (pp_checkpoint_verify_result){.tensors = info.n, .data_bytes = total,
                                             .checksums = info.checksums};
    free(order);
    free(buf);
    close(fd);
    pp_checkpoint_info_free(&info);
    return s;
}
