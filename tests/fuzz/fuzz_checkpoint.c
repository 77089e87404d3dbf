/*
 * fuzz_checkpoint.c - libFuzzer target for the checkpoint reader
 * (runtime/io/checkpoint.h): any bytes, written to a file, go through
 * pp_checkpoint_list, pp_checkpoint_verify and pp_checkpoint_load (of one
 * f32 tensor "w" of 4 elements on cpu:0, other tensors allowed). A failure
 * must be PP_ERR_INPUT; a header that lists must describe data inside the
 * file, each entry's bytes its shape's, names sorted and distinct; verify
 * may pass only where list does. Any violation aborts. Built by
 * tests/fuzz/run.sh checkpoint; corpus_main.c replays files without
 * libFuzzer (test fuzz_checkpoints).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/core/device.h"
#include "runtime/core/tensor.h"
#include "runtime/io/checkpoint.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fail(const char *what, const char *detail)
{
    fprintf(stderr, "fuzz_checkpoint: %s\n%s\n", what, detail ? detail : "");
    abort();
}

static char g_path[4096];
static pp_registry *g_reg;
static pp_tensor g_w;

static void cleanup(void)
{
    unlink(g_path);
    pp_tensor_free(&g_w);
    pp_registry_free(g_reg);
}

static void setup(void)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(g_path, sizeof g_path, "%s/fuzz-checkpoint-%d.safetensors",
             tmp && tmp[0] ? tmp : "/tmp", (int)getpid());
    pp_error err;
    pp_device_ctx *cpu;
    if (pp_registry_new(&g_reg, &err) != PP_OK ||
        pp_registry_get(g_reg, (pp_device_id){PP_DEVICE_CPU, 0}, &cpu, &err) != PP_OK ||
        pp_tensor_alloc(&g_w, cpu, PP_F32, 1, (int64_t[]){4}, &err) != PP_OK)
        fail("setup", err.msg);
    atexit(cleanup);
}

static void check_status(pp_status s, const pp_error *err, const char *what)
{
    if (s != PP_OK && s != PP_ERR_INPUT) fail(what, err->msg);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!g_path[0]) setup();
    FILE *f = fopen(g_path, "wb");
    if (!f || fwrite(data, 1, size, f) != size || fclose(f) != 0) fail("cannot write", g_path);
    pp_checkpoint_info info;
    pp_error err;
    const pp_status listed = pp_checkpoint_list(g_path, &info, &err);
    check_status(listed, &err, "list: unexpected status");
    if (listed == PP_OK) {
        if (info.data_offset < 8 || info.data_offset > size) fail("data outside the file", NULL);
        for (size_t i = 0; i < info.n; i++) {
            const pp_checkpoint_entry *e = &info.entries[i];
            int64_t numel = 1;
            for (int k = 0; k < e->ndim; k++) numel *= e->shape[k];
            if (e->begin > e->end || e->end > size - info.data_offset)
                fail("an entry's data outside the file", e->name);
            if ((uint64_t)numel * pp_dtype_size(e->dtype) != e->end - e->begin)
                fail("an entry's bytes are not its shape's", e->name);
            if (i > 0 && strcmp(info.entries[i - 1].name, e->name) >= 0)
                fail("entries not sorted and distinct", e->name);
            if (pp_checkpoint_info_find(&info, e->name) != e) fail("find misses", e->name);
        }
        pp_checkpoint_info_free(&info);
    }
    pp_checkpoint_verify_result r;
    const pp_status verified = pp_checkpoint_verify(g_path, &r, &err);
    check_status(verified, &err, "verify: unexpected status");
    if (verified == PP_OK && listed != PP_OK) fail("verify passes what list refuses", NULL);
    const pp_ckpt_tensor want[1] = {{"w", &g_w}};
    const pp_checkpoint_load_options opts = {.allow_extra = true, .finite = true};
    const pp_status loaded = pp_checkpoint_load_with(g_path, want, 1, &opts, &err);
    check_status(loaded, &err, "load: unexpected status");
    if (loaded == PP_OK && listed != PP_OK) fail("load passes what list refuses", NULL);
    return 0;
}
