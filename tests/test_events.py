"""Health that acts (R-X11): a card turning unhealthy or recovering writes one Kubernetes Event
(`events.k8s.io/v1`) on the Node and one on each pod holding a grant on it, with the reason and
the action its manufacturer documents; the same fault seen again grows the Event's series
instead of writing another; a hanging API server delays no round (the writer's thread and its
bounded queue, past which a note is dropped and counted); the opt-in node condition
`AcceleratorsHealthy` names the unhealthy cards. Against the tests' fake API server, through
the agent's own client.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from devicemanager.agent.acting import Acting
from devicemanager.agent.config import parse_serve
from devicemanager.agent.selfmetrics import event_families
from devicemanager.agent.wiring import event_writer, round_outputs
from devicemanager.figures import snapshot
from devicemanager.figures.exposition import Extras
from devicemanager.kube.client import KubeClient, config_from
from devicemanager.kube.events import EventWriter
from devicemanager.round import health
from devicemanager.round.steps import PodRef, Round, UnhealthyCard
from tests.kube_server import FakeApiServer

NODE = "gpu-node-1"
TRAIN = PodRef("uid-train", "ml", "train-0")
SERVE = PodRef("uid-serve", "web", "serve-0")
XID_79 = UnhealthyCard("nvidia", "GPU-aaa", "xid_79", (TRAIN, SERVE), 3, "reboot_node")


def round_with(*cards: UnhealthyCard) -> Round:
    return Round(snapshot.empty(15.0, NODE), Extras(), None, (), tuple(cards))


@pytest.fixture
def api(tmp_path: Path) -> Iterator[FakeApiServer]:
    server = FakeApiServer(tmp_path).start()
    yield server
    for hold in server.holds.values():
        hold.set()
    server.stop()


def client_for(api: FakeApiServer, tmp: Path, timeout: float = 5) -> KubeClient:
    config = config_from(api.kubeconfig(tmp / "kubeconfig"))
    assert config is not None
    client = KubeClient(config, timeout=timeout)
    api.closers.append(client.close)
    return client


def writer_for(client: KubeClient, **bounds: float) -> EventWriter:
    # Bounds set so that only what a test is about can stop a write.
    defaults: dict[str, float] = {"burst": 10_000, "refill": 0.0, "flush": 0.0}
    writer = EventWriter(client, NODE, **{**defaults, **bounds})  # type: ignore[arg-type]
    writer.start()
    return writer


def arrived(api: FakeApiServer, kind: str) -> None:
    """Until the server has received a request of `kind` (a wait on a fact, not a time)."""
    got = threading.Event()
    for _ in range(2000):  # a bound, so that a writer that never asks fails the test
        if api.count(kind):
            return
        got.wait(0.01)
    raise AssertionError(f"no {kind} request reached the server")


# -- what one round's unhealthy cards say (R-X11) --------------------------------------------


def test_notices_name_each_unhealthy_card_and_each_recovered_one() -> None:
    other = UnhealthyCard("nvidia", "GPU-bbb", "row_remap_pending", (), 1, "reset_card")
    assert health.notices((), (XID_79,)) == (health.Notice(health.UNHEALTHY, XID_79),)
    # Still unhealthy: the same notice (its Event's series grows); the other card recovered.
    assert health.notices((XID_79, other), (XID_79,)) == (
        health.Notice(health.UNHEALTHY, XID_79),
        health.Notice(health.RECOVERED, other),
    )
    assert health.notices((XID_79,), ()) == (health.Notice(health.RECOVERED, XID_79),)


def test_the_node_condition_names_the_cards_or_says_all_are_healthy() -> None:
    sick = health.condition((XID_79,))
    assert not sick.healthy
    assert sick.message == "nvidia 3 GPU-aaa: xid_79 (reboot_node)"
    many = health.condition(
        tuple(UnhealthyCard("amd", f"c{i}", "device_lost", (), i) for i in range(20))
    )
    assert many.message.endswith("; and 4 more")
    assert health.condition(()).healthy


# -- Events through the fake API server (R-X11) ----------------------------------------------


def test_a_card_turning_unhealthy_writes_one_event_on_the_node_and_each_holder(
    api: FakeApiServer, tmp_path: Path
) -> None:
    writer = writer_for(client_for(api, tmp_path))
    acting = Acting(writer, NODE)
    acting(round_with(XID_79))
    writer.idle()
    writer.stop()
    assert len(api.events) == 3
    (node,) = api.events_on("Node", NODE)
    assert node["metadata"]["namespace"] == "default"
    assert node["reason"] == "AcceleratorUnhealthy"
    assert node["action"] == "reboot_node"
    assert node["type"] == "Warning"
    assert node["reportingController"] == "gpustack.ai/devicemanager"
    assert "card 3 (GPU-aaa)" in node["note"] and "xid_79" in node["note"]
    for pod in (TRAIN, SERVE):
        (event,) = api.events_on("Pod", pod.name)
        assert event["metadata"]["namespace"] == pod.namespace
        assert event["regarding"] == {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": pod.name,
            "namespace": pod.namespace,
            "uid": pod.uid,
        }
        assert event["action"] == "reboot_node"
        assert event["note"] == node["note"]
    assert writer.counts()["posted"] == 3


def test_a_thousand_rounds_of_the_same_fault_write_no_new_event_the_series_grows(
    api: FakeApiServer, tmp_path: Path
) -> None:
    writer = writer_for(client_for(api, tmp_path), flush=3600.0)
    acting = Acting(writer, NODE)
    for _ in range(1000):
        acting(round_with(XID_79))
    writer.idle()
    writer.stop()  # writes the series seen since the last write
    assert api.count("event") == 3  # one POST per object, ever
    assert len(api.events) == 3
    for event in api.events.values():
        assert event["series"]["count"] == 1000
        assert event["series"]["lastObservedTime"].endswith("Z")
    assert all(kind == "application/merge-patch+json" for _, kind, _ in api.patches)
    assert writer.counts() == {
        "posted": 3,
        "patched": 3,
        "dropped": 0,
        "limited": 0,
        "failed": 0,
    }


def test_recovery_writes_one_event_and_a_relapse_grows_the_first_one(
    api: FakeApiServer, tmp_path: Path
) -> None:
    lone = UnhealthyCard("nvidia", "GPU-aaa", "xid_79", (), 3, "reboot_node")
    writer = writer_for(client_for(api, tmp_path))
    acting = Acting(writer, NODE)
    acting(round_with(lone))
    for _ in range(5):  # recovered, then healthy for a while: one Event, not one a round
        acting(round_with())
    writer.idle()
    recovered = [e for e in api.events_on("Node", NODE) if e["reason"] == "AcceleratorRecovered"]
    assert len(recovered) == 1
    assert recovered[0]["type"] == "Normal"
    assert recovered[0]["action"] == "none"  # nothing more to do; the note says what it was
    assert "healthy again" in recovered[0]["note"]
    acting(round_with(lone))  # the same fault again: the first Event's series, no new Event
    writer.idle()
    writer.stop()
    assert len(api.events_on("Node", NODE)) == 2
    (unhealthy,) = [e for e in api.events_on("Node", NODE) if e["reason"] == "AcceleratorUnhealthy"]
    assert unhealthy["series"]["count"] == 2


def test_a_hanging_api_server_delays_no_round_and_what_does_not_fit_is_dropped_and_counted(
    api: FakeApiServer, tmp_path: Path
) -> None:
    api.holds["event"] = threading.Event()  # every Event POST waits until the test ends
    writer = writer_for(client_for(api, tmp_path, timeout=60), queue_size=4)
    acting = Acting(writer, NODE)
    cards = [
        UnhealthyCard("nvidia", f"GPU-{i}", "xid_79", (TRAIN,), i, "reboot_node") for i in range(50)
    ]
    acting(round_with(cards[0]))
    arrived(api, "event")  # the writer's first request is held by the server
    for i in range(1, 1000):
        acting(round_with(cards[i % 50]))  # each round a new card turns unhealthy
    # Every round returned while the server still holds the writer's first request.
    assert api.count("event") == 1
    assert not api.holds["event"].is_set()
    counts = writer.counts()
    assert counts["dropped"] > 0
    assert counts["posted"] == 0
    family = event_families(counts)[0]
    assert family.name == "gpustack_device_manager_events_total"
    assert ('{outcome="dropped"}', float(counts["dropped"])) in family.samples
    api.holds["event"].set()
    writer.idle()
    writer.stop()


def test_the_rate_bound_leaves_out_what_is_past_it_and_counts_it(
    api: FakeApiServer, tmp_path: Path
) -> None:
    writer = writer_for(client_for(api, tmp_path), burst=2, refill=3600.0)
    acting = Acting(writer, NODE)
    acting(round_with(XID_79))  # three Events wanted, two allowed
    writer.idle()
    writer.stop()
    assert len(api.events) == 2
    assert writer.counts()["limited"] == 1


def test_an_api_server_that_refuses_is_counted_and_the_next_round_tries_again(
    api: FakeApiServer, tmp_path: Path
) -> None:
    lone = UnhealthyCard("nvidia", "GPU-aaa", "xid_79", (), 3, "reboot_node")
    api.failures["event"] = [403]
    writer = writer_for(client_for(api, tmp_path))
    acting = Acting(writer, NODE)
    acting(round_with(lone))
    writer.idle()
    assert writer.counts()["failed"] == 1
    assert api.events == {}
    acting(round_with(lone))
    writer.idle()
    writer.stop()
    assert len(api.events) == 1


def test_the_node_condition_is_opt_in_and_patched_when_it_changes(
    api: FakeApiServer, tmp_path: Path
) -> None:
    writer = writer_for(client_for(api, tmp_path))
    acting = Acting(writer, NODE, events=False, condition=True)
    for _ in range(10):
        acting(round_with(XID_79))
    writer.idle()
    (condition,) = api.conditions[NODE]
    assert condition["type"] == "AcceleratorsHealthy"
    assert condition["status"] == "False"
    assert condition["reason"] == "AcceleratorsUnhealthy"
    assert "GPU-aaa: xid_79 (reboot_node)" in condition["message"]
    assert api.count("node-status") == 1  # ten rounds, one change
    acting(round_with())
    writer.idle()
    writer.stop()
    assert api.conditions[NODE][0]["status"] == "True"
    assert api.count("node-status") == 2
    assert api.events == {}  # --events=false: none written
    assert all(
        kind == "application/strategic-merge-patch+json"
        for path, kind, _ in api.patches
        if path.endswith("/status")
    )


def test_serve_registers_the_writer_only_where_it_can_write(tmp_path: Path) -> None:
    settings = parse_serve([], env={})
    assert settings.events and not settings.node_condition
    assert event_writer(settings, None, NODE) is None  # no cluster: nothing to write to
    assert round_outputs(settings, None, NODE) == ()
    off = parse_serve(["--events", "false"], env={})
    assert event_writer(off, None, NODE) is None
    on = parse_serve(["--node-condition", "true"], env={})
    assert on.node_condition


def test_the_monitors_rounds_go_on_while_the_api_server_holds_their_events(
    api: FakeApiServer, tmp_path: Path
) -> None:
    # The replayed DRA node: card 6 tainted `gpu.nvidia.com/xid=79` by its driver (NVIDIA: a
    # reboot), a card the slices offer that the library lost (`not_enumerated`: unknown), card 3
    # under an admin's NoExecute DeviceTaintRule and card 0 the kubelet calls Unhealthy (neither
    # names a code the manufacturer documents: unknown).
    from tests.conftest import scenario_monitor

    api.holds["event"] = threading.Event()
    writer = writer_for(client_for(api, tmp_path, timeout=60))
    monitor = scenario_monitor("a100-dra-only")
    monitor.outputs = (*monitor.outputs, Acting(writer, NODE))
    monitor.run_round()
    arrived(api, "event")
    for _ in range(20):
        monitor.run_round()  # each returns while the first Event is still held
    assert monitor.rounds == 21
    assert api.count("event") == 1
    api.holds["event"].set()
    writer.idle()
    writer.stop()
    actions = {
        e["note"].split(" is unhealthy: ")[1]: e["action"] for e in api.events_on("Node", NODE)
    }
    assert actions == {
        "gpu.nvidia.com/xid=79; action: reboot_node": "reboot_node",
        "not_enumerated; action: unknown": "unknown",
        "example.com/maintenance=hbm-rma; action: unknown": "unknown",
        "kubelet:Unhealthy:XID 48: double-bit ECC error; action: unknown": "unknown",
    }
    for event in api.events_on("Node", NODE):
        assert event["series"]["count"] == 21  # one Event each, seen by every round
