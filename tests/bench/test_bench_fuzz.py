"""`mjfl bench fuzz` (mjfl.bench.fuzz): the fuzzer's figures, as a table and as JSON."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
from rich.console import Console

from mjfl.bench.fuzz import run_fuzz_bench
from mjfl.errors import UserError
from mjfl.testkit.fuzzer import Fuzzer


def test_the_json_holds_the_fuzzers_figures_and_the_table_shows_them(tmp_path):
    out, screen = tmp_path / "bench" / "fuzz.json", io.StringIO()
    figures = run_fuzz_bench(inputs=300, seed=5, json_path=out, console=Console(file=screen, width=200))
    assert json.loads(out.read_text()) == figures
    assert {k: figures[k] for k in ("decoded", "rejected", "unhandled")} == {
        k: v for k, v in Fuzzer(np.random.default_rng(5)).run(300).as_dict().items() if k in ("decoded", "rejected", "unhandled")
    }
    assert figures["seed"] == 5 and figures["unhandled"] == 0 and sum(figures["rejected"].values()) + figures["decoded"] == 300
    text = screen.getvalue()
    assert "protocol fuzzing: 300 inputs" in text and f"wrote {out}" in text
    assert all(f"rejected: {code}" in text for code in figures["rejected"])


def test_no_input_is_the_users_error():
    with pytest.raises(UserError, match="--inputs"):
        run_fuzz_bench(inputs=0, console=Console(quiet=True))
