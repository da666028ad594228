"""docs/lab-api.yaml is the lab API's contract: it names every route the API serves, every refusal code with its
status, and every answer of a real `mjfl serve` validates against its schema.

The fast tests read the spec and the code (the routes ``lab_app`` registers, the ``Refusal`` codes written in
``mjfl/coordinator/lab/``, the ``Run`` that ``LabApi.view`` builds over a real lab.db); the slow one calls every
route of a real service, with valid and invalid requests, as any client does.
"""

from __future__ import annotations

import ast
import inspect
import io
import re
import tarfile
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import referencing
import referencing.jsonschema
import yaml
from lab_service import Lab, run_config
from repository import DOCS

import mjfl.coordinator.lab
from mjfl.coordinator.lab import api as lab_api
from mjfl.coordinator.lab.api import LabApi, lab_app
from mjfl.coordinator.lab.store import STATES, LabStore
from mjfl.errors import Refusal

SPEC_FILE = DOCS / "lab-api.yaml"
URI = "urn:mjfl:lab-api"
METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")


def load_spec() -> dict[str, Any]:
    spec = yaml.safe_load(SPEC_FILE.read_text(encoding="utf-8"))
    assert isinstance(spec, dict)
    return spec


SPEC = load_spec()
REGISTRY = referencing.Registry().with_resource(URI, referencing.jsonschema.DRAFT202012.create_resource(SPEC))
CODES: dict[str, int] = SPEC["components"]["schemas"]["ErrorCode"]["x-status"]


def escaped(part: str) -> str:
    """One step of a JSON pointer."""
    return part.replace("~", "~0").replace("/", "~1")


def at(location: str) -> Any:
    """The spec's node at a JSON pointer."""
    node: Any = SPEC
    for part in location.lstrip("/").split("/"):
        node = node[part.replace("~1", "/").replace("~0", "~")]
    return node


def followed(location: str) -> str:
    """``location``, or where its ``$ref`` (within the spec) leads."""
    node = at(location)
    while isinstance(node, dict) and "$ref" in node:
        location = node["$ref"].removeprefix("#")
        node = at(location)
    return location


def validator(location: str) -> jsonschema.Draft202012Validator:
    """The schema at ``location``, its ``$ref``s resolved within the spec."""
    return jsonschema.Draft202012Validator({"$ref": f"{URI}#{location}"}, registry=REGISTRY)


def operations() -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, item in SPEC["paths"].items():
        for method in METHODS:
            if method in item:
                yield method, path, item[method]


def answer_schema(method: str, path: str, status: int, media: str = "application/json") -> str:
    """Where the spec keeps the schema of ``method path``'s answer with ``status`` (a KeyError if nowhere)."""
    response = followed(f"/paths/{escaped(path)}/{method}/responses/{status}")
    location = f"{response}/content/{escaped(media)}/schema"
    at(location)
    return location


def refs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        if isinstance(node.get("$ref"), str):
            yield node["$ref"]
        for value in node.values():
            yield from refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from refs(value)


# -- the spec and the code ------------------------------------------------------------------------------------------


def test_the_spec_is_an_openapi_3_1_document_whose_references_resolve() -> None:
    assert str(SPEC["openapi"]).startswith("3.1.")
    assert SPEC["info"]["title"] and SPEC["info"]["version"]
    scheme = SPEC["components"]["securitySchemes"]["bearer"]
    assert (scheme["type"], scheme["scheme"]) == ("http", "bearer")
    assert SPEC["security"] == [{"bearer": []}]
    for ref in refs(SPEC):
        assert ref.startswith("#/"), ref
        at(ref.removeprefix("#"))  # a KeyError names a reference to nowhere
    for schema in SPEC["components"]["schemas"].values():
        jsonschema.Draft202012Validator.check_schema(schema)  # a SchemaError names the keyword
    ids = [op["operationId"] for _, _, op in operations()]
    assert len(ids) == len(set(ids)), ids
    for method, path, op in operations():
        assert op.get("summary") and op["responses"], (method, path)
        declared = [at(followed(p["$ref"].removeprefix("#"))) if "$ref" in p else p
                    for p in SPEC["paths"][path].get("parameters", []) + op.get("parameters", [])]
        in_path = {p["name"] for p in declared if p["in"] == "path"}
        assert in_path == set(re.findall(r"{(\w+)}", path)), (method, path, in_path)
        needs_token = op.get("security", SPEC["security"]) != []
        assert ("401" in op["responses"]) == needs_token, (method, path)
    assert [op.get("security") for m, p, op in operations() if p == "/api/lab/health"] == [[]]  # health needs no token


def test_the_spec_has_exactly_the_routes_the_api_serves() -> None:
    # Stand-ins: registering routes touches none of the API's objects.
    app = lab_app(LabApi(None, None, list, list, max_request_kb=1))  # type: ignore[arg-type]
    served = {(route.method.lower(), route.resource.canonical) for route in app.router.routes() if route.resource}
    assert served == {(method, path) for method, path, _ in operations()}


def written_refusals() -> Iterator[tuple[str, int | None, str]]:
    """(code, the status written beside it, or None if it is sent with another, where) of every ``Refusal(...)``
    in the lab's modules."""
    default = inspect.signature(Refusal).parameters["status"].default
    for module in sorted(Path(mjfl.coordinator.lab.__file__).parent.glob("*.py")):
        tree = ast.parse(module.read_text(encoding="utf-8"))
        sent_otherwise = {id(node.value) for node in ast.walk(tree)
                          if isinstance(node, ast.Attribute) and node.attr == "document"}  # its status is _json's
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == "Refusal":
                code = node.args[0]
                if not isinstance(code, ast.Constant):
                    continue  # an HTTP error's code: api._HTTP_CODES, checked beside
                status = next((k.value for k in node.keywords if k.arg == "status"), ast.Constant(default))
                written = status.value if isinstance(status, ast.Constant) else None
                yield code.value, None if id(node) in sent_otherwise else written, f"{module.name}:{node.lineno}"


def test_every_refusal_code_of_the_lab_is_in_the_spec_with_its_status() -> None:
    enum = SPEC["components"]["schemas"]["ErrorCode"]["enum"]
    assert set(CODES) == set(enum) and len(enum) == len(set(enum))
    found = list(written_refusals())
    codes = {code for code, _, _ in found} | set(lab_api._HTTP_CODES.values())
    assert codes == set(enum), f"in the code, not the spec: {codes - set(enum)}; the other way: {set(enum) - codes}"
    for code, status, where in found:
        assert status is None or CODES[code] == status, f"{where}: {code} is sent with {status}, the spec says {CODES[code]}"
    for status, code in lab_api._HTTP_CODES.items():
        assert CODES[code] == status


def test_each_error_answer_of_an_operation_allows_only_the_codes_of_its_status() -> None:
    for method, path, op in operations():
        for status in (s for s in op["responses"] if int(s) >= 400):
            check = validator(answer_schema(method, path, int(status)))
            allowed = {code for code in CODES if check.is_valid({"error": {"code": code, "message": "m"}})}
            assert allowed and {CODES[c] for c in allowed} == {int(status)}, (method, path, status, allowed)


def test_a_run_validates_as_lab_api_view_builds_it_in_every_state(tmp_path: Path) -> None:
    run_schema = SPEC["components"]["schemas"]["Run"]
    assert SPEC["components"]["schemas"]["RunState"]["enum"] == list(STATES)
    check = validator("/components/schemas/Run")
    with LabStore(tmp_path / "lab.db") as store:
        api = LabApi(store, None, list, list, max_request_kb=1)  # type: ignore[arg-type]  # view reads the store only
        store.add_researcher("alice")
        first, _ = store.submit("alice", method="random", needs=2, config_toml="seed = 1", key=None)
        second, _ = store.submit("alice", method="meta-greedy", needs=4, config_toml="seed = 2", key="k")
        store.note(second.run_id, "waiting for a place")
        views = [api.view(first), api.view(store.run(second.run_id))]  # type: ignore[arg-type]
        assert [v["position"] for v in views] == [1, 2]
        for state in ("admitted", "running", "completed"):
            views.append(api.view(store.move(first.run_id, state, reached=True if state == "completed" else None)))
        views.append(api.view(store.move(second.run_id, "cancelled", "cancelled before it started")))
    for view in views:
        assert set(view) == set(run_schema["properties"]) == set(run_schema["required"])
        check.validate(view)
    assert [v["state"] for v in views] == ["queued", "queued", "admitted", "running", "completed", "cancelled"]
    assert views[4]["targets_reached"] is True and views[5]["position"] is None


# -- a real service ---------------------------------------------------------------------------------------------------


class Client:
    """Calls a real lab and checks every answer against the spec: the schema of its operation and status."""

    def __init__(self, lab: Lab) -> None:
        self.lab = lab
        self.answered: set[tuple[str, str, int]] = set()

    def __call__(self, method: str, path: str, body: Any = None, *, token: str | None = None,
                 raw: bytes | None = None, expect: int | str | None = None) -> Any:
        """One request; ``expect``: its status (an int) or its refusal's code (a str). Answers its document."""
        status, document = self.lab.call(method, path, body, token=token, raw=raw)
        template = route_of(method, path)
        if method == "HEAD":
            assert document == b"", document  # an answer to HEAD has no body to check
        elif isinstance(document, dict) and "error" in document:
            assert CODES[document["error"]["code"]] == status, (method, path, status, document)
            where = "/components/schemas/Error"
            if template is not None and str(status) in SPEC["paths"][template][method.lower()]["responses"]:
                where = answer_schema(method.lower(), template, status)
            validator(where).validate(document)
            if isinstance(expect, str):
                assert document["error"]["code"] == expect, (method, path, document)
        else:
            assert template is not None, (method, path, status)
            if isinstance(document, bytes):
                answer_schema(method.lower(), template, status, "application/gzip")  # the spec says it is not JSON
            else:
                validator(answer_schema(method.lower(), template, status)).validate(document)
            assert status < 400 and not isinstance(expect, str), (method, path, status, document)
        assert not isinstance(expect, int) or status == expect, (method, path, status, document)
        if template is not None:
            self.answered.add((method.lower(), template, status))
        return document


def route_of(method: str, path: str) -> str | None:
    """The spec's path template ``path`` is an instance of, if it has ``method``."""
    bare = urllib.parse.urlsplit(path).path.split("/")
    for template, item in SPEC["paths"].items():
        parts = template.split("/")
        if method.lower() in item and len(parts) == len(bare) and all(
            p == b or (p.startswith("{") and b) for p, b in zip(parts, bare, strict=True)
        ):
            return str(template)
    return None


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_every_answer_of_a_real_lab_is_the_one_the_spec_describes(tmp_path: Path, processes) -> None:
    """About 15-25 s on 2 cores: the service's start, then a run admitted, training, cancelled."""
    lab = Lab.start(processes, tmp_path, devices=2, max_running=1, max_queued=1)
    call = Client(lab)
    call("GET", "/api/lab/health", token="", expect=200)
    alice = call("POST", "/api/lab/researchers", {"name": "alice"}, expect=201)["token"]
    bob = call("POST", "/api/lab/researchers", {"name": "bob", "admin": False}, expect=201)["token"]
    call("POST", "/api/lab/researchers", {"name": "Alice!"}, expect="request_invalid")
    call("POST", "/api/lab/researchers", {"name": "carol", "admin": "yes"}, expect="request_invalid")
    call("POST", "/api/lab/researchers", {"name": "carol"}, token=alice, expect="forbidden")
    names = [r["name"] for r in call("GET", "/api/lab/researchers", expect=200)["researchers"]]
    assert names == ["admin", "alice", "bob"]
    call("GET", "/api/lab/researchers", token=alice, expect="forbidden")
    for token in ("", "forged"):
        call("GET", "/api/lab/runs", token=token, expect="unauthorized")
    call("GET", "/api/lab/nothing-here", expect="not_found")
    call("PUT", "/api/lab/runs", expect="method_not_allowed")
    call("HEAD", "/api/lab/health", token="", expect=405)  # HEAD answers no body: only its status

    refused = {
        "request_invalid": [None, b"[1]", b"\xff{", b'{"config": 3}', b'{"config": "seed = 1", "key": ""}'],
        "config_invalid": [b'{"config": "jobs = ["}', b'{"config": "seed = 1\\nnot_a_key = 2"}'],
    }
    for code, bodies in refused.items():
        for raw in bodies:
            call("POST", "/api/lab/runs", token=alice, raw=raw or b"", expect=code)
    call("POST", "/api/lab/runs", {"config": run_config(size=3)}, token=alice, expect="fleet_too_small")
    stand_ins = run_config(size=2).replace('shards = "present"', 'shards = "present"\nstand_ins = 0.5')
    call("POST", "/api/lab/runs", {"config": stand_ins}, token=alice, expect="unsupported")
    no_data = run_config(size=2).replace('name = "cnn"', f'name = "cnn"\ndataset = "mnist"\ndata_dir = "{tmp_path}"')
    call("POST", "/api/lab/runs", {"config": no_data}, token=alice, expect="data_missing")
    call("POST", "/api/lab/runs", raw=b"#" * (300 * 1024), token=alice, expect="request_too_large")
    assert call("GET", "/api/lab/runs", expect=200)["runs"] == []  # nothing refused was queued

    long = run_config(size=2, target=0.999, rounds=500)
    first = call("POST", "/api/lab/runs", {"config": long, "key": "k"}, token=alice, expect=201)["run"]
    assert call("POST", "/api/lab/runs", {"config": long, "key": "k"}, token=alice, expect=200)["run"]["id"] == first["id"]
    lab.until(lambda: call("GET", f"/api/lab/runs/{first['id']}", expect=200)["run"]["state"] != "queued", 60)
    second = call("POST", "/api/lab/runs", {"config": long}, token=alice, expect=201)["run"]
    call("POST", "/api/lab/runs", {"config": long}, token=alice, expect="too_many_queued")
    lab.until(lambda: any(t["run"] == first["id"] for t in call("GET", "/api/lab/tasks", expect=200)["tasks"]), 240)
    call("GET", "/api/lab/devices", token=bob, expect=200)
    waiting = call("GET", f"/api/lab/runs/{second['id']}", token=bob, expect=200)["run"]
    assert (waiting["state"], waiting["position"]) == ("queued", 1) and "limits.max_running" in waiting["reason"]
    assert [r["id"] for r in call("GET", "/api/lab/runs", token=bob, expect=200)["runs"]] == [first["id"], second["id"]]
    call("GET", "/api/lab/runs/0099-nobody", expect="not_found")

    page = call("GET", f"/api/lab/runs/{first['id']}/log?after=0", token=bob, expect=200)
    assert page["lines"] and page["next"] > 0 and not page["final"]
    call("GET", f"/api/lab/runs/{first['id']}/log?after={page['next']}&device=emu", expect=200)
    # An emulated device's own lines (the lab's log: the lab runs it) while the run runs, under the run's log.
    done = lab.until(lambda: next((t for t in call("GET", "/api/lab/tasks", expect=200)["tasks"]
                                   if t["run"] == first["id"] and t["ended"] is not None), None), 240)
    device_lines = lab.until(lambda: [line for line in call(
        "GET", f"/api/lab/runs/{first['id']}/log?after=0&device={done['device']}", expect=200)["lines"]
        if "trained" in line], 120)
    assert all(done["device"] in line for line in device_lines)
    call("GET", f"/api/lab/runs/{first['id']}/log?after=-1", expect="request_invalid")
    call("GET", "/api/lab/runs/0099-nobody/log", expect="not_found")

    call("POST", f"/api/lab/runs/{first['id']}/cancel", token=bob, expect="forbidden")
    gone = call("POST", f"/api/lab/runs/{second['id']}/cancel", token=alice, expect=200)["run"]
    assert (gone["state"], gone["reason"]) == ("cancelled", "cancelled before it started")
    ended = call("POST", f"/api/lab/runs/{first['id']}/cancel", token=alice, expect=200)["run"]
    assert ended["state"] == "cancelled" and ended["ended_at"]
    assert call("POST", f"/api/lab/runs/{first['id']}/cancel", expect=200)["run"] == ended  # again: the same answer
    call("POST", "/api/lab/runs/0099-nobody/cancel", expect="not_found")
    assert follow(call, first["id"])[-1]["final"]
    archive = call("GET", f"/api/lab/runs/{first['id']}/archive", token=bob, expect=200)
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
        assert {m.name for m in tar.getmembers()} >= {first["id"], f"{first['id']}/config.toml", f"{first['id']}/mjfl.db"}
    call("GET", "/api/lab/runs/0099-nobody/archive", expect="not_found")

    call("DELETE", "/api/lab/researchers/bob", token=alice, expect="forbidden")
    call("DELETE", "/api/lab/researchers/bob", expect=200)
    call("DELETE", "/api/lab/researchers/nobody", expect="not_found")
    call("GET", "/api/lab/runs", token=bob, expect="unauthorized")
    call("POST", "/api/lab/drain", token=alice, expect="forbidden")
    call("POST", "/api/lab/drain", expect=200)  # nothing runs: the service now exits
    missing = {(m, p) for m, p, _ in operations()} - {(m, p) for m, p, s in call.answered if s < 300}
    assert not missing, f"routes never answered with success: {missing}"


def follow(call: Client, run: str) -> list[dict[str, Any]]:
    """A run's log, page by page, as the spec tells a client to follow it."""
    pages, after, deadline = [], 0, time.monotonic() + 60
    while not (pages and pages[-1]["final"]) and time.monotonic() < deadline:
        pages.append(call("GET", f"/api/lab/runs/{run}/log?after={after}", expect=200))
        if pages[-1]["next"] == after:
            time.sleep(0.2)  # the spec's pause between pages that did not move
        after = pages[-1]["next"]
    return pages

