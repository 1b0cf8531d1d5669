"""The CUDA backend: runtime (devices, memory, kernel loading), primitives, and the in-core
join algorithms of paper 003.  Importing it needs no GPU; running it needs CuPy and one."""
