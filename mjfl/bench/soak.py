"""`mjfl bench soak`: the lab service for a long time, devices killed and back, runs one after another.

What it runs, all real processes on this machine: `mjfl serve` (no devices
of its own), JVM device processes (``android/client-core/bin/mjfl-device``:
the phone client's core, with its stand-in trainer) and emulated device
processes (`mjfl devices emulate`, one worker each), ``per_process`` devices
in each. Runs are submitted all along, small digits runs of two jobs (LeNet-5
and the paper's CNN, ``rounds`` rounds at most, methods random and
meta-greedy in turn), so that ``max_running`` run and one waits. Every
``kill_every_s`` one device process is SIGKILLed (a JVM one and an emulated
one in turn; the first of each kind is never killed) and started again
``down_s`` later with the same device ids, as a phone's app that crashed and
is relaunched.

What it reports, over time and at the end:

memory and descriptors
    The service's resident memory (VmRSS) and open file descriptors, and
    those of the JVM device processes, from /proc every ``sample_s``. The
    figure is the growth from the end of the warm-up (``warm_up`` of the
    time, and at least until the first run has ended: every code path of a
    run has been through once) to the end: the median RSS of the samples in
    a window after the warm-up against that of the last window, the least
    descriptors in each window (connections and runs' files come and go; a
    leak raises the floor). The JVM's figure is the never-killed one's.
rounds lost
    ``soak_checks.RoundLedger``: every round seen finished in a run's
    database is still there at the end, unchanged, numbered without a gap.
disconnects
    ``soak_checks.disconnect_verdict``: every disconnect the service recorded
    has a cause, and each killed device's says its connection was lost.

Verdicts: growth under ``GROWTH`` (5%), 0 rounds lost or repeated, 0
disconnects without a cause, every killed device recorded as lost. They are
about leaks and losses, not speed: a busy machine runs fewer runs, and its
figures still hold. SIGTERM (or Ctrl-C) stops the soak and every process it
started, each in a session of its own.
"""

from __future__ import annotations

import contextlib
import dataclasses
import statistics
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console

from mjfl.bench import output
from mjfl.bench.labs import JOB, LAB, Lab
from mjfl.bench.soak_checks import (
    Kill,
    RoundLedger,
    disconnect_verdict,
    logged_disconnects,
    run_disconnects,
)
from mjfl.bench.soak_fleet import (
    DeviceProcess,
    Started,
    build_jvm_devices,
    is_java,
    mjfl,
    read_proc,
)
from mjfl.coordinator.lab.store import FINAL
from mjfl.coordinator.run.preparation import PROGRAM_CACHE
from mjfl.errors import UserError

Figures = dict[str, Any]

GROWTH = 0.05  # memory and descriptors "flat": less than this growth from the end of the warm-up to the end
_TICK_S = 1.0  # how often the soak looks at its processes and the lab
_PROGRESS_S = 60.0  # a progress line this often
_START_S = 300.0  # the most the lab and its devices may take to start, on a busy machine


_RUN = """
seed = {seed}
[fleet]
size = {size}
shards = "present"
[scheduler]
method = "{method}"
min_plan = 2
"""



@dataclasses.dataclass(frozen=True)
class Settings:
    """What the soak runs (module docstring); written with the figures."""

    minutes: float = 60.0
    jvm: int = 2  # JVM device processes; the first is never killed
    emulated: int = 2  # emulated device processes; the first is never killed
    per_process: int = 2  # devices in each
    kill_every_s: float = 60.0
    down_s: float = 10.0
    sample_s: float = 15.0
    warm_up: float = 0.2  # of the time
    max_running: int = 2
    rounds: int = 8
    seed: int = 0

    @property
    def devices(self) -> int:
        return (self.jvm + self.emulated) * self.per_process

    @property
    def run_size(self) -> int:
        """Each run's ``fleet.size``: small enough to be admitted while a killed process's devices are away."""
        return max(2, min(self.devices - self.per_process, self.devices // 2))

    def check(self) -> None:
        """A UserError naming the option that is out of range."""
        if self.minutes <= 0:
            raise UserError("--minutes must be > 0")
        if self.jvm < 1 or self.emulated < 1 or self.per_process < 1 or self.max_running < 1 or self.rounds < 1:
            raise UserError("--jvm, --emulated, --per-process, --max-running and --rounds must be >= 1")
        if self.kill_every_s <= 0 or self.down_s < 0 or self.sample_s <= 0:
            raise UserError("--kill-every-s and --sample-s must be > 0, --down-s >= 0")
        if not 0 <= self.warm_up < 1:
            raise UserError("--warm-up must lie in [0, 1)")


def run_soak_bench(
    settings: Settings = Settings(), *, out: Path | None = None, json_path: Path | None = None,
    console: Console | None = None,
) -> Figures:
    """Soak the lab service (module docstring); print a table, write ``json_path``.

    ``out`` keeps the lab's folder and the processes' output (default: a temporary folder, removed).
    """
    settings.check()
    console = console or Console(stderr=True)
    with contextlib.ExitStack() as stack:
        folder = out if out is not None else Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="mjfl-soak-")))
        folder.mkdir(parents=True, exist_ok=True)
        with output.step(console, "building the JVM devices ..."):
            build_jvm_devices()
        soak = stack.enter_context(_Soak.started(settings, folder, console))
        soak.go()
        stack.close()  # every process stopped before the databases and the log are read for the last time
        figures = soak.figures()
    console.print(output.table(
        f"lab service soak, {settings.minutes:g} min ({output.machine()})", ("figure", "measured", "goal", "met", "how"),
        _rows(figures), left=("how",),
    ))
    output.write(figures, json_path, console)
    return figures


class _Soak:
    """The soak going: the lab, its device processes, what was killed, read and sampled."""

    def __init__(self, settings: Settings, folder: Path, console: Console, client: Lab) -> None:
        self.settings, self.folder, self.console, self.client = settings, folder, console, client
        self.lab = client.process
        said = self.lab.said()
        client.url = said.split("researchers' API: ")[1].split("/api/lab")[0]
        client.admin = (folder / "lab" / "admin.token").read_text().strip()
        self.url = said.split("connect to ")[1].split()[0].rstrip(",")
        self.devices = [
            DeviceProcess(f"{kind[:3]}{n}", kind, settings.per_process, self.url, folder, killable=n > 0)
            for kind, count in (("jvm", settings.jvm), ("emulated", settings.emulated)) for n in range(count)
        ]
        self.ledger = RoundLedger()
        self.kills: list[Kill] = []
        self.restarts: dict[str, float] = {}  # process name -> when it starts again
        self.unbidden: list[str] = []  # device processes that exited with nobody killing them
        self.runs: dict[str, str] = {}  # run id -> state
        self.samples: list[Figures] = []
        self.began = time.monotonic()
        self.first_end: float | None = None  # when the first run ended (monotonic)
        self.ended_at: float | None = None

    @classmethod
    @contextlib.contextmanager
    def started(cls, settings: Settings, folder: Path, console: Console) -> Iterator[_Soak]:
        """The lab started and its devices connected; every process stopped after (devices first)."""
        (folder / "lab.toml").write_text(LAB.format(
            seed=settings.seed, size=settings.devices, profiles="", max_running=settings.max_running, queued=100000,
            share="equal", programs=PROGRAM_CACHE.resolve(),
        ))
        with output.step(console, f"starting the lab and {settings.devices} devices ..."):
            lab = Started(mjfl("serve", str(folder / "lab.toml"), "--out", str(folder / "lab")), folder / "serve.out")
            client = Lab(lab, "", "")
            soak: _Soak | None = None
            try:
                client.until(lambda: "researchers' API: " in lab.said() and "connect to " in lab.said(),
                             time.monotonic() + _START_S, "the service's API")
                soak = cls(settings, folder, console, client)
                for device in soak.devices:
                    device.start()
                client.until(lambda: len(soak.connected()) == settings.devices, time.monotonic() + _START_S,
                             f"{settings.devices} devices")
            except BaseException:
                for device in soak.devices if soak is not None else ():
                    device.stop()
                lab.stop()
                raise
        try:
            yield soak
        finally:
            for device in soak.devices:
                device.stop()
            lab.stop()
            soak.ended_at = soak.ended_at or time.monotonic()

    # -- the soak ------------------------------------------------------------------------------

    def connected(self) -> set[str]:
        return {d["device"] for d in self.client.call("GET", "/api/lab/devices")["devices"]}

    def go(self) -> None:
        """Until the time is up: runs kept coming, a device process killed and back now and then, samples read."""
        s = self.settings
        self.began = time.monotonic()  # the soak's time counts from its devices all connected
        end = self.began + s.minutes * 60
        next_kill, next_sample, next_progress = self.began + s.kill_every_s, self.began, self.began + _PROGRESS_S
        self.console.print(
            f"soaking for {s.minutes:g} min: {s.devices} devices in {len(self.devices)} processes connected,"
            f" a process killed every {s.kill_every_s:g} s", highlight=False, soft_wrap=True,
        )
        while (now := time.monotonic()) < end:
            if not self.lab.running():
                raise RuntimeError(f"mjfl serve exited ({self.lab.proc.returncode}): {self.lab.said()[-2000:]}")
            self._keep_devices(now)
            if now >= next_kill and self._kill_one(now):
                next_kill = now + s.kill_every_s
            self._keep_runs(now)
            if now >= next_sample:
                self._sample(now)
                next_sample = now + s.sample_s
            if now >= next_progress:
                self.console.print(self._progress(now), highlight=False, soft_wrap=True)
                next_progress += _PROGRESS_S  # on the minute, however long a tick took
            time.sleep(_TICK_S)
        self._sample(time.monotonic())
        self.ended_at = time.monotonic()

    def _keep_devices(self, now: float) -> None:
        """Start again the killed processes whose time has come, and any that exited unbidden."""
        for device in self.devices:
            due = self.restarts.get(device.name)
            if due is not None and now >= due:
                del self.restarts[device.name]
                device.start()
            elif due is None and not device.running():
                self.unbidden.append(f"{device.name} exited ({device.process.proc.returncode if device.process else '?'})")
                device.start()

    def _kill_one(self, now: float) -> bool:
        """SIGKILL the next killable process in turn, once its devices are all connected; whether one was."""
        killable = [d for d in self.devices if d.killable]
        turn = len(self.kills)
        # A JVM one and an emulated one in turn: order the killable ones by kind, then by name.
        kinds = sorted({d.kind for d in killable})
        of_kind = [d for d in killable if d.kind == kinds[turn % len(kinds)]]
        victim = of_kind[(turn // len(kinds)) % len(of_kind)]
        if victim.name in self.restarts or not set(victim.devices) <= self.connected():
            return False
        self.kills.append(Kill(time.time(), victim.name, tuple(victim.devices)))
        victim.kill()
        self.restarts[victim.name] = now + self.settings.down_s
        return True

    def _keep_runs(self, now: float) -> None:
        """Runs' states read, their rounds seen, and new runs submitted so that one is always waiting."""
        for run_id in [r for r, state in self.runs.items() if state not in FINAL]:
            # Each run going asked for alone, as its researcher would: the whole list grows with the soak.
            state = self.client.call("GET", f"/api/lab/runs/{run_id}")["run"]["state"]
            if state != "queued":  # its last rounds too, once when it has ended
                self.ledger.observe(run_id, self._folder(run_id) / "mjfl.db")
            self.runs[run_id] = state
        if self.first_end is None and any(state in FINAL for state in self.runs.values()):
            self.first_end = now
        going = sum(state not in FINAL for state in self.runs.values())
        for _ in range(self.settings.max_running + 1 - going):
            n = len(self.runs)
            run = self.client.call("POST", "/api/lab/runs", {"config": _run_toml(self.settings, n)})["run"]
            self.runs[run["id"]] = run["state"]

    def _folder(self, run_id: str) -> Path:
        return self.folder / "lab" / "runs" / run_id

    def _sample(self, now: float) -> None:
        sample: Figures = {"t_s": round(now - self.began, 1)}
        lab = read_proc(self.lab.pid)
        sample["service"] = {"rss_mb": lab.rss_mb, "fds": lab.fds}
        for device in self.devices:
            if device.kind == "jvm" and device.process is not None and is_java(device.process.pid):
                reading = read_proc(device.process.pid)
                sample[device.name] = {"rss_mb": reading.rss_mb, "fds": reading.fds, "start": device.starts}
        self.samples.append(sample)

    def _progress(self, now: float) -> str:
        states = list(self.runs.values())
        last = self.samples[-1] if self.samples else {}
        jvm = ", ".join(f"{name} {r['rss_mb']:.0f} MiB {r['fds']} fds" for name, r in last.items()
                        if isinstance(r, dict) and name != "service" and r["rss_mb"] is not None)
        service = last.get("service", {})
        return (
            f"soak {int((now - self.began) // 60)}/{self.settings.minutes:g} min: {sum(s in FINAL for s in states)} runs ended"
            f" ({states.count('completed')} completed), {sum(s not in FINAL for s in states)} going;"
            f" {len(self.kills)} kills; {len(self.ledger.seen)} rounds seen;"
            f" service {service.get('rss_mb') or 0:.0f} MiB {service.get('fds')} fds; {jvm}"
        )

    # -- the figures ---------------------------------------------------------------------------

    def figures(self) -> Figures:
        """Every figure, once every process has stopped."""
        folders = {run_id: self._folder(run_id) for run_id, state in self.runs.items() if self._folder(run_id).exists()}
        rounds = self.ledger.verdict(folders)
        disconnects = disconnect_verdict(
            logged_disconnects(self.folder / "lab" / "lab.log"), run_disconnects(folders.values()), self.kills,
        )
        warm = self._warm_end()
        steady_jvm = next(d.name for d in self.devices if d.kind == "jvm" and not d.killable)
        growth = {
            "service_rss_growth": _growth(self.samples, "service", "rss_mb", warm, statistics.median),
            "service_fds_growth": _growth(self.samples, "service", "fds", warm, min),
            "jvm_rss_growth": _growth(self.samples, steady_jvm, "rss_mb", warm, statistics.median),
            "jvm_fds_growth": _growth(self.samples, steady_jvm, "fds", warm, min),
        }
        states = list(self.runs.values())
        return {
            **growth,
            "rounds_lost": rounds["lost"], "rounds_repeated": rounds["repeated"],
            "disconnects_without_cause": disconnects["without_cause"],
            "kills_not_recorded_as_lost": disconnects["killed_devices"] - disconnects["killed_as_lost"],
            "device_exits_unbidden": len(self.unbidden),
            "runs": {"submitted": len(states), "completed": states.count("completed"),
                     "ended": sum(s in FINAL for s in states), "states": dict(sorted(self.runs.items()))},
            "rounds": rounds, "disconnects": disconnects,
            "kills": [dataclasses.asdict(k) for k in self.kills], "exited_unbidden": self.unbidden,
            "warm_up_end_s": None if warm is None else round(warm, 1), "samples": self.samples,
            "minutes_run": round(((self.ended_at or time.monotonic()) - self.began) / 60, 2),
            "settings": dataclasses.asdict(self.settings), "machine": output.machine(),
        }

    def _warm_end(self) -> float | None:
        """The warm-up's end, seconds from the start: ``warm_up`` of the time, and the first run ended."""
        if self.first_end is None:
            return None
        return max(self.settings.warm_up * self.settings.minutes * 60, self.first_end - self.began)


def _run_toml(settings: Settings, n: int) -> str:
    """The soak's run ``n``: seeds in turn, methods random and meta-greedy in turn."""
    method = ("random", "meta-greedy")[n % 2]
    return _RUN.format(seed=settings.seed + n, size=settings.run_size, method=method) + "".join((
        JOB.format(name="lenet", model="lenet5", image_size=12, fraction=0.5, target=0.95, rounds=settings.rounds),
        JOB.format(name="cnn", model="cnn-a-noniid", image_size=8, fraction=0.5, target=0.95, rounds=settings.rounds),
    ))


def _growth(samples: Sequence[Figures], who: str, what: str, warm: float | None, pick: Any) -> float | None:
    """``what``'s growth for ``who`` from the window after the warm-up to the last window (None: too few samples)."""
    if warm is None or not samples:
        return None
    end = samples[-1]["t_s"]
    window = max(0.1 * end, 1.0)
    def values(lo: float, hi: float) -> list[float]:
        return [s[who][what] for s in samples if lo <= s["t_s"] <= hi and s.get(who, {}).get(what) is not None]
    first, last = values(warm, warm + window), values(end - window, end)
    if warm + window > end - window or not first or not last:
        return None  # the warm-up left too little time to compare two windows
    return round(pick(last) / pick(first) - 1, 4)


GOALS: dict[str, tuple[str, float]] = {
    "service_rss_growth": ("<", GROWTH), "service_fds_growth": ("<", GROWTH),
    "jvm_rss_growth": ("<", GROWTH), "jvm_fds_growth": ("<", GROWTH),
    "rounds_lost": ("==", 0), "rounds_repeated": ("==", 0),
    "disconnects_without_cause": ("==", 0), "kills_not_recorded_as_lost": ("==", 0),
    "device_exits_unbidden": ("==", 0),
}


def met(name: str, value: float | None) -> bool:
    """Whether ``value`` meets figure ``name``'s goal (a figure not measured does not)."""
    op, goal = GOALS[name]
    return value is not None and (value < goal if op == "<" else value == goal)


def _rows(figures: Figures) -> Iterator[tuple[str, ...]]:
    first = _window_values(figures)
    how = {
        "service_rss_growth": first.get("service_rss_mb", ""), "service_fds_growth": first.get("service_fds", ""),
        "jvm_rss_growth": first.get("jvm_rss_mb", ""), "jvm_fds_growth": first.get("jvm_fds", ""),
        "rounds_lost": f"{figures['rounds']['rounds']} rounds in {figures['runs']['submitted']} runs"
                       f" ({figures['runs']['completed']} completed)",
        "rounds_repeated": "a finished round recorded again",
        "disconnects_without_cause": f"{figures['disconnects']['disconnects']} disconnects: "
                                     + ", ".join(f"{k} {v}" for k, v in figures["disconnects"]["causes"].items()),
        "kills_not_recorded_as_lost": f"{figures['disconnects']['killed_devices']} devices killed in {len(figures['kills'])} kills",
        "device_exits_unbidden": "; ".join(figures["exited_unbidden"][:3]) or "a device process that ended by itself (a JVM's OutOfMemoryError)",
    }
    for name, (op, goal) in GOALS.items():
        value = figures[name]
        shown = "not measured" if value is None else f"{value:.3f}" if op == "<" else str(value)
        yield name, shown, f"{op} {goal:g}", "yes" if met(name, value) else "[red]no[/]", how[name]


def _window_values(figures: Figures) -> dict[str, str]:
    """The first and last readings, for the table's "how" column."""
    samples = figures["samples"]
    if not samples:
        return {}
    first, last = samples[0], samples[-1]
    steady = next((k for k in last if k.startswith("jvm")), None)
    out = {}
    for who, key in (("service", "service"), (steady, "jvm")):
        if who is None or who not in first or who not in last:
            continue
        out[f"{key}_rss_mb"] = f"RSS {first[who]['rss_mb']} -> {last[who]['rss_mb']} MiB (first and last sample)"
        out[f"{key}_fds"] = f"{first[who]['fds']} -> {last[who]['fds']} descriptors (first and last sample)"
    return out
