"""Ray: one more place where devices train (docs/scale.md).

Nothing here is a second engine. Ray replaces only the processes that
training runs in, at the two points where mjfl chooses them today:

* ``RayContext`` stands in for ``multiprocessing.get_context("spawn")`` in
  ``run_emulated_fleet``: each emulator worker (several emulated devices and
  their one ``TrainingLane``) is a Ray actor with one CPU reserved, so the
  devices of a 1,000-device fleet spread over a cluster's nodes and connect
  to the coordinator like any device.
* ``TrainingPool`` is a ``concurrent.futures.Executor`` for the virtual-time
  fleet: each ``submit`` is a Ray task with one CPU, run by the same
  function, with the same arguments and seeds, as in the local process pool,
  so a seed gives the same models and records on both.

The batched runtime (``mjfl.jobs.batched``) trains many devices in one
process, the one that owns a GPU: on a cluster with GPUs each of its batches
is a task holding one GPU (``TrainingPool(num_gpus=1)``), and each emulator
worker an actor holding one (``emulator_workers``), so a GPU has one CUDA
context however many devices it trains for.

``import ray`` happens only in ``connect`` (the base install has no Ray: the
error then names the extra). Ray's own logging stays off the terminal
(``log_to_driver=False``, its loggers at ERROR); mjfl's workers log to the
run's log file as local workers do.
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mjfl import logs
from mjfl.errors import UserError

__all__ = [
    "RayContext", "RayOptions", "TrainingPool", "cluster_cpus", "cluster_gpus", "connect", "emulator_workers", "node_count",
    "this_node_address",
]

INSTALL_HINT = "pip install 'mjfl[ray]'"


@dataclass(frozen=True)
class RayOptions:
    """Where to run: ``address`` of a running cluster (``ray start --head``), or ``None`` for a local Ray.

    ``num_cpus`` caps a local Ray's CPUs (default: every core); it is
    ignored when joining a cluster, whose nodes say what they have.
    """

    address: str | None = None
    num_cpus: int | None = None


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise UserError(f"training on Ray needs Ray, which is not installed: {INSTALL_HINT}") from None
    return ray


@contextlib.contextmanager
def connect(options: RayOptions) -> Iterator[Any]:
    """Join the cluster at ``options.address`` (or start a local Ray) for a block; yields the ``ray`` module.

    A Ray this process already joined is used as it is and left running.
    """
    ray = _ray()
    if ray.is_initialized():
        yield ray
        return
    try:
        # No address: a Ray of our own ("local"). Ray's default would join the
        # last cluster started on this machine, another mjfl's that may end
        # under us.
        ray.init(
            address=options.address or "local",
            num_cpus=options.num_cpus if options.address is None else None,
            include_dashboard=False,
            log_to_driver=False,
            logging_level=logging.ERROR,
        )
    except (ConnectionError, ValueError, RuntimeError) as exc:
        where = f"the Ray cluster at {options.address}" if options.address else "a local Ray"
        raise UserError(f"could not start or join {where}: {exc}") from None
    try:
        yield ray
    finally:
        ray.shutdown()


def cluster_cpus() -> int:
    """The CPUs of the joined cluster (every node's), at least 1."""
    return max(1, int(_ray().cluster_resources().get("CPU", 1)))


def cluster_gpus() -> int:
    """The GPUs of the joined cluster (every node's)."""
    return int(_ray().cluster_resources().get("GPU", 0))


def emulator_workers(runtime: str, workers: int | None) -> tuple[int, RayContext]:
    """How many emulator workers run on the cluster, and the context that starts them.

    ``workers`` when given; otherwise one per CPU, or for the batched runtime
    one per GPU (one when the cluster has none: a batched worker trains every
    device it hosts in one process). Where the cluster has GPUs, a batched
    worker's actor holds one, or an equal share of one when there are more
    workers than GPUs (Ray's fractional GPUs), so every worker starts.
    """
    if runtime != "batched":
        return workers or cluster_cpus(), RayContext()
    gpus = cluster_gpus()
    count = workers or max(1, gpus)
    share = 1 / math.ceil(count / gpus) if gpus else 0
    return count, RayContext(num_gpus=share)


def node_count() -> int:
    """The joined cluster's live nodes."""
    return sum(1 for node in _ray().nodes() if node.get("Alive"))


def this_node_address() -> str:
    """This process's node address as the cluster's other nodes reach it."""
    return str(_ray().util.get_node_ip_address())


# -- training for the virtual-time fleet ----------------------------------------


class TrainingPool(Executor):
    """An Executor whose calls are Ray tasks of one CPU (and ``num_gpus`` GPUs) each, as many at once as the cluster fits.

    Ray reuses its worker processes, so a process's trainer cache
    (``simulated.train_in_worker``) keeps its loaded programs from task to
    task, as a local pool's worker does. ``log_file``: where the workers log
    (a path on each node).
    """

    def __init__(self, *, log_file: Path | None = None, verbose: bool = False, num_gpus: float = 0) -> None:
        ray = _ray()
        self._ray = ray
        self._task = ray.remote(num_cpus=1, num_gpus=num_gpus)(_call_in_worker)
        self._setup = (log_file, verbose)
        self._pending: set[Any] = set()
        self._lock = threading.Lock()
        self._closed = False

    def keep(self, data: bytes) -> StoredBytes:
        """Keep ``data`` (a program) in the cluster's object store once; workers on any node read it from there."""
        return StoredBytes(self._ray.put(data))

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        with self._lock:
            if self._closed:
                raise RuntimeError("cannot submit to a closed TrainingPool")
            ref = self._task.remote(self._setup, fn, args, kwargs)
            self._pending.add(ref)
        future: Future[Any] = ref.future()
        future.add_done_callback(lambda _: self._forget(ref))
        return future

    def _forget(self, ref: Any) -> None:
        with self._lock:
            self._pending.discard(ref)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._lock:
            self._closed = True
            pending = list(self._pending)
        if cancel_futures:
            for ref in pending:
                with contextlib.suppress(Exception):
                    self._ray.cancel(ref)
        if wait and pending:
            self._ray.wait(pending, num_returns=len(pending), timeout=30)


@dataclass(frozen=True)
class StoredBytes:
    """Bytes in Ray's object store; calling it (in a worker) fetches them."""

    ref: Any

    def __call__(self) -> bytes:
        return bytes(_ray().get(self.ref))


_WORKER_READY = False


def _call_in_worker(setup: tuple[Path | None, bool], fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    global _WORKER_READY
    if not _WORKER_READY:
        # Before the first training imports torch: its noise goes to the log file.
        log_file, verbose = setup
        logs.setup_worker(log_file, verbose=verbose)
        _WORKER_READY = True
    return fn(*args, **kwargs)


# -- emulator workers as actors ---------------------------------------------------


class RayContext:
    """The part of a multiprocessing context that ``run_emulated_fleet`` uses, on Ray.

    ``Process`` is an actor that reserves one CPU (the worker's training
    lane), and ``num_gpus`` GPUs, and runs the worker function in its main thread; ``Event`` is a
    flag in a small actor of its own that every worker polls. Actors die
    with the process that created them, so a killed coordinator leaves no
    devices behind on the cluster.
    """

    def __init__(self, *, num_gpus: float = 0) -> None:
        ray = _ray()
        self._ray = ray
        self.num_gpus = num_gpus
        self._host = ray.remote(num_cpus=1, num_gpus=num_gpus, max_restarts=0)(_Host)
        self._flag = ray.remote(num_cpus=0)(_Flag)

    def Event(self) -> RayEvent:
        return RayEvent(self._flag.remote())

    def Process(
        self, *, target: Callable[..., Any], args: tuple[Any, ...] = (), name: str | None = None, daemon: bool = True,
    ) -> RayProcess:
        return RayProcess(self._ray, self._host, target, args, name or "mjfl-emulator")


class _Flag:
    def __init__(self) -> None:
        self.value = False

    def set(self) -> None:
        self.value = True

    def is_set(self) -> bool:
        return self.value


class RayEvent:
    """``multiprocessing.Event``'s ``set``/``is_set``, shared through a flag actor (picklable)."""

    def __init__(self, flag: Any, *, answer_s: float = 10.0) -> None:
        self._flag = flag
        self.answer_s = answer_s  # how long one is_set waits for the flag's answer

    def set(self) -> None:
        import ray

        ray.get(self._flag.set.remote())

    def is_set(self) -> bool:
        import ray

        try:
            return bool(ray.get(self._flag.is_set.remote(), timeout=self.answer_s))
        except ray.exceptions.GetTimeoutError:
            # Slow to answer (a loaded machine; the flag's worker still starting): not set, as far as is known.
            # Taken for "set", it stopped every device of a fleet that had only started beside another suite.
            return False
        except ray.exceptions.RayError:
            # The flag is gone with the process that made it: stop.
            return True


class _Host:
    def run(self, target: Callable[..., Any], args: tuple[Any, ...]) -> int:
        """Run the worker function; its exit status, as a process's would be (``sys.exit`` included)."""
        try:
            target(*args)
        except SystemExit as exc:
            return exc.code if isinstance(exc.code, int) else 1
        return 0


class RayProcess:
    """``multiprocessing.Process``'s ``start``/``is_alive``/``join``/``terminate``/``kill`` for one actor."""

    pid: int | None = None  # not a process of this machine
    exitcode: int | None = None  # once the worker function has returned

    def __init__(self, ray: Any, host: Any, target: Callable[..., Any], args: tuple[Any, ...], name: str) -> None:
        self._ray = ray
        self._host_class = host
        self._target = target
        self._args = args
        self.name = name
        self._actor: Any = None
        self._done: Any = None

    def start(self) -> None:
        self._actor = self._host_class.remote()
        self._done = self._actor.run.remote(self._target, self._args)

    def is_alive(self) -> bool:
        self.join(0)
        return self._actor is not None

    def join(self, timeout: float | None = None) -> None:
        if self._actor is None:
            return
        ready, _ = self._ray.wait([self._done], timeout=timeout)
        if ready:
            try:
                self.exitcode = int(self._ray.get(self._done))
            except self._ray.exceptions.RayError:
                self.exitcode = 1
            # The worker has returned: give its CPU back to the cluster.
            self.terminate()

    def terminate(self) -> None:
        if self._actor is not None:
            self._ray.kill(self._actor)
            self._actor = None

    kill = terminate
