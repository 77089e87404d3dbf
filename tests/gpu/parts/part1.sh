# part1.sh - run-all.sh --part 1 (sourced by it): the whole CUDA test suite
# (every suite with --all), then fp32 and TF32 images/s of ours against
# PyTorch eager at the same batch, size and precision, and ours again with
# the f32 batch norm through cuDNN (PP_CUDA_BN_CUDNN=1: what bn_nchw.cu's
# kernels bring).
#   correctness (180 s)  the suite, in meson's order, each test up to its timeout
#   speed       (150 s)  fp32 (cudnn.benchmark off and on) and TF32, each with
#                        PP_CUDA_BN_CUDNN=1 too
# shellcheck shell=bash disable=SC2154

part1() {
    cur_part=1
    section correctness 180
    echo "== the test suite"
    suite 300
    row "test suite" "$(case $suite_fig in *" 0 failed"*) echo ok ;; *) echo FAIL ;; esac)" \
        "$suite_fig" ""

    section speed 150
    echo "== fp32 throughput: pipeline-run 1 stage vs PyTorch eager (batch $batch, ${size}x$size)"
    local map; map=$(map_all)
    plan_for r50-1stage-full "$batch" "$batch" "$steps" "$size" "$stages1"
    local ours=""
    if pr 1stage-full "$res/r50-1stage-full.yaml" --steps "$steps" --device-map "$map"; then
        ours=$pr_ips
        row "ours fp32 1 stage, batch $batch" ok "$pr_fig" "$last_cmd"
    else
        row "ours fp32 1 stage, batch $batch" "$(result_of $?)" "$pr_fig" "$last_cmd"
    fi
    local tdev=cuda:0 bench out ips
    [ $dry = 1 ] && tdev=cpu
    for bench in 1 0; do
        run "torch-eager-bench$bench" 240 "${pyrun[@]}" "$bundle/gpu/torch_eager.py" --batch "$batch" \
            --size "$size" --steps "$tsteps" --warmup "$twarm" --cudnn-benchmark $bench --device "$tdev"
        rc=$?
        out=$(tail -n 2 "$res/torch-eager-bench$bench.out" 2>/dev/null | head -1)
        if [ $rc -eq 0 ]; then
            echo "torch eager cudnn.benchmark=$bench: $out"
            ips=$(jget "$res/torch-eager-bench$bench.out" 'j["images_per_s"]')
            [ $bench = 1 ] && torch_precision=$(jget "$res/torch-eager-bench$bench.out" 'j["precision"]')
            row "torch eager fp32, cudnn.benchmark=$bench" ok "$out" "$last_cmd"
            local rt; rt=$(ratio "$ours" "$ips")
            row "  ours / torch eager (benchmark=$bench)" "$(ge "$rt" 1.15)" \
                "${rt:-?} (goal >= 1.15): ${ours:-?} / ${ips:-?} img/s" ""
        else
            echo "torch eager cudnn.benchmark=$bench: $(result_of $rc): $(why $rc "torch-eager-bench$bench")"
            row "torch eager fp32, cudnn.benchmark=$bench" "$(result_of $rc)" \
                "$(why $rc "torch-eager-bench$bench")" "$last_cmd"
        fi
    done

    echo "== tf32 throughput: pipeline-run 1 stage vs PyTorch eager TF32 (cudnn.benchmark on)"
    local ours_tf32=""
    plan_for r50-1stage-full-tf32 "$batch" "$batch" "$steps" "$size" "$stages1" tf32
    if pr 1stage-full-tf32 "$res/r50-1stage-full-tf32.yaml" --steps "$steps" --device-map "$map"
    then
        ours_tf32=$pr_ips
        row "ours tf32 1 stage, batch $batch" ok "$pr_fig" "$last_cmd"
    else
        row "ours tf32 1 stage, batch $batch" "$(result_of $?)" "$pr_fig" "$last_cmd"
    fi
    run torch-eager-tf32 240 "${pyrun[@]}" "$bundle/gpu/torch_eager.py" --batch "$batch" \
        --size "$size" --steps "$tsteps" --warmup "$twarm" --cudnn-benchmark 1 --device "$tdev" \
        --precision tf32
    rc=$?
    out=$(tail -n 2 "$res/torch-eager-tf32.out" 2>/dev/null | head -1)
    if [ $rc -eq 0 ]; then
        ips=$(jget "$res/torch-eager-tf32.out" 'j["images_per_s"]')
        row "torch eager tf32, cudnn.benchmark=1" ok "$out" "$last_cmd"
        local rt; rt=$(ratio "$ours_tf32" "$ips")
        row "  ours / torch eager tf32" "$(ge "$rt" 1.15)" \
            "${rt:-?} (goal >= 1.15): ${ours_tf32:-?} / ${ips:-?} img/s" ""
    else
        row "torch eager tf32, cudnn.benchmark=1" "$(result_of $rc)" "$(why $rc torch-eager-tf32)" \
            "$last_cmd"
    fi

    echo "== f32 batch norm: ours (bn_nchw.cu) against cuDNN's with the elementwise ops"
    local prec plan base rt
    for prec in fp32 tf32; do
        plan=r50-1stage-full base=$ours
        [ $prec = tf32 ] && plan=r50-1stage-full-tf32 base=$ours_tf32
        if PP_CUDA_BN_CUDNN=1 pr "1stage-$prec-bn-cudnn" "$res/$plan.yaml" --steps "$steps" \
            --device-map "$map"; then
            row "ours $prec 1 stage, batch $batch, PP_CUDA_BN_CUDNN=1" ok "$pr_fig" \
                "PP_CUDA_BN_CUDNN=1 $last_cmd"
            rt=$(ratio "$base" "$pr_ips")
            row "  batch norm ours / cuDNN's, $prec" info "${rt:-?}: ${base:-?} / ${pr_ips:-?} img/s" ""
        else
            row "ours $prec 1 stage, batch $batch, PP_CUDA_BN_CUDNN=1" "$(result_of $?)" "$pr_fig" \
                "PP_CUDA_BN_CUDNN=1 $last_cmd"
        fi
    done
}
