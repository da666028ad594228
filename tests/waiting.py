"""Waiting for what a test needs to have happened: ``eventually(check)``, and ``eventually_async`` on an event loop.

A test never sleeps to let something happen, nor bounds how long it takes:
the machines that run the suite differ (AVX2 or AVX-512, Intel or AMD) and
may be busy with another suite on the same cores. It waits for the event
that proves the property, and the wait's timeout only turns a hang into a
failure, one that says what was awaited and the last value seen.

``check`` is called every ``interval`` seconds until it returns something
true, which the wait returns. Exceptions in ``ignoring`` count as "not yet"
(a service not listening yet). ``stop_if`` returns why waiting is
pointless (a process that exited), or None to go on; ``explain`` adds to
the failure message (the process's output). Importable as ``waiting``
(pytest puts tests/ on the path for its conftest.py).
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

__all__ = ["PATIENCE_S", "eventually", "eventually_async"]

T = TypeVar("T")

PATIENCE_S = 30.0
"""How long a test waits, by default, for what must happen: far beyond what it takes on two busy cores,
and within the 60 s most test modules are given (pytest-timeout), so the wait's message is the one seen."""

_NOTHING = object()


class _Wait:
    """One wait: what it is for, its deadline, what it saw last, and the failure it ends in."""

    def __init__(
        self, check: Callable[..., Any], what: str | None, timeout: float,
        ignoring: tuple[type[BaseException], ...], stop_if: Callable[[], str | None] | None,
        explain: Callable[[], str] | None,
    ) -> None:
        self.what = what or _described(check)
        self.timeout = timeout
        self.deadline = time.monotonic() + timeout
        self.ignoring = ignoring
        self.stop_if = stop_if
        self.explain = explain
        self.last: object = _NOTHING

    def saw(self, value: object) -> bool:
        """Keep ``value`` (a check's answer or the exception it raised); whether it ends the wait."""
        self.last = value
        return not isinstance(value, BaseException) and bool(value)

    def go_on(self) -> None:
        """Raise AssertionError if waiting is pointless or the time is up."""
        reason = None if self.stop_if is None else self.stop_if()
        if reason is not None:
            raise AssertionError(self._message(f"gave up waiting for {self.what}: {reason}"))
        if time.monotonic() >= self.deadline:
            raise AssertionError(self._message(f"{self.what}: still not so after {self.timeout:g} s"))

    def _message(self, head: str) -> str:
        last = "nothing (never checked)" if self.last is _NOTHING else _short(repr(self.last))
        extra = "" if self.explain is None else f"\n{self.explain()}"
        return f"{head}; last seen: {last}{extra}"


def eventually(
    check: Callable[[], T], *, timeout: float = PATIENCE_S, interval: float = 0.1, what: str | None = None,
    ignoring: tuple[type[BaseException], ...] = (), stop_if: Callable[[], str | None] | None = None,
    explain: Callable[[], str] | None = None,
) -> T:
    """``check()`` once it returns something true (see the module docstring); AssertionError after ``timeout``."""
    wait = _Wait(check, what, timeout, ignoring, stop_if, explain)
    while True:
        try:
            value: Any = check()
        except ignoring as exc:
            value = exc
        if wait.saw(value):
            return value
        wait.go_on()
        time.sleep(interval)


async def eventually_async(
    check: Callable[[], T | Awaitable[T]], *, timeout: float = PATIENCE_S, interval: float = 0.01,
    what: str | None = None, ignoring: tuple[type[BaseException], ...] = (),
    stop_if: Callable[[], str | None] | None = None, explain: Callable[[], str] | None = None,
) -> T:
    """``eventually`` on the running event loop, which goes on between checks; ``check`` may be a coroutine function."""
    wait = _Wait(check, what, timeout, ignoring, stop_if, explain)
    while True:
        try:
            value: Any = check()
            if inspect.isawaitable(value):
                value = await value
        except ignoring as exc:
            value = exc
        if wait.saw(value):
            return value
        wait.go_on()
        await asyncio.sleep(interval)


def _described(check: Callable[..., Any]) -> str:
    """A check without a ``what``, named by where it is written: "the check at test_x.py:42"."""
    code = getattr(check, "__code__", None)
    if code is None:
        return f"the check {check!r}"
    return f"the check at {code.co_filename.rsplit('/', 1)[-1]}:{code.co_firstlineno}"


def _short(text: str, limit: int = 2_000) -> str:
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"
