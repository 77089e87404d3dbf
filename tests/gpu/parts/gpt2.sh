# gpt2.sh - run-all.sh --part gpt2 (sourced by it): GPT-2 on CUDA, in the
# order of what decides the issue's goal (the part's budget, 390 s, cuts the
# sections at the end first):
#   tests (60 s): the CUDA suite's test_cuda_gpt2 (every transformer op
#     against the CPU, two steps of a tied GPT-2 in 1 and 2 stages, six with
#     dropout replaying graphs; which attention and which dense arithmetic
#     ran).
#   speed (170 s): GPT-2 124M (12 blocks of 768, 12 heads, vocabulary 50257),
#     batch 8 x 1024 tokens, 1 stage, SGD with momentum, random tokens:
#     tokens/s and peak memory of ours in bf16 against PyTorch's bf16
#     autocast, eager and torch.compile (tests/gpu/torch_gpt2.py,
#     scaled_dot_product_attention; goal: >= 1.0 of torch.compile), and ours
#     again with PP_CUDA_UNPADDED=1 (the head's GEMMs on the logits at their
#     own pitch, 50257 columns, not a whole number of 16 bytes: what the
#     padded copies bring, blaslt.c), with PP_CUDA_PITCH_ONLY=1 (the pitch
#     padded but not the vocabulary's extent, m in the head's forward and k
#     in its dx: the sixth run's align1 kernels), and with
#     PP_CUDA_BF16_VIA_F32=1 (c_attn's
#     and c_fc's outputs through an fp32 product, what the bf16 epilogues
#     bring, dense.c).
#   diagnostics (80 s): the bf16 step's kernels under ncu (one steady step,
#     as part 10 takes ResNet-50's), grouped by family by kernel_table.py
#     (attention, gemm, layer norm, gelu, loss, embedding, bias grad, ...)
#     against the step's median, and per unit and pass by the profiler
#     ranges the kernels were launched in (h.* forward, lm_head backward,
#     ...: the head's GEMMs against the blocks'; graphs off for that
#     profile, ktable_ranges in common.sh).
#   correctness (60 s): --generate on the GPU, never run there before: 64
#     tokens greedy from a 1-step fp32 checkpoint in fp32 and bf16 (each new
#     token's forward over the cache of keys and values), in fp32 without
#     the cache (--no-kv-cache), and in fp32 on the CPU backend; in fp32
#     with and without the cache after a prompt of 960 tokens; the rate
#     and wall time of each, and how many of the GPU's tokens equal the
#     CPU's (and the cache's the windows').
#   correctness (110 s): tests/torch/gpt2_check.py with its two stages both
#     on cuda:0 (the tied embedding on the first, the head's copy on the
#     second): every tensor of two AdamW steps within 3x PyTorch fp32's own
#     error against float64 (float64 on the CPU; PyTorch fp32's error, the
#     yardstick, the larger of its runs on the CPU and on cuda:0; a
#     weight's elements whose AdamW denominator is under 100 eps left out,
#     and each update checked instead against float64 AdamW on our own
#     moments), for vocabularies of 256 (tied and untied) and 50257; the
#     worst tensor's worst element with AdamW's denominator there in units
#     of eps. Before the variants: ~50 s on an H200, and the sixth run's
#     budget cut it where it came after them.
#   speed (150 s), the variants: ours bf16 with model.dropout 0.1 (masks
#     drawn by hash in graphs that replay, the kernels reading the step from
#     device memory) and with PP_CUDA_GRAPHS=off (what the graphs bring);
#     ours fp32 against PyTorch eager fp32, and with PP_CUDA_ATTN=own (our
#     CUDA-core attention, attention.cu, against the default 3xTF32
#     tensor-core kernels, attention_tf32.cu); ours tf32 against PyTorch
#     eager and torch.compile tf32, and with PP_CUDA_UNFUSED=1 (what the
#     fused ops bring); ours bf16 with PP_CUDA_BF16_WIDE=1 (the f32
#     stand-ins: what the native bf16 path brings), PP_CUDA_ATTN=own and
#     PP_CUDA_ATTN=mma (cuDNN's fused attention, the default, against our
#     CUDA-core and tensor-core kernels; which ran: test_cuda_gpt2's 'causal
#     attention' lines).
#   diagnostics (60 s): the fp32 step's kernels (its attention the 3xTF32
#     kernels: section 8's ~5 ms a step).
# With --budget 390 the last two sections run only where the others ended
# early; give the part a larger budget (or run --part all) for all of it.
# In a dry run: 2 blocks of 64, vocabulary 256, batch 2 x 64, PyTorch on the CPU.
# shellcheck shell=bash disable=SC2154

# gpt2_tokens FILE N VOCAB: an llm.c .bin file of N random tokens below VOCAB.
gpt2_tokens() {
    "$py" - "$1" "$2" "$3" <<'PY'
import struct, sys, random
path, n, vocab = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = random.Random(1)
with open(path, "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)))
    f.write(struct.pack("<%dH" % n, *(rng.randrange(vocab) for _ in range(n))))
PY
}

# gpt2_plan NAME PRECISION: $res/NAME.yaml, the part's GPT-2 on cuda:0
# (with model.dropout g_dropout where it is set).
g_dropout=""
gpt2_plan() {
    cat >"$res/$1.yaml" <<YAML
model: {name: gpt2, n_layer: $g_layers, n_head: $g_heads, n_embd: $g_embd, vocab_size: $g_vocab, block_size: $g_t${g_dropout:+, dropout: $g_dropout}}
batch: {size: $g_batch, split_size: $g_batch}
schedule: 1f1b
precision: $2
optimizer: {type: sgd, lr: 0.01, momentum: 0.9}
data: {format: tokens, file: $res/gpt2-tokens.bin, shuffle: true}
seed: 1
steps: $g_steps
stages:
  - {device: cuda:0, layers: [wte, wpe, h, ln_f, lm_head]}
YAML
}

# gpt2_ours PRECISION [TAG]: ours 1 stage (with pr_env in its environment);
# sets g_tps[PRECISION TAG] and a row.
declare -A g_tps=() g_peak=()
gpt2_ours() {
    local p=$1 name=gpt2-1stage-$1${2:+-$2} fig k=$1${2:+ $2}
    gpt2_plan "$name" "$p"
    if pr "$name" "$res/$name.yaml" --steps "$g_steps" --device-map "$(map_all)"; then
        g_tps[$k]=$(awk -v w="$pr_ips" -v t="$g_t" 'BEGIN { printf "%.0f", w * t }')
        g_peak[$k]=$(jget "$res/pr-$name.out" '"%.2f" % (j["stages"][0]["peak_bytes"] / 2.0**30)')
        fig="${g_tps[$k]} tokens/s, $(jget "$res/pr-$name.out" '"%.1f ms/step median (min %.1f)" % (j["step_ms"]["median"], j["step_ms"]["min"])'), peak ${g_peak[$k]:-?} GiB"
        # whether the steady steps replayed a CUDA graph (a refused capture
        # runs every step eagerly: its launches then count in the step)
        fig+=", graphs $(jget "$res/pr-$name.out" '"%s (%d captured, %d replayed)%s" % (j["cuda_graphs"]["mode"], j["cuda_graphs"]["captured"], j["cuda_graphs"]["replayed"], "; refused: " + j["cuda_graphs"]["refused"] if j["cuda_graphs"]["refused"] else "")')"
        echo "ours $k: $fig"
        row "ours GPT-2 $g_what, $k, 1 stage" ok "$fig" "$last_cmd"
    else
        row "ours GPT-2 $g_what, $k, 1 stage" "$(result_of $?)" "$pr_fig" "$last_cmd"
    fi
}

# gpt2_torch NAME LABEL ARGS...: tests/gpu/torch_gpt2.py ARGS at the part's
# sizes as a row; sets tg_tps.
tg_tps=""
gpt2_torch() {
    local name=$1 label=$2 rc
    shift 2
    torch_row "$name" "$label" torch_gpt2.py tokens_per_s --layers "$g_layers" \
        --heads "$g_heads" --embd "$g_embd" --vocab "$g_vocab" --positions "$g_t" \
        --batch "$g_batch" --steps "$g_steps" --warmup "$g_warm" "$@"
    rc=$?
    tg_tps=$torch_fig
    return $rc
}

# gpt2_vs LABEL OURS THEIRS GOAL: ours / theirs as a row.
gpt2_vs() {
    local rt; rt=$(ratio "$2" "$3")
    row "  ours / $1" "$(ge "$rt" "$4")" "${rt:-?} (goal >= $4): ${2:-?} / ${3:-?} tokens/s" ""
}

# gpt2_against PREC LABEL [--compile]: PyTorch's GPT-2 at PREC (LABEL in its
# row) as a row, then ours at PREC / theirs (goal 1.0).
gpt2_against() {
    local p=$1 label=$2 kind=eager
    shift 2
    [ "${1:-}" = --compile ] && kind=compile
    if gpt2_torch "$kind-$p" "$label" --device "$tdev" --precision "$p" "$@"; then
        gpt2_vs "${label%% GPT-2*} $p" "${g_tps[$p]:-}" "$tg_tps" 1.0
    fi
}

# gpt2_variant PREC NAME SETTING WHAT: ours at PREC again under SETTING, an
# environment variable's (VAR=VALUE) or the plan's model.dropout
# (model.dropout=P) (key "PREC NAME"), and a row of the default run / that one.
gpt2_variant() {
    local p=$1 k="$1 $2"
    case $3 in
        model.dropout=*) g_dropout=${3#model.dropout=} ;;
        *) pr_env=("$3") ;;
    esac
    gpt2_ours "$p" "$2"
    pr_env=() g_dropout=""
    row "  $4 ($3), $p" info \
        "$(ratio "${g_tps[$p]:-}" "${g_tps[$k]:-}"): ${g_tps[$p]:-?} / ${g_tps[$k]:-?} tokens/s" ""
}

# gpt2_generate: --generate on the GPU (never run there before): a 1-step
# fp32 checkpoint of the part's GPT-2, then 64 tokens greedy from it in fp32
# and bf16 on the GPU (the cache of keys and values: one position a
# forward), in fp32 on the GPU without the cache (--no-kv-cache: the
# windows of positions) and in fp32 on the CPU backend; then in fp32 on the
# GPU with and without the cache after a prompt that fills the window but
# for the new tokens (where the windows cost a whole window a token); the
# rate and wall time of each and how many of the GPU's tokens the CPU's
# equal (greedy argmax: fp32 on both should agree but for near-ties; bf16
# rounds the logits), and the cache's against the windows'.
gpt2_generate() {
    local ck="$res/gpt2-gen.safetensors" n=64 prompt="15496 11 995" p plan map t0 t1 fig rc extra what text long k
    local -A toks=()
    [ $dry = 1 ] && prompt="15 11 99"
    gpt2_plan gpt2-gen fp32
    gpt2_plan gpt2-gen-bf16 bf16
    run gpt2-gen-save 60 "$bin/pipeline-run" "$res/gpt2-gen.yaml" --steps 1 --save "$ck" \
        --device-map "$(map_all)"
    rc=$?
    if [ $rc -ne 0 ]; then
        row "generate: a 1-step fp32 checkpoint" "$(result_of $rc)" "$(why $rc gpt2-gen-save)" "$last_cmd"
        return
    fi
    # a prompt that fills the window but for the new tokens (64; in a dry
    # run's window of 64, half of it each)
    local ln=$((g_t - n)) nl=$n
    [ $ln -lt $((g_t / 2)) ] && ln=$((g_t / 2)) nl=$((g_t - g_t / 2))
    long=$(awk -v n=$ln -v v="$g_vocab" \
        'BEGIN { for (i = 0; i < n; i++) printf "%s%d", i ? " " : "", (i * 7919 + 13) % v }')
    for p in fp32 bf16 fp32-windows cpu fp32-long fp32-long-windows; do
        plan=$res/gpt2-gen.yaml map=$(map_all) extra=() text=$prompt k=$n
        [ $p = bf16 ] && plan=$res/gpt2-gen-bf16.yaml
        case $p in *windows) extra=(--no-kv-cache) ;; esac
        case $p in *long*) text=$long k=$nl ;; esac
        [ $p = cpu ] && map="cuda:*=cpu"
        t0=$(date +%s.%N)
        run "gpt2-gen-$p" 90 "$bin/pipeline-run" "$plan" --load "$ck" --generate "$text" \
            --tokens "$k" --temperature 0 --device-map "$map" "${extra[@]}"
        rc=$?
        t1=$(date +%s.%N)
        if [ $rc -ne 0 ]; then
            row "generate $k tokens, $p" "$(result_of $rc)" "$(why $rc "gpt2-gen-$p")" "$last_cmd"
            continue
        fi
        toks[$p]=$(tr -s ' \n' '\n\n' <"$res/gpt2-gen-$p.out" | grep -v '^$' | tail -n "$k" | tr '\n' ' ')
        fig="$(grep -h '^generated ' "$res/gpt2-gen-$p.log" 2>/dev/null | tail -1); $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }') s wall (the process: start, load, $k forwards)"
        case $p in
            cpu) what="fp32 on the CPU backend" ;;
            fp32-windows) what="fp32 on $tdev without the cache (--no-kv-cache)" ;;
            fp32-long) what="fp32 on $tdev after a prompt of $ln" ;;
            fp32-long-windows) what="fp32 on $tdev after a prompt of $ln, --no-kv-cache" ;;
            *) what="$p on $tdev" ;;
        esac
        row "generate $k tokens greedy, $what" ok "$fig" "$last_cmd"
    done
    # the GPU's tokens against the CPU backend's (and the cache's against the
    # windows'), one by one until the first difference
    for p in fp32 bf16 fp32-windows fp32-long-windows; do
        local q=cpu
        [ $p = fp32-windows ] && q=fp32
        [ $p = fp32-long-windows ] && q=fp32-long
        [ -n "${toks[$p]:-}" ] && [ -n "${toks[$q]:-}" ] || continue
        fig=$("$py" - "${toks[$p]}" "${toks[$q]}" <<'PY'
import sys
a, b = sys.argv[1].split(), sys.argv[2].split()
same = sum(x == y for x, y in zip(a, b))
first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)
print("%d of %d equal%s" % (same, len(b), "" if first is None else ", the first difference at token %d" % first))
PY
)
        if [ $p = fp32-windows ]; then
            row "  fp32 on $tdev, the windows' tokens / the cache's" info "$fig" ""
        elif [ $p = fp32-long-windows ]; then
            row "  fp32 on $tdev after a prompt of $ln, the windows' tokens / the cache's" info "$fig" ""
        else
            row "  $p on $tdev / the CPU backend's fp32 tokens" info "$fig" ""
        fi
    done
}

# gpt2_sizes: the part's GPT-2 (124M at batch 8 x 1024; tiny in a dry run)
# and its token file, $res/gpt2-tokens.bin, enough for the steps of any run.
gpt2_sizes() {
    g_layers=12 g_heads=12 g_embd=768 g_vocab=50257 g_t=1024 g_batch=8 g_steps=10 g_warm=3
    if [ $dry = 1 ]; then
        g_layers=2 g_heads=2 g_embd=64 g_vocab=256 g_t=64 g_batch=2 g_steps=3 g_warm=1
    fi
    g_what="$g_layers x $g_embd, batch $g_batch x $g_t"
    [ -f "$res/gpt2-tokens.bin" ] ||
        gpt2_tokens "$res/gpt2-tokens.bin" $((g_batch * (g_t + 1) * (g_steps + 4))) "$g_vocab"
}

partgpt2() {
    cur_part=gpt2
    local tdev=cuda:0 gmap="cpu:*=cuda:0" rc verdict map
    [ $dry = 1 ] && tdev=cpu gmap="cpu:*=cpu:0"
    gpt2_sizes

    section tests 60
    echo "== test_cuda_gpt2: the transformer ops and two GPT-2 steps on cuda:0 against the CPU"
    if [ $dry = 1 ]; then
        row "test cuda/cuda_gpt2" "n/a" "not applicable in a dry run (its cpu mode is the cuda-harness suite's)" ""
    else
        run test-cuda_gpt2 55 "$bin/test_cuda_gpt2"
        rc=$?
        case $rc in 0) verdict=PASS ;; 77) verdict=SKIP ;; *) verdict=$(result_of $rc) ;; esac
        grep -E '^gpt2 |FAIL' "$res/test-cuda_gpt2.log" 2>/dev/null | head -8 | cut -c1-200
        # which attention ran (bf16 under PP_CUDA_ATTN=cudnn and mma: cuDNN's,
        # the tensor-core kernels or ours; f32: 3xTF32 or ours; and why)
        grep -h '^causal attention' "$res/test-cuda_gpt2".{out,log} 2>/dev/null | sort -u | cut -c1-240
        # which arithmetic the bf16 dense layers with a bias ran at GPT-2's
        # shapes: cuBLASLt's bf16 epilogues, or through fp32 where it refused them
        grep -h '^dense bf16 epilogues' "$res/test-cuda_gpt2".{out,log} 2>/dev/null | sort -u | cut -c1-240
        row "test cuda/cuda_gpt2" "$verdict" \
            "$(grep -ho 'checks, [0-9]* failed' "$res/test-cuda_gpt2.out" "$res/test-cuda_gpt2.log" 2>/dev/null | tail -1); $(grep -h 'vs 1 stage' "$res/test-cuda_gpt2.log" 2>/dev/null | head -1 | cut -c1-160)" \
            "$last_cmd"
    fi

    section speed 170
    echo "== GPT-2 $g_what, tokens/s: pipeline-run vs PyTorch (the goal's rows first)"
    gpt2_ours bf16
    gpt2_against bf16 "torch eager GPT-2 bf16 autocast"
    gpt2_against bf16 "torch.compile GPT-2 bf16 autocast (the issue's goal)" --compile
    # the head's GEMMs at the logits' own pitch (50257 columns: unaligned)
    gpt2_variant bf16 unpadded PP_CUDA_UNPADDED=1 "padded / unpadded pitch"
    # the head's m (forward) and k (dx) padded to 50264 as well as the pitch,
    # against the pitch only (the sixth run's align1 kernels: blaslt.c)
    gpt2_variant bf16 pitch-only PP_CUDA_PITCH_ONLY=1 "padded extents / pitch only"
    # c_attn's and c_fc's bias and GELU (and the backward's GELU') in cuBLASLt's
    # bf16 epilogues against an fp32 product and kernels of ours after it
    gpt2_variant bf16 via-f32 PP_CUDA_BF16_VIA_F32=1 "bf16 epilogues / via fp32"

    section diagnostics 80
    echo "== kernels per step (ncu), GPT-2 $g_what, bf16, 1 stage"
    map=$(map_all)
    # each kernel also named by its unit and pass (wte, h.*, ln_f, lm_head;
    # forward, backward): where the head's GEMMs stand against the blocks'
    ktable_ranges=1
    ktable gpt2-bf16 "GPT-2 bf16 1 stage, $g_what" "$res/gpt2-1stage-bf16.yaml" \
        "$(jget "$res/pr-gpt2-1stage-bf16.out" 'j["step_ms"]["median"]')" \
        "$(cat "$res/pr-gpt2-1stage-bf16.cmd" 2>/dev/null)"
    ktable_ranges=0

    section correctness 60
    echo "== --generate: 64 tokens greedy on $tdev and on the CPU backend"
    gpt2_generate

    section correctness 110
    echo "== GPT-2 against PyTorch float64, two stages on $tdev (the tied embedding split)"
    cat >"$res/pipeline-run.sh" <<SH
#!/bin/sh
LD_LIBRARY_PATH='$LD_LIBRARY_PATH' exec '$bin/pipeline-run' "\$@"
SH
    chmod +x "$res/pipeline-run.sh"
    run gpt2-check 105 "${pyrun[@]}" "$bundle/torch/gpt2_check.py" "$res/pipeline-run.sh" \
        --device-map "$gmap"
    rc=$?
    case $rc in 0) verdict=PASS ;; 77) verdict=SKIP ;; *) verdict=$(result_of $rc) ;; esac
    grep -E '^FAIL ' "$res/gpt2-check.out" 2>/dev/null | cut -c1-200
    row "GPT-2 vs PyTorch float64, 2 stages on $tdev (goal: within 3x PyTorch fp32's error)" \
        "$verdict" "$(grep -c '^ok ' "$res/gpt2-check.out" 2>/dev/null) checks passed; $(grep -m1 'step 1: ' "$res/gpt2-check.out" 2>/dev/null | cut -c1-160); $(tail -n 1 "$res/gpt2-check.out" 2>/dev/null)" \
        "$last_cmd"

    section speed 150
    echo "== GPT-2 $g_what, tokens/s: the variants"
    # dropout's masks drawn in graphs that replay (the step in device memory)
    gpt2_variant bf16 dropout model.dropout=0.1 "no dropout / dropout"
    # what replaying the step's graph brings against launching it from the host
    gpt2_variant bf16 eager PP_CUDA_GRAPHS=off "graphs / eager"
    gpt2_ours fp32
    gpt2_against fp32 "torch eager GPT-2 fp32"
    # the f32 attention: our 3xTF32 tensor-core kernels (the default) / our CUDA-core ones
    gpt2_variant fp32 attn-own PP_CUDA_ATTN=own "attention 3xTF32 / own"
    gpt2_ours tf32
    gpt2_against tf32 "torch eager GPT-2 tf32"
    gpt2_against tf32 "torch.compile GPT-2 tf32" --compile
    gpt2_variant tf32 unfused PP_CUDA_UNFUSED=1 "fused / unfused"
    gpt2_variant bf16 wide PP_CUDA_BF16_WIDE=1 "native / stand-ins"
    # the default bf16 run above is PP_CUDA_ATTN=cudnn's
    gpt2_variant bf16 attn-own PP_CUDA_ATTN=own "attention cuDNN / own"
    gpt2_variant bf16 attn-mma PP_CUDA_ATTN=mma "attention cuDNN / mma"

    # the fp32 step's (its attention: the 3xTF32 kernels), in what the part's
    # budget has left
    section diagnostics 60
    echo "== kernels per step (ncu), GPT-2 $g_what, fp32, 1 stage"
    ktable gpt2-fp32 "GPT-2 fp32 1 stage, $g_what" "$res/gpt2-1stage-fp32.yaml" \
        "$(jget "$res/pr-gpt2-1stage-fp32.out" 'j["step_ms"]["median"]')" \
        "$(cat "$res/pr-gpt2-1stage-fp32.cmd" 2>/dev/null)"
}
