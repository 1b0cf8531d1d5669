"""dist.cascaded.DeviceCodec's cache of nvCOMP codecs, on the CPU with stand-ins for CuPy and
nvCOMP: bounded (the least recently used let go), each codec let go before the stream it works
on (the other order crashed the process), a memory cap letting go of the current device's codecs
only, and threads making and using codecs at once."""

import sys
import threading
import types

import pytest
from fake_cupy import FakeDevice

from gpujoin.dist import cascaded
from gpujoin.outofcore import budget

LOG: list = []


class _Stream:
    def __init__(self, ptr):
        self.ptr = ptr

    def __del__(self):
        LOG.append(("stream", self.ptr))


class _Device(FakeDevice):
    def synchronize(self):
        LOG.append(("sync", self.id))


class _Codec:
    def __init__(self, algorithm, data_type, cuda_stream, **options):
        self.stream = cuda_stream

    def __del__(self):
        LOG.append(("codec", self.stream))


@pytest.fixture
def fakes(monkeypatch):
    streams = {}
    cuda = types.SimpleNamespace(Device=_Device, alloc=lambda n: None,
                                 get_current_stream=lambda: streams.setdefault(FakeDevice.current,
                                                                            _Stream(100 + FakeDevice.current)))
    monkeypatch.setitem(sys.modules, "cupy", types.SimpleNamespace(cuda=cuda))
    nv = types.SimpleNamespace(Codec=_Codec, set_device_allocator=lambda f: None,
                               CascadedMode=types.SimpleNamespace(ASYMMETRIC="a", SYMMETRIC="s"))
    monkeypatch.setattr(cascaded, "nvcomp", lambda: nv)
    monkeypatch.setattr(cascaded.DeviceCodec, "_codecs", {})
    monkeypatch.setattr(cascaded.DeviceCodec, "_ready", False)
    monkeypatch.setattr(cascaded.atexit, "register", lambda f: None)
    monkeypatch.setattr(budget, "_releasers", [])
    LOG.clear()
    yield streams
    cascaded.DeviceCodec._codecs.clear()
    FakeDevice.current = 0


def test_the_cache_is_bounded_and_lets_each_codec_go_before_its_stream(fakes, monkeypatch):
    monkeypatch.setattr(cascaded.DeviceCodec, "CODECS_KEPT", 6)  # two schemes' three roles
    for level in (1, 2, 1, 3):
        cascaded.DeviceCodec("int32", cascaded.Scheme(level - 1, 0, True))
    codecs = cascaded.DeviceCodec._codecs
    assert len(codecs) == 6 and {k[2].rle for k in codecs} == {0, 2}  # scheme 1 (rle 1) used least recently
    assert [e for e in LOG if e[0] == "codec"] == [("codec", 100)] * 3 and ("sync", 0) in LOG
    # a memory cap lets go of the current device's codecs only, each before its stream
    with _Device(1):
        cascaded.DeviceCodec("int64", cascaded.Scheme())
    assert sum(k[4] == 1 for k in codecs) == 3
    LOG.clear()
    fakes.clear()  # the stream objects now held by the cache alone
    assert budget._releasers == [cascaded.DeviceCodec._on_memory_cap]
    assert cascaded.DeviceCodec._on_memory_cap() is True
    assert all(k[4] == 1 for k in codecs) and len(codecs) == 3
    assert cascaded.DeviceCodec._on_memory_cap() is False  # nothing left on device 0
    assert LOG.index(("sync", 0)) < LOG.index(("codec", 100)) < LOG.index(("stream", 100))


def test_threads_make_and_use_codecs_at_once(fakes, monkeypatch):
    monkeypatch.setattr(cascaded.DeviceCodec, "CODECS_KEPT", 5)
    errors = []

    def work(t):
        try:
            for i in range(200):
                cascaded.DeviceCodec("int32", cascaded.Scheme((t + i) % 3, i % 2, True))
                if i % 50 == 0:
                    cascaded.DeviceCodec._on_memory_cap()
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(cascaded.DeviceCodec._codecs) <= 5
