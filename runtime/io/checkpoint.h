/*
 * checkpoint.h - safetensors checkpoints: atomic writing, validated reading.
 *
 * runtime/io/ is the host's input and output: checkpoints (this header),
 * data sources (data.h: IDX, CIFAR-10, synthetic, image folders; idx.h,
 * imagefolder.h with image_index.h, image.h and transform.h) and their
 * parallel reader (reader.h). It includes runtime/core only.
 *
 * File format (safetensors):
 *   8 bytes   N, the header length, unsigned little-endian
 *   N bytes   JSON header: {"__metadata__": {str: str}, (optional)
 *                           "<name>": {"dtype": "F32", "shape": [..],
 *                                      "data_offsets": [begin, end]}, ...}
 *   rest      raw little-endian tensor data; offsets are relative to its start
 *
 * The writer is canonical: "__metadata__" first (keys sorted), then tensors
 * sorted by name (strcmp order) with their data laid out in that order, the
 * header compact JSON padded with spaces to a multiple of 8 bytes (as the
 * reference implementation pads). Equal inputs give equal bytes, so
 * save -> load -> save reproduces a file exactly.
 *
 * Integrity: the writer adds to the metadata a checksum of every tensor's
 * data, "checksum.<name>": "xxh3-64:<16 hex digits>" (XXH3-64 of the bytes as
 * stored), and "checksum.__header__" over the rest of the header (every other
 * metadata entry, and each tensor's name, dtype and shape). Every read
 * checks the header's checksum, and every load the checksums of the tensors
 * it reads, before writing any tensor. A file without checksum entries
 * (written by the safetensors library or torch) reads as before; a file with
 * some must have them all. "checksum." keys are the writer's: callers' keys
 * may not start so.
 *
 * Tensor names are the caller's, unchanged (torchvision state_dict names such
 * as "layer3.2.bn1.running_var"; optimizer state under "optimizer.momentum.*").
 * Tensors may live on any device; data moves through pp_tensor_to_host /
 * pp_tensor_from_host, so the caller must have synchronised the streams that
 * write them. Every dtype of pp_dtype is accepted (F32, BF16, F16, I64, I32,
 * U8); ranks 0..PP_MAX_DIMS.
 *
 * Errors: a malformed, damaged or mismatching file is PP_ERR_INPUT with a
 * message that starts with the path as given ("ckpt.safetensors: tensor
 * 'fc.weight': checksum mismatch ..."); failures of the file system while
 * writing are PP_ERR_IO; a write abandoned on request is PP_ERR_INTERRUPTED;
 * bad arguments are PP_ERR_INVALID.
 * Thread safety: the functions share no state; distinct calls may run
 * concurrently on distinct files and tensors.
 */
#ifndef PP_CHECKPOINT_H
#define PP_CHECKPOINT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/core/status.h"
#include "runtime/core/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Largest accepted header, as in the reference implementation. */
#define PP_CHECKPOINT_MAX_HEADER 100000000ull

/* A tensor and its checkpoint name. Both are borrowed from the caller. */
typedef struct pp_ckpt_tensor {
    const char *name;
    pp_tensor *tensor;
} pp_ckpt_tensor;

/* One "__metadata__" entry (borrowed strings when passed in; owned by the
 * pp_checkpoint_info when read back). */
typedef struct pp_checkpoint_meta {
    const char *key;
    const char *value;
} pp_checkpoint_meta;

/* Writes tensors[0..n) and the metadata to path atomically: the data goes to
 * a temporary file in the same directory, which is flushed, fsync'ed and
 * renamed over path, then the directory is fsync'ed. On any failure before
 * the rename, path is untouched and the temporary file is removed; a failure
 * to sync the directory after the rename is PP_ERR_UNSYNCED: the new file is
 * whole and in place, but may not survive a crash (atomic_file.h).
 * Names must be non-empty, distinct, valid UTF-8 and not "__metadata__";
 * metadata keys distinct. */
pp_status pp_checkpoint_save(const char *path, const pp_ckpt_tensor *tensors, size_t n,
                             const pp_checkpoint_meta *meta, size_t n_meta, pp_error *err);

/* As pp_checkpoint_save; cancelled (optional, with its argument) is polled
 * before each tensor and once the data is on disk, before the rename: when
 * it returns true the write is abandoned, the temporary file removed and
 * path left untouched (PP_ERR_INTERRUPTED). For a second Ctrl-C during a
 * save: the callback may read a flag a signal handler sets. */
pp_status pp_checkpoint_save_cancellable(const char *path, const pp_ckpt_tensor *tensors,
                                         size_t n, const pp_checkpoint_meta *meta, size_t n_meta,
                                         bool (*cancelled)(void *arg), void *arg, pp_error *err);

/* Loads path into tensors[0..n): each must be present in the file with the
 * same dtype and shape, e.g.
 *   "ckpt.safetensors: tensor 'layer3.2.bn1.running_var': shape [256] expected [512]".
 * Tensors in the file that are not in the list are an error unless
 * allow_extra (e.g. optimizer state that the caller does not want).
 * The whole file is validated, and every expected tensor checked, before any
 * tensor is written; a read failure after that may leave tensors partly
 * loaded. Errors are PP_ERR_INPUT (PP_ERR_INVALID for bad arguments). */
pp_status pp_checkpoint_load(const char *path, const pp_ckpt_tensor *tensors, size_t n,
                             bool allow_extra, pp_error *err);

typedef struct pp_checkpoint_load_options {
    bool allow_extra; /* tensors in the file that are not in the list are ignored */
    bool finite;      /* refuse float tensors holding NaN or Inf (parameters, optimizer
                       * state), naming the tensor and the element */
} pp_checkpoint_load_options;

/* pp_checkpoint_load with options (NULL: all false). Checksums and values
 * are checked for every tensor read, all before any tensor is written. */
pp_status pp_checkpoint_load_with(const char *path, const pp_ckpt_tensor *tensors, size_t n,
                                  const pp_checkpoint_load_options *opts, pp_error *err);

/* One tensor of a file as its header describes it. */
typedef struct pp_checkpoint_entry {
    char *name;                 /* owned by the pp_checkpoint_info */
    pp_dtype dtype;
    int ndim;
    int64_t shape[PP_MAX_DIMS]; /* unused entries are 1 */
    uint64_t begin, end;        /* data_offsets, relative to the data section */
    uint64_t checksum;          /* XXH3-64 of the data when the file has checksums */
} pp_checkpoint_entry;

/* The validated header of a file. Entries are sorted by name, metadata by key. */
typedef struct pp_checkpoint_info {
    pp_checkpoint_entry *entries;
    size_t n;
    pp_checkpoint_meta *meta;   /* strings owned by this struct */
    size_t n_meta;
    uint64_t data_offset;       /* 8 + header length: where the data section starts */
    bool checksums;             /* the file carries checksums (checked: header; entries'
                                 * checksum fields are valid) */
} pp_checkpoint_info;

/* Reads and validates the header of path (and that the file holds exactly the
 * data the header describes, and the header's checksum when it has one). On
 * success the caller owns *info and releases it with pp_checkpoint_info_free;
 * on failure *info is zeroed. */
pp_status pp_checkpoint_list(const char *path, pp_checkpoint_info *info, pp_error *err);
void pp_checkpoint_info_free(pp_checkpoint_info *info);

/* The entry named name, or NULL. */
const pp_checkpoint_entry *pp_checkpoint_info_find(const pp_checkpoint_info *info,
                                                   const char *name);
/* The metadata value of key, or NULL. */
const char *pp_checkpoint_info_meta(const pp_checkpoint_info *info, const char *key);

/* What pp_checkpoint_verify found. */
typedef struct pp_checkpoint_verify_result {
    size_t tensors;             /* tensors in the file */
    uint64_t data_bytes;        /* bytes of tensor data */
    bool checksums;             /* the file carries checksums (all verified) */
} pp_checkpoint_verify_result;

/* Checks a whole file without loading it anywhere: the header, the data
 * offsets, every checksum (when the file has them) and that no float tensor
 * holds NaN or Inf. The first problem is PP_ERR_INPUT naming the file and,
 * where there is one, the tensor. out may be NULL. */
pp_status pp_checkpoint_verify(const char *path, pp_checkpoint_verify_result *out,
                               pp_error *err);

#ifdef __cplusplus
}
#endif

#endif
