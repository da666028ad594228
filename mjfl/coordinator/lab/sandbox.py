"""A researcher's model code, run away from the lab: a child process of its own, with limits on every call.

A lab that lets researchers bring a model (LAB.toml ``custom_code``,
docs/security.md, section 8) never imports it in the service's process.
Each submission's check and each such run get a ``Sandbox``: one child
process (spawned, so it inherits nothing of the service but its files)
where the model is imported, built, converted, exported and evaluated.
Every call into it is bounded (LAB.toml ``[limits]``, docs/lab.md):

* ``code_memory_mb``: the child's address space (``RLIMIT_AS``), set before
  it imports anything; an allocation past it fails in the child;
* ``code_cpu_s``: CPU seconds a call may use (``RLIMIT_CPU``, moved on at each
  call); past it the kernel ends the child (``SIGXCPU``);
* ``code_wall_s``: seconds a call may take, kept by this side; past it the
  child is killed.

A breach, or a child that dies, is a ``Refusal`` with its code
(``model_timeout``, ``model_cpu_limit``, ``model_memory_limit``,
``model_crashed``), and the sandbox takes no more calls; the model's own
failure (it raised, it is not a module, an operator without a rule) is
``model_invalid``. Either way the service and every other run go on.

The limits bound what the code can take, not what it can reach: the child
runs as the service's user (docs/security.md says what that means).
``Sandbox`` is an ``Executor``, so the run driver sends a run's preparation
and report to it as it sends a zoo run's to the lab's shared child.
"""

from __future__ import annotations

import contextlib
import logging
import math
import multiprocessing
import signal
import threading
import traceback
from collections.abc import Callable
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from dataclasses import dataclass
from multiprocessing import resource_tracker
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from mjfl import logs
from mjfl.errors import ConfigError, MjflError, ModelError, Refusal, UserError

log = logging.getLogger(__name__)

START_S = 300.0  # the most the child may take to start (a fresh interpreter importing torch, on a loaded machine)
MEMORY_MESSAGES = ("can't allocate memory", "not enough memory", "bad_alloc", "out of memory")


@dataclass(frozen=True)
class CodeLimits:
    """What one call into a sandbox may take (LAB.toml ``[limits]`` ``code_*``)."""

    wall_s: float = 600.0
    cpu_s: float = 600.0
    memory_mb: int = 6144
    wall_key: str = "limits.code_wall_s"  # the LAB.toml key of wall_s, in refusals


class Sandbox(Executor):
    """One child process for one submission's or one run's model code (module docstring)."""

    def __init__(self, limits: CodeLimits, *, what: str, log_file: Path | None = None, verbose: bool = False) -> None:
        self.limits = limits
        self.what = what  # who the code is, in refusals ("run r3's model")
        # The child shares multiprocessing's resource tracker, which speaks at the end of what a killed child
        # left: the service starts it with its output sent to the log (service.py), and then this is a no-op.
        resource_tracker.ensure_running()
        context = multiprocessing.get_context("spawn")
        self._conn, child = context.Pipe()
        self._process = context.Process(
            target=_serve, args=(child, limits.memory_mb, log_file, verbose), name="mjfl-sandbox", daemon=True,
        )
        self._process.start()
        child.close()
        self._lock = threading.Lock()  # one call at a time
        self._calls = ThreadPoolExecutor(1, thread_name_prefix="mjfl-sandbox")
        self._started = False
        self._broken: Refusal | None = None
        self._test_sets: set[str] = set()  # the evaluation sets the child holds

    # -- calls ----------------------------------------------------------------

    def call(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)`` in the child within the limits (blocking): its value, or why not (a Refusal,
        or the UserError it raised)."""
        with self._lock:
            if self._broken is not None:
                raise self._broken
            self._start()
            try:
                self._conn.send((fn, args, kwargs, self.limits.cpu_s))
                answered = self._conn.poll(self.limits.wall_s)
                if answered:
                    kind, payload = self._conn.recv()
            except (EOFError, OSError):  # the child is gone (or shut down while this call waited)
                raise self._died() from None
            if not answered:
                raise self._broke(Refusal("model_timeout", f"{self.what} took longer than {self.limits.wall_s:g} s"
                                          f" ({self.limits.wall_key})", field="jobs"))
        if kind == "ok":
            return payload
        raise self._rebuilt(kind, payload)

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        return self._calls.submit(self.call, fn, *args, **kwargs)

    def evaluate(self, spec: Any, weights: dict[str, NDArray[np.float32]], x: NDArray[np.float32], y: NDArray[np.int64]) -> tuple[float, float]:
        """The engine's evaluator, in the child: a job's test set is sent once and kept there."""
        key = f"{spec.name}|{spec.args}|{x.shape}|{id(x)}"
        if key in self._test_sets:
            return self.call(_evaluate, key, spec, weights, None, None)  # type: ignore[no-any-return]
        self._test_sets.add(key)
        return self.call(_evaluate, key, spec, weights, x, y)  # type: ignore[no-any-return]

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """End the child (at once: nothing it holds is worth waiting for) and the calls' thread."""
        if self._process.is_alive():
            self._process.kill()
        self._process.join(10)
        self._conn.close()
        self._calls.shutdown(wait=wait, cancel_futures=cancel_futures)

    # -- inside ---------------------------------------------------------------

    def _start(self) -> None:
        """Wait for the child's first word (it has imported what every call needs), once."""
        if self._started:
            return
        if not self._conn.poll(START_S):
            raise self._broke(Refusal("model_crashed", f"{self.what}: its process did not start within {START_S:g} s",
                                      field="jobs"))
        try:
            self._conn.recv()
        except (EOFError, OSError):
            raise self._died() from None
        self._started = True

    def _broke(self, refusal: Refusal) -> Refusal:
        """The sandbox is done: the child killed, ``refusal`` the answer to this call and every later one."""
        if self._process.is_alive():
            self._process.kill()
        self._process.join(10)
        self._broken = refusal
        return refusal

    def _died(self) -> Refusal:
        self._process.join(10)
        status = self._process.exitcode
        if status == -signal.SIGXCPU:
            return self._broke(Refusal(
                "model_cpu_limit", f"{self.what} used more than {self.limits.cpu_s:g} s of CPU (limits.code_cpu_s)",
                field="jobs",
            ))
        try:
            how = signal.Signals(-status).name if status is not None and status < 0 else f"exit status {status}"
        except ValueError:
            how = f"signal {-status}"
        return self._broke(Refusal("model_crashed", f"{self.what} ended its process ({how})", field="jobs"))

    def _rebuilt(self, kind: str, payload: tuple[str, str, str | None]) -> MjflError:
        """What the child's call raised, as ours: a memory breach, the model's failure, or another error of ours."""
        name, message, field = payload
        if kind == "memory":
            return self._broke(Refusal(
                "model_memory_limit", f"{self.what} allocated more than {self.limits.memory_mb} MB"
                f" (limits.code_memory_mb): {name}: {message}", field="jobs",
            ))
        if kind == "model":
            return Refusal("model_invalid", f"{self.what}: {message}", field=field or "jobs")
        if kind == "user":
            return UserError(message)
        return Refusal("model_invalid", f"{self.what} raised {name}: {message}", field="jobs")


# -- the child ------------------------------------------------------------------

def _serve(conn: Connection, memory_mb: int, log_file: Path | None, verbose: bool) -> None:
    """The child: its limits set, its imports done, then one call at a time until the pipe closes."""
    import resource

    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # a killed child leaves no core file in the lab's folder
    limit = memory_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    logs.setup_worker(log_file, verbose=verbose)
    with logs.native_output():
        import torch  # noqa: F401 - what every call needs, imported before the first call's clock starts

        import mjfl.coordinator.run.preparation  # noqa: F401
    conn.send(("started", None))
    while True:
        try:
            fn, args, kwargs, cpu_s = conn.recv()
        except (EOFError, OSError, KeyboardInterrupt):
            return
        conn.send(_one_call(fn, args, kwargs, cpu_s))


def _one_call(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], cpu_s: float) -> tuple[str, Any]:
    import resource

    used = resource.getrusage(resource.RUSAGE_SELF)
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    soft = math.ceil(used.ru_utime + used.ru_stime + cpu_s)
    resource.setrlimit(resource.RLIMIT_CPU, (soft if hard == resource.RLIM_INFINITY else min(soft, hard), hard))
    try:
        return "ok", fn(*args, **kwargs)
    except MemoryError as exc:
        return "memory", (type(exc).__name__, str(exc)[:500], None)
    except (ModelError, ConfigError) as exc:
        if isinstance(exc, ModelError) or exc.field.endswith("model"):
            return "model", (type(exc).__name__, str(exc), getattr(exc, "field", None))
        return "user", (type(exc).__name__, str(exc), None)
    except MjflError as exc:
        return "user", (type(exc).__name__, str(exc), None)
    except Exception as exc:  # noqa: BLE001 - the model's code: whatever it raised is the answer
        text = str(exc)
        if any(m in text for m in MEMORY_MESSAGES):
            return "memory", (type(exc).__name__, text[:500], None)
        log.info("a sandboxed call raised\n%s", traceback.format_exc())
        return "code", (type(exc).__name__, text[:2000], None)
    finally:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_CPU, (hard, hard))


_TEST_SETS: dict[str, tuple[NDArray[np.float32], NDArray[np.int64]]] = {}


def _evaluate(key: str, spec: Any, weights: dict[str, NDArray[np.float32]], x: NDArray[np.float32] | None,
              y: NDArray[np.int64] | None) -> tuple[float, float]:
    from mjfl.coordinator.run.preparation import evaluate_job

    if x is not None and y is not None:
        _TEST_SETS[key] = (x, y)
    held_x, held_y = _TEST_SETS[key]
    return evaluate_job(spec, weights, held_x, held_y)
