"""The `devicemanager` command: serve, snapshot, record."""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from devicemanager.backend import BackendUnavailable, backend_class
from devicemanager.config import DEFAULT_PORT, add_serve_flags, settings_from
from devicemanager.model import ReadRequest

SNAPSHOT_URL = f"https://127.0.0.1:{DEFAULT_PORT}/monitor/snapshot"


def _cmd_serve(args: argparse.Namespace) -> int:
    from devicemanager.agent import serve

    settings = settings_from(args)
    try:
        return serve(settings)
    except (ValueError, OSError, ImportError) as exc:
        # A wrong flag, scenario, manufacturer or --cert-dir: say which, without a traceback.
        print(f"devicemanager serve: {exc}", file=sys.stderr)
        return 2


def _fmt(value: Any, unit: str = "") -> str:
    return "-" if value is None else f"{value}{unit}"


def render_snapshot(doc: dict[str, Any]) -> str:
    """A snapshot as an operator reads it over `kubectl exec`: one line per card."""
    lines = [
        f"node {doc.get('node') or '?'}  taken {doc.get('timestamp')}  "
        f"period {doc.get('periodSeconds')}s"
    ]
    for backend in doc.get("backends") or []:
        error = f"  ({backend['error']})" if backend.get("error") else ""
        lines.append(f"backend {backend['manufacturer']}: {backend['state']}{error}")
    header = (
        f"{'IDX':>3}  {'ID':<40} {'MEM USED/TOTAL MiB':>20} {'MEM%':>6} {'CORE%':>6} "
        f"{'TEMP':>5} {'POWER W':>8}  HEALTH"
    )
    for group in doc.get("groups") or []:
        lines.append("")
        lines.append(
            f"{group['manufacturer']} (driver {_fmt(group.get('driverVersion'))}, "
            f"read {group.get('timestamp')})"
        )
        lines.append(header)
        for a in group.get("accelerators") or []:
            memory = f"{_fmt(a.get('memoryUsage'))}/{_fmt(a.get('memory'))}"
            health = (
                f"UNHEALTHY {a.get('unhealthyReason') or ''}".strip()
                if a.get("unhealthy")
                else "ok"
            )
            lines.append(
                f"{a.get('index', '?'):>3}  {a.get('id', '?'):<40} {memory:>20} "
                f"{_fmt(a.get('memoryUtilization')):>6} {_fmt(a.get('coresUtilization')):>6} "
                f"{_fmt(a.get('temperature')):>5} {_fmt(a.get('powerUsage')):>8}  {health}"
            )
    if not doc.get("groups"):
        lines.append("no accelerator figures in this snapshot")
    return "\n".join(lines)


def _cmd_snapshot(args: argparse.Namespace) -> int:
    import httpx

    # The agent's certificate is self-signed unless it was given --cert-dir.
    verify: str | bool = args.cacert if args.cacert else False
    try:
        response = httpx.get(args.url, verify=verify, timeout=args.timeout)
        response.raise_for_status()
        doc = response.json()
    except (httpx.HTTPError, ValueError) as exc:
        print(f"devicemanager snapshot: {args.url}: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(doc, indent=2) if args.json else render_snapshot(doc))
    return 0


def _partition(value: str) -> tuple[str, str]:
    parent, sep, partition = value.partition(":")
    if not sep or not parent or not partition:
        raise argparse.ArgumentTypeError("expected PARENT_ID:PARTITION_ID")
    return parent, partition


def provenance(manufacturer: str, library: str | None, kind: str | None) -> dict[str, str]:
    """What a recording may claim to be. Only a shipped backend on the vendor library the
    system resolves is taken for hardware: a backend named `module:Class` or a library given
    by path is a stand-in (the tests' fake libnvidia-ml) until the operator says otherwise."""
    if kind is None:
        kind = "recorded" if ":" not in manufacturer and library is None else "synthetic"
    out = {"kind": kind}
    if library is not None or ":" in manufacturer:
        out["source"] = f"devicemanager record {manufacturer}" + (
            f" --library {library}" if library else ""
        )
    return out


def record(
    manufacturer: str,
    library: str | None,
    processes: bool,
    partitions: Sequence[tuple[str, str]],
    kind: str | None = None,
) -> dict[str, Any]:
    """What a backend's read() returns, wrapped with where and when it was recorded."""
    cls = backend_class(manufacturer)
    backend = cls(library=library) if library else cls()  # type: ignore[call-arg]
    backend.open()
    try:
        payload = backend.read(ReadRequest(partition_ids=frozenset(partitions)))
        if processes:
            # A second read with every card carved, so the fixture holds per-process answers.
            ids = frozenset(c.id for c in backend.parse(payload).cards)
            payload = backend.read(
                ReadRequest(carved_device_ids=ids, partition_ids=frozenset(partitions))
            )
        reading = backend.parse(payload)
    finally:
        backend.close()
    try:
        sdk = {"nvidia": "nvidia-ml-py"}.get(backend.manufacturer)
        sdk_version = f"{sdk} {metadata.version(sdk)}" if sdk else None
    except metadata.PackageNotFoundError:
        sdk_version = None
    meta = {
        **provenance(manufacturer, library, kind),
        "manufacturer": backend.manufacturer,
        "recordedAt": datetime.now(UTC).isoformat(timespec="seconds"),
        "driver": reading.driver_version,
        "sdk": sdk_version,
        "cards": sorted({c.name or "?" for c in reading.cards}),
        "machine": platform.machine(),
    }
    return {"meta": meta, "payload": payload}


def _cmd_record(args: argparse.Namespace) -> int:
    try:
        doc = record(
            args.vendor, args.library, not args.no_processes, args.partition or [], args.kind
        )
    except BackendUnavailable as exc:
        print(f"devicemanager record: {args.vendor} is not available here: {exc}", file=sys.stderr)
        return 2
    except ValueError as exc:
        print(f"devicemanager record: {exc}", file=sys.stderr)
        return 2
    text = json.dumps(doc, indent=2, sort_keys=True) + "\n"
    if args.output:
        Path(args.output).write_text(text)
    else:
        sys.stdout.write(text)
    return 0


def whois(
    pid: int | None, cgroup_file: Path | None, proc_root: Path, pods_file: Path | None
) -> dict[str, Any]:
    """One PID (or a saved cgroup file) resolved as the agent would, as one JSON object."""
    from devicemanager import cgroup
    from devicemanager.attribution import Resolver, place
    from devicemanager.pods import PodIndex

    if cgroup_file is not None:
        parsed = cgroup.parse(cgroup_file.read_text(errors="replace"))
        return {
            "pod_uid": parsed.pod_uid,
            "container_id": parsed.container_id,
            "runtime": parsed.runtime,
            "reason": None if parsed.reason is None else parsed.reason.value,
        }
    assert pid is not None
    index = PodIndex.from_list(json.loads(pods_file.read_text())) if pods_file else None
    identified = Resolver(proc_root).identify(pid)
    identity = identified.identity
    doc: dict[str, Any] = {
        "pid": pid,
        "pod_uid": identity.pod_uid if identity else None,
        "container_id": identity.container_id if identity else None,
        "runtime": identity.runtime if identity else None,
    }
    reason = identified.reason or (identity.reason if identity else None)
    if index is not None and reason is None:
        resolution = place(identified, index)
        reason = resolution.reason
        if resolution.placement is not None:
            pod = index.get(resolution.placement.pod_uid)
            doc.update(
                namespace=pod.namespace if pod else None,
                pod=pod.name if pod else None,
                container=resolution.placement.container,
            )
    doc["reason"] = None if reason is None else reason.value
    return doc


def _cmd_whois(args: argparse.Namespace) -> int:
    if (args.pid is None) == (args.cgroup_file is None):
        print("devicemanager whois: give a PID or --cgroup-file, not both", file=sys.stderr)
        return 2
    try:
        doc = whois(args.pid, args.cgroup_file, args.proc_root, args.pods)
    except (OSError, ValueError) as exc:
        print(f"devicemanager whois: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(doc, indent=2))
    return 0


def _cmd_instance_metrics(args: argparse.Namespace) -> int:
    from devicemanager.figures import InstanceMetricsUnavailable, metrics_json
    from devicemanager.kube.client import KubeClient, KubeError, config_from
    from devicemanager.kube.sampler import InstanceSampler

    config = config_from(args.kubeconfig, args.service_account_dir)
    if config is None:
        print(
            "devicemanager instance-metrics: no cluster: not in a pod and no --kubeconfig",
            file=sys.stderr,
        )
        return 2
    client = KubeClient(config)
    sampler = InstanceSampler(
        client, agent_namespace=args.agent_namespace, snapshot_url=args.snapshot_url
    )
    try:
        sample = sampler.sample(args.namespace, args.name)
    except LookupError as exc:
        print(f"devicemanager instance-metrics: {exc}", file=sys.stderr)
        return 4
    except InstanceMetricsUnavailable as exc:
        print(f"devicemanager instance-metrics: unavailable: {exc}", file=sys.stderr)
        return 3
    except KubeError as exc:
        print(f"devicemanager instance-metrics: {exc}", file=sys.stderr)
        return 2
    finally:
        client.close()
    print(json.dumps(metrics_json(sample), indent=2))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="devicemanager",
        description="Measure what every pod uses of the accelerators it was granted.",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the agent: monitor loop and HTTPS server")
    add_serve_flags(serve, os.environ)
    serve.set_defaults(func=_cmd_serve)

    snap = sub.add_parser("snapshot", help="fetch and print a running agent's snapshot")
    snap.add_argument("--url", default=os.environ.get("DEVICEMANAGER_SNAPSHOT_URL", SNAPSHOT_URL))
    snap.add_argument(
        "--cacert", help="verify the agent against this CA (default: no verification)"
    )
    snap.add_argument("--json", action="store_true", help="print the JSON document, indented")
    snap.add_argument("--timeout", type=float, default=10.0)
    snap.set_defaults(func=_cmd_snapshot)

    rec = sub.add_parser("record", help="write what a real backend reads, as a replay fixture")
    rec.add_argument("vendor", help="manufacturer (nvidia) or module:Class")
    rec.add_argument("--output", "-o", help="file to write (default: standard output)")
    rec.add_argument("--library", help="vendor library path to load")
    rec.add_argument(
        "--kind",
        choices=["recorded", "synthetic"],
        help="what meta.kind claims (default: recorded for a shipped backend on the library "
        "the system resolves; synthetic for --library or a module:Class backend)",
    )
    rec.add_argument(
        "--no-processes",
        action="store_true",
        help="skip the per-process queries (by default every card is asked)",
    )
    rec.add_argument(
        "--partition",
        action="append",
        type=_partition,
        metavar="PARENT:ID",
        help="also read this partition (e.g. GPU-…:MIG-…); repeatable",
    )
    rec.set_defaults(func=_cmd_record)

    who = sub.add_parser("whois", help="which pod and container a host PID belongs to")
    who.add_argument(
        "pid", nargs="?", type=int, help="a host PID, as the vendor library reports it"
    )
    who.add_argument("--cgroup-file", type=Path, help="parse a saved /proc/<pid>/cgroup instead")
    who.add_argument(
        "--proc-root", type=Path, default=Path(os.environ.get("DEVICEMANAGER_PROC_ROOT", "/proc"))
    )
    who.add_argument(
        "--pods",
        type=Path,
        help="the node's pods as a PodList (kubectl get pods -o json), to name "
        "the pod and container and tell unknown pods and containers",
    )
    who.set_defaults(func=_cmd_whois)

    im = sub.add_parser("instance-metrics", help="one Instance's sample, as the worker serves it")
    im.add_argument("namespace")
    im.add_argument("name", help="the GPUStack Instance's name, or a plain pod's")
    im.add_argument("--kubeconfig", type=Path, default=os.environ.get("KUBECONFIG") or None)
    im.add_argument(
        "--service-account-dir",
        type=Path,
        default=Path("/var/run/secrets/kubernetes.io/serviceaccount"),
    )
    im.add_argument(
        "--agent-namespace",
        default=os.environ.get("KUBERNETES_POD_NAMESPACE", "gpustack-system"),
        help="where the Device Managers run (their snapshots are read)",
    )
    im.add_argument("--snapshot-url", help="read this snapshot instead of finding the agents")
    im.set_defaults(func=_cmd_instance_metrics)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    result: int = args.func(args)
    return result


if __name__ == "__main__":
    raise SystemExit(main())
