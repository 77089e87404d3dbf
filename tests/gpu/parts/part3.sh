# part3.sh - run-all.sh --part 3 (sourced by it): training on Fashion-MNIST
# (BUNDLE/data, copied by bundle.sh from Debian's dataset-fashion-mnist):
# examples/plans/fashion-mnist-resnet18.yaml and fashion-mnist-lenet.yaml for
# their 10 epochs on cuda:0 (both stages on one GPU): test accuracy after the
# last epoch (goals 0.90 and 0.89) and training seconds per epoch (ResNet-18's
# goal: 5 s).
#   correctness (330 s)  ResNet-18 (up to 200 s), then LeNet
# shellcheck shell=bash disable=SC2154

part3() {
    cur_part=3
    section correctness 330
    echo "== training on Fashion-MNIST"
    if [ ! -f "$bundle/data/fashion-mnist/train-images-idx3-ubyte.gz" ]; then
        row "Fashion-MNIST training" "MISSING" "$bundle/data/fashion-mnist (bundle.sh copies Debian's dataset-fashion-mnist; with --small it writes it apart, BUNDLE-data.tar: tar -xf it beside the bundle)" ""
        return
    fi
    local map name example goal_acc goal_s rc acc sec ips
    [ $dry = 1 ] && map="cpu:*=cpu:0" || map="cpu:*=cuda:0"
    for name in resnet18 lenet; do
        if [ $name = resnet18 ]; then
            example=fashion-mnist-resnet18.yaml goal_acc=0.90 goal_s=5
        else
            example=fashion-mnist-lenet.yaml goal_acc=0.89 goal_s=""
        fi
        train_plan "train-$name" "$example"
        run "train-$name" 200 "$bin/pipeline-run" "$res/train-$name.yaml" --device-map "$map" \
            --json --plot "$res/train-$name.svg"
        rc=$?
        if [ $rc -ne 0 ]; then
            row "$name Fashion-MNIST, 10 epochs on one GPU" "$(result_of $rc)" "$(why $rc "train-$name")" "$last_cmd"
            continue
        fi
        acc=$(jget "$res/train-$name.out" '"%.4f" % j["epochs"][-1]["test_acc"]')
        sec=$(jget "$res/train-$name.out" 'sum(e["seconds"] for e in j["epochs"]) / len(j["epochs"])')
        ips=$(jget "$res/train-$name.out" 'j["images_per_s"]')
        echo "$name: test accuracy $acc, ${sec} s per epoch, ${ips} img/s"
        row "$name Fashion-MNIST test accuracy (goal $goal_acc)" "$(ge "$acc" $goal_acc)" \
            "$acc after the last epoch" "$last_cmd"
        if [ -n "$goal_s" ]; then
            row "$name Fashion-MNIST s/epoch (goal $goal_s)" "$(le "$sec" $goal_s)" \
                "$sec s per epoch, $ips img/s training" "$last_cmd"
        else
            row "$name Fashion-MNIST s/epoch" "$([ -n "$sec" ] && echo ok || echo 'FAIL(no figure)')" \
                "$sec s per epoch, $ips img/s training" "$last_cmd"
        fi
    done
}

