"""A small HTTPS server that plays the Kubernetes API server for the tests and benchmarks.

It serves recorded, realistic objects through the same paths the agent's client uses: pod
lists (paged) and chunked watch streams with ADDED, MODIFIED, DELETED, BOOKMARK and a 410 ERROR
event, the kubelet's /stats/summary through the node proxy, metrics.k8s.io PodMetrics, and
TokenReview and SubjectAccessReview (non-resource URLs) as the API server answers them, and the
service and pod proxies (`/api/v1/namespaces/{ns}/{services|pods}/[scheme:]name:port/proxy/…`)
answering recorded text for the targets put there. It checks a bearer token, and can cut a
stream mid-way, answer slowly, or fail with a status (per kind, or per proxied target).

`FakeKubelet` plays one node's kubelet on its secure port: /stats/summary with a bearer token,
over a certificate signed by a CA of the test's (`issue_ca`, `issue_leaf`) or self-signed.
"""

from __future__ import annotations

import contextlib
import copy
import datetime
import ipaddress
import json
import queue
import ssl
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlparse

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from devicemanager.serve.mint import self_signed

CUT = object()  # pushed to a watcher: drop the connection without ending the stream


class FakeApiServer:
    def __init__(self, tmp: Path, token: str = "token-1") -> None:
        self.tmp = tmp
        # The cluster CA: it signs this server's certificate and, in the tests that want it, a
        # kubelet's serving certificate (FakeKubelet(ca=api.authority)).
        self.authority = issue_ca()
        cert, key = issue_leaf(self.authority, ["127.0.0.1", "localhost"])
        self.ca = tmp / "ca.crt"
        self.ca.write_bytes(self.authority.pem())
        (tmp / "server.crt").write_bytes(cert)
        (tmp / "server.key").write_bytes(key)
        self.tokens = {token}
        self.lock = threading.Lock()
        self.pods: dict[str, dict[str, Any]] = {}
        self.version = 1000
        self.history: list[tuple[int, dict[str, Any]]] = []  # (rv, event) for resuming watches
        self.compacted = 0  # a watch from a version older than this gets 410 Gone
        self.watchers: list[queue.Queue[Any]] = []
        self.summaries: dict[str, Any] = {}  # node -> summary document
        # DRA (R-X6): the versions of resource.k8s.io served (none: the group is 404), the
        # ResourceSlices by name with their own event history, and ResourceClaims.
        self.dra_versions: list[str] = ["v1"]
        self.slices: dict[str, dict[str, Any]] = {}
        self.slice_history: list[tuple[int, dict[str, Any]]] = []
        self.slice_watchers: list[tuple[queue.Queue[Any], str | None]] = []
        self.claims: dict[tuple[str, str], dict[str, Any]] = {}
        # DeviceTaintRules (KEP-5055, cluster-scoped): the versions of resource.k8s.io that
        # serve them (a version listed by the group that is not here 404s them, as a cluster
        # without the feature does), the rules by name and their event history.
        self.rule_versions: list[str] = ["v1"]
        self.rules: dict[str, dict[str, Any]] = {}
        self.rule_history: list[tuple[int, dict[str, Any]]] = []
        self.rule_watchers: list[queue.Queue[Any]] = []
        self.pod_metrics: dict[tuple[str, str], Any] = {}
        self.failures: dict[str, list[int]] = {}  # kind -> statuses to answer next
        self.delays: dict[str, float] = {}  # kind -> seconds before answering
        self.requests: list[tuple[str, dict[str, list[str]]]] = []
        # The proxies: "ns/services/[scheme:]name:port" or "ns/pods/[scheme:]name:port" -> the
        # text its /metrics answers; a target not there is a 503 as the API server answers for
        # an endpoint it cannot reach. Per target: a status to fail with, seconds to wait.
        self.proxied: dict[str, str] = {}
        self.proxy_failures: dict[str, int] = {}
        self.proxy_delays: dict[str, float] = {}
        self.proxy_paths: list[str] = []  # the proxy paths asked, as received
        # TokenReview: token -> the user it authenticates; SubjectAccessReview: (user or
        # "group:<name>", path) pairs allowed to GET that non-resource URL.
        self.identities: dict[str, dict[str, Any]] = {}
        self.allowed: set[tuple[str, str]] = set()
        self.reviews: list[tuple[str, dict[str, Any]]] = []  # (kind, spec) as received
        self.closers: list[Any] = []  # clients of this server, closed when it stops
        # Events (events.k8s.io/v1) by (namespace, name) as created and patched since, the
        # PATCHes received as (path, content type, body), each node's status conditions, and
        # per kind a gate a request of that kind waits on until it is set (a hanging server).
        self.events: dict[tuple[str, str], dict[str, Any]] = {}
        self.patches: list[tuple[str, str, dict[str, Any]]] = []
        self.conditions: dict[str, list[dict[str, Any]]] = {}
        self.holds: dict[str, threading.Event] = {}
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(tmp / "server.crt", tmp / "server.key")
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.httpd.daemon_threads = True
        self.httpd.socket = ctx.wrap_socket(self.httpd.socket, server_side=True)
        self.port = self.httpd.server_address[1]
        self.url = f"https://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    # -- life -----------------------------------------------------------------------------------

    def start(self) -> FakeApiServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.cut()
        for close in self.closers:
            close()
        self.httpd.shutdown()
        self.httpd.server_close()

    def kubeconfig(self, path: Path, token: str | None = None) -> Path:
        path.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "current-context": "test",
                    "clusters": [
                        {
                            "name": "test",
                            "cluster": {"server": self.url, "certificate-authority": str(self.ca)},
                        }
                    ],
                    "users": [
                        {"name": "agent", "user": {"token": token or next(iter(self.tokens))}}
                    ],
                    "contexts": [
                        {
                            "name": "test",
                            "context": {
                                "cluster": "test",
                                "user": "agent",
                                "namespace": "gpustack-system",
                            },
                        }
                    ],
                }
            )
        )
        return path

    def service_account(self, directory: Path, token: str | None = None) -> Path:
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "token").write_text(token or next(iter(self.tokens)))
        (directory / "ca.crt").write_bytes(self.ca.read_bytes())
        (directory / "namespace").write_text("gpustack-system")
        return directory

    # -- objects --------------------------------------------------------------------------------

    def _event(self, kind: str, obj: dict[str, Any]) -> None:
        with self.lock:
            self.version += 1
            obj = copy.deepcopy(obj)
            obj.setdefault("metadata", {})["resourceVersion"] = str(self.version)
            event = {"type": kind, "object": obj}
            self.history.append((self.version, event))
            watchers = list(self.watchers)
        for w in watchers:
            w.put(event)

    def _kept(
        self,
        store: dict[str, dict[str, Any]],
        history: list[tuple[int, dict[str, Any]]],
        obj: dict[str, Any],
        kind: str,
    ) -> dict[str, Any]:
        """Under the lock: `obj` at the next resourceVersion, kept in `store` by name (removed
        where the kind is DELETED), and its watch event, recorded in `history`."""
        self.version += 1
        obj = copy.deepcopy(obj)
        obj["metadata"]["resourceVersion"] = str(self.version)
        if kind == "DELETED":
            store.pop(obj["metadata"]["name"], None)
        else:
            store[obj["metadata"]["name"]] = obj
        event = {"type": kind, "object": obj}
        history.append((self.version, event))
        return event

    def put_slice(self, obj: dict[str, Any], kind: str = "ADDED") -> None:
        """Add or change a ResourceSlice (kind MODIFIED), or remove it (DELETED)."""
        with self.lock:
            event = self._kept(self.slices, self.slice_history, obj, kind)
            watchers = list(self.slice_watchers)
        for inbox, node in watchers:
            if node is None or _slice_node(event["object"]) == node:
                inbox.put(event)

    def put_rule(self, obj: dict[str, Any], kind: str = "ADDED") -> None:
        """Add or change a DeviceTaintRule (kind MODIFIED), or remove it (DELETED)."""
        with self.lock:
            event = self._kept(self.rules, self.rule_history, obj, kind)
            watchers = list(self.rule_watchers)
        for inbox in watchers:
            inbox.put(event)

    def add(self, pod: dict[str, Any]) -> None:
        self.pods[pod["metadata"]["uid"]] = pod
        self._event("ADDED", pod)

    def modify(self, pod: dict[str, Any]) -> None:
        self.pods[pod["metadata"]["uid"]] = pod
        self._event("MODIFIED", pod)

    def delete(self, uid: str) -> None:
        self._event("DELETED", self.pods.pop(uid))

    def garbage(self, line: bytes) -> None:
        """A line in the pod watch stream that is no event (a proxy's or a truncated write's),
        kept in the history as events are, so that a watch resumed before it sees it again."""
        with self.lock:
            self.version += 1
            self.history.append((self.version, {"raw": line}))
            watchers = list(self.watchers)
        for w in watchers:
            w.put({"raw": line})

    def bookmark(self) -> None:
        self._event("BOOKMARK", {"kind": "Pod", "apiVersion": "v1", "metadata": {}})

    def expire(self) -> None:
        """Compact history: open and future watches from older versions get 410 Gone."""
        with self.lock:
            self.compacted = self.version + 1
            watchers = list(self.watchers)
        gone = {
            "type": "ERROR",
            "object": {
                "kind": "Status",
                "apiVersion": "v1",
                "status": "Failure",
                "message": "too old resource version",
                "reason": "Expired",
                "code": 410,
            },
        }
        for w in watchers:
            w.put(gone)

    def cut(self) -> None:
        with self.lock:
            watchers = [*self.watchers, *self.rule_watchers]
        for w in watchers:
            w.put(CUT)

    def wait_for_watchers(self, n: int = 1, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                if len(self.watchers) >= n:
                    return
            time.sleep(0.01)
        raise AssertionError(f"no {n} watcher(s) connected")

    def rewatched(self, before: int, timeout: float = 10.0) -> None:
        """Wait for a watch request after the first `before` ones, and for it to be connected."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                if self.count("watch") > before and self.watchers:
                    return
            time.sleep(0.01)
        raise AssertionError("the client never watched again")

    def add_pod(
        self,
        namespace: str,
        name: str,
        node: str,
        labels: dict[str, str],
        phase: str = "Running",
    ) -> dict[str, Any]:
        """A pod as the namespaced list shows it (for the proxies' tests)."""
        pod = {
            "kind": "Pod",
            "apiVersion": "v1",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "uid": f"uid-{namespace}-{name}",
                "labels": labels,
            },
            "spec": {"nodeName": node},
            "status": {"phase": phase, "podIP": "10.0.0.1" if phase == "Running" else None},
        }
        self.add(pod)
        return pod

    def count(self, kind: str) -> int:
        return sum(1 for k, _ in self.requests if k == kind)

    # -- HTTP -----------------------------------------------------------------------------------

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _json(self, status: int, doc: Any) -> None:
                body = json.dumps(doc).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _status(self, code: int, message: str) -> None:
                self._json(
                    code,
                    {
                        "kind": "Status",
                        "apiVersion": "v1",
                        "status": "Failure",
                        "message": message,
                        "code": code,
                    },
                )

            def do_PATCH(self) -> None:
                url = urlparse(self.path)
                kind = server.kind_of(url.path, {})
                length = int(self.headers.get("Content-Length", "0") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                server.requests.append((kind, {}))
                if (
                    self.headers.get("Authorization", "").removeprefix("Bearer ")
                    not in server.tokens
                ):
                    return self._status(401, "Unauthorized")
                if (hold := server.holds.get(kind)) is not None:
                    hold.wait()
                failures = server.failures.get(kind)
                if failures:
                    return self._status(failures.pop(0), f"injected failure of {kind}")
                content_type = self.headers.get("Content-Type", "")
                with server.lock:
                    server.patches.append((url.path, content_type, body))
                if kind == "event-patch":
                    if content_type != "application/merge-patch+json":
                        return self._status(415, f"{content_type} is not a merge patch")
                    found = server.patch_event(url.path, body)
                    if found is None:
                        return self._status(404, "no such event")
                    return self._json(200, found)
                if kind == "node-status":
                    if content_type != "application/strategic-merge-patch+json":
                        return self._status(415, f"{content_type} is not a strategic merge patch")
                    node = url.path.split("/")[4]
                    return self._json(200, server.patch_conditions(node, body))
                return self._status(404, f"{url.path} is not served here")

            def do_POST(self) -> None:
                url = urlparse(self.path)
                kind = {
                    "/apis/authentication.k8s.io/v1/tokenreviews": "tokenreview",
                    "/apis/authorization.k8s.io/v1/subjectaccessreviews": "subjectaccessreview",
                }.get(url.path, server.kind_of(url.path, {}))
                length = int(self.headers.get("Content-Length", "0") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                server.requests.append((kind, {}))
                if (
                    self.headers.get("Authorization", "").removeprefix("Bearer ")
                    not in server.tokens
                ):
                    return self._status(401, "Unauthorized")
                if (hold := server.holds.get(kind)) is not None:
                    hold.wait()
                time.sleep(server.delays.get(kind, 0))
                failures = server.failures.get(kind)
                if failures:
                    return self._status(failures.pop(0), f"injected failure of {kind}")
                if kind == "event":
                    return self._json(201, server.create_event(url.path, body))
                spec = body.get("spec") or {}
                server.reviews.append((kind, spec))
                if kind == "tokenreview":
                    user = server.identities.get(spec.get("token", ""))
                    status: dict[str, Any] = (
                        {"authenticated": True, "user": user}
                        if user
                        else {"authenticated": False, "error": "invalid bearer token"}
                    )
                elif kind == "subjectaccessreview":
                    path = (spec.get("nonResourceAttributes") or {}).get("path", "")
                    verb = (spec.get("nonResourceAttributes") or {}).get("verb", "")
                    subjects = [spec.get("user", "")] + [
                        f"group:{g}" for g in spec.get("groups") or ()
                    ]
                    allowed = verb == "get" and any((s, path) in server.allowed for s in subjects)
                    status = {"allowed": allowed}
                    if not allowed:
                        status["reason"] = "no RBAC policy matched"
                else:
                    return self._status(404, f"{url.path} is not served here")
                return self._json(201, {**body, "status": status})

            def do_GET(self) -> None:
                url = urlparse(self.path)
                query = parse_qs(url.query)
                kind = server.kind_of(url.path, query)
                server.requests.append((kind, query))
                if (
                    self.headers.get("Authorization", "").removeprefix("Bearer ")
                    not in server.tokens
                ):
                    return self._status(401, "Unauthorized")
                time.sleep(server.delays.get(kind, 0))
                failures = server.failures.get(kind)
                if failures:
                    return self._status(failures.pop(0), f"injected failure of {kind}")
                if kind == "watch":
                    return self._watch(query)
                if kind == "dra-group":
                    if not server.dra_versions:
                        return self._status(404, "the server could not find the requested resource")
                    versions = [
                        {"groupVersion": f"resource.k8s.io/{v}", "version": v}
                        for v in server.dra_versions
                    ]
                    return self._json(
                        200,
                        {
                            "kind": "APIGroup",
                            "name": "resource.k8s.io",
                            "versions": versions,
                            "preferredVersion": versions[0],
                        },
                    )
                if kind in ("slices", "slice-watch", "claim", "rules", "rule-watch"):
                    version = url.path.split("/")[3]
                    served = server.rule_versions if kind.startswith("rule") else []
                    if version not in server.dra_versions or (
                        kind.startswith("rule") and version not in served
                    ):
                        return self._status(404, f"{url.path} is not served here")
                if kind == "rules":
                    with server.lock:
                        items = [copy.deepcopy(o) for o in server.rules.values()]
                        meta = {"resourceVersion": str(server.version)}
                    return self._json(
                        200, {"kind": "DeviceTaintRuleList", "metadata": meta, "items": items}
                    )
                if kind == "rule-watch":
                    return self._watch(query, rules=True)
                if kind == "slices":
                    return self._json(200, server.slice_list(query))
                if kind == "slice-watch":
                    return self._watch(query, slices=True)
                if kind == "claim":
                    parts = url.path.split("/")
                    doc = server.claims.get((parts[5], parts[7]))
                    return self._json(200, doc) if doc else self._status(404, "not found")
                if kind == "list":
                    return self._json(200, server.list_doc(query))
                if kind == "namespaced-list":
                    namespace = url.path.split("/")[4]
                    items = [
                        p for p in server.pods.values() if p["metadata"]["namespace"] == namespace
                    ]
                    selector = query.get("labelSelector", [""])[0]
                    for term in filter(None, selector.split(",")):
                        key, _, value = term.partition("=")
                        items = [
                            p for p in items if p["metadata"].get("labels", {}).get(key) == value
                        ]
                    node = _selected_node(query)
                    if node is not None:
                        items = [p for p in items if p.get("spec", {}).get("nodeName") == node]
                    meta: dict[str, Any] = {}
                    limit = int(query.get("limit", ["0"])[0] or 0)
                    if limit and len(items) > limit:
                        items, meta = items[:limit], {"continue": str(limit)}
                    return self._json(200, {"kind": "PodList", "metadata": meta, "items": items})
                if kind == "proxy":
                    return self._proxy(url.path)
                if kind == "summary":
                    node = url.path.split("/")[4]
                    if node not in server.summaries:
                        return self._status(503, f"node {node} is not reachable")
                    return self._json(200, server.summaries[node])
                if kind == "podmetrics":
                    parts = url.path.split("/")
                    doc = server.pod_metrics.get((parts[5], parts[7]))
                    return self._json(200, doc) if doc else self._status(404, "not found")
                return self._status(404, f"{url.path} is not served here")

            def _proxy(self, path: str) -> None:
                server.proxy_paths.append(path)
                target, _, rest = (
                    unquote(path).removeprefix("/api/v1/namespaces/").partition("/proxy")
                )
                time.sleep(server.proxy_delays.get(target, 0))
                if target in server.proxy_failures:
                    status = server.proxy_failures[target]
                    body = f"injected failure of {target}\n".encode()
                    self.send_response(status)
                    self.send_header("Content-Type", "text/plain")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                    return None
                if target not in server.proxied or rest != "/metrics":
                    return self._status(
                        503, f"error trying to reach service: no endpoint for {target}"
                    )
                body = server.proxied[target].encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return None

            def _chunk(self, data: bytes) -> None:
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()

            def _watch(
                self, query: dict[str, list[str]], slices: bool = False, rules: bool = False
            ) -> None:
                since = int(query.get("resourceVersion", ["0"])[0] or 0)
                timeout = float(query.get("timeoutSeconds", ["300"])[0])
                inbox: queue.Queue[Any] = queue.Queue()
                node = _selected_node(query)
                with server.lock:
                    if rules:
                        backlog = [e for rv, e in server.rule_history if rv > since]
                        server.rule_watchers.append(inbox)
                    elif slices:
                        backlog = [
                            e
                            for rv, e in server.slice_history
                            if rv > since and (node is None or _slice_node(e["object"]) == node)
                        ]
                        server.slice_watchers.append((inbox, node))
                    else:
                        backlog = [e for rv, e in server.history if rv > since]
                        server.watchers.append(inbox)
                    too_old = since < server.compacted
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                try:
                    if too_old:
                        backlog = [
                            {
                                "type": "ERROR",
                                "object": {
                                    "kind": "Status",
                                    "code": 410,
                                    "message": "too old resource version",
                                },
                            }
                        ]
                    for event in backlog:
                        self._chunk(_line(event))
                    deadline = time.monotonic() + timeout
                    while time.monotonic() < deadline:
                        try:
                            event = inbox.get(timeout=0.05)
                        except queue.Empty:
                            continue
                        if event is CUT:
                            self.close_connection = True
                            self.connection.shutdown(2)
                            return
                        self._chunk(_line(event))
                    self._chunk(b"")  # the server's timeout: a normal end of the watch
                except OSError:
                    pass
                finally:
                    with server.lock:
                        if rules:
                            server.rule_watchers.remove(inbox)
                        elif slices:
                            server.slice_watchers.remove((inbox, node))
                        else:
                            server.watchers.remove(inbox)

        return Handler

    def create_event(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """An Event as the API server makes it: named from its generateName, in the path's
        namespace."""
        namespace = path.split("/")[5]
        with self.lock:
            meta = dict(body.get("metadata") or {})
            meta["name"] = f"{meta.get('generateName', 'event.')}{len(self.events):05x}"
            meta["namespace"] = namespace
            made = {**body, "metadata": meta}
            self.events[(namespace, meta["name"])] = made
            return copy.deepcopy(made)

    def patch_event(self, path: str, patch: dict[str, Any]) -> dict[str, Any] | None:
        parts = path.split("/")
        with self.lock:
            found = self.events.get((parts[5], parts[7]))
            if found is None:
                return None
            for key, value in patch.items():  # a JSON merge patch, one level deep
                found[key] = {**found.get(key, {}), **value} if isinstance(value, dict) else value
            return copy.deepcopy(found)

    def patch_conditions(self, node: str, patch: dict[str, Any]) -> dict[str, Any]:
        """Conditions merged by type, as the strategic merge patch of a node's status does."""
        with self.lock:
            held = {c["type"]: c for c in self.conditions.get(node, [])}
            for condition in (patch.get("status") or {}).get("conditions") or ():
                held[condition["type"]] = {**held.get(condition["type"], {}), **condition}
            self.conditions[node] = list(held.values())
            return {"metadata": {"name": node}, "status": {"conditions": self.conditions[node]}}

    def events_on(self, kind: str, name: str) -> list[dict[str, Any]]:
        """The Events regarding one object."""
        with self.lock:
            return [
                copy.deepcopy(e)
                for e in self.events.values()
                if e["regarding"]["kind"] == kind and e["regarding"]["name"] == name
            ]

    @staticmethod
    def kind_of(path: str, query: dict[str, list[str]]) -> str:
        if path.startswith("/apis/events.k8s.io/v1/namespaces/"):
            return "event-patch" if path.count("/") == 7 else "event"
        if path.startswith("/api/v1/nodes/") and path.endswith("/status"):
            return "node-status"
        if path == "/api/v1/pods":
            return "watch" if query.get("watch") == ["true"] else "list"
        if path.startswith("/api/v1/namespaces/") and "/proxy/" in path:
            return "proxy"
        if path.startswith("/api/v1/namespaces/") and path.endswith("/pods"):
            return "namespaced-list"
        if path.startswith("/api/v1/nodes/") and path.endswith("/proxy/stats/summary"):
            return "summary"
        if path.startswith("/apis/metrics.k8s.io/"):
            return "podmetrics"
        if path == "/apis/resource.k8s.io":
            return "dra-group"
        if path.startswith("/apis/resource.k8s.io/") and path.endswith("/resourceslices"):
            return "slice-watch" if query.get("watch") == ["true"] else "slices"
        if path.startswith("/apis/resource.k8s.io/") and "/resourceclaims/" in path:
            return "claim"
        if path.startswith("/apis/resource.k8s.io/") and path.endswith("/devicetaintrules"):
            return "rule-watch" if query.get("watch") == ["true"] else "rules"
        return "other"

    def slice_list(self, query: dict[str, list[str]]) -> dict[str, Any]:
        node = _selected_node(query)
        with self.lock:
            items = [
                copy.deepcopy(o)
                for o in self.slices.values()
                if node is None or _slice_node(o) == node
            ]
            version = self.version
        return {
            "kind": "ResourceSliceList",
            "metadata": {"resourceVersion": str(version)},
            "items": items,
        }

    def list_doc(self, query: dict[str, list[str]]) -> dict[str, Any]:
        selector = query.get("fieldSelector", [""])[0]
        node = selector.removeprefix("spec.nodeName=") if selector else None
        with self.lock:
            items = [
                copy.deepcopy(p)
                for p in self.pods.values()
                if node is None or p.get("spec", {}).get("nodeName") == node
            ]
            version = self.version
        limit = int(query.get("limit", ["0"])[0] or 0)
        start = int(query.get("continue", ["0"])[0] or 0)
        meta: dict[str, Any] = {"resourceVersion": str(version)}
        if limit and start + limit < len(items):
            meta["continue"] = str(start + limit)
        return {
            "kind": "PodList",
            "apiVersion": "v1",
            "metadata": meta,
            "items": items[start : start + limit] if limit else items,
        }


def _line(event: dict[str, Any]) -> bytes:
    """One line of a watch stream: the event's JSON, or the raw bytes `garbage` put there."""
    raw = event.get("raw")
    return raw + b"\n" if isinstance(raw, bytes) else json.dumps(event).encode() + b"\n"


def _selected_node(query: dict[str, list[str]]) -> str | None:
    """`spec.nodeName=<node>` (an empty node: the slices that are no one node's), or None."""
    selector = query.get("fieldSelector", [None])[0]
    if selector is None or not selector.startswith("spec.nodeName="):
        return None
    return selector.removeprefix("spec.nodeName=")


def _slice_node(obj: dict[str, Any]) -> str:
    return str(obj.get("spec", {}).get("nodeName") or "")


def _key_and_name(common_name: str) -> tuple[ec.EllipticCurvePrivateKey, x509.Name]:
    return ec.generate_private_key(ec.SECP256R1()), x509.Name(
        [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    )


@dataclass(frozen=True)
class Authority:
    """A certificate authority of a test: the cluster CA that signs kubelet serving certs."""

    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey

    def pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)


def issue_ca(name: str = "kubernetes") -> Authority:
    key, subject = _key_and_name(name)
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    return Authority(cert, key)


def issue_leaf(ca: Authority, hosts: list[str]) -> tuple[bytes, bytes]:
    """A serving certificate for `hosts` signed by `ca`, as a kubelet gets one through TLS
    bootstrap: (certificate PEM, key PEM)."""
    key, subject = _key_and_name(f"system:node:{hosts[0]}")
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca.cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
        )
        .sign(ca.key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


class FakeKubelet:
    """One node's kubelet on its secure port: GET /stats/summary for a bearer token it knows.
    `delay` seconds before each answer stands in for a kubelet that hangs."""

    def __init__(
        self,
        tmp: Path,
        tokens: set[str],
        ca: Authority | None = None,
        hosts: tuple[str, ...] = ("127.0.0.1",),
    ) -> None:
        if ca is None:
            cert, key = self_signed(list(hosts))  # a kubelet without TLS bootstrap
        else:
            cert, key = issue_leaf(ca, list(hosts))
        tmp.mkdir(parents=True, exist_ok=True)
        (tmp / "kubelet.crt").write_bytes(cert)
        (tmp / "kubelet.key").write_bytes(key)
        self.tokens = tokens
        self.summary: Any = None
        self.delay = 0.0
        self.requests = 0
        self.unauthorized = 0
        kubelet = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _answer(self, status: int, body: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                kubelet.requests += 1
                token = self.headers.get("Authorization", "").removeprefix("Bearer ")
                if token not in kubelet.tokens:
                    kubelet.unauthorized += 1
                    return self._answer(401, b"Unauthorized")
                time.sleep(kubelet.delay)
                if self.path != "/stats/summary" or kubelet.summary is None:
                    return self._answer(404, b"not found")
                with contextlib.suppress(OSError):  # the client may have given up first
                    self._answer(200, json.dumps(kubelet.summary).encode())

        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(tmp / "kubelet.crt", tmp / "kubelet.key")
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.httpd.socket = ctx.wrap_socket(self.httpd.socket, server_side=True)
        self.port = self.httpd.server_address[1]
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def start(self) -> FakeKubelet:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def summary_for(
    pods: Iterator[dict[str, Any]] | list[dict[str, Any]],
    cpu_nano: int = 250_000_000,
    working_set: int = 900 * 1048576,
    storage: int = 40 * 1048576,
) -> dict[str, Any]:
    """A kubelet /stats/summary with the same figures for every pod given."""
    return {
        "node": {"nodeName": "node-1", "cpu": {"usageNanoCores": 4_000_000_000}},
        "pods": [
            {
                "podRef": {
                    "name": p["metadata"]["name"],
                    "namespace": p["metadata"]["namespace"],
                    "uid": p["metadata"]["uid"],
                },
                "cpu": {"time": "2026-11-20T09:00:00Z", "usageNanoCores": cpu_nano},
                "memory": {"time": "2026-11-20T09:00:00Z", "workingSetBytes": working_set},
                "ephemeral-storage": {"usedBytes": storage},
            }
            for p in pods
        ],
    }


def _serve_for_benchmarks() -> None:
    """`python -m tests.kube_server DIR --pods N --rate R`: serve N pods of node-1 and modify one
    of them R times a second, in a process of its own, so a benchmark measures only its client.
    Writes DIR/kubeconfig, then runs until killed.

    For the soak (bench/soak.py): `--churn` deletes a pod and creates a new one (a new UID) at
    each tick instead; `--manufacturer M --device ID` makes the pods hold that card, with an
    agent pod of M on the node; `--kubelet` also serves node-1's kubelet, its summary following
    the pods, and writes its port to DIR/kubelet-port; `--reader TOKEN` lets TOKEN read
    /metrics and /monitor/snapshot through TokenReview and SubjectAccessReview."""
    import argparse
    import random

    from devicemanager.grants.allocations import GPUSTACK_KEY
    from tests.world import accel, pod

    parser = argparse.ArgumentParser()
    parser.add_argument("dir", type=Path)
    parser.add_argument("--pods", type=int, default=250)
    parser.add_argument("--rate", type=float, default=50.0)
    parser.add_argument("--churn", action="store_true")
    parser.add_argument("--manufacturer", default="nvidia")
    parser.add_argument("--device", default=None)
    parser.add_argument("--kubelet", action="store_true")
    parser.add_argument("--reader", default=None)
    args = parser.parse_args()
    server = FakeApiServer(args.dir).start()
    serial = 0

    def make(i: int) -> dict[str, Any]:
        nonlocal serial
        serial += 1
        device = {"id": args.device, "index": 0, "mode": 1} if args.device else None
        obj = pod(
            f"vllm-{i}-{serial}",
            {"main": [device or accel(i % 8, 3, 400_000)]},
            instance=f"model-{i}-{serial}",
            limits={
                "main": {
                    "cpu": "8",
                    "memory": "32Gi",
                    "nvidia.com/gpu.sliced.cores-percentage": "25",
                }
            },
        )
        if args.device:  # the card of the benchmark's own manufacturer, held whole
            note = json.loads(obj["metadata"]["annotations"][GPUSTACK_KEY])
            note["main"]["devices"]["groups"][0]["manufacturer"] = args.manufacturer
            obj["metadata"]["annotations"][GPUSTACK_KEY] = json.dumps(note)
        obj["spec"]["nodeName"] = "node-1"
        return obj

    if args.device:
        agent = pod(f"device-manager-{args.manufacturer}-x1", None, containers=["device-manager"])
        agent["metadata"]["namespace"] = "gpustack-system"
        agent["metadata"]["labels"].update(
            {
                "app.kubernetes.io/component": "device-manager",
                "gpustack.ai/manufacturer": args.manufacturer,
            }
        )
        agent["spec"]["nodeName"] = "node-1"
        agent["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
        server.add(agent)
    objects = [make(i) for i in range(args.pods)]
    for obj in objects:
        server.add(obj)
    kubelet = None
    if args.kubelet:
        kubelet = FakeKubelet(args.dir / "kubelet", set(server.tokens), ca=server.authority)
        kubelet.summary = summary_for(objects)
        kubelet.start()
        (args.dir / "kubelet-port").write_text(str(kubelet.port))
    if args.reader:
        user = "system:serviceaccount:monitoring:soak"
        server.identities = {args.reader: {"username": user, "groups": []}}
        server.allowed = {(user, "/metrics"), (user, "/monitor/snapshot")}
    server.kubeconfig(args.dir / "kubeconfig.tmp").rename(args.dir / "kubeconfig")
    rng = random.Random(7)
    while True:
        slot = rng.randrange(len(objects))
        if args.churn:
            server.delete(objects[slot]["metadata"]["uid"])
            objects[slot] = make(slot)
            server.add(objects[slot])
            if kubelet is not None:
                kubelet.summary = summary_for(objects)
            # The history the fake keeps for resuming watches would grow without end.
            with server.lock:
                del server.history[: max(0, len(server.history) - 1000)]
        else:
            obj = copy.deepcopy(objects[slot])
            obj["metadata"]["labels"]["heartbeat"] = str(time.monotonic())
            server.modify(obj)
        # Requests the fake records for tests would grow without end, too.
        del server.requests[: max(0, len(server.requests) - 1000)]
        del server.reviews[: max(0, len(server.reviews) - 1000)]
        time.sleep(1 / args.rate)


if __name__ == "__main__":
    _serve_for_benchmarks()
