"""`mjfl devices emulate`: emulated devices on this machine (or a Ray cluster) for a coordinator anywhere."""

from __future__ import annotations

import contextlib
from pathlib import Path

from rich.console import Console

from mjfl import seeds
from mjfl.coordinator.remote.keys import read_key_file
from mjfl.device.emulated.emulator.fleet import (
    EmulatedFleet,
    WorkerContext,
    default_id_prefix,
    run_emulated_fleet,
)
from mjfl.device.emulated.ray_cluster import RayOptions, connect, emulator_workers
from mjfl.errors import RunError, UserError
from mjfl.profiling.profiles import draw_fleet, load_profiles
from mjfl.seeds import Purpose


def emulate(
    url: str,
    count: int,
    *,
    runtime: str,
    profile: Path | None,
    dropout: float,
    workers: int | None,
    id_prefix: str | None,
    seed: int,
    token: str,
    secret: str | None = None,
    key_file: Path | None = None,
    ca: Path | None = None,
    log_file: Path | None,
    verbose: bool,
    console: Console,
    ray: RayOptions | None = None,
) -> None:
    """Run ``count`` emulated devices against ``url`` until Ctrl-C or the coordinator's bye.

    With ``ray``, the workers are actors of that Ray cluster (one CPU each).
    """
    if not url.startswith(("ws://", "wss://")):
        raise UserError(f"--url must look like ws://HOST:PORT, got {url!r}")
    if not 0 <= dropout < 1:
        raise UserError(f"--dropout must lie in [0, 1), got {dropout}")
    if ca is not None and not url.startswith("wss://"):
        raise UserError("--ca goes with a wss:// --url")
    prefix = id_prefix or default_id_prefix()
    secrets = _secrets(prefix, count, secret, key_file)
    profiles = None
    if profile is not None:
        real = load_profiles(profile)
        if not real:
            raise UserError(f"--profile {profile}: the file holds no profiles")
        profiles = draw_fleet(real, count, seeds.stream(seed, Purpose.FLEET, 0))  # a run's fleet of this seed (salt 0)
    with contextlib.ExitStack() as stack:
        context: WorkerContext | None = None
        if ray is not None:
            stack.enter_context(connect(ray))
            workers, context = emulator_workers(runtime, workers)
        fleet = run_emulated_fleet(
            url, count, runtime=runtime, profiles=profiles, dropout=dropout, workers=workers,  # type: ignore[arg-type]
            id_prefix=prefix, seed=seed, token=token, secrets=secrets, ca=ca, log_file=log_file, verbose=verbose,
            context=context,
        )
        workers_are = ("Ray actor", "Ray actors") if ray is not None else ("process", "processes")
        console.print(
            f"{fleet.describe(*workers_are)} ({', '.join(fleet.device_ids[:3])}{', ...' if count > 3 else ''})"
            f" -> {url}; Ctrl-C stops them"
        )
        _serve(fleet, url, console)


def _secrets(prefix: str, count: int, secret: str | None, key_file: Path | None) -> dict[str, str]:
    """The devices' secrets by device id, from ``--key-file`` or ``--secret``; every device has one, or none does."""
    secrets = read_key_file(key_file) if key_file is not None else {}
    if secret is not None:
        if count != 1:
            raise UserError("--secret is one device's: use it with --count 1, or give --key-file")
        secrets[f"{prefix}-0"] = secret
    missing = [f"{prefix}-{i}" for i in range(count) if f"{prefix}-{i}" not in secrets]
    if secrets and missing:
        raise UserError(f"--key-file {key_file}: no secret for {', '.join(missing[:3])}{' ...' if len(missing) > 3 else ''}")
    return secrets


def _serve(fleet: EmulatedFleet, url: str, console: Console) -> None:
    """Until every device has stopped, or Ctrl-C; a refusal by the coordinator is an error, as for ``mjfl-device``."""
    try:
        fleet.wait()
    except KeyboardInterrupt:
        console.print("stopping the emulated devices ...")
        fleet.stop()
        return
    if fleet.refused():
        raise RunError(
            f"{url} refused the emulated devices (their bye above says why): a coordinator with enrolled"
            " devices admits only those that prove their secret (--key-file, or --secret with --count 1)"
        )
    console.print("every device has stopped (the coordinator said bye)")
