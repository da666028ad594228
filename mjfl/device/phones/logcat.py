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

Both the file and the cuts get the lines ``deaths.AppLines`` keeps: the
app's own, and of the system's tags shared by all apps only those about
the app. The same reading says how the app last ended (``death``), for the
event of its device's lost connection.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

from mjfl.device.phones.adb import APP_PACKAGE, LOG_TAG
from mjfl.device.phones.deaths import AppLines, Death
from mjfl.logs import phone_log_name


class _Phone:
    """What is known of one phone's log: its lines so far (the last ones), and where its stream stands."""

    def __init__(self, remembered: int, package: str) -> None:
        self.remembered = remembered
        self.app = AppLines(package, LOG_TAG)
        self.seen: OrderedDict[bytes, None] = OrderedDict()
        self.partial = b""  # the start of a line not yet ended
        self.replaying = False  # a new stream, while it repeats lines already copied
        self.streams = 0  # its streams open now (none: the phone left, and its log says no more)

    def restart(self) -> None:
        """A new stream: it starts with the phone's buffer, which may repeat what was copied."""
        self.partial = b""  # the end of a line the old stream cut off never comes
        self.replaying = bool(self.seen)

    def read(self, chunk: bytes) -> tuple[list[bytes], list[bytes]]:
        """The whole lines ``chunk`` ends that are kept (``AppLines``), each with its newline:
        all of them (the phone's file), and those not copied before (the cuts)."""
        *lines, self.partial = (self.partial + chunk).split(b"\n")
        kept: list[bytes] = []
        fresh: list[bytes] = []
        for line in lines:
            new = self._new(line)
            out = [k + b"\n" for k in self.app.keep(line, new=new)]
            kept += out
            if new:
                fresh += out
        return kept, fresh

    def _new(self, line: bytes) -> bool:
        """Whether ``line`` is not a replay of one read before (and remember it)."""
        if self.replaying and line in self.seen:
            return False
        self.replaying = False
        self.seen[line] = None
        self.seen.move_to_end(line)
        if len(self.seen) > self.remembered:
            self.seen.popitem(last=False)
        return True


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

    def __init__(self, folder: Path, *, remembered: int = 10_000, package: str = APP_PACKAGE) -> None:
        self.folder = folder
        self.remembered = remembered  # lines of each phone known again in a replay (logcat's buffer holds a few thousand)
        self.package = package
        self._lock = threading.Condition()
        self._phones: dict[str, _Phone] = {}
        self._cuts: list[_Cut] = []

    @contextlib.contextmanager
    def stream(self, serial: str) -> Iterator[Callable[[bytes], None]]:
        """For one logcat stream of ``serial``: yields what to call with each chunk it delivers."""
        self.folder.mkdir(parents=True, exist_ok=True)
        with open(self.folder / phone_log_name(serial), "ab") as own:
            with self._lock:
                phone = self._phones.setdefault(serial, _Phone(self.remembered, self.package))
                phone.restart()
                phone.streams += 1
                for cut in self._cuts:
                    cut.file(serial)

            def copy(chunk: bytes) -> None:
                with self._lock:
                    kept, lines = phone.read(chunk)
                    own.writelines(kept)
                    own.flush()
                    for cut in self._cuts:
                        sink = cut.file(serial)
                        sink.writelines(lines)
                        sink.flush()
                    if phone.app.fresh:
                        self._lock.notify_all()

            try:
                yield copy
            finally:
                with self._lock:
                    phone.streams -= 1
                    # The line the stream's end cut off, ended here in the phone's file (not in a cut: not whole).
                    own.writelines(k + b"\n" for k in phone.app.keep(phone.partial, new=False) if phone.partial)
                    self._lock.notify_all()

    def started(self, serial: str) -> None:
        """The app on ``serial`` is (being) started: what its log says from now on is of its next end."""
        with self._lock:
            phone = self._phones.get(serial)
            if phone is not None:
                phone.app.forget()

    def death(self, serial: str, *, wait_s: float, settle_s: float = 1.0) -> Death | None:
        """How the app on ``serial`` ended, once its log says (within ``wait_s``); None if it did not,
        or at once when no stream of its log is open (the phone left: its log says no more).

        Blocking (a worker thread's). A vague end ("died": ActivityManager
        saw the process go) waits up to ``settle_s`` more for a line saying
        why, which may follow it. What is returned is said once: the next
        call waits for a new end.
        """
        deadline = time.monotonic() + wait_s
        with self._lock:
            phone = self._phones.get(serial)
            if phone is None:
                return None

            def known(vague: bool) -> bool:
                return phone.app.fresh and phone.app.death is not None and (vague or phone.app.death.cause != "died")

            self._lock.wait_for(lambda: known(True) or not phone.streams, max(0.0, deadline - time.monotonic()))
            if not known(True):
                return None
            self._lock.wait_for(lambda: known(False), settle_s)
            death = phone.app.death
            phone.app.forget()
            return death

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
