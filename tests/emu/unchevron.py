#!/usr/bin/env python3
"""unchevron.py IN OUT - a CUDA kernel file (or a header of one) made C++ for
the CPU emulator (cuda_emu.h): each launch `k<<<grid, block[, smem[, stream]]>>>(args);`
becomes `pp_emu::launch(pp_emu::config(grid, block, ...), CALL, args);`,
CALL a lambda that calls k with the arguments (so that a kernel template's
arguments are deduced, as nvcc deduces them).
The project's names pp_cuda_* become pp_emu_cuda_* and each quoted include
"NAME" becomes "emu_NAME" (the header made the same way), so that a test
can link the emulated kernels beside the library's real ones. Line numbers
are kept (#line), so that compiler and sanitizer reports name
the kernel file's lines."""
import re
import sys


def closing(text, i, open_ch, close_ch):
    """index of the bracket closing the one at text[i]"""
    depth = 0
    for j in range(i, len(text)):
        if text[j] == open_ch:
            depth += 1
        elif text[j] == close_ch:
            depth -= 1
            if depth == 0:
                return j
    raise SystemExit(f"unchevron: unbalanced {open_ch} at offset {i}")


def convert(text):
    out, pos = [], 0
    for m in re.finditer(r"<<<", text):
        if m.start() < pos:
            continue
        # the kernel: the name (with template arguments) before <<<
        k = m.start()
        j = k
        if text[j - 1] == ">":  # template arguments
            depth = 0
            while True:
                j -= 1
                if text[j] == ">":
                    depth += 1
                elif text[j] == "<":
                    depth -= 1
                    if depth == 0:
                        break
        while j > 0 and (text[j - 1].isalnum() or text[j - 1] in "_:"):
            j -= 1
        kernel = text[j:k]
        end = text.index(">>>", k)
        cfg = text[k + 3:end]
        p = end + 3
        while text[p].isspace():
            p += 1
        if text[p] != "(":
            raise SystemExit(f"unchevron: no arguments after the launch of {kernel}")
        q = closing(text, p, "(", ")")
        args = text[p + 1:q]
        call = (f"pp_emu::launch(pp_emu::config({cfg}), "
                f"[](auto... pp_emu_a) {{ {kernel}(pp_emu_a...); }}")
        call += f", {args})" if args.strip() else ")"
        # keep the line count: the call's newlines where the launch had them
        lost = text[j:q + 1].count("\n") - call.count("\n")
        out.append(text[pos:j])
        out.append(call + "\n" * lost)
        pos = q + 1
    out.append(text[pos:])
    return "".join(out)


def rename(text):
    text = re.sub(r"\bpp_cuda_", "pp_emu_cuda_", text)
    return re.sub(r'^(\s*#\s*include\s*")([^"/]+)"', r'\1emu_\2"', text, flags=re.M)


def main():
    src, dst = sys.argv[1], sys.argv[2]
    text = rename(open(src).read())
    with open(dst, "w") as f:
        f.write(f'#line 1 "{src}"\n')
        f.write(convert(text))


if __name__ == "__main__":
    main()
