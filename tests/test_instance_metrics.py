"""The per-Instance sample (R-F7): the same calculation as the exporter, and its degradations."""

from __future__ import annotations

import json

import pytest
from prometheus_client.parser import text_string_to_metric_families

from devicemanager.figures.figures import (
    InstanceMetricsUnavailable,
    PodUsage,
    View,
    exported,
    instance_metrics,
    metrics_json,
    totals,
    view_of_document,
)
from devicemanager.grants.grants import instance_of
from devicemanager.grants.node import node_grants
from devicemanager.grants.quantity import parse_quantity
from devicemanager.node.pods import PodIndex, pod_info
from tests.conftest import FIXED_TIME, NODES, scenario_monitor

FIELDS = {
    "memory_total_mib": "gpustack_instance_accelerator_memory_total_mib",
    "memory_used_mib": "gpustack_instance_accelerator_memory_used_mib",
    "memory_utilization_percent": "gpustack_instance_accelerator_memory_utilization_percent",
    "cores_utilization_percent": "gpustack_instance_accelerator_cores_utilization_percent",
    "temperature_celsius": "gpustack_instance_accelerator_temperature_celsius",
    "power_usage_watts": "gpustack_instance_accelerator_power_usage_watts",
    "unhealthy": "gpustack_instance_accelerator_unhealthy",
}
USAGE = PodUsage(cpu_millicores=1200, memory_mib=20_000, storage_mib=300, timestamp="t")


def scenario(name: str = "h100-8gpu-mixed"):  # type: ignore[no-untyped-def]
    monitor = scenario_monitor(name)
    published = monitor.run_round()
    monitor.stop()
    index = PodIndex.from_list(json.loads((NODES / name / "pods.json").read_text()))
    return published, index, node_grants(index)


@pytest.mark.parametrize("name", ["h100-8gpu-mixed", "b200-per-process-unsupported"])
def test_the_exporter_and_the_sample_agree_field_for_field(name: str) -> None:
    published, index, grants = scenario(name)
    # The sample takes the worker's path: the snapshot as served, read back from its JSON.
    view = view_of_document(json.loads(published.snapshot_json), FIXED_TIME + 1)
    assert view is not None
    series: dict[tuple[str, str, str], float] = {}
    for family in text_string_to_metric_families(published.metrics.plain.decode()):
        for s in family.samples:
            if s.name in FIELDS.values():
                series[(s.name, s.labels["instance_uid"], s.labels["id"])] = s.value
    compared = 0
    for item in exported(index, grants, View.of(published.snapshot), ["nvidia"]):
        sample = instance_metrics(item.instance, item.pod, grants.by_pod[item.pod.uid], USAGE, view)
        assert sample.accelerators is not None
        assert [e.id for e in sample.accelerators] == [e.id for e in item.entries]
        for e in sample.accelerators:
            for attr, family in FIELDS.items():
                value = getattr(e, attr)
                published_value = series.get((family, item.instance.uid, e.id))
                expected = None if value is None else float(value)
                assert published_value == expected, (item.instance.name, e.id, attr)
                compared += 1
    assert compared >= 7 * 5


def test_a_never_started_instance_reads_totals_and_zeros() -> None:
    _, index, grants = scenario()
    pod = next(p for p in index.pods.values() if p.name == "deepseek-r1-distill-0")
    sample = instance_metrics(instance_of(pod), pod, grants.by_pod[pod.uid], None, None, "t0")
    assert (sample.cpu_millicores.total, sample.cpu_millicores.used) == (8000, 0)
    assert (sample.memory_mib.total, sample.memory_mib.used) == (65536, 0)
    assert (sample.storage_mib.total, sample.storage_mib.used) == (0, 0)
    (acc,) = sample.accelerators or ()
    assert (acc.memory_total_mib, acc.memory_used_mib, acc.cores_utilization_percent) == (
        None,
        0,
        0.0,
    )
    doc = metrics_json(sample)
    assert doc["sample"]["accelerators"][0] == {
        "id": acc.id,
        "mode": "Exclusive",
        "memoryUsedMiB": 0,
        "coresUtilizationPercent": 0.0,
    }


def test_a_never_started_instance_with_a_snapshot_states_its_totals() -> None:
    published, index, grants = scenario()
    pod = next(p for p in index.pods.values() if p.name == "deepseek-r1-distill-0")
    sample = instance_metrics(
        instance_of(pod), pod, grants.by_pod[pod.uid], None, View.of(published.snapshot)
    )
    (acc,) = sample.accelerators or ()
    assert (acc.memory_total_mib, acc.memory_used_mib) == (81559, 0)


def test_no_source_measured_something_that_started() -> None:
    _, index, grants = scenario()
    pod = next(p for p in index.pods.values() if p.name == "llama-3-8b-0")
    failures = ["kubelet: connection refused", "metrics.k8s.io: 404 not served"]
    with pytest.raises(InstanceMetricsUnavailable, match="kubelet: connection refused; metrics"):
        instance_metrics(instance_of(pod), pod, grants.by_pod[pod.uid], failures, None)


def test_a_stale_or_unreadable_snapshot_leaves_the_accelerators_out() -> None:
    published, index, grants = scenario()
    doc = json.loads(published.snapshot_json)
    assert view_of_document(doc, FIXED_TIME + 3 * 15 + 1) is None  # older than three periods
    assert view_of_document("garbage", FIXED_TIME) is None
    pod = next(p for p in index.pods.values() if p.name == "llama-3-8b-0")
    sample = instance_metrics(instance_of(pod), pod, grants.by_pod[pod.uid], USAGE, None)
    assert sample.accelerators is None and sample.cpu_millicores.used == 1200
    assert "accelerators" not in metrics_json(sample)["sample"]


def test_totals_sum_regular_containers_only() -> None:
    info = pod_info(
        {
            "metadata": {"uid": "u"},
            "spec": {
                "initContainers": [{"name": "init", "resources": {"limits": {"cpu": "64"}}}],
                "containers": [
                    {
                        "name": "a",
                        "resources": {
                            "limits": {"cpu": "500m", "memory": "1Gi", "ephemeral-storage": "1G"}
                        },
                    },
                    {"name": "b", "resources": {"limits": {"cpu": "1.5"}}},
                    {"name": "sshd"},
                ],
            },
        }
    )
    assert totals(info) == (2000, 1024, 954)  # 10^9 bytes is 953.67 MiB, rounded up


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("500m", "0.5"),
        ("16", "16"),
        ("128Gi", str(128 * 2**30)),
        ("1e3", "1000"),
        ("1E", "1e18"),
        ("1.5", "1.5"),
        ("100M", "1e8"),
        ("2Ki", "2048"),
        ("250u", "0.00025"),
    ],
)
def test_quantities(text: str, value: str) -> None:
    from decimal import Decimal

    assert parse_quantity(text) == Decimal(value)


@pytest.mark.parametrize("text", ["", "m", "1.2.3", "12Qi", "ten"])
def test_bad_quantities(text: str) -> None:
    with pytest.raises(ValueError):
        parse_quantity(text)
