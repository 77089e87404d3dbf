# part2.sh - run-all.sh --part 2 (sourced by it): what the host does per
# steady-state step, from the LD_PRELOAD interposer (tools/libcuda_count.so):
# CUDA allocation calls (goal: none), host waits (goal: at most one per
# device), graph and kernel launches, and images/s with CUDA graphs on and
# off, for 1 and 2 stages on one GPU (micro-batches of 32). Each pair of runs
# (4 and 9 steps; the first four warm up and capture) measures its own
# convolution algorithms. First the same for GPT-2 124M (batch 8 x 1024,
# bf16, 1 stage, graphs on; 3 and 6 steps).
#   host (330 s)  GPT-2; ResNet-50 1 stage graphs on and off, then 2 stages
# shellcheck shell=bash disable=SC2154

part2() {
    cur_part=2
    local split=32 s g ips_on ips_off rt
    [ $dry = 1 ] && split=2
    section host 330
    echo "== CUDA calls per steady-state step (LD_PRELOAD interposer)"
    # GPT-2 first (ResNet-50's counts have run on a GPU before): its bf16
    # step with cuDNN's fused attention and cuBLASLt, graphs on
    gpt2_sizes
    gpt2_plan gpt2-counts-bf16 bf16
    counts 1 on 3 6 "$res/gpt2-counts-bf16.yaml" "GPT-2 $g_what, bf16, 1 stage" sequences/s
    for s in 1 2; do
        ips_on="" ips_off=""
        for g in on off; do
            counts_ips=""
            counts "$s" "$g" 4 9
            [ "$g" = on ] && ips_on=$counts_ips || ips_off=$counts_ips
        done
        rt=$(ratio "$ips_on" "$ips_off")
        row "  graphs on / off, $s stage(s)" "$([ -n "$rt" ] && echo info || echo 'FAIL(no figure)')" \
            "${rt:-?}: ${ips_on:-?} / ${ips_off:-?} img/s" ""
    done
}
