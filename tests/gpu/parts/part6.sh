# part6.sh - run-all.sh --part 6 (sourced by it): the graph API support
# probe: for each of ResNet-50's convolution geometries at the batch size,
# every direction in bf16 and fp32 (IEEE), NHWC and NCHW, what cuDNN's graph
# API offers (engines found, refused by numerical notes, over the workspace
# cap with the most one wanted, timed; the one chosen and its time), from
# bin/gconv_probe (its own budget: 300 s); its table in gconv-probe.out.
#   diagnostics (330 s)
# shellcheck shell=bash disable=SC2154

part6() {
    cur_part=6
    section diagnostics 330
    echo "== graph API support probe: ResNet-50's convolutions, batch $batch (cuDNN backend API)"
    local probe=$bin/gconv_probe rc last
    if [ ! -x "$probe" ]; then
        if [ $dry = 1 ]; then
            row "graph API probe" "SKIPPED" "bin/gconv_probe not built (no CUDA backend)" ""
        else
            row "graph API probe" "MISSING" "bin/gconv_probe (bundle.sh collects it from the CUDA build)" ""
        fi
        return
    fi
    run gconv-probe 330 "$probe" "$batch" --budget 300
    rc=$?
    cat "$res/gconv-probe.out" 2>/dev/null
    last=$(tail -n 1 "$res/gconv-probe.out" 2>/dev/null)
    case $rc in
        0) row "graph API probe, batch $batch (table: gconv-probe.out)" ok "$last" "$last_cmd" ;;
        77) row "graph API probe" "SKIPPED" "no CUDA device visible" "$last_cmd" ;;
        *) row "graph API probe, batch $batch (table: gconv-probe.out)" "$(result_of $rc)" \
            "$last; $(why $rc gconv-probe)" "$last_cmd" ;;
    esac
}

