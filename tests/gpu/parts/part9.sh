# part9.sh - run-all.sh --part 9 (sourced by it): compute-sanitizer over the
# native kernels' test (bin/test_cuda_native) and a 2-stage bf16 ResNet-18
# plan (32x32, batch 4, 2 steps, cuDNN's heuristic algorithms): memcheck,
# racecheck and synccheck (goal: 0 errors each), then initcheck over the plan.
# Rows read MISSING where the tool is not found.
#   diagnostics (330 s)
# shellcheck shell=bash disable=SC2154

part9() {
    cur_part=9
    local map tool
    map=$(map_all)
    section diagnostics 330
    tools
    tiny2 r18-2stage-tiny-bf16 bf16
    for tool in memcheck racecheck synccheck initcheck; do
        if [ $tool != initcheck ]; then
            san_env=(-u PP_CUDNN_CACHE)
            san $tool native "bin/test_cuda_native" "$bin/test_cuda_native"
        fi
        san_env=(-u PP_CUDNN_CACHE PP_CUDNN_FIND=0)
        san $tool plan "bf16 resnet18 plan, 2 stages, 32x32, batch 4" \
            "$bin/pipeline-run" "$res/r18-2stage-tiny-bf16.yaml" --steps 2 --device-map "$map" --json
    done
    san_env=()
}
