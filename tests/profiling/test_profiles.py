"""Tests of device profiles, the profile file format and draw_fleet."""

from __future__ import annotations

import copy
import json
import math
import pickle
import re
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from repository import DOCS

from mjfl.errors import DataError, ProfileError, UserError
from mjfl.ids import DeviceId
from mjfl.profiling.fit import fit_components, fit_round_times, sample_round_times
from mjfl.profiling.profiles import (
    FORMAT,
    DeviceProfile,
    TimingModel,
    draw_fleet,
    load_profiles,
    profiles_from_document,
    profiles_to_document,
    save_profiles,
)

CREATED = "2025-03-01T12:00:00+00:00"


def _profiled(device_id: str, a: float, mu: float, seed: int) -> DeviceProfile:
    rng = np.random.default_rng(seed)
    samples = rng.integers(100, 500, size=40)
    compute = sample_round_times(a, mu, 5, samples, rng)
    comm = 0.8 + rng.exponential(0.3, size=40)
    fits = fit_components(compute, comm, 5, samples)
    return DeviceProfile.from_fit(
        DeviceId(device_id), fits, hardware={"model": "Pixel 7", "ram_gb": 8, "rooted": False}
    )


def _fleet_of_real_phones(count: int = 20) -> list[DeviceProfile]:
    return [
        _profiled(f"phone{i:02d}", 0.001 * (1 + i % 5), 200.0 + 40 * i, i) for i in range(count)
    ]


def _document() -> dict[str, Any]:
    return profiles_to_document(_fleet_of_real_phones(3), created=CREATED)


# --- records ---------------------------------------------------------------------


def test_from_fit_carries_fit_and_projects_negative_a() -> None:
    profile = _profiled("p", 0.002, 400.0, 1)
    assert profile.source == "profiled" and profile.n == 40
    assert profile.compute is not None and profile.compute.unit == "s/(epoch*sample)"
    assert profile.communication is not None and profile.communication.unit == "s/round"
    # floor tiny next to the fluctuation: the unbiased a_hat = min - scale/n < 0
    fit = fit_round_times([0.001, 5.0, 9.0], 1, 1)
    assert fit.a < 0
    assert DeviceProfile.from_fit(DeviceId("q"), fit).a == 0.0


def test_profile_validation_names_the_field() -> None:
    with pytest.raises(ProfileError, match="'mu'") as info:
        DeviceProfile(DeviceId("p"), a=0.001, mu=0.0)
    assert info.value.field == "mu" and isinstance(info.value, UserError)
    with pytest.raises(ProfileError, match="'a_ci'"):
        DeviceProfile(DeviceId("p"), a=0.001, mu=1.0, a_ci=(2.0, 1.0))
    with pytest.raises(ProfileError, match="'source'"):
        DeviceProfile(DeviceId("p"), a=0.001, mu=1.0, source="guessed")  # type: ignore[arg-type]
    with pytest.raises(ProfileError, match="hardware.soc"):
        DeviceProfile(DeviceId("p"), a=0.001, mu=1.0, hardware={"soc": ["a", "b"]})  # type: ignore[dict-item]
    for power in (0.0, -1.0, math.inf, True, "3"):
        with pytest.raises(ProfileError, match="'power_w'"):
            DeviceProfile(DeviceId("p"), a=0.001, mu=1.0, power_w=power)  # type: ignore[arg-type]


def test_profile_is_frozen_copies_hardware_and_pickles() -> None:
    hardware: dict[str, Any] = {"model": "Galaxy S21"}
    profile = DeviceProfile(DeviceId("p"), a=0.001, mu=1.0, hardware=hardware)
    hardware["model"] = "changed"
    assert profile.hardware["model"] == "Galaxy S21"
    with pytest.raises(AttributeError):
        profile.a = 2.0  # type: ignore[misc]
    assert pickle.loads(pickle.dumps(profile)) == profile
    assert hash(profile) == hash(DeviceProfile(DeviceId("p"), a=0.001, mu=1.0))


def test_refined_replaces_parameters_keeps_the_rest() -> None:
    profile = _profiled("p", 0.002, 400.0, 2)
    fit = fit_round_times([1.0, 1.5, 2.5, 1.2], 1, 100)
    refined = profile.refined(fit)
    assert (refined.a, refined.mu, refined.n, refined.source) == (fit.a, fit.mu, 4, "refined")
    assert refined.hardware == profile.hardware and refined.compute == profile.compute


# --- file format -------------------------------------------------------------------


def test_round_trip_through_a_file(tmp_path: Path) -> None:
    profiles = [
        *_fleet_of_real_phones(4),
        DeviceProfile(DeviceId("made-up"), a=0.003, mu=250),
        DeviceProfile(DeviceId("measured-power"), a=0.003, mu=250, power_w=2.25),
        DeviceProfile(
            DeviceId("comm-only"),
            a=0.0,
            mu=1.0,
            communication=TimingModel(a=0.5, mu=3.0, unit="s/MB"),
            source="refined",
        ),
    ]
    path = tmp_path / "profiles.json"
    save_profiles(path, profiles, created=CREATED)
    assert load_profiles(path) == profiles
    raw = json.loads(path.read_text())
    assert raw["format"] == FORMAT == "mjfl-profiles/1" and raw["created"] == CREATED
    assert [d["device_id"] for d in raw["devices"]] == [p.device_id for p in profiles]
    assert [d.get("power_w") for d in raw["devices"]] == [p.power_w for p in profiles]  # written only when known
    assert list(tmp_path.iterdir()) == [path]  # no temporary file left behind


def test_minimal_device_entry_uses_documented_defaults() -> None:
    doc = {
        "format": FORMAT,
        "created": CREATED,
        "devices": [{"device_id": "x", "a": 0.001, "mu": 9}],
    }
    (profile,) = profiles_from_document(doc)
    assert profile == DeviceProfile(DeviceId("x"), a=0.001, mu=9, source="profiled")
    assert profile.power_w is None  # the device model's default power


def _set(path: str, value: Any) -> Any:
    """A mutation of the valid document: set (or delete, for ...) the value at a dotted path."""

    def mutate(doc: dict[str, Any]) -> dict[str, Any]:
        *parents, last = path.replace("[", ".").replace("]", "").split(".")
        node: Any = doc
        for key in parents:
            node = node[int(key)] if key.isdigit() else node[key]
        if value is ...:
            del node[last]
        else:
            node[int(last) if last.isdigit() else last] = value
        return doc

    return mutate


@pytest.mark.parametrize(
    ("mutation", "field"),
    [
        (_set("format", "mjfl-profiles/2"), "'format'"),
        (_set("created", "yesterday"), "'created'"),
        (_set("created", ...), "'created'"),
        (_set("devices", {}), "'devices'"),
        (_set("extra", 1), "'extra'"),
        (_set("devices[1].mu", -3.0), "'devices[1].mu'"),
        (_set("devices[1].mu", "fast"), "'devices[1].mu'"),
        (_set("devices[0].a", ...), "'devices[0].a'"),
        (_set("devices[2].a", True), "'devices[2].a'"),
        (_set("devices[0].mu_typo", 1.0), "'devices[0].mu_typo'"),
        (_set("devices[0].a_ci", [1.0]), "'devices[0].a_ci'"),
        (_set("devices[0].mu_ci", [5.0, 1.0]), "'devices[0].mu_ci'"),
        (_set("devices[0].ks_statistic", 1.5), "'devices[0].ks_statistic'"),
        (_set("devices[0].n", -1), "'devices[0].n'"),
        (_set("devices[0].n", 2.5), "'devices[0].n'"),
        (_set("devices[0].unit", "s"), "'devices[0].unit'"),
        (_set("devices[0].source", "guess"), "'devices[0].source'"),
        (_set("devices[0].device_id", ""), "'devices[0].device_id'"),
        (_set("devices[1].device_id", "phone00"), "'devices[1].device_id'"),
        (_set("devices[0].compute.unit", ...), "'devices[0].compute.unit'"),
        (_set("devices[2].communication.mu", 0), "'devices[2].communication.mu'"),
        (_set("devices[0].communication", [1, 2]), "'devices[0].communication'"),
        (_set("devices[0].hardware", "pixel"), "'devices[0].hardware'"),
        (_set("devices[0].hardware.soc", {"cores": 8}), "'devices[0].hardware.soc'"),
        (_set("devices[1]", "phone"), "'devices[1]'"),
    ],
)
def test_malformed_file_error_names_file_and_field(
    tmp_path: Path, mutation: Any, field: str
) -> None:
    path = tmp_path / "lab.json"
    path.write_text(json.dumps(mutation(copy.deepcopy(_document()))))
    with pytest.raises(DataError) as info:
        load_profiles(path)
    message = str(info.value)
    assert str(path) in message and f"field {field}" in message


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("{not json", "not valid JSON (line 1"),
        ('{"format": NaN}', "NaN is not allowed"),
        ("[1, 2]", "must hold a JSON object"),
    ],
)
def test_unreadable_files(tmp_path: Path, text: str, problem: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(DataError, match=re.escape(problem)):
        load_profiles(path)
    with pytest.raises(DataError, match="not found"):
        load_profiles(tmp_path / "missing.json")


def test_save_rejects_bad_created_and_duplicate_ids(tmp_path: Path) -> None:
    phones = _fleet_of_real_phones(2)
    with pytest.raises(ProfileError, match="created"):
        save_profiles(tmp_path / "p.json", phones, created="now")
    with pytest.raises(ProfileError, match="unique"):
        save_profiles(tmp_path / "p.json", [phones[0], phones[0]], created=CREATED)
    assert not list(tmp_path.iterdir())


# --- draw_fleet ------------------------------------------------------------------


def test_draw_fleet_is_deterministic_balanced_and_heterogeneous() -> None:
    real = _fleet_of_real_phones(20)
    fleet = draw_fleet(real, 100, np.random.default_rng(42))
    assert fleet == draw_fleet(real, 100, np.random.default_rng(42))
    assert fleet != draw_fleet(real, 100, np.random.default_rng(43))
    ids = [p.device_id for p in fleet]
    assert len(ids) == len(set(ids)) == 100
    assert set(ids) == {f"phone{i:02d}#{k}" for i in range(20) for k in range(5)}
    by_base: dict[str, DeviceProfile] = {p.device_id: p for p in real}
    for drawn in fleet:
        base = by_base[drawn.device_id.split("#")[0]]
        assert drawn.source == "drawn" and drawn.hardware == base.hardware
        assert base.a_ci is not None and base.mu_ci is not None
        assert max(base.a_ci[0], 0.0) <= drawn.a <= base.a_ci[1]
        assert base.mu_ci[0] <= drawn.mu <= base.mu_ci[1]
        if drawn.device_id.endswith("#0"):
            assert (drawn.a, drawn.mu) == (base.a, base.mu)
    copies_of_one = [p for p in fleet if p.device_id.startswith("phone07#")]
    assert len({p.mu for p in copies_of_one}) == 5 and len({p.a for p in copies_of_one}) == 5
    # the real fleet's spread survives: fastest and slowest real phones stay apart
    spread_real = np.ptp([p.mu for p in real])
    assert np.ptp([p.mu for p in fleet]) >= 0.8 * spread_real


def test_draw_fleet_moves_parts_with_the_whole() -> None:
    (base,) = _fleet_of_real_phones(1)
    for drawn in draw_fleet([base], 6, np.random.default_rng(0))[1:]:
        assert drawn.compute is not None and base.compute is not None
        assert drawn.compute.mu_ci is not None and base.compute.mu_ci is not None
        assert base.mu_ci is not None
        # the same quantile u_mu positions the combined and the compute rate
        u_whole = (drawn.mu - base.mu_ci[0]) / (base.mu_ci[1] - base.mu_ci[0])
        u_part = (drawn.compute.mu - base.compute.mu_ci[0]) / (
            base.compute.mu_ci[1] - base.compute.mu_ci[0]
        )
        assert u_whole == pytest.approx(u_part)


def test_draw_fleet_without_intervals_copies_and_errors() -> None:
    synthetic = [DeviceProfile(DeviceId(f"s{i}"), a=0.001, mu=100.0 + i) for i in range(3)]
    fleet = draw_fleet(synthetic, 7, np.random.default_rng(1))
    assert {(p.a, p.mu) for p in fleet} == {(p.a, p.mu) for p in synthetic}
    with pytest.raises(ProfileError, match="'n'"):
        draw_fleet(synthetic, 0, np.random.default_rng(1))
    with pytest.raises(ProfileError, match="at least one"):
        draw_fleet([], 3, np.random.default_rng(1))
    with pytest.raises(ProfileError, match="unique"):
        draw_fleet([synthetic[0], synthetic[0]], 3, np.random.default_rng(1))


@settings(max_examples=40, deadline=None)
@given(count=st.integers(1, 25), n=st.integers(1, 120), seed=st.integers(0, 2**32 - 1))
def test_draw_fleet_counts_and_ids(count: int, n: int, seed: int) -> None:
    real = [
        DeviceProfile(DeviceId(f"p#{i}"), a=0.001, mu=1.0 + i, mu_ci=(0.5, 2.0 + i))
        for i in range(count)
    ]
    fleet = draw_fleet(real, n, np.random.default_rng(seed))
    ids = [p.device_id for p in fleet]
    assert len(ids) == len(set(ids)) == n
    per_base = Counter(i.rsplit("#", 1)[0] for i in ids)
    assert set(per_base.values()) <= {n // count, n // count + 1}
    assert len(per_base) == min(n, count)


def test_example_in_docs_parses() -> None:
    docs = DOCS / "profiles.md"
    example = re.search(r"```json\n(.*?)```", docs.read_text(), re.DOTALL)
    assert example is not None
    profiles = profiles_from_document(json.loads(example.group(1)), origin=str(docs))
    assert [p.device_id for p in profiles] == ["pixel7-a", "slow-synthetic"]
    assert profiles[0].communication is not None and profiles[0].communication.unit == "s/MB"
    assert profiles[0].hardware["soc"] == "Tensor G2"
