/*
 * fail_stage.h - a custom stage for the embedding tests (test_embed.c,
 * test_null_error.c): it passes its input through (zeros where it has none)
 * and its forward fails with PP_ERR_NUMERIC ("loss is NaN") at the
 * micro-batch asked; its output is (mb_size, 3) f32.
 */
#ifndef PP_TESTS_EMBED_FAIL_STAGE_H
#define PP_TESTS_EMBED_FAIL_STAGE_H

#include "pipeline/pipeline_run.h"

typedef struct pp_test_fail_stage {
    int index;
    int fail_mb; /* forward of this micro-batch fails; -1: never */
} pp_test_fail_stage;

/* the stage's output shape: (mb_size, 3) f32 */
pp_status pp_test_fail_shape(void *user, int mb_size, pp_tensor *t, pp_error *err);
/* out = in (zeros where in is NULL); PP_ERR_NUMERIC at micro-batch fail_mb */
pp_status pp_test_fail_forward(void *user, pp_exec *ex, int mb, int mb_size, const pp_tensor *in,
                               pp_tensor *out, pp_error *err);
/* grad_in = grad_out (zeros where grad_out is NULL) */
pp_status pp_test_fail_backward(void *user, pp_exec *ex, int mb, int mb_size,
                                const pp_tensor *grad_out, pp_tensor *grad_in, pp_error *err);

/* the three above (user: a pp_test_fail_stage) */
extern const pp_stage_ops pp_test_fail_ops;

#endif
