"""/metrics families from a snapshot: an absent figure has no sample (R-E2); stale = verdict."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from devicemanager.figures import exposition, snapshot
from devicemanager.figures.snapshot import BackendResult
from devicemanager.model import BackendState, BackendStatus, Card, Snapshot, VendorReading


def families(fresh: bool = True, *cards: Card) -> dict[str, list[tuple[dict[str, str], float]]]:
    result = BackendResult(
        status=BackendStatus("nvidia", BackendState.OK, 0.5),
        reading=VendorReading(manufacturer="nvidia", cards=cards),
        read_at=1.0,
    )
    snap = snapshot.assemble(1.0, 15.0, "node-a", [result], round_duration=0.7)
    text = exposition.render(exposition.families(snap, fresh)).decode()
    return {
        f.name: [(s.labels, s.value) for s in f.samples]
        for f in text_string_to_metric_families(text)
    }


def test_absent_figures_publish_no_sample_and_measured_zero_does() -> None:
    idle = Card(
        id="GPU-a", index=0, memory_total_mib=10, memory_used_mib=0, cores_utilization_percent=0.0
    )
    blind = Card(id="GPU-b", index=1, memory_total_mib=10)
    got = families(True, idle, blind)
    assert [
        (labels["id"], v) for labels, v in got["gpustack_accelerator_cores_utilization_percent"]
    ] == [("GPU-a", 0.0)]
    assert [labels["id"] for labels, _ in got["gpustack_accelerator_memory_used_mib"]] == ["GPU-a"]
    assert len(got["gpustack_accelerator_memory_total_mib"]) == 2
    assert got.get("gpustack_accelerator_temperature_celsius", []) == []  # no card has one


def test_labels_and_self_report() -> None:
    got = families(
        True, Card(id="GPU-a", index=3, name="H100", unhealthy=True, unhealthy_reason="gpu_is_lost")
    )
    ((labels, value),) = got["gpustack_accelerator_unhealthy"]
    assert labels == {"node": "node-a", "manufacturer": "nvidia", "id": "GPU-a", "index": "3"}
    assert value == 1.0
    assert got["gpustack_instance_metrics_collector_success"] == [({"source": "snapshot"}, 1.0)]
    assert got["gpustack_instance_metrics_collector_duration_seconds"] == [
        ({"source": "snapshot"}, 0.7)
    ]
    assert got["gpustack_accelerator_backend_up"] == [
        ({"node": "node-a", "manufacturer": "nvidia"}, 1.0)
    ]


def test_a_stale_snapshot_publishes_its_verdict_and_no_figures() -> None:
    got = families(False, Card(id="GPU-a", index=0, memory_total_mib=10))
    assert got["gpustack_instance_metrics_collector_success"] == [({"source": "snapshot"}, 0.0)]
    assert got["gpustack_accelerator_backend_up"][0][1] == 0.0
    assert not any(name.startswith("gpustack_accelerator_memory") for name in got)


def test_gzip_form_decompresses_to_the_plain_bytes() -> None:
    import gzip

    body = b"# TYPE x gauge\nx 1.0\n"
    exp = exposition.Exposition.of(body)
    assert gzip.decompress(exp.gzipped) == body
    assert exposition.Exposition.of(body).gzipped == exp.gzipped  # deterministic


def parsed(
    snap: Snapshot, fresh: bool = True, extras: exposition.Extras = exposition.NO_EXTRAS
) -> dict[str, list[tuple[dict[str, str], float]]]:
    text = exposition.render(exposition.families(snap, fresh, extras)).decode()
    return {
        f.name: [(s.labels, s.value) for s in f.samples]
        for f in text_string_to_metric_families(text)
    }


def test_a_label_value_missing_is_refused_not_shifted_onto_another_label() -> None:
    # Two names, one value: zipping short would publish {id="node-a"}, a series under the wrong
    # identity; the label set is refused instead.
    with pytest.raises(ValueError):
        exposition.labelset(["node", "id"], ["node-a"])
    with pytest.raises(ValueError):
        exposition.GaugeFamily("x", "x", labels=["node"]).add_metric(["node-a", "GPU-a"], 1.0)


def test_build_info_is_1_with_the_version_in_labels_whatever_the_round() -> None:
    extras = exposition.Extras(build=(("version", "1.4.0"), ("python", "3.11.9"), ("sdk", "nvml")))
    result = BackendResult(
        status=BackendStatus("nvidia", BackendState.OK, 0.5),
        reading=VendorReading(manufacturer="nvidia", cards=()),
        read_at=1.0,
    )
    rounds = [
        (snapshot.empty(15.0, "node-a"), True),  # before the first round
        (snapshot.assemble(1.0, 15.0, "node-a", [result]), True),
        (snapshot.assemble(1.0, 15.0, "node-a", [result]), False),  # stale
    ]
    for snap, fresh in rounds:
        assert parsed(snap, fresh, extras)["gpustack_device_manager_build_info"] == [
            ({"version": "1.4.0", "python": "3.11.9", "sdk": "nvml"}, 1.0)
        ]


def test_error_counts_publish_from_the_first_round_and_not_before_it() -> None:
    extras = exposition.Extras(allocation_errors=3, pod_errors={"figures": 2})
    before = parsed(snapshot.empty(15.0, "node-a"), True, extras)
    assert before.get("gpustack_accelerator_allocation_errors", []) == []
    assert before.get("gpustack_accelerator_pod_errors", []) == []
    # A round that ended one second into the epoch is still a round (timestamp > 0).
    result = BackendResult(
        status=BackendStatus("nvidia", BackendState.OK, 0.5),
        reading=VendorReading(manufacturer="nvidia", cards=()),
        read_at=1.0,
    )
    first = parsed(snapshot.assemble(1.0, 15.0, "node-a", [result]), True, extras)
    assert first["gpustack_accelerator_allocation_errors"] == [({}, 3.0)]
    assert first["gpustack_accelerator_pod_errors"] == [
        ({"stage": "grants"}, 0.0),
        ({"stage": "figures"}, 2.0),
        ({"stage": "pod_level"}, 0.0),
    ]
