"""Where log lines go (mjfl.logs): a terminal with mjfl's lines only, third-party output in the log file."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

# A process that sets up its logs as a command does, then prints in every way a library can.
SCRIPT = textwrap.dedent(
    """
    import ctypes, logging, os, sys
    from pathlib import Path
    from mjfl import logs

    log_file, verbose = (Path(sys.argv[1]) if sys.argv[1] else None), sys.argv[2] == "verbose"
    logs.setup(log_file, verbose=verbose)
    print("before", file=sys.stderr, flush=True)
    with logs.native_output():
        os.write(2, b"native fd 2\\n")
        os.write(1, b"native fd 1\\n")
        ctypes.CDLL(None).printf(b"C stdio, buffered\\n")
        print("pybind11 through sys.stderr", file=sys.stderr)
        print("through sys.stdout")
        logging.getLogger("torchao").warning("a third-party record")
        logging.getLogger("mjfl.bench").warning("our own warning")
    sys.stdout.flush()
    print("after", file=sys.stderr, flush=True)
    """
)
NOISE = ["native fd 2", "native fd 1", "C stdio, buffered", "pybind11 through sys.stderr", "through sys.stdout"]


def run(log_file: str, verbose: str) -> list[str]:
    # Buffered, as in a user's shell: C's stdout into a pipe holds its lines until flushed.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, log_file, verbose], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, timeout=60, check=True, env=env,
    )
    return done.stdout.splitlines()


def test_inside_native_output_everything_but_our_records_goes_to_the_log_file(tmp_path):
    log = tmp_path / "logs" / "bench.log"
    assert run(str(log), "quiet") == ["before", "mjfl.bench: our own warning", "after"]
    kept = log.read_text()
    for line in [*NOISE, "a third-party record", "our own warning"]:
        assert line in kept, kept


def test_without_a_log_file_it_is_dropped_and_with_verbose_it_is_all_shown(tmp_path):
    assert run("", "quiet") == ["before", "mjfl.bench: our own warning", "after"]
    shown = run(str(tmp_path / "bench.log"), "verbose")
    assert set(NOISE) | {"torchao: a third-party record", "mjfl.bench: our own warning"} <= set(shown)
    assert not any(line in (tmp_path / "bench.log").read_text() for line in NOISE)
