# part7.sh - run-all.sh --part 7 (sourced by it): stages on one GPU and
# what else a plan changes: fp32 1, 2 and 4 stages on cuda:0 with the same
# micro-batches (batch B in micro-batches of 32; goal: 2 and 4 stages at
# least 0.95 of 1 stage), cuDNN's heuristic algorithms (PP_CUDNN_FIND=0)
# against measured ones, bf16 2 and 4 stages at batch B, and two
# data-parallel replicas sharing cuda:0 in one process (a thread each; NCCL
# is not used for two ranks on one GPU, so their gradients are summed
# through the host).
#   speed (330 s)
# shellcheck shell=bash disable=SC2154

part7() {
    cur_part=7
    local map b1=$batch rt sv
    map=$(map_all)
    section speed 330
    local split=32 s one="" ips_s
    [ $dry = 1 ] && split=2
    echo "== stages on one GPU: 1, 2 and 4 stages, batch $batch in micro-batches of $split"
    plan_for r50-1stage-split$split "$batch" $split "$steps" "$size" "$stages1"
    plan_for r50-2stage-split$split "$batch" $split "$steps" "$size" "$stages2"
    plan_for r50-4stage-split$split "$batch" $split "$steps" "$size" "$stages4"
    for s in 1 2 4; do
        if pr "${s}stage-split$split" "$res/r50-${s}stage-split$split.yaml" --steps "$steps" \
            --device-map "$map"; then
            ips_s=$pr_ips
            row "ours $s stage(s) on one GPU, split $split" ok "$pr_fig" "$last_cmd"
            if [ $s = 1 ]; then
                one=$ips_s
            else
                local rt; rt=$(ratio "$ips_s" "$one")
                row "  $s stages / 1 stage" "$(ge "$rt" 0.95)" \
                    "${rt:-?} (goal >= 0.95): ${ips_s:-?} / ${one:-?} img/s" ""
            fi
        else
            row "ours $s stage(s) on one GPU, split $split" "$(result_of $?)" "$pr_fig" "$last_cmd"
        fi
    done

    echo "== convolution algorithms: cuDNN's heuristics (PP_CUDNN_FIND=0) against measured"
    local ours
    ours=$(jget "$res/pr-1stage-full.out" 'j["images_per_s"]')
    if [ -z "$ours" ]; then
        plan_for r50-1stage-full "$batch" "$batch" "$steps" "$size" "$stages1"
        pr 1stage-full "$res/r50-1stage-full.yaml" --steps "$steps" --device-map "$map" &&
            ours=$pr_ips
    fi
    pr_env=(PP_CUDNN_FIND=0)
    if pr 1stage-full-heuristics "$res/r50-1stage-full.yaml" --steps "$steps" --device-map "$map"
    then
        row "ours fp32 1 stage, heuristic algorithms" ok "$pr_fig" "$last_cmd"
        local rt; rt=$(ratio "$ours" "$pr_ips")
        row "  measured / heuristic algorithms" "info" "${rt:-?}: ${ours:-?} / ${pr_ips:-?} img/s" ""
    else
        row "ours fp32 1 stage, heuristic algorithms" "$(result_of $?)" "$pr_fig" "$last_cmd"
    fi
    pr_env=()


    echo "== bf16, batch $b1: 2 and 4 stages on one GPU, micro-batches of $split"
    local one_bf16
    one_bf16=$(jget "$res/pr-1stage-b$b1-bf16.out" 'j["images_per_s"]')
    for s in 2 4; do
        sv=stages$s
        plan_for "r50-${s}stage-b$b1-split$split-bf16" "$b1" $split "$steps" "$size" "${!sv}" bf16
        if pr "${s}stage-b$b1-split$split-bf16" "$res/r50-${s}stage-b$b1-split$split-bf16.yaml" \
            --steps "$steps" --device-map "$map"; then
            row "ours bf16 $s stages on one GPU, batch $b1, split $split" ok "$pr_fig" "$last_cmd"
            rt=$(ratio "$pr_ips" "$one_bf16")
            row "  $s stages / 1 stage (whole batch), bf16, batch $b1" info \
                "${rt:-?}: ${pr_ips:-?} / ${one_bf16:-?} img/s" ""
        else
            row "ours bf16 $s stages on one GPU, batch $b1, split $split" "$(result_of $?)" \
                "$pr_fig" "$last_cmd"
        fi
    done

    echo "== two data-parallel replicas sharing cuda:0 in one process"
    plan_for "r50-2rep-b$b1-bf16" "$b1" "$((b1 / 2))" "$steps" "$size" \
        "  - {device: [cuda:0, cuda:0], layers: [conv1, bn1, relu, maxpool, layer1, layer2, layer3, layer4, avgpool, fc]}" bf16
    sed -i 's/^stages:$/replicas: 2\nstages:/' "$res/r50-2rep-b$b1-bf16.yaml"
    if pr "2rep-b$b1-bf16" "$res/r50-2rep-b$b1-bf16.yaml" --steps "$steps" --device-map "$map"; then
        rt=$(ratio "$pr_ips" "$one_bf16")
        row "ours bf16 2 replicas on one GPU in one process, batch $b1" ok \
            "$pr_fig; ${rt:-?} of 1 replica's ${one_bf16:-?} img/s (part 4's or 5's run)" "$last_cmd"
    else
        row "ours bf16 2 replicas on one GPU in one process, batch $b1" "$(result_of $?)" \
            "$pr_fig" "$last_cmd"
    fi
}
