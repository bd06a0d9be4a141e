"""The typeahead endpoint over an in-process index (``tests.typeahead.support``,
no HBase): answers equal ``rank``'s, every refusal is a one-line JSON error
with its status, an unavailable index is a 503 with its cause, the page's
files are served with a CSP, and ``pinlater-typeahead`` errors are one line
with exit 2."""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from tasks.appdata.ids import ObjectType, make_id
from tasks.typeahead import cli
from tasks.typeahead.http import MAX_QUERY_CHARS, TypeaheadServer
from tasks.typeahead.rank import LookupResult, rank
from tasks.typeahead.sources import FOLLOWING, MUTUAL
from tests.http_client import (
    BAD_HTTP,
    MALFORMED,
    SERVE_ADDRESSES,
    ServeCase,
    assert_error,
    assert_malformed_answered,
    listening_line,
    request,
    serving,
)
from tests.servers import REPO
from tests.support.gc_probe import probed, reports
from tests.typeahead.support import (
    BOOK,
    BROKEN_OWNER,
    DOWN_CAUSE,
    DOWN_OWNER,
    EMPTY_OWNER,
    OWNER,
    SOURCES,
    FakeIndex,
    uid,
)


def search(server: TypeaheadServer, user: int | str, query: str, **params: str) -> tuple[int, Any, bytes]:
    extra = "".join(f"&{k}={v}" for k, v in params.items())
    return request(server, f"/v1/typeahead/{user}?q={quote(query)}{extra}")


def test_answers_are_ranked_deduplicated_and_complete(server: TypeaheadServer) -> None:
    status, answer, _ = search(server, OWNER, "john sm")
    assert status == 200
    assert set(answer) == {"user_id", "user_id_str", "query", "sources", "results", "took_ms", "served_by"}
    assert answer["sources"] is None  # every source
    assert answer["user_id"] == OWNER and answer["user_id_str"] == str(OWNER) and answer["query"] == "john sm"
    assert answer["served_by"] == "primary" and answer["took_ms"] >= 0
    expected = rank("john sm", BOOK[OWNER], SOURCES, 10)
    assert [r["key"] for r in answer["results"]] == [m.contact.key for m in expected]
    first, second = answer["results"][:2]
    assert first == {"name": "John Michael Smith", "key": f"u:{uid(1)}", "user_id": uid(1),
                     "user_id_str": str(uid(1)), "source": "mutual", "sources": ["mutual"],
                     "score": expected[0].score}
    assert second["name"] == "John Smith" and second["sources"] == ["following", "facebook"]  # shown once
    assert answer["results"][-1]["source"] == "twitter"  # unknown sources last


def test_limit_blank_queries_and_contacts_without_user_id(server: TypeaheadServer, fake_index: FakeIndex) -> None:
    status, answer, _ = search(server, OWNER, "jo", limit="2")
    assert status == 200 and len(answer["results"]) == 2
    status, answer, _ = search(server, OWNER, "jose")
    assert [(r["name"], r["user_id"], r["user_id_str"]) for r in answer["results"]] == [("José Álvarez", None, None)]
    fake_index.calls.clear()
    for blank in ["", "   ", "-"]:
        status, answer, _ = search(server, OWNER, blank)
        assert status == 200 and answer["results"] == [] and answer["query"] == blank
    assert [call[1] for call in fake_index.calls] == ["-"]  # whitespace asks no cluster
    assert search(server, EMPTY_OWNER, "jo")[1]["results"] == []
    assert search(server, OWNER, "x" * MAX_QUERY_CHARS)[0] == 200


def test_a_lookup_limited_to_some_sources_asks_the_index_for_those(
    server: TypeaheadServer, fake_index: FakeIndex
) -> None:
    status, answer, _ = search(server, OWNER, "jo", sources="following,mutual,following")
    assert status == 200
    assert answer["sources"] == ["mutual", "following"]  # by code, each once
    assert fake_index.filters[-1] == frozenset({MUTUAL, FOLLOWING})
    found = {r["source"] for r in answer["results"]}
    assert found == {"mutual", "following"}
    assert all(set(r["sources"]) <= found for r in answer["results"])
    status, answer, _ = search(server, OWNER, "jo", sources="%20followers%20")
    assert status == 200 and answer["sources"] == ["followers"] and answer["results"] == []


USER_1 = make_id(0, ObjectType.USER, 1)
BAD_REQUESTS = [
    "/v1/typeahead/abc?q=jo",
    "/v1/typeahead/-1?q=jo",
    "/v1/typeahead/%2B1?q=jo",
    f"/v1/typeahead/{2**64}?q=jo",
    f"/v1/typeahead/{make_id(0, ObjectType.PIN, 1)}?q=jo",
    "/v1/typeahead/%FF?q=jo",
    f"/v1/typeahead/{USER_1}",  # no q
    f"/v1/typeahead/{USER_1}?q=%FF",
    f"/v1/typeahead/{USER_1}?q=" + "x" * (MAX_QUERY_CHARS + 1),
    f"/v1/typeahead/{USER_1}?q=jo&q=john",
    f"/v1/typeahead/{USER_1}?q=jo&limit=0",
    f"/v1/typeahead/{USER_1}?q=jo&limit=101",
    f"/v1/typeahead/{USER_1}?q=jo&limit=ten",
    f"/v1/typeahead/{USER_1}?q=jo&limit=",
    f"/v1/typeahead/{USER_1}?q=jo&cursor=1",
    f"/v1/typeahead/{USER_1}?q=jo&sources=",
    f"/v1/typeahead/{USER_1}?q=jo&sources=,",
    f"/v1/typeahead/{USER_1}?q=jo&sources=mutual,facebook",  # not a source of the index
    f"/v1/typeahead/{USER_1}?q=jo&sources=mutual&sources=following",
    f"/v1/typeahead/{USER_1}?q=jo&sources=" + "mutual," * 40,
]


@pytest.mark.parametrize("path", BAD_REQUESTS)
def test_bad_requests_are_400(server: TypeaheadServer, fake_index: FakeIndex, path: str) -> None:
    status, answer, raw = request(server, path)
    assert status == 400, answer
    assert_error(raw, answer)
    assert fake_index.calls == []


@pytest.mark.parametrize("path", ["/v1/typeahead", "/v1/typeahead/", f"/v1/typeahead/{USER_1}/x", "/index.html",
                                  "/static/", "/static/app.js"])
def test_unknown_paths_are_404(server: TypeaheadServer, path: str) -> None:
    status, answer, raw = request(server, path)
    assert status == 404
    assert_error(raw, answer)


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "HEAD"])
def test_other_methods_are_405(server: TypeaheadServer, method: str) -> None:
    status, answer, _ = request(server, f"/v1/typeahead/{USER_1}?q=jo", method)
    assert status == 405 and (answer is None if method == "HEAD" else answer["error"])


@pytest.mark.parametrize(("data", "status"), MALFORMED)
def test_malformed_http_is_a_json_error_and_closes(server: TypeaheadServer, data: bytes, status: bytes) -> None:
    assert_malformed_answered(server, data, status)


def test_foreign_host_header_is_421(server: TypeaheadServer) -> None:
    for path in ["/", f"/v1/typeahead/{OWNER}?q=jo"]:
        status, answer, raw = request(server, path, Host="attacker.example")
        assert status == 421
        assert_error(raw, answer)
    assert search(server, OWNER, "jo")[0] == 200  # Host: 127.0.0.1:port


def test_an_unavailable_index_is_503_with_the_cause(server: TypeaheadServer, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO):
        status, answer, raw = search(server, DOWN_OWNER, "secret query")
    assert status == 503
    assert_error(raw, answer)
    assert answer["error"] == f"contacts index unavailable: {DOWN_CAUSE}"
    assert "secret" not in caplog.text  # what people type stays out of logs


def test_a_failing_lookup_is_500_without_details(server: TypeaheadServer) -> None:
    status, answer, raw = search(server, BROKEN_OWNER, "jo")
    assert status == 500
    assert_error(raw, answer)
    assert "a bug" not in answer["error"]


def get(server: TypeaheadServer, path: str) -> tuple[int, dict[str, str], bytes]:
    import http.client

    connection = http.client.HTTPConnection(*server.address, timeout=10)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        connection.close()


@pytest.mark.parametrize(("path", "ctype", "needle"), [
    ("/", "text/html; charset=utf-8", b'<script src="/static/typeahead.js"'),
    ("/static/typeahead.js", "text/javascript; charset=utf-8", b"AbortController"),
    ("/static/typeahead.css", "text/css; charset=utf-8", b"#results"),
])
def test_page_files_are_served_with_a_csp(server: TypeaheadServer, path: str, ctype: str, needle: bytes) -> None:
    status, headers, body = get(server, path)
    assert status == 200 and headers["Content-Type"] == ctype and needle in body
    assert headers["Content-Security-Policy"].startswith("default-src 'self'")
    assert headers["X-Content-Type-Options"] == "nosniff"
    assert b"http://" not in body and b"https://" not in body  # nothing fetched from elsewhere


# -- the CLI ------------------------------------------------------------------------
class _ClosingIndex(FakeIndex):
    closed = False

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def cli_index(monkeypatch: pytest.MonkeyPatch) -> Iterator[_ClosingIndex]:
    """``pinlater-typeahead`` over the fake index instead of ``ContactsIndex.from_env()``."""
    import contextlib

    index = _ClosingIndex()

    @contextlib.contextmanager
    def fake() -> Iterator[Any]:
        try:
            yield index.lookup
        finally:
            index.close()

    monkeypatch.setattr(cli, "index_lookup", fake)
    yield index


def test_cli_lookup_prints_ranked_matches(cli_index: _ClosingIndex, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["lookup", str(OWNER), "john sm", "--limit", "3"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 4 and "John Michael Smith  [mutual]" in lines[0]
    assert "John Smith  [following]" in lines[1] and "(also in: facebook)" in lines[1]
    assert lines[3].startswith("3 result(s), served by primary in ")
    assert cli_index.closed
    assert cli.main(["lookup", str(OWNER), "jose", "--json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    expected: LookupResult = cli_index.lookup(OWNER, "jose", 10)
    assert [r["key"] for r in answer["results"]] == [m.contact.key for m in expected.matches] == ["e:josé@example.com"]
    assert cli.main(["lookup", str(OWNER), "john", "--sources", "following", "--json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["sources"] == ["following"] and {r["source"] for r in answer["results"]} == {"following"}


@pytest.mark.parametrize(("args", "says"), [
    (["lookup", "abc", "jo"], "user id must be a decimal number"),
    (["lookup", str(make_id(0, ObjectType.BOARD, 1)), "jo"], "not a user id"),
    (["lookup", str(OWNER), "jo", "--limit", "0"], "--limit must be in 1..100"),
    (["lookup", str(OWNER), "x" * 300], "q must be at most 256"),
    (["lookup", str(OWNER), "jo", "--sources", "gmail"], "unknown contact source 'gmail'"),
    (["lookup", str(OWNER), "jo", "--sources", ","], "sources names at least one of"),
    (["lookup", str(DOWN_OWNER), "jo"], f"contacts index unavailable: {DOWN_CAUSE}"),
    (["lookup", str(BROKEN_OWNER), "jo"], "internal error: RuntimeError: a bug"),
])
def test_cli_errors_are_one_line_and_exit_2(
    cli_index: _ClosingIndex, capsys: pytest.CaptureFixture[str], args: list[str], says: str
) -> None:
    assert cli.main(args) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and err.startswith("error: ") and says in err, err


def test_cli_serve_refuses_a_taken_port(cli_index: _ClosingIndex, capsys: pytest.CaptureFixture[str]) -> None:
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}  # serve sets its own
    try:
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            port = taken.getsockname()[1]
            assert cli.main(["serve", "--port", str(port)]) == 2
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    err = capsys.readouterr().err
    assert err.startswith(f"error: cannot listen on 127.0.0.1:{port}: ") and err.count("\n") == 1, err
    assert cli_index.closed


@pytest.mark.parametrize(("args", "env", "says"), [
    (["bogus"], {}, "invalid choice"),
    (["lookup", "1"], {}, "the following arguments are required: query"),
    (["lookup", "1", "jo", "--limit", "x"], {}, "--limit"),
    (["serve", "--port", "http"], {}, "--port"),
    (["serve", "--port", "70000"], {}, "--port: must be between 0 and 65535"),
    *((["serve"], {"PINLATER_TYPEAHEAD_HTTP": bad}, "PINLATER_TYPEAHEAD_HTTP: must look like HOST:PORT")
      for bad in BAD_HTTP),
    *((["serve-thrift"], {"PINLATER_TYPEAHEAD_THRIFT": bad}, "PINLATER_TYPEAHEAD_THRIFT: must look like HOST:PORT")
      for bad in BAD_HTTP),
    (["serve-thrift"], {"PINLATER_TYPEAHEAD_THRIFT_ROLES": "roles"},
     "PINLATER_TYPEAHEAD_THRIFT_ROLES: needs PINLATER_TYPEAHEAD_THRIFT_TLS_CERT"),
    (["serve-thrift", "--host", "0.0.0.0", "--port", "0"], {}, "refusing to serve plain TCP on 0.0.0.0"),
    (["serve-thrift", "--metrics-port", "-1"], {}, "--metrics-port"),
    (["serve-thrift", "--processes", "0"], {}, "--processes: must be between 1 and 64"),
    (["serve-thrift"], {"PINLATER_TYPEAHEAD_THRIFT_PROCESSES": "many"}, "PINLATER_TYPEAHEAD_THRIFT_PROCESSES"),
    (["serve-thrift", "--processes", "2", "--host", "0.0.0.0", "--port", "0"], {},
     "refusing to serve plain TCP on 0.0.0.0"),
])
def test_cli_usage_and_setting_errors_are_one_line_and_exit_2(args: list[str], env: dict[str, str], says: str) -> None:
    done = subprocess.run([sys.executable, "-m", "tasks.typeahead.cli", *args], capture_output=True, text=True,
                          timeout=60, cwd=REPO, env={**os.environ, **env})
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("error: ") and says in done.stderr, done.stderr


@pytest.mark.parametrize("case", SERVE_ADDRESSES)
def test_cli_serve_listens_on_pinlater_typeahead_http_unless_flags_say_otherwise(case: ServeCase) -> None:
    line, address = listening_line("tasks.typeahead.cli", "PINLATER_TYPEAHEAD_HTTP", case, os.environ)
    assert line == f"pinlater-typeahead listening on {address}"


def test_cli_serve_collects_as_a_worker_does(tmp_path: Path) -> None:
    """A full collection stops every lookup thread (60-100 ms in a process
    answering 200 lookups a second), so the endpoint collects as the workers
    do (workers.gc_policy)."""
    probe = tmp_path / "probe"
    with serving("tasks.typeahead.cli", "--port", "0", env=probed(probe, os.environ)) as line:
        assert line.startswith("pinlater-typeahead listening on 127.0.0.1:"), line
    seen = [r for r in reports(probe) if "serve" in r["argv"]]
    assert len(seen) == 1, reports(probe)
    assert tuple(seen[0]["threshold"]) == (700, 10, 100), seen
    assert seen[0]["frozen"] > 10_000, seen  # what it started with, out of every collection


@pytest.mark.parametrize("case", SERVE_ADDRESSES)
def test_cli_serve_thrift_listens_on_pinlater_typeahead_thrift_unless_flags_say_otherwise(case: ServeCase) -> None:
    env = {**os.environ, "PINLATER_TYPEAHEAD_THRIFT_METRICS_PORT": "0"}
    line, address = listening_line("tasks.typeahead.cli", "PINLATER_TYPEAHEAD_THRIFT", case, env, "serve-thrift")
    assert line == f"pinlater-typeahead thrift listening on {address}"
