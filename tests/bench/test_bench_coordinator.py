"""`mjfl bench coordinator` (mjfl.bench.coordinator): the live dashboard's share, on a tiny fleet, and how it is counted."""

import asyncio
import time

from mjfl.bench.coordinator import _dashboard_share, _engine_run, _Meter, _Steps


def _burn(seconds: float) -> None:
    """Spend ``seconds`` of this thread's CPU time."""
    until = time.thread_time() + seconds
    while time.thread_time() < until:
        pass


async def test_a_handlers_steps_are_counted_not_what_runs_while_it_waits():
    meter, resumed = _Meter(), asyncio.Event()

    async def handler() -> str:
        _burn(0.02)
        await resumed.wait()  # meanwhile the other task burns 0.2 s: not the handler's
        _burn(0.02)
        return "done"

    async def other() -> None:
        _burn(0.2)
        resumed.set()

    async def metered() -> str:
        return await _Steps(handler(), meter)

    answer, _ = await asyncio.gather(metered(), other())
    assert answer == "done"
    assert 0.04 <= meter.cpu_s < 0.1


async def test_a_cancelled_handler_sees_the_cancellation_and_its_steps_are_counted():
    meter, started, cleaned = _Meter(), asyncio.Event(), []

    async def handler() -> None:
        started.set()
        try:
            await asyncio.Event().wait()
        finally:
            _burn(0.02)
            cleaned.append(True)

    async def metered() -> None:
        await _Steps(handler(), meter)

    task = asyncio.create_task(metered())
    await started.wait()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert task.cancelled() and cleaned == [True]
    assert meter.cpu_s >= 0.02


async def test_the_dashboards_share_is_measured_with_a_page_reading_every_push():
    plain = await _engine_run(3, 1, 0.3, 1)
    watched = await _engine_run(3, 1, 0.3, 1, dashboard=True)
    figures, how = _dashboard_share(plain, watched)
    assert [r.round for r in watched.records] == [1, 2, 3]
    # The snapshot before the run and at least one while it ran (a push is the whole snapshot: a few KiB).
    assert figures["dashboard_pushes"] >= 2 and figures["dashboard_pushed_bytes"] > 2000
    assert 0 < figures["dashboard_cpu_fraction"] < 0.5
    assert -1 < figures["dashboard_cpu_fraction_ab"] < 1
    assert "pushes" in how and "A/B" in how
