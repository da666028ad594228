"""`mjfl bench fuzz`: the protocol decoder and sessions under a seeded mutation fuzzer.

Runs the fuzzer (``mjfl.testkit.fuzzer``) for ``inputs`` inputs and prints
what came of them: how many decoded, the rejections by protocol error code,
how the sessions ended, and ``unhandled``, anything else (an exception other
than ``ProtocolError``, an undocumented code or state): the figure that must
be 0.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console

from mjfl.bench import output
from mjfl.errors import UserError
from mjfl.testkit.fuzzer import Fuzzer


def run_fuzz_bench(
    *, inputs: int, seed: int = 0, json_path: Path | None = None, console: Console | None = None
) -> dict[str, Any]:
    """Fuzz ``inputs`` inputs from ``seed``; print a table, write ``json_path``."""
    if inputs < 1:
        raise UserError("--inputs must be >= 1")
    console = console or Console(stderr=True)
    fuzzer = Fuzzer(np.random.default_rng(seed))
    started = time.perf_counter()
    with output.step(console, f"fuzzing {inputs} inputs ...") as update:
        fuzzer.run(inputs, progress=lambda done: update(f"fuzzing: {done} of {inputs} inputs ..."))
    seconds = time.perf_counter() - started
    report = {
        **fuzzer.figures.as_dict(),
        "seed": seed,
        "seconds": round(seconds, 2),
        "inputs_per_s": round(inputs / seconds, 1),
        "fuzzer": "seeded mutation fuzzer over the codec's own valid messages (mjfl.testkit.fuzzer)",
    }
    rejected, closed = report["rejected"], report["session_closed"]
    rows = [("accepted / still open", str(report["decoded"]), str(report["session_still_open"]))]
    for code in sorted(set(rejected) | set(closed)):
        name = code if code == "peer_bye" else f"rejected: {code}"
        rows.append((name, str(rejected.get(code, 0)), str(closed.get(code, 0))))
    rows.append(("[bold]unhandled[/bold]", str(report["unhandled"]), ""))
    console.print(output.table(
        f"protocol fuzzing: {inputs} inputs in {seconds:.1f} s (seed {seed})", ("outcome", "decoder", "sessions"), rows,
    ))
    for example in report["unhandled_examples"]:
        console.print(f"unhandled: {example['what']}\n  input: {example['input']}")
    output.write(report, json_path, console)
    return report
