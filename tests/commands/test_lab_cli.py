"""The researchers' commands as a person or a script runs them: real `mjfl` processes against the lab's real
API (its aiohttp application over a real lab.db, on a loopback port), stdout a pipe or a file."""

from __future__ import annotations

import asyncio
import contextlib
import os
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from aiohttp import web

from mjfl.coordinator.lab.api import LabApi, lab_app
from mjfl.coordinator.lab.store import LabStore

# A reason longer than any terminal, with a word longer than its column.
REASON = (
    "waiting for a place: 4 runs are running, at limits.max_running; then 8 devices free of the lab's 8"
    " (fleet.size), which the runs ahead of it hold round by round until one of them ends; see"
    " lab.log/" + "x" * 120 + " for the queue's history"
)


@dataclass(frozen=True)
class Lab:
    url: str
    store: LabStore
    admin: str


@contextlib.contextmanager
def lab(tmp_path: Path) -> Iterator[Lab]:
    """The lab's API on a loopback port, served by a thread of its own (the commands are other processes)."""
    with LabStore(tmp_path / "lab.db") as store:
        admin = store.add_researcher("admin", admin=True)
        api = LabApi(store, None, list, list, max_request_kb=256)  # type: ignore[arg-type]  # no run is submitted
        loop = asyncio.new_event_loop()
        runner = web.AppRunner(lab_app(api))
        loop.run_until_complete(runner.setup())
        loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", 0).start())
        host, port = runner.addresses[0][:2]
        thread = threading.Thread(target=loop.run_forever, daemon=True)
        thread.start()
        try:
            yield Lab(f"http://{host}:{port}", store, admin)
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join()
            loop.run_until_complete(runner.cleanup())
            loop.close()


def mjfl(lab: Lab, *args: str, token: str | None = None, stdout: int | object = subprocess.PIPE) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MJFL_LAB": lab.url, "MJFL_TOKEN": token or lab.admin}
    return subprocess.run(
        [sys.executable, "-m", "mjfl.cli", *args], env=env, stdout=stdout, stderr=subprocess.PIPE, text=True,
        stdin=subprocess.DEVNULL, timeout=120, check=False,
    )


def test_runs_prints_its_table_on_stdout_each_reason_whole(tmp_path: Path) -> None:
    with lab(tmp_path) as served:
        run, _ = served.store.submit("admin", method="meta-greedy", needs=8, config_toml="seed = 1", key=None)
        served.store.note(run.run_id, REASON)
        listed = mjfl(served, "runs")  # stdout a pipe, as `mjfl runs | less`
    assert listed.returncode == 0, listed.stderr
    assert run.run_id in listed.stdout and "why / how it ended" in listed.stdout
    assert "why / how it ended" not in listed.stderr
    # The last cell of each row of the table, read top to bottom, is the reason, wrapped but not cut.
    cells = [line.split("│")[-2].strip() for line in listed.stdout.splitlines() if line.count("│") > 1]
    assert len(cells) > 2 and "…" not in listed.stdout
    assert "".join(cells).replace(" ", "") == REASON.replace(" ", "")


def test_a_token_written_to_a_file_is_readable_by_its_owner_alone(tmp_path: Path) -> None:
    token_file = tmp_path / "alice.token"
    with lab(tmp_path) as served:
        token_file.touch(mode=0o644)
        os.chmod(token_file, 0o644)  # what the shell leaves under the usual umask, 022
        with open(token_file, "w") as stdout:  # `mjfl lab researcher add alice > alice.token`
            added = mjfl(served, "lab", "researcher", "add", "alice", stdout=stdout)
        piped = mjfl(served, "lab", "researcher", "add", "bob")  # a pipe is the reader's: left as it is
        token = token_file.read_text().strip()
        assert added.returncode == 0, added.stderr
        assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
        assert served.store.holder_of(token).name == "alice"  # type: ignore[union-attr]
        assert piped.returncode == 0 and served.store.holder_of(piped.stdout.strip()).name == "bob"  # type: ignore[union-attr]


def test_a_devices_secret_written_to_a_file_is_readable_by_its_owner_alone(tmp_path: Path) -> None:
    secret_file = tmp_path / "pixel.secret"
    secret_file.touch()
    os.chmod(secret_file, 0o664)
    with open(secret_file, "w") as stdout:  # `mjfl devices enroll pixel-7 > pixel.secret`
        enrolled = subprocess.run(
            [sys.executable, "-m", "mjfl.cli", "devices", "enroll", "pixel-7", "--keys", str(tmp_path / "keys.db")],
            stdout=stdout, stderr=subprocess.PIPE, text=True, timeout=120, check=False,
        )
    assert enrolled.returncode == 0, enrolled.stderr
    assert stat.S_IMODE(secret_file.stat().st_mode) == 0o600 and len(secret_file.read_text().strip()) >= 32


@pytest.mark.parametrize(("token", "code", "flags"), [
    ("forged", "unauthorized", "--token or MJFL_TOKEN"),
    (None, "last_admin", "mjfl lab researcher add NAME --admin"),
])
def test_a_refusal_says_what_to_type_on_this_command_line(tmp_path: Path, token: str | None, code: str, flags: str) -> None:
    with lab(tmp_path) as served:
        refused = mjfl(served, "lab", "researcher", "revoke", "admin", token=token)
    (line,) = [line for line in refused.stderr.splitlines() if line.startswith("error:")]
    assert refused.returncode == 2 and f"({code})" in line and flags in line, refused.stderr


def test_submit_sends_the_files_a_config_names_as_its_models_code_and_no_file_outside_its_folder(tmp_path: Path) -> None:
    from mjfl.commands.lab import code_files_of
    from mjfl.errors import UserError

    (tmp_path / "nets").mkdir()
    (tmp_path / "models.py").write_bytes(b"from nets import blocks\n")
    (tmp_path / "nets" / "blocks.py").write_bytes(b"\x00\x01 verbatim")
    config = tmp_path / "run.toml"
    text = ('[[jobs]]\nname = "a"\nmodel = "./models.py:Net"\nfiles = ["nets/blocks.py"]\n'
            '[[jobs]]\nname = "b"\nmodel = "models.py:Other"\n[[jobs]]\nname = "c"\nmodel = "lenet5"\n')
    assert code_files_of(config, text) == {"models.py": b"from nets import blocks\n", "nets/blocks.py": b"\x00\x01 verbatim"}
    assert code_files_of(config, '[[jobs]]\nname = "c"\nmodel = "lenet5"\n') == {}  # a zoo run sends nothing
    for outside in ("../models.py:Net", f"{tmp_path / 'models.py'}:Net"):
        with pytest.raises(UserError, match=r"jobs\[0\]\.model .*beside its config or below it"):
            code_files_of(config, f'[[jobs]]\nname = "a"\nmodel = "{outside}"\n')
    with pytest.raises(UserError, match=r"jobs\[0\]\.model 'gone.py': cannot read"):
        code_files_of(config, '[[jobs]]\nname = "a"\nmodel = "gone.py:Net"\n')
