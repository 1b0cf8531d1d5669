"""Ctrl-C while Numba compiles: deferred until the compiler lets go.

Python raises ``KeyboardInterrupt`` at the next bytecode of the main thread, wherever that is;
while Numba compiles (or loads a cached kernel) that is inside LLVM's callbacks, where the
exception is swallowed (the interrupt is lost and the job runs on) or leaves LLVM half way (a
segmentation fault at exit was seen in CI, instead of the CLI's clean exit 130).  Under
:func:`defer_while_compiling`, a SIGINT that arrives while Numba's compiler lock is held or
awaited is recorded and raised again the moment the lock is released.  For the CLI: a library
does not take over its caller's signal handlers.
"""

from __future__ import annotations

import signal

_state = {"depth": 0, "pending": False}


def _on_sigint(signum, frame):
    if _state["depth"]:
        _state["pending"] = True
        return
    raise KeyboardInterrupt


def _released() -> None:
    _state["depth"] -= 1
    if _state["depth"] == 0 and _state["pending"]:
        _state["pending"] = False
        signal.raise_signal(signal.SIGINT)  # Python's handler raises it at the next bytecode


def defer_while_compiling() -> bool:
    """Install the deferral: returns whether it is in place (False without Numba, off the main
    thread, or when SIGINT already has a handler other than Python's default: once is enough)."""
    import threading

    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        return False
    try:
        from numba.core import event
    except ImportError:
        return False

    class CompilerLock(event.Listener):
        def on_start(self, ev):
            _state["depth"] += 1

        def on_end(self, ev):
            _released()

    event.register("numba:compiler_lock", CompilerLock())
    signal.signal(signal.SIGINT, _on_sigint)
    return True
