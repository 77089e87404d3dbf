/*
 * test_sdpa_graph.c - cuDNN's fused causal attention graphs (runtime/cuda
 * sdpa_graph.c) built and finalized by cuDNN without a GPU: every tensor,
 * operation and the operation graph of the forward and the backward at
 * GPT-2's shapes (heads of 64, t 1024 and 64) and an odd one (heads of 24,
 * t 77), as a plan would make them, only without a handle (the engines,
 * which need the device, are not asked). What a GPU run then adds is
 * whether the fusion engines take the pattern (test_cuda_gpt2). Shapes
 * cuDNN cannot take are refused with the reason. Runs in a CUDA build with
 * or without a GPU.
 */
#include <stdio.h>
#include <string.h>

#include "runtime/core/device.h"
#include "runtime/core/exec.h"
#include "runtime/cuda/sdpa.h"
#include "tests/check.h"

int main(void)
{
    static const struct { pp_attention_desc d; int ops[2]; const char *refusal; } cases[] = {
        {{.n = 2, .t = 1024, .c = 768, .heads = 12}, {14, 22}, NULL}, /* GPT-2 124M's */
        {{.n = 4, .t = 64, .c = 768, .heads = 12}, {14, 22}, NULL},   /* t 64 */
        {{.n = 3, .t = 77, .c = 96, .heads = 4}, {14, 22}, NULL},     /* heads of 24, odd t */
        {{.n = 3, .t = 77, .c = 51, .heads = 3}, {0, 0}, "multiples of 8"}, /* heads of 17 */
        {{.n = 1, .t = 300, .c = 512, .heads = 2}, {0, 0}, "head size above 128"}, /* of 256 */
    };
    pp_error err;
    pp_registry *reg = NULL;
    pp_device_ctx *cpu = NULL;
    pp_exec ex;
    CHECK_OK(pp_registry_new(&reg, &err), &err);
    if (reg) CHECK_OK(pp_registry_get(reg, (pp_device_id){PP_DEVICE_CPU, 0}, &cpu, &err), &err);
    if (!cpu) return check_summary("test_sdpa_graph");
    CHECK_OK(pp_exec_init(&ex, cpu, NULL, &err), &err);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (int dir = 0; dir < 2; dir++) {
            int ops = -1;
            const pp_status s =
                pp_cuda_sdpa_graph_check(&ex, &cases[i].d, (pp_sdpa_dir)dir, &ops, &err);
            const char *dn = dir ? "backward" : "forward";
            if (cases[i].refusal) {
                CHECK_MSG(s == PP_ERR_UNSUPPORTED && strstr(err.msg, cases[i].refusal),
                          "case %zu %s: want refused (%s), got %s: %s", i, dn, cases[i].refusal,
                          pp_status_name(s), s ? err.msg : "");
                continue;
            }
            CHECK_MSG(s == PP_OK, "case %zu %s: %s", i, dn, s ? err.msg : "");
            CHECK_MSG(ops == cases[i].ops[dir], "case %zu %s: %d operations, want %d", i, dn, ops,
                      cases[i].ops[dir]);
            if (s == PP_OK)
                printf("%s n %d t %d heads %d: graph of %d operations finalized\n", dn,
                       cases[i].d.n, cases[i].d.t, cases[i].d.heads, ops);
        }
    pp_exec_destroy(&ex);
    pp_registry_free(reg);
    return check_summary("test_sdpa_graph");
}
