"""A submitted run is checked at once and refused with a typed reason a script can read."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path

import pytest
from lab_service import run_config

from mjfl.coordinator.lab.admission import check, check_data, code_files, keep_code, placed
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


def test_custom_code_is_one_of_three_choices_and_needs_the_exported_program_on_emulated_devices() -> None:
    assert parse_lab_config({"fleet": {"size": 8}}).custom_code == "off"
    for value in ("admins", "researchers"):
        assert parse_lab_config({"fleet": {"size": 8}, "custom_code": value}).custom_code == value
    with pytest.raises(ConfigError) as error:
        parse_lab_config({"fleet": {"size": 8}, "custom_code": "everyone"})
    assert error.value.field == "custom_code"
    # Emulated devices that build the model themselves would run the researcher's code outside its child.
    with pytest.raises(ConfigError) as error:
        parse_lab_config({"fleet": {"size": 8, "runtime": "torch"}, "custom_code": "researchers"})
    assert error.value.field == "fleet.runtime"


OWN = run_config().replace('model = "lenet5"', 'model = "models.py:Net"')


def _sent(folder: Path, **files: str) -> Path:
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    return folder


def test_whose_own_models_a_lab_takes_is_its_policy(tmp_path: Path) -> None:
    code = _sent(tmp_path, **{"models.py": "class Net: pass\n"})
    admins = parse_lab_config({"fleet": {"size": 8}, "custom_code": "admins"})
    with pytest.raises(Refusal) as refused:
        check(OWN, admins, code=code, admin=False)
    assert (refused.value.code, refused.value.status, refused.value.field) == ("custom_code_forbidden", 403, "jobs[0].model")
    submission = check(OWN, admins, code=code, admin=True)
    assert submission.own_code and submission.config.jobs[0].model == f"{code / 'models.py'}:Net"
    researchers = parse_lab_config({"fleet": {"size": 8}, "custom_code": "researchers"})
    assert check(OWN, researchers, code=code).own_code
    assert not check(run_config(), researchers).own_code  # a zoo run is a zoo run
    # A module of the lab's machine is not sent with the run: a lab takes model files only.
    with pytest.raises(Refusal) as refused:
        check(run_config().replace('model = "lenet5"', 'model = "os:system"'), researchers)
    assert (refused.value.code, refused.value.field) == ("config_invalid", "jobs[0].model")


def test_the_files_sent_are_exactly_the_ones_the_config_names(tmp_path: Path) -> None:
    lab = parse_lab_config({"fleet": {"size": 8}, "custom_code": "researchers"})
    helper = OWN.replace('model = "models.py:Net"', 'model = "./models.py:Net"\nfiles = ["nets/blocks.py"]')
    with pytest.raises(Refusal) as refused:
        check(OWN, lab)  # nothing sent
    assert (refused.value.code, refused.value.field) == ("files_invalid", "files")
    assert "jobs[0].model names models.py" in refused.value.message
    only_model = _sent(tmp_path / "a", **{"models.py": ""})
    with pytest.raises(Refusal, match=r"jobs\[0\]\.files\[0\] names nets/blocks.py"):
        check(helper, lab, code=only_model)
    both = _sent(tmp_path / "b", **{"models.py": "", "nets/blocks.py": ""})
    assert check(helper, lab, code=both).config.jobs[0].files == (both / "nets" / "blocks.py",)
    with pytest.raises(Refusal, match="files: nets/blocks.py was sent, and no job"):
        check(OWN, lab, code=both)


@pytest.mark.parametrize(
    ("files", "needle"),
    [
        ([], "must be an object"),
        ({"../models.py": ""}, "not a relative path"),
        ({"/etc/models.py": ""}, "not a relative path"),
        ({"a//b.py": ""}, "not a relative path"),
        ({"models.py": 3}, "must be a base64 string"),
        ({"models.py": "not base64!"}, "is not base64"),
        ({f"m{i}.py": "" for i in range(40)}, "at most 32"),
    ],
)
def test_a_requests_files_are_relative_names_and_base64(files: object, needle: str) -> None:
    with pytest.raises(Refusal) as refused:
        code_files(files)
    assert (refused.value.code, refused.value.field) == ("request_invalid", "files") and needle in refused.value.message


def test_a_requests_files_decode_to_their_bytes_and_are_kept_with_their_digests(tmp_path: Path) -> None:
    data = {"models.py": b"import torch\n", "nets/blocks.py": bytes(range(256))}
    files = code_files({name: base64.b64encode(b).decode() for name, b in data.items()})
    assert files == data
    keep_code(files, tmp_path)
    assert (tmp_path / "code" / "nets" / "blocks.py").read_bytes() == data["nets/blocks.py"]
    manifest = json.loads((tmp_path / "code.json").read_text())["files"]
    assert manifest["models.py"] == {"sha256": hashlib.sha256(data["models.py"]).hexdigest(), "bytes": 13}
