"""The Kubernetes API server: plain JSON over the cluster's one HTTP client (kube/http.py).

kube/config.py resolves where the API server is and how to authenticate: in-cluster (the
service account token, re-read when the server answers 401 after a rotation, and the cluster
CA) or a kubeconfig file (certificates, tokens, exec plugins). Requests return plain JSON
objects, because the pod index is built from them as the API server sends them, and the watch
loop (informer.py) must relist on 410 and follow bookmarks. No model classes: the few
resources the agent reads (pods, ResourceSlices, reviews) are read as the dicts they arrive as.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devicemanager.kube.config import KubeConfig, tls_context
from devicemanager.kube.http import Credentials, Http, HttpError
from devicemanager.node.jsonlist import ListError, Refused, split_list

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
# A plain GET's or POST's answer (a review, a page of a list read by `list_all`) is read no
# further than this; the bounded readers (`get_bytes`, `watch`) have their own bounds.
MAX_ANSWER_BYTES = 64 << 20
# One pod's watch event: the bound a pods file puts on one pod (node/pods.py MAX_POD_BYTES, far
# above what the API server stores) and the event's envelope. A longer line is dropped as it
# arrives, never held whole: the pod keeps its last version, the line is counted as malformed.
MAX_POD_EVENT_BYTES = (4 << 20) + 4096


class KubeError(Exception):
    """A request to the API server that did not answer as asked; `status` is its HTTP code."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True, slots=True)
class WatchEvent:
    type: str  # ADDED, MODIFIED, DELETED, BOOKMARK, ERROR
    object: dict[str, Any]


def config_from(
    kubeconfig: Path | None, service_account: Path = SERVICE_ACCOUNT
) -> KubeConfig | None:
    """In-cluster when the pod's environment says so, else the given kubeconfig, else None."""
    if os.environ.get("KUBERNETES_SERVICE_HOST") and (service_account / "token").exists():
        return KubeConfig.from_service_account(service_account)
    if kubeconfig is not None:
        return KubeConfig.from_file(kubeconfig)
    return None


class KubeClient:
    def __init__(self, config: KubeConfig, timeout: float = 10.0) -> None:
        single = config.get()
        if single is None:
            raise KubeError("the kubeconfig names no current context")
        self._http = Http(
            single.cluster.server, tls_context(single), timeout, Credentials(single.user)
        )
        self.timeout = timeout

    def close(self) -> None:
        self._http.close()

    def get(
        self, path: str, params: dict[str, str] | None = None, timeout: float | None = None
    ) -> Any:
        return self._json("GET", path, params, None, timeout, (200,))

    def _json(
        self,
        method: str,
        path: str,
        params: dict[str, str] | None,
        body: dict[str, Any] | None,
        timeout: float | None,
        ok: tuple[int, ...],
        headers: dict[str, str] | None = None,
    ) -> Any:
        try:
            with self._http.stream(
                method, path, params, body, read=timeout or self.timeout, headers=headers
            ) as response:
                status, text = response.status_code, response.read(MAX_ANSWER_BYTES)
        except HttpError as exc:
            raise KubeError(f"{method} {path}: {exc}") from exc
        if status not in ok:
            raise KubeError(f"{method} {path}: {status} {_message(text)}", status)
        if len(text) > MAX_ANSWER_BYTES:
            raise KubeError(f"{method} {path}: the answer is over {MAX_ANSWER_BYTES} bytes")
        try:
            return json.loads(text)
        except (ValueError, RecursionError) as exc:
            raise KubeError(f"{method} {path}: the answer is not JSON") from exc

    def create(self, path: str, body: dict[str, Any], timeout: float | None = None) -> Any:
        """POST an object and return what the server made of it (a review's `status`, an
        Event's name)."""
        return self._json("POST", path, None, body, timeout, (200, 201))

    def patch(
        self,
        path: str,
        body: dict[str, Any],
        kind: str = "application/merge-patch+json",
        timeout: float | None = None,
    ) -> Any:
        """PATCH an object (`kind`: a JSON merge patch, or a strategic merge patch for a node's
        status conditions) and return what the server made of it."""
        return self._json("PATCH", path, None, body, timeout, (200, 201), {"Content-Type": kind})

    def list_all(
        self, path: str, params: dict[str, str] | None = None, chunk: int = 500
    ) -> tuple[list[dict[str, Any]], str]:
        """Every object a collection holds, in pages, and the resource version of the list."""
        items: list[dict[str, Any]] = []
        query = {**(params or {}), "limit": str(chunk)}
        while True:
            page = self.get(path, query)
            if not isinstance(page, dict):
                raise KubeError(f"GET {path}: the answer is not a list")
            items.extend(i for i in page.get("items") or () if isinstance(i, dict))
            meta = page.get("metadata") or {}
            if not meta.get("continue"):
                return items, str(meta.get("resourceVersion", ""))
            query = {**query, "continue": meta["continue"]}

    def get_bytes(
        self, path: str, params: dict[str, str] | None, max_bytes: int, timeout: float | None = None
    ) -> bytes:
        """The body of a GET, read no further than `max_bytes`: past it the read is abandoned
        (KubeError) before the rest arrives, never buffered and then judged."""
        timeout = timeout or self.timeout
        started = time.monotonic()
        try:
            with self._http.stream("GET", path, params, read=timeout) as response:
                if response.status_code != 200:
                    raise KubeError(
                        f"GET {path}: {response.status_code} {_message(response.read())}",
                        response.status_code,
                    )
                body = bytearray()
                for chunk in response.iter_bytes():
                    body += chunk
                    if len(body) > max_bytes:
                        raise KubeError(f"GET {path}: the answer is over {max_bytes} bytes")
                    if time.monotonic() - started > timeout:
                        raise KubeError(f"GET {path}: no whole answer in {timeout}s")
                return bytes(body)
        except HttpError as exc:
            raise KubeError(f"GET {path}: {exc}") from exc

    def list_bounded(
        self,
        path: str,
        params: dict[str, str] | None,
        chunk: int,
        max_item_bytes: int,
        refused: Callable[[Refused], None],
    ) -> tuple[list[dict[str, Any]], str]:
        """Every object a collection holds, as `list_all`, with each page read no further than
        `chunk` items of `max_item_bytes` and each item decoded on its own: one past its bound,
        or one that does not decode, is handed to `refused` and left out, and the rest is kept."""
        items: list[dict[str, Any]] = []
        query = {**(params or {}), "limit": str(chunk)}
        while True:
            body = self.get_bytes(path, query, chunk * max_item_bytes + (64 << 10))
            try:
                page = split_list(body, max_item_bytes)
            except ListError as exc:
                raise KubeError(f"GET {path}: the answer is not a list: {exc}") from exc
            items.extend(page.items)
            for item in page.refused:
                refused(item)
            meta = page.head.get("metadata")
            meta = meta if isinstance(meta, dict) else {}
            more = meta.get("continue")
            if not more or not isinstance(more, str):
                return items, str(meta.get("resourceVersion", ""))
            query = {**query, "continue": more}

    def list_pods(self, node: str, chunk: int = 500) -> tuple[list[dict[str, Any]], str]:
        """Every pod of one node, in pages, and the resource version of the list."""
        return self.list_all("/api/v1/pods", {"fieldSelector": f"spec.nodeName={node}"}, chunk)

    def watch(
        self,
        path: str,
        params: dict[str, str],
        resource_version: str,
        timeout_seconds: int = 300,
        malformed: Callable[[str], None] | None = None,
        max_line_bytes: int | None = None,
    ) -> Iterator[WatchEvent]:
        """A collection's events after `resource_version`, bookmarks included, until the server
        ends the watch. A 410 (as a status or an ERROR event) raises KubeError(status=410). A
        line that is not an event raises KubeError, or, when `malformed` is given, is handed to
        it and skipped: the watch goes on. With `max_line_bytes`, a longer line is such a line,
        dropped as it arrives: never held whole, never decoded."""
        query = {
            **params,
            "watch": "true",
            "resourceVersion": resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(timeout_seconds),
        }
        try:
            with self._http.stream("GET", path, query, read=timeout_seconds + 30) as response:
                if response.status_code != 200:
                    raise KubeError(
                        f"watch: {response.status_code} {_message(response.read())}",
                        response.status_code,
                    )
                lines: Iterable[bytes | None] = (
                    response.iter_lines()
                    if max_line_bytes is None
                    else bounded_lines(response.iter_bytes(), max_line_bytes)
                )
                for line in lines:
                    if line is None:
                        over = f"a line over {max_line_bytes} bytes"
                        if malformed is None:
                            raise KubeError(f"watch: {over}")
                        malformed(over)
                        continue
                    if not line.strip():
                        continue
                    try:
                        event = _event(line)
                    except KubeError:
                        if malformed is None:
                            raise
                        malformed(line[:80].decode("utf-8", "replace"))
                        continue
                    if event.type == "ERROR":
                        code = event.object.get("code")
                        raise KubeError(
                            f"watch: {event.object.get('message', 'error event')}",
                            code if isinstance(code, int) else None,
                        )
                    yield event
        except HttpError as exc:
            raise KubeError(f"watch: {exc}") from exc

    def watch_pods(
        self,
        node: str,
        resource_version: str,
        timeout_seconds: int = 300,
        malformed: Callable[[str], None] | None = None,
    ) -> Iterator[WatchEvent]:
        """The node's pod events after `resource_version` (see `watch`)."""
        return self.watch(
            "/api/v1/pods",
            {"fieldSelector": f"spec.nodeName={node}"},
            resource_version,
            timeout_seconds,
            malformed,
            max_line_bytes=MAX_POD_EVENT_BYTES,
        )

    def stats_summary(self, node: str) -> Any:
        """The kubelet's /stats/summary, through the API server's node proxy (`nodes/proxy`):
        for the per-Instance sampler, which runs off the node. The agent reads its own kubelet
        directly (kubelet.KubeletClient, `nodes/stats`)."""
        return self.get(f"/api/v1/nodes/{node}/proxy/stats/summary")

    def pod_metrics(self, namespace: str, name: str) -> Any:
        return self.get(f"/apis/metrics.k8s.io/v1beta1/namespaces/{namespace}/pods/{name}")

    def list_namespaced_pods(
        self, namespace: str, labels: str | None = None
    ) -> list[dict[str, Any]]:
        params = {"labelSelector": labels} if labels else None
        page = self.get(f"/api/v1/namespaces/{namespace}/pods", params)
        return [i for i in page.get("items") or () if isinstance(i, dict)]


def _message(body: bytes) -> str:
    """The API server's Status message of an error answer, else the answer's start."""
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError):
        return body[:200].decode("utf-8", "replace")
    return str(doc.get("message", "")) if isinstance(doc, dict) else ""


def bounded_lines(chunks: Iterable[bytes], limit: int) -> Iterator[bytes | None]:
    """Each line of a byte stream, or None for a line longer than `limit`: its bytes are let go
    as they arrive, so a line of any length costs `limit` at most."""
    held = bytearray()
    over = False
    for chunk in chunks:
        start = 0
        while True:
            end = chunk.find(b"\n", start)
            if end < 0:
                if not over:
                    held += chunk[start:]
                    if len(held) > limit:
                        over = True
                        held.clear()
                break
            if not over:
                held += chunk[start:end]
            yield None if over or len(held) > limit else bytes(held)
            held.clear()
            over = False
            start = end + 1
    if over:
        yield None
    elif held:
        yield bytes(held)


def _event(line: bytes) -> WatchEvent:
    try:
        doc = json.loads(line)
    except (ValueError, RecursionError) as exc:
        raise KubeError(f"watch: a line that is not JSON: {line[:80]!r}") from exc
    if not isinstance(doc, dict) or not isinstance(doc.get("object"), dict):
        raise KubeError(f"watch: not an event: {line[:80]!r}")
    return WatchEvent(str(doc.get("type", "")), doc["object"])
