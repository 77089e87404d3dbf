# part1.sh - run-all.sh --part 1 (sourced by it): the whole CUDA test suite
# (every suite with --all), then fp32 and TF32 images/s of ours against
# PyTorch eager at the same batch, size and precision, ours again with the
# f32 batch norm through cuDNN (PP_CUDA_BN_CUDNN=1: what bn_nchw.cu's kernels
# bring) and with 4 GiB of convolution workspace (PP_CUDA_CONV_WS_MB=4096:
# whether the 512 MiB cap keeps the fastest algorithms out), with the
# algorithms each cap left out (from the PP_CUDNN_CACHE file), and with the
# legacy API's algorithms only (PP_CUDA_CONV_API=legacy: what timing cuDNN's
# graph API's plans beside them brings), with how many convolutions the
# graph API's plan won (from the same file).
#   correctness (180 s)  the suite, in meson's order, each test up to its timeout
#   speed       (190 s)  fp32 (cudnn.benchmark off and on) and TF32, each with
#                        PP_CUDA_CONV_API=legacy, PP_CUDA_BN_CUDNN=1 and
#                        PP_CUDA_CONV_WS_MB=4096 too (the last measures every
#                        convolution's algorithms again)
# shellcheck shell=bash disable=SC2154

# p1_variant TAG VAR=VALUE WHAT: ours fp32 and tf32 1 stage again with VAR=VALUE
# in the environment, each with its ratio to the plain rows' figures (ours,
# ours_tf32: part1's) as "  WHAT, PRECISION".
p1_variant() {
    local tag=$1 env=$2 what=$3 prec plan base rt
    for prec in fp32 tf32; do
        plan=r50-1stage-full base=$ours
        [ $prec = tf32 ] && plan=r50-1stage-full-tf32 base=$ours_tf32
        pr_env=("$env")
        if pr "1stage-$prec-$tag" "$res/$plan.yaml" --steps "$steps" --device-map "$map"; then
            row "ours $prec 1 stage, batch $batch, $env" ok "$pr_fig" "$last_cmd"
            rt=$(ratio "$pr_ips" "$base")
            row "  $what, $prec" info "${rt:-?}: ${pr_ips:-?} / ${base:-?} img/s" ""
        else
            row "ours $prec 1 stage, batch $batch, $env" "$(result_of $?)" "$pr_fig" "$last_cmd"
        fi
        pr_env=()
    done
}

# p1_over_cap MATH WS_MB: the algorithms the PP_CUDNN_CACHE file's entries of
# that math mode and cap left out for asking more workspace than the cap.
p1_over_cap() {
    local file=${PP_CUDNN_CACHE:-}
    [ -f "$file" ] || file=/dev/null
    awk -F'\t' -v m="$1" -v ws="$2" '
        $3 == m && $4 == ws && NF >= 11 { n++; over += $10; if ($11 > big) big = $11 }
        END {
            if (!n) print "no convolution choices recorded (no cuDNN here, or no file)"
            else printf "%d algorithms asked for more than the cap (largest %d MiB), over %d choices\n", over, big, n
        }' "$file"
}

part1() {
    cur_part=1
    section correctness 180
    echo "== the test suite"
    suite 300
    row "test suite" "$(case $suite_fig in *" 0 failed"*) echo ok ;; *) echo FAIL ;; esac)" \
        "$suite_fig" ""

    section speed 190
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

    echo "== convolution APIs: cuDNN's graph API's plans where they time faster, against the legacy algorithms only"
    row "  graph API plans chosen, fp32" info "$(conv_apis fp32)" ""
    row "  graph API plans chosen, tf32" info "$(conv_apis tf32)" ""
    p1_variant legacy PP_CUDA_CONV_API=legacy "legacy algorithms only / graph API where faster"

    echo "== f32 batch norm: cuDNN's with the elementwise ops against ours (bn_nchw.cu)"
    p1_variant bn-cudnn PP_CUDA_BN_CUDNN=1 "batch norm cuDNN's / ours"

    echo "== convolution workspace: 4 GiB against the default 512 MiB cap"
    p1_variant ws4096 PP_CUDA_CONV_WS_MB=4096 "workspace 4 GiB / 512 MiB"
    local prec ws
    for prec in fp32 tf32; do
        for ws in 512 4096; do
            row "  over the cap, $prec, $ws MiB" info "$(p1_over_cap "$prec" "$ws")" ""
        done
    done
}
