"""The researchers' API refuses what it must with a reason a script reads, and survives 10,000 fuzzed requests.

The slow tests run against a real `mjfl serve` (its own process, emulated devices); requests go over one
keep-alive HTTP connection as any client's would. The fast ones serve the API's real application over a
real lab.db on a loopback port.
"""

from __future__ import annotations

import contextlib
import http.client
import io
import json
import random
import sqlite3
import tarfile
import urllib.parse
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient, TestServer
from lab_service import Lab, run_config
from storage_records import job_infos, round_record, run_info

from mjfl.coordinator.lab.api import LabApi, lab_app
from mjfl.coordinator.lab.store import LabStore
from mjfl.coordinator.storage.database import Storage

CODES = {
    "unauthorized", "forbidden", "not_found", "method_not_allowed", "request_invalid", "request_too_large",
    "config_invalid", "fleet_too_small", "unsupported", "data_missing", "last_admin", "too_many_queued", "draining",
    "custom_code_off", "files_invalid",
}


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_refusals_name_their_reason_and_queue_nothing(tmp_path: Path, processes) -> None:
    lab = Lab.start(processes, tmp_path, devices=4, max_running=1, max_queued=2)
    alice = lab.researcher("alice")
    refused = {
        "config_invalid": ("jobs = [", None),
        "fleet_too_small": (run_config(size=5), "fleet.size"),
        "custom_code_off": (run_config().replace('model = "lenet5"', 'model = "models.py:Net"'), "jobs[0].model"),
    }
    for code, (text, field) in refused.items():
        status, answer = lab.call("POST", "/api/lab/runs", {"config": text}, token=alice)
        assert (status, answer["error"]["code"], answer["error"].get("field")) == (400, code, field), answer
    status, answer = lab.call("POST", "/api/lab/runs", {"config": run_config().replace("lenet5", "gpt")}, token=alice)
    assert (status, answer["error"]["field"]) == (400, "jobs[0].model") and "gpt" in answer["error"]["message"]
    status, answer = lab.call("POST", "/api/lab/runs", {"config": run_config(), "files": {"../models.py": ""}}, token=alice)
    assert (status, answer["error"]["code"], answer["error"]["field"]) == (400, "request_invalid", "files"), answer
    assert lab.call("GET", "/api/lab/runs")[1]["runs"] == []  # nothing queued

    for token, code in ((None, "unauthorized"), ("forged", "unauthorized")):
        status, answer = lab.call("GET", "/api/lab/runs", token=token or "")  # "": no Authorization at all
        assert (status, answer["error"]["code"]) == (401, code)
    status, answer = lab.call("POST", "/api/lab/researchers", {"name": "mallory"}, token=alice)
    assert (status, answer["error"]["code"]) == (403, "forbidden")
    status, _ = lab.call("GET", "/api/lab/runs", token="", headers={"Authorization": f"bearer {alice}"})
    assert status == 200  # the scheme's name in any case
    # The lab's only admin can be neither revoked nor made a researcher: no one could mend that.
    for method, path, body in (("DELETE", "/api/lab/researchers/admin", None),
                               ("POST", "/api/lab/researchers", {"name": "admin", "admin": False})):
        status, answer = lab.call(method, path, body)
        assert (status, answer["error"]["code"], answer["error"]["field"]) == (409, "last_admin", "name"), answer
    assert lab.call("GET", "/api/lab/researchers")[0] == 200  # the admin's token still works
    big = {"config": "#" * (300 * 1024)}
    status, answer = lab.call("POST", "/api/lab/runs", big, token=alice)
    assert (status, answer["error"]["code"]) == (413, "request_too_large")
    status, answer = lab.call("GET", "/api/lab/nothing-here")
    assert (status, answer["error"]["code"]) == (404, "not_found")

    long = run_config(target=0.999, rounds=500)
    first = lab.submit(long, alice, key="k")
    assert lab.submit(long, alice, key="k")["id"] == first["id"]  # a retried submit: the same run
    lab.until(lambda: lab.run(first["id"])["state"] == "running", 120)
    queued = [lab.submit(long, alice)["id"] for _ in range(2)]  # one runs at a time: these two wait
    assert [lab.run(run)["position"] for run in queued] == [1, 2]
    status, answer = lab.call("POST", "/api/lab/runs", {"config": long}, token=alice)
    assert (status, answer["error"]["code"]) == (429, "too_many_queued")
    lab.call("DELETE", "/api/lab/researchers/alice")
    status, answer = lab.call("GET", "/api/lab/runs", token=alice)
    assert (status, answer["error"]["code"]) == (401, "unauthorized")  # revoked


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_ten_thousand_fuzzed_requests_get_answers_and_the_lab_still_serves(tmp_path: Path, processes) -> None:
    lab = Lab.start(processes, tmp_path, devices=2)
    alice = lab.researcher("alice")
    host, port = urllib.parse.urlsplit(lab.url).netloc.split(":")
    rng = random.Random(0)
    statuses: Counter[int] = Counter()
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    for _ in range(10_000):
        method, path, body, headers = fuzzed(rng, lab.admin, alice)
        try:
            conn.request(method, path, body=body, headers=headers)
            response = conn.getresponse()
            data = response.read()
        except (http.client.HTTPException, ConnectionError):
            conn.close()  # the server may close a connection whose request it refuses; a new one follows
            conn = http.client.HTTPConnection(host, int(port), timeout=30)
            statuses[0] += 1
            continue
        statuses[response.status] += 1
        assert response.status != 500, (method, path, body, data)
        if response.status >= 400 and method != "HEAD" and data:
            assert json.loads(data)["error"]["code"] in CODES, (method, path, data)
    conn.close()
    assert statuses[0] < 100, statuses  # refused connections are the exception, not the rule
    assert sum(statuses.values()) == 10_000
    assert statuses[200] > 300 and statuses[400] > 100  # the handlers were reached, not only the door
    assert lab.call("GET", "/api/lab/health")[0] == 200
    run = lab.submit(run_config(size=2), alice)  # and it still takes a run
    assert lab.run(run["id"])["state"] in ("queued", "admitted", "running", "completed")


def fuzzed(rng: random.Random, admin: str, alice: str) -> tuple[str, str, bytes | None, dict[str, str]]:
    """One request of every kind the API takes and then some: methods, paths, queries, tokens, bodies."""
    junk = rng.choice(["0001-alice", "", "x" * rng.randint(1, 3000), "../../lab.db", "%00%ff", "é✓", "0" * 30,
                       "-1", "bob", "admin/../x", " ", "%2e%2e%2f"])
    path = rng.choice([
        "/api/lab/health", "/api/lab/runs", f"/api/lab/runs/{junk}", f"/api/lab/runs/{junk}/cancel",
        f"/api/lab/runs/{junk}/log?after={rng.choice(['0', '-5', 'x', '9' * 40, ''])}&device={junk}",
        f"/api/lab/runs/{junk}/archive", "/api/lab/researchers", f"/api/lab/researchers/{junk}",
        "/api/lab/tasks", "/api/lab/devices", f"/api/{junk}", "/" + junk,
    ])
    path = urllib.parse.quote(path, safe="/?&=%")
    # Mostly requests the API takes, from researchers it knows, so that they reach the handlers.
    method = rng.choices(["GET", "POST", "DELETE", "PUT", "PATCH", "HEAD", "OPTIONS"], [4, 4, 1, 1, 1, 1, 1])[0]
    token = rng.choices([None, alice, admin, "", "x" * 5000, alice[:-1]], [1, 6, 3, 1, 1, 1])[0]
    if method == "DELETE" and token == admin:
        token = alice  # the fuzzer must not revoke its own researchers
    headers = {} if token is None else {"Authorization": rng.choices(["Bearer ", "Basic ", ""], [8, 1, 1])[0] + token}
    body = rng.choice([
        None, b"", rng.randbytes(rng.randint(1, 2000)), b"\xff\xfe{", b"[]", b"null", b"12", b'"config"',
        json.dumps({"config": rng.choice([1, None, [], "", "x", "seed = 1", "jobs = [", run_config() * rng.randint(0, 2)])}).encode(),
        json.dumps({"config": "seed = 1", "key": rng.choice([1, "", "k" * 300, None, "k"])}).encode(),
        json.dumps({"name": junk[:40], "admin": rng.choice([True, False, "yes", 1])}).encode(),
        b"#" * rng.choice([10, 300 * 1024]),
    ])
    return method, path, body, headers


# -- the API's own application over a real lab.db ----------------------------------------------------------


class Folders:
    """What the read-only routes ask of the lab's runs (``LabRuns.folder``): where each run's folder is."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def folder(self, run_id: str) -> Path:
        return self.root / run_id


@contextlib.asynccontextmanager
async def served(store: LabStore, runs: Path) -> AsyncIterator[TestClient]:
    """``lab_app`` over ``store``, its runs' folders in ``runs``, on a loopback port."""
    api = LabApi(store, Folders(runs), list, list, max_request_kb=256)  # type: ignore[arg-type]
    async with TestClient(TestServer(lab_app(api))) as client:
        yield client


async def test_the_auth_scheme_is_read_in_any_case(tmp_path: Path) -> None:
    with LabStore(tmp_path / "lab.db") as store:
        token = store.add_researcher("alice")
        async with served(store, tmp_path / "runs") as client:
            for scheme in ("Bearer", "bearer", "BEARER", "bEaReR"):
                answer = await client.get("/api/lab/runs", headers={"Authorization": f"{scheme} {token}"})
                assert answer.status == 200, scheme
            for header in (f"Basic {token}", token, f"Bearer{token}"):
                answer = await client.get("/api/lab/runs", headers={"Authorization": header})
                assert answer.status == 401, header
                assert (await answer.json())["error"]["code"] == "unauthorized"


async def test_a_runs_archive_holds_one_whole_database_while_the_run_still_writes_it(tmp_path: Path) -> None:
    with LabStore(tmp_path / "lab.db") as store:
        token = store.add_researcher("alice")
        run, _ = store.submit("alice", method="random", needs=2, config_toml="seed = 1", key=None)
        folder = tmp_path / "runs" / run.run_id
        folder.mkdir(parents=True)
        (folder / "config.toml").write_text("seed = 1\n")
        with Storage(folder / "mjfl.db") as writing:  # a run still going: its last commits are in mjfl.db-wal
            writing.start_run(run_info(), job_infos())
            for number in (1, 2, 3):
                writing.record_round(round_record(number=number))
            assert (folder / "mjfl.db-wal").stat().st_size > 0 and (folder / "mjfl.db-shm").exists()
            async with served(store, tmp_path / "runs") as client:
                answer = await client.get(f"/api/lab/runs/{run.run_id}/archive", headers={"Authorization": f"Bearer {token}"})
                assert answer.status == 200
                data = await answer.read()
            writing.record_round(round_record(number=4))  # the writer is none the worse
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
            names = sorted(m.name for m in tar.getmembers())
            tar.extractall(tmp_path / "pulled", filter="data")
    assert names == [run.run_id, f"{run.run_id}/config.toml", f"{run.run_id}/mjfl.db"]
    pulled = tmp_path / "pulled" / run.run_id / "mjfl.db"
    with contextlib.closing(sqlite3.connect(pulled)) as alone:
        assert alone.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        assert alone.execute("PRAGMA journal_mode").fetchone() == ("delete",)  # opens alone, no -wal to look for
    with Storage.read_only(pulled) as copy:
        assert [r.round for r in copy.rounds("r1")] == [1, 2, 3]  # every commit up to the archive's moment

