"""`testbed run --phones` with enrolled devices and wss://: the launch extras carry each phone's
secret and the certificate pin, and the app (played by the JVM client, as in
test_phones_cli.py) proves the one and pins the other."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from fake_adb import FakeAdbServer, FakePhone
from processes import Process, mjfl_args, query
from repository import ROOT

from mjfl.coordinator.remote.certs import certificate_sha256, create_certificates
from mjfl.coordinator.remote.keys import KeyStore
from mjfl.coordinator.storage.layout import database_path

LAUNCHER = ROOT / "android" / "client-core" / "bin" / "mjfl-device"
PIXEL, GALAXY = "28041FDH2004TQ", "R58R41ABCDE"

CONFIG = """
seed = 5
out_dir = "{out}"
[fleet]
size = 2
workers = 1
[scheduler]
method = "random"
[testbed]
port = 0
min_devices = 2
wait_timeout_s = 180
keys = "{keys}"
tls_cert = "{certs}/server.pem"
tls_key = "{certs}/server.key"
[[jobs]]
name = "cnn"
model = "cnn-a-noniid"
image_size = 8
batch_size = 8
fraction = 1.0
max_rounds = 2
"""


# ~11 s here: a whole run in its own process with two JVM devices.
@pytest.mark.timeout(400)
@pytest.mark.skipif(shutil.which("javac") is None, reason="needs a JDK: make setup installs one")
def test_phones_get_their_secret_and_the_pin_in_the_launch_extras(tmp_path: Path, processes) -> None:
    certs = create_certificates(tmp_path / "certs")
    store = KeyStore(tmp_path / "devices.db", create=True)
    enrolled = store.enroll(PIXEL)  # the galaxy is not enrolled: attached over USB, it gets a run-only secret
    apps: dict[str, Process] = {}

    def app_started(phone: FakePhone) -> None:
        e = phone.extras
        apps[phone.serial] = processes([
            str(LAUNCHER), "--url", e["url"], "--id", e["device_id"], "--secret", e["secret"], "--pin", e["pin"],
            "--cache", str(tmp_path / "cache" / phone.serial),
        ])

    pixel = FakePhone.recorded("pixel7", PIXEL, installed=True)
    galaxy = FakePhone.recorded("galaxy-a52", GALAXY, installed=True)
    out = tmp_path / "run"
    config = tmp_path / "phones.toml"
    config.write_text(CONFIG.format(out=out, keys=store.path, certs=certs.ca_cert.parent))
    with FakeAdbServer([pixel, galaxy], on_launch=app_started) as server:
        coordinator = processes(mjfl_args("testbed", "run", str(config), "--phones", "--adb", server.address, "--no-live"), read=True)
        assert coordinator.wait(300) == 0, "".join(coordinator.output)
    pin = certificate_sha256(certs.server_cert)
    assert pixel.extras["url"].startswith("wss://127.0.0.1:") and pixel.extras["pin"] == pin == galaxy.extras["pin"]
    assert pixel.extras["secret"] == enrolled
    assert galaxy.extras["secret"] not in ("", enrolled) and store.secret(GALAXY) is None  # never stored
    trained = {d for (d,) in query(database_path(out), "SELECT device FROM device_rounds WHERE status = 'ok'")}
    assert trained == {PIXEL, GALAXY}
    assert [d.name for d in store.devices() if d.last_seen is not None] == [PIXEL]
