/*
 * adamw.c - CPU torch.optim.AdamW over several parameter tensors
 * (pp_adamw_update_multi): every element alone, each product, quotient,
 * square root and sum rounded on its own in ops.h's order (ISO C mode: the
 * compiler fuses nothing into FMAs), so the CUDA kernel gives the same
 * bits. Where the build targets AVX, eight elements at a time by the same
 * operations (sqrtf's error reporting keeps the compiler from vectorising
 * the plain loop); the same bits. Pieces of every tensor run on the
 * device's pool.
 */
#include <math.h>
#ifdef __AVX__
#include <immintrin.h>
#endif

#include "kernels.h"
#include "pieces.h"
#include "workers.h"

#define PIECE ((int64_t)1 << 16)

typedef struct adamw_job {
    const pp_adamw_scalars *s;
    pp_cpu_pieces pieces;
    float *const *param, *const *m, *const *v;
    const float *const *grad;
} adamw_job;

#ifdef __AVX__
/* Elements [lo, hi) eight at a time, the scalar loop's operations in its
 * order (every one correctly rounded, none fused): its bits. Returns where
 * the scalar loop goes on. */
static int64_t adamw_avx(const pp_adamw_scalars *s, float *p, const float *grad, float *m,
                         float *v, int64_t lo, int64_t hi)
{
    const __m256 gs = _mm256_set1_ps(s->grad_scale), decay = _mm256_set1_ps(s->decay);
    const __m256 b1 = _mm256_set1_ps(s->b1), c1 = _mm256_set1_ps(s->c1);
    const __m256 b2 = _mm256_set1_ps(s->b2), c2 = _mm256_set1_ps(s->c2);
    const __m256 bc2 = _mm256_set1_ps(s->bc2), eps = _mm256_set1_ps(s->eps);
    const __m256 step = _mm256_set1_ps(s->step_size);
    int64_t k = lo;
    for (; k + 8 <= hi; k += 8) {
        const __m256 g = _mm256_mul_ps(_mm256_loadu_ps(grad + k), gs);
        const __m256 pk = _mm256_mul_ps(_mm256_loadu_ps(p + k), decay);
        const __m256 mk = _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(m + k), b1),
                                        _mm256_mul_ps(c1, g));
        const __m256 vk = _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(v + k), b2),
                                        _mm256_mul_ps(_mm256_mul_ps(c2, g), g));
        const __m256 den = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(vk), bc2), eps);
        _mm256_storeu_ps(m + k, mk);
        _mm256_storeu_ps(v + k, vk);
        _mm256_storeu_ps(p + k, _mm256_sub_ps(pk, _mm256_mul_ps(step, _mm256_div_ps(mk, den))));
    }
    return k;
}
#endif

static void adamw_task(void *arg, int64_t t, int worker)
{
    const adamw_job *j = arg;
    const pp_adamw_scalars s = *j->s;
    (void)worker;
    int i;
    int64_t lo, hi;
    pp_cpu_piece_of(&j->pieces, t, &i, &lo, &hi);
    float *p = j->param[i], *m = j->m[i], *v = j->v[i];
    const float *grad = j->grad[i];
#ifdef __AVX__
    lo = adamw_avx(&s, p, grad, m, v, lo, hi);
#endif
    for (int64_t k = lo; k < hi; k++) {
        const float g = grad[k] * s.grad_scale;
        const float pk = p[k] * s.decay;
        const float mk = m[k] * s.b1 + s.c1 * g;
        const float vk = v[k] * s.b2 + (s.c2 * g) * g;
        const float den = sqrtf(vk) / s.bc2 + s.eps;
        m[k] = mk;
        v[k] = vk;
        p[k] = pk - s.step_size * (mk / den);
    }
}

pp_status pp_cpu_adamw_update_multi(pp_exec *ex, const pp_adamw_scalars *s, int count,
                                    float *const *param, const float *const *grad,
                                    float *const *exp_avg, float *const *exp_avg_sq,
                                    const int64_t *sizes, pp_error *err)
{
    if (count > PP_CPU_PIECES_MAX)
        return pp_error_set(err, PP_ERR_INVALID, "adamw: %d tensors in one call (at most %d)",
                            count, PP_CPU_PIECES_MAX);
    adamw_job j = {.s = s, .param = param, .grad = grad, .m = exp_avg, .v = exp_avg_sq};
    pp_cpu_pieces_init(&j.pieces, count, sizes, PIECE);
    pp_cpu_parallel(ex, j.pieces.first[count], adamw_task, &j);
    return PP_OK;
}
