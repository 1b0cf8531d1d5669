"""Every CUDA kernel compiles for sm_90 through NVRTC (no GPU needed; CI runs this)."""

import pytest

from gpujoin.cuda.kernels import NAME_EXPRESSIONS

pytest.importorskip("cuda.bindings.nvrtc", reason="needs cuda-bindings and the NVRTC wheel (test extra)")


@pytest.mark.parametrize("file", sorted(NAME_EXPRESSIONS))
def test_kernel_file_compiles_for_sm90(file):
    from gpujoin.cuda.compile import compile_file

    assert compile_file(file, "sm_90") > 0
