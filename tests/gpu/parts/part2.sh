# part2.sh - run-all.sh --part 2 (sourced by it): what the host does per
# steady-state step, from the LD_PRELOAD interposer (tools/libcuda_count.so):
# CUDA allocation calls (goal: none), host waits (goal: at most one per
# device), graph and kernel launches, and images/s with CUDA graphs on and
# off, for 1 and 2 stages on one GPU (micro-batches of 32). Each pair of runs
# (4 and 9 steps; the first four warm up and capture) measures its own
# convolution algorithms.
#   host (330 s)  1 stage graphs on and off, then 2 stages on and off
# shellcheck shell=bash disable=SC2154

part2() {
    cur_part=2
    local split=32 s g ips_on ips_off rt
    [ $dry = 1 ] && split=2
    section host 330
    echo "== CUDA calls per steady-state step (LD_PRELOAD interposer)"
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
