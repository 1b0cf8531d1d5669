"""Stand-ins for the parts of CuPy that CPU tests of GPU bookkeeping need (no GPU, no CuPy)."""


class FakeDevice:
    """cupy.cuda.Device: a current device number, a context manager that switches it, and a
    synchronize that records the device in ``synced``."""

    current = 0
    synced: list = []

    def __init__(self, i=None):
        self.id = FakeDevice.current if i is None else i

    def __enter__(self):
        self._prev, FakeDevice.current = FakeDevice.current, self.id
        return self

    def __exit__(self, *exc):
        FakeDevice.current = self._prev

    def synchronize(self):
        FakeDevice.synced.append(self.id)
