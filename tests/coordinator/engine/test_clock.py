import asyncio
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from mjfl.coordinator.engine.clock import RealClock, VirtualClock, run_virtual


@pytest.mark.timeout(60)
def test_virtual_sleep_costs_no_wall_time_and_keeps_order():
    clock = VirtualClock()
    seen = []

    async def sleeper(name, seconds):
        await clock.sleep(seconds)
        seen.append((name, clock.now()))

    async def main():
        async with asyncio.TaskGroup() as group:
            # A hundred days of virtual time: a clock that slept the wall's would hang, and the test's timeout fail it.
            for name, seconds in [("c", 100 * 86400.0), ("a", 10.0), ("b", 600.5)]:
                group.create_task(sleeper(name, seconds))

    run_virtual(main())
    assert seen == [("a", 10.0), ("b", 600.5), ("c", 100 * 86400.0)]


def test_blocking_work_freezes_virtual_time():
    clock = VirtualClock()
    pool = ThreadPoolExecutor(2)
    seen = []

    async def device(name, work, seconds):
        await clock.run_blocking(pool, time.sleep, work)
        seen.append((name, "trained", clock.now()))
        await clock.sleep(seconds)
        seen.append((name, "done", clock.now()))

    async def main():
        async with asyncio.TaskGroup() as group:
            group.create_task(device("slow-to-train", 0.2, 5.0))
            group.create_task(device("quick", 0.0, 50.0))

    run_virtual(main())
    # Whatever the real training time, virtual time only moves by the sleeps.
    assert sorted(seen) == [
        ("quick", "done", 50.0), ("quick", "trained", 0.0),
        ("slow-to-train", "done", 5.0), ("slow-to-train", "trained", 0.0),
    ]
    assert [s for s in seen if s[1] == "done"] == [("slow-to-train", "done", 5.0), ("quick", "done", 50.0)]


def test_virtual_timeouts_fire_in_virtual_time():
    async def main():
        try:
            await asyncio.wait_for(asyncio.sleep(10_000), timeout=30)
        except TimeoutError:
            return asyncio.get_running_loop().time()

    assert run_virtual(main()) == 30


def test_real_clock_measures_wall_time():
    clock = RealClock()

    async def main():
        start = clock.now()
        await clock.sleep(0.05)
        value = await clock.run_blocking(None, sum, [1, 2, 3])
        return clock.now() - start, value

    elapsed, value = asyncio.run(main())
    # A lower bound no load can break; asyncio runs a timer once it is due within the clock's resolution.
    assert elapsed >= 0.05 - time.get_clock_info("monotonic").resolution and value == 6


def test_virtual_time_goes_on_past_the_years_in_order():
    # Past 2**24 s a nanosecond (asyncio's clock resolution) is below the spacing of floats: timers must still run.
    async def main():
        clock, woke = VirtualClock(), []

        async def sleeper(seconds, name):
            await clock.sleep(seconds)
            woke.append((name, clock.now()))

        year = 365 * 86_400.0
        async with asyncio.TaskGroup() as group:
            group.create_task(sleeper(10 * year, "decade"))
            group.create_task(sleeper(year, "year"))
            group.create_task(sleeper(year + 1e-3, "year and a millisecond"))
        return woke

    woke = run_virtual(main())
    assert [name for name, _ in woke] == ["year", "year and a millisecond", "decade"]
    assert woke[-1][1] == pytest.approx(10 * 365 * 86_400.0)
