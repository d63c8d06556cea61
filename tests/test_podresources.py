"""The kubelet's pod-resources API, read over real gRPC on a unix socket with the real protos
(R-X2): recorded answers, a slow kubelet past the deadline, an absent socket, kubelets too old
for v1 or for GetAllocatableResources, undecodable bytes; and the committed generated module
checked against its .proto."""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from devicemanager.grants.deviceplugins import MAX_PODS
from devicemanager.kube import podresources_messages as messages
from devicemanager.kube.podresources import (
    PodResourcesClient,
    PodResourcesPoller,
    from_list,
    read_recording,
)
from tests.conftest import FIXED_TIME, NODES, REPO, Agent
from tests.podresources_server import Behaviour, load, serving
from tests.proto import podresources_v1_pb2 as pb

RECORDED = NODES / "a100-device-plugin-only" / "podresources.json"


@pytest.fixture
def socket() -> Iterator[Path]:
    # A short directory: a unix socket path is limited to 107 bytes.
    root = Path(tempfile.mkdtemp(prefix="podres-", dir="/tmp"))
    yield root / "kubelet.sock"
    shutil.rmtree(root, ignore_errors=True)


def test_the_recorded_answer_read_over_grpc_is_what_replay_reads(socket: Path) -> None:
    with serving(socket, Behaviour(load(RECORDED))) as kubelet:
        answer = PodResourcesClient(socket, timeout=5).read()
    assert kubelet.calls == ["List", "GetAllocatableResources"]
    assert answer.ok and answer.error is None and answer.allocatable_error is None
    replayed = read_recording(RECORDED)
    assert (answer.pods, answer.allocatable) == (replayed.pods, replayed.allocatable)
    by_name = {(p.namespace, p.name): p for p in answer.pods or ()}
    (mistral,) = by_name[("serving", "vllm-mistral-0")].devices
    assert mistral.container == "vllm" and mistral.resource == "nvidia.com/mig-3g.40gb"
    assert mistral.device_ids[0].startswith("MIG-")
    assert by_name[("gpu-operator", "nvidia-device-plugin-daemonset-7xk2p")].devices == ()
    assert answer.duration_seconds is not None and answer.duration_seconds >= 0


def test_a_dra_answer_over_grpc_names_each_containers_claims_and_shares(socket: Path) -> None:
    """R-X6: `dynamic_resources` over real gRPC with the upstream messages, as replay reads it,
    each claim device with the CDI ids the kubelet lists for it; a kubelet that answers no
    GetAllocatableResources for DRA (KEP-3695) is still an answer."""
    recorded = NODES / "a100-dra-only" / "podresources.json"
    with serving(socket, Behaviour(load(recorded))) as kubelet:
        answer = PodResourcesClient(socket, timeout=5).read()
    assert kubelet.calls[0] == "List"
    replayed = read_recording(recorded)
    assert answer.pods == replayed.pods
    by_name = {(p.namespace, p.name): p for p in answer.pods or ()}
    batch = by_name[("batch", "batch-infer-0")]
    assert batch.devices == ()
    share, fpga = batch.claims
    assert (share.container, share.claim_namespace, share.claim_name) == (
        "infer",
        "batch",
        "batch-infer-0-share",
    )
    (device,) = share.devices
    assert (device.driver, device.device, device.share_id) == (
        "gpu.nvidia.com",
        "gpu-5",
        "5e0c9a61-3b1f-4d8e-9a57-0c2f7e1b6d44",
    )
    assert device.cdi_devices == (
        "k8s.gpu.nvidia.com/claim=e2211468-4184-4e94-8660-e841bb93d560-gpu-5",
    )
    assert fpga.devices[0].driver == "fpga.example.com" and fpga.devices[0].share_id is None


def test_a_kubelet_slower_than_the_deadline_gives_no_grants_and_says_why(socket: Path) -> None:
    with serving(socket, Behaviour(load(RECORDED), delay=30)):
        answer = PodResourcesClient(socket, timeout=0.3).read()
    assert answer.pods is None and not answer.ok
    assert answer.error == "List: no answer in 0.3s"


def test_an_absent_socket_is_named(socket: Path) -> None:
    answer = PodResourcesClient(socket, timeout=1).read()
    assert answer.pods is None and answer.error is not None
    assert str(socket) in answer.error and "mounted" in answer.error


def test_a_socket_nobody_listens_on_is_unavailable(socket: Path) -> None:
    with serving(socket, Behaviour(load(RECORDED))):
        pass  # the server is gone; its socket file may stay behind, as a dead kubelet's does
    socket.touch(exist_ok=True)
    answer = PodResourcesClient(socket, timeout=1).read()
    assert answer.pods is None and answer.error is not None
    assert answer.error.startswith("List: UNAVAILABLE")


def test_a_kubelet_before_v1_is_too_old(socket: Path) -> None:
    with serving(socket, Behaviour(load(RECORDED), serve_v1=False)):
        answer = PodResourcesClient(socket, timeout=2).read()
    assert answer.pods is None
    assert (
        answer.error == "List: the kubelet does not serve podresources v1 (Kubernetes before 1.20)"
    )


def test_a_kubelet_without_allocatable_still_gives_its_grants(socket: Path) -> None:
    with serving(socket, Behaviour(load(RECORDED), serve_allocatable=False)):
        answer = PodResourcesClient(socket, timeout=2).read()
    assert answer.ok and answer.pods and answer.allocatable is None
    assert answer.allocatable_error is not None and "1.21" in answer.allocatable_error


def test_bytes_that_are_no_message_are_an_error_not_a_crash(socket: Path) -> None:
    with serving(socket, Behaviour(load(RECORDED), garbage=True)):
        answer = PodResourcesClient(socket, timeout=2).read()
    assert answer.pods is None and answer.error is not None
    assert answer.error.startswith("List: INTERNAL")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_an_answer_larger_than_the_bound_is_refused_before_it_is_read(socket: Path) -> None:
    """(R-X2) The kubelet's answer is bounded (MAX_MESSAGE_BYTES): one whose length prefix says
    more is refused, the stream reset, and the error says how large it was; one of exactly the
    bound is read whole."""
    from devicemanager.kube.podresources import MAX_MESSAGE_BYTES

    too_large = MAX_MESSAGE_BYTES + 1
    with serving(socket, Behaviour(load(RECORDED), answer_bytes=too_large)):
        answer = PodResourcesClient(socket, timeout=10).read()
    assert answer.pods is None and answer.error is not None
    assert answer.error == (
        f"List: RESOURCE_EXHAUSTED: an answer of {too_large} bytes, larger than "
        f"{MAX_MESSAGE_BYTES} bytes"
    )
    at_bound = Behaviour(load(RECORDED), answer_bytes=MAX_MESSAGE_BYTES, serve_allocatable=False)
    with serving(socket, at_bound):
        answer = PodResourcesClient(socket, timeout=10).read()
    # 16 MiB of zero bytes, exactly the bound: read whole and then found to be no message.
    assert answer.pods is None and answer.error is not None
    assert answer.error.startswith("List: INTERNAL: the answer is no List response")


def test_a_kubelet_that_restarted_is_read_again_at_the_next_read(socket: Path) -> None:
    """(R-X2) Nothing outlives a read: a kubelet that restarted (a new socket at the same path)
    answers the next read of the same client, as the poller makes it every period."""
    client = PodResourcesClient(socket, timeout=5)
    with serving(socket, Behaviour(load(RECORDED))) as first:
        assert client.read().ok
    socket.unlink(missing_ok=True)
    down = client.read()
    assert not down.ok and down.error is not None and "does not exist" in down.error
    with serving(socket, Behaviour(load(RECORDED))) as second:
        again = client.read()
    assert again.ok and first.calls == second.calls == ["List", "GetAllocatableResources"]


def test_a_failed_read_keeps_the_last_answer_for_three_periods_and_then_drops_it(
    socket: Path,
) -> None:
    """The kubelet answers once and then goes away (its socket file left behind). For three
    periods after that answer (45 s at a 15 s period) its grants stand, said to be old; past
    that they are dropped: absent, never kept forever."""
    clock = Clock()
    poller = PodResourcesPoller(PodResourcesClient(socket, timeout=2), interval=15, mono=clock)
    recorded = read_recording(RECORDED)
    with serving(socket, Behaviour(load(RECORDED))):
        poller.read_once()  # at 1000 s
    socket.touch(exist_ok=True)
    fresh = poller()
    assert fresh.ok and fresh.pods == recorded.pods
    clock.now = 1030.0
    failed = poller.read_once()
    assert failed.pods is None and failed.error is not None
    for now in (1030.0, 1045.0):  # within the bound, its last instant included
        clock.now = now
        kept = poller()
        assert (kept.pods, kept.allocatable) == (recorded.pods, recorded.allocatable)
        assert not kept.ok and kept.error is not None
        assert kept.error.startswith("last read failed (List: UNAVAILABLE")
        assert f"the answer of {now - 1000:.0f}s ago is in use" in kept.error
    clock.now = 1046.0
    dropped = poller()
    assert (dropped.pods, dropped.allocatable) == (None, None) and not dropped.ok
    assert dropped.error is not None and dropped.error.startswith("not answering for 46s (List:")
    assert dropped.error.endswith("older than 45s and no longer used")
    poller.close()


def test_the_staleness_bound_can_be_set() -> None:
    poller = PodResourcesPoller(PodResourcesClient(Path("/nonexistent")), interval=10)
    assert poller.stale_after == 30
    assert PodResourcesPoller(poller.client, interval=10, stale_after=5).stale_after == 5


def test_an_answer_past_its_bounds_is_cut_and_says_so() -> None:
    response = messages.ListPodResourcesResponse(
        pod_resources=tuple(
            messages.PodResources(name=f"p{i}", namespace="ns") for i in range(MAX_PODS + 5)
        )
    )
    pods, error = from_list(response)
    assert len(pods) == MAX_PODS and error is not None and "5 pods past" in error


def test_a_broken_recording_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "bad.json").write_text('{"list": {"podResources": 7}}')
    answer = read_recording(tmp_path / "bad.json")
    assert answer.pods is None and answer.error is not None


def test_the_committed_module_matches_its_proto(tmp_path: Path) -> None:
    """scripts/protos regenerates it; the serialised descriptor is what the code uses, and is
    independent of the compiler's version banner."""
    pytest.importorskip("grpc_tools")
    proto = REPO / "tests" / "proto"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            f"-I{proto}",
            f"--python_out={tmp_path}",
            str(proto / "podresources_v1.proto"),
        ],
        check=True,
    )
    generated = (tmp_path / "podresources_v1_pb2.py").read_text()
    committed = (proto / "podresources_v1_pb2.py").read_text()

    def descriptor(text: str) -> str:
        (line,) = [x for x in text.splitlines() if "AddSerializedFile(" in x]
        return line

    assert descriptor(generated) == descriptor(committed), "run scripts/protos"


# The upstream contract, written by hand from the kubelet's own declaration:
# https://github.com/kubernetes/kubelet/blob/63b3249724f7d89a8aa48f9acb3811f193c9aa68/pkg/apis/podresources/v1/api.proto
# (kubernetes/kubelet at 63b3249, 2026-07-23; last changed by 43855ac, "Report pod level resources
# in PodResources API"). message -> field -> (number, type, repeated); a message type is its
# name. Only the messages we declare are listed, each with every field upstream gives it.
UPSTREAM_PACKAGE = "v1"
UPSTREAM_SERVICE = {
    "List": ("ListPodResourcesRequest", "ListPodResourcesResponse"),
    "GetAllocatableResources": ("AllocatableResourcesRequest", "AllocatableResourcesResponse"),
    "Get": ("GetPodResourcesRequest", "GetPodResourcesResponse"),
}
UPSTREAM: dict[str, dict[str, tuple[int, str, bool]]] = {
    "ListPodResourcesRequest": {},
    "ListPodResourcesResponse": {"pod_resources": (1, "PodResources", True)},
    "PodResources": {
        "name": (1, "string", False),
        "namespace": (2, "string", False),
        "containers": (3, "ContainerResources", True),
        "cpu_ids": (4, "int64", True),
        "memory": (5, "ContainerMemory", True),
    },
    "ContainerResources": {
        "name": (1, "string", False),
        "devices": (2, "ContainerDevices", True),
        "cpu_ids": (3, "int64", True),
        "memory": (4, "ContainerMemory", True),
        "dynamic_resources": (5, "DynamicResource", True),
    },
    "DynamicResource": {
        "claim_name": (2, "string", False),
        "claim_namespace": (3, "string", False),
        "claim_resources": (4, "ClaimResource", True),
    },
    "ClaimResource": {
        "cdi_devices": (1, "CDIDevice", True),
        "driver_name": (2, "string", False),
        "pool_name": (3, "string", False),
        "device_name": (4, "string", False),
        "share_id": (5, "string", False),
    },
    "CDIDevice": {"name": (1, "string", False)},
    "ContainerDevices": {
        "resource_name": (1, "string", False),
        "device_ids": (2, "string", True),
        "topology": (3, "TopologyInfo", False),
    },
    "TopologyInfo": {"nodes": (1, "NUMANode", True)},
    "NUMANode": {"ID": (1, "int64", False)},
    "AllocatableResourcesRequest": {},
    "AllocatableResourcesResponse": {
        "devices": (1, "ContainerDevices", True),
        "cpu_ids": (2, "int64", True),
        "memory": (3, "ContainerMemory", True),
    },
}


def _declared(field: object) -> tuple[int, str, bool]:
    from google.protobuf.descriptor import FieldDescriptor

    assert isinstance(field, FieldDescriptor)
    names = {
        FieldDescriptor.TYPE_STRING: "string",
        FieldDescriptor.TYPE_INT64: "int64",
        FieldDescriptor.TYPE_UINT64: "uint64",
    }
    kind = field.message_type.name if field.message_type is not None else names[field.type]
    return field.number, kind, field.is_repeated


def test_our_messages_are_the_kubelets_field_for_field() -> None:
    """Every message, field, number and cardinality the agent's decoder reads is upstream's (a
    field we leave out is skipped on the wire, so only what we read must agree), and so is the
    tests' .proto the stand-in kubelet serves; the service and its methods are named as the
    kubelet serves them."""
    for kind, fields in messages.FIELDS.items():
        upstream = UPSTREAM[kind.__name__]
        for number, (name, held, repeated) in fields.items():
            assert name in upstream, f"{kind.__name__}.{name} is not upstream's"
            declared = held if isinstance(held, str) else held.__name__
            assert (number, declared, repeated) == upstream[name], f"{kind.__name__}.{name}"
        # Every field a dataclass has is one the decoder fills.
        assert {f.name for f in dataclasses.fields(kind)} == {n for n, _, _ in fields.values()}
    read = {k.__name__: {n for n, _, _ in f.values()} for k, f in messages.FIELDS.items()}
    assert read["ListPodResourcesResponse"] == {"pod_resources"}
    assert read["PodResources"] >= {"name", "namespace", "containers"}
    assert read["ContainerResources"] >= {"name", "devices", "dynamic_resources"}
    assert read["ClaimResource"] >= {"cdi_devices", "driver_name", "device_name", "share_id"}
    assert read["AllocatableResourcesResponse"] >= {"devices"}

    file = pb.DESCRIPTOR
    assert file.package == UPSTREAM_PACKAGE
    assert set(file.message_types_by_name) == set(UPSTREAM)  # the table lists ours, no more
    for name, message in file.message_types_by_name.items():
        upstream = UPSTREAM[name]
        for field in message.fields:
            assert field.name in upstream, f"{name}.{field.name} is not upstream's"
            assert _declared(field) == upstream[field.name], f"{name}.{field.name}"
    (service,) = file.services_by_name.values()
    assert service.full_name == "v1.PodResourcesLister"
    for method in service.methods:
        assert (method.input_type.name, method.output_type.name) == UPSTREAM_SERVICE[method.name]
    assert {m.name for m in service.methods} == {"List", "GetAllocatableResources"}
    # The paths the client calls are the methods' full names.
    from devicemanager.kube.podresources import ALLOCATABLE, LIST

    assert {LIST, ALLOCATABLE} == {
        f"/{m.full_name.rsplit('.', 1)[0]}/{m.name}" for m in service.methods
    }


# -- the agent over a live socket ---------------------------------------------------------------


def samples(text: str, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name:
                out[tuple(sorted(s.labels.items()))] = s.value
    return out


def live_monitor(scenario: str, socket: Path, timeout: float = 2.0):  # type: ignore[no-untyped-def]
    from devicemanager.agent.config import parse_serve
    from devicemanager.agent.wiring import build_monitor, resolve_node

    argv = [
        "--replay",
        str(NODES / scenario),
        "--pod-resources-socket",
        str(socket),
        "--pod-resources-timeout",
        str(timeout),
    ]
    settings = parse_serve(argv, env={})
    monitor = build_monitor(settings, resolve_node(settings), wall=lambda: FIXED_TIME)
    # The poller reads beside the rounds; here, once, before the round, as its thread would.
    monitor.podresources.read_once()
    return monitor


def test_the_agent_reads_the_socket_and_publishes_what_replay_publishes(socket: Path) -> None:
    golden = (NODES / "a100-device-plugin-only" / "golden" / "metrics.txt").read_text()
    with serving(socket, Behaviour(load(RECORDED))):
        monitor = live_monitor("a100-device-plugin-only", socket)
        published = monitor.run_round()
        monitor.stop()
    text = published.metrics.plain.decode()
    name = "gpustack_instance_accelerator_memory_total_mib"
    assert samples(text, name) == samples(golden, name) and samples(text, name)
    assert (
        samples(text, "gpustack_instance_metrics_collector_success")[(("source", "podresources"),)]
        == 1.0
    )


def test_without_the_kubelet_annotation_grants_still_work(socket: Path) -> None:
    """h100-8gpu-mixed's grants all come from annotations: a kubelet that never answers takes
    none of them away, and the self-report says the source failed."""
    golden = (NODES / "h100-8gpu-mixed" / "golden" / "metrics.txt").read_text()
    with serving(
        socket, Behaviour(load(NODES / "h100-8gpu-mixed" / "podresources.json"), delay=30)
    ):
        monitor = live_monitor("h100-8gpu-mixed", socket, timeout=0.2)
        text = monitor.run_round().metrics.plain.decode()
        monitor.stop()
    for name in (
        "gpustack_instance_accelerator_memory_total_mib",
        "gpustack_instance_accelerator_memory_used_mib",
        "gpustack_instance_accelerator_cores_utilization_percent",
    ):
        assert samples(text, name) == samples(golden, name) and samples(text, name)
    assert (
        samples(text, "gpustack_instance_metrics_collector_success")[(("source", "podresources"),)]
        == 0.0
    )


def test_a_round_never_waits_on_the_kubelet(socket: Path) -> None:
    """The socket is read on a thread of its own: a kubelet that hangs for 30 s costs that
    thread, and every round publishes on time with the kubelet's grants said to be missing."""
    from devicemanager.agent.config import parse_serve
    from devicemanager.agent.wiring import build_monitor, resolve_node

    behaviour = Behaviour(load(RECORDED), delay=30)
    with serving(socket, behaviour):
        argv = ["--replay", str(NODES / "a100-device-plugin-only")]
        argv += ["--pod-resources-socket", str(socket), "--pod-resources-timeout", "20"]
        settings = parse_serve(argv, env={})
        monitor = build_monitor(settings, resolve_node(settings), wall=lambda: FIXED_TIME)
        poller = monitor.podresources
        poller.start()
        try:
            while not behaviour.calls:  # the poller is inside its (hanging) call now
                time.sleep(0.01)
            rounds = [monitor.run_round() for _ in range(3)]
            asked = list(behaviour.calls)
        finally:
            poller.close()
            monitor.stop()
    assert asked == ["List"]  # the poller's one call; no round called the kubelet
    for published in rounds:
        text = published.metrics.plain.decode()
        ok = samples(text, "gpustack_instance_metrics_collector_success")
        assert ok[(("source", "podresources"),)] == 0.0
        assert samples(text, "gpustack_accelerator_memory_total_mib")  # cards on time


def test_without_the_kubelet_plain_pods_have_no_grants(socket: Path) -> None:
    monitor = live_monitor("a100-device-plugin-only", socket)  # nothing listens
    text = monitor.run_round().metrics.plain.decode()
    monitor.stop()
    assert samples(text, "gpustack_instance_accelerator_memory_total_mib") == {}
    # Without GetAllocatableResources the lost card is not known to be missing either.
    assert len(samples(text, "gpustack_accelerator_unhealthy")) == 7


def test_the_socket_is_read_through_a_read_only_mount(socket: Path) -> None:
    """The DaemonSet mounts the kubelet's pod-resources directory read-only: connecting to a
    unix socket needs no write access to the file system it sits on."""
    mounted = socket.parent / "ro"
    mounted.mkdir()
    made = subprocess.run(["mount", "--bind", str(socket.parent), str(mounted)], check=False)
    if made.returncode != 0:
        pytest.skip("bind mounts are not permitted here (needs root and CAP_SYS_ADMIN)")
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(mounted)], check=True)
        with pytest.raises(OSError):
            (mounted / "probe").write_text("x")  # the mount really is read-only
        with serving(socket, Behaviour(load(RECORDED))):
            answer = PodResourcesClient(mounted / socket.name, timeout=5).read()
        assert answer.ok and answer.pods
    finally:
        subprocess.run(["umount", str(mounted)], check=False)


def test_the_agent_maps_no_grpc_library(launch) -> None:  # type: ignore[no-untyped-def]
    """(R-X2) The kubelet's pod-resources API is read by the agent's own client and decoder: a
    recorded node reads its recording through them (the H100 node's grants come from it), and
    neither that agent nor one without a recording maps grpcio's core, protobuf's runtime or
    grpclib's multidict (issue 46)."""
    bare: Agent = launch("--replay", str(NODES / "mi300x-8gpu-cpx-mixed"))
    recorded: Agent = launch("--replay", str(NODES / "h100-8gpu-mixed"))
    bare.wait_for("/readyz", 200)
    recorded.wait_for("/readyz", 200)
    bare_maps = Path(f"/proc/{bare.proc.pid}/maps").read_text()
    recorded_maps = Path(f"/proc/{recorded.proc.pid}/maps").read_text()
    for mark in ("cygrpc", "_upb", "_multidict"):
        assert mark not in bare_maps + recorded_maps, mark
