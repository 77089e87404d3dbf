# part10.sh - run-all.sh --part 10 (sourced by it): one steady step's kernels
# under ncu (PP_PROFILE_STEP=5 of 6 steps, ncu --profile-from-start off
# --clock-control none --cache-control none: the clocks and caches of a plain
# run, no GPU setting changed), grouped by family by tests/gpu/kernel_table.py,
# for bf16 and fp32 at batch B, 1 stage, and the GPU busy fraction (kernel ms
# / median step ms of the same plan without ncu, run first unless an earlier
# part ran it into the same results folder); the bf16 step's kernels also per
# layer and pass, by the profiler ranges they were launched in (ktable_ranges,
# common.sh). Rows read MISSING without ncu.
#   diagnostics (330 s)
# shellcheck shell=bash disable=SC2154

part10() {
    cur_part=10
    local map b1=$batch split=32 ms_bf16 ms_fp32
    map=$(map_all)
    [ $dry = 1 ] && split=2
    section diagnostics 330
    tools
    if [ ! -s "$res/pr-1stage-b$b1-bf16.out" ]; then
        plan_for "r50-1stage-b$b1-bf16" "$b1" "$b1" "$steps" "$size" "$stages1" bf16
        pr "1stage-b$b1-bf16" "$res/r50-1stage-b$b1-bf16.yaml" --steps "$steps" \
            --device-map "$map" --layout auto >/dev/null
    fi
    if [ ! -s "$res/pr-1stage-b$b1-fp32.out" ]; then
        plan_for "r50-1stage-b$b1-fp32" "$b1" "$b1" "$steps" "$size" "$stages1"
        pr "1stage-b$b1-fp32" "$res/r50-1stage-b$b1-fp32.yaml" --steps "$steps" \
            --device-map "$map" >/dev/null
    fi
    ms_bf16=$(jget "$res/pr-1stage-b$b1-bf16.out" 'j["step_ms"]["median"]')
    ms_fp32=$(jget "$res/pr-1stage-b$b1-fp32.out" 'j["step_ms"]["median"]')
    echo "== kernels per step (ncu), 1 stage, batch $b1"
    ktable_ranges=1 # and per layer and pass (layer3.* forward, ...)
    ktable "bf16-b$b1" "bf16 1 stage, batch $b1" "$res/r50-1stage-b$b1-bf16.yaml" "$ms_bf16" \
        "$(cat "$res/pr-1stage-b$b1-bf16.cmd" 2>/dev/null)"
    ktable_ranges=0
    ktable "fp32-b$b1" "fp32 1 stage, batch $b1" "$res/r50-1stage-b$b1-fp32.yaml" "$ms_fp32" \
        "$(cat "$res/pr-1stage-b$b1-fp32.cmd" 2>/dev/null)"
}
