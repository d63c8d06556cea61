"""`serve`'s settings: flags, each with an environment fallback (R-O4), into one frozen Settings.

Precedence: flag, then environment variable, then default. Node, pod name and namespace also
read the downward-API variables the DaemonSet sets (KUBERNETES_NODE_NAME, …).
"""

from __future__ import annotations

import argparse
import os
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from devicemanager.backend import BACKENDS
from devicemanager.serve import DEFAULT_PORT

DEFAULT_PERIOD = 15.0
MIN_PERIOD = 0.05
DEFAULT_POD_RESOURCES_TIMEOUT = 2.0
KUBELET_PORT = 10250
ACCESS_CONTROL = ("off", "kubernetes")
LOG_LEVELS = ("debug", "info", "warning", "error")
# Flags whose argparse default is left unset, so that Settings can tell "given" from "default":
# --manufacturer beside --replay must agree with the scenario only when it was given.
_TOLD_APART = frozenset({"--manufacturer"})


@dataclass(frozen=True, slots=True)
class Flag:
    name: str
    env: tuple[str, ...]
    help: str
    default: str | None = None


# The table the parser, the README and the manifest test are all checked against.
SERVE_FLAGS: tuple[Flag, ...] = (
    Flag(
        "--manufacturer",
        ("DEVICEMANAGER_MANUFACTURER",),
        f"backends to run, comma-separated: {', '.join(BACKENDS)}, or module:Class",
        "nvidia",
    ),
    Flag(
        "--replay",
        ("DEVICEMANAGER_REPLAY",),
        "run over a recorded node, fixtures/nodes/<scenario>, instead of live libraries",
    ),
    Flag("--bind-address", ("DEVICEMANAGER_BIND_ADDRESS",), "address to listen on", "0.0.0.0"),
    Flag("--secure-port", ("DEVICEMANAGER_SECURE_PORT",), "HTTPS port", str(DEFAULT_PORT)),
    Flag(
        "--cert-dir",
        ("DEVICEMANAGER_CERT_DIR",),
        "directory holding tls.crt and tls.key, reloaded when they change; "
        "unset: a self-signed certificate is made at start",
    ),
    Flag(
        "--monitor-period",
        ("DEVICEMANAGER_MONITOR_PERIOD",),
        "seconds between rounds",
        str(DEFAULT_PERIOD),
    ),
    Flag(
        "--backend-timeout",
        ("DEVICEMANAGER_BACKEND_TIMEOUT",),
        "seconds a round waits for each backend (default: two thirds of the period)",
    ),
    Flag(
        "--liveness-timeout",
        ("DEVICEMANAGER_LIVENESS_TIMEOUT",),
        "seconds without a finished round, or inside one vendor call, before /livez fails "
        "(default: ten periods, at least 60)",
    ),
    Flag(
        "--node-name",
        ("KUBERNETES_NODE_NAME", "DEVICEMANAGER_NODE_NAME"),
        "this node's name (default: the scenario's in replay, else the host name)",
    ),
    Flag("--pod-name", ("KUBERNETES_POD_NAME", "DEVICEMANAGER_POD_NAME"), "this agent's pod"),
    Flag(
        "--pod-namespace",
        ("KUBERNETES_POD_NAMESPACE", "DEVICEMANAGER_POD_NAMESPACE"),
        "this agent's namespace",
    ),
    Flag(
        "--proc-root",
        ("DEVICEMANAGER_PROC_ROOT",),
        "the /proc to resolve vendor PIDs in (default: /proc, or the scenario's in replay)",
    ),
    Flag(
        "--sysfs-root",
        ("DEVICEMANAGER_SYSFS_ROOT",),
        "the sysfs whose PCI bus is compared with what each library enumerates, once a minute "
        "(default: /sys, or the scenario's sys/ in replay, none where it has none)",
    ),
    Flag(
        "--kubeconfig",
        ("KUBECONFIG", "DEVICEMANAGER_KUBECONFIG"),
        "kubeconfig for running outside a cluster (in a pod the service account is used)",
    ),
    Flag(
        "--service-account-dir",
        ("DEVICEMANAGER_SERVICE_ACCOUNT_DIR",),
        "where the pod's service account token, CA and namespace are mounted",
        "/var/run/secrets/kubernetes.io/serviceaccount",
    ),
    Flag(
        "--pods-file",
        ("DEVICEMANAGER_PODS_FILE",),
        "read the node's pods from this PodList file (re-read when it changes) instead of the "
        "API server (default: the scenario's pods.json in replay)",
    ),
    Flag(
        "--pod-resources-socket",
        ("DEVICEMANAGER_POD_RESOURCES_SOCKET",),
        "the kubelet's pod-resources socket, read every period beside the rounds for the "
        "device-plugin grants of pods without an allocation annotation; 'none' turns it off "
        "(default: /var/lib/kubelet/pod-resources/kubelet.sock with a cluster, the scenario's "
        "podresources.json in replay)",
    ),
    Flag(
        "--pod-resources-timeout",
        ("DEVICEMANAGER_POD_RESOURCES_TIMEOUT",),
        "seconds one read of the kubelet's pod-resources socket may take",
        str(DEFAULT_POD_RESOURCES_TIMEOUT),
    ),
    Flag(
        "--vendor-library",
        ("DEVICEMANAGER_VENDOR_LIBRARY",),
        "MANUFACTURER[.LIBRARY]=PATH of a vendor library (or a directory holding it) to load "
        "instead of the default search; without .LIBRARY the backend's main library; "
        "comma-separated or repeated",
    ),
    Flag(
        "--kubelet-host",
        ("KUBERNETES_HOST_IP", "DEVICEMANAGER_KUBELET_HOST"),
        "this node's kubelet, read on its secure port for the pod-level figures (the DaemonSet "
        "passes status.hostIP); unset: no pod-level figures",
    ),
    Flag(
        "--kubelet-port",
        ("DEVICEMANAGER_KUBELET_PORT",),
        "the kubelet's secure port",
        str(KUBELET_PORT),
    ),
    Flag(
        "--kubelet-ca",
        ("DEVICEMANAGER_KUBELET_CA",),
        "CA that signed the kubelet's serving certificate (default: the cluster CA of the "
        "service account or kubeconfig)",
    ),
    Flag(
        "--kubelet-insecure-tls",
        ("DEVICEMANAGER_KUBELET_INSECURE_TLS",),
        "true: do not verify the kubelet's serving certificate (kubelets with self-signed "
        "certificates, no serverTLSBootstrap)",
        "false",
    ),
    Flag(
        "--events",
        ("DEVICEMANAGER_EVENTS",),
        "true: write a Kubernetes Event on the Node and on each holder pod when a card turns "
        "unhealthy or recovers (RBAC: events create and patch)",
        "true",
    ),
    Flag(
        "--node-condition",
        ("DEVICEMANAGER_NODE_CONDITION",),
        "true: set the node condition AcceleratorsHealthy, False naming the unhealthy cards "
        "(RBAC: nodes/status patch, the node-condition overlay)",
        "false",
    ),
    Flag(
        "--access-control",
        ("DEVICEMANAGER_ACCESS_CONTROL",),
        "off, or kubernetes: /metrics and /monitor/snapshot need a bearer token that "
        "TokenReview and SubjectAccessReview (get on the path) accept; probes stay open",
        "off",
    ),
    Flag(
        "--access-review-ttl",
        ("DEVICEMANAGER_ACCESS_REVIEW_TTL",),
        "seconds a token's review is remembered",
        "30",
    ),
    Flag(
        "--http-max-connections",
        ("DEVICEMANAGER_HTTP_MAX_CONNECTIONS",),
        "open connections at most; past it the longest-idle one is closed first",
        "128",
    ),
    Flag(
        "--http-request-timeout",
        ("DEVICEMANAGER_HTTP_REQUEST_TIMEOUT",),
        "seconds a request has to arrive whole (408 after)",
        "10",
    ),
    Flag(
        "--http-max-header-bytes",
        ("DEVICEMANAGER_HTTP_MAX_HEADER_BYTES",),
        "size limit of a request's line and headers (431 past it)",
        "32768",
    ),
    Flag(
        "--http-max-headers",
        ("DEVICEMANAGER_HTTP_MAX_HEADERS",),
        "number of header fields a request may have (431 past it)",
        "100",
    ),
    Flag(
        "--shutdown-timeout",
        ("DEVICEMANAGER_SHUTDOWN_TIMEOUT",),
        "seconds SIGTERM or SIGINT waits for requests in flight before closing; keep it "
        "under the pod's terminationGracePeriodSeconds",
        "5",
    ),
    Flag("--log-level", ("DEVICEMANAGER_LOG_LEVEL",), "debug, info, warning or error", "info"),
    Flag("--log-format", ("DEVICEMANAGER_LOG_FORMAT",), "json or text", "json"),
)


@dataclass(frozen=True, slots=True)
class Settings:
    manufacturers: tuple[str, ...]
    replay: Path | None
    bind_address: str
    secure_port: int
    cert_dir: Path | None
    monitor_period: float
    backend_timeout: float
    liveness_timeout: float
    node_name: str | None
    pod_name: str | None
    pod_namespace: str | None
    proc_root: Path | None
    pods_file: Path | None
    pod_resources_socket: str | None  # a path, "none", or None for the default
    pod_resources_timeout: float
    kubeconfig: Path | None
    service_account_dir: Path
    # manufacturer -> library name ('' = the backend's main library) -> path
    vendor_libraries: Mapping[str, Mapping[str, str]]
    log_level: str
    log_format: str
    kubelet_host: str | None = None
    kubelet_port: int = KUBELET_PORT
    kubelet_ca: Path | None = None
    kubelet_insecure_tls: bool = False
    events: bool = True
    node_condition: bool = False
    access_control: str = "off"
    access_review_ttl: float = 30.0
    http_max_connections: int = 128
    http_request_timeout: float = 10.0
    http_max_header_bytes: int = 32768
    http_max_headers: int = 100
    shutdown_timeout: float = 5.0
    manufacturers_given: bool = False  # by the flag or its variable, not the default
    sysfs_root: Path | None = None


def add_serve_flags(parser: argparse.ArgumentParser, env: Mapping[str, str]) -> None:
    for flag in SERVE_FLAGS:
        from_env = next((env[name] for name in flag.env if env.get(name)), None)
        names = ", ".join(f"${n}" for n in flag.env)
        default = flag.default if flag.name not in _TOLD_APART else None
        parser.add_argument(
            flag.name,
            default=from_env if from_env is not None else default,
            action="append" if flag.name == "--vendor-library" else "store",
            help=f"{flag.help} [{names}]" + (f" (default: {flag.default})" if flag.default else ""),
        )


def _seconds(name: str, value: str | None, default: float) -> float:
    if value is None:
        return default
    try:
        seconds = float(value)
    except ValueError:
        raise SystemExit(f"{name}: {value!r} is not a number of seconds") from None
    if not seconds > 0:
        raise SystemExit(f"{name}: must be positive, got {value!r}")
    return seconds


def _count(name: str, value: str, least: int = 1) -> int:
    try:
        number = int(value)
    except ValueError:
        raise SystemExit(f"{name}: {value!r} is not a whole number") from None
    if number < least:
        raise SystemExit(f"{name}: at least {least}, got {value!r}")
    return number


def _bool(name: str, value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no", ""):
        return False
    raise SystemExit(f"{name}: true or false, got {value!r}")


def _port(name: str, value: str) -> int:
    try:
        port = int(value)
    except ValueError:
        raise SystemExit(f"{name}: {value!r} is not a port") from None
    if not 0 <= port <= 65535:
        raise SystemExit(f"{name}: {port} is out of range")
    return port


def _libraries(values: Sequence[str] | str | None) -> dict[str, dict[str, str]]:
    if values is None:
        return {}
    items = [values] if isinstance(values, str) else list(values)
    out: dict[str, dict[str, str]] = {}
    for item in items:
        for pair in filter(None, (p.strip() for p in item.split(","))):
            name, sep, path = pair.partition("=")
            manufacturer, _, library = name.partition(".")
            if not sep or not manufacturer or not path:
                raise SystemExit(
                    f"--vendor-library: expected MANUFACTURER[.LIBRARY]=PATH, got {pair!r}"
                )
            out.setdefault(manufacturer, {})[library] = path
    return out


def settings_from(args: argparse.Namespace) -> Settings:
    period = _seconds("--monitor-period", args.monitor_period, DEFAULT_PERIOD)
    if period < MIN_PERIOD:
        raise SystemExit(f"--monitor-period: at least {MIN_PERIOD}s")
    timeout = _seconds("--backend-timeout", args.backend_timeout, period * 2 / 3)
    liveness = _seconds("--liveness-timeout", args.liveness_timeout, max(10 * period, 60.0))
    port = _port("--secure-port", args.secure_port)
    if args.log_format not in ("json", "text"):
        raise SystemExit("--log-format: json or text")
    log_level = (args.log_level or "").strip().lower()
    if log_level not in LOG_LEVELS:
        raise SystemExit(f"--log-level: {', '.join(LOG_LEVELS)}; got {args.log_level!r}")
    if args.access_control not in ACCESS_CONTROL:
        raise SystemExit(f"--access-control: {' or '.join(ACCESS_CONTROL)}")
    given = args.manufacturer is not None
    manufacturer = args.manufacturer if given else _default("--manufacturer")
    manufacturers = tuple(m.strip() for m in (manufacturer or "").split(",") if m.strip())
    cert_dir = Path(args.cert_dir) if args.cert_dir else None
    if cert_dir is not None and not cert_dir.is_dir():
        # Said here, before anything starts, rather than as the first reload's FileNotFoundError.
        raise SystemExit(f"--cert-dir: {cert_dir} is not a directory")
    return Settings(
        manufacturers=manufacturers,
        replay=Path(args.replay) if args.replay else None,
        bind_address=args.bind_address,
        secure_port=port,
        cert_dir=cert_dir,
        monitor_period=period,
        backend_timeout=timeout,
        liveness_timeout=liveness,
        node_name=args.node_name or None,
        pod_name=args.pod_name or None,
        pod_namespace=args.pod_namespace or None,
        proc_root=Path(args.proc_root) if args.proc_root else None,
        pods_file=Path(args.pods_file) if args.pods_file else None,
        pod_resources_socket=args.pod_resources_socket or None,
        pod_resources_timeout=_seconds(
            "--pod-resources-timeout", args.pod_resources_timeout, DEFAULT_POD_RESOURCES_TIMEOUT
        ),
        kubeconfig=Path(args.kubeconfig) if args.kubeconfig else None,
        service_account_dir=Path(args.service_account_dir),
        vendor_libraries=_libraries(args.vendor_library),
        log_level=log_level,
        log_format=args.log_format,
        manufacturers_given=given,
        kubelet_host=args.kubelet_host or None,
        kubelet_port=_port("--kubelet-port", args.kubelet_port),
        kubelet_ca=Path(args.kubelet_ca) if args.kubelet_ca else None,
        kubelet_insecure_tls=_bool("--kubelet-insecure-tls", args.kubelet_insecure_tls),
        events=_bool("--events", args.events),
        node_condition=_bool("--node-condition", args.node_condition),
        access_control=args.access_control,
        access_review_ttl=_seconds("--access-review-ttl", args.access_review_ttl, 30.0),
        http_max_connections=_count("--http-max-connections", args.http_max_connections, 2),
        http_request_timeout=_seconds("--http-request-timeout", args.http_request_timeout, 10.0),
        http_max_header_bytes=_count("--http-max-header-bytes", args.http_max_header_bytes, 1024),
        http_max_headers=_count("--http-max-headers", args.http_max_headers, 8),
        shutdown_timeout=_seconds("--shutdown-timeout", args.shutdown_timeout, 5.0),
        sysfs_root=Path(args.sysfs_root) if args.sysfs_root else None,
    )


def _default(name: str) -> str | None:
    return next(f.default for f in SERVE_FLAGS if f.name == name)


def default_service_account_dir(env: Mapping[str, str] = os.environ) -> Path:
    """Where the pod's service account is mounted, as `serve --service-account-dir` finds it:
    the client commands read the token the agent's own reviewer and API client use."""
    flag = next(f for f in SERVE_FLAGS if f.name == "--service-account-dir")
    given = next((env[name] for name in flag.env if env.get(name)), None)
    return Path(given or flag.default or "")


def parse_serve(argv: Sequence[str], env: Mapping[str, str] | None = None) -> Settings:
    parser = argparse.ArgumentParser(prog="devicemanager serve")
    add_serve_flags(parser, os.environ if env is None else env)
    return settings_from(parser.parse_args(list(argv)))


def default_node_name() -> str:
    return socket.gethostname()


def serving_hosts(node_name: str) -> list[str]:
    """The names and addresses a self-signed certificate is made out to."""
    return ["localhost", "127.0.0.1", "::1", node_name, default_node_name()]
