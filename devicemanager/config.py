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

DEFAULT_PORT = 32443
DEFAULT_PERIOD = 15.0
MIN_PERIOD = 0.05
DEFAULT_POD_RESOURCES_TIMEOUT = 2.0


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
        "backends to run, comma-separated: nvidia, or module:Class",
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
        "the kubelet's pod-resources socket, read each round for the device-plugin grants of "
        "pods without an allocation annotation; 'none' turns it off (default: "
        "/var/lib/kubelet/pod-resources/kubelet.sock with a cluster, the scenario's "
        "podresources.json in replay)",
    ),
    Flag(
        "--pod-resources-timeout",
        ("DEVICEMANAGER_POD_RESOURCES_TIMEOUT",),
        "seconds a round waits for the kubelet's pod-resources answer",
        str(DEFAULT_POD_RESOURCES_TIMEOUT),
    ),
    Flag(
        "--vendor-library",
        ("DEVICEMANAGER_VENDOR_LIBRARY",),
        "MANUFACTURER[.LIBRARY]=PATH of a vendor library (or a directory holding it) to load "
        "instead of the default search; without .LIBRARY the backend's main library; "
        "comma-separated or repeated",
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


def add_serve_flags(parser: argparse.ArgumentParser, env: Mapping[str, str]) -> None:
    for flag in SERVE_FLAGS:
        from_env = next((env[name] for name in flag.env if env.get(name)), None)
        names = ", ".join(f"${n}" for n in flag.env)
        parser.add_argument(
            flag.name,
            default=from_env if from_env is not None else flag.default,
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
    try:
        port = int(args.secure_port)
    except ValueError:
        raise SystemExit(f"--secure-port: {args.secure_port!r} is not a port") from None
    if not 0 <= port <= 65535:
        raise SystemExit(f"--secure-port: {port} is out of range")
    if args.log_format not in ("json", "text"):
        raise SystemExit("--log-format: json or text")
    manufacturers = tuple(m.strip() for m in (args.manufacturer or "").split(",") if m.strip())
    return Settings(
        manufacturers=manufacturers,
        replay=Path(args.replay) if args.replay else None,
        bind_address=args.bind_address,
        secure_port=port,
        cert_dir=Path(args.cert_dir) if args.cert_dir else None,
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
        log_level=args.log_level,
        log_format=args.log_format,
    )


def parse_serve(argv: Sequence[str], env: Mapping[str, str] | None = None) -> Settings:
    parser = argparse.ArgumentParser(prog="devicemanager serve")
    add_serve_flags(parser, os.environ if env is None else env)
    return settings_from(parser.parse_args(list(argv)))


def default_node_name() -> str:
    return socket.gethostname()
