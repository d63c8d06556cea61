"""`devicemanager summarize --prometheus URL` (R-X9, R-X1): the report from Prometheus's HTTP
API is the report from the text it scraped.

A real Prometheus (Debian's package) scrapes a static HTTP target serving every paste the
summarize tests read (fixtures/summarize/, HAMi's scheduler and monitor pastes) and this
agent's golden /metrics of every scenario, each case its own job and each file its own target
(`instance` = the file's name). Then, for every case, `read_prometheus` (the command's reader)
must give the report `summarize` gives of the same text: figures, devices, containers,
namespaces and findings alike. Only what text alone can say is left out of the comparison: the
lines Prometheus would not take (a paste cut mid-line, an ellipsis), what the sources were
(files and lines against targets), and families the report does not read (Prometheus is asked
only for those it reads, so none is listed as ignored or unrecognised).

The command's errors are checked against a fake API on loopback: HTTP errors, answers that are
not JSON or not a vector, a failed query, answers too large or holding too many series, a
server that does not answer in time, an unverified certificate; each one line, exit 3.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
import yaml

from devicemanager.report import summarize
from devicemanager.report.families import BY_NAME, FAMILIES
from devicemanager.report.model import Report
from devicemanager.report.parse import parse
from devicemanager.report.prometheus_api import (
    EVERYTHING,
    Query,
    query_for,
    query_url,
    read_prometheus,
)
from devicemanager.report.selection import Selection, select
from tests.conftest import FIXTURES, NODES, REPO, SCENARIOS, agent_env, free_port
from tests.kube_server import issue_ca, issue_leaf
from tests.test_scrape_config import targets_when
from tests.test_summarize import CASES

pytestmark = pytest.mark.timeout(180)
SUMMARIZE = FIXTURES / "summarize"
# The agent's series as Prometheus keeps them when it scrapes without honor_labels: the
# target's namespace, pod and container win, the workload's become exported_*.
RELABELLED = "agent-relabelled"
AGENT_TARGET = {"namespace": "gpustack-system", "pod": "dm-x8v2p", "container": "device-manager"}


def accepted(text: str) -> str:
    """What Prometheus takes of a paste: every line but those the tolerant reader could not
    read or read abbreviated (Prometheus refuses a whole scrape for one such line)."""
    parsed = parse("paste", text)
    left_out = {u.line for u in parsed.unreadable} | {
        s.line for s in parsed.samples if s.abbreviated
    }
    return "".join(
        line + "\n" for n, line in enumerate(text.splitlines(), start=1) if n not in left_out
    )


def all_cases() -> dict[str, dict[str, str]]:
    """Case → {file name → the text Prometheus is served}."""
    cases = {
        case: {name: accepted((SUMMARIZE / name).read_text()) for name in names}
        for case, names in CASES.items()
    }
    for scenario in SCENARIOS:
        golden = (NODES / scenario / "golden" / "metrics.txt").read_text()
        cases[f"agent-{scenario}"] = {f"{scenario}.metrics": golden}
    cases[RELABELLED] = {"h100.metrics": cases["agent-h100-8gpu-mixed"]["h100-8gpu-mixed.metrics"]}
    return cases


CASE_TEXTS = all_cases()


# --- A static target, and a fake API ---------------------------------------------------------


@dataclass
class Served:
    """A loopback HTTP(S) server answering each path from a table; it keeps what was asked."""

    url: str
    routes: dict[str, tuple[int, str, bytes]]
    asked: list[tuple[str, dict[str, list[str]], dict[str, str]]] = field(default_factory=list)
    delay: float = 0.0


@pytest.fixture(scope="module")
def serve() -> Iterator[Callable[..., Served]]:
    servers: list[ThreadingHTTPServer] = []

    def start(
        routes: dict[str, tuple[int, str, bytes]], tls: tuple[Path, Path] | None = None
    ) -> Served:
        served = Served("", routes)

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                parts = urlsplit(self.path)
                served.asked.append((parts.path, parse_qs(parts.query), dict(self.headers)))
                if served.delay:
                    time.sleep(served.delay)
                if parts.path not in served.routes:
                    self.send_error(404)
                    return
                status, content_type, body = served.routes[parts.path]
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                return None

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        scheme = "http"
        if tls is not None:
            import ssl

            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(str(tls[0]), str(tls[1]))
            server.socket = context.wrap_socket(server.socket, server_side=True)
            scheme = "https"
        servers.append(server)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        served.url = f"{scheme}://127.0.0.1:{server.server_address[1]}"
        return served

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def prometheus(
    tmp_path_factory: pytest.TempPathFactory, serve: Callable[..., Served]
) -> Iterator[str]:
    """A real Prometheus that has scraped every case once; its URL."""
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.skip("prometheus is not installed (Debian package prometheus; .ci/run installs it)")
    tmp = tmp_path_factory.mktemp("prometheus")
    routes = {
        f"/{case}/{name}": (200, "text/plain; version=0.0.4", text.encode())
        for case, files in CASE_TEXTS.items()
        for name, text in files.items()
    }
    target = serve(routes)
    address = target.url.removeprefix("http://")
    jobs = []
    for case, files in CASE_TEXTS.items():
        relabelled = case == RELABELLED
        jobs.append(
            {
                "job_name": case,
                "scrape_interval": "1s",
                "honor_labels": not relabelled,
                "static_configs": [
                    {
                        "targets": [address],
                        "labels": {
                            "__metrics_path__": f"/{case}/{name}",
                            "instance": name,
                            **(AGENT_TARGET if relabelled else {}),
                        },
                    }
                    for name in files
                ],
            }
        )
    config = {"global": {"scrape_interval": "1s"}, "scrape_configs": jobs}
    (tmp / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    proc = subprocess.Popen(
        [
            binary,
            f"--config.file={tmp / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        expected = sum(len(files) for files in CASE_TEXTS.values())
        data = targets_when(
            url,
            lambda d: (
                len(d["activeTargets"]) == expected
                and all(t["health"] != "unknown" for t in d["activeTargets"])
            ),
        )
        down = [(t["scrapeUrl"], t["lastError"]) for t in data["activeTargets"]
                if t["health"] != "up"]  # fmt: skip
        assert down == [], down  # every paste as served is one Prometheus takes
        yield url
    finally:
        proc.terminate()
        proc.wait(15)


# --- The same report -------------------------------------------------------------------------


def comparable(report: Report) -> dict[str, Any]:
    """The report less what only text can say: its sources (files and lines, or targets),
    and families not read (Prometheus is asked only for the ones read)."""
    d: dict[str, Any] = report.to_json()
    for key in ("sources", "ignored", "unrecognised"):
        d.pop(key)
    d["findings"] = [f for f in d["findings"] if f["kind"] != "unrecognised"]
    return d


def from_text(case: str, selection: Selection = EVERYTHING) -> Report:
    files = CASE_TEXTS[case]
    return summarize(select([parse(name, files[name]) for name in sorted(files)], selection))


def from_prometheus(url: str, case: str, selection: Selection = EVERYTHING) -> Report:
    return summarize(read_prometheus(Query(url, labels=(("job", case),)), selection))


@pytest.mark.parametrize("case", sorted(CASE_TEXTS))
def test_the_report_from_prometheus_is_the_report_from_its_text(prometheus: str, case: str) -> None:
    """(R-X9) Every paste and every scenario's /metrics, scraped by a real Prometheus and
    read back through its query API, gives the report the text gives."""
    text, queried = from_text(case), from_prometheus(prometheus, case)
    assert comparable(queried) == comparable(text)
    assert queried.devices or queried.containers or queried.namespaces  # not two empty reports
    # Each scrape target is a source, named by its instance, as each file is for text.
    assert [s.name for s in queried.sources] == sorted(CASE_TEXTS[case])


def test_the_workloads_labels_are_read_under_their_exported_names(prometheus: str) -> None:
    """(R-X9) Scraped without honor_labels, the agent's series carry the target's namespace
    and pod and the workload's as exported_namespace, exported_pod: the report reads the
    workload's (and a --namespace selects by them), as from the agent's own text."""
    queried = from_prometheus(prometheus, RELABELLED)
    d = queried.to_json()
    namespaces = {c["namespace"] for c in d["containers"]}
    assert "gpustack-workloads" in namespaces and "gpustack-system" not in namespaces
    assert comparable(queried) == comparable(from_text(RELABELLED))
    for narrowed in (
        Selection(namespace="gpustack-workloads"),
        Selection(namespace="gpustack-workloads", pod="qwen3-32b"),
    ):
        got = from_prometheus(prometheus, RELABELLED, narrowed)
        assert got.containers and comparable(got) == comparable(from_text(RELABELLED, narrowed))
    none = from_prometheus(prometheus, RELABELLED, Selection(namespace="gpustack-system"))
    assert none.containers == () and none.devices == ()


SELECTIONS = {
    "node gpu-a": Selection(node="gpu-a"),
    "node gpu-b": Selection(node="gpu-b"),
    "namespace team-x": Selection(namespace="team-x"),
    "pod": Selection(pod="infer-1"),
    "namespace and node": Selection(node="gpu-a", namespace="team-x"),
    "nothing": Selection(namespace="no-such-namespace"),
}


@pytest.mark.parametrize("name", sorted(SELECTIONS))
def test_node_namespace_and_pod_select_the_same_series_from_either(
    prometheus: str, name: str
) -> None:
    """(R-X9) --node, --namespace and --pod are label matchers in the queries and the same
    filter over text: the same selection of the same data gives the same report."""
    selection = SELECTIONS[name]
    for case in ("synthetic-cluster", "synthetic-mig", "hami-scheduler-test-quota"):
        assert comparable(from_prometheus(prometheus, case, selection)) == comparable(
            from_text(case, selection)
        ), case


def test_what_a_selection_keeps() -> None:
    """(R-X9) Worked out from synthetic-cluster's text: --namespace keeps that namespace's
    containers and quotas and the devices they sit on; --node keeps the node's devices and
    containers and no quota (a quota is the cluster's); --pod keeps no quota."""
    everything = from_text("synthetic-cluster").to_json()
    team_x = from_text("synthetic-cluster", Selection(namespace="team-x")).to_json()
    assert {c["namespace"] for c in team_x["containers"]} == {"team-x"}
    held = {(c["node"], c["device_index"]) for c in team_x["containers"]}
    # A container named only by a UUID two devices share (redacted) keeps both devices.
    shared = {c["device"] for c in team_x["containers"]}
    twins = {(d["node"], d["index"]) for d in everything["devices"] if d["uuid"] in shared}
    assert {(d["node"], d["index"]) for d in team_x["devices"]} == held | twins
    assert len(team_x["devices"]) < len(everything["devices"])
    assert list(team_x["namespaces"]) == ["team-x"] and team_x["namespaces"]["team-x"]["quota"]
    gpu_b = from_text("synthetic-cluster", Selection(node="gpu-b")).to_json()
    assert (
        {d["node"] for d in gpu_b["devices"]}
        == {"gpu-b"}
        == {c["node"] for c in gpu_b["containers"]}
    )
    assert all(ns["quota"] == {} for ns in gpu_b["namespaces"].values())
    pod = from_text("synthetic-cluster", Selection(pod="infer-1")).to_json()
    assert {c["pod"] for c in pod["containers"]} == {"infer-1"}
    assert all(ns["quota"] == {} for ns in pod["namespaces"].values())


# --- The queries -----------------------------------------------------------------------------


def test_one_query_per_family_read_at_one_moment(serve: Callable[..., Served]) -> None:
    """(R-X9) One instant query per family the report reads, all at one evaluation time, with
    --label's matchers in each and the selection's label under every name it may have."""
    empty = json.dumps({"status": "success", "data": {"resultType": "vector", "result": []}})
    api = serve({"/prefix/api/v1/query": (200, "application/json", empty.encode())})
    read_prometheus(
        Query(f"{api.url}/prefix/", labels=(("cluster", 'p"1'),)), Selection(namespace="ns")
    )
    asked = [q["query"][0] for _, q, _ in api.asked]
    assert len({q["time"][0] for _, q, _ in api.asked}) == 1
    # Quotas are asked for by namespace too: every family read is asked exactly once.
    assert len(asked) == len(FAMILIES)
    assert all('cluster="p\\"1"' in q for q in asked)
    monitor = query_for(BY_NAME["vGPU_device_memory_usage_in_bytes"], Selection(namespace="ns"))
    assert monitor is not None
    assert 'exported_podnamespace="ns"' in monitor and 'podnamespace="ns"' in monitor
    assert " or " in monitor and 'exported_namespace="ns"' in monitor
    # A device's series name no namespace: it is asked for whole and kept by its containers.
    assert query_for(BY_NAME["hami_gpu_memory_limit_bytes"], Selection(namespace="ns")) == (
        "hami_gpu_memory_limit_bytes{}"
    )
    assert query_for(BY_NAME["hami_resource_quota_used"], Selection(node="n")) is None
    assert query_url("http://p:9090/api/v1/query") == "http://p:9090/api/v1/query"
    assert query_url("http://mimir/prometheus") == "http://mimir/prometheus/api/v1/query"


# --- The command -----------------------------------------------------------------------------


def summarize_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "devicemanager", "summarize", *args],
        capture_output=True,
        text=True,
        env=agent_env(),
        cwd=REPO,
        timeout=60,
        check=False,
    )


def one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_the_command_prints_the_report_of_the_files(prometheus: str) -> None:
    """(R-X9) `summarize --prometheus URL --label job=CASE` prints what `summarize FILE…`
    prints of the same text (its JSON, less the sources), and --namespace narrows both alike;
    --max-series bounds what it reads."""
    case = "synthetic-cluster"
    files = [str(SUMMARIZE / name) for name in sorted(CASES[case])]
    for extra in ((), ("--namespace", "team-x")):
        queried = summarize_cli("--prometheus", prometheus, "--label", f"job={case}",
                                "--format", "json", *extra)  # fmt: skip
        assert queried.returncode == 0, queried.stderr
        text = summarize_cli(*files, "--format", "json", *extra)
        assert text.returncode == 0, text.stderr
        # The files' sources are named by their paths, the targets' by their file names.
        q = json.loads(queried.stdout)
        t = json.loads(text.stdout.replace(f"{SUMMARIZE}/", ""))
        for d in (q, t):
            for key in ("sources", "ignored", "unrecognised"):
                d.pop(key)
        assert q == t
    printed = summarize_cli("--prometheus", prometheus, "--label", f"job={case}")
    assert printed.returncode == 0 and "gpu-a" in printed.stdout
    many = summarize_cli("--prometheus", prometheus, "--max-series", "3")
    assert many.returncode == 3 and "more than 3 series" in one_line_error(many)


def vector(*series: dict[str, str]) -> bytes:
    result = [{"metric": m, "value": [1.0, "1"]} for m in series]
    return json.dumps({"status": "success", "data": {"resultType": "vector", "result": result}}
                      ).encode()  # fmt: skip


def test_the_command_sends_the_token_and_headers(
    serve: Callable[..., Served], tmp_path: Path
) -> None:
    """(R-X9) --bearer-token-file and --bearer-token send the bearer token, --header its
    header; the two token flags together, or a token flag without --prometheus, are usage
    errors."""
    api = serve({"/api/v1/query": (200, "application/json", vector())})
    (tmp_path / "token").write_text("sekret-token\n")
    ok = summarize_cli("--prometheus", api.url, "--bearer-token-file", str(tmp_path / "token"),
                       "--header", "X-Scope-OrgID: tenant-1")  # fmt: skip
    assert ok.returncode == 0, ok.stderr
    headers = {k.lower(): v for k, v in api.asked[-1][2].items()}
    assert headers["authorization"] == "Bearer sekret-token"
    assert headers["x-scope-orgid"] == "tenant-1"
    assert summarize_cli("--prometheus", api.url, "--bearer-token", "t2").returncode == 0
    assert {k.lower(): v for k, v in api.asked[-1][2].items()}["authorization"] == "Bearer t2"
    both = summarize_cli("--prometheus", api.url, "--bearer-token", "a",
                         "--bearer-token-file", str(tmp_path / "token"))  # fmt: skip
    assert both.returncode == 2
    assert summarize_cli("--bearer-token", "a", "-").returncode == 2
    assert summarize_cli("--prometheus", api.url, "some.prom").returncode == 2
    assert summarize_cli("--prometheus", "prometheus:9090").returncode == 2


ERRORS = {
    "http error": (
        (400, "application/json",
         b'{"status":"error","errorType":"bad_data","error":"parse error at char 3"}'),
        "HTTP 400: hami_gpu_core_limit_ratio: bad_data: parse error at char 3",
    ),
    "not json": ((200, "text/html", b"<html>login</html>"), "the answer is not JSON"),
    "proxy error": ((502, "text/html", b"<html>bad gateway</html>"), "HTTP 502 is not JSON"),
    "failed": (
        (200, "application/json", b'{"status":"error","error":"query timed out"}'),
        "query timed out",
    ),
    "not a vector": (
        (200, "application/json",
         b'{"status":"success","data":{"resultType":"matrix","result":[]}}'),
        "not a vector (matrix)",
    ),
    "malformed": (
        (200, "application/json",
         b'{"status":"success","data":{"resultType":"vector","result":[{"metric":{}}]}}'),
        "a series in the answer is malformed",
    ),
    "too large": (
        (200, "application/json", vector(*({"n": "x" * 100} for _ in range(50)))),
        "larger than 1000 bytes",
    ),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(ERRORS))
def test_an_error_answer_is_one_line_and_exit_3(serve: Callable[..., Served], name: str) -> None:
    """(R-X9) An answer that is an error, not JSON, not a successful vector, or too large
    ends the command with one line naming the server and why, exit 3."""
    answer, said = ERRORS[name]
    api = serve({"/api/v1/query": answer})
    result = summarize_cli("--prometheus", api.url, "--max-bytes", "1000")
    assert result.returncode == 3
    line = one_line_error(result)
    assert said in line and "127.0.0.1" in line, line


def test_no_answer_in_time_and_no_server_are_exit_3(serve: Callable[..., Served]) -> None:
    """(R-X9) --timeout bounds each query; a server that does not answer, or is not there."""
    api = serve({"/api/v1/query": (200, "application/json", vector())})
    api.delay = 3.0
    slow = summarize_cli("--prometheus", api.url, "--timeout", "0.5")
    assert slow.returncode == 3 and "not whole within 0.5 s (--timeout)" in one_line_error(slow)
    port = free_port()
    gone = summarize_cli("--prometheus", f"http://127.0.0.1:{port}", "--timeout", "5")
    assert gone.returncode == 3 and "ConnectError" in one_line_error(gone)


def test_https_is_verified_against_the_system_or_cacert(
    serve: Callable[..., Served], tmp_path: Path
) -> None:
    """(R-X9) An https Prometheus is verified (the system's CAs by default, as a token may be
    sent): a private CA's server fails in one line unless --cacert names that CA."""
    ca = issue_ca("prometheus-test-ca")
    cert, key = issue_leaf(ca, ["127.0.0.1"])
    (tmp_path / "tls.crt").write_bytes(cert)
    (tmp_path / "tls.key").write_bytes(key)
    (tmp_path / "ca.pem").write_bytes(ca.pem())
    api = serve({"/api/v1/query": (200, "application/json", vector())},
                tls=(tmp_path / "tls.crt", tmp_path / "tls.key"))  # fmt: skip
    unverified = summarize_cli("--prometheus", api.url)
    assert unverified.returncode == 3
    assert "CERTIFICATE_VERIFY_FAILED" in one_line_error(unverified)
    verified = summarize_cli("--prometheus", api.url, "--cacert", str(tmp_path / "ca.pem"))
    assert verified.returncode == 0, verified.stderr


def test_prometheus_is_reachable_from_httpx(prometheus: str) -> None:
    """(R-X9) The fixture's Prometheus answers the API the command asks (a sanity check of the
    harness: an empty answer everywhere would make every comparison above vacuous)."""
    doc = httpx.get(f"{prometheus}/api/v1/query", params={"query": "up"}, timeout=5).json()
    assert doc["status"] == "success" and len(doc["data"]["result"]) == sum(
        len(files) for files in CASE_TEXTS.values()
    )


def test_a_finding_cites_the_series_where_there_is_no_line(serve: Callable[..., Served]) -> None:
    """(R-X9) A series from the API has no line: a finding about it names the series itself,
    labels and all, and its target as the source."""
    series = {"__name__": "hami_vgpu_memory_used_bytes", "instance": "10.0.0.7:9394",
              "job": "hami-monitor", "podnamespace": "a", "podname": "b"}  # fmt: skip
    api = serve({"/api/v1/query": (200, "application/json", vector(series))})
    (parsed,) = read_prometheus(Query(api.url), families=(BY_NAME[series["__name__"]],))
    assert parsed.source == "10.0.0.7:9394"
    (sample,) = parsed.samples
    assert sample.labels == (("podname", "b"), ("podnamespace", "a"))  # job, instance dropped
    (finding,) = [f for f in summarize([parsed]).findings if f.kind.value == "ambiguous"]
    assert (
        "10.0.0.7:9394: 1 series names no device and were not attributed "
        '(hami_vgpu_memory_used_bytes series hami_vgpu_memory_used_bytes{podname="b", '
        'podnamespace="a"})'
    ) in finding.message, finding.message
