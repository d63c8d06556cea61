"""/metrics families from a snapshot: an absent figure has no sample (R-E2); stale = verdict."""

from __future__ import annotations

import dataclasses
import math
import shutil
import subprocess

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from devicemanager.figures import exposition, snapshot
from devicemanager.figures.figures import AcceleratorEntry, InstanceEntries, pod_level
from devicemanager.figures.snapshot import BackendResult
from devicemanager.grants.allocations import Mode
from devicemanager.grants.grants import InstanceRef
from devicemanager.model import (
    BackendState,
    BackendStatus,
    Card,
    CardHealth,
    CardLink,
    Reason,
    Snapshot,
    VendorReading,
)
from devicemanager.model import HealthFigure as H
from devicemanager.node.pods import PodInfo
from devicemanager.round.steps import Round
from tests.conftest import SCENARIOS, scenario_monitor


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
    assert got["gpustack_instance_metrics_collector_success"] == [
        ({"source": "snapshot"}, 1.0),
        ({"source": "backends"}, 1.0),
    ]
    assert got["gpustack_instance_metrics_collector_duration_seconds"] == [
        ({"source": "snapshot"}, 0.7)
    ]
    assert got["gpustack_accelerator_backend_up"] == [
        ({"node": "node-a", "manufacturer": "nvidia"}, 1.0)
    ]


def test_a_stale_snapshot_publishes_its_verdict_and_no_figures() -> None:
    got = families(False, Card(id="GPU-a", index=0, memory_total_mib=10))
    assert got["gpustack_instance_metrics_collector_success"] == [
        ({"source": "snapshot"}, 0.0),
        ({"source": "backends"}, 0.0),
    ]
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


# -- whose labels: the tenant's series name their pod, the agent's name none (R-E6) ------------

# The families that describe another pod; every other family is the agent's own.
TENANT_FAMILIES = (
    "gpustack_instance_accelerator_",
    "gpustack_instance_cpu_",
    "gpustack_instance_memory_",
    "gpustack_instance_storage_",
)


def replayed_round(scenario: str) -> str:
    """One replayed round's /metrics with the pod-level families an exporting agent adds (from
    the scenario's own pods; the kubelet's figures absent, as no kubelet is replayed)."""
    monitor = scenario_monitor(scenario)
    rounds: list[Round] = []
    monitor.outputs = (
        *monitor.outputs,
        rounds.append,
    )  # the round's grants, as an output sees them
    published = monitor.run_round()
    monitor.stop()
    index = monitor.pods() if monitor.pods is not None else None
    pods = exposition.pod_families(published.snapshot, pod_level(index, rounds[0].grants, None))
    return published.metrics.plain.decode() + exposition.render(pods).decode()


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_only_the_tenants_series_carry_namespace_pod_container_and_none_a_target_label(
    scenario: str,
) -> None:
    """Scraped with honor_labels (the shipped PodMonitor and scrape config), a label a series
    carries wins over the target's. So: a tenant's series carries its own `namespace`, `pod`
    and `container` (empty where no one container holds the grant, which keeps the target's
    off too), and the agent's own series carry none of them, so that they get the target's;
    no series carries `instance`, `job` or `endpoint`, which are always the target's."""
    text = replayed_round(scenario)
    tenant = own = pod_level_series = 0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = sample.labels
            assert not set(exposition.TARGET_LABELS) & labels.keys(), sample
            if family.name.startswith(TENANT_FAMILIES):
                tenant += 1
                assert set(exposition.HOLDER_LABELS) <= labels.keys(), sample
                assert labels["namespace"] and labels["pod"], sample
                if not family.name.startswith("gpustack_instance_accelerator_"):
                    pod_level_series += 1
                    assert labels["container"] == "", sample  # the whole pod's figures
            else:
                own += 1
                assert not set(exposition.HOLDER_LABELS) & labels.keys(), sample
    assert own > 0 and pod_level_series > 0
    if scenario != "b200-per-process-unsupported":
        assert tenant > pod_level_series  # there were accelerator series to check


def test_the_holder_is_named_where_one_container_holds_the_grant_and_left_empty_where_two_do() -> (
    None
):
    """`pod` is the pod holding the grant; `container` the one container that holds it, empty
    where two of the pod's containers hold one card (an ambiguous grant, R-G3)."""
    snap = snapshot.assemble(1.0, 15.0, "node-a", [], round_duration=0.1)
    ref = InstanceRef("tenant", "llm", "uid-llm")
    pod = PodInfo(uid="p-1", namespace="tenant", name="llm-0")
    one = AcceleratorEntry("nvidia", "GPU-a", 0, Mode.EXCLUSIVE, memory_total_mib=80, holder="vllm")
    two = AcceleratorEntry("nvidia", "GPU-b", 1, Mode.EXCLUSIVE, memory_total_mib=80)
    text = exposition.render(
        exposition.instance_families(snap, [InstanceEntries(ref, pod, (one, two))])
    ).decode()
    (total,) = [f for f in text_string_to_metric_families(text) if f.name.endswith("total_mib")]
    assert [(s.labels["id"], s.labels["pod"], s.labels["container"]) for s in total.samples] == [
        ("GPU-a", "llm-0", "vllm"),
        ("GPU-b", "llm-0", ""),
    ]
    assert 'container="",' in text  # written, not left out: the scrape target's stays off


# -- the card's health beyond one bit (R-X7) ---------------------------------------------------


def test_a_node_whose_backend_reads_no_health_has_none_of_its_families() -> None:
    """(R-X7) No card with health figures and none unhealthy: not one new family is written, so
    the text of such a node is what it was before issue 29."""
    text = exposition.render(
        exposition.health_families(
            snapshot.assemble(
                1.0,
                15.0,
                "n",
                [
                    BackendResult(
                        status=BackendStatus("amd", BackendState.OK, 0.5),
                        reading=VendorReading("amd", cards=(Card(id="GPU-a", index=0),)),
                        read_at=1.0,
                    )
                ],
            )
        )
    )
    assert text == b""


def test_health_counters_are_typed_counter_in_base_units_and_an_absent_one_has_no_sample() -> None:
    """(R-X7) ECC, energy and PCIe replays are counters named `…_total`; joules and hertz are
    published as the card gives them; an absent figure has no sample, its capability says why,
    and an unhealthy card's reason is a label of its own family beside `unhealthy`."""
    health = CardHealth.of(
        {
            H.ECC_CORRECTED_VOLATILE: 0,
            H.ECC_UNCORRECTED_VOLATILE: 3,
            H.ENERGY_JOULES: 123_456.789,
            H.THROTTLE_REASONS: (("gpu_idle", False), ("hw_slowdown", True)),
            H.CLOCK_SM_HZ: 1_755_000_000,
        },
        reasons=((H.PCIE_REPLAYS, Reason.UNSUPPORTED),),
    )
    card = Card(id="GPU-a", index=0, unhealthy=True, unhealthy_reason="xid_79", health=health)
    result = BackendResult(
        status=BackendStatus("nvidia", BackendState.OK, 0.5),
        reading=VendorReading(manufacturer="nvidia", cards=(card,)),
        read_at=1.0,
    )
    snap = snapshot.assemble(1.0, 15.0, "node-a", [result], round_duration=0.7)
    text = exposition.render(exposition.families(snap, True)).decode()
    types = {
        line.split()[2]: line.split()[3] for line in text.splitlines() if line.startswith("# TYPE")
    }
    assert types["gpustack_accelerator_ecc_errors_total"] == "counter"
    assert types["gpustack_accelerator_energy_joules_total"] == "counter"
    assert types["gpustack_accelerator_clock_hertz"] == "gauge"
    assert "gpustack_accelerator_pcie_replays_total" not in types  # no card has one
    got: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            got.setdefault(s.name, []).append((s.labels, s.value))
    base = {"node": "node-a", "manufacturer": "nvidia", "id": "GPU-a", "index": "0"}
    assert got["gpustack_accelerator_ecc_errors_total"] == [
        (base | {"error": "corrected", "counter": "volatile"}, 0.0),
        (base | {"error": "uncorrected", "counter": "volatile"}, 3.0),
    ]
    assert got["gpustack_accelerator_energy_joules_total"] == [(base, 123_456.789)]
    assert got["gpustack_accelerator_clock_hertz"] == [(base | {"clock": "sm"}, 1.755e9)]
    assert got["gpustack_accelerator_clock_throttle_active"] == [
        (base | {"reason": "gpu_idle"}, 0.0),
        (base | {"reason": "hw_slowdown"}, 1.0),
    ]
    assert "gpustack_accelerator_remapped_rows" not in types
    capability = {
        (ls["figure"], ls["reason"]): v for ls, v in got["gpustack_accelerator_figure_capability"]
    }
    assert capability == {
        ("ecc_corrected_volatile", ""): 1.0,
        ("ecc_uncorrected_volatile", ""): 1.0,
        ("energy_joules", ""): 1.0,
        ("throttle_reasons", ""): 1.0,
        ("clock_sm_hz", ""): 1.0,
        ("pcie_replays", "unsupported"): 0.0,
    }
    assert got["gpustack_accelerator_unhealthy"] == [(base, 1.0)]  # `== 1` still finds it
    # The reason, and what NVIDIA says to do about it (R-X11: XID 79, reboot the node).
    want = base | {"reason": "xid_79", "action": "reboot_node"}
    assert got["gpustack_accelerator_unhealthy_reason"] == [(want, 1.0)]
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (Debian package prometheus; .ci/run installs it)")
    checked = subprocess.run(
        [promtool, "check", "metrics"], input=text.encode(), capture_output=True, check=False
    )
    assert checked.returncode == 0 and checked.stdout + checked.stderr == b"", checked


def test_xid_errors_are_a_counter_per_code_and_error_codes_a_gauge_per_code() -> None:
    """(R-X7) Critical error events are `gpustack_accelerator_xid_errors_total{xid}`, a counter
    per code (`other` past the bound), and the error codes a card reports now are
    `gpustack_accelerator_error_code_active{code}`, 1 each; a card whose XIDs were not read
    has no sample and its capability says why; no card with codes, no family; promtool takes
    the text."""
    counted = Card(
        id="GPU-a",
        index=0,
        health=CardHealth.of({H.XID_ERRORS: (("13", 2), ("79", 1), ("other", 5))}),
    )
    blind = Card(
        id="GPU-b", index=1, health=CardHealth.of(reasons=((H.XID_ERRORS, Reason.UNSUPPORTED),))
    )
    npu = Card(
        id="NPU-a", index=0, health=CardHealth.of({H.ERROR_CODES: ("0x40F84E00", "0x80E01801")})
    )
    results = [
        BackendResult(
            status=BackendStatus(m, BackendState.OK, 0.5),
            reading=VendorReading(manufacturer=m, cards=cards),
            read_at=1.0,
        )
        for m, cards in (("nvidia", (counted, blind)), ("ascend", (npu,)))
    ]
    snap = snapshot.assemble(1.0, 15.0, "node-a", results, round_duration=0.7)
    text = exposition.render(exposition.families(snap, True)).decode()
    types = {
        line.split()[2]: line.split()[3] for line in text.splitlines() if line.startswith("# TYPE")
    }
    assert types["gpustack_accelerator_xid_errors_total"] == "counter"
    assert types["gpustack_accelerator_error_code_active"] == "gauge"
    got: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            got.setdefault(s.name, []).append((s.labels, s.value))
    base = {"node": "node-a", "manufacturer": "nvidia", "id": "GPU-a", "index": "0"}
    assert got["gpustack_accelerator_xid_errors_total"] == [
        (base | {"xid": "13"}, 2.0),
        (base | {"xid": "79"}, 1.0),
        (base | {"xid": "other"}, 5.0),
    ]
    npu_base = {"node": "node-a", "manufacturer": "ascend", "id": "NPU-a", "index": "0"}
    assert got["gpustack_accelerator_error_code_active"] == [
        (npu_base | {"code": "0x40F84E00"}, 1.0),
        (npu_base | {"code": "0x80E01801"}, 1.0),
    ]
    capability = {
        (ls["id"], ls["figure"], ls["reason"]): v
        for ls, v in got["gpustack_accelerator_figure_capability"]
    }
    assert capability == {
        ("GPU-a", "xid_errors", ""): 1.0,
        ("GPU-b", "xid_errors", "unsupported"): 0.0,
        ("NPU-a", "error_codes", ""): 1.0,
    }
    quiet = snapshot.assemble(
        1.0, 15.0, "node-a", [dataclasses.replace(results[0], reading=VendorReading("nvidia"))]
    )
    assert b"xid_errors_total" not in exposition.render(exposition.families(quiet, True))
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (Debian package prometheus; .ci/run installs it)")
    checked = subprocess.run(
        [promtool, "check", "metrics"], input=text.encode(), capture_output=True, check=False
    )
    assert checked.returncode == 0 and checked.stdout + checked.stderr == b"", checked


def test_an_instance_on_an_unhealthy_card_carries_the_reason_and_a_healthy_one_none() -> None:
    """(R-X7) Alerts name the Instances on a card that fails: the grant's `unhealthy` series
    carries the card's reason in `reason`; a healthy grant's has it empty (stored as none), so
    `== 1` still finds exactly the grants on failed cards."""
    snap = snapshot.assemble(1.0, 15.0, "node-a", [], round_duration=0.1)
    ref = InstanceRef("tenant", "llm", "uid-llm")
    pod = PodInfo(uid="p-1", namespace="tenant", name="llm-0")
    failed = AcceleratorEntry(
        "nvidia", "GPU-a", 0, Mode.EXCLUSIVE, unhealthy=True, unhealthy_reason="xid_79"
    )
    healthy = AcceleratorEntry("nvidia", "GPU-b", 1, Mode.EXCLUSIVE, unhealthy=False)
    unread = AcceleratorEntry("nvidia", "GPU-c", 2, Mode.EXCLUSIVE)  # its card is not read
    text = exposition.render(
        exposition.instance_families(snap, [InstanceEntries(ref, pod, (failed, healthy, unread))])
    ).decode()
    (family,) = [
        f
        for f in text_string_to_metric_families(text)
        if f.name == "gpustack_instance_accelerator_unhealthy"
    ]
    assert [(s.labels["id"], s.labels["reason"], s.value) for s in family.samples] == [
        ("GPU-a", "xid_79", 1.0),
        ("GPU-b", "", 0.0),
    ]
    assert all(s.labels["instance_name"] == "llm" for s in family.samples)
    # The other entry families keep their labels: no `reason` on them.
    assert "reason=" not in "".join(
        line for line in text.splitlines() if line.startswith("gpustack_instance_accelerator_mem")
    )


# -- links and placement (R-X3) ------------------------------------------------------------------


def test_links_and_numa_nodes_are_families_of_their_own_and_absent_where_not_read() -> None:
    """(R-X3) One `link_info` series per card, peer and kind; `links` (their count) only where the
    library counts the links; `numa_node` per card that has one; nothing where no card was
    placed (a node whose backend reads no topology serves the text it served before); the text
    passes promtool."""
    plain = Card(id="GPU-c", index=2)
    linked = Card(
        id="GPU-a",
        index=0,
        links=(
            CardLink("GPU-b", "nvlink", 4),
            CardLink("GPU-b", "pcie_switch"),
            CardLink("GPU-b", "pcie_switch"),  # a duplicate: written once
        ),
        numa_node=1,
    )
    result = BackendResult(
        status=BackendStatus("nvidia", BackendState.OK, 0.5),
        reading=VendorReading(manufacturer="nvidia", cards=(linked, plain)),
        read_at=1.0,
    )
    snap = snapshot.assemble(1.0, 15.0, "node-a", [result], round_duration=0.7)
    text = exposition.render(exposition.families(snap, True)).decode()
    got: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            got.setdefault(s.name, []).append((s.labels, s.value))
    pair = {"node": "node-a", "manufacturer": "nvidia", "id": "GPU-a", "peer_id": "GPU-b"}
    assert got["gpustack_accelerator_link_info"] == [
        (pair | {"link": "nvlink"}, 1.0),
        (pair | {"link": "pcie_switch"}, 1.0),
    ]
    assert got["gpustack_accelerator_links"] == [(pair | {"link": "nvlink"}, 4.0)]
    assert got["gpustack_accelerator_numa_node"] == [
        ({"node": "node-a", "manufacturer": "nvidia", "id": "GPU-a", "index": "0"}, 1.0)
    ]
    bare = snapshot.assemble(
        1.0,
        15.0,
        "node-a",
        [dataclasses.replace(result, reading=VendorReading("nvidia", cards=(plain,)))],
    )
    assert list(exposition.topology_families(bare)) == []
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (Debian package prometheus; .ci/run installs it)")
    checked = subprocess.run(
        [promtool, "check", "metrics"], input=text.encode(), capture_output=True, check=False
    )
    assert checked.returncode == 0 and checked.stdout + checked.stderr == b"", checked


# -- label sets made once per card and grant (issue 41's series) -------------------------------

_label_text = st.text(alphabet=st.sampled_from(["a", "z", '"', "\\", "\n", "-", "é"]), max_size=6)


@given(
    base=st.lists(_label_text, min_size=4, max_size=4),
    extra=st.sampled_from(["aaa", "id", "kind", "zzz"]),
    value=_label_text,
)
def test_a_label_set_made_from_a_base_is_the_one_labelset_renders(
    base: list[str], extra: str, value: str
) -> None:
    """exposition.Labels (a card's or a grant's labels escaped and sorted once, split around a
    family's one more label) renders each set byte for byte as `labelset` does, whatever the
    values hold and wherever the extra label sorts; a label the base has already is refused."""
    names = ["node", "manufacturer", "index", "jd"]
    labels = exposition.Labels(names, base)
    assert labels.render((), ()) == exposition.labelset(names, base)
    assert labels.render((extra,), (value,)) == exposition.labelset([*names, extra], [*base, value])
    two = labels.render(("kind", "zzz"), (value, "1"))
    assert two == exposition.labelset([*names, "kind", "zzz"], [*base, value, "1"])
    with pytest.raises(ValueError):
        labels.render(("node",), (value,))


@given(value=st.floats(allow_nan=True, allow_infinity=True) | st.integers(-(2**70), 2**70))
def test_sample_values_are_written_as_prometheus_client_writes_them(value: float) -> None:
    """The renderer's own float text (its repr below 1e6, the rest through floatToGoString) is
    prometheus_client's floatToGoString byte for byte, for every float and an int alike: -0.0,
    the edge at 1e6, NaN and the infinities included."""
    from prometheus_client.utils import floatToGoString

    assert exposition._float(value) == floatToGoString(value)
    edges = (-0.0, 0.0, 999_999.999_999_9, 1e6, 1_234_567.5, -1e7, 5e-324, -math.inf, math.inf)
    for edge in (*edges, math.nan):
        assert exposition._float(edge) == floatToGoString(edge)


def test_a_cards_label_sets_are_kept_for_two_renderings_and_then_forgotten() -> None:
    """labels_of hands out one Labels per label set while two renderings in a row use it (its
    escaping and splits done once); one the last rendering did not use is forgotten at the next
    rotation, so a node whose cards or grants come and go keeps no more than two rounds' sets;
    more than MAX sets between rotations rotate on their own."""
    kept = exposition.LabelsKept()
    names = ["node", "id"]
    first = kept(names, ["n", "GPU-0"])
    assert kept(names, ["n", "GPU-0"]) is first
    kept.rotate()
    assert kept(names, ["n", "GPU-0"]) is first  # used by the previous rendering: kept
    kept.rotate()
    kept.rotate()  # a rendering that did not use it, then another
    again = kept(names, ["n", "GPU-0"])
    assert again is not first
    assert again.render((), ()) == first.render((), ()) == '{id="GPU-0",node="n"}'
    small = exposition.LabelsKept()
    small.MAX = 4  # type: ignore[misc]
    made = [small(names, ["n", str(i)]) for i in range(9)]
    assert len(small._current) <= 4 and len(small._previous) <= 4
    assert small(names, ["n", "8"]) is made[8]


def test_the_label_caches_hold_what_docs_performance_md_says_and_not_one_more() -> None:
    """The two bounds the docs state: 65,536 label sets kept between two renderings (one more
    rotates them, the older generation then held whole), 1,024 two-label sets per base (one
    more starts it again)."""
    kept = exposition.LabelsKept()
    for i in range(65_536):
        kept(["id"], [str(i)])
    assert len(kept._current) == 65_536 and not kept._previous
    kept(["id"], ["one more"])
    assert len(kept._current) == 1 and len(kept._previous) == 65_536
    labels = exposition.Labels(["node"], ["n"])
    for i in range(1_024):
        labels.render(("figure", "reason"), (str(i), ""))
    assert len(labels._joined) == 1_024
    labels.render(("figure", "reason"), ("one more", ""))
    assert len(labels._joined) == 1


def test_a_base_whose_names_and_values_differ_in_number_is_refused() -> None:
    """A base of more names than values (or fewer) is a caller's mistake: refused when a set
    is made from it, never rendered with the values shifted onto other names."""
    labels = exposition.Labels(["node", "id", "index"], ["n", "GPU-0"])
    with pytest.raises(ValueError):
        labels.render(("figure",), ("sm_activity",))
    with pytest.raises(ValueError):
        labels.render(("figure", "reason"), ("sm_activity", ""))


def test_a_label_set_of_two_more_labels_is_kept_per_base_up_to_its_bound() -> None:
    """Labels keeps each two-more-label set it rendered (a capability's figure and reason), the
    same text labelset makes; past MAX_JOINED sets it starts again, so values a tenant chooses
    cannot grow it."""
    labels = exposition.Labels(["node", "id"], ["n", "GPU-0"])
    text = labels.render(("figure", "reason"), ("sm_activity", "unsupported"))
    assert text == exposition.labelset(
        ["node", "id", "figure", "reason"], ["n", "GPU-0", "sm_activity", "unsupported"]
    )
    assert labels.render(("figure", "reason"), ("sm_activity", "unsupported")) is text
    for i in range(exposition.Labels.MAX_JOINED + 5):
        labels.render(("figure", "reason"), (f"f{i}", ""))
    assert len(labels._joined) <= exposition.Labels.MAX_JOINED


def test_grants_refused_is_every_reason_from_the_first_round_and_nothing_before_it() -> None:
    """`gpustack_accelerator_grants_refused` names every reason, 0 where none was refused this
    round (a counter-like gauge a rule can rate without absent series), and has no sample before
    the first round, when nothing was judged yet."""
    from devicemanager.grants.grants import CONTESTED_PARTITION, HELD_BY_ANOTHER_POD

    def refused(timestamp: float, counts: dict[str, int]) -> dict[str, float]:
        snap = snapshot.assemble(timestamp, 15.0, "node-a", [], round_duration=0.1)
        extras = exposition.Extras(grants_refused=counts)
        text = exposition.render(exposition.verdict_families(snap, True, extras)).decode()
        found = {f.name: f for f in text_string_to_metric_families(text)}
        family = found.get("gpustack_accelerator_grants_refused")
        return {} if family is None else {s.labels["reason"]: s.value for s in family.samples}

    assert refused(0.0, {}) == {}
    assert refused(1.0, {}) == {HELD_BY_ANOTHER_POD: 0.0, CONTESTED_PARTITION: 0.0}
    assert refused(1.0, {HELD_BY_ANOTHER_POD: 2}) == {
        HELD_BY_ANOTHER_POD: 2.0,
        CONTESTED_PARTITION: 0.0,
    }
