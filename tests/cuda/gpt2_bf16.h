/*
 * gpt2_bf16.h - test_cuda_gpt2's bf16 tables (test_cuda_gpt2_bf16.c): the
 * backend's bf16 entries with GPT-2's mixes of bf16 and f32 operands against
 * the CPU's f32 stand-ins. Include after cuda_rig.h.
 */
#ifndef PP_TESTS_CUDA_GPT2_BF16_H
#define PP_TESTS_CUDA_GPT2_BF16_H

#include <stddef.h>

/* One bf16 unit of a value near the maximum, relative (2^-8), and a little:
 * the GPU's f32 results come in another order and may round to the other
 * bf16 neighbour. */
#define TOL_BF16 1e-2

/* check_close on a bf16 pair, widened on each device */
void gpt2_close_bf16(rig *r, const pair *h, double tol, const char *what, size_t i);

/* The dense layers, layer norms and GELU in bf16 (the tables' cases: GPT-2's
 * c_fc, c_proj, c_attn and tied head, and odd sizes the entries decline). */
void gpt2_test_bf16(rig *r);

#endif
