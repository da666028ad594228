"""What a run ran on, as the report and the dashboard show it (kept by ``run/provenance.py``; docs/storage.md).

``provenance_document`` is the whole record as JSON (`mjfl report --json`,
the dashboard's provenance panel); ``provenance_summary`` the few facts a
person reads at a glance, and ``provenance_table`` those facts a row per run.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from rich.table import Table

from mjfl.coordinator.storage.records import DeviceAdmission, RunProvenance

__all__ = ["provenance_document", "provenance_summary", "provenance_table"]

SHORT = 12  # hex digits of a sha256 shown in a table


def provenance_document(run: RunProvenance | None, admissions: Sequence[DeviceAdmission]) -> dict[str, Any] | None:
    """The run's provenance as JSON; None for a run recorded before mjfl kept it.

    ``devices`` lists every admission in order (a device admitted again with
    another hello, profile, shard or app comes twice); ``shards`` maps each
    device to the shard of every job it holds now (its last admission), and
    ``programs[].shard_samples`` gives each shard's size.
    """
    if run is None:
        return None
    return {
        "run_id": run.run_id,
        "recorded_at": run.recorded_at,
        "config": {
            "file": run.config_file, "sha256": run.config_sha256, "redacted": list(run.redacted), "text": run.config_text,
        },
        "versions": dict(run.versions),
        "programs": [
            {"job": p.job, "sha256": p.sha256, "size": p.size, "file": p.file, "shard_samples": list(p.shard_samples)}
            for p in run.programs
        ],
        "devices": [
            {
                "device": a.device, "admitted_at": a.admitted_at, "shard": a.shard, "hello": a.hello,
                "profile": dict(a.profile), "app": dict(a.app),
            }
            for a in admissions
        ],
        "shards": {a.device: a.shard for a in admissions},
    }


def provenance_summary(document: Mapping[str, Any]) -> dict[str, str]:
    """``versions``, ``config``, ``devices``, ``programs`` and ``apps`` of a ``provenance_document``, a line each."""
    v = document["versions"]
    commit = f" ({str(v['mjfl_commit'])[:SHORT]})" if v.get("mjfl_commit") else ""
    versions = f"mjfl {v.get('mjfl')}{commit}, " + ", ".join(
        f"{name} {v.get(name) or 'none'}" for name in ("torch", "executorch")
    )
    config = document["config"]
    last = _last_admissions(document["devices"])
    models = Counter(_model(a) for a in last.values())
    apps = Counter(_app(a["app"]) for a in last.values())
    return {
        "versions": versions,
        "config": "not from a file" if config["sha256"] is None else f"sha256 {config['sha256'][:SHORT]}",
        "devices": f"{len(last)}: " + ", ".join(f"{model} x{n}" for model, n in models.most_common()) + _shardless(last),
        "programs": ", ".join(f"{p['job']} {p['sha256'][:SHORT]}" for p in document["programs"]),
        "apps": ", ".join(f"{sha} x{n}" for sha, n in apps.most_common()) if last else "",
    }


def provenance_table(documents: Mapping[str, Mapping[str, Any] | None]) -> Table:
    """A row per run (by run id): versions, configuration, devices by model, programs, app builds (sha256 prefixes)."""
    table = Table(title="Provenance (in full: mjfl report --json FILE)", title_justify="left")
    for column in ("run", "versions", "config", "devices", "programs", "apps"):
        table.add_column(column, overflow="fold")
    for run_id, document in documents.items():
        if document is None:
            table.add_row(run_id, "not kept (recorded before mjfl kept provenance)", "", "", "", "")
            continue
        s = provenance_summary(document)
        table.add_row(run_id, s["versions"], s["config"], s["devices"], s["programs"], s["apps"])
    return table


def _last_admissions(devices: Sequence[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    """Each device's last admission, in order of first admission."""
    last: dict[str, Mapping[str, Any]] = {}
    for admission in devices:
        last[admission["device"]] = admission
    return last


def _shardless(last: Mapping[str, Mapping[str, Any]]) -> str:
    """How many devices the run admitted hold no shard (all were taken), when some do not."""
    none = sum(a["shard"] is None for a in last.values())
    return f" ({none} without a shard)" if none else ""


def _app(app: Mapping[str, Any]) -> str:
    """An app build as a table shows it: its sha256's prefix, ``no app`` (simulated, emulated), or ``unknown``."""
    if app.get("sha256"):
        return str(app["sha256"])[:SHORT]
    return "no app" if app.get("absent") else "unknown"


def _model(admission: Mapping[str, Any]) -> str:
    """A device's model as its hello says (``emulated`` for an emulated one); ``simulated`` without a hello."""
    hello = admission.get("hello")
    if hello is None:
        return "simulated"
    hardware = hello.get("hardware") or {}
    return str(hardware.get("model") or "unknown model")
