"""Every CUDA kernel compiles for sm_90 through NVRTC (no GPU needed; CI runs this)."""

import numpy as np
import pytest

from gpujoin.cuda.kernels import NAME_EXPRESSIONS

pytest.importorskip("cuda.bindings.nvrtc", reason="needs cuda-bindings and the NVRTC wheel (test extra)")


@pytest.mark.parametrize("file", sorted(NAME_EXPRESSIONS))
def test_kernel_file_compiles_for_sm90(file):
    from gpujoin.cuda.compile import compile_file

    assert compile_file(file, "sm_90") > 0


def test_sample_args_twins_agree():
    """groupby.cu's SampleArgs and its NumPy twin (kernels.SAMPLE_ARGS, the planner's one kernel
    argument): the same fields in the same order, 8-byte ones first, and the size the .cu file
    static_asserts (which its compile above checks)."""
    import re

    from gpujoin.cuda.kernels import SAMPLE_ARGS, source

    src = source("groupby.cu")
    assert f"sizeof(SampleArgs<i64>) == {SAMPLE_ARGS.itemsize}" in src
    body = re.sub(r"//[^\n]*", "", src.split("struct SampleArgs {", 1)[1].split("};", 1)[0])
    fields = []
    for decl in filter(str.strip, body.split(";")):
        head, *more = decl.split(",")
        typ, first = head.strip().rsplit(None, 1)
        size = 8 if "*" in typ or typ in ("i64", "unsigned long long") else 4
        fields += [(n.strip(), size) for n in [first, *more]]
    assert [n for n, _ in fields] == list(SAMPLE_ARGS.names)
    for name, size in fields:
        assert SAMPLE_ARGS.fields[name][0].itemsize == size, name
    # the launch packs the fields into a kept buffer (SAMPLE_PACK): the bytes of SAMPLE_ARGS
    from gpujoin.cuda.kernels import SAMPLE_PACK

    buf = np.zeros(SAMPLE_ARGS.itemsize, np.uint8)
    view = buf.view(SAMPLE_ARGS)[0]
    values = [(-1) ** i * (i + 1) * (2**40 if f[0].itemsize == 8 else 2**20) for i, f in
              enumerate(SAMPLE_ARGS.fields[n] for n in SAMPLE_ARGS.names)]
    values = [abs(v) if SAMPLE_ARGS.fields[n][0].kind == "u" else v for v, n in zip(values, SAMPLE_ARGS.names)]
    SAMPLE_PACK.pack_into(buf, 0, *values)
    assert [int(x) for x in view] == values
