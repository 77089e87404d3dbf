/*
 * test_ops_edges.c - the op edge cases every backend must treat the same
 * (tests/ops/edge_cases.h), on the CPU backend: batch norm over zero values
 * per channel refused by every entry, writing nothing; max pooling whose
 * padded windows hold a single input element writes every index. The CUDA
 * suite runs the same cases on cuda:0 (tests/cuda/test_cuda_review.c).
 */
#include "runtime/core/device.h"
#include "runtime/core/exec.h"
#include "tests/ops/edge_cases.h"

int main(void)
{
    pp_error err;
    pp_registry *reg;
    if (pp_registry_new(&reg, &err) != PP_OK) return 1;
    pp_device_ctx *cpu;
    CHECK_OK(pp_registry_get(reg, (pp_device_id){PP_DEVICE_CPU, 0}, &cpu, &err), &err);
    pp_exec ex;
    CHECK_OK(pp_exec_init(&ex, cpu, NULL, &err), &err);
    edge_batchnorm_zero_rows(cpu, &ex);
    edge_maxpool_padding(cpu, &ex);
    pp_exec_destroy(&ex);
    pp_registry_free(reg);
    return check_summary("test_ops_edges");
}
