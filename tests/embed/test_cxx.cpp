// The public headers from C++: they compile as C++ (no C-only constructs in
// declarations), declare C linkage, and the library links and runs.
#include "pipeline/pipeline_run.h"

#include <cstdio>
#include <cstring>

static int failures = 0;

#define CHECK(cond)                                                       \
    do {                                                                  \
        if (!(cond)) {                                                    \
            std::fprintf(stderr, "%s:%d: CHECK(%s)\n", __FILE__, __LINE__, #cond); \
            failures++;                                                   \
        }                                                                 \
    } while (0)

int main()
{
    CHECK(std::strcmp(pp_version(), PP_VERSION_STRING) == 0);

    pp_error err;
    pp_error_clear(&err);
    pp_bpe *bpe = NULL; /* the tokenizer's declarations, from C++ */
    CHECK(pp_bpe_open("/nonexistent/vocab.json", "/nonexistent/merges.txt", &bpe, &err) ==
              PP_ERR_INPUT &&
          bpe == NULL && std::strstr(err.msg, "vocab.json") != NULL);
    CHECK(pp_bpe_open_json("/nonexistent/tokenizer.json", &bpe, &err) == PP_ERR_INPUT &&
          bpe == NULL && std::strstr(err.msg, "tokenizer.json") != NULL);
    CHECK(pp_bpe_open_files("/nonexistent/tokenizer.json", NULL, &bpe, &err) == PP_ERR_INPUT &&
          bpe == NULL && std::strstr(err.msg, "tokenizer.json") != NULL);
    const int sizes[4] = {2, 2, 2, 2};
    pp_schedule s;
    std::memset(&s, 0, sizeof s);
    CHECK(pp_schedule_build(&s, PP_SCHEDULE_1F1B, 3, 4, sizes, &err) == PP_OK);
    CHECK(pp_schedule_validate(&s, &err) == PP_OK);
    pp_schedule_free(&s);

    pp_registry *reg = NULL;
    CHECK(pp_registry_new(&reg, &err) == PP_OK);
    pp_device_id id;
    CHECK(pp_device_id_parse("cpu:1", &id, &err) == PP_OK);
    pp_device_ctx *dev = NULL;
    CHECK(pp_registry_get(reg, id, &dev, &err) == PP_OK);
    void *p = NULL;
    CHECK(pp_device_alloc(dev, 4096, &p, &err) == PP_OK && p != NULL);
    CHECK(pp_device_bytes_in_use(dev) == 4096);
    pp_device_free(dev, p, 4096);
    CHECK(pp_device_bytes_in_use(dev) == 0);

    const char plan[] = "model: resnet50\nstages:\n  - device: cpu:0\n    layers: [bogus]\n";
    pp_plan *pl = NULL;
    pp_diag diag;
    pp_diag_clear(&diag);
    CHECK(pp_plan_parse_string("inline.yaml", plan, sizeof plan - 1, &pl, &diag) != PP_OK);
    CHECK(pl == NULL && diag.count >= 1);
    pp_registry_free(reg);

    std::printf("%s\n", failures ? "FAILED" : "ok");
    return failures ? 1 : 0;
}
