"""`mjfl bench serve`'s reading of a lab at capacity: the runs' waits from their logs, and devices idle meanwhile."""

import time

import pytest

from mjfl.bench.serve_load import idle_while_waiting, waits_in_log


def stamp(unix: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(unix)) + f",{round(unix % 1 * 1000):03d}"


def test_a_wait_runs_from_the_jobs_waiting_line_to_the_start_of_its_next_round():
    t0 = 1_790_000_000.0
    log = "\n".join([
        f"{stamp(t0)} mjfl.progress INFO: job lenet round 3 waits for devices: needs 3 devices, 2 free",
        f"{stamp(t0 + 0.5)} mjfl.progress INFO: job lenet round 3 waits for devices: needs 3 devices, 1 free",
        f"{stamp(t0 + 1)} mjfl.progress INFO: job cnn round 2: accuracy 0.5000, loss 1.0000, 3 devices (0 failed), 1.0-3.0 s",
        (f"{stamp(t0 + 9)} mjfl.progress INFO: job lenet round 3: accuracy 0.9000, loss 0.3000, 3 devices (0 failed), 20.0-24.5 s,"
        " after waiting 4.5 s"),
    ])
    assert waits_in_log(log) == [pytest.approx((t0, t0 + 4.5))]  # the round ended at +9 after 4.5 s: it began at +4.5


def test_only_a_rounds_worth_of_idle_devices_during_a_wait_counts():
    tasks = [
        {"device": "a", "sent": 0.0, "ended": 4.0}, {"device": "a", "sent": 7.0, "ended": 20.0},
        {"device": "b", "sent": 0.0, "ended": 30.0}, {"device": "c", "sent": 5.0, "ended": None},
    ]
    # Three devices, plans of two: two idle from 4 to 5 (a and c), then only a (c trains) until 7.
    assert idle_while_waiting(tasks, [(2.0, 10.0)], devices=3, plan=2) == pytest.approx(1.0)
    assert idle_while_waiting(tasks, [(2.0, 10.0)], devices=3, plan=1) == pytest.approx(5.0)  # c, then a: 2 to 7
    assert idle_while_waiting(tasks, [(20.0, 25.0)], devices=3, plan=1) == pytest.approx(5.0)  # a, after its last
    assert idle_while_waiting(tasks, [], devices=3, plan=1) == 0.0  # idle while nobody waits does not count
    assert idle_while_waiting(tasks, [(8.0, 9.0)], devices=3, plan=1) == 0.0  # all three train
