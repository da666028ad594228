"""Enrolled devices and TLS on real loopback sockets: who the coordinator lets in, and over what.

Good devices are EmulatedDevices; a hand-written websockets client plays the
attacker who replays a hello it captured.
"""

from __future__ import annotations

import functools
import json
import os
import ssl
import stat

import numpy as np
import pytest
from loopback import fleet_of
from processes import mjfl_args, query
from waiting import PATIENCE_S
from websockets.asyncio.client import connect

from mjfl.coordinator.config import config_to_dict, parse_config
from mjfl.coordinator.engine.fleet import JobArtifacts, Task
from mjfl.coordinator.remote.certs import create_certificates
from mjfl.coordinator.remote.keys import KeyStore
from mjfl.coordinator.remote.server import CoordinatorServer, ServerSettings
from mjfl.coordinator.storage.layout import database_path
from mjfl.device.emulated.emulator.device import EmulatedDevice, devices_running
from mjfl.device.protocol import decode_text
from mjfl.device.protocol.credentials import NONCE_HEADER, hello_proof, proof_message
from mjfl.errors import ConfigError, DataError, ProtocolError, UserError
from mjfl.ids import DeviceId, JobId
from mjfl.jobs.base import LocalTraining
from mjfl.jobs.models import ModelSpec
from mjfl.testkit.echo import echo_trainer

pytestmark = pytest.mark.timeout(60)

SPEC = ModelSpec("lenet5", (1, 16, 16), 10)
WEIGHTS = {"b": np.ones(4, np.float32)}
FAST = {"heartbeat_interval": 0.2, "heartbeat_timeout": 2.0, "handshake_timeout": 2.0, "close_timeout": 1.0, "shutdown_timeout": 3.0}


def hello(device_id, *, proof=None, token=""):
    return json.dumps({
        "type": "hello", "device_id": device_id, "token": token, "runtime": "torch", "versions": [1],
        "hardware": {}, "cached": [], "max_message_bytes": None, "proof": proof,
    })


async def first_answer(server, message, *, url=None, **connect_kw):
    """Open a connection, send ``message`` as the hello: the coordinator's answer and the nonce it issued."""
    async with connect(url or server.url, compression=None, ping_interval=None, proxy=None, **connect_kw) as ws:
        nonce = ws.response.headers[NONCE_HEADER]
        await ws.send(message(nonce) if callable(message) else message)
        answer = json.loads(await ws.recv())
    return answer, nonce


@pytest.fixture
def store(tmp_path):
    return KeyStore(tmp_path / "keys" / "devices.db", create=True)


def server_with(store, **settings):
    return CoordinatorServer("127.0.0.1", 0, settings=ServerSettings(**(FAST | {"keys": store.path} | settings)))


async def test_an_enrolled_device_proves_its_secret_and_is_seen(store):
    secret = store.enroll("pixel")
    assert store.devices()[0].last_seen is None
    async with server_with(store) as server:
        answer, nonce = await first_answer(server, lambda n: hello("pixel", proof=hello_proof(secret, n, "pixel")))
        assert answer["type"] == "welcome"
        assert len(nonce) == 64
    (row,) = store.devices()
    assert row.name == "pixel" and row.last_seen is not None and row.last_seen >= row.enrolled_at


@pytest.mark.parametrize("who", ["wrong-secret", "unknown-device", "revoked", "no-proof", "other-device-proof"])
async def test_bad_credentials_get_bye_unauthorized(store, who):
    secret = store.enroll("pixel")
    other = store.enroll("galaxy")
    if who == "revoked":
        store.revoke("pixel")
    proofs = {
        "wrong-secret": lambda n: hello("pixel", proof=hello_proof(secret + "x", n, "pixel")),
        "unknown-device": lambda n: hello("stranger", proof=hello_proof(secret, n, "stranger")),
        "revoked": lambda n: hello("pixel", proof=hello_proof(secret, n, "pixel")),
        "no-proof": lambda n: hello("pixel"),
        # galaxy's valid proof does not make it pixel: the device id is under the MAC.
        "other-device-proof": lambda n: hello("pixel", proof=hello_proof(other, n, "galaxy")),
    }
    async with server_with(store) as server:
        answer, _ = await first_answer(server, proofs[who])
        assert answer == {"type": "bye", "code": "unauthorized", "reason": "credentials refused"}
        assert server.registry.connected() == {}
    assert all(d.last_seen is None for d in store.devices())


async def test_a_replayed_hello_is_refused_on_a_new_connection(store):
    secret = store.enroll("pixel")
    async with server_with(store) as server:
        captured = []

        def genuine(nonce):
            captured.append(hello("pixel", proof=hello_proof(secret, nonce, "pixel")))
            return captured[0]

        answer, first_nonce = await first_answer(server, genuine)
        assert answer["type"] == "welcome"
        replay, second_nonce = await first_answer(server, captured[0])
        assert second_nonce != first_nonce
        assert replay["code"] == "unauthorized"


async def test_the_shared_token_is_a_lab_shortcut_beside_enrollment(store):
    store.enroll("pixel")
    async with server_with(store, token="lab-token") as server:
        assert (await first_answer(server, hello("anyone", token="lab-token")))[0]["type"] == "welcome"
        assert (await first_answer(server, hello("anyone", token="lab-tokem")))[0]["code"] == "unauthorized"


def test_the_key_store_is_private_and_refuses_what_makes_no_sense(store, tmp_path):
    assert stat.S_IMODE(os.stat(store.path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(store.path.parent).st_mode) == 0o700
    secret = store.enroll("pixel")
    assert len(secret) == 43 and store.secret("pixel") == secret
    with pytest.raises(UserError, match="already enrolled; revoke it first"):
        store.enroll("pixel")
    store.revoke("pixel")
    assert store.secret("pixel") is None and store.devices()[0].revoked_at is not None
    with pytest.raises(UserError, match="not enrolled"):
        store.revoke("pixel")
    again = store.enroll("pixel")  # a revoked name may be enrolled afresh, with a new secret
    assert again != secret
    with pytest.raises(DataError, match="no such file"):
        KeyStore(tmp_path / "missing.db")


def test_the_proof_covers_label_nonce_and_device_id():
    # The known answer docs/protocol.md 5.1.1 prints (and the JVM client's test checks).
    nonce = "00" * 31 + "01"
    assert proof_message(nonce, "pixel7-01") == b"mjfl-hello-proof-v1\x00" + nonce.encode() + b"\x00pixel7-01"
    assert hello_proof("s3cret-s3cret-s3cret", nonce, "pixel7-01") == KNOWN_PROOF


KNOWN_PROOF = "d3f94a1300cb54806716dd6103e77e010a7729c3af240946905116f692946711"  # also: openssl dgst -sha256 -hmac


# -- TLS -------------------------------------------------------------------------------


def tls_settings(certs):
    return {"tls_cert": certs.server_cert, "tls_key": certs.server_key}


async def test_an_emulated_device_trains_over_wss_with_the_lab_ca(store, tmp_path):
    certs = create_certificates(tmp_path / "certs")
    for key in (certs.ca_key, certs.server_key):
        assert stat.S_IMODE(os.stat(key).st_mode) == 0o600
    secret = store.enroll("emu-tls")
    async with server_with(store, **tls_settings(certs)) as server:
        assert server.url.startswith("wss://127.0.0.1:")
        dev = EmulatedDevice(
            server.url, "emu-tls", runtime="torch", secret=secret, ca=certs.ca_cert,
            make_trainer=functools.partial(echo_trainer, delta=1.0),
        )
        async with devices_running(dev):
            await server.registry.wait_for_devices(1, PATIENCE_S)
            job = JobArtifacts(JobId("j"), SPEC, b"program", {DeviceId("emu-tls"): (np.zeros((4, 1, 16, 16), np.float32), np.arange(4) % 10)})
            fleet_of(server).prepare([job])
            result = await fleet_of(server).run_task(DeviceId("emu-tls"), Task(JobId("j"), 1, WEIGHTS, LocalTraining(epochs=1, batch_size=4, lr=0.1)))
            assert result.weights["b"].tolist() == [2.0] * 4


async def test_wss_refuses_clients_that_do_not_trust_it_and_trusts_a_pinned_certificate(store, tmp_path):
    certs = create_certificates(tmp_path / "certs", hosts=["coordinator.lab"], ips=["10.1.2.3"])
    stranger = create_certificates(tmp_path / "other")
    secret = store.enroll("pixel")
    async with server_with(store, **tls_settings(certs)) as server:
        # Another lab's CA does not vouch for this coordinator.
        wrong = ssl.create_default_context(cafile=stranger.ca_cert)
        with pytest.raises(ssl.SSLCertVerificationError):
            await first_answer(server, hello("pixel"), ssl=wrong)
        # Pinning the server's own certificate works without the CA.
        from mjfl.device.tls import client_context

        pinned = client_context(certs.server_cert)
        answer, _ = await first_answer(server, lambda n: hello("pixel", proof=hello_proof(secret, n, "pixel")), ssl=pinned)
        assert answer["type"] == "welcome"
        # Plain ws:// gets no WebSocket at all from a wss:// server.
        with pytest.raises(Exception):  # noqa: B017 - the handshake fails however the TLS layer words it
            await first_answer(server, hello("pixel"), url=server.url.replace("wss://", "ws://"))


def test_certificates_refuse_to_overwrite_and_tls_files_must_load(tmp_path):
    create_certificates(tmp_path)
    with pytest.raises(UserError, match="already exist"):
        create_certificates(tmp_path)
    with pytest.raises(ConfigError, match="'ips': 'not-an-ip' does not appear"):
        create_certificates(tmp_path / "x", ips=["not-an-ip"])
    with pytest.raises(ConfigError, match="tls_cert and tls_key go together"):
        ServerSettings(tls_cert=tmp_path / "server.pem")
    with pytest.raises(ConfigError, match="not a PEM certificate"):
        CoordinatorServer(settings=ServerSettings(tls_cert=tmp_path / "ca.key", tls_key=tmp_path / "server.key"))


# -- as lab staff run it ----------------------------------------------------------------

RUN = """
seed = 1
out_dir = "{out}"
[fleet]
size = 2
workers = 1
[scheduler]
method = "random"
[testbed]
port = 0
min_devices = 2
wait_timeout_s = 240
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


# ~50 s: two real processes that each load torch and export a program; the
# only test of the commands lab staff type (certs create, enroll, emulate --ca --key-file).
@pytest.mark.slow
@pytest.mark.timeout(400)
def test_testbed_over_wss_with_an_enrolled_emulated_device(tmp_path, processes):
    """`mjfl certs create`, `devices enroll`, `testbed run` on wss:// and `devices emulate --ca --key-file`."""
    certs, keys, out = tmp_path / "certs", tmp_path / "devices.db", tmp_path / "run"
    assert processes(mjfl_args("certs", "create", str(certs))).wait(60) == 0
    key_file = tmp_path / "lab.keys"
    enroll = processes(mjfl_args("devices", "enroll", "lab-0", "--keys", str(keys), "--save", str(key_file)), read=True)
    assert enroll.wait(60) == 0
    secret = enroll.output[0].strip()
    assert key_file.read_text() == f"lab-0 {secret}\n"
    config = tmp_path / "run.toml"
    config.write_text(RUN.format(out=out, keys=keys, certs=certs))
    coordinator = processes(mjfl_args("testbed", "run", str(config), "--emulate", "1", "--no-live"), read=True)
    url = coordinator.url()
    assert url.startswith("wss://127.0.0.1:")
    device = processes(mjfl_args(
        "devices", "emulate", "--url", url, "--count", "1", "--id-prefix", "lab", "--workers", "1",
        "--key-file", str(key_file), "--ca", str(certs / "ca.pem"),
    ))
    assert coordinator.wait(300) == 0, "".join(coordinator.output)
    device.wait(60)
    trained = {d for (d,) in query(database_path(out), "SELECT device FROM device_rounds WHERE status = 'ok'")}
    assert "lab-0" in trained and len(trained) == 2, trained
    (lab,) = KeyStore(keys).devices()
    assert lab.last_seen is not None


@pytest.mark.parametrize("proof", ["ABC", "D3F94A1300CB54806716DD6103E77E010A7729C3AF240946905116F692946711", 7, "", "g" * 64])
def test_a_malformed_proof_is_a_bad_message(proof):
    with pytest.raises(ProtocolError, match="proof") as caught:
        decode_text(hello("pixel", proof=proof))
    assert caught.value.code == "bad_message"


def test_a_hello_without_proof_field_still_decodes():
    """Older devices send no proof: the field is an optional, minor addition (protocol.md 5.1.1)."""
    old = json.loads(hello("pixel"))
    del old["proof"]
    assert decode_text(json.dumps(old)).proof is None


def test_the_config_names_keys_and_certificates_and_never_records_the_token(tmp_path):
    raw = {
        "jobs": [{"name": "j", "model": "lenet5"}],
        "fleet": {"size": 2},
        "testbed": {"keys": "lab/devices.db", "token": "lab-token", "tls_cert": "c/server.pem", "tls_key": "c/server.key"},
    }
    config = parse_config(raw, base=tmp_path)
    tb = config.testbed
    assert (tb.keys, tb.tls_cert, tb.tls_key) == (tmp_path / "lab/devices.db", tmp_path / "c/server.pem", tmp_path / "c/server.key")
    assert tb.token == "lab-token"
    recorded = json.dumps(config_to_dict(config))
    assert "lab-token" not in recorded and '"token": "(set)"' in recorded
    with pytest.raises(ConfigError, match="testbed.tls_cert and testbed.tls_key go together"):
        parse_config({"jobs": raw["jobs"], "fleet": {"size": 2}, "testbed": {"tls_cert": "c/server.pem"}}, base=tmp_path)


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"count": 2, "secret": "s" * 43}, "--secret is one device's"),
        ({"count": 2, "key_file": "lab.keys"}, "no secret for lab-1"),
        ({"count": 1, "key_file": "bad.keys"}, "line 2: expected NAME SECRET"),
        ({"count": 1, "ca": "ca.pem"}, "--ca goes with a wss:// --url"),
    ],
)
def test_emulate_refuses_credentials_that_cannot_work_before_starting_anything(tmp_path, kw, message):
    from rich.console import Console

    from mjfl.commands.emulate import emulate

    (tmp_path / "lab.keys").write_text("# enrolled\nlab-0 " + "a" * 43 + "\n")
    (tmp_path / "bad.keys").write_text("lab-0 " + "a" * 43 + "\nlab-1\n")
    kw = {k: tmp_path / v if k in ("key_file", "ca") else v for k, v in kw.items()}
    with pytest.raises(UserError, match=message):
        emulate(
            "ws://127.0.0.1:9", runtime="torch", profile=None, dropout=0.0, workers=1, id_prefix="lab", seed=0,
            token="", log_file=None, verbose=False, console=Console(file=None, quiet=True), **kw,
        )


async def test_the_lab_ca_vouches_only_for_the_names_in_the_certificate(store, tmp_path):
    """A certificate of the lab CA for another host is no good for 127.0.0.1: the name is checked."""
    from mjfl.device.tls import client_context

    certs = create_certificates(tmp_path / "certs", hosts=["coordinator.lab"], ips=["10.1.2.3"], loopback=False)
    async with server_with(store, **tls_settings(certs)) as server:
        with pytest.raises(ssl.SSLCertVerificationError, match="IP address mismatch"):
            await first_answer(server, hello("pixel"), ssl=client_context(certs.ca_cert))
