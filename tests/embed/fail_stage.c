/*
 * fail_stage.c - the embedding tests' custom stage (fail_stage.h).
 */
#include "tests/embed/fail_stage.h"

pp_status pp_test_fail_shape(void *user, int mb_size, pp_tensor *t, pp_error *err)
{
    (void)user, (void)err;
    t->dtype = PP_F32;
    t->ndim = 2;
    t->shape[0] = mb_size;
    t->shape[1] = 3;
    return PP_OK;
}

pp_status pp_test_fail_forward(void *user, pp_exec *ex, int mb, int mb_size, const pp_tensor *in,
                               pp_tensor *out, pp_error *err)
{
    (void)mb_size;
    pp_test_fail_stage *fs = user;
    if (mb == fs->fail_mb) return pp_error_set(err, PP_ERR_NUMERIC, "loss is NaN");
    return in ? pp_copy(ex, in, out, err) : pp_zero(ex, out, err);
}

pp_status pp_test_fail_backward(void *user, pp_exec *ex, int mb, int mb_size,
                                const pp_tensor *grad_out, pp_tensor *grad_in, pp_error *err)
{
    (void)user, (void)mb, (void)mb_size;
    if (!grad_in) return PP_OK;
    return grad_out ? pp_copy(ex, grad_out, grad_in, err) : pp_zero(ex, grad_in, err);
}

const pp_stage_ops pp_test_fail_ops = {
    .out_shape = pp_test_fail_shape,
    .forward = pp_test_fail_forward,
    .backward = pp_test_fail_backward,
    .step = NULL,
};
