/*
 * pieces.h - the tasks of a multi-tensor kernel (internal to runtime/cpu):
 * each of count tensors is cut in pieces of a fixed number of elements (its
 * last piece shorter), numbered over the tensors in order, so that one
 * pp_cpu_parallel job covers every tensor whatever their sizes and a piece's
 * elements depend on the shapes alone (workers.h's determinism contract).
 */
#ifndef PP_CPU_PIECES_H
#define PP_CPU_PIECES_H

#include <stdint.h>

#define PP_CPU_PIECES_MAX 256 /* tensors of one job: the op layer's chunk */

typedef struct pp_cpu_pieces {
    int count;
    int64_t piece;                       /* elements of a piece, > 0 */
    const int64_t *sizes;                /* (count) elements of each tensor */
    int64_t first[PP_CPU_PIECES_MAX + 1]; /* pieces before tensor i; first[count]: all */
} pp_cpu_pieces;

/* Numbers the pieces of count (<= PP_CPU_PIECES_MAX) tensors of sizes[i]
 * elements (empty ones have none). */
static inline void pp_cpu_pieces_init(pp_cpu_pieces *p, int count, const int64_t *sizes,
                                      int64_t piece)
{
    p->count = count;
    p->piece = piece;
    p->sizes = sizes;
    p->first[0] = 0;
    for (int i = 0; i < count; i++) p->first[i + 1] = p->first[i] + (sizes[i] + piece - 1) / piece;
}

/* Piece t (in [0, first[count])): its tensor *i and elements [*lo, *hi). */
static inline void pp_cpu_piece_of(const pp_cpu_pieces *p, int64_t t, int *i, int64_t *lo,
                                   int64_t *hi)
{
    int a = 0, b = p->count - 1;
    while (a < b) { /* the last tensor whose first piece is <= t */
        const int mid = (a + b + 1) / 2;
        if (p->first[mid] <= t)
            a = mid;
        else
            b = mid - 1;
    }
    *i = a;
    *lo = (t - p->first[a]) * p->piece;
    *hi = *lo + p->piece < p->sizes[a] ? *lo + p->piece : p->sizes[a];
}

#endif
