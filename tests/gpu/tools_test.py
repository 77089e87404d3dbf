#!/usr/bin/env python3
"""tools_test.py - the GPU runner's parsers, without a GPU: kernel_table.py on
an ncu CSV with a kernel that has no time (nan: a launch that failed under
ncu) and ==ERROR== lines, and san_classify.py on racecheck reports inside a
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
           "void (anonymous namespace)::colsum_parts_k(int)": "bias grad",
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
