"""How an `mjfl` process behaves, whatever its command: BLAS threads, SIGTERM, Ctrl-C, worker processes.

``policy()`` holds a command's whole life (``mjfl.cli.main``); each rule is one
function below, and its docstring says why.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import time
from collections.abc import Collection, Iterator, MutableMapping

from rich.console import Console


@contextlib.contextmanager
def policy() -> Iterator[None]:
    """A command's life: BLAS on one thread, SIGTERM as Ctrl-C, and no worker process left when it ends."""
    one_blas_thread(os.environ)
    earlier = signal.signal(signal.SIGTERM, _as_ctrl_c)
    children = set(multiprocessing.active_children())
    try:
        yield
    finally:
        _end_children(set(multiprocessing.active_children()) - children)
        signal.signal(signal.SIGTERM, earlier)


def one_blas_thread(environ: MutableMapping[str, str]) -> None:
    """numpy's and scipy's BLAS on one thread, in this process and the workers it starts, unless the user says.

    Their default is a thread per core, which mjfl's small products (BODS's process, RLDS's policy) do not
    use, and whose idle threads spin after each product on the cores the training needs: measured, `mjfl
    simulate` of the quickstart (Meta-Greedy and BODS) took 30% more CPU time and 16% more wall time, for the
    same results. It must come before numpy loads (the commands import it, not this package).
    """
    environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # not MKL's or OpenMP's variables: torch reads those as its own


@contextlib.contextmanager
def exit_on_ctrl_c(console: Console, said: str | None = None) -> Iterator[None]:
    """Ctrl-C (or SIGTERM, ``_as_ctrl_c``) that reaches a command ends it with ``said`` and exit status 130,
    not a traceback: 128 + SIGINT, the status a shell gives a command that Ctrl-C ended."""
    try:
        yield
    except KeyboardInterrupt:
        if said is not None:
            console.print(said, highlight=False)
        raise SystemExit(130) from None


def _as_ctrl_c(signum: int, frame: object) -> None:
    """SIGTERM: what Ctrl-C does, which reaches this process and its worker processes (its process group).

    The workers hear SIGINT (emulator workers ignore it and stop when told,
    pool workers abandon their task); this process gets SIGINT where it has
    a handler (asyncio's cancels the run, which then cleans up), else a
    KeyboardInterrupt.
    """
    for child in multiprocessing.active_children():
        with contextlib.suppress(ProcessLookupError):
            os.kill(child.pid, signal.SIGINT)  # type: ignore[arg-type]
    if signal.getsignal(signal.SIGINT) in (signal.SIG_IGN, signal.SIG_DFL, None):
        raise KeyboardInterrupt
    signal.raise_signal(signal.SIGINT)


def _end_children(children: Collection[multiprocessing.process.BaseProcess], grace_s: float = 5.0) -> None:
    """Terminate ``children``, worker processes still running when a command ends (their owner did not stop
    them), then kill those that are still there after ``grace_s``."""
    for child in children:
        child.terminate()
    deadline = time.monotonic() + grace_s
    for child in children:
        child.join(max(0.0, deadline - time.monotonic()))
        if child.is_alive():
            child.kill()
            child.join(1.0)
