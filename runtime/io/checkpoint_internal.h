/*
 * checkpoint_internal.h - the reading side of safetensors files that
 * checkpoint.c (load) shares with checkpoint_file.c (which defines these):
 * opening and validating a header, and reading one tensor's bytes checked;
 * and the load that says whether it began writing (checkpoint.c).
 * Calls run checkpoint.c -> checkpoint_file.c -> checksum.c, never back.
 */
#ifndef PP_IO_CHECKPOINT_INTERNAL_H
#define PP_IO_CHECKPOINT_INTERNAL_H

#include "runtime/io/checkpoint.h"

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
               "safetensors data is little-endian; this code reads and writes host order");

/* Opens path and reads its validated header (pp_checkpoint_list's checks).
 * On success *fd_out is open (the caller closes it) and *info filled; on
 * failure nothing is left open and *info is zeroed. */
pp_status pp_ckpt_open(const char *path, pp_checkpoint_info *info, int *fd_out, pp_error *err);

/* Reads entry e of the open file into buf (e->end - e->begin bytes) and
 * checks it: the checksum when the file has them, and (finite) that a float
 * tensor holds no NaN or Inf. PP_ERR_INPUT naming path and tensor. */
pp_status pp_ckpt_read_checked(int fd, const char *path, const pp_checkpoint_info *info,
                               const pp_checkpoint_entry *e, bool finite, void *buf,
                               pp_error *err);

/* pp_checkpoint_load_with, also saying whether writing began: *wrote (not
 * NULL) is set true once the first tensor is written, so that a caller whose
 * load failed knows whether its tensors are as they were (false) or partly
 * the file's (true: a read or copy failed after the checks; pipeline/
 * checkpoints.c then refuses to train on them until a load succeeds). */
pp_status pp_ckpt_load(const char *path, const pp_ckpt_tensor *tensors, size_t n,
                       const pp_checkpoint_load_options *opts, bool *wrote, pp_error *err);

/* "[3, 4]" for a shape. Returns buf. */
const char *pp_ckpt_shape_str(int ndim, const int64_t *shape, char *buf, size_t n);

#endif
