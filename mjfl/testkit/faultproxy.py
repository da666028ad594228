"""A user-space TCP fault proxy for loopback tests: a bad network between devices and coordinator.

The kernel here has no netem, so faults are made in asyncio, byte stream by
byte stream. Devices connect to the proxy; it connects each one to the
coordinator and forwards both directions, applying ``Faults``:

- ``delay_s``: every chunk is forwarded this long after it arrived, in order
  (a one-way latency per direction);
- ``bandwidth_bps``: each direction of each connection is paced to this many
  bytes per second (a slow uplink);
- ``drop``: this share of new connections is closed at once, unanswered
  (a flaky access point);
- ``cut``: this share of connections is cut (both sides aborted, no close)
  after a random number of bytes in ``cut_after_bytes`` (a lost link
  mid-download or mid-upload);
- ``reorder``: this share of connections has two consecutive chunks of its
  upstream (device to coordinator) swapped once: the first chunk of at least
  ``reorder_min_bytes`` (by default an upload, not the HTTP upgrade or the
  hello, which nothing follows until they are answered). A device's sends
  usually arrive as whole WebSocket frames, so this delivers the parts of a
  split result out of order (``bad_frame``); where a read cut a frame, the
  WebSocket stream itself breaks (close 1002). The coordinator must close that session and nothing
  else.

Randomness comes from one seeded ``numpy.random.Generator``: the same seed and
the same traffic give the same faults. ``counts`` says what was done.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Self

import numpy as np

log = logging.getLogger(__name__)

CHUNK = 64 * 1024


@dataclass(frozen=True)
class Faults:
    """What the proxy does to the traffic; the defaults do nothing."""

    delay_s: float = 0.0
    bandwidth_bps: float | None = None
    drop: float = 0.0
    cut: float = 0.0
    cut_after_bytes: tuple[int, int] = (1, 1_000_000)
    reorder: float = 0.0
    reorder_min_bytes: int = 32 * 1024

    def __post_init__(self) -> None:
        for name in ("drop", "cut", "reorder"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must lie in [0, 1]")
        if self.delay_s < 0 or (self.bandwidth_bps is not None and self.bandwidth_bps <= 0):
            raise ValueError("delay_s must be >= 0 and bandwidth_bps > 0 or None")
        low, high = self.cut_after_bytes
        if not 0 < low <= high:
            raise ValueError("cut_after_bytes must be (low, high) with 0 < low <= high")


class FaultProxy:
    """Listens on ``127.0.0.1`` (``url`` once started), forwards to ``target_host:target_port``.

    ::

        async with FaultProxy("127.0.0.1", server.port, Faults(delay_s=0.05), seed=1) as proxy:
            device = EmulatedDevice(proxy.url, "d0", ...)
    """

    def __init__(self, target_host: str, target_port: int, faults: Faults, *, seed: int = 0, port: int = 0) -> None:
        self.target = (target_host, target_port)
        self.faults = faults
        self.port = port
        self.counts: Counter[str] = Counter()
        """Connections accepted, dropped, cut and reordered; bytes forwarded each way."""
        self._rng = np.random.default_rng(seed)
        self._server: asyncio.Server | None = None
        self._group: asyncio.TaskGroup | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    async def __aenter__(self) -> Self:
        self._group = asyncio.TaskGroup()
        await self._group.__aenter__()
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        assert self._server is not None and self._group is not None
        self._server.close()
        self.cut_all()
        await self._server.wait_closed()
        await self._group.__aexit__(exc_type, exc, tb)

    def cut_all(self) -> None:
        """Cut every connection now (the network went away)."""
        for writer in list(self._writers):
            writer.transport.abort()

    async def _accept(self, down_reader: asyncio.StreamReader, down_writer: asyncio.StreamWriter) -> None:
        f, rng = self.faults, self._rng
        self.counts["connections"] += 1
        if rng.random() < f.drop:
            self.counts["dropped"] += 1
            down_writer.transport.abort()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            self.counts["target_refused"] += 1
            down_writer.transport.abort()
            return
        cut_at = int(rng.integers(f.cut_after_bytes[0], f.cut_after_bytes[1] + 1)) if rng.random() < f.cut else None
        reorder = rng.random() < f.reorder
        writers = (down_writer, up_writer)
        self._writers.update(writers)
        budget = [cut_at]  # bytes left before the cut, both directions together

        def cut() -> None:
            self.counts["cut"] += 1
            for w in writers:
                w.transport.abort()

        assert self._group is not None
        self._group.create_task(self._pipe(down_reader, up_writer, "up", budget, cut, reorder))
        self._group.create_task(self._pipe(up_reader, down_writer, "down", budget, cut, False))

    async def _pipe(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, direction: str,
        budget: list[int | None], cut: Callable[[], None], reorder: bool,
    ) -> None:
        """Read chunks as they come (stamped), forward each ``delay_s`` after its arrival, paced."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[float, bytes] | None] = asyncio.Queue()
        assert self._group is not None
        forward = self._group.create_task(self._forward(queue, writer, direction))
        try:
            held: bytes | None = None
            while True:
                chunk = await reader.read(CHUNK)
                if not chunk:
                    break
                if budget[0] is not None:
                    if len(chunk) >= budget[0]:
                        queue.put_nowait((loop.time(), chunk[: budget[0]]))
                        queue.put_nowait(None)
                        await forward
                        cut()
                        return
                    budget[0] -= len(chunk)
                if reorder and held is None and len(chunk) >= self.faults.reorder_min_bytes:
                    held, reorder = chunk, False  # goes out after the next chunk
                    self.counts["reordered"] += 1
                    continue
                queue.put_nowait((loop.time(), chunk))
                if held is not None:
                    queue.put_nowait((loop.time(), held))
                    held = None
        except (ConnectionError, OSError):
            # A reset, not a close: what was still in flight is lost with the link.
            forward.cancel()
            writer.transport.abort()
            self._writers.discard(writer)
            return
        queue.put_nowait(None)
        await forward

    async def _forward(
        self, queue: asyncio.Queue[tuple[float, bytes] | None], writer: asyncio.StreamWriter, direction: str
    ) -> None:
        f, loop = self.faults, asyncio.get_running_loop()
        try:
            while (item := await queue.get()) is not None:
                arrived, chunk = item
                if f.delay_s:
                    await asyncio.sleep(max(0.0, arrived + f.delay_s - loop.time()))
                if f.bandwidth_bps is not None:
                    await asyncio.sleep(len(chunk) / f.bandwidth_bps)  # its transmission time, before it lands
                writer.write(chunk)
                self.counts[f"bytes_{direction}"] += len(chunk)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            # One side closed or failed: close the other (a half-open link helps nobody).
            with contextlib.suppress(ConnectionError, OSError, RuntimeError):
                writer.close()
            self._writers.discard(writer)
