/* rng.c - splitmix64-seeded xoshiro256** with Box-Muller normals. */
#include "rng.h"

#include <math.h>

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t fnv1a64(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 0x100000001b3ull;
    }
    return h;
}

static uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

void pp_rng_init(pp_rng *r, uint64_t seed, const char *name)
{
    uint64_t x = seed;
    uint64_t mixed = splitmix64(&x) ^ fnv1a64(name ? name : "");
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&mixed);
    r->have_spare = false;
    r->spare = 0.0;
}

uint64_t pp_rng_next(pp_rng *r)
{
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double pp_rng_uniform(pp_rng *r)
{
    return (double)(pp_rng_next(r) >> 11) * 0x1.0p-53;
}

double pp_rng_normal(pp_rng *r)
{
    if (r->have_spare) {
        r->have_spare = false;
        return r->spare;
    }
    double u1 = 1.0 - pp_rng_uniform(r); /* (0, 1]: log is finite */
    double u2 = pp_rng_uniform(r);
    double rad = sqrt(-2.0 * log(u1));
    double ang = 6.283185307179586476925 * u2;
    r->spare = rad * sin(ang);
    r->have_spare = true;
    return rad * cos(ang);
}
