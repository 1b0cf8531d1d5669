"""Compile every kernel through NVRTC without a GPU (CI's check that the kernels build).

Uses ``cuda.bindings.nvrtc`` (pip: cuda-bindings, nvidia-cuda-nvrtc), the same compiler CuPy
calls at run time, with the same options and template instantiations.
"""

from __future__ import annotations

from .kernels import NAME_EXPRESSIONS, options, source


def _compiled(file: str, arch: str, extra: tuple[str, ...] = ()):
    """(nvrtc, program, ok, log) of ``file`` compiled for ``arch`` with every name expression."""
    from cuda.bindings import nvrtc  # noqa: PLC0415

    def ok(res):
        err = res[0]
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise RuntimeError(f"NVRTC error {err} on {file}")
        return res[1:] if len(res) > 2 else (res[1] if len(res) == 2 else None)

    prog = ok(nvrtc.nvrtcCreateProgram(source(file).encode(), file.encode(), 0, [], []))
    for expr in NAME_EXPRESSIONS[file]:
        ok(nvrtc.nvrtcAddNameExpression(prog, expr.encode()))
    opts = [o.encode() for o in (*options(file), f"--gpu-architecture={arch}", *extra)]
    res = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
    size = ok(nvrtc.nvrtcGetProgramLogSize(prog))
    log = b" " * size
    nvrtc.nvrtcGetProgramLog(prog, log)
    log = log.decode(errors="replace")
    if res[0] != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise RuntimeError(f"{file} does not compile for {arch}:\n{log}")
    return nvrtc, prog, ok, log


def compile_file(file: str, arch: str = "sm_90") -> int:
    """Compile ``file`` for ``arch``; returns the cubin's size in bytes.

    Raises
    ------
    RuntimeError
        The compiler's log, when compilation fails.
    """
    nvrtc, prog, ok, _ = _compiled(file, arch)
    size = ok(nvrtc.nvrtcGetCUBINSize(prog))
    for expr in NAME_EXPRESSIONS[file]:
        ok(nvrtc.nvrtcGetLoweredName(prog, expr.encode()))
    return int(size)


def kernel_resources(file: str, arch: str = "sm_90") -> dict[str, dict[str, int]]:
    """What ptxas gives each kernel of ``file`` for ``arch`` (``--ptxas-options=-v``): by name
    expression, {"registers", "spill_stores", "spill_loads", "stack"} (registers a thread, the
    others bytes).  A kernel that spills under its launch bounds reads local memory in its loop
    (the narrow unstable scatter did from 42e40a2 on, 80 -> 64 registers: PHJ-TR's partitioning
    5.9 -> 7.3 ms at 2^27 int32 pairs on an H200).

    Raises
    ------
    RuntimeError
        The compiler's log, when compilation fails.
    """
    import re  # noqa: PLC0415

    nvrtc, prog, ok, log = _compiled(file, arch, ("--ptxas-options=-v",))
    names = {}
    for expr in NAME_EXPRESSIONS[file]:
        lowered = ok(nvrtc.nvrtcGetLoweredName(prog, expr.encode()))
        names[lowered.decode() if isinstance(lowered, bytes) else lowered] = expr
    out: dict[str, dict[str, int]] = {}
    cur = lowered = props = None
    for line in log.splitlines():  # per kernel: its name, then its frame and spills, then its registers
        m = re.search(r"Compiling entry function '(\S+)'", line)
        if m:
            lowered = m.group(1)
            cur = names.get(lowered, lowered)
            out[cur] = {"registers": 0, "spill_stores": 0, "spill_loads": 0, "stack": 0}
            continue
        m = re.search(r"Function properties for (\S+)", line)
        if m:
            props = m.group(1)  # (a function not inlined has lines of its own: not the entry's)
            continue
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m and cur and props == lowered:
            out[cur].update(stack=int(m.group(1)), spill_stores=int(m.group(2)), spill_loads=int(m.group(3)))
        m = re.search(r"Used (\d+) registers", line)
        if m and cur:
            out[cur]["registers"] = int(m.group(1))
    return out


def compile_all(arch: str = "sm_90") -> dict[str, int]:
    """Compile every kernel file; returns cubin sizes by file."""
    return {f: compile_file(f, arch) for f in NAME_EXPRESSIONS}


if __name__ == "__main__":
    for f, n in compile_all().items():
        print(f"{f}: {n} bytes")
