"""Fixtures for every test."""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from processes import Process, group_alive

# A shell without job control starts background commands with SIGINT ignored,
# and every process they start inherits that: mjfl would never see the Ctrl-C
# that some tests press. A handler (unlike "ignored") is not inherited across
# exec, so with one here the processes the tests start hear SIGINT again.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Orders the tests for ``make test``'s workers (``-n 3 --dist loadfile``: a module's
    tests run on one worker, so a module-scoped fixture is made once and the README's commands
    follow one another). Modules with a fixture made once for them go first (a bench run, the
    JVM build, the README's scratch clone), then those with tests marked slow, then the rest:
    a run ends on short tests, never with one worker alone on a long one."""

    def cost(item: pytest.Item) -> int:
        return 0 if _shares_a_fixture(item) else 1 if item.get_closest_marker("slow") else 2

    first = {}
    for item in items:
        module = item.nodeid.split("::")[0]
        first[module] = min(first.get(module, 2), cost(item))
    items.sort(key=lambda item: first[item.nodeid.split("::")[0]])


def _shares_a_fixture(item: pytest.Item) -> bool:
    """Whether ``item`` uses one of the suite's fixtures that is made once for its module
    (a plugin's, such as tmp_path_factory, have no baseid)."""
    fixtures = getattr(item, "_fixtureinfo", None)
    return fixtures is not None and any(
        definitions[-1].baseid and definitions[-1].scope != "function"
        for definitions in fixtures.name2fixturedefs.values()
    )


@pytest.fixture(autouse=True)
def own_key_store(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """The user's enrolled devices (~/.config/mjfl/devices.db) never decide what a test lets in."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path_factory.mktemp("config")))


@pytest.fixture
def processes() -> Iterator[Callable[..., Process]]:
    """``start(args, read=False)``: a process that is killed, with its group, when the test ends."""
    started: list[Process] = []

    def start(args: list[str], *, read: bool = False) -> Process:
        process = Process(args, read=read)
        started.append(process)
        return process

    yield start
    for process in started:
        if process.proc.poll() is None or group_alive(process.pid):
            process.kill()


@pytest.fixture(scope="module")
def cluster() -> Iterator[object]:
    """One local Ray (2 CPUs, 1 GPU) for the test module that asks for it (its start-up takes seconds): its RayOptions.

    The GPU is a declared resource only (this machine has none): what asks
    for one is scheduled on it and trains on the CPU.
    """
    import ray  # in the dev extras: make test runs the tests that need it, never skips them

    from mjfl.device.emulated.ray_cluster import RayOptions

    assert not ray.is_initialized()
    # A Ray of the suite's own ("local"): Ray's default joins the last cluster started on this machine,
    # which is another suite's when two run side by side, and ends under this one.
    ray.init(address="local", num_cpus=2, num_gpus=1, include_dashboard=False, log_to_driver=False,
             logging_level=logging.ERROR)
    yield RayOptions()
    ray.shutdown()


@pytest.fixture
def needs_chromium() -> None:
    """Debian's Chromium and Playwright, for the tests that drive a real browser.

    Missing, they fail the test in CI (CI=true: `make test` installs both) and
    skip it elsewhere, naming what is missing either way.
    """
    from mjfl.bench.dashboard import browser_missing

    missing = browser_missing()
    if missing is None:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"this test drives a real browser: {missing}", pytrace=False)
    pytest.skip(f"no browser: {missing}")


BROWSER_WAIT_MS = 180_000  # the default bound of every wait in a browser: a run's first round on two loaded cores


@pytest.fixture
def browser(tmp_path: Path, needs_chromium: None) -> Iterator[Any]:
    """A headless Chromium (Playwright's persistent context) with a fresh profile; its waits are bounded by
    ``BROWSER_WAIT_MS``."""
    from playwright.sync_api import sync_playwright

    from mjfl.bench.dashboard import launch_options

    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(**launch_options(tmp_path / "profile"))
        context.set_default_timeout(BROWSER_WAIT_MS)
        try:
            yield context
        finally:
            context.close()
