/*
 * checkpoint.c - safetensors writer (canonical, atomic, with checksums) and
 * the loader that validates a file and its data before writing any tensor.
 *
 * The header is built with jansson. Saving streams the data through one
 * host buffer, digesting each tensor as it goes: the header, whose length
 * does not depend on the digests' values, is written first with zeros in
 * their place and rewritten once they are known. See io/checkpoint.h for the
 * format and the error contract; the reading side is checkpoint_file.c.
 */
#include "runtime/io/checkpoint_internal.h"
#include "runtime/core/path.h"
#include "runtime/io/checksum.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static bool dtype_valid(pp_dtype t)
{
    switch (t) {
    case PP_F32: case PP_BF16: case PP_F16: case PP_I64: case PP_I32: case PP_U8: return true;
    }
    return false;
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
    const pp_checkpoint_load_options o = {.allow_extra = allow_extra};
    return pp_checkpoint_load_with(path, tensors, n, &o, err);
}

pp_status pp_checkpoint_load_with(const char *path, const pp_ckpt_tensor *tensors, size_t n,
                                  const pp_checkpoint_load_options *opts, pp_error *err)
{
    return pp_ckpt_load(path, tensors, n, opts, NULL, err);
}

pp_status pp_ckpt_load(const char *path, const pp_ckpt_tensor *tensors, size_t n,
                       const pp_checkpoint_load_options *opts, bool *wrote, pp_error *err)
{
    if (wrote) *wrote = false;
    const pp_checkpoint_load_options o = opts ? *opts : (pp_checkpoint_load_options){0};
    if (!path) return pp_error_set(err, PP_ERR_INVALID, "checkpoint: NULL path");
    const pp_ckpt_tensor **want;
    PP_TRY(sort_named(path, tensors, n, &want, err));
    pp_checkpoint_info info;
    int fd;
    pp_status s = pp_ckpt_open(path, &info, &fd, err);
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
                             nt->name, pp_ckpt_shape_str(e->ndim, e->shape, a, sizeof a),
                             pp_tensor_shape_str(t, b, sizeof b));
            goto out;
        }
        match[i] = e;
        if (pp_tensor_bytes(t) > max_bytes) max_bytes = pp_tensor_bytes(t);
    }
    /* 2. no tensor in the file that nobody asked for, unless allowed */
    if (!o.allow_extra && info.n > n) {
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
    buf = malloc(max_bytes ? max_bytes : 1);
    if (!buf) {
        s = pp_error_set(err, PP_ERR_OOM, "out of host memory (%zu-byte checkpoint buffer)",
                         max_bytes);
        goto out;
    }
    /* 3. every tensor's data: checksum and (finite) values, before any is written */
    for (size_t i = 0; i < n; i++)
        if ((s = pp_ckpt_read_checked(fd, path, &info, match[i], o.finite, buf, err)) != PP_OK)
            goto out;
    /* 4. data (read again, and checked again: what is written is what was checked) */
    for (size_t i = 0; i < n; i++) {
        size_t bytes = pp_tensor_bytes(want[i]->tensor);
        if ((s = pp_ckpt_read_checked(fd, path, &info, match[i], false, buf, err)) != PP_OK)
            goto out;
        if (wrote) *wrote = true;
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
    return pp_checkpoint_save_cancellable(path, tensors, n, meta, n_meta, NULL, NULL, err);
}

static int meta_cmp(const void *a, const void *b)
{
    return strcmp(((const pp_checkpoint_meta *)a)->key, ((const pp_checkpoint_meta *)b)->key);
}

/* The metadata a file gets: the caller's entries, then the checksum of each
 * tensor (sorted[i] at n_meta + i) and the header's (last), whose values are
 * filled in place as the digests become known. */
typedef struct file_meta {
    pp_checkpoint_meta *all;              /* (n_meta + n + 1) */
    size_t n_all;
    char **keys;                          /* (n) "checksum.<name>" */
    char (*values)[PP_CKSUM_TEXT_LEN + 1]; /* (n + 1) */
    size_t n;
} file_meta;

static void file_meta_free(file_meta *fm)
{
    for (size_t i = 0; fm->keys && i < fm->n; i++) free(fm->keys[i]);
    free(fm->keys);
    free(fm->values);
    free(fm->all);
}

static pp_status file_meta_init(const char *path, const pp_ckpt_tensor **sorted, size_t n,
                                const pp_checkpoint_meta *meta, size_t n_meta, file_meta *fm,
                                pp_error *err)
{
    memset(fm, 0, sizeof *fm);
    for (size_t i = 0; i < n_meta; i++)
        if (meta[i].key && strncmp(meta[i].key, PP_CKSUM_PREFIX, strlen(PP_CKSUM_PREFIX)) == 0)
            return pp_error_set(err, PP_ERR_INVALID,
                                "%s: metadata key '%s': keys starting '%s' are the writer's",
                                path, meta[i].key, PP_CKSUM_PREFIX);
    fm->n = n;
    fm->n_all = n_meta + n + 1;
    fm->all = calloc(fm->n_all, sizeof *fm->all);
    fm->keys = calloc(n ? n : 1, sizeof *fm->keys);
    fm->values = calloc(n + 1, sizeof *fm->values);
    if (!fm->all || !fm->keys || !fm->values)
        return pp_error_set(err, PP_ERR_OOM, "out of host memory (checkpoint header)");
    for (size_t i = 0; i < n_meta; i++) fm->all[i] = meta[i];
    for (size_t i = 0; i <= n; i++) {
        pp_cksum_format(0, fm->values[i]);
        const char *key = PP_CKSUM_HEADER;
        if (i < n) {
            size_t len = strlen(PP_CKSUM_PREFIX) + strlen(sorted[i]->name) + 1;
            if (!(fm->keys[i] = malloc(len)))
                return pp_error_set(err, PP_ERR_OOM, "out of host memory (checkpoint header)");
            snprintf(fm->keys[i], len, "%s%s", PP_CKSUM_PREFIX, sorted[i]->name);
            key = fm->keys[i];
        }
        fm->all[n_meta + i] = (pp_checkpoint_meta){key, fm->values[i]};
    }
    return PP_OK;
}

/* Fills the header's digest from the tensor digests already in place. */
static pp_status file_meta_seal(file_meta *fm, const pp_ckpt_tensor **sorted, pp_error *err)
{
    pp_checkpoint_meta *ms = malloc(fm->n_all * sizeof *ms);
    pp_checkpoint_entry *es = calloc(fm->n ? fm->n : 1, sizeof *es);
    if (!ms || !es) {
        free(ms);
        free(es);
        return pp_error_set(err, PP_ERR_OOM, "out of host memory (checkpoint header)");
    }
    memcpy(ms, fm->all, fm->n_all * sizeof *ms);
    qsort(ms, fm->n_all, sizeof *ms, meta_cmp);
    for (size_t i = 0; i < fm->n; i++) {
        const pp_tensor *t = sorted[i]->tensor;
        es[i].name = (char *)sorted[i]->name;
        es[i].dtype = t->dtype;
        es[i].ndim = t->ndim;
        for (int d = 0; d < t->ndim; d++) es[i].shape[d] = t->shape[d];
    }
    pp_cksum_format(pp_cksum_header(ms, fm->n_all, es, fm->n), fm->values[fm->n]);
    free(ms);
    free(es);
    return PP_OK;
}

static pp_status check_cancel(const char *path, bool (*cancelled)(void *), void *arg,
                              pp_error *err)
{
    if (cancelled && cancelled(arg))
        return pp_error_set(err, PP_ERR_INTERRUPTED,
                            "%s: save abandoned on request (nothing written)", path);
    return PP_OK;
}

pp_status pp_checkpoint_save_cancellable(const char *path, const pp_ckpt_tensor *tensors,
                                         size_t n, const pp_checkpoint_meta *meta, size_t n_meta,
                                         bool (*cancelled)(void *arg), void *arg, pp_error *err)
{
    if (!path || !path[0]) return pp_error_set(err, PP_ERR_INVALID, "checkpoint: empty path");
    if (n_meta > 0 && !meta) return pp_error_set(err, PP_ERR_INVALID, "%s: NULL metadata", path);
    const pp_ckpt_tensor **sorted;
    PP_TRY(sort_named(path, tensors, n, &sorted, err));
    char *header = NULL;
    void *buf = NULL;
    pp_atomic_file af = {0};
    size_t hlen = 0, hlen2 = 0;
    file_meta fm;
    pp_status s = file_meta_init(path, sorted, n, meta, n_meta, &fm, err);
    /* 1. the header with zero digests: its length is final */
    if (s == PP_OK) s = build_header(path, sorted, n, fm.all, fm.n_all, &header, &hlen, err);
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
    if ((s = check_cancel(path, cancelled, arg, err)) != PP_OK) goto out;
    if ((s = pp_atomic_open(&af, path, err)) != PP_OK) goto out;

    unsigned char lenbuf[8];
    for (int i = 0; i < 8; i++) lenbuf[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
    if ((s = write_all(af.f, lenbuf, 8, pp_atomic_name(&af), err)) != PP_OK) goto out;
    if ((s = write_all(af.f, header, hlen, pp_atomic_name(&af), err)) != PP_OK) goto out;
    /* 2. the data, digested on the way */
    for (size_t i = 0; i < n; i++) {
        if ((s = check_cancel(path, cancelled, arg, err)) != PP_OK) goto out;
        const pp_tensor *t = sorted[i]->tensor;
        size_t bytes = pp_tensor_bytes(t);
        if ((s = pp_tensor_to_host(t, buf, bytes, err)) != PP_OK) {
            pp_error_prefix(err, "%s: tensor '%s'", path, sorted[i]->name);
            goto out;
        }
        pp_cksum_format(pp_cksum_data(buf, bytes), fm.values[i]);
        if ((s = write_all(af.f, buf, bytes, pp_atomic_name(&af), err)) != PP_OK) goto out;
    }
    /* 3. the header again, with the digests (the same length) */
    if ((s = file_meta_seal(&fm, sorted, err)) != PP_OK) goto out;
    free(header);
    header = NULL;
    if ((s = build_header(path, sorted, n, fm.all, fm.n_all, &header, &hlen2, err)) != PP_OK)
        goto out;
    if (hlen2 != hlen) {
        s = pp_error_set(err, PP_ERR_INTERNAL, "%s: header length changed (%zu, then %zu)", path,
                         hlen, hlen2);
        goto out;
    }
    if (fflush(af.f) != 0 || fseek(af.f, 8, SEEK_SET) != 0) {
        s = pp_error_set(err, PP_ERR_IO, "%s: write failed: %s", pp_atomic_name(&af),
                         strerror(errno));
        goto out;
    }
    if ((s = write_all(af.f, header, hlen, pp_atomic_name(&af), err)) != PP_OK) goto out;
    /* 4. on disk, then (unless abandoned meanwhile) in place */
    if (fflush(af.f) != 0 || /* (written in place, a device need not sync: path.h) */
        (fsync(fileno(af.f)) != 0 && (af.tmp || errno != EINVAL))) {
        s = pp_error_set(err, PP_ERR_IO, "%s: cannot write or flush: %s", pp_atomic_name(&af),
                         strerror(errno));
        goto out;
    }
    if ((s = check_cancel(path, cancelled, arg, err)) != PP_OK) goto out;
    s = pp_atomic_commit(&af, err);
out:
    pp_atomic_abort(&af);
    file_meta_free(&fm);
    free(buf);
    free(header);
    free(sorted);
    return s;
}
