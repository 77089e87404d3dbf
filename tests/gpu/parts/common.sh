# common.sh - what every part of run-all.sh uses (sourced by it, never run):
# the time budget (the invocation's and its current section's), rows of the
# final table, running a command into the results folder, JSON figures,
# ResNet-50 plans, pipeline-run and PyTorch runs, ncu and compute-sanitizer
# rows. Reads the driver's variables: bundle, bin, res, dry, budget, t_start,
# py, pyrun, batch, size, steps, tsteps, twarm, rows_file.
# shellcheck shell=bash disable=SC2154

# ---- helpers -----------------------------------------------------------------

# The time left: of the invocation's budget, and of the current section's
# (section NAME SECONDS), whichever ends first.
sec_end="" cur_section=other
left() {
    local l=$((budget - (SECONDS - t_start)))
    if [ -n "$sec_end" ] && [ $((sec_end - SECONDS)) -lt "$l" ]; then l=$((sec_end - SECONDS)); fi
    echo "$l"
}

# section NAME [SECONDS]: rows that follow go under NAME in results.md
# (versions, correctness, speed, host, memory, diagnostics); with SECONDS
# (times time_scale: 3 in a dry run on the CPU), the commands of the section
# stop when that many have passed (or the invocation's budget ends), so that
# later sections keep their time.
section() {
    cur_section=$1
    local n=${2:-}
    [ -n "$n" ] && n=$((n * time_scale))
    if [ -n "$n" ]; then sec_end=$((SECONDS + n)); else sec_end=""; fi
    echo "-- $1${n:+ (up to $n s; $(( budget - (SECONDS - t_start) )) s left in all)}"
}

# Shortens a command for the table: paths relative to BUNDLE.
show() {
    local s out=""
    for s in "$@"; do
        s=${s//$bundle\//}
        case $s in LD_LIBRARY_PATH=*) s='LD_LIBRARY_PATH=(as run-all.sh was given)' ;; esac
        case $s in *[[:space:]\'\"*\$]*) s="'$s'" ;; esac
        out+="$s "
    done
    echo "${out% }"
}

# row WHAT RESULT FIGURE [COMMAND]: one line of the final table (rows.tsv:
# part, section, what, result, figure, command; tab-separated, so no field
# but the last may be empty).
row() {
    local clean=() f
    for f in "$1" "$2" "${3:--}" "${4:-}"; do clean+=("$(printf '%s' "$f" | tr '\t\n' '  ')"); done
    printf 'part %s\t%s\t%s\t%s\t%s\t%s\n' "$cur_part" "$cur_section" "${clean[@]}" >>"$rows_file"
    case $2 in FAIL*|MISSING*) failures=$((failures + 1)) ;; esac
}

# run NAME CAP CMD...: runs CMD (from BUNDLE) with stdout to NAME.out and
# stderr to NAME.log, limited to CAP seconds or what is left of the budget.
# Sets last_cmd. Returns CMD's status, 124 on timeout, 200 when skipped.
last_cmd=""
run() {
    local name=$1 cap=$2 l
    shift 2
    last_cmd=$(show "$@")
    l=$(left)
    if [ "$l" -lt 20 ]; then
        echo "skipped: $last_cmd (time budget spent)"
        echo "skipped: time budget spent" >"$res/$name.log"
        return 200
    fi
    [ "$cap" -gt $((l - 5)) ] && cap=$((l - 5))
    printf '%s\n' "$last_cmd" >"$res/$name.cmd"
    echo "\$ $last_cmd"
    (cd "$bundle" && timeout -k 10 "$cap" "$@") >"$res/$name.out" 2>"$res/$name.log"
}

# why RC NAME: a short reason for a failed run.
why() {
    case $1 in
        124|137) echo "timed out" ;;
        200) echo "skipped: time budget spent" ;;
        *) tail -n 3 "$res/$2.log" 2>/dev/null | tr '\n' ' ' | cut -c1-200 ;;
    esac
}
result_of() { [ "$1" = 200 ] && echo SKIPPED || echo "FAIL($1)"; }

# jget FILE EXPR: a value from a JSON file (EXPR in Python over j), or "".
jget() {
    "$py" - "$1" "$2" 2>/dev/null <<'PY' || true
import json, sys
try:
    j = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
    v = eval(sys.argv[2], {"j": j})
    print(("%.1f" % v) if isinstance(v, float) else v)
except Exception:
    pass
PY
}

# ratio A B: A / B to two decimals, or "".
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a > 0 && b > 0) printf "%.2f", a / b }'; }
# ge X LIMIT: "ok" when X >= LIMIT, "BELOW" otherwise, "FAIL(no figure)" without X.
ge() { awk -v x="$1" -v l="$2" 'BEGIN { if (x == "") print "FAIL(no figure)"; else if (x + 0 >= l + 0) print "ok"; else print "BELOW" }'; }

# le X LIMIT: "ok" when X <= LIMIT, "ABOVE" otherwise, "FAIL(no figure)" without X.
le() { awk -v x="$1" -v l="$2" 'BEGIN { if (x == "") print "FAIL(no figure)"; else if (x + 0 <= l + 0) print "ok"; else print "ABOVE" }'; }

# pipeline-run's device map: everything on one GPU (or on cpu:0 in a dry run).
map_all() { [ $dry = 1 ] && echo "cuda:*=cpu:0" || echo "cuda:*=cuda:0"; }

# plan_for NAME BATCH SPLIT STEPS SIZE STAGES [PRECISION]: writes $res/NAME.yaml.
plan_for() {
    cat >"$res/$1.yaml" <<YAML
model: {name: resnet50, num_classes: 1000, in_channels: 3, stem: imagenet}
batch: {size: $2, split_size: $3}
schedule: 1f1b
precision: ${7:-fp32}
optimizer: {type: sgd, lr: 0.1, momentum: 0.9, weight_decay: 0.0001, nesterov: false}
data: {format: synthetic, image_size: [$5, $5]}
seed: 1
steps: $4
stages:
$6
YAML
}
stages1="  - {device: cuda:0, layers: [conv1, bn1, relu, maxpool, layer1, layer2, layer3, layer4, avgpool, fc]}"
stages2="  - {device: cuda:0, layers: [conv1, bn1, relu, maxpool, layer1, layer2]}
  - {device: cuda:1, layers: [layer3, layer4, avgpool, fc]}"
# The cuts of examples/plans/resnet50-4gpu.yaml.
stages4="  - {device: cuda:0, layers: [conv1, bn1, relu, maxpool, layer1, layer2.0]}
  - {device: cuda:1, layers: [layer2.1, layer2.2, layer2.3, layer3.0, layer3.1]}
  - {device: cuda:2, layers: [layer3.2, layer3.3, layer3.4, layer3.5]}
  - {device: cuda:3, layers: [layer4, avgpool, fc]}"

# pr NAME PLAN [ARGS...]: pipeline-run PLAN --json; sets pr_ips and pr_fig.
# Variables in the array pr_env (VAR=VALUE) go to its environment.
pr_ips="" pr_fig="" pr_env=()
pr() {
    local name=$1 plan=$2 rc
    shift 2
    pr_ips="" pr_fig=""
    if [ ${#pr_env[@]} -gt 0 ]; then
        run "pr-$name" 240 env "${pr_env[@]}" "$bin/pipeline-run" "$plan" --json "$@"
    else
        run "pr-$name" 240 "$bin/pipeline-run" "$plan" --json "$@"
    fi
    rc=$?
    if [ $rc -ne 0 ]; then
        pr_fig=$(why $rc "pr-$name")
        echo "pipeline-run $name: $(result_of $rc): $pr_fig"
        return $rc
    fi
    pr_ips=$(jget "$res/pr-$name.out" 'j["images_per_s"]')
    pr_fig=$(jget "$res/pr-$name.out" '"%.1f img/s, %.1f ms/step median (min %.1f), %d micro-batch(es) of %d, bubble %.2f" % (j["images_per_s"], j["step_ms"]["median"], j["step_ms"]["min"], j["micro_batches"], j["split_size"], j["bubble_frac"])')
    echo "pipeline-run $name: $pr_fig"
    if [ -z "$pr_ips" ]; then
        pr_fig="no JSON summary on stdout (see pr-$name.out)"
        return 1
    fi
}

# ---- part 2: allocation counts, the tutorial's experiment ------------------------

# counts_of FILE: the pipeline-run line of an interposer output file.
counts_of() { grep '^cuda_count prog=pipeline-run ' "$1" 2>/dev/null | tail -1; }
# field LINE KEY
field() { echo "$1" | tr ' ' '\n' | awk -F= -v k="$2" '$1 == k { v = $2 } END { print v + 0 }'; }

# ---- part 3: training on Fashion-MNIST ------------------------------------------

# train_plan NAME EXAMPLE: $res/NAME.yaml from plans/EXAMPLE with the data paths of
# BUNDLE/data (in a dry run: subsets of 512 training and 256 test images, 2 epochs).
train_plan() {
    local data=$bundle/data/fashion-mnist
    if [ $dry = 1 ]; then
        "$py" - "$data" "$res/dry-data" <<'PY'
import gzip, os, struct, sys
src, dst = sys.argv[1], sys.argv[2]
os.makedirs(dst, exist_ok=True)
for name, n in (("train-images-idx3-ubyte.gz", 512), ("train-labels-idx1-ubyte.gz", 512),
                ("t10k-images-idx3-ubyte.gz", 256), ("t10k-labels-idx1-ubyte.gz", 256)):
    d = gzip.open(os.path.join(src, name)).read()
    nd = d[3]
    dims = list(struct.unpack(">" + "I" * nd, d[4:4 + 4 * nd]))
    per = 1
    for x in dims[1:]:
        per *= x
    off = 4 + 4 * nd
    dims[0] = n
    with gzip.open(os.path.join(dst, name), "wb") as f:
        f.write(d[:4] + struct.pack(">" + "I" * nd, *dims) + d[off:off + n * per])
PY
        data=$res/dry-data
    fi
    sed -e "s|/usr/share/datasets/fashion-mnist|$data|" "$bundle/plans/$2" >"$res/$1.yaml"
    [ $dry = 1 ] && sed -i -e 's/^epochs: .*/epochs: 2/' "$res/$1.yaml"
}

# ---- part 4: bf16 in NHWC against PyTorch; kernels per step; checks ---------------

ncu="" sanitizer=""
# find_tool NAME PATTERN...: NAME on PATH, else the first file a pattern names.
find_tool() {
    local name=$1 f
    shift
    command -v "$name" 2>/dev/null && return
    for f in "$@"; do
        [ -x "$f" ] && { echo "$f"; return; }
    done
    return 0
}

# torch_row NAME LABEL SCRIPT KEY ARGS...: the bundle's gpu/SCRIPT ARGS (a
# PyTorch benchmark printing a JSON line last) as one row; sets torch_fig to
# its JSON's KEY (the throughput).
torch_fig=""
torch_row() {
    local name=$1 label=$2 script=$3 key=$4 rc out cap=180
    shift 4
    torch_fig=""
    case " $* " in *" --compile "*) cap=240 ;; esac
    run "torch-$name" $cap "${pyrun[@]}" "$bundle/gpu/$script" "$@"
    rc=$?
    if [ $rc -ne 0 ]; then
        echo "$label: $(result_of $rc): $(why $rc "torch-$name")"
        row "$label" "$(result_of $rc)" "$(why $rc "torch-$name")" "$last_cmd"
        return $rc
    fi
    out=$(tail -n 2 "$res/torch-$name.out" 2>/dev/null | head -1)
    torch_fig=$(jget "$res/torch-$name.out" "j[\"$key\"]")
    out+=$(jget "$res/torch-$name.out" '"; compiled in %.0f s" % j["compile_s"] if j.get("compile_s") else ""')
    echo "$label: $out"
    row "$label" "$([ -n "$torch_fig" ] && echo ok || echo 'FAIL(no figure)')" "$out" "$last_cmd"
}

# te NAME LABEL ARGS...: tests/gpu/torch_eager.py ARGS (batch and size given by the
# caller) as one row; sets te_ips.
te_ips=""
te() {
    local name=$1 label=$2 rc
    shift 2
    torch_row "$name" "$label" torch_eager.py images_per_s --steps "$tsteps" --warmup "$twarm" "$@"
    rc=$?
    te_ips=$torch_fig
    return $rc
}

# mem_fig BF16_JSON FP32_JSON: peak memory per stage, bf16 against fp32, from --json.
mem_fig() {
    "$py" - "$1" "$2" 2>/dev/null <<'PY' || true
import json, sys
def load(p):
    return json.loads(open(p).read().strip().splitlines()[-1])
b, f = load(sys.argv[1]), load(sys.argv[2])
gib = lambda n: n / 2.0**30
ratio = lambda x, y: "%.2f" % (x / y) if y else "?"
devs = [s["device"] for s in b["stages"]]
if len(b["stages"]) > 1 and len(set(devs)) == 1:
    pb, pf = b["stages"][0]["peak_bytes"], f["stages"][0]["peak_bytes"]
    print("%s, all %d stages: bf16 %.2f GiB / fp32 %.2f GiB = %s (peak_bytes is a device's "
          "high-water mark; the stages share %s, so this is the process-wide figure, not one "
          "per stage)" % (devs[0], len(devs), gib(pb), gib(pf), ratio(pb, pf), devs[0]))
else:
    print(", ".join("stage %d (%s): bf16 %.2f GiB / fp32 %.2f GiB = %s" % (
        i, sb["device"], gib(sb["peak_bytes"]), gib(sf["peak_bytes"]),
        ratio(sb["peak_bytes"], sf["peak_bytes"]))
        for i, (sb, sf) in enumerate(zip(b["stages"], f["stages"]))))
PY
}

# ktable NAME LABEL PLAN STEP_MS STEP_CMD: one steady step (PP_PROFILE_STEP=5 of 6)
# under ncu, grouped by tests/gpu/kernel_table.py; the busy fraction against
# STEP_MS, the median step of the same plan without ncu (STEP_CMD).
# ktable NAME LABEL PLAN STEP_MS STEP_CMD [SKIP]: one steady step's kernels
# under ncu; SKIP (a|b) names kernels ncu runs without profiling them. A
# profile that ncu stopped at a kernel it got no time for (cuDNN's fp32
# batch norm, bn_fw_tr_1C11_singleread, fails under ncu's replay) is taken
# again with that kernel skipped.
# With ktable_ranges=1 the profile also names each kernel by the profiler
# range it was launched in (the unit and pass: runtime/core/ranges.h): ncu
# writes a report (--nvtx -o), imported twice (kernel names; range names,
# --print-nvtx-rename kernel) and joined by kernel_table.py --ranges, with
# graphs off (PP_CUDA_GRAPHS=off: a replayed graph's kernels sit in the
# step's range only; ncu times each kernel alone either way) and ranges on
# (PP_NVTX=on); a second row gives the milliseconds per unit and pass.
ktable_ranges=0
ktable() {
    local name=$1 label=$2 plan=$3 step_ms=$4 step_cmd=$5 skip=${6:-} rc krc fig verdict errs
    local filter=() out_args=(--csv --print-units base) renv=() kin=() kr=()
    [ -n "$skip" ] && filter=(--kernel-name-base function --kernel-name "regex:^(?!($skip)$)")
    if [ "$ktable_ranges" = 1 ]; then
        out_args=(--nvtx -f -o "$res/ncu-$name")
        renv=(PP_CUDA_GRAPHS=off PP_NVTX=on)
    fi
    if [ $dry = 1 ]; then
        row "kernels per step, $label (ncu)" "n/a" "not applicable in a dry run" ""
        return
    fi
    [ -n "$ncu" ] || tools >/dev/null # a part that did not look yet (gpt2 did not)
    if [ -z "$ncu" ]; then
        row "kernels per step, $label (ncu)" "MISSING" \
            "ncu (Nsight Compute) not found on PATH nor under /usr/local/cuda*, /opt/nvidia" ""
        return
    fi
    # clocks and caches as the plain run has them: ncu changes no GPU setting
    # step 5 (0-based) replays a graph where graphs are on (not in the
    # ranges mode): steps 0-3 are each buffer set's eager warm-up and capture
    run "ncu-$name" 300 env PP_PROFILE_STEP=5 "${renv[@]}" "$ncu" --profile-from-start off \
        "${out_args[@]}" --clock-control none --cache-control none "${filter[@]}" \
        --metrics gpu__time_duration.sum "$bin/pipeline-run" "$plan" --steps 6 \
        --device-map "$map" --json
    rc=$?
    local ncmd=$last_cmd
    if [ "$ktable_ranges" = 1 ]; then # the report's kernels, by name and by range
        run "ncu-$name-kernels" 60 "$ncu" --import "$res/ncu-$name.ncu-rep" --csv --page raw \
            --print-units base
        run "ncu-$name-ranges" 60 "$ncu" --import "$res/ncu-$name.ncu-rep" --csv --page raw \
            --print-units base --print-nvtx-rename kernel
        kin=("$res/ncu-$name-kernels.out")
        kr=(--ranges "$res/ncu-$name-ranges.out")
    fi
    "$py" "$bundle/gpu/kernel_table.py" "${kin[@]}" "$res/ncu-$name.out" "$res/ncu-$name.log" \
        ${step_ms:+--step-ms "$step_ms"} --csv "$res/kernels-$name.csv" "${kr[@]}" \
        >"$res/kernels-$name.txt" 2>&1
    krc=$?
    if [ $krc -ne 0 ]; then
        errs=$(grep -h '==ERROR==\|==WARNING==' "$res/ncu-$name.out" "$res/ncu-$name.log" 2>/dev/null | head -2 | tr '\n' ' ')
        [ $rc -eq 0 ] && rc=1
        row "kernels per step, $label (ncu)" "$(result_of $rc)" \
            "${errs:-no kernel rows: $(why $rc "ncu-$name")}" "$ncmd"
        return
    fi
    sed '$d' "$res/kernels-$name.txt"
    fig=$(jget "$res/kernels-$name.txt" '"%d kernels, %.2f ms (count/ms): " % (j["kernels"], j["total_ms"]) + ", ".join("%s %d/%.2f" % (k, v["count"], v["ms"]) for k, v in j["families"].items()) + "".join("; not measured (ncu gave no time): %d x %s" % (u[2], u[0]) for u in j.get("unmeasured", [])) + ("; INCOMPLETE, ncu: " + " ".join(e.replace("==ERROR== ", "") for e in j["ncu_errors"]) if j.get("ncu_errors") else "")')
    # a profile ncu stopped (==ERROR==) covers part of the step only
    local incomplete
    incomplete=$(jget "$res/kernels-$name.txt" '"1" if j.get("ncu_errors") else ""')
    verdict=ok
    [ $rc -ne 0 ] && verdict="FAIL($rc)"
    row "kernels per step, $label (ncu)" "$verdict" "$fig (per kernel: kernels-$name.csv)" "$ncmd"
    if [ "$ktable_ranges" = 1 ]; then
        fig=$(jget "$res/kernels-$name.txt" '"%d kernels joined by %s; " % (j["ranges_joined"], j["ranges_by"]) + ", ".join("%s %.2f ms (%s)" % (g, v["ms"], ", ".join("%s %.2f" % fm for fm in sorted(v["families"].items(), key=lambda x: -x[1])[:2])) for g, v in sorted(j["ranges"].items(), key=lambda kv: -kv[1]["ms"])[:12])')
        verdict=ok
        [ "$(jget "$res/kernels-$name.txt" 'j["ranges_joined"]')" -gt 0 ] 2>/dev/null ||
            verdict="FAIL(no ranges)"
        row "  kernels per unit and pass, $label (ncu, ranges)" "$verdict" \
            "${fig:-the ranges were not read: ncu-$name-ranges.out} (table: kernels-$name.txt)" \
            "$last_cmd"
    fi
    if [ -n "$incomplete" ]; then
        row "  GPU busy fraction, $label" "n/a" \
            "not computed: ncu stopped the program, the kernels cover part of the step" \
            "$step_cmd"
        local stop
        stop=$(jget "$res/kernels-$name.txt" '"|".join(u[0] for u in j.get("unmeasured", []))')
        if [ -z "$skip" ] && [ -n "$stop" ] && [[ $stop =~ ^[A-Za-z0-9_|]+$ ]]; then
            echo "== ncu stopped at $stop: the step again, that kernel run unprofiled"
            ktable "$name-skip" "$label, ${stop//|/ and } not profiled" "$plan" "$step_ms" \
                "$step_cmd" "$stop"
        fi
    elif [ -n "$step_ms" ]; then
        row "  GPU busy fraction, $label" info \
            "$(jget "$res/kernels-$name.txt" '"%.2f = %.2f ms of kernels / %.2f ms median step without ncu" % (j["busy_frac"], j["total_ms"], j["step_ms"])')" \
            "$step_cmd"
    else
        row "  GPU busy fraction, $label" "FAIL(no step time)" \
            "the same plan without ncu gave no median step" "$step_cmd"
    fi
}

# san TOOL NAME LABEL CMD...: CMD under compute-sanitizer --tool TOOL (with the
# variables of the array san_env in its environment); a row with the error count
# of its summary.
san_env=()
san() {
    local tool=$1 name=$2 label=$3 rc errs line verdict
    shift 3
    if [ $dry = 1 ]; then
        row "compute-sanitizer $tool, $label" "n/a" "not applicable in a dry run" ""
        return
    fi
    [ -n "$sanitizer" ] || tools >/dev/null
    if [ -z "$sanitizer" ]; then
        row "compute-sanitizer $tool, $label" "MISSING" \
            "compute-sanitizer not found on PATH nor under /usr/local/cuda*" ""
        return
    fi
    run "san-$tool-$name" 120 env "${san_env[@]}" "$sanitizer" --tool "$tool" "$@"
    rc=$?
    errs=$(grep -ho 'ERROR SUMMARY: [0-9]* error' "$res/san-$tool-$name.out" \
        "$res/san-$tool-$name.log" 2>/dev/null | tail -1 | awk '{ print $3 }')
    line=$(grep -ho 'RACECHECK SUMMARY: .*' "$res/san-$tool-$name.out" \
        "$res/san-$tool-$name.log" 2>/dev/null | tail -1)
    if [ -z "$errs" ] && [ -n "$line" ]; then
        errs=$(echo "$line" | sed -n 's/.*(\([0-9]*\) error.*/\1/p')
    fi
    # whose kernels the reports are in (tests/gpu/san_classify.py): reports
    # only inside library kernels (cuDNN, cuBLAS, CUTLASS, NCCL) are the
    # library's, not our failure; they are still shown
    local cls ours lib
    cls=$("$py" "$bundle/gpu/san_classify.py" "$res/san-$tool-$name.out" \
        "$res/san-$tool-$name.log" 2>/dev/null | tail -1)
    ours=$(echo "$cls" | "$py" -c 'import json,sys; print(json.loads(sys.stdin.read())["ours"])' 2>/dev/null)
    lib=$(echo "$cls" | "$py" -c 'import json,sys; print(json.loads(sys.stdin.read())["library"])' 2>/dev/null)
    case $rc in
        124|137|200) verdict=$(result_of $rc) ;;
        *) if [ -z "$errs" ]; then verdict="FAIL(no summary)"
           elif [ "$errs" -gt 0 ] && [ "${ours:-1}" = 0 ] && [ "${lib:-0}" -gt 0 ] && [ $rc -eq 0 ]; then
               verdict="LIBRARY($lib in library kernels)"
           elif [ "$errs" -gt 0 ]; then verdict="FAIL($errs errors)"
           elif [ $rc -ne 0 ]; then verdict="FAIL($rc)"
           else verdict=ok; fi ;;
    esac
    # the first reports, or why the program failed
    local what=""
    if [ "${verdict#LIBRARY}" != "$verdict" ]; then
        what="every report inside library kernels, none in ours: $(echo "$cls" | "$py" -c 'import json,sys; print(", ".join(json.loads(sys.stdin.read())["library_kernels"]))' 2>/dev/null | cut -c1-200)"
    elif [ "${errs:-0}" -gt 0 ] 2>/dev/null; then
        what=$(grep -h '^========= ' "$res/san-$tool-$name.out" "$res/san-$tool-$name.log" \
            2>/dev/null | grep -v 'COMPUTE-SANITIZER\|SUMMARY' | head -n 2 | tr '\n' ' ' | cut -c1-240)
    elif [ "$verdict" != ok ]; then
        what=$(why $rc "san-$tool-$name")
    fi
    echo "compute-sanitizer $tool, $label: $verdict"
    row "compute-sanitizer $tool, $label" "$verdict" \
        "${errs:-?} errors${line:+; $line}; exit status $rc${what:+: $what}" "$last_cmd"
}

# ---- part 5: correctness and diagnostics of bf16 on the GPU ----------------------

# The bf16 runs of part 4 at batch $1 in micro-batches of $2 (when it ran into
# the same results folder), or the same runs here: 1 stage (its median step is
# the busy fraction's), 2 and 4 stages (their memory).
bf16_runs_of() {
    local b=$1 split=$2 s sv
    if [ ! -s "$res/pr-1stage-b$b-bf16.out" ]; then
        plan_for "r50-1stage-b$b-bf16" "$b" "$b" "$steps" "$size" "$stages1" bf16
        pr "1stage-b$b-bf16" "$res/r50-1stage-b$b-bf16.yaml" --steps "$steps" \
            --device-map "$(map_all)" --layout auto >/dev/null
    fi
    for s in 2 4; do
        [ -s "$res/pr-${s}stage-b$b-split$split-bf16.out" ] && continue
        sv=stages$s
        plan_for "r50-${s}stage-b$b-split$split-bf16" "$b" "$split" 3 "$size" "${!sv}" bf16
        pr "${s}stage-b$b-split$split-bf16" "$res/r50-${s}stage-b$b-split$split-bf16.yaml" \
            --steps 3 --device-map "$(map_all)" >/dev/null
    done
}


# suite CAP [NAME...]: the tests of the bundle's tests.tsv, one row each: the
# CUDA suite's (every suite's with --all) in the order the names give first
# (the most telling first), then the others in meson's order; each limited
# to its meson timeout, CAP seconds and what is left of the section, which
# ends the list (the rest read SKIPPED, as a test cut short by CAP or the
# section rather than by its own timeout). Sets suite_fig.
suite_fig=""
suite() {
    local cap=$1 pass=0 fail=0 skip=0 suite name exe timeout args log rc r l why first
    shift
    local -a lines=() ordered=()
    while IFS= read -r first; do
        IFS=$'\t' read -r suite name _ <<<"$first"
        [ "$all" = 1 ] || [ "$suite" = cuda ] || continue
        lines+=("$first")
    done <"$bundle/tests.tsv"
    for first in "$@"; do
        for l in "${lines[@]}"; do
            IFS=$'\t' read -r _ name _ <<<"$l"
            [ "$name" = "$first" ] && ordered+=("$l")
        done
    done
    for l in "${lines[@]}"; do
        IFS=$'\t' read -r _ name _ <<<"$l"
        case " $* " in *" $name "*) ;; *) ordered+=("$l") ;; esac
    done
    for first in "${ordered[@]}"; do
        IFS=$'\t' read -r suite name exe timeout args <<<"$first"
        log=$res/test-$name.log
        l=$(left)
        if [ "$l" -lt 20 ]; then
            row "test $suite/$name" "SKIPPED" "time budget spent" "bin/$exe $args"
            skip=$((skip + 1))
            continue
        fi
        local own=$timeout
        [ "$timeout" -gt "$cap" ] && timeout=$cap
        [ "$timeout" -gt $((l - 5)) ] && timeout=$((l - 5))
        # the bundle's placeholders (bundle.sh): interpreters from PATH, the
        # bundle's executables, the source tree
        case $exe in @PATH@/*) exe=${exe#@PATH@/} ;; *) exe=./$exe ;; esac
        args=${args//@PATH@\//}
        args=${args//@BIN@/$bin}
        why=""
        if [[ $exe == ./* ]] && [ ! -x "$bin/$exe" ]; then why="not in the bundle (bundle.sh --small)"
        elif [[ $args == *@BUILD@* ]]; then why="needs the build folder"
        elif [[ $args == *@SRC@* ]] && [ -z "$source" ]; then why="needs the source tree (--source DIR)"
        fi
        if [ -n "$why" ]; then
            row "test $suite/$name" "SKIPPED" "$why" "cd bin && $exe $args"
            skip=$((skip + 1))
            continue
        fi
        args=${args//@SRC@/$source}
        # shellcheck disable=SC2086
        (cd "$bin" && timeout -k 5 "$timeout" env -u PP_CUDNN_CACHE $exe $args) >"$log" 2>&1
        rc=$?
        case $rc in
            0) pass=$((pass + 1)); r=PASS ;;
            77) skip=$((skip + 1)); r=SKIP ;;
            124|137)
                if [ "$timeout" -lt "$own" ]; then # cut short here, not by its own limit
                    skip=$((skip + 1)); r="SKIPPED(cut at ${timeout}s of its ${own}s; part 1 runs it whole)"
                else
                    fail=$((fail + 1)); r="FAIL(timed out after ${timeout}s)"
                fi ;;
            *) fail=$((fail + 1)); r="FAIL($rc)" ;;
        esac
        printf '%-8s %-24s %s\n' "$r" "$suite/$name" "$(tail -1 "$log")"
        row "test $suite/$name" "$r" "$(tail -1 "$log")" "cd bin && $exe $args"
    done
    suite_fig="$pass passed, $fail failed, $skip skipped or not reached"
    echo "$suite_fig"
}

# versions_row: the libraries and GPUs loaded (bin/gpu_versions) as a row;
# sets gv_json (its JSON line) for results.md.
gv_json=""
versions_row() {
    if [ ! -x "$bin/gpu_versions" ]; then
        row "library versions" "MISSING" "bin/gpu_versions (bundle.sh collects it from the CUDA build)" ""
        return
    fi
    run gpu-versions 30 "$bin/gpu_versions"
    local rc=$?
    cat "$res/gpu-versions.out" 2>/dev/null
    gv_json=$(tail -n 1 "$res/gpu-versions.out" 2>/dev/null)
    row "library versions (loaded)" "$([ $rc = 0 ] && echo ok || result_of $rc)" \
        "$(sed '$d' "$res/gpu-versions.out" 2>/dev/null | tr '\n' ';' | sed 's/;$//')" "$last_cmd"
}

# xcheck STAGES CAP: the bf16 cross-check against PyTorch (float64 reference)
# on cuda:0 (cpu in a dry run), stage counts STAGES (1,2,4), as one row.
xcheck() {
    local stages=$1 cap=$2 tdev=cuda:0 rc verdict
    [ $dry = 1 ] && tdev=cpu
    echo "== bf16 cross-check against PyTorch (float64 reference) on $tdev, stages $stages"
    # pipeline-run with this script's library path; PyTorch keeps the one it was given
    cat >"$res/pipeline-run.sh" <<SH
#!/bin/sh
LD_LIBRARY_PATH='$LD_LIBRARY_PATH' exec '$bin/pipeline-run' "\$@"
SH
    chmod +x "$res/pipeline-run.sh"
    local check=$bundle/torch/bf16_check.py name=bf16-check-${stages//,/-}
    if [ ! -f "$check" ]; then
        row "bf16 cross-check on $tdev" "FAIL(missing)" "$check (bundle.sh copies tests/torch)" ""
        return
    fi
    # (its checkpoints, about 1 GB, stay in a temporary folder)
    run "$name" "$cap" "${pyrun[@]}" "$check" "$res/pipeline-run.sh" --device "$tdev" \
        --stages "$stages"
    rc=$?
    case $rc in 0) verdict=PASS ;; 77) verdict=SKIP ;; *) verdict=$(result_of $rc) ;; esac
    grep -E '^(FAIL|info) ' "$res/$name.out" 2>/dev/null | cut -c1-200
    tail -n 3 "$res/$name.out" 2>/dev/null
    row "bf16 cross-check on $tdev ($stages stage(s); goal: within 3x PyTorch autocast's error)" \
        "$verdict" \
        "$(grep -m1 '^worst ratio' "$res/$name.out" 2>/dev/null || why $rc "$name"); $(tail -n 1 "$res/$name.out" 2>/dev/null)" \
        "$last_cmd"
}

# vs_torch LABEL OURS_IPS TORCH_IPS GOAL: the ratio row of ours to PyTorch's.
vs_torch() {
    local rt; rt=$(ratio "$2" "$3")
    row "  ours / $1" "$(ge "$rt" "$4")" "${rt:-?} (goal >= $4): ${2:-?} / ${3:-?} img/s" ""
}

# counts STAGES GRAPHS N1 N2 [PLAN WHAT UNIT]: cudaMalloc/cudaFree, host
# synchronisations and launches per steady-state step of ResNet-50 at the
# batch in micro-batches of SPLIT (the variable split), or of the plan file
# PLAN (rows saying WHAT instead of "STAGES stage(s)", its samples a second
# in UNIT), from the LD_PRELOAD interposer: the
# difference of an N2- and an N1-step run (the first steps warm up and
# capture), divided by N2 - N1. Both runs measure their convolution
# algorithms in their first step (no shared algorithm file), unless
# counts_heuristic=1: then both take cuDNN's heuristic choices
# (PP_CUDNN_FIND=0), which is faster and leaves the steady state as it is.
counts_heuristic=0
counts() {
    local s=$1 g=$2 n1=$3 n2=$4 lib=$bundle/tools/libcuda_count.so map n rc tag c_lo="" c_hi="" cmd_hi=""
    local per=$((n2 - n1)) sv=stages$1 plan=${5:-} what=${6:-"$1 stage(s)"} unit=${7:-img/s}
    map=$(map_all)
    if [ ! -f "$lib" ]; then
        row "CUDA calls per step" "FAIL(no interposer)" "$lib missing (bundle.sh builds it)" ""
        return
    elif [ -z "$cudart" ]; then
        row "CUDA calls per step" "FAIL(static cudart)" "pipeline-run does not load libcudart.so: calls cannot be interposed" "ldd bin/pipeline-run"
        return
    fi
    if [ -z "$plan" ]; then
        plan_for "r50-${s}stage-split$split" "$batch" "$split" "$steps" "$size" "${!sv}"
        plan=$res/r50-${s}stage-split$split.yaml tag="${s}stage-graphs-$g"
    else
        tag="$(basename "$plan" .yaml)-graphs-$g"
    fi
    local -a how=()
    [ "$counts_heuristic" = 1 ] && how=(PP_CUDNN_FIND=0)
    # The figures are differences of two runs ($n2 steps minus $n1), which
    # hold only when both runs' first $n1 steps make the same calls. cuDNN's
    # timed algorithm search does not: its choices (and so the workspaces and
    # scratch they allocate) vary from run to run, and an H200 run read
    # "cudaMallocAsync -1". So a first 1-step run measures the algorithms into
    # a cache file that both counted runs read: neither measures, both choose
    # the same.
    if [ "$counts_heuristic" != 1 ]; then
        local cache="$res/counts-$tag-algos.txt"
        rm -f "$cache"
        run "count-$tag-algos" 180 env -u PP_CUDA_GRAPHS PP_CUDNN_CACHE="$cache" \
            "$bin/pipeline-run" "$plan" --steps 1 \
            --device-map "$map" --cuda-graphs "$g" --json
        how=(PP_CUDNN_CACHE="$cache")
    fi
    for n in "$n1" "$n2"; do
        rm -f "$res/counts-$tag-$n.txt"
        run "count-$tag-$n" 180 env -u PP_CUDNN_CACHE -u PP_CUDA_GRAPHS "${how[@]}" \
            LD_PRELOAD="$lib" PP_CUDA_COUNT_OUT="$res/counts-$tag-$n.txt" \
            "$bin/pipeline-run" "$plan" --steps "$n" \
            --device-map "$map" --cuda-graphs "$g" --json
        rc=$?
        if [ $rc -ne 0 ]; then
            row "CUDA calls per step, $what, $n steps, graphs $g" "$(result_of $rc)" \
                "$(why $rc "count-$tag-$n")" "$last_cmd"
            return
        fi
        [ "$n" = "$n1" ] && c_lo=$(counts_of "$res/counts-$tag-$n.txt")
        [ "$n" = "$n2" ] && { c_hi=$(counts_of "$res/counts-$tag-$n.txt"); cmd_hi=$last_cmd; }
    done
    if [ -z "$c_lo" ] || [ -z "$c_hi" ]; then
        row "CUDA calls per step, $what, graphs $g" "FAIL(no counts)" \
            "the interposer wrote nothing (not preloaded?)" "$cmd_hi"
        return
    fi
    local k d fig="" bad=0 syncs=0 neg=""
    for k in cudaMalloc cudaFree cudaMallocHost cudaHostAlloc cudaFreeHost cudaMallocManaged \
        cudaMallocAsync cudaFreeAsync cudaMallocFromPoolAsync cudaDeviceSynchronize \
        cudaStreamSynchronize cudaEventSynchronize cudaMemcpy; do
        d=$(( $(field "$c_hi" "$k") - $(field "$c_lo" "$k") ))
        [ "$d" -lt 0 ] && neg+="$k "
        fig+="$k $d, "
        case $k in cudaMalloc|cudaFree|cudaMallocHost|cudaHostAlloc|cudaFreeHost|cudaMallocManaged)
            [ "$d" -ne 0 ] && bad=1 ;;
            cudaDeviceSynchronize|cudaStreamSynchronize|cudaEventSynchronize|cudaMemcpy)
            syncs=$((syncs + d)) ;;
        esac
    done
    local verdict=ok
    [ $bad = 1 ] && verdict="FAIL(allocates)"
    if [ -n "$neg" ]; then
        # fewer calls in the longer run: the two warm-ups differed, the
        # difference is no count of the steady steps
        verdict="FAIL(runs differ)"
        fig="the $n2-step run made fewer calls than the $n1-step run (${neg% }): their first $n1 steps differed, no steady-state count; $fig"
    fi
    if [ "$(field "$c_hi" cudaMallocAsync)" -eq 0 ] && [ "$(field "$c_hi" cudaMalloc)" -eq 0 ]; then
        verdict="FAIL(not intercepted)"
        [ $dry = 1 ] && verdict="n/a" # the CPU makes no CUDA call
        fig="no allocation call seen at all ($n2 steps): the interposer did not see the runtime; $fig"
    fi
    local ps; ps=$(awk -v n=$syncs -v p=$per 'BEGIN { printf "%.1f", n / p }')
    echo "$what, graphs $g, per $per steady-state steps: ${fig%, }"
    row "CUDA allocation calls per $per steps, $what, graphs $g" "$verdict" \
        "${fig%, } ($n2 steps minus $n1; goal cudaMalloc = cudaFree = 0; async pool calls allowed)" \
        "$cmd_hi (and --steps $n1)"
    # host waits: device, stream, event synchronisations, synchronous copies;
    # the goal is at most one per device and step
    local devs=1
    [ "$s" -gt 1 ] && [ "$ngpu" -gt 1 ] && devs=$s
    row "host waits per steady step, $what, graphs $g" "$(le "$ps" "$devs")" \
        "$ps per step ($syncs in $per; goal at most $devs: one per device)" "$cmd_hi (and --steps $n1)"
    local gl kl bc mode refused verdict_g
    gl=$(( $(field "$c_hi" cudaGraphLaunch) - $(field "$c_lo" cudaGraphLaunch) ))
    kl=$(( $(field "$c_hi" cudaLaunchKernel) - $(field "$c_lo" cudaLaunchKernel) ))
    bc=$(field "$c_hi" cudaStreamBeginCapture)
    mode=$(jget "$res/count-$tag-$n2.out" 'j["cuda_graphs"]["mode"]')
    refused=$(jget "$res/count-$tag-$n2.out" 'j["cuda_graphs"]["refused"] or ""')
    verdict_g=ok
    if [ "$mode" = "n/a" ]; then
        verdict_g=info
    elif [ "$g" = on ] && [ "$gl" -lt "$per" ]; then
        verdict_g="FAIL(eager)"
    elif [ "$g" = off ] && [ "$gl" -ne 0 ]; then
        verdict_g="FAIL(graphs)"
    fi
    row "graph launches per steady step, $what, graphs $g" "$verdict_g" \
        "$(awk -v n=$gl -v p=$per 'BEGIN { printf "%.1f", n / p }') graph launch(es) and $(awk -v n=$kl -v p=$per 'BEGIN { printf "%.1f", n / p }') runtime kernel launches per step, $bc capture(s) in $n2 steps; mode ${mode:-?}${refused:+; refused: $refused}" \
        "$cmd_hi (and --steps $n1)"
    counts_ips=$(jget "$res/count-$tag-$n2.out" 'j["images_per_s"]')
    local rate="images/s, $what, split $split"
    [ -n "${5:-}" ] && rate="$unit, $what"
    row "$rate, graphs $g" \
        "$([ -n "$counts_ips" ] && echo ok || echo 'FAIL(no figure)')" \
        "${counts_ips:-?} $unit ($n2 steps under the interposer, first excluded)" "$cmd_hi"
}
counts_ips=""

# tools: ncu and compute-sanitizer, where this machine has them
tools() {
    ncu=$(find_tool ncu /usr/local/cuda/bin/ncu /usr/local/cuda/nsight-compute*/ncu \
        /usr/local/cuda-*/nsight-compute*/ncu /opt/nvidia/nsight-compute/*/ncu)
    sanitizer=$(find_tool compute-sanitizer /usr/local/cuda/bin/compute-sanitizer \
        /usr/local/cuda/compute-sanitizer/compute-sanitizer /usr/local/cuda-*/bin/compute-sanitizer)
    echo "ncu: ${ncu:-not found}; compute-sanitizer: ${sanitizer:-not found}"
}

# tiny2 NAME PRECISION: a 2-stage ResNet-18 plan of $res/NAME.yaml small
# enough for the sanitizers (32x32 in a dry run too; batch 4 in micro-batches of 2).
tiny2() {
    cat >"$res/$1.yaml" <<YAML
model: {name: resnet18, num_classes: 10, in_channels: 3, stem: imagenet}
batch: {size: 4, split_size: 2}
schedule: 1f1b
precision: $2
optimizer: {type: sgd, lr: 0.01, momentum: 0.9, weight_decay: 0.0001, nesterov: false}
data: {format: synthetic, image_size: [32, 32]}
seed: 1
steps: 2
stages:
$stages2
YAML
}

# conv_apis MATH: of the PP_CUDNN_CACHE file's entries of that math mode under
# the default cap, how many run the graph API's plan, and the time of one
# call of each convolution by the algorithms and by the plans chosen.
conv_apis() {
    local file=${PP_CUDNN_CACHE:-}
    [ -f "$file" ] || file=/dev/null
    awk -F'\t' -v m="$1" '
        $3 == m && $4 == 512 && NF == 13 {
            n++; legacy += $9; if ($13 > 0) timed++
            if ($12 == "graph") { g++; best += $13 } else best += $9
        }
        END {
            if (!n) print "no convolution choices recorded (no cuDNN here, or no file)"
            else printf "%d of %d convolutions run the graph API'"'"'s plan (%d timed); one call of each: %.3f ms by the algorithms, %.3f ms as chosen\n", g, n, timed, legacy, best
        }' "$file"
}
