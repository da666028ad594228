"""The real JVM client (`mjfl-device`) proves an enrolled secret to the real coordinator over wss://."""

import asyncio
import shutil
import sys

import pytest
from repository import ROOT

from mjfl.coordinator.remote.certs import certificate_sha256, create_certificates
from mjfl.coordinator.remote.keys import KeyStore
from mjfl.coordinator.remote.server import CoordinatorServer, ServerSettings

LAUNCHER = ROOT / "android" / "client-core" / "bin" / "mjfl-device"

pytestmark = [
    pytest.mark.timeout(180),
    pytest.mark.skipif(shutil.which("javac") is None, reason="needs a JDK: make setup installs one"),
]


def jvm(url, cache, *args):
    return [str(LAUNCHER), "--url", url, "--id", "jvm-phone", "--cache", str(cache), *args]


async def test_the_jvm_client_proves_its_secret_over_wss_and_a_wrong_one_is_refused(tmp_path, processes):
    # Compile first (build-jvm.sh --no-test is a no-op when built): the JVM's start is then quick.
    build = await asyncio.create_subprocess_exec(str(ROOT / "android" / "build-jvm.sh"), "--no-test", stdout=sys.stderr)
    assert await build.wait() == 0
    certs = create_certificates(tmp_path / "certs")
    store = KeyStore(tmp_path / "devices.db", create=True)
    secret = store.enroll("jvm-phone")
    settings = ServerSettings(keys=store.path, tls_cert=certs.server_cert, tls_key=certs.server_key, shutdown_timeout=5.0)
    async with CoordinatorServer("127.0.0.1", 0, settings=settings) as server:
        wrong = processes(jvm(server.url, tmp_path / "c1", "--secret", "x" * 43, "--ca", str(certs.ca_cert)), read=True)
        # 3: refused by the coordinator (bye unauthorized), and it does not retry.
        assert await asyncio.to_thread(wrong.wait, 120) == 3, "".join(wrong.output)
        assert server.registry.connected() == {}
        # A pin of another certificate: the JVM refuses the coordinator in the TLS handshake.
        stranger = create_certificates(tmp_path / "other")
        impostor = processes(jvm(server.url, tmp_path / "c3", "--secret", secret, "--pin", certificate_sha256(stranger.server_cert)), read=True)
        await asyncio.to_thread(impostor.line_with, "not the pinned one", 60)
        impostor.kill()
        assert server.registry.connected() == {}
        for trust in (["--ca", str(certs.ca_cert)], ["--pin", certificate_sha256(certs.server_cert)]):
            good = processes(jvm(server.url, tmp_path / "c2", "--secret", secret, *trust), read=True)
            await server.registry.wait_for_devices(1, 120)
            assert list(server.registry.connected()) == ["jvm-phone"]
            good.kill()
            await server.registry.wait_until(lambda connected: not connected, 60)
    assert store.devices()[0].last_seen is not None
