/*
 * rng.h - the small deterministic generator model initialisation draws from.
 *
 * xoshiro256** seeded through splitmix64; normals by Box-Muller in double
 * precision. A stream is derived from (seed, tensor name), so a tensor's
 * initial values depend only on the plan's seed and its torchvision name, not
 * on how the model is split into stages or in which order stages are built.
 * Plain data, no global state; not thread-safe per instance.
 */
#ifndef PP_MODELS_RNG_H
#define PP_MODELS_RNG_H

#include <stdbool.h>
#include <stdint.h>

typedef struct pp_rng {
    uint64_t s[4];
    bool have_spare; /* Box-Muller produces pairs; the second is kept here */
    double spare;
} pp_rng;

/* Seeds a stream from a 64-bit seed and a name (e.g. "layer1.0.conv1.weight"). */
void pp_rng_init(pp_rng *r, uint64_t seed, const char *name);

uint64_t pp_rng_next(pp_rng *r);
/* Uniform double in [0, 1) with 53 random bits. */
double pp_rng_uniform(pp_rng *r);
/* Standard normal N(0, 1). */
double pp_rng_normal(pp_rng *r);

#endif
