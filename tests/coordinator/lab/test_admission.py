"""A submitted run is checked at once and refused with a typed reason a script can read."""

from __future__ import annotations

from pathlib import Path

import pytest
from lab_service import run_config

from mjfl.coordinator.lab.admission import check, check_data, placed
from mjfl.coordinator.lab.config import parse_lab_config
from mjfl.errors import ConfigError, Refusal

LAB = parse_lab_config({"fleet": {"size": 8}})


@pytest.mark.parametrize(
    ("text", "code", "field"),
    [
        ("jobs = [", "config_invalid", None),
        ("seed = 1", "config_invalid", "jobs"),
        (run_config().replace('model = "lenet5"', 'model = "gpt"'), "config_invalid", "jobs[0].model"),
        (run_config().replace('method = "random"', 'method = "best"'), "config_invalid", "scheduler.method"),
        (run_config(size=9), "fleet_too_small", "fleet.size"),
        (run_config() + "[testbed]\nmin_devices = 12\n", "fleet_too_small", "testbed.min_devices"),
        (run_config().replace("size = 4", "size = 4\nstand_ins = 0.5"), "unsupported", "fleet.stand_ins"),
    ],
)
def test_a_run_the_lab_cannot_take_is_refused_with_its_reason(text: str, code: str, field: str | None) -> None:
    with pytest.raises(Refusal) as refused:
        check(text, LAB)
    assert (refused.value.code, refused.value.field, refused.value.status) == (code, field, 400)
    assert refused.value.document()["error"]["code"] == code


def test_a_run_the_lab_takes_needs_its_fleet_and_writes_to_the_labs_folder(tmp_path: Path) -> None:
    submission = check('out_dir = "elsewhere"\ndatabase = "other.db"\n' + run_config(size=6), LAB)
    assert submission.needs == 6 and submission.method == "random"
    config = placed(submission, tmp_path / "runs" / "0001-alice")
    assert config.out_dir == tmp_path / "runs" / "0001-alice" and config.database_path.parent == config.out_dir


def test_a_labs_own_file_names_its_bad_fields() -> None:
    with pytest.raises(ConfigError, match="fleet.size"):
        parse_lab_config({"fleet": {"profiles": "x.json"}})
    with pytest.raises(ConfigError) as bad:
        parse_lab_config({"fleet": {"size": 8}, "server": {"tls_cert": "a.pem"}})
    assert bad.value.field == "server.tls_cert"
    with pytest.raises(ConfigError) as bad:
        parse_lab_config({"fleet": {"size": 8}, "limits": {"max_running": 0}})
    assert bad.value.field == "limits.max_running"


def test_a_run_whose_data_cannot_be_read_here_is_refused_naming_the_job(tmp_path: Path) -> None:
    missing = run_config().replace('name = "cnn"', f'name = "cnn"\ndataset = "mnist"\ndata_dir = "{tmp_path}"')
    submission = check(missing, LAB)  # the config itself is fine
    with pytest.raises(Refusal) as refused:
        check_data(submission.config)
    assert (refused.value.code, refused.value.field) == ("data_missing", "jobs[1].dataset")
    assert "cnn" in refused.value.message and str(tmp_path) in refused.value.message
    check_data(check(run_config(), LAB).config)  # the bundled digits are always there


def test_a_model_of_the_researchers_own_is_refused_while_the_lab_runs_no_submitted_code(tmp_path: Path) -> None:
    # The file need not exist: the refusal comes before the config is parsed or any file is read.
    text = run_config().replace('model = "lenet5"', 'model = "models.py:Net"')
    with pytest.raises(Refusal) as refused:
        check(text, LAB)
    assert (refused.value.code, refused.value.field, refused.value.status) == ("custom_code_off", "jobs[0].model", 400)
    assert "models.py:Net" in refused.value.message and "mjfl models check" in refused.value.message
    module = run_config().replace('model = "lenet5"', 'model = "os:system"')  # an importable factory is code too
    with pytest.raises(Refusal, match="custom_code"):
        check(module, LAB)


@pytest.mark.parametrize("value", ["admins", "researchers", "everyone"])
def test_custom_code_other_than_off_is_refused_with_the_reason(value: str) -> None:
    with pytest.raises(ConfigError) as error:
        parse_lab_config({"fleet": {"size": 8}, "custom_code": value})
    assert error.value.field == "custom_code"
    assert ("not available" in str(error.value)) == (value != "everyone")
