#!/usr/bin/env python3
"""tools_test.py - the GPU runner's parsers, without a GPU: kernel_table.py on
an ncu CSV with a kernel that has no time (nan: a launch that failed under
ncu) and ==ERROR== lines, the same kernels named by profiler ranges (--ranges), and san_classify.py on racecheck reports inside a
library kernel and inside one of ours. Exit 0 on success."""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from checks import Checks  # noqa: E402

here = os.path.dirname(os.path.abspath(__file__))


CHECKS = Checks(stream=sys.stdout)
check = CHECKS.check


def run(script, *args):
    p = subprocess.run([sys.executable, os.path.join(here, script), *args],
                       capture_output=True, text=True)
    return p.returncode, p.stdout


HEAD = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream",'
        '"Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit",'
        '"Metric Value"\n')


def kernel(i, name, value):
    return ('"%d","1","p","h","%s","1","7","(256, 1, 1)","(4, 1, 1)","0","9.0","s",'
            '"gpu__time_duration.sum","ns","%s"\n' % (i, name, value))


with tempfile.TemporaryDirectory() as d:
    ncu = os.path.join(d, "ncu.out")
    with open(ncu, "w") as f:
        f.write("==PROF== Connected to process 1\n==ERROR== LaunchFailed\n")
        f.write(HEAD)
        f.write(kernel(0, "void cudnn::bn_fw_tr_1C11_kernel_NCHW<float>(int)", "1,000"))
        f.write(kernel(1, "void <unnamed>::ew_vec_k<relu_op>(long)", "500"))
        f.write(kernel(2, "void cudnn::bn_fw_tr_1C11_singleread<float>(args)", "nan"))
        f.write(kernel(3, "void <unnamed>::mystery_k(int)", "250"))
    rc, out = run("kernel_table.py", ncu, "--step-ms", "2")
    check(rc == 0, "kernel_table.py exit %d" % rc)
    j = json.loads(out.strip().splitlines()[-1]) if out.strip() else {}
    check(j.get("kernels") == 4, "4 kernel rows: %s" % j.get("kernels"))
    check(abs(j.get("total_ms", -1) - 0.00175) < 1e-12,
          "total of the measured kernels 0.00175 ms, not nan: %s" % j.get("total_ms"))
    check([o[0] for o in j.get("other", [])] == ["mystery_k"]
          and "longest of family other:" in out,
          "family other's kernels listed: %s" % j.get("other"))
    check(j.get("families", {}).get("batch norm", {}).get("ms") == 0.001,
          "batch norm ms without the nan row: %s" % j.get("families"))
    check([u[0] for u in j.get("unmeasured", [])] == ["bn_fw_tr_1C11_singleread"],
          "the nan row listed as not measured: %s" % j.get("unmeasured"))
    check(j.get("ncu_errors") == ["==ERROR== LaunchFailed"], "ncu errors: %s" % j.get("ncu_errors"))
    check("nan" not in out.lower().replace("not measured", ""), "no nan printed:\n" + out)

    # a GPT-2 step's kernels, each in its family (cuDNN's attention names
    # its direction as a convolution does: attention first)
    gpt = {"void (anonymous namespace)::forward_mma_k<64>(attn_args)": "attention",
           "void (anonymous namespace)::dkv_k(attn_args)": "attention",
           "void (anonymous namespace)::dq_mma_k<(anonymous namespace)::tf32x3_mma, 64, false>"
           "(att_geom, att_drop, const float *, const float *, const float *, const float *, "
           "float *)": "attention",
           "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3_64x64x128":
               "attention",
           "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64": "gemm",
           "void (anonymous namespace)::ln_backward_k<float, unsigned short>(ln_args)":
               "layer norm",
           "void (anonymous namespace)::gelu_k<unsigned short>(long)": "gelu",
           "void (anonymous namespace)::rows_k<unsigned short>(cls_args)": "loss",
           "void (anonymous namespace)::total_k(int)": "loss",
           "void (anonymous namespace)::gather_k(emb_args)": "embedding",
           "void (anonymous namespace)::emb_zero_k(long, unsigned int *)": "embedding",
           "void (anonymous namespace)::emb_sum_k(int, int, const int *)": "embedding",
           "void (anonymous namespace)::colsum_parts_k(int)": "bias grad",
           "void (anonymous namespace)::copy_pitched_k<unsigned short>(long, long, int, "
           "const unsigned short *, long, unsigned short *, long)": "padded copy",
           "void (anonymous namespace)::adamw_multi_k(multi_args)": "adamw/clip",
           "void (anonymous namespace)::sumsq_total_k(int)": "adamw/clip",
           "void (anonymous namespace)::dropout_vec_k(long)": "dropout",
           "void cudnn::bn_bw_1C11_kernel_new<float>(int)": "batch norm",
           "sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc": "conv fprop"}
    gncu = os.path.join(d, "gpt2.out")
    with open(gncu, "w") as f:
        f.write(HEAD)
        for i, name in enumerate(gpt):
            f.write(kernel(i, name, "100"))
    rc, out = run("kernel_table.py", gncu)
    fams = json.loads(out.strip().splitlines()[-1]).get("families", {}) if rc == 0 else {}
    want = {}
    for fam in gpt.values():
        want[fam] = want.get(fam, 0) + 1
    check(rc == 0 and {k: v["count"] for k, v in fams.items()} == want,
          "GPT-2 kernels by family: %s, want %s" % ({k: v["count"] for k, v in fams.items()},
                                                   want))

    # the same profile named by its profiler ranges (ncu --print-nvtx-rename
    # kernel): joined by ID, summed per range group with families
    step = [("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n", "h.0 forward", "100"),
            ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n", "h.11 forward", "300"),
            ("void (anonymous namespace)::gelu_k<unsigned short>(long)", "h.3 forward", "50"),
            ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_nn_n", "lm_head backward input", "2,000"),
            ("void (anonymous namespace)::rows_k<unsigned short>(cls_args)", "loss", "40"),
            ("void (anonymous namespace)::bf16_from_f32_k(long)", "F0 stage0", "10"),
            ("void (anonymous namespace)::sgd_multi_k(multi_args)", "step 5", "30"),
            ("void (anonymous namespace)::mystery_k(int)", None, "5"),
            ("void (anonymous namespace)::ew_vec_k<relu_op>(long)", "layer3.2 backward", "nan")]
    plain, named = os.path.join(d, "plain.out"), os.path.join(d, "named.out")
    with open(plain, "w") as f, open(named, "w") as g:
        f.write(HEAD)
        g.write(HEAD)
        for i, (k, r, v) in enumerate(step):
            f.write(kernel(i, k, v))
            g.write(kernel(i, r or k, v))
    rc, out = run("kernel_table.py", plain, "--ranges", named)
    j = json.loads(out.strip().splitlines()[-1]) if rc == 0 and out.strip() else {}
    got = {k: (v["count"], round(v["ms"], 6), {f: round(m, 6) for f, m in v["families"].items()})
           for k, v in j.get("ranges", {}).items()}
    want = {"h.* forward": (3, 0.00045, {"gemm": 0.0004, "gelu": 0.00005}),
            "lm_head backward input": (1, 0.002, {"gemm": 0.002}),
            "loss": (1, 0.00004, {"loss": 0.00004}),
            "F stage0, outside units": (1, 0.00001, {"transpose/cast": 0.00001}),
            "step, outside tasks": (1, 0.00003, {"sgd": 0.00003}),
            "(no range)": (1, 0.000005, {"other": 0.000005})}
    check(rc == 0 and got == want and j.get("ranges_by") == "id" and j.get("ranges_joined") == 8,
          "by range: %s (by %s, %s joined), want %s" % (got, j.get("ranges_by"),
                                                        j.get("ranges_joined"), want))
    check("by range (8 kernels joined by id)" in out and "lm_head backward input" in out,
          "the range table printed:\n" + out)
    with open(named, "w") as g:  # other IDs, the same kernels in the same order
        g.write(HEAD)
        for i, (k, r, v) in enumerate(step):
            g.write(kernel(100 + i, r or k, v))
    rc, out = run("kernel_table.py", plain, "--ranges", named)
    j = json.loads(out.strip().splitlines()[-1]) if rc == 0 and out.strip() else {}
    check(j.get("ranges_by") == "order" and len(j.get("ranges", {})) == 6,
          "joined by order where the IDs differ: %s" % j.get("ranges_by"))
    with open(named, "w") as g:  # one kernel short: not joined, said so
        g.write(HEAD)
        for i, (k, r, v) in enumerate(step[:-1]):
            g.write(kernel(100 + i, r or k, v))
    rc, out = run("kernel_table.py", plain, "--ranges", named)
    j = json.loads(out.strip().splitlines()[-1]) if rc == 0 and out.strip() else {}
    check(rc == 0 and j.get("ranges_by") == "none" and "not joined" in out,
          "counts that differ: not joined, and the table says so: %s" % j.get("ranges_by"))

    lib = os.path.join(d, "lib.out")
    with open(lib, "w") as f:
        f.write("========= COMPUTE-SANITIZER\n")
        for _ in range(2):
            f.write("========= Error: Race reported between Write access at "
                    "sm90_xmma_dgrad_implicit_gemm_bf16_kernel__5x_cudnn+0x8e20\n"
                    "=========     and Read access at "
                    "sm90_xmma_dgrad_implicit_gemm_bf16_kernel__5x_cudnn+0xa750 [128 hazards]\n"
                    "========= \n")
        f.write("========= RACECHECK SUMMARY: 2 hazards displayed (2 errors, 0 warnings)\n")
    rc, out = run("san_classify.py", lib)
    j = json.loads(out)
    check(rc == 0 and j["reports"] == 2 and j["library"] == 2 and j["ours"] == 0,
          "two reports inside cuDNN: %s" % out)
    ours = os.path.join(d, "ours.out")
    with open(ours, "w") as f:
        f.write("========= Error: Race reported between Write access at "
                "(anonymous namespace)::bn_partial_k(int)+0x120\n"
                "=========     and Read access at "
                "(anonymous namespace)::bn_partial_k(int)+0x1a0 [4 hazards]\n"
                "========= \n"
                "========= Invalid __global__ read of size 4 bytes\n"
                "=========     at sm90_xmma_gemm_kernel__5x_cublas+0x10\n"
                "========= \n")
    rc, out = run("san_classify.py", ours)
    j = json.loads(out)
    check(j["reports"] == 2 and j["ours"] == 1 and j["library"] == 1,
          "one report in our kernel, one in cuBLAS: %s" % out)

CHECKS.summary("gpu tools")
sys.exit(CHECKS.exit_code())
