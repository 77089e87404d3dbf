/*
 * dropout.h - where dropout's masks come from: a counter-based hash, so a
 * mask is a pure function of its coordinates and is drawn again (the same
 * bits) wherever it is needed, instead of being stored.
 *
 *   key   = pp_dropout_key(seed, step, site): the run's seed, the training
 *           step and the dropout site (a layer's place in the model);
 *   bits  = pp_dropout_bits(key, sample, index): sample is the global index
 *           of a sample in the step's mini-batch, index an element's index
 *           within that sample (for attention: (head, query, key));
 *   keep  = bits >= pp_dropout_threshold(p); kept values are scaled by
 *           pp_dropout_scale(p) = 1 / (1 - p) (inverted dropout).
 *
 * Neither the micro-batch nor the stage, rank or replica that runs a sample
 * enters a mask, so a pipeline of any shape draws the masks of one stage.
 * The mixing is splitmix64's finaliser (two rounds per element). Plain
 * inline C: every backend's kernels and the tests' references draw through
 * these functions; compiled by nvcc they are __host__ __device__ too
 * (PP_DROPOUT_FN), so that the CUDA kernels draw the CPU's masks.
 */
#ifndef PP_CORE_DROPOUT_H
#define PP_CORE_DROPOUT_H

#include <stdbool.h>
#include <stdint.h>

struct pp_tensor; /* tensor.h */

/* How the functions below are declared: static inline, and callable from
 * device code when nvcc compiles them (plain C elsewhere). */
#ifdef __CUDACC__
#define PP_DROPOUT_FN static inline __host__ __device__
#else
#define PP_DROPOUT_FN static inline
#endif

/* One dropout op's randomness (ops.h: pp_dropout_forward, the attention's
 * dropout). p == 0: no dropout (the op is the identity). */
typedef struct pp_dropout_desc {
    float p;              /* the probability of dropping a value, [0, 1) */
    uint64_t key;         /* pp_dropout_key(seed, step, site) */
    int64_t first_sample; /* the global index (in the step's mini-batch) of the tensor's
                             sample 0; sample n of the tensor is first_sample + n */
    /* Optional: the step in memory, for work that is replayed (a CUDA graph
     * replays its kernels with the arguments they were captured with, so a
     * key passed as one would draw the captured step's masks at every
     * replay). step: one I64 element on the op's device, which its caller
     * sets before each step; the op then draws from pp_dropout_key(seed,
     * *step, site), read when it runs, and key must be that key (the CPU
     * backend checks it: PP_ERR_INTERNAL where they differ). NULL: key
     * alone, as given. */
    const struct pp_tensor *step;
    uint64_t seed;
    int site;
} pp_dropout_desc;

PP_DROPOUT_FN uint64_t pp_dropout_mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

PP_DROPOUT_FN uint64_t pp_dropout_key(uint64_t seed, int64_t step, int site)
{
    uint64_t z = pp_dropout_mix(seed + 0x9e3779b97f4a7c15ull);
    z = pp_dropout_mix(z ^ ((uint64_t)step * 0xd1b54a32d192ed03ull));
    return pp_dropout_mix(z + (uint64_t)(uint32_t)site * 0x8cb92ba72f3d8dd7ull);
}

PP_DROPOUT_FN uint32_t pp_dropout_bits(uint64_t key, int64_t sample, int64_t index)
{
    uint64_t z = pp_dropout_mix(key ^ ((uint64_t)sample * 0x9e3779b97f4a7c15ull));
    z = pp_dropout_mix(z + ((uint64_t)index + 1) * 0xd6e8feb86659fd93ull);
    return (uint32_t)(z >> 32);
}

/* The key of a draw whose step may be in memory (pp_dropout_desc.step):
 * from *step where there is one, else key. */
PP_DROPOUT_FN uint64_t pp_dropout_key_at(uint64_t key, const int64_t *step, uint64_t seed,
                                         int site)
{
    return step ? pp_dropout_key(seed, *step, site) : key;
}

/* The bits below which a value is dropped: p of the 2^32 values. */
PP_DROPOUT_FN uint32_t pp_dropout_threshold(float p)
{
    const double t = (double)p * 4294967296.0;
    return t <= 0.0 ? 0u : t >= 4294967295.0 ? 4294967295u : (uint32_t)t;
}

PP_DROPOUT_FN float pp_dropout_scale(float p)
{
    return (float)(1.0 / (1.0 - (double)p));
}

/* The factor of one element: pp_dropout_scale(p) where kept, 0 where dropped. */
PP_DROPOUT_FN float pp_dropout_factor(uint64_t key, int64_t sample, int64_t index,
                                      uint32_t threshold, float scale)
{
    return pp_dropout_bits(key, sample, index) >= threshold ? scale : 0.0f;
}

#endif
