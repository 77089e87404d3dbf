# part8.sh - run-all.sh --part 8 (sourced by it): the PyTorch model-parallel
# tutorial's experiment: examples/plans/tutorial-layer2.yaml --sweep-split
# (2 stages, the cut after layer2, batch 120 of 128x128) against
# tests/gpu/tutorial.py's ModelParallel/PipelineParallelResNet50 on the same
# GPU(s), split sizes 1 to 60 and the unpipelined 120; goal: ours at least
# the tutorial's images/s at every split size.
#   speed (330 s): ours (up to 200 s), then PyTorch's
# shellcheck shell=bash disable=SC2154

part8() {
    cur_part=8
    local rc
    section speed 330
    echo "== the tutorial's experiment: cut after layer2, batch $tut_batch, ${tut_size}x$tut_size"
    local plan=$bundle/plans/tutorial-layer2.yaml tmap=() tdevs=cuda:0,cuda:0
    if [ $dry = 1 ]; then
        tmap=(--device-map "cuda:*=cpu:0")
        tdevs=cpu
        if [ -f "$plan" ]; then
            sed -e "s/^  size: 120$/  size: $tut_batch/" \
                -e "s/image_size: \[128, 128\]/image_size: [$tut_size, $tut_size]/" \
                "$plan" >"$res/tutorial-layer2-dry.yaml"
            plan=$res/tutorial-layer2-dry.yaml
        fi
    elif [ "$ngpu" -ge 2 ]; then
        tdevs=cuda:0,cuda:1
    else
        tmap=(--device-map cuda:1=cuda:0)
    fi
    local ours_json=() sweep_ok=0
    if [ ! -f "$plan" ]; then
        row "tutorial sweep (ours)" "FAIL(no plan)" "$plan missing" ""
    else
        run tutorial-ours 200 "$bin/pipeline-run" "$plan" "${tmap[@]}" --steps "$tut_steps" \
            --sweep-split "$tut_splits" --csv "$res/tutorial-ours.csv" \
            --svg "$res/tutorial-ours.svg" --json
        rc=$?
        if [ $rc -eq 0 ]; then
            sweep_ok=1
            ours_json+=("$res/tutorial-ours.out")
            row "tutorial sweep (ours), chart tutorial-ours.svg" ok \
                "$(jget "$res/tutorial-ours.out" '", ".join("%d: %.0f img/s" % (r["split_size"], r["images_per_s"]) for r in j["sweep"])')" \
                "$last_cmd"
        else
            row "tutorial sweep (ours)" "$(result_of $rc)" "$(why $rc tutorial-ours)" "$last_cmd"
        fi
        # A runtime failure (one split size out of memory, say) ends a sweep:
        # then measure the split sizes one by one.
        if [ $sweep_ok = 0 ] && [ $rc = 1 ]; then
            echo "the sweep failed: running each split size alone"
            local sp
            for sp in ${tut_splits//,/ }; do
                run "tutorial-ours-$sp" 120 "$bin/pipeline-run" "$plan" "${tmap[@]}" \
                    --steps "$tut_steps" --sweep-split "$sp" --json
                rc=$?
                if [ $rc -eq 0 ]; then
                    ours_json+=("$res/tutorial-ours-$sp.out")
                else
                    row "tutorial (ours) split $sp" "$(result_of $rc)" "$(why $rc "tutorial-ours-$sp")" "$last_cmd"
                fi
            done
        fi
        run tutorial-ours-nopipe 120 "$bin/pipeline-run" "$plan" "${tmap[@]}" --steps "$tut_steps" \
            --sweep-split "$tut_batch" --json
        rc=$?
        if [ $rc -eq 0 ]; then
            ours_json+=("$res/tutorial-ours-nopipe.out")
            row "tutorial (ours) split $tut_batch, no pipelining" ok \
                "$(jget "$res/tutorial-ours-nopipe.out" '"%.1f img/s, %.1f ms/step" % (j["sweep"][0]["images_per_s"], j["sweep"][0]["step_ms"])')" \
                "$last_cmd"
        else
            row "tutorial (ours) split $tut_batch, no pipelining" "$(result_of $rc)" \
                "$(why $rc tutorial-ours-nopipe)" "$last_cmd"
        fi
    fi
    local oargs=() f
    for f in "${ours_json[@]}"; do oargs+=(--ours "$f"); done
    run tutorial-torch 200 "${pyrun[@]}" "$bundle/gpu/tutorial.py" --devices "$tdevs" --batch "$tut_batch" \
        --size "$tut_size" --splits "$tut_splits" --number "$tut_number" --repeat "$tut_repeat" \
        --csv "$res/tutorial-torch.csv" --combined "$res/tutorial-combined.csv" "${oargs[@]}"
    rc=$?
    local tcmd=$last_cmd
    if [ -s "$res/tutorial-torch.out" ]; then
        cat "$res/tutorial-torch.out"
    fi
    if [ $rc -ne 0 ]; then
        row "tutorial (PyTorch)" "$(result_of $rc)" "$(why $rc tutorial-torch)" "$tcmd"
    fi
    if [ -s "$res/tutorial-torch.csv" ]; then
        local name sp mb d0 d1 med ips
        while IFS=, read -r name sp mb d0 d1 _ _ _ med _ ips _; do
            [ "$name" = model ] && continue
            [ "$name" = PipelineParallelResNet50 ] && continue
            row "tutorial $name ($d0, $d1)" "$([ -n "$ips" ] && echo ok || echo FAIL)" \
                "${ips:-?} img/s, ${med:-?} ms/batch median" "$tcmd"
        done <"$res/tutorial-torch.csv"
    fi
    if [ -s "$res/tutorial-combined.csv" ]; then
        local o t r note
        while IFS=, read -r sp mb o t r note; do
            [ "$sp" = split_size ] && continue
            row "tutorial split $sp ($mb micro-batches)${note:+, $note}" \
                "$(ge "$r" 1.0)" \
                "ours ${o:-?} img/s, tutorial ${t:-?} img/s, ratio $([ -n "$r" ] && printf '%.2f' "$r" || echo '?') (goal >= 1.00)" \
                "$tcmd"
        done <"$res/tutorial-combined.csv"
    fi
}
