"""What a profiling session leaves to read: the profile table and each device's CDF plot."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from mjfl.profiling.observations import Observation, read_observations
from mjfl.profiling.profiles import DeviceProfile, load_profiles


def show_profiles(
    path: Path, *, console: Console, out_dir: Path | None = None, truth: Mapping[str, DeviceProfile] | None = None
) -> list[Path]:
    """Print a profile file as a table and plot each device's empirical vs fitted CDF."""
    profiles = load_profiles(path)
    truth = truth or {}
    table = Table(title=f"Device profiles ({path})")
    for column in ("device", "rounds", "a (ms/sample)", "a 95% CI", "mu", "mu 95% CI", "KS", "compute a", "comm. (s/round)", "source"):
        table.add_column(column, justify="left" if column in ("device", "source") else "right")
    if truth:
        table.add_column("emulated a", justify="right")
    for p in profiles:
        row = [
            p.device_id, str(p.n), f"{p.a * 1e3:.3f}", _interval(p.a_ci, 1e3), f"{p.mu:.1f}", _interval(p.mu_ci, 1),
            "—" if p.ks_statistic is None else f"{p.ks_statistic:.3f}",
            "—" if p.compute is None else f"{p.compute.a * 1e3:.3f}",
            "—" if p.communication is None else f"{p.communication.a + 1 / p.communication.mu:.3f}",
            p.source,
        ]
        if truth:
            row.append(f"{truth[p.device_id].a * 1e3:.3f}" if p.device_id in truth else "—")
        table.add_row(*row)
    console.print(table)
    observations_file = path.parent / "observations.csv"
    observations = read_observations(observations_file) if observations_file.exists() else []
    if not observations:
        console.print(f"no {observations_file.name} next to {path.name}: fitted CDFs are plotted without data")
    return plot_cdfs(profiles, observations, out_dir or path.parent / "plots")


def _interval(ci: tuple[float, float] | None, scale: float) -> str:
    return "—" if ci is None else f"[{ci[0] * scale:.3g}, {ci[1] * scale:.3g}]"


def plot_cdfs(profiles: Sequence[DeviceProfile], observations: Sequence[Observation], out_dir: Path) -> list[Path]:
    """One PNG per device: the empirical CDF of t/(tau D) against the fitted Formula 4."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for profile in profiles:
        x = np.sort([o.duration_s / (o.epochs * o.samples) for o in observations if o.device == profile.device_id])
        fig, ax = plt.subplots(figsize=(5, 3.5))
        hi = max(float(x.max()) if x.size else 0.0, profile.a + 5 / profile.mu)
        grid = np.linspace(0, hi * 1.05, 400)
        fitted = np.where(grid >= profile.a, 1 - np.exp(-profile.mu * (grid - profile.a)), 0.0)
        ax.plot(grid * 1e3, fitted, label=f"fitted: a={profile.a * 1e3:.2f} ms, mu={profile.mu:.0f}")
        if x.size:
            ax.step(x * 1e3, np.arange(1, x.size + 1) / x.size, where="post", label=f"observed ({x.size} rounds)")
        ax.set_xlabel("round time per sample and epoch, t / (tau D) [ms]")
        ax.set_ylabel("P[t < x]")
        ax.set_title(f"{profile.device_id} (Formula 4)")
        ax.legend(loc="lower right", fontsize=8)
        fig.tight_layout()
        path = out_dir / f"cdf-{_safe(profile.device_id)}.png"
        fig.savefig(path, dpi=100)
        plt.close(fig)
        written.append(path)
    return written


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
