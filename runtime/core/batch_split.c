/* batch_split.c - the micro-batch rule (batch_split.h). */
#include "batch_split.h"

int pp_batch_split_count(int batch, int split_size, int micro_batches)
{
    return split_size > 0 ? (batch + split_size - 1) / split_size : micro_batches;
}

int pp_batch_split_sizes(int batch, int split_size, int micro_batches, int *sizes)
{
    int m = pp_batch_split_count(batch, split_size, micro_batches);
    if (split_size > 0) {
        for (int i = 0; i < m; i++) sizes[i] = i + 1 < m ? split_size : batch - split_size * (m - 1);
        return split_size;
    }
    int base = batch / m, extra = batch % m;
    for (int i = 0; i < m; i++) sizes[i] = base + (i < extra);
    return base + (extra > 0);
}
