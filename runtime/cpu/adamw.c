/*
 * adamw.c - CPU torch.optim.AdamW over several parameter tensors
 * (pp_adamw_update_multi): every element alone, each product, quotient,
 * square root and sum rounded on its own in ops.h's order (ISO C mode: the
 * compiler fuses nothing into FMAs), so the CUDA kernel gives the same
 * bits. Pieces of every tensor run on the device's
 * pool.
 */
#include <math.h>

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
