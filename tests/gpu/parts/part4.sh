# part4.sh - run-all.sh --part 4 (sourced by it): bf16 mixed precision (NHWC
# on CUDA) against PyTorch: ours 1 stage (--layout auto) and PyTorch eager
# bf16 autocast channels_last (cudnn.benchmark on) at batch 2B and B (256,
# 128), torch.compile at 2B (goals: ours / eager >= 1.35 at 2B, 1.15 at B,
# ours / compile >= 1.10), then ours --layout nchw at 2B (what NHWC brings), and ours with
# PP_CUDA_BN_SCALAR=1 at 2B (what the batch norm's 8-channel kernels bring),
# with PP_CUDA_CONV_WS_MB=4096 at 2B (whether the graph API's plans that
# want more than the default 512 MiB of workspace are faster: part 6's probe
# counts them per convolution), and with PP_CUDA_CONV_PLANS=10 at 2B (10 of
# the graph API's plans timed per convolution, cudnn.benchmark's default
# limit, against our 4).
#   speed (370 s)
# shellcheck shell=bash disable=SC2154

# bf16_one B: ours bf16 1 stage at batch B (layout auto); sets bf16_ips[B].
declare -A bf16_ips=()
bf16_one() {
    local b=$1
    plan_for "r50-1stage-b$b-bf16" "$b" "$b" "$steps" "$size" "$stages1" bf16
    if pr "1stage-b$b-bf16" "$res/r50-1stage-b$b-bf16.yaml" --steps "$steps" \
        --device-map "$(map_all)" --layout auto; then
        bf16_ips[$b]=$pr_ips
        row "ours bf16 1 stage, batch $b, layout auto (NHWC on CUDA)" ok "$pr_fig" "$last_cmd"
    else
        row "ours bf16 1 stage, batch $b, layout auto (NHWC on CUDA)" "$(result_of $?)" \
            "$pr_fig" "$last_cmd"
    fi
}

# p4_variant B TAG VAR=VALUE WHAT [plain-first]: ours bf16 1 stage at batch
# B again with VAR=VALUE in the environment, and its ratio to the plain row's
# figure (with plain-first, the plain row's to its) as "  WHAT, bf16 batch B".
p4_variant() {
    local b=$1 tag=$2 env=$3 what=$4 order=${5:-} rt num den
    pr_env=("$env")
    if pr "1stage-b$b-bf16-$tag" "$res/r50-1stage-b$b-bf16.yaml" --steps "$steps" \
        --device-map "$(map_all)" --layout auto; then
        row "ours bf16 1 stage, batch $b, $env" ok "$pr_fig" "$last_cmd"
        num=$pr_ips den=${bf16_ips[$b]:-}
        [ "$order" = plain-first ] && num=${bf16_ips[$b]:-} den=$pr_ips
        rt=$(ratio "$num" "$den")
        row "  $what, bf16 batch $b" info "${rt:-?}: ${num:-?} / ${den:-?} img/s" ""
    else
        row "ours bf16 1 stage, batch $b, $env" "$(result_of $?)" "$pr_fig" "$last_cmd"
    fi
    pr_env=()
}

part4() {
    cur_part=4
    local map tdev=cuda:0 b b1=$batch b2=$((batch * 2)) rt
    map=$(map_all)
    [ $dry = 1 ] && tdev=cpu
    section speed 370
    for b in $b2 $b1; do
        echo "== bf16 throughput, batch $b, ${size}x$size: pipeline-run vs PyTorch eager"
        bf16_one "$b"
        if te "eager-bf16-cl-b$b" "torch eager bf16 autocast channels_last, batch $b" \
            --batch "$b" --size "$size" --cudnn-benchmark 1 --device "$tdev" --precision bf16 \
            --channels-last; then
            local goal=1.15
            [ "$b" = "$b2" ] && goal=1.35
            vs_torch "torch eager bf16 channels_last, batch $b" "${bf16_ips[$b]:-}" "$te_ips" "$goal"
        fi
    done
    echo "== torch.compile bf16 channels_last, batch $b2"
    if te "compile-bf16-cl-b$b2" "torch.compile bf16 autocast channels_last, batch $b2" \
        --batch "$b2" --size "$size" --cudnn-benchmark 1 --device "$tdev" --precision bf16 \
        --channels-last --compile; then
        vs_torch "torch.compile bf16 channels_last, batch $b2" "${bf16_ips[$b2]:-}" "$te_ips" 1.10
    fi
    echo "== bf16, batch $b2: --layout nchw (what NHWC brings)"
    if pr "1stage-b$b2-bf16-nchw" "$res/r50-1stage-b$b2-bf16.yaml" --steps "$steps" \
        --device-map "$map" --layout nchw; then
        row "ours bf16 1 stage, batch $b2, --layout nchw" ok "$pr_fig" "$last_cmd"
        rt=$(ratio "${bf16_ips[$b2]:-}" "$pr_ips")
        row "  NHWC (auto) / NCHW, batch $b2" info "${rt:-?}: ${bf16_ips[$b2]:-?} / ${pr_ips:-?} img/s" ""
    else
        row "ours bf16 1 stage, batch $b2, --layout nchw" "$(result_of $?)" "$pr_fig" "$last_cmd"
    fi
    echo "== bf16, batch $b2: PP_CUDA_BN_SCALAR=1 (batch norm one channel per thread)"
    p4_variant "$b2" bn-scalar PP_CUDA_BN_SCALAR=1 "batch norm 8 channels / 1 channel per thread" \
        plain-first
    echo "== bf16, batch $b2: PP_CUDA_CONV_WS_MB=4096 (whether the 512 MiB cap keeps plans out)"
    p4_variant "$b2" ws4096 PP_CUDA_CONV_WS_MB=4096 "workspace 4 GiB / 512 MiB"
    echo "== bf16, batch $b2: PP_CUDA_CONV_PLANS=10 (cudnn.benchmark's limit: more plans timed)"
    p4_variant "$b2" plans10 PP_CUDA_CONV_PLANS=10 "graph API plans timed 10 / 4"
}
