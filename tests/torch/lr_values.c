/*
 * lr_values.c - prints pp_lr_at for a schedule given on the command line, one
 * value per line, for lr_check.py to compare with torch.optim.lr_scheduler.
 *
 *   lr_values PERIODS constant LR
 *   lr_values PERIODS step LR GAMMA M1 [M2 ...]
 *   lr_values PERIODS cosine LR TOTAL WARMUP START_FACTOR ETA_MIN
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/train/lr_schedule.h"

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: lr_values PERIODS constant|step|cosine LR ...\n");
        return 2;
    }
    int periods = atoi(argv[1]);
    pp_lr_schedule s = {.base_lr = atof(argv[3])};
    if (strcmp(argv[2], "step") == 0 && argc >= 5) {
        s.kind = PP_LR_STEP;
        s.gamma = atof(argv[4]);
        for (int i = 5; i < argc && s.n_milestones < PP_LR_MAX_MILESTONES; i++)
            s.milestones[s.n_milestones++] = atoi(argv[i]);
    } else if (strcmp(argv[2], "cosine") == 0 && argc == 8) {
        s.kind = PP_LR_COSINE;
        s.total = atoi(argv[4]);
        s.warmup = atoi(argv[5]);
        s.warmup_start_factor = atof(argv[6]);
        s.eta_min = atof(argv[7]);
    } else if (strcmp(argv[2], "constant") != 0) {
        fprintf(stderr, "lr_values: bad arguments\n");
        return 2;
    }
    pp_error err;
    if (pp_lr_schedule_check(&s, &err) != PP_OK) {
        fprintf(stderr, "lr_values: %s\n", err.msg);
        return 2;
    }
    for (int t = 0; t < periods; t++) printf("%.17g\n", pp_lr_at(&s, t));
    return 0;
}
