"""A small node built in a test: cards, per-process rows, pods and a /proc tree, run through the
real monitor round (grants, attribution, slices, figures, /metrics)."""

from __future__ import annotations

import hashlib
import json
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from devicemanager.agent.monitor import BackendWorker, Monitor
from devicemanager.figures.figures import InstanceEntries, View, exported
from devicemanager.figures.published import Published
from devicemanager.grants.node import node_grants
from devicemanager.model import (
    Card,
    DeviceProcesses,
    PartitionReading,
    Payload,
    ProcessRow,
    ReadRequest,
    Snapshot,
    VendorReading,
)
from devicemanager.node.attribution import Attributor
from devicemanager.node.pods import PodIndex

MIB = 1048576
GIB = 1024 * MIB
CARD_MIB = 81559  # an H100 80GB HBM3 as NVML reports it


def uid(name: str) -> str:
    return str(uuid.UUID(hashlib.md5(name.encode()).hexdigest()))


def cid(pod: str, container: str) -> str:
    return hashlib.sha256(f"{pod}/{container}".encode()).hexdigest()


def gpu(n: int) -> str:
    return f"GPU-{uid(f'gpu{n}')}"


def card(n: int, used: int = 1000, cores: float | None = 50.0) -> Card:
    return Card(
        id=gpu(n),
        index=n,
        name="NVIDIA H100 80GB HBM3",
        memory_total_mib=CARD_MIB,
        memory_used_mib=used,
        cores_utilization_percent=cores,
        temperature_celsius=40.0 + n,
        power_usage_watts=100.0 + n,
    )


def accel(n: int, mode: int, units: int = 1_600_000, **extra: Any) -> dict[str, Any]:
    return {"id": gpu(n), "index": n, "mode": mode, "allocated": units, **extra}


def pod(
    name: str,
    grants: dict[str, list[dict[str, Any]]] | None = None,
    *,
    containers: list[str] | None = None,
    instance: str | None = None,
    instance_uid: str | None = None,
    started: bool = True,
    limits: dict[str, dict[str, str]] | None = None,
    annotations: dict[str, str] | None = None,
    created: str = "2026-11-20T08:00:00Z",
    pod_uid: str | None = None,
) -> dict[str, Any]:
    names = containers or sorted(grants or {"main": []})
    meta: dict[str, Any] = {
        "name": name,
        "namespace": "ns",
        "uid": pod_uid or uid(name),
        "creationTimestamp": created,
        "labels": {},
        "annotations": dict(annotations or {}),
    }
    if grants is not None:
        meta["annotations"]["device.gpustack.ai/accelerator.allocated"] = json.dumps(
            {
                c: {
                    "devices": {
                        "groups": [{"id": 0, "manufacturer": "nvidia", "accelerators": accs}]
                    }
                }
                for c, accs in grants.items()
            }
        )
    if instance is not None:
        owner = instance_uid or uid(f"instance/{instance}")
        meta["ownerReferences"] = [
            {
                "apiVersion": "worker.gpustack.ai/v1",
                "kind": "Instance",
                "name": instance,
                "uid": owner,
                "controller": True,
            }
        ]
        meta["labels"]["app.kubernetes.io/part-of"] = owner
    state = {"running": {}} if started else {"waiting": {"reason": "ContainerCreating"}}
    return {
        "metadata": meta,
        "spec": {
            "containers": [
                {"name": c, "resources": {"limits": (limits or {}).get(c, {})}} for c in names
            ]
        },
        "status": {
            "phase": "Running" if started else "Pending",
            "containerStatuses": [
                {
                    "name": c,
                    "containerID": f"containerd://{cid(name, c)}" if started else None,
                    "state": state,
                }
                for c in names
            ],
        },
    }


def process(
    proc: Path,
    pid: int,
    pod_name: str | None,
    container: str = "main",
    comm: str = "python3",
    pod_uid: str | None = None,
) -> None:
    """A /proc/<pid> for a process of `pod_name`'s container, or a host process when None."""
    d = proc / str(pid)
    d.mkdir(parents=True, exist_ok=True)
    if pod_name is None:
        path = "/system.slice/nvidia-persistenced.service"
    else:
        path = f"/kubepods/burstable/pod{pod_uid or uid(pod_name)}/{cid(pod_name, container)}"
    (d / "cgroup").write_text(f"0::{path}\n")
    (d / "comm").write_text(comm + "\n")
    (d / "stat").write_text(
        f"{pid} ({comm}) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 {pid} " + "0 " * 30 + "\n"
    )


def rows(
    device: int,
    *entries: tuple[int, int | None, float | None],
    memory_reason: Any = None,
    cores_reason: Any = None,
) -> DeviceProcesses:
    return DeviceProcesses(
        gpu(device),
        tuple(ProcessRow(p, m, c) for p, m, c in entries),
        memory_reason=memory_reason,
        cores_reason=cores_reason,
    )


class ReadingBackend:
    """Answers every round with a VendorReading built by the test."""

    manufacturer = "nvidia"

    def __init__(self, reading: VendorReading) -> None:
        self.reading = reading
        self.requests: list[ReadRequest] = []

    def open(self) -> None:
        pass

    def read(self, request: ReadRequest) -> Payload:
        self.requests.append(request)
        return {}

    def parse(self, payload: Payload) -> VendorReading:
        return self.reading

    def close(self) -> None:
        pass


@dataclass
class Result:
    published: Published
    snapshot: Snapshot
    instances: tuple[InstanceEntries, ...]
    backend: ReadingBackend
    series: dict[str, list[tuple[dict[str, str], float]]] = field(default_factory=dict)

    def entry(self, instance_name: str, entry_id: str | None = None) -> Any:
        found = [
            e
            for i in self.instances
            if i.instance.name == instance_name
            for e in i.entries
            if entry_id is None or e.id == entry_id
        ]
        assert len(found) == 1, (instance_name, entry_id, found)
        return found[0]

    def values(self, family: str, **labels: str) -> list[float]:
        return [
            v
            for ls, v in self.series.get(family, [])
            if all(ls.get(k) == want for k, want in labels.items())
        ]


def run(
    tmp: Path,
    cards: list[Card],
    pods: list[dict[str, Any]],
    processes: tuple[DeviceProcesses, ...] = (),
    partitions: tuple[PartitionReading, ...] = (),
) -> Result:
    reading = VendorReading("nvidia", tuple(cards), processes, partitions, "550.90.07")
    backend = ReadingBackend(reading)
    index = PodIndex.of(pods)
    monitor = Monitor(
        [BackendWorker(backend)],
        period=15,
        deadline=5,
        liveness_timeout=60,
        node="node-1",
        pods=lambda: index,
        attributor=Attributor(tmp / "proc"),
    )
    published = monitor.run_round()
    monitor.stop()
    snap = published.snapshot
    instances = exported(index, node_grants(index), View.of(snap), ["nvidia"])
    series = {
        f.name: [(s.labels, s.value) for s in f.samples]
        for f in text_string_to_metric_families(published.metrics.plain.decode())
    }
    return Result(published, snap, instances, backend, series)
