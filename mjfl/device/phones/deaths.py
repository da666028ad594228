"""Why the app on a phone died, read from its logcat: which system lines to keep, and what they say.

adb's logcat filter works by tag only (``adb.LOGCAT``): the app's own tags, and
the system's tags that tell of a process's end. Those system tags are shared
by every app on the phone (``libc``, ``DEBUG``, ``ActivityManager``, the
low-memory killer's), so ``AppLines`` keeps, of them, only the lines about the
app's package or one of its processes; a phone's file is then not flooded
with other apps' crashes and starts. From the lines kept it classifies the
app's end (``Death``): a native crash with its signal, a kill for memory, an
ANR, a Java exception, or the system stopping the app. The lines are
``logcat -v threadtime``'s::

    11-26 09:58:01.114  5120  5141 F libc    : Fatal signal 11 (SIGSEGV), code 1 ... pid 5120 (org.mjfl.app)

(date, time, the logging process's pid, its thread's id, the level, the tag,
the message). Lines that are not of that form (logcat's ``--------- beginning
of main``) are kept as they are.
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass

# One logcat -v threadtime line: date, time, pid, tid, level, tag, message.
_LINE = re.compile(r"^\d\d-\d\d \d\d:\d\d:\d\d\.\d+\s+(\d+)\s+(\d+)\s+([VDIWEFA])\s+(.*?)\s*: (.*)$")

# Tags every app's (and the system's) processes share: only their lines about the app are kept.
SHARED_TAGS = frozenset({
    "libc", "DEBUG", "crash_dump64", "crash_dump32", "tombstoned", "lowmemorykiller", "lmkd", "ActivityManager",
    "AndroidRuntime",
})  # fmt: skip
# Tags whose first lines of a report come before the one naming the app (a tombstone's header, a Java
# crash's "FATAL EXCEPTION: thread", crash_dump's first line): this many of each other process's latest lines are held back.
_HELD_TAGS = frozenset({"DEBUG", "AndroidRuntime", "crash_dump64", "crash_dump32"})
_HELD = 12


@dataclass(frozen=True)
class Death:
    """How the app's process ended, as its phone's log said it: ``cause`` is one of
    "native crash", "killed for memory", "not responding (ANR)", "Java exception",
    "stopped by the system", "died"; ``detail`` what the log adds (the signal, the reason)."""

    cause: str
    detail: str = ""

    def __str__(self) -> str:
        return f"{self.cause} ({self.detail})" if self.detail else self.cause


# How specific each cause is: a later, vaguer line ("has died") does not replace a specific one.
_RANK = {"died": 0, "stopped by the system": 1, "not responding (ANR)": 2, "Java exception": 3,
         "killed for memory": 4, "native crash": 5}  # fmt: skip


class AppLines:
    """One phone's log lines, read in order: which to keep (``keep``), and the app's last death (``death``)."""

    def __init__(self, package: str, tag: str) -> None:
        self.package = package
        self.tag = tag  # the app's own lines' tag: their pid is the app's
        self.pids: set[str] = set()  # the app's processes seen (its own lines, its starts)
        self.dumpers: set[str] = set()  # crash_dump processes dumping one of the app's processes
        self._held: dict[str, deque[bytes]] = {}  # each other process's latest lines of _HELD_TAGS, held back
        self._exception_from: str | None = None  # the app's pid whose Java exception's next line names it
        self.death: Death | None = None
        self.fresh = False  # ``death`` is of the app's current end (``forget`` starts a new one)
        self._new = True

    def keep(self, line: bytes, *, new: bool = True) -> list[bytes]:
        """The lines to keep now that ``line`` (no newline) was read: none, it, or it after held-back ones.

        ``new``: False for a line adb replays from the phone's buffer (a new
        stream repeats what was read before): it tells of no new death.
        """
        self._new = new
        m = _LINE.match(line.decode("utf-8", "replace"))
        if m is None:
            return [line]
        pid, _tid, _level, tag, text = m.groups()
        if tag not in SHARED_TAGS:
            if tag == self.tag:
                self.pids.add(pid)
            return [line]  # what adb's filter let through of tags no app shares
        about = self._about(pid, tag, text)
        if about:
            self._classify(pid, tag, text)
        elif tag in _HELD_TAGS:
            held = self._held.setdefault(pid, deque(maxlen=_HELD))
            held.append(line)
            if len(self._held) > 64:  # other processes' reports: forget the oldest
                self._held.pop(next(iter(self._held)))
            return []
        return [*self._held.pop(pid, ()), line] if about else []

    def _about(self, pid: str, tag: str, text: str) -> bool:
        """Whether a shared tag's line is about the app: it names the package or one of its pids, or comes from one."""
        if pid in self.pids or pid in self.dumpers:
            return True
        if tag == "tombstoned" and self.dumpers:  # where the tombstone of the app's crash went
            if text.startswith("Tombstone written to"):
                self.dumpers.clear()
            return True
        named = re.findall(r"(?:pid[ =:]*|process |PID: |\()(\d+)\b", text)
        if self._names(text):
            started = re.search(r"(?:Start proc |PID: |pid )(\d+)", text)
            if started:
                self.pids.add(started[1])
        elif not (tag.startswith("crash_dump") and any(p in self.pids for p in named)):
            return False
        if tag.startswith("crash_dump") or tag == "DEBUG":
            self.dumpers.add(pid)  # dumping the app: its tombstone's lines come from it
        return True

    def _names(self, text: str) -> bool:
        """Whether ``text`` names the app's package (not another whose name it begins)."""
        return re.search(rf"(?<![\w.]){re.escape(self.package)}(?![\w.])", text) is not None

    def _classify(self, pid: str, tag: str, text: str) -> None:
        """What a kept line of a shared tag says of the app's end, if anything."""
        # A native crash is told by libc's line, which the crashing process logs itself before its
        # tombstone is dumped (DEBUG's lines, kept, say it again, later, maybe after a new start).
        if tag == "libc":
            signal = re.search(r"Fatal signal \d+ \((SIG\w+)\)(?:.*? in tid \d+ \(([^)]*)\))?", text)
            if signal:
                self._died(Death("native crash", signal[1] + (f" in thread {signal[2]}" if signal[2] else "")))
        elif tag in ("lowmemorykiller", "lmkd") and re.search(r"\bKill(ing)?\b", text):
            reason = re.search(r"reason:?\s*(.+)$", text)
            adj = re.search(r"oom_score_adj (-?\d+)", text)
            detail = reason[1] if reason else (f"oom_score_adj {adj[1]}" if adj else "")
            self._died(Death("killed for memory", f"low-memory killer: {detail}" if detail else "low-memory killer"))
        elif tag == "ActivityManager":
            self._activity_manager(text)
        elif tag == "AndroidRuntime":
            if re.match(rf"Process: {re.escape(self.package)}, PID: (\d+)", text):
                self._exception_from = pid
            elif self._exception_from == pid and not text.startswith(("FATAL EXCEPTION", "\t", " ")):
                self._died(Death("Java exception", text.strip()))
                self._exception_from = None

    def _activity_manager(self, text: str) -> None:
        if text.startswith("ANR in "):
            self._died(Death("not responding (ANR)"))
        elif text.startswith("Killing ") and self._names(text):
            reason = text.rsplit("): ", 1)[-1] if "): " in text else ""
            memory = re.search(r"low ?mem|lmk|memory", reason, re.IGNORECASE)
            self._died(Death("killed for memory" if memory else "stopped by the system", reason))
        elif text.startswith("Force stopping ") and self._names(text):
            self._died(Death("stopped by the system", "force-stopped"))
        elif re.match(rf"Process {re.escape(self.package)}(:\w+)? \(pid \d+\) has died", text):
            self._died(Death("died", text.split("has died", 1)[1].lstrip(": ").strip()))

    def _died(self, death: Death) -> None:
        """A line told of the app's end: kept unless one already said more of the same end."""
        if not self._new:
            return
        if self.death is not None and self.fresh and _RANK[self.death.cause] > _RANK[death.cause]:
            return
        self.death, self.fresh = death, True

    def forget(self) -> None:
        """The app was started again: a line from now on tells of a new end."""
        self.fresh = False
