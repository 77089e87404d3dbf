/*
 * checkpoint.c - safetensors writer (canonical, atomic) and validating reader.
 *
 * The header is built and parsed with jansson. Reading validates the whole
 * header against the file before any tensor data is touched; see
 * io/checkpoint.h for the format and the error contract.
 */
#include "runtime/io/checkpoint.h"
#include "runtime/core/path.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
               "safetensors data is little-endian; this code writes host order");

static const pp_dtype all_dtypes[] = {PP_F32, PP_BF16, PP_F16, PP_I64, PP_I32, PP_U8};

static bool dtype_valid(pp_dtype t)
{
    for (size_t i = 0; i < sizeof all_dtypes / sizeof all_dtypes[0]; i++)
        if (all_dtypes[i] == t) return true;
    return false;
}

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

static const char *shape_str(int ndim, const int64_t *shape, char *buf, size_t n)
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
                            shape_str(e->ndim, e->shape, sbuf, sizeof sbuf),
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
out:
    json_decref(root);
    return s;
}

/* Opens path and reads its validated header. On success *fd_out is open. */
static pp_status open_and_parse(const char *path, pp_checkpoint_info *info, int *fd_out,
                                pp_error *err)
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
    PP_TRY(open_and_parse(path, info, &fd, err));
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

/* ---- argument checks shared by save and load --------------------------- */

static int named_cmp(const void *a, const void *b)
{
    return strcmp((*(const pp_ckpt_tensor *const *)a)->name,
                  (*(const pp_ckpt_tensor *const *)b)->name);
}

/* Validates the list and returns it sorted by name in *sorted_out (caller frees). */
static pp_status sort_named(const char *path, const pp_ckpt_tensor *tensors, size_t n,
                            const pp_ckpt_tensor ***sorted_out, pp_error *err)
{
    *sorted_out = NULL;
    if (n > 0 && !tensors)
        return pp_error_set(err, PP_ERR_INVALID, "%s: NULL tensor list", path);
    for (size_t i = 0; i < n; i++) {
        const pp_ckpt_tensor *nt = &tensors[i];
        if (!nt->name || !nt->name[0])
            return pp_error_set(err, PP_ERR_INVALID, "%s: tensor %zu has no name", path, i);
        if (strcmp(nt->name, "__metadata__") == 0)
            return pp_error_set(err, PP_ERR_INVALID, "%s: '__metadata__' is not a tensor name",
                                path);
        const pp_tensor *t = nt->tensor;
        if (!t)
            return pp_error_set(err, PP_ERR_INVALID, "%s: tensor '%s' is NULL", path, nt->name);
        if (!dtype_valid(t->dtype) || t->ndim < 0 || t->ndim > PP_MAX_DIMS)
            return pp_error_set(err, PP_ERR_INVALID, "%s: tensor '%s' has a bad dtype or rank",
                                path, nt->name);
        if (pp_tensor_bytes(t) > 0 && (!t->data || !t->dev))
            return pp_error_set(err, PP_ERR_INVALID, "%s: tensor '%s' has no storage", path,
                                nt->name);
    }
    const pp_ckpt_tensor **sorted = calloc(n ? n : 1, sizeof *sorted);
    if (!sorted) return pp_error_set(err, PP_ERR_OOM, "out of host memory (checkpoint)");
    for (size_t i = 0; i < n; i++) sorted[i] = &tensors[i];
    qsort(sorted, n, sizeof *sorted, named_cmp);
    for (size_t i = 1; i < n; i++) {
        if (strcmp(sorted[i - 1]->name, sorted[i]->name) == 0) {
            pp_status s = pp_error_set(err, PP_ERR_INVALID, "%s: tensor name '%s' given twice",
                                       path, sorted[i]->name);
            free(sorted);
            return s;
        }
    }
    *sorted_out = sorted;
    return PP_OK;
}

/* ---- load ------------------------------------------------------------------ */

pp_status pp_checkpoint_load(const char *path, const pp_ckpt_tensor *tensors, size_t n,
                             bool allow_extra, pp_error *err)
{
    if (!path) return pp_error_set(err, PP_ERR_INVALID, "checkpoint: NULL path");
    const pp_ckpt_tensor **want;
    PP_TRY(sort_named(path, tensors, n, &want, err));
    pp_checkpoint_info info;
    int fd;
    pp_status s = open_and_parse(path, &info, &fd, err);
    if (s != PP_OK) {
        free(want);
        return s;
    }
    const pp_checkpoint_entry **match = calloc(n ? n : 1, sizeof *match);
    void *buf = NULL;
    if (!match) {
        s = pp_error_set(err, PP_ERR_OOM, "out of host memory (checkpoint)");
        goto out;
    }
    /* 1. every expected tensor present with dtype and shape */
    size_t max_bytes = 0;
    for (size_t i = 0; i < n; i++) {
        const pp_ckpt_tensor *nt = want[i];
        const pp_tensor *t = nt->tensor;
        const pp_checkpoint_entry *e = pp_checkpoint_info_find(&info, nt->name);
        if (!e) {
            s = pp_error_set(err, PP_ERR_INPUT, "%s: tensor '%s' missing (the file holds %zu "
                             "tensors)", path, nt->name, info.n);
            goto out;
        }
        if (e->dtype != t->dtype) {
            s = pp_error_set(err, PP_ERR_INPUT, "%s: tensor '%s': dtype %s expected %s", path,
                             nt->name, pp_dtype_name(e->dtype), pp_dtype_name(t->dtype));
            goto out;
        }
        bool same = e->ndim == t->ndim;
        for (int d = 0; same && d < e->ndim; d++) same = e->shape[d] == t->shape[d];
        if (!same) {
            char a[96], b[96];
            s = pp_error_set(err, PP_ERR_INPUT, "%s: tensor '%s': shape %s expected %s", path,
                             nt->name, shape_str(e->ndim, e->shape, a, sizeof a),
                             pp_tensor_shape_str(t, b, sizeof b));
            goto out;
        }
        match[i] = e;
        if (pp_tensor_bytes(t) > max_bytes) max_bytes = pp_tensor_bytes(t);
    }
    /* 2. no tensor in the file that nobody asked for, unless allowed */
    if (!allow_extra && info.n > n) {
        size_t j = 0;
        for (size_t i = 0; i < info.n; i++) {
            if (j < n && match[j] == &info.entries[i]) {
                j++;
                continue;
            }
            s = pp_error_set(err, PP_ERR_INPUT,
                             "%s: unexpected tensor '%s' (the file holds %zu tensors, %zu "
                             "expected)",
                             path, info.entries[i].name, info.n, n);
            goto out;
        }
    }
    /* 3. data */
    buf = malloc(max_bytes ? max_bytes : 1);
    if (!buf) {
        s = pp_error_set(err, PP_ERR_OOM, "out of host memory (%zu-byte checkpoint buffer)",
                         max_bytes);
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        size_t bytes = pp_tensor_bytes(want[i]->tensor);
        if ((s = pread_full(fd, buf, bytes, info.data_offset + match[i]->begin, path, err)) !=
            PP_OK)
            goto out;
        if ((s = pp_tensor_from_host(want[i]->tensor, buf, bytes, err)) != PP_OK) {
            pp_error_prefix(err, "%s: tensor '%s'", path, want[i]->name);
            goto out;
        }
    }
out:
    free(buf);
    free(match);
    free(want);
    close(fd);
    pp_checkpoint_info_free(&info);
    return s;
}

/* ---- save ------------------------------------------------------------------ */

static int meta_ptr_cmp(const void *a, const void *b)
{
    return strcmp((*(const pp_checkpoint_meta *const *)a)->key,
                  (*(const pp_checkpoint_meta *const *)b)->key);
}

/* Builds the padded header text. *out is malloc'ed; *len is a multiple of 8. */
static pp_status build_header(const char *path, const pp_ckpt_tensor **sorted, size_t n,
                              const pp_checkpoint_meta *meta, size_t n_meta, char **out,
                              size_t *len, pp_error *err)
{
    *out = NULL;
    pp_status s = PP_OK;
    const pp_checkpoint_meta **msorted = NULL;
    json_t *root = json_object();
    if (!root) return pp_error_set(err, PP_ERR_OOM, "out of host memory (checkpoint header)");
    if (n_meta > 0) {
        msorted = calloc(n_meta, sizeof *msorted);
        json_t *md = json_object();
        if (!msorted || !md || json_object_set_new(root, "__metadata__", md) != 0) {
            s = pp_error_set(err, PP_ERR_OOM, "out of host memory (checkpoint header)");
            goto out;
        }
        for (size_t i = 0; i < n_meta; i++) {
            if (!meta[i].key || !meta[i].value) {
                s = pp_error_set(err, PP_ERR_INVALID, "%s: metadata entry %zu is NULL", path, i);
                goto out;
            }
            msorted[i] = &meta[i];
        }
        qsort(msorted, n_meta, sizeof *msorted, meta_ptr_cmp);
        for (size_t i = 0; i < n_meta; i++) {
            if (i > 0 && strcmp(msorted[i - 1]->key, msorted[i]->key) == 0) {
                s = pp_error_set(err, PP_ERR_INVALID, "%s: metadata key '%s' given twice", path,
                                 msorted[i]->key);
                goto out;
            }
            json_t *v = json_string(msorted[i]->value);
            if (!v || json_object_set_new(md, msorted[i]->key, v) != 0) {
                s = pp_error_set(err, PP_ERR_INVALID,
                                 "%s: metadata '%s' is not valid UTF-8 (or out of memory)", path,
                                 msorted[i]->key);
                goto out;
            }
        }
    }
    uint64_t offset = 0;
    for (size_t i = 0; i < n; i++) {
        const pp_tensor *t = sorted[i]->tensor;
        uint64_t bytes = pp_tensor_bytes(t);
        json_t *e = json_object();
        if (!e) {
            s = pp_error_set(err, PP_ERR_OOM, "out of host memory (checkpoint header)");
            goto out;
        }
        /* set_new steals the value even when it fails, so nothing leaks below */
        if (json_object_set_new(root, sorted[i]->name, e) != 0) {
            s = pp_error_set(err, PP_ERR_INVALID, "%s: tensor name '%s' is not valid UTF-8", path,
                             sorted[i]->name);
            goto out;
        }
        json_t *shape = json_array(), *offs = json_array();
        int rc = json_object_set_new(e, "dtype", json_string(pp_dtype_name(t->dtype)));
        rc |= json_object_set_new(e, "shape", shape);
        rc |= json_object_set_new(e, "data_offsets", offs);
        for (int d = 0; rc == 0 && d < t->ndim; d++)
            rc |= json_array_append_new(shape, json_integer(t->shape[d]));
        if (rc == 0) rc |= json_array_append_new(offs, json_integer((json_int_t)offset));
        if (rc == 0) rc |= json_array_append_new(offs, json_integer((json_int_t)(offset + bytes)));
        if (rc != 0) {
            s = pp_error_set(err, PP_ERR_OOM, "out of host memory (checkpoint header)");
            goto out;
        }
        offset += bytes;
    }
    char *text = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
    if (!text) {
        s = pp_error_set(err, PP_ERR_OOM, "out of host memory (checkpoint header)");
        goto out;
    }
    size_t tl = strlen(text);
    size_t padded = (tl + 7) & ~(size_t)7;
    if (padded > PP_CHECKPOINT_MAX_HEADER) {
        free(text);
        s = pp_error_set(err, PP_ERR_INVALID, "%s: header of %zu bytes exceeds the limit", path,
                         padded);
        goto out;
    }
    char *buf = malloc(padded);
    if (!buf) {
        free(text);
        s = pp_error_set(err, PP_ERR_OOM, "out of host memory (checkpoint header)");
        goto out;
    }
    memcpy(buf, text, tl);
    memset(buf + tl, ' ', padded - tl);
    free(text);
    *out = buf;
    *len = padded;
out:
    free(msorted);
    json_decref(root);
    return s;
}

static pp_status write_all(FILE *f, const void *p, size_t n, const char *tmp, pp_error *err)
{
    if (n > 0 && fwrite(p, 1, n, f) != n)
        return pp_error_set(err, PP_ERR_IO, "%s: write failed: %s", tmp, strerror(errno));
    return PP_OK;
}

pp_status pp_checkpoint_save(const char *path, const pp_ckpt_tensor *tensors, size_t n,
                             const pp_checkpoint_meta *meta, size_t n_meta, pp_error *err)
{
    if (!path || !path[0]) return pp_error_set(err, PP_ERR_INVALID, "checkpoint: empty path");
    if (n_meta > 0 && !meta) return pp_error_set(err, PP_ERR_INVALID, "%s: NULL metadata", path);
    const pp_ckpt_tensor **sorted;
    PP_TRY(sort_named(path, tensors, n, &sorted, err));
    char *header = NULL;
    void *buf = NULL;
    pp_atomic_file af = {0};
    size_t hlen = 0;
    pp_status s = build_header(path, sorted, n, meta, n_meta, &header, &hlen, err);
    if (s != PP_OK) goto out;

    size_t max_bytes = 0;
    for (size_t i = 0; i < n; i++)
        if (pp_tensor_bytes(sorted[i]->tensor) > max_bytes)
            max_bytes = pp_tensor_bytes(sorted[i]->tensor);
    buf = malloc(max_bytes ? max_bytes : 1);
    if (!buf) {
        s = pp_error_set(err, PP_ERR_OOM, "out of host memory (checkpoint)");
        goto out;
    }
    if ((s = pp_atomic_open(&af, path, err)) != PP_OK) goto out;

    unsigned char lenbuf[8];
    for (int i = 0; i < 8; i++) lenbuf[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
    if ((s = write_all(af.f, lenbuf, 8, af.tmp, err)) != PP_OK) goto out;
    if ((s = write_all(af.f, header, hlen, af.tmp, err)) != PP_OK) goto out;
    for (size_t i = 0; i < n; i++) {
        const pp_tensor *t = sorted[i]->tensor;
        size_t bytes = pp_tensor_bytes(t);
        if ((s = pp_tensor_to_host(t, buf, bytes, err)) != PP_OK) {
            pp_error_prefix(err, "%s: tensor '%s'", path, sorted[i]->name);
            goto out;
        }
        if ((s = write_all(af.f, buf, bytes, af.tmp, err)) != PP_OK) goto out;
    }
    s = pp_atomic_commit(&af, err);
out:
    pp_atomic_abort(&af);
    free(buf);
    free(header);
    free(sorted);
    return s;
}
