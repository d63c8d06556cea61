"""`summarize --kubeconfig`/`--context`/`--live` (R-X9): the text of HAMi's scheduler, each
node's HAMi vGPU monitor and this agent's pods, asked through the API server, no kubectl.

Where it is found, as the seed's live mode asks: the scheduler's `/metrics` through the API
server's service proxy (`/api/v1/namespaces/{ns}/services/[scheme:]name:port/proxy/metrics`),
each pod of HAMi's device-plugin DaemonSet (its `vgpu-monitor` container, `:9394`) and of this
agent's DaemonSets (`https:…:32443`) through the pod proxy
(`/api/v1/namespaces/{ns}/pods/[scheme:]name:port/proxy/metrics`). The text goes through the
same reader as a file's (`parse`, then `select`): one reader for every input.

Which kubeconfig, as kubectl: `--kubeconfig`, else every file of `$KUBECONFIG` merged (the first
to name a cluster, user or context wins, and the first current-context), else
`~/.kube/config`, else, in a pod, its service account. Connections are lightkube's (the agent's
client too): certificates, tokens, exec plugins.

Bounded: each answer in size, each source in time (connect, each read, and the whole answer),
the pods asked in number (more than `max_pods` matching a selector is refused: narrow with
`--node`). A source that does not answer is that source's error alone, said per node in the
report's sources; only a cluster where nothing answered fails the command.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx2
import msgspec
from lightkube.config.client_adapter import Client as adapter_client
from lightkube.config.client_adapter import ConnectionParams
from lightkube.config.kubeconfig import KubeConfig, SingleConfig
from lightkube.config.models import User
from lightkube.core.exceptions import ConfigError as LightkubeConfigError

from devicemanager.report.model import Report, SourceInfo
from devicemanager.report.parse import Parsed, parse
from devicemanager.report.selection import Selection, select
from devicemanager.report.sources import SourceError

HAMI_NAMESPACE = "kube-system"
# HAMi's chart: the scheduler Service's `monitor` port (31993, onto the extender's :9395), and
# the device-plugin DaemonSet whose vgpu-monitor container serves :9394 (plain HTTP).
SCHEDULER_SERVICE = "hami-scheduler:31993"
MONITOR_SELECTOR = "app.kubernetes.io/component=hami-device-plugin"
MONITOR_PORT = "9394"
# This agent (deploy/base): its DaemonSets' selector, and its HTTPS port.
AGENT_NAMESPACE = "gpustack-system"
AGENT_SELECTOR = "app.kubernetes.io/name=gpustack-device-manager"
AGENT_PORT = "https:32443"
MAX_PODS = 1000
MAX_KUBECONFIG_BYTES = 16 << 20
MAX_LIST_BYTES = 64 << 20
PARALLEL = 16  # sources asked at once
SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")


class TooManyPods(SourceError):
    """More pods match than the report may ask: the whole command is refused, not cut."""


class ConfigError(Exception):
    """A kubeconfig or context that cannot be used: a usage error; the message names it."""


@dataclass(frozen=True, slots=True)
class Settings:
    """What to ask, where, within what."""

    hami_namespace: str = HAMI_NAMESPACE
    scheduler: str | None = SCHEDULER_SERVICE  # [scheme:]name:port; None: not asked
    monitor_selector: str | None = MONITOR_SELECTOR  # None: monitors not asked
    monitor_port: str = MONITOR_PORT  # [scheme:]port
    agent_namespace: str = AGENT_NAMESPACE
    agent_selector: str | None = AGENT_SELECTOR  # None: agents not asked
    agent_port: str = AGENT_PORT
    node: str | None = None  # only pods on this node
    timeout: float = 10.0
    max_bytes: int = 64 * 1024 * 1024
    max_pods: int = MAX_PODS


@dataclass(frozen=True, slots=True)
class Target:
    """One source to ask: what the report calls it, the API server's path to it, and why it is
    not asked (a pod not running) where it is not."""

    kind: str  # scheduler | monitor | agent
    name: str
    path: str | None
    node: str | None
    skipped: str | None = None


@dataclass(frozen=True, slots=True)
class Answer:
    target: Target
    text: str | None
    error: str | None


@dataclass(frozen=True, slots=True)
class Gathered:
    """Every source's answer, and the parsed text of those that answered, selected."""

    answers: tuple[Answer, ...]
    parsed: tuple[Parsed, ...]

    @property
    def answered(self) -> int:
        return sum(1 for a in self.answers if a.error is None)


# -- kubeconfig -------------------------------------------------------------------------------


def kubeconfig_files(
    given: Path | None, environ: Mapping[str, str] = os.environ
) -> tuple[tuple[Path, ...], str]:
    """The files to merge and what to call them in messages: --kubeconfig, else $KUBECONFIG
    (a list, as kubectl: the files that exist), else ~/.kube/config where it exists."""
    if given is not None:
        return (given,), "--kubeconfig"
    if environ.get("KUBECONFIG"):
        files = tuple(Path(p).expanduser() for p in environ["KUBECONFIG"].split(os.pathsep) if p)
        return tuple(f for f in files if f.is_file()), "$KUBECONFIG"
    home = Path(environ.get("HOME", "~")).expanduser() / ".kube" / "config"
    return ((home,) if home.is_file() else ()), "~/.kube/config"


def _absolute(value: str | None, base: Path) -> str | None:
    return str(base / value) if value and not Path(value).is_absolute() else value


def _read(path: Path, label: str) -> KubeConfig:
    """One file, bounded, with the files it names made absolute against its own folder (as
    kubectl resolves them), so that files merged from several folders keep their meaning."""
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise ConfigError(f"{label}: {path}: {exc.strerror or exc}") from None
    if size > MAX_KUBECONFIG_BYTES:
        raise ConfigError(f"{label}: {path} is larger than 16 MiB: not a kubeconfig")
    try:
        config = KubeConfig.from_file(path)
    except KeyError as exc:  # lightkube indexes the sections without checking them
        raise ConfigError(f"{label}: {path} has no {exc.args[0]!r} section") from None
    except Exception as exc:  # YAML's, msgspec's or lightkube's own errors on a bad file
        raise ConfigError(f"{label}: {path} cannot be used: {exc}") from None
    base = path.resolve().parent
    for name, cluster in config.clusters.items():
        ca = _absolute(cluster.certificate_auth, base)
        config.clusters[name] = msgspec.structs.replace(cluster, certificate_auth=ca)
    for name, user in config.users.items():
        config.users[name] = msgspec.structs.replace(
            user,
            client_cert=_absolute(user.client_cert, base),
            client_key=_absolute(user.client_key, base),
            token_file=_absolute(user.token_file, base),
        )
    return config


def merge(configs: Sequence[KubeConfig]) -> KubeConfig:
    """kubectl's merge: the first file to name a cluster, user or context wins, and the first
    current-context set."""
    clusters: dict[str, Any] = {}
    users: dict[str, Any] = {}
    found: dict[str, Any] = {}
    current = None
    for config in configs:
        for into, entries in (
            (clusters, config.clusters),
            (users, config.users),
            (found, config.contexts),
        ):
            for name, entry in entries.items():
                into.setdefault(name, entry)
        current = current or config.current_context
    fname = configs[0].fname if configs else None
    return KubeConfig(
        clusters=clusters, contexts=found, users=users, current_context=current, fname=fname
    )


def load_kubeconfig(
    given: Path | None,
    environ: Mapping[str, str] = os.environ,
    service_account: Path = SERVICE_ACCOUNT,
) -> tuple[KubeConfig, str]:
    """The merged kubeconfig and where it came from (for messages)."""
    files, label = kubeconfig_files(given, environ)
    if given is not None and not given.is_file():
        raise ConfigError(f"--kubeconfig: {given} is not a file")
    if not files:
        if environ.get("KUBERNETES_SERVICE_HOST") and (service_account / "token").exists():
            try:
                return KubeConfig.from_service_account(service_account), "the service account"
            except Exception as exc:  # lightkube's own errors on a broken mount
                raise ConfigError(f"the service account: {exc}") from None
        raise ConfigError("no cluster: no --kubeconfig, no $KUBECONFIG file, no ~/.kube/config")
    where = f"{label} ({', '.join(map(str, files))})"
    return merge([_read(f, label) for f in files]), where


def contexts(config: KubeConfig) -> list[dict[str, str | None]]:
    """Every context found, as `--list-contexts` prints it."""
    return [
        {
            "name": name,
            "current": "*" if name == config.current_context else None,
            "cluster": ctx.cluster,
            "user": ctx.user,
            "namespace": ctx.namespace,
        }
        for name, ctx in sorted(config.contexts.items())
    ]


def single(config: KubeConfig, context: str | None, where: str) -> SingleConfig:
    """The context to use (--context, else the current one), with its cluster and user."""
    if context is None and config.current_context is None:
        raise ConfigError(f"{where}: no current-context: name one with --context")
    name = context or config.current_context
    if name not in config.contexts:
        known = ", ".join(sorted(config.contexts)) or "none"
        raise ConfigError(f"{where}: no context {name!r} (the contexts: {known})")
    ctx = config.contexts[name]
    if ctx.cluster not in config.clusters:
        raise ConfigError(f"{where}: context {name!r} names cluster {ctx.cluster!r}, not found")
    if ctx.user and ctx.user not in config.users:
        raise ConfigError(f"{where}: context {name!r} names user {ctx.user!r}, not found")
    found = config.get(name)
    assert found is not None
    return found if found.user is not None else found._replace(user=User())


def connect(config: SingleConfig, timeout: float) -> httpx2.Client:
    """An HTTP client to the context's API server, authenticated as the context says."""
    params = ConnectionParams(timeout=httpx2.Timeout(timeout), trust_env=False)
    try:
        return adapter_client(config, params)
    except Exception as exc:  # a certificate file that is not there, an exec plugin that fails
        raise ConfigError(f"context {config.context_name!r} cannot be used: {exc}") from None


# -- where the sources are ----------------------------------------------------------------------


def _scheme_name_port(name: str, port: str) -> str:
    """The proxy's `[scheme:]name:port` from a name and a `[scheme:]port`."""
    scheme, _, number = port.rpartition(":")
    inner = f"{name}:{number}"
    return f"{scheme}:{inner}" if scheme else inner


def service_path(namespace: str, service: str) -> str:
    """The service proxy's path to a Service's /metrics (`service` is `[scheme:]name:port`)."""
    return (
        f"/api/v1/namespaces/{quote(namespace)}/services/{quote(service, safe=':')}/proxy/metrics"
    )


def pod_path(namespace: str, pod: str, port: str) -> str:
    """The pod proxy's path to a pod's /metrics (`port` is `[scheme:]port`)."""
    part = _scheme_name_port(pod, port)
    return f"/api/v1/namespaces/{quote(namespace)}/pods/{quote(part, safe=':')}/proxy/metrics"


def pod_targets(kind: str, namespace: str, port: str, pods: Sequence[Any]) -> list[Target]:
    """One target per pod, by node then name; a pod not running is not asked, with why."""
    out: list[Target] = []
    for pod in pods:
        if not isinstance(pod, dict):
            continue
        meta = pod.get("metadata") or {}
        name = str(meta.get("name", ""))
        node = (pod.get("spec") or {}).get("nodeName") or None
        phase = (pod.get("status") or {}).get("phase") or "Unknown"
        display = f"pod {namespace}/{_scheme_name_port(name, port)}"
        skipped = None
        if meta.get("deletionTimestamp"):
            skipped = "not asked: the pod is terminating"
        elif phase != "Running":
            skipped = f"not asked: the pod is {phase}"
        out.append(Target(kind, display, pod_path(namespace, name, port), node, skipped))
    return sorted(out, key=lambda t: (t.node or "", t.name))


# -- asking -------------------------------------------------------------------------------------


def _message(status: int, body: bytes) -> str:
    text = " ".join(body[:2048].decode("utf-8", "replace").split())
    try:
        doc = json.loads(body[:65536])
        if isinstance(doc, dict) and doc.get("message"):
            text = " ".join(str(doc["message"]).split())
    except (ValueError, RecursionError):  # RecursionError: nested deeper than the decoder goes
        pass
    return f"HTTP {status}" + (f": {text[:200]}" if text else "")


def fetch(
    client: httpx2.Client,
    path: str,
    timeout: float,
    max_bytes: int,
    params: Mapping[str, str] | None = None,
) -> bytes:
    """One GET through the API server, bounded in size and, as a whole, in time."""
    deadline = time.monotonic() + timeout
    chunks: list[bytes] = []
    size = 0
    try:
        with client.stream(
            "GET", path, params=params, headers={"Accept": "text/plain, */*"}, timeout=timeout
        ) as response:
            for chunk in response.iter_bytes():
                size += len(chunk)
                if size > max_bytes:
                    raise SourceError(
                        f"larger than {max_bytes} bytes (raise --max-bytes to read it)"
                    )
                if time.monotonic() > deadline:
                    raise SourceError(f"not whole within {timeout:g} s (--timeout)")
                chunks.append(chunk)
            status = response.status_code
    except httpx2.TimeoutException:
        raise SourceError(f"no answer within {timeout:g} s (--timeout)") from None
    except httpx2.HTTPError as exc:
        raise SourceError(f"{type(exc).__name__}: {exc}") from None
    except LightkubeConfigError as exc:  # an exec plugin or token file that fails per request
        raise SourceError(f"the context's credentials: {exc}") from None
    body = b"".join(chunks)
    if status != 200:
        raise SourceError(_message(status, body))
    return body


def list_pods(
    client: httpx2.Client, namespace: str, selector: str, settings: Settings
) -> list[Any]:
    """The pods a selector matches (on `settings.node` only, where given); more than
    `max_pods` is refused."""
    params = {"labelSelector": selector, "limit": str(settings.max_pods)}
    if settings.node is not None:
        params["fieldSelector"] = f"spec.nodeName={settings.node}"
    path = f"/api/v1/namespaces/{quote(namespace)}/pods"
    body = fetch(client, path, settings.timeout, MAX_LIST_BYTES, params)
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError):  # RecursionError: nested deeper than the decoder goes
        raise SourceError("the pod list is not JSON") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("items", []), list):
        raise SourceError("the answer is not a pod list")
    items = list(doc.get("items") or ())
    if (doc.get("metadata") or {}).get("continue") or len(items) > settings.max_pods:
        raise TooManyPods(
            f"more than {settings.max_pods} pods match {selector} in {namespace} "
            "(narrow the report with --node, or raise --max-pods)"
        )
    return items


def _targets(client: httpx2.Client, settings: Settings) -> tuple[list[Target], list[Answer]]:
    """Every source to ask, and the listings that did not answer (as sources of their own)."""
    targets: list[Target] = []
    failed: list[Answer] = []
    if settings.scheduler is not None:
        name = f"service {settings.hami_namespace}/{settings.scheduler}"
        path = service_path(settings.hami_namespace, settings.scheduler)
        targets.append(Target("scheduler", name, path, None))
    for kind, namespace, selector, port in (
        ("monitor", settings.hami_namespace, settings.monitor_selector, settings.monitor_port),
        ("agent", settings.agent_namespace, settings.agent_selector, settings.agent_port),
    ):
        if selector is None:
            continue
        try:
            pods = list_pods(client, namespace, selector, settings)
        except TooManyPods:
            raise
        except SourceError as exc:
            listing = Target(kind, f"pods {namespace} {selector}", None, settings.node)
            failed.append(Answer(listing, None, f"listing the pods: {exc}"))
            continue
        targets.extend(pod_targets(kind, namespace, port, pods))
    return targets, failed


def _ask(client: httpx2.Client, target: Target, settings: Settings) -> Answer:
    if target.skipped is not None or target.path is None:
        return Answer(target, None, target.skipped or "not asked")
    try:
        body = fetch(client, target.path, settings.timeout, settings.max_bytes)
    except SourceError as exc:
        return Answer(target, None, str(exc))
    return Answer(target, body.decode("utf-8", errors="replace"), None)


def gather(client: httpx2.Client, settings: Settings, selection: Selection) -> Gathered:
    """Every source's answer (at most PARALLEL asked at once), and the text of those that
    answered through the one reader, with what `selection` keeps."""
    targets, failed = _targets(client, settings)
    with ThreadPoolExecutor(max_workers=PARALLEL) as pool:
        answers = list(pool.map(lambda t: _ask(client, t, settings), targets))
    answers.extend(failed)
    parsed = [parse(a.target.name, a.text) for a in answers if a.text is not None]
    return Gathered(tuple(answers), select(parsed, selection))


def with_sources(report: Report, answers: Sequence[Answer]) -> Report:
    """The report with every source asked: what it read of each that answered, and why each
    other did not, with its kind and node."""
    read = {s.name: s for s in report.sources}
    out: list[SourceInfo] = []
    for a in answers:
        t = a.target
        if a.error is None and t.name in read:
            out.append(replace(read[t.name], kind=t.kind, node=t.node))
        else:
            out.append(SourceInfo(t.name, None, None, None, t.kind, t.node, a.error or "no text"))
    return replace(report, sources=tuple(out))
