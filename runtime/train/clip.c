/* clip.c - gradient clipping's norm and coefficient (clip.h). */
#include "runtime/train/clip.h"

#include <math.h>

float pp_clip_total_norm(const double *sums, size_t n)
{
    double total = 0.0;
    for (size_t i = 0; i < n; i++) total += sums[i];
    return (float)sqrt(total);
}

float pp_clip_coefficient(float norm, double max_norm)
{
    const float recip = 1.0f / (norm + 1e-6f);
    const float coef = recip * (float)max_norm;
    return coef < 1.0f ? coef : 1.0f;
}
