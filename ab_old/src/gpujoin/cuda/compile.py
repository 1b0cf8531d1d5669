"""Compile every kernel through NVRTC without a GPU (CI's check that the kernels build).

Uses ``cuda.bindings.nvrtc`` (pip: cuda-bindings, nvidia-cuda-nvrtc), the same compiler CuPy
calls at run time, with the same options and template instantiations.
"""

from __future__ import annotations

from .kernels import NAME_EXPRESSIONS, options, source


def compile_file(file: str, arch: str = "sm_90") -> int:
    """Compile ``file`` for ``arch``; returns the cubin's size in bytes.

    Raises
    ------
    RuntimeError
        The compiler's log, when compilation fails.
    """
    from cuda.bindings import nvrtc  # noqa: PLC0415

    def ok(res):
        err = res[0]
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise RuntimeError(f"NVRTC error {err} on {file}")
        return res[1:] if len(res) > 2 else (res[1] if len(res) == 2 else None)

    prog = ok(nvrtc.nvrtcCreateProgram(source(file).encode(), file.encode(), 0, [], []))
    for expr in NAME_EXPRESSIONS[file]:
        ok(nvrtc.nvrtcAddNameExpression(prog, expr.encode()))
    opts = [o.encode() for o in (*options(file), f"--gpu-architecture={arch}")]
    res = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
    if res[0] != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        size = ok(nvrtc.nvrtcGetProgramLogSize(prog))
        log = b" " * size
        nvrtc.nvrtcGetProgramLog(prog, log)
        raise RuntimeError(f"{file} does not compile for {arch}:\n{log.decode(errors='replace')}")
    size = ok(nvrtc.nvrtcGetCUBINSize(prog))
    for expr in NAME_EXPRESSIONS[file]:
        ok(nvrtc.nvrtcGetLoweredName(prog, expr.encode()))
    return int(size)


def compile_all(arch: str = "sm_90") -> dict[str, int]:
    """Compile every kernel file; returns cubin sizes by file."""
    return {f: compile_file(f, arch) for f in NAME_EXPRESSIONS}


if __name__ == "__main__":
    for f, n in compile_all().items():
        print(f"{f}: {n} bytes")
