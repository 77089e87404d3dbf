# part11.sh - run-all.sh --part 11 (sourced by it): the image loader against
# the GPU it feeds. A folder of ImageNet-sized JPEGs (500x375, quality 90,
# 10 classes; 3,000 of them, made in the run by every core: gpu/loader_torch.py
# make, under $TMPDIR, removed at the end), then
#   speed    (150 s)  decode + RandomResizedCrop(224) + flip + normalise:
#                     images/s of ours (bin/bench_images: 1 thread, all
#                     cores) and of torchvision's DataLoader (0 workers, one
#                     worker per core: gpu/loader_torch.py rate); per core
#                     against the goal of issue 37 (ours >= 3x torchvision)
#   speed    (180 s)  ResNet-50 bf16 NHWC, 1 stage, batch 2B: from synthetic
#                     data, then from the JPEG folder (random_resized_crop,
#                     flip, torchvision's mean and std; data.workers one per
#                     core, data.prefetch 2): images/s of both, the data wait
#                     per step and whether the loader limited the step; the
#                     goal row: the loader's images/s on all cores sustain
#                     the synthetic bf16 step's
# Steps: --steps when given, else 30 (the first warm up: algorithms,
# graphs). A dry run (--dry-run-cpu): 96 JPEGs, the loader's figures on 2
# threads, training at the dry run's batch and image size.
# shellcheck shell=bash disable=SC2154

# loader_plan NAME BATCH STEPS SIZE FOLDER WORKERS: $res/NAME.yaml, ResNet-50
# bf16 on 1 stage trained from the JPEG folder with torchvision's recipe.
loader_plan() {
    cat >"$res/$1.yaml" <<YAML
model: {name: resnet50, num_classes: 1000, in_channels: 3, stem: imagenet}
batch: {size: $2, split_size: $2}
schedule: 1f1b
precision: bf16
optimizer: {type: sgd, lr: 0.1, momentum: 0.9, weight_decay: 0.0001, nesterov: false}
data:
  format: imagefolder
  root: $5
  transforms: [{random_resized_crop: {size: $4}}, {horizontal_flip: 0.5}]
  mean: [0.485, 0.456, 0.406]
  std: [0.229, 0.224, 0.225]
  shuffle: true
  workers: $6
  prefetch: 2
seed: 1
steps: $3
stages:
$stages1
YAML
}

part11() {
    cur_part=11
    local map n=3000 cores b2=$((batch * 2)) qs=$steps folder rc fig
    local ours1="" oursn="" tv0="" tvn="" synth="" fromdir="" wait="" frac="" limited=""
    map=$(map_all)
    cores=$(nproc 2>/dev/null || echo 1)
    [ "$cores" -gt 64 ] && cores=64
    [ "$steps_given" = 1 ] || qs=30
    if [ $dry = 1 ]; then
        n=96 cores=2
        [ "$steps_given" = 1 ] || qs=$steps
    fi
    folder=${TMPDIR:-/tmp}/pp-loader-jpeg-$$

    section speed 150
    echo "== the loader: decode + RandomResizedCrop(224) + flip + normalise of $n JPEGs"
    run loader-make 120 "$py" "$bundle/gpu/loader_torch.py" make "$folder" "$n" --procs "$cores"
    rc=$?
    if [ $rc -ne 0 ]; then
        row "JPEG folder ($n of 500x375)" "$(result_of $rc)" "$(why $rc loader-make)" "$last_cmd"
    else
        row "JPEG folder ($n of 500x375)" ok \
            "$(jget "$res/loader-make.out" '"%d images, %.0f KiB on average" % (j["images"], j["kib"])')" \
            "$last_cmd"
        if run loader-ours 90 env OPENBLAS_NUM_THREADS=1 "$bin/bench_images" "$folder" \
            $((n < 1024 ? n : 1024)) 1 "$cores"; then
            ours1=$(awk '/^ours/ && $2 == 1 { print $4 }' "$res/loader-ours.out")
            oursn=$(awk -v c="$cores" '/^ours/ && $2 == c { print $4 }' "$res/loader-ours.out")
        fi
        fig="1 thread ${ours1:-?} img/s, $cores threads ${oursn:-?} img/s"
        row "ours: decode + crop + flip + normalise" "$([ -n "$oursn" ] && echo ok || echo 'FAIL(no figure)')" \
            "$fig" "$last_cmd"
        if run loader-torch0 90 "$py" "$bundle/gpu/loader_torch.py" rate "$folder" --workers 0 \
            --images $((dry ? 128 : 512)); then
            tv0=$(jget "$res/loader-torch0.out" 'j["images_per_s"]')
        fi
        row "  torchvision DataLoader, 0 workers" "$([ -n "$tv0" ] && echo ok || echo 'FAIL(no figure)')" \
            "${tv0:-?} img/s" "$last_cmd"
        if run loader-torchn 90 "$py" "$bundle/gpu/loader_torch.py" rate "$folder" \
            --workers "$cores" --images $((dry ? 128 : 4096)); then
            tvn=$(jget "$res/loader-torchn.out" 'j["images_per_s"]')
        fi
        row "  torchvision DataLoader, $cores workers" "$([ -n "$tvn" ] && echo ok || echo 'FAIL(no figure)')" \
            "${tvn:-?} img/s" "$last_cmd"
        rc=$(ratio "$ours1" "$tv0")
        row "  ours / torchvision per core" "$(ge "$rc" 3)" "${rc:-?} (goal >= 3): ${ours1:-?} / ${tv0:-?} img/s" ""
        rc=$(ratio "$oursn" "$tvn")
        row "  ours / torchvision on $cores cores" "$([ -n "$rc" ] && echo info || echo 'FAIL(no figure)')" \
            "${rc:-?}: ${oursn:-?} / ${tvn:-?} img/s" ""
    fi

    section speed 180
    echo "== ResNet-50 bf16 NHWC 1 stage, batch $b2: synthetic data, then the JPEG folder"
    plan_for "r50-1stage-b$b2-bf16-loader" "$b2" "$b2" "$qs" "$size" "$stages1" bf16
    if pr "1stage-b$b2-bf16-synthetic" "$res/r50-1stage-b$b2-bf16-loader.yaml" --steps "$qs" \
        --device-map "$map" --layout auto; then
        synth=$pr_ips
        row "ours bf16 1 stage, batch $b2, synthetic data" ok "$pr_fig" "$last_cmd"
    else
        row "ours bf16 1 stage, batch $b2, synthetic data" "$(result_of $?)" "$pr_fig" "$last_cmd"
    fi
    if [ -d "$folder" ]; then
        loader_plan "r50-1stage-b$b2-bf16-jpeg" "$b2" "$qs" "$size" "$folder" "$cores"
        if pr "1stage-b$b2-bf16-jpeg" "$res/r50-1stage-b$b2-bf16-jpeg.yaml" --steps "$qs" \
            --device-map "$map" --layout auto; then
            fromdir=$pr_ips
            wait=$(jget "$res/pr-1stage-b$b2-bf16-jpeg.out" 'j["data"]["wait_ms"]')
            frac=$(jget "$res/pr-1stage-b$b2-bf16-jpeg.out" '100 * j["data"]["wait_frac"]')
            limited=$(jget "$res/pr-1stage-b$b2-bf16-jpeg.out" '"yes" if j["data"]["loader_limited"] else "no"')
            row "ours bf16 1 stage, batch $b2, from the JPEG folder ($cores threads)" ok \
                "$pr_fig; data wait ${wait:-?} ms a step (${frac:-?}%), loader limited: ${limited:-?}" \
                "$last_cmd"
        else
            row "ours bf16 1 stage, batch $b2, from the JPEG folder" "$(result_of $?)" "$pr_fig" \
                "$last_cmd"
        fi
    fi
    rc=$(ratio "$fromdir" "$synth")
    row "  from the folder / synthetic" "$([ -n "$rc" ] && echo info || echo 'FAIL(no figure)')" \
        "${rc:-?}: ${fromdir:-?} / ${synth:-?} img/s" ""
    rc=$(ratio "$oursn" "$synth")
    row "  the loader sustains the bf16 step" "$(ge "$rc" 1)" \
        "${rc:-?} (goal >= 1): loader ${oursn:-?} img/s on $cores threads, bf16 step ${synth:-?} img/s" ""
    rm -rf "$folder"
}
