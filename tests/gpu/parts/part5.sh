# part5.sh - run-all.sh --part 5 (sourced by it): bf16 correctness and
# memory: the bf16 cross-check on cuda:0 (tests/torch/bf16_check.py: ours
# within 3x PyTorch autocast's error against float64, 1, 2 and 4 stages),
# then the peak memory per stage of bf16 against fp32 (--json peak_bytes, a
# device's high-water mark: stages sharing one GPU share one figure) at
# batch B, 1 stage whole batch and 2 and 4 stages in micro-batches of 32;
# then how far PyTorch's own fp32 ResNet step is from float64, on the CPU
# and on cuda:0 (tests/gpu/conditioning.py: what the CUDA tests' tolerances
# stand on).
#   correctness (180 s), memory (125 s), diagnostics (45 s)
# shellcheck shell=bash disable=SC2154

part5() {
    cur_part=5
    local map split=32 b1=$batch s sv bj fj fig
    local -A cmd=()
    map=$(map_all)
    [ $dry = 1 ] && split=2
    section correctness 180
    xcheck 1,2,4 175

    section memory 125
    echo "== peak memory per stage, bf16 against fp32 (batch $b1)"
    bf16_runs_of "$b1" "$split"
    cmd[bf16s1]=$(cat "$res/pr-1stage-b$b1-bf16.cmd" 2>/dev/null)
    for s in 2 4; do
        cmd[bf16s$s]=$(cat "$res/pr-${s}stage-b$b1-split$split-bf16.cmd" 2>/dev/null)
    done
    plan_for "r50-1stage-b$b1-fp32" "$b1" "$b1" 3 "$size" "$stages1"
    pr "1stage-b$b1-fp32" "$res/r50-1stage-b$b1-fp32.yaml" --steps 3 --device-map "$map" \
        && cmd[fp32s1]=$last_cmd
    for s in 2 4; do
        sv=stages$s
        plan_for "r50-${s}stage-b$b1-split$split-fp32" "$b1" $split 3 "$size" "${!sv}"
        pr "${s}stage-b$b1-split$split-fp32" "$res/r50-${s}stage-b$b1-split$split-fp32.yaml" \
            --steps 3 --device-map "$map" && cmd[fp32s$s]=$last_cmd
    done
    for s in 1 2 4; do
        if [ $s = 1 ]; then
            bj=$res/pr-1stage-b$b1-bf16.out fj=$res/pr-1stage-b$b1-fp32.out
        else
            bj=$res/pr-${s}stage-b$b1-split$split-bf16.out fj=$res/pr-${s}stage-b$b1-split$split-fp32.out
        fi
        fig=$(mem_fig "$bj" "$fj")
        echo "$s stage(s): ${fig:-no figure}"
        local verdict=ok why_not="a run above failed"
        if [ -z "$fig" ]; then
            verdict="FAIL(no figure)"
            if grep -qs 'time budget spent' "${bj%.out}.log" "${fj%.out}.log"; then
                verdict=SKIPPED why_not="time budget spent"
            fi
        fi
        row "peak memory bf16 / fp32, batch $b1, $s stage(s)$([ $s = 1 ] || echo ", split $split")" \
            "$verdict" "${fig:-$why_not}" "${cmd[bf16s$s]:-?}; ${cmd[fp32s$s]:-?}"
    done

    section diagnostics 45
    echo "== PyTorch's fp32 ResNet step against float64 (the CUDA tests' conditioning)"
    local cdev=cuda:0 rc
    [ $dry = 1 ] && cdev=cpu
    run conditioning 40 "${pyrun[@]}" "$bundle/gpu/conditioning.py" --device "$cdev"
    rc=$?
    cat "$res/conditioning.out" 2>/dev/null
    if [ $rc = 0 ]; then
        row "PyTorch fp32 step against float64$([ "$cdev" = cpu ] || echo " (and $cdev against cpu)")" ok \
            "$(tail -n 1 "$res/conditioning.out")" "$last_cmd"
    else
        row "PyTorch fp32 step against float64" "$(result_of $rc)" "$(why $rc conditioning)" \
            "$last_cmd"
    fi
}
