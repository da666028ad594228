"""The soak's processes: the lab service and the device processes it kills and starts again, read from /proc.

Each is a command in a session of its own, its terminal output in a file (a
pipe could fill over an hour). A device process is a group of devices with
ids ``<name>-<i>``: a JVM one (``android/client-core/bin/mjfl-device``, the
phone client's core on the JVM with its stand-in trainer) or an emulated one
(`mjfl devices emulate`, one worker process). Killed, the whole session gets
SIGKILL, as a phone's process dies: no bye, its sockets closed by the kernel.
Started again, it connects with the same ids, as the phone's app does.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from mjfl.bench.labs import Process

STOP_S = 30.0  # how long a killed process may take to be reaped

# The JVM launcher, from the repository's root (the bench runs from a checkout, as the tests do).
LAUNCHER = Path(__file__).resolve().parents[2] / "android" / "client-core" / "bin" / "mjfl-device"
BUILD = LAUNCHER.parents[2] / "build-jvm.sh"

# A phone's Java heap is bounded (Android's per-app heap limit), so the JVM devices run under a bound too:
# a leak in the heap fills it and ends the process with an OutOfMemoryError, counted as an exit nobody
# asked for. The heap is touched whole at the start, so that its resident memory does not grow as the
# collector takes more of it: what grows after the warm-up is memory outside the heap (threads,
# native buffers, loaded classes), the leak that a bound heap does not catch.
JVM_HEAP = "-Xms192m -Xmx192m -XX:+AlwaysPreTouch"


class Started(Process):
    """A command, any (a JVM's launcher too), in a session of its own; ``kill`` ends it as a crash does."""

    def __init__(self, argv: Sequence[str], log: Path, env: dict[str, str] | None = None) -> None:
        # Not Process's: that one runs `mjfl` commands only, and starts its log afresh (a device
        # process started again appends to its own).
        self.log = log
        with open(log, "a") as f:
            self.proc = subprocess.Popen(
                list(argv), stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                env=None if env is None else {**os.environ, **env},
            )

    def running(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL to its whole session, as a process that dies: nothing is said to anyone."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signal.SIGKILL)
        self.proc.wait(STOP_S)


def mjfl(*args: str) -> list[str]:
    """The command line of `mjfl ARGS` with this Python."""
    return [sys.executable, "-m", "mjfl.cli", *args]


@dataclasses.dataclass
class DeviceProcess:
    """A group of devices in one process, killed and started again by the soak."""

    name: str  # its devices' id prefix
    kind: str  # "jvm" or "emulated"
    count: int
    url: str
    folder: Path
    killable: bool  # the steady ones are never killed: their memory over the whole soak is the figure
    process: Started | None = None
    starts: int = 0

    @property
    def devices(self) -> list[str]:
        return [f"{self.name}-{i}" for i in range(self.count)]

    def start(self) -> None:
        log = self.folder / f"{self.name}.out"
        if self.kind == "jvm":
            argv = [str(LAUNCHER), "--url", self.url, "--count", str(self.count), "--id-prefix", self.name,
                    "--cache", str(self.folder / "jvm-cache"), "--seed", str(self.starts)]
            self.process = Started(argv, log, env={"JAVA_TOOL_OPTIONS": JVM_HEAP})
        else:
            argv = mjfl("devices", "emulate", "--url", self.url, "--count", str(self.count), "--workers", "1",
                        "--id-prefix", self.name, "--seed", str(self.starts))
            self.process = Started(argv, log)
        self.starts += 1

    def running(self) -> bool:
        return self.process is not None and self.process.running()

    def kill(self) -> None:
        if self.process is not None:
            self.process.kill()

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()


def build_jvm_devices() -> None:
    """Compile the JVM client once before any launcher runs (two launchers compiling at once would race)."""
    done = subprocess.run([str(BUILD), "--no-test"], check=False, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"android/build-jvm.sh --no-test failed: {(done.stderr or done.stdout)[-2000:]}")


@dataclasses.dataclass(frozen=True)
class Reading:
    """One process's resident memory (MiB) and open file descriptors, from /proc; None once it is gone."""

    rss_mb: float | None
    fds: int | None


def read_proc(pid: int) -> Reading:
    """``pid``'s VmRSS and the entries of its fd folder (Linux), or Nones if it exited meanwhile."""
    try:
        rss = next(int(line.split()[1]) / 1024 for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                   if line.startswith("VmRSS:"))
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except (OSError, StopIteration):
        return Reading(None, None)
    return Reading(round(rss, 1), fds)



def is_java(pid: int) -> bool:
    """Whether ``pid`` runs java yet: a JVM device's launcher builds first (bash), then execs java in its place."""
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip() == "java"
    except OSError:
        return False
