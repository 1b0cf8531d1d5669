"""Multi-GPU and distributed joins (papers 000 and 001).  So far: ``model``, paper 001's
distributed join predicted phase by phase for scales this project cannot run (``gpujoin dist
model``); ``nested_loop.ring_schedule`` and ``merge_path``, the host-side plans of paper 000's
ring and global sort-merge joins (their executors are issue 15's next steps)."""
