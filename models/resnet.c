/* resnet.c - unit specs of resnet18/34/50/101/152, as torchvision builds them. */
#include "models/resnet.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct arch {
    int depth;
    bool bottleneck;
    int blocks[4];
} arch;

static const arch archs[] = {
    {18, false, {2, 2, 2, 2}},  {34, false, {3, 4, 6, 3}},  {50, true, {3, 4, 6, 3}},
    {101, true, {3, 4, 23, 3}}, {152, true, {3, 8, 36, 3}},
};

static pp_unit_spec simple(pp_unit_kind kind, const char *name, int c)
{
    pp_unit_spec s = {.kind = kind, .in_c = c, .out_c = c};
    snprintf(s.name, sizeof s.name, "%s", name);
    return s;
}

pp_status pp_resnet_units(const pp_model_config *cfg, pp_unit_spec **specs, int *n, pp_error *err)
{
    *specs = NULL;
    *n = 0;
    if (cfg->kind != PP_MODEL_RESNET)
        return pp_error_set(err, PP_ERR_INPUT, "model '%s' is not a ResNet", cfg->name);
    const arch *a = NULL;
    for (size_t i = 0; i < sizeof archs / sizeof archs[0]; i++)
        if (archs[i].depth == cfg->depth) a = &archs[i];
    if (!a)
        return pp_error_set(err, PP_ERR_INPUT, "ResNet depth %d is not one of 18, 34, 50, 101, 152",
                            cfg->depth);
    if (cfg->num_classes < 1 || cfg->in_channels < 1)
        return pp_error_set(err, PP_ERR_INPUT,
                            "model needs num_classes >= 1 and in_channels >= 1 (got %d, %d)",
                            cfg->num_classes, cfg->in_channels);
    int total = 6 + a->blocks[0] + a->blocks[1] + a->blocks[2] + a->blocks[3];
    pp_unit_spec *s = calloc((size_t)total, sizeof *s);
    if (!s) return pp_error_set(err, PP_ERR_OOM, "out of host memory (unit list)");
    const bool cifar = cfg->stem == PP_STEM_CIFAR;
    int k = 0;
    s[k] = simple(PP_UNIT_CONV, "conv1", cfg->in_channels);
    s[k].out_c = 64;
    s[k].kernel = cifar ? 3 : 7;
    s[k].stride = cifar ? 1 : 2;
    s[k].pad = cifar ? 1 : 3;
    k++;
    s[k++] = simple(PP_UNIT_BN, "bn1", 64);
    s[k++] = simple(PP_UNIT_RELU, "relu", 64);
    s[k] = simple(cifar ? PP_UNIT_IDENTITY : PP_UNIT_MAXPOOL, "maxpool", 64);
    if (!cifar) {
        s[k].kernel = 3;
        s[k].stride = 2;
        s[k].pad = 1;
    }
    k++;
    const int expansion = a->bottleneck ? 4 : 1;
    int inplanes = 64;
    for (int layer = 0; layer < 4; layer++) {
        int planes = 64 << layer;
        for (int b = 0; b < a->blocks[layer]; b++) {
            pp_unit_spec *u = &s[k++];
            u->kind = a->bottleneck ? PP_UNIT_BOTTLENECK : PP_UNIT_BASIC;
            snprintf(u->name, sizeof u->name, "layer%d.%d", layer + 1, b);
            u->in_c = inplanes;
            u->planes = planes;
            u->out_c = planes * expansion;
            u->stride = (b == 0 && layer > 0) ? 2 : 1;
            u->downsample = b == 0 && (u->stride != 1 || inplanes != u->out_c);
            u->zero_last_bn = cfg->zero_init_residual;
            inplanes = u->out_c;
        }
    }
    s[k++] = simple(PP_UNIT_AVGPOOL, "avgpool", inplanes);
    s[k] = simple(PP_UNIT_FC, "fc", inplanes);
    s[k++].out_c = cfg->num_classes;
    *specs = s;
    *n = k;
    return PP_OK;
}
