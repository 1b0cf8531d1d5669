"""Progress of long operations (the passes of an out-of-core join, reading and writing files),
reported to whoever asked for it.

The engine calls :func:`task` at the start of a phase and ``advance`` as it goes; nothing is
shown unless a caller installed a reporter with :func:`reporting` (the CLI shows a Rich progress
bar on stderr).  A context variable carries the reporter, so library callers pay one lookup a
phase and threads of their own see no reporter.
"""

from __future__ import annotations

import contextvars
from contextlib import contextmanager

_reporter: contextvars.ContextVar = contextvars.ContextVar("gpujoin_progress", default=None)


class Task:
    """One phase: ``advance(n)`` units of ``total`` done; ``done()`` marks it complete."""

    def __init__(self, reporter, description: str, total: float | None):
        self._reporter, self._total = reporter, total
        self._id = reporter.add_task(description, total=total) if reporter is not None else None

    def advance(self, n: float = 1) -> None:
        if self._reporter is not None:
            self._reporter.advance(self._id, n)

    def done(self) -> None:
        if self._reporter is not None:
            total = 1 if self._total is None else self._total
            self._reporter.update(self._id, total=total, completed=total)

    def __enter__(self) -> Task:
        return self

    def __exit__(self, *exc) -> None:
        if exc[0] is None:
            self.done()


def task(description: str, total: float | None = None) -> Task:
    """A progress task of the reporter in effect (a no-op object when there is none)."""
    return Task(_reporter.get(), description, total)


@contextmanager
def reporting(reporter):
    """Report the progress of what runs inside to ``reporter`` (a ``rich.progress.Progress`` or
    anything with its ``add_task``, ``advance`` and ``update``)."""
    token = _reporter.set(reporter)
    try:
        yield reporter
    finally:
        _reporter.reset(token)
