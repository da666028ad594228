"""The occupancy's verbs keep one job per device and wake whoever waits, with no polling."""

import asyncio

import pytest

from mjfl.coordinator.engine.occupancy import Occupancy
from mjfl.ids import DeviceId, JobId

D = DeviceId("d0")
A, B = ("run-a", JobId("lenet")), ("run-b", JobId("lenet"))


def test_a_device_is_taken_once_and_claimed_by_one_other_job():
    occupancy = Occupancy()
    occupancy.take(D, A, 1.0)
    assert not occupancy.free(D) and occupancy.holder(D) == A and occupancy.started_at(D) == 1.0
    with pytest.raises(AssertionError):
        occupancy.take(D, B, 2.0)
    with pytest.raises(AssertionError):
        occupancy.claim(D, A)  # its own holder cannot claim it
    occupancy.claim(D, B)
    with pytest.raises(AssertionError):
        occupancy.claim(D, ("run-c", JobId("cnn")))
    assert occupancy.held_by("run-a") == occupancy.held_by("run-b") == 1


async def test_a_claimed_device_starts_its_task_the_moment_its_holder_releases_it():
    occupancy, order = Occupancy(), []
    occupancy.take(D, A, 0.0)
    occupancy.claim(D, B)
    release = asyncio.Event()

    async def first():
        async with occupancy.hold(D, A, lambda: 0.0):
            order.append("a trains")
            await release.wait()
        order.append("a released")

    async def second():
        async with occupancy.hold(D, B, lambda: 5.0):
            order.append("b trains")
            assert occupancy.holder(D) == B and occupancy.started_at(D) == 5.0 and not occupancy.claimed(D)

    async with asyncio.TaskGroup() as group:
        group.create_task(first())
        waiting = group.create_task(second())
        await asyncio.sleep(0)  # both tasks run up to their first wait
        assert order == ["a trains"] and not waiting.done()
        release.set()
    assert order == ["a trains", "a released", "b trains"]
    assert occupancy.free(D)


async def test_a_claim_whose_wait_is_cancelled_is_given_up():
    occupancy = Occupancy()
    occupancy.take(D, A, 0.0)
    occupancy.claim(D, B)

    async def claimed():
        async with occupancy.hold(D, B, lambda: 0.0):
            raise AssertionError("never reached: cancelled while it waits")

    task = asyncio.create_task(claimed())
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not occupancy.claimed(D) and occupancy.holder(D) == A


async def test_waiters_wake_on_a_release_a_jobs_end_or_a_wake_and_time_out_otherwise():
    occupancy = Occupancy()
    assert await occupancy.changed(timeout=0.01) is False
    for change in (occupancy.wake, lambda: occupancy.ended(A)):
        waiter = asyncio.create_task(occupancy.changed())
        await asyncio.sleep(0)
        change()
        assert await waiter is True
    occupancy.planned(A, 4, 1)
    assert occupancy.short("run-a") and occupancy.wanted("run-a") == 4
    waiter = asyncio.create_task(occupancy.changed())
    await asyncio.sleep(0)
    occupancy.planned(A, 4, 4)  # no longer short: those held back for its sake may grow
    assert await waiter is True and not occupancy.short("run-a")
