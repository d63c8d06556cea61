"""A grant's own activity (issue 41, R-X10): `gpustack_instance_accelerator_<activity>`, the
sample's `activity` and the snapshot's partitions' `activity`, only where the hardware measures
the grant's holder alone (a partition; a whole card no other pod holds). A slice or a Shared
card states its busy time as before and no activity: time-sliced tenants' activity cannot be
told apart.

Each case runs the real monitor round over a node (tests/world.py): grants from annotations,
the slices section, the figures, /metrics.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from devicemanager.figures import figures
from devicemanager.figures.snapshot import from_json, to_json
from devicemanager.grants.node import node_grants
from devicemanager.model import FIGURES, CardHealth, HealthFigure, PartitionReading
from devicemanager.node.pods import PodIndex
from tests.conftest import scenario_monitor
from tests.world import GIB, accel, card, gpu, pod, process, rows, run

H = HealthFigure
SM = "gpustack_instance_accelerator_sm_activity_percent"
TENSOR = "gpustack_instance_accelerator_tensor_activity_percent"
BUSY = "gpustack_instance_accelerator_cores_utilization_percent"
# The H200's one-SM holder (issue 41): 26% busy, 0.2% SM-active.
ONE_SM = CardHealth.of({H.SM_ACTIVITY: 0.2, H.TENSOR_ACTIVITY: 0.0, H.SM_OCCUPANCY: 0.1})


def active_card(n: int, busy: float = 26.0):  # type: ignore[no-untyped-def]
    return replace(card(n, used=600, cores=busy), health=ONE_SM)


def test_a_whole_card_held_alone_states_its_activity_beside_its_busy_time(tmp_path: Path) -> None:
    """R-X10: the notebook that keeps one SM 30% busy reads 26 busy and 0.2 SM-active."""
    result = run(tmp_path, [active_card(0)], [pod("nb", {"main": [accel(0, 1)]}, instance="nb")])
    e = result.entry("nb")
    assert e.cores_utilization_percent == 26.0
    assert dict(e.activity) == {H.SM_ACTIVITY: 0.2, H.SM_OCCUPANCY: 0.1, H.TENSOR_ACTIVITY: 0.0}
    assert result.values(SM, instance_name="nb", mode="Exclusive", id=gpu(0)) == [0.2]
    assert result.values(TENSOR, instance_name="nb", kind="any") == [0.0]
    assert result.values(BUSY, instance_name="nb") == [26.0]
    # Only the figures the card measured: no bandwidth, no pipe series.
    assert "gpustack_instance_accelerator_memory_bandwidth_utilization_percent" not in (
        result.series
    )


def test_a_shared_card_and_a_slice_state_busy_time_and_no_activity(tmp_path: Path) -> None:
    """R-X10: time-sliced tenants take turns on the same SMs; the card's activity is their sum."""
    pods = [
        pod("a", {"main": [accel(0, 2)]}, instance="a"),
        pod("b", {"main": [accel(0, 2)]}, instance="b"),
        pod("s", {"main": [accel(1, 3, 640_000)]}, instance="s"),
    ]
    process(tmp_path / "proc", 101, "s")
    result = run(tmp_path, [active_card(0), active_card(1)], pods, (rows(1, (101, GIB, 10.0)),))
    for name in ("a", "b", "s"):
        e = result.entry(name)
        assert e.cores_utilization_percent is not None and e.activity == (), name
    assert SM not in result.series and TENSOR not in result.series


def test_a_card_two_pods_hold_whole_states_no_activity_for_either(tmp_path: Path) -> None:
    """Two annotations naming one card Exclusive (no kubelet to say which): both are its
    holders, so neither is measured alone."""
    pods = [
        pod("a", {"main": [accel(0, 1)]}, instance="a"),
        pod("b", {"main": [accel(0, 1)]}, instance="b"),
        pod("c", {"main": [accel(1, 1)]}, instance="c"),
    ]
    result = run(tmp_path, [active_card(0), active_card(1)], pods)
    assert result.entry("a").activity == result.entry("b").activity == ()
    assert result.values(SM) == [0.2]  # c's card alone
    assert result.values(SM, instance_name="c") == [0.2]


def test_a_partition_states_its_own_activity_in_metrics_the_snapshot_and_the_sample(
    tmp_path: Path,
) -> None:
    """R-X10: a MIG partition's GPM figures are its holder's own, in every surface."""
    answered = CardHealth.of({H.SM_ACTIVITY: 0.2}, ())
    part = PartitionReading("MIG-a", gpu(4), 9856, 4_100, 0.2, activity=answered)
    holder = pod(
        "nb",
        {
            "main": [
                accel(
                    4, 4, 200_000, allocatedPhysicalProfile="1g.10gb", allocatedPhysicalID="MIG-a"
                )
            ]
        },
        instance="nb",
    )
    result = run(tmp_path, [active_card(4, busy=80.0)], [holder], partitions=(part,))
    e = result.entry("nb")
    assert e.activity == ((H.SM_ACTIVITY, 0.2),)  # the partition's, never its card's
    assert result.values(SM, instance_name="nb", id="MIG-a", mode="Partitioned") == [0.2]
    doc = to_json(result.snapshot)
    (record,) = doc["slices"]["partitions"]
    assert record["activity"] == {"smActivityPercent": 0.2}
    # Read back, the sample computed from the served snapshot says the same.
    view = figures.view_of_document(doc, result.snapshot.timestamp)
    assert view is not None
    (grant,) = node_grants(PodIndex.of([holder])).all()
    assert figures.entry(grant, view).activity == e.activity
    assert from_json(doc).slices == result.snapshot.slices
    sample = figures.entry_json(figures.entry(grant, view))
    assert sample["activity"] == {"smActivityPercent": 0.2}


def test_an_entry_without_activity_leaves_it_out_of_the_sample(tmp_path: Path) -> None:
    result = run(tmp_path, [card(0)], [pod("nb", {"main": [accel(0, 1)]}, instance="nb")])
    assert figures.entry_json(result.entry("nb"))["activity"] is None
    grant_families = {"gpustack_instance_accelerator_" + f.suffix
                      for f, _ in FIGURES.grant_activity_families()}  # fmt: skip
    assert grant_families.isdisjoint(result.series)
    assert result.values(BUSY, instance_name="nb") == [50.0]


def test_every_activity_family_has_its_per_grant_family_with_the_cards_labels() -> None:
    grant = {f.suffix: f for f, _ in FIGURES.grant_activity_families()}
    card_families = {f.suffix: f for f, specs in FIGURES.health_families() if specs[0].activity}
    assert (
        set(grant)
        == set(card_families)
        >= {
            "sm_activity_percent",
            "sm_occupancy_percent",
            "tensor_activity_percent",
            "memory_bandwidth_utilization_percent",
        }
    )
    for suffix, family in grant.items():
        assert family.labels == card_families[suffix].labels
        assert "gpustack_instance_accelerator_" + suffix in FIGURES.family_names()


def test_the_hopper_replay_states_each_partitions_and_the_whole_cards_activity() -> None:
    """h100-mig-gpm: every partition's SM activity, and the Exclusive card's four families,
    are their holders' series, the values the scenario's."""
    monitor = scenario_monitor("h100-mig-gpm")
    published = monitor.run_round()
    monitor.stop()
    samples = {
        f.name: [(s.labels, s.value) for s in f.samples]
        for f in text_string_to_metric_families(published.metrics.plain.decode())
    }
    series = {name: {ls.get("id", ""): (ls, v) for ls, v in got} for name, got in samples.items()}
    snap = published.snapshot
    cards = {c.id: c for g in snap.groups for c in g.cards}
    assert snap.slices is not None
    parts = {p.id: p for p in snap.slices.partitions}
    by_id = series[SM]
    assert set(parts) < set(by_id) and len(by_id) == len(parts) + 1
    for device, (labels, value) in by_id.items():
        if device in parts:
            assert labels["mode"] == "Partitioned"
            activity = parts[device].activity
            assert activity is not None and value == activity.number(H.SM_ACTIVITY)
            continue
        assert labels["mode"] == "Exclusive"
        health = cards[device].health
        assert health is not None and value == health.number(H.SM_ACTIVITY)
        for figure in (H.SM_OCCUPANCY, H.MEMORY_BANDWIDTH_UTILIZATION):
            family = "gpustack_instance_accelerator_" + figure.value
            assert series[family][device][1] == health.number(figure)
        tensor = [v for ls, v in samples[TENSOR] if ls["kind"] == "any" and ls["id"] == device]
        assert tensor == [health.number(H.TENSOR_ACTIVITY)]
