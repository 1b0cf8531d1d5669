"""Out-of-core strategies on one GPU: data and join state larger than the GPU memory budget.

``budget`` (memory_limit, host-memory checks), ``stream`` (pinned buffers, chunks, three
streams), ``partition`` (pass 1 into the hybrid cache), ``triton`` (paper 004's Triton join),
``groupby`` (the out-of-core group-by over the same pass 1).
"""
