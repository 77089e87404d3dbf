# quick.sh - run-all.sh --part quick (sourced by it): the most telling
# evidence first, after the libraries and GPU loaded (bin/gpu_versions, as
# every part), in five sections with a time budget each, within about six
# minutes of an H100 at the defaults (ResNet-50 at batch 128 and 224x224):
#   correctness (120 s)  the CUDA test suite, the one-step table (cuda_step,
#                        up to 90 s: its yardstick is six nudged CPU runs a
#                        table), the review's and native kernels'
#                        tests first, until its time is spent
#   correctness  (55 s)  the bf16 cross-check on cuda:0, 1 stage
#   speed       (145 s)  fp32 and TF32 at batch B, bf16 NHWC at 2B: ours, 1
#                        stage, against PyTorch eager (cudnn.benchmark on;
#                        bf16 channels_last autocast) measured here, with the
#                        goal ratios (fp32 and TF32 1.15, bf16 at 2B 1.35),
#                        and how many fp32 and TF32 convolutions chose cuDNN's
#                        graph API's plan
#   host         (35 s)  host waits, CUDA allocations and graph launches per
#                        steady step (the LD_PRELOAD interposer, 1 stage,
#                        micro-batches of 32, graphs on, cuDNN's heuristic
#                        algorithms: nothing measured in the first step)
#   diagnostics  (35 s)  compute-sanitizer memcheck over a 2-stage bf16
#                        ResNet-18 plan (32x32, batch 4)
# Steps: --steps and --torch-steps when given, else 8 and 8 (after 3 warm-up
# steps for PyTorch). Whatever a section cannot finish in its time reads
# SKIPPED in the table; the results are written either way.
# shellcheck shell=bash disable=SC2154

part_quick() {
    cur_part=quick
    local map tdev=cuda:0 b2=$((batch * 2)) qs=$steps
    # te (common.sh) reads tsteps and twarm: this part's own
    local tsteps=$tsteps twarm=$twarm
    map=$(map_all)
    [ $dry = 1 ] && tdev=cpu
    if [ $dry = 0 ]; then
        [ "$steps_given" = 1 ] || qs=8
        [ "$tsteps_given" = 1 ] || { tsteps=8; twarm=3; }
    fi

    section correctness 120
    echo "== the CUDA test suite, most telling first (quick: until 120 s are spent)"
    suite 90 cuda_step cuda_review cuda_native cuda_gconv cuda_ops cuda_streams nccl_np1 cuda_math cuda_pipeline
    row "CUDA test suite (quick)" "$(case $suite_fig in *" 0 failed"*) echo ok ;; *) echo FAIL ;; esac)" \
        "$suite_fig" ""

    section correctness 55
    xcheck 1 50

    section speed 145
    echo "== speed: ours 1 stage against PyTorch eager, same batch, size and precision"
    local ours
    plan_for r50-1stage-full "$batch" "$batch" "$qs" "$size" "$stages1"
    ours=""
    if pr 1stage-full "$res/r50-1stage-full.yaml" --steps "$qs" --device-map "$map"; then
        ours=$pr_ips
        row "ours fp32 1 stage, batch $batch" ok "$pr_fig" "$last_cmd"
    else
        row "ours fp32 1 stage, batch $batch" "$(result_of $?)" "$pr_fig" "$last_cmd"
    fi
    if te eager-fp32-bench1 "torch eager fp32, cudnn.benchmark=1, batch $batch" --batch "$batch" \
        --size "$size" --cudnn-benchmark 1 --device "$tdev"; then
        torch_precision=$(jget "$res/torch-eager-fp32-bench1.out" 'j["precision"]')
        vs_torch "torch eager fp32 (cudnn.benchmark on)" "$ours" "$te_ips" 1.15
    fi
    plan_for r50-1stage-full-tf32 "$batch" "$batch" "$qs" "$size" "$stages1" tf32
    ours=""
    if pr 1stage-full-tf32 "$res/r50-1stage-full-tf32.yaml" --steps "$qs" --device-map "$map"; then
        ours=$pr_ips
        row "ours tf32 1 stage, batch $batch" ok "$pr_fig" "$last_cmd"
    else
        row "ours tf32 1 stage, batch $batch" "$(result_of $?)" "$pr_fig" "$last_cmd"
    fi
    if te eager-tf32 "torch eager tf32, cudnn.benchmark=1, batch $batch" --batch "$batch" \
        --size "$size" --cudnn-benchmark 1 --device "$tdev" --precision tf32; then
        vs_torch "torch eager tf32" "$ours" "$te_ips" 1.15
    fi
    # which API each fp32 and tf32 convolution chose (the runs' PP_CUDNN_CACHE file)
    row "  graph API plans chosen, fp32" info "$(conv_apis fp32)" ""
    row "  graph API plans chosen, tf32" info "$(conv_apis tf32)" ""
    plan_for "r50-1stage-b$b2-bf16" "$b2" "$b2" "$qs" "$size" "$stages1" bf16
    ours=""
    if pr "1stage-b$b2-bf16" "$res/r50-1stage-b$b2-bf16.yaml" --steps "$qs" --device-map "$map" \
        --layout auto; then
        ours=$pr_ips
        row "ours bf16 1 stage, batch $b2, layout auto (NHWC on CUDA)" ok "$pr_fig" "$last_cmd"
    else
        row "ours bf16 1 stage, batch $b2, layout auto (NHWC on CUDA)" "$(result_of $?)" \
            "$pr_fig" "$last_cmd"
    fi
    if te "eager-bf16-cl-b$b2" "torch eager bf16 autocast channels_last, batch $b2" \
        --batch "$b2" --size "$size" --cudnn-benchmark 1 --device "$tdev" --precision bf16 \
        --channels-last; then
        vs_torch "torch eager bf16 channels_last, batch $b2" "$ours" "$te_ips" 1.35
    fi

    section host 35
    echo "== host waits, allocations and graph launches per steady step (1 stage, graphs on)"
    local split=32
    [ $dry = 1 ] && split=2
    counts_heuristic=1
    counts 1 on 4 9
    counts_heuristic=0

    section diagnostics 35
    echo "== compute-sanitizer memcheck over a 2-stage bf16 ResNet-18 plan"
    tools
    tiny2 r18-2stage-tiny-bf16 bf16
    san_env=(-u PP_CUDNN_CACHE PP_CUDNN_FIND=0)
    san memcheck tiny "bf16 resnet18 plan, 2 stages, 32x32, batch 4" \
        "$bin/pipeline-run" "$res/r18-2stage-tiny-bf16.yaml" --steps 2 --device-map "$map" --json
    san_env=()
}
