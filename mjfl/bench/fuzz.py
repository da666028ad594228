"""`mjfl bench fuzz`: the protocol decoder and sessions under a seeded mutation fuzzer.

Runs ``mjfl.bench.fuzzer`` for ``inputs`` inputs and prints what came
of them: how many decoded, the rejections by protocol error code, how the
sessions ended, and ``unhandled``, anything else (an exception other than
``ProtocolError``, an undocumented code or state): the figure that must be 0.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

from mjfl.bench.fuzzer import Fuzzer
from mjfl.errors import UserError


def run_fuzz_bench(*, inputs: int, seed: int, json_path: Path | None, console: Console) -> dict[str, Any]:
    """Fuzz ``inputs`` inputs from ``seed``; print the table, write the figures to ``json_path``."""
    if inputs < 1:
        raise UserError("--inputs must be >= 1")
    fuzzer = Fuzzer(np.random.default_rng(seed))
    started = time.perf_counter()
    with console.status(f"fuzzing {inputs} inputs ...") as status:
        fuzzer.run(inputs, progress=lambda done: status.update(f"fuzzing: {done} of {inputs} inputs ..."))
    seconds = time.perf_counter() - started
    figures = {
        **fuzzer.figures.as_dict(),
        "seed": seed,
        "seconds": round(seconds, 2),
        "inputs_per_s": round(inputs / seconds, 1),
        "fuzzer": "seeded mutation fuzzer over the codec's own valid messages (mjfl.bench.fuzzer)",
    }
    table = Table(title=f"protocol fuzzing: {inputs} inputs in {seconds:.1f} s (seed {seed})")
    table.add_column("outcome")
    table.add_column("decoder", justify="right")
    table.add_column("sessions", justify="right")
    codes = sorted(set(figures["rejected"]) | set(figures["session_closed"]))
    table.add_row("accepted / still open", str(figures["decoded"]), str(figures["session_still_open"]))
    for code in codes:
        table.add_row(code if code == "peer_bye" else f"rejected: {code}", str(figures["rejected"].get(code, 0)), str(figures["session_closed"].get(code, 0)))
    table.add_row("[bold]unhandled[/bold]", str(figures["unhandled"]), "")
    console.print(table)
    for example in figures["unhandled_examples"]:
        console.print(f"unhandled: {example['what']}\n  input: {example['input']}")
    if json_path is not None:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps(figures, indent=2) + "\n")
        console.print(f"figures written to {json_path}")
    return figures
