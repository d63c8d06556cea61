"""/metrics families from a snapshot: an absent figure has no sample (R-E2); stale = verdict."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from devicemanager import exposition, snapshot
from devicemanager.model import BackendState, BackendStatus, Card, VendorReading
from devicemanager.snapshot import BackendResult


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
