"""The profile a device is planned with: measured, announced in its hello, or a neutral default."""

import pytest

from mjfl.profiling.planning import DEFAULT_A, DEFAULT_MU, PlanningProfiles
from mjfl.profiling.profiles import DeviceProfile

LAB = [DeviceProfile("fast", a=0.002, mu=800.0), DeviceProfile("mid", a=0.004, mu=400.0), DeviceProfile("slow", a=0.03, mu=20.0)]


def test_a_measured_device_keeps_its_profile_whatever_its_hello_claims():
    assert PlanningProfiles(LAB).for_device("slow", {"a": 0.001, "mu": 1e4}) == (0.03, 20.0, "profiles")


def test_an_unmeasured_device_is_planned_with_what_its_hello_announces():
    assert PlanningProfiles(LAB).for_device("new", {"a": 0.01, "mu": 50}) == (0.01, 50.0, "hello")


@pytest.mark.parametrize(
    "hardware",
    [{}, {"a": 0.01}, {"a": -0.01, "mu": 50}, {"a": 0.01, "mu": 0}, {"a": True, "mu": 50}, {"a": "0.01", "mu": 50},
     {"a": float("nan"), "mu": 50}],
)
def test_anything_else_gets_the_lab_median_or_the_neutral_default(hardware):
    assert PlanningProfiles(LAB).for_device("new", hardware) == (0.004, 400.0, "default")
    assert PlanningProfiles().for_device("new", hardware) == (DEFAULT_A, DEFAULT_MU, "default")
