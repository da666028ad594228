"""Each attached phone's app log, copied: one file per phone for as long as the bridge runs, and cuts of it.

``PhoneLogs(folder)`` keeps ``folder/<serial>.logcat`` (``mjfl.logs.phone_log_name``)
as adb delivers it, appended across reconnects, exactly as `mjfl testbed run`
always has. ``cut(other)`` also copies, while it is open, every phone's lines
into ``other/<serial>.logcat``: the lab service (`mjfl serve --phones`)
opens one per run for as long as the run runs, so each run's folder holds
its phones' lines of that time and no other.

A cut takes whole lines only, and never the replay of a reconnect: adb's
``logcat`` (with no ``-T``) starts with the phone's whole ring buffer, so a
phone back after a cable pull sends again what it logged before, lines
that belong to earlier runs. Lines already copied are known (the last
``remembered`` of each phone), and a new stream's leading lines that are
among them are left out of the cuts; its first unknown line ends the
replay. The phone's own file keeps the replay, as it always did.
"""

from __future__ import annotations

import contextlib
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

from mjfl.logs import phone_log_name


class _Phone:
    """What is known of one phone's log: its lines so far (the last ones), and where its stream stands."""

    def __init__(self, remembered: int) -> None:
        self.remembered = remembered
        self.seen: OrderedDict[bytes, None] = OrderedDict()
        self.partial = b""  # the start of a line not yet ended
        self.replaying = False  # a new stream, while it repeats lines already copied

    def restart(self) -> None:
        """A new stream: it starts with the phone's buffer, which may repeat what was copied."""
        self.partial = b""  # the end of a line the old stream cut off never comes
        self.replaying = bool(self.seen)

    def fresh(self, chunk: bytes) -> list[bytes]:
        """The whole lines ``chunk`` ends that were not copied before, each with its newline."""
        *lines, self.partial = (self.partial + chunk).split(b"\n")
        out = []
        for line in lines:
            if self.replaying and line in self.seen:
                continue
            self.replaying = False
            self.seen[line] = None
            self.seen.move_to_end(line)
            if len(self.seen) > self.remembered:
                self.seen.popitem(last=False)
            out.append(line + b"\n")
        return out


class _Cut:
    """One cut's files, opened as each phone's first line comes (or at once for the phones known then)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.files: dict[str, BinaryIO] = {}

    def file(self, serial: str) -> BinaryIO:
        if serial not in self.files:
            self.folder.mkdir(parents=True, exist_ok=True)
            self.files[serial] = open(self.folder / phone_log_name(serial), "ab")  # noqa: SIM115 - closed with the cut
        return self.files[serial]

    def close(self) -> None:
        for sink in self.files.values():
            sink.close()


class PhoneLogs:
    """The phones' log copies (see the module docstring); the copying threads and the cuts' owner may differ."""

    def __init__(self, folder: Path, *, remembered: int = 10_000) -> None:
        self.folder = folder
        self.remembered = remembered  # lines of each phone known again in a replay (logcat's buffer holds a few thousand)
        self._lock = threading.Lock()
        self._phones: dict[str, _Phone] = {}
        self._cuts: list[_Cut] = []

    @contextlib.contextmanager
    def stream(self, serial: str) -> Iterator[Callable[[bytes], None]]:
        """For one logcat stream of ``serial``: yields what to call with each chunk it delivers."""
        self.folder.mkdir(parents=True, exist_ok=True)
        with open(self.folder / phone_log_name(serial), "ab") as own:
            with self._lock:
                phone = self._phones.setdefault(serial, _Phone(self.remembered))
                phone.restart()
                for cut in self._cuts:
                    cut.file(serial)

            def copy(chunk: bytes) -> None:
                own.write(chunk)
                own.flush()
                with self._lock:
                    lines = phone.fresh(chunk)
                    for cut in self._cuts:
                        sink = cut.file(serial)
                        sink.writelines(lines)
                        sink.flush()

            yield copy

    @contextlib.contextmanager
    def cut(self, folder: Path) -> Iterator[None]:
        """While inside, every phone's new lines are also appended to ``folder/<serial>.logcat`` (made for each phone known)."""
        cut = _Cut(folder)
        with self._lock:
            for serial in self._phones:
                cut.file(serial)
            self._cuts.append(cut)
        try:
            yield
        finally:
            with self._lock:
                self._cuts.remove(cut)
                cut.close()
