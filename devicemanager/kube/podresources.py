"""The kubelet's pod-resources gRPC API (v1): which device-plugin devices and DRA claims each pod
holds (R-X2, R-X6).

`List` names, per pod (namespace and name) and container, the device ids of each extended
resource; `GetAllocatableResources` every device the kubelet can allocate on the node. Both are
read once per period by a thread of their own (PodResourcesPoller) over the kubelet's unix
socket, under one deadline, and turned into the core's plain `KubeletAnswer`
(devicemanager.grants.deviceplugins); a round takes the newest answer and never waits. Reading never
raises: an absent socket, a kubelet older than 1.20 (no v1) or 1.21 (no GetAllocatableResources),
a slow or a malformed answer each become an error string, so only the kubelet's grants go
missing (after the last good answer has aged past its bound) and the annotation grants still
work.

Replay reads the same answer from a scenario's `podresources.json` (the protobuf JSON mapping of
both responses) through the same messages and the same conversion.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from devicemanager.grants.deviceplugins import (
    MAX_CONTAINERS,
    MAX_DEVICES,
    MAX_PODS,
    ContainerDevices,
    KubeletAnswer,
    PodDevices,
)
from devicemanager.grants.dra import ClaimDevice, ContainerClaim
from devicemanager.kube import podresources_messages as pb
from devicemanager.kube.h2grpc import (
    DEADLINE_EXCEEDED,
    UNIMPLEMENTED,
    Connection,
    GrpcError,
    Refused,
)
from devicemanager.kube.podresources_messages import DecodeError

DEFAULT_SOCKET = Path("/var/lib/kubelet/pod-resources/kubelet.sock")
DEFAULT_TIMEOUT = 2.0
# The kubelet's answer grows with the node's pods; 16 MiB holds thousands of them.
MAX_MESSAGE_BYTES = 16 * 1024 * 1024
LIST = "/v1.PodResourcesLister/List"
MAX_CDI_DEVICES = 8  # CDI names kept per claim device: a driver gives one or two
ALLOCATABLE = "/v1.PodResourcesLister/GetAllocatableResources"


def _devices(container: str, entries: Iterable[pb.ContainerDevices]) -> list[ContainerDevices]:
    return [
        ContainerDevices(container, d.resource_name, tuple(d.device_ids[:MAX_DEVICES]))
        for d in entries
        if d.resource_name
    ]


def _claims(container: str, entries: Iterable[pb.DynamicResource]) -> list[ContainerClaim]:
    """A container's DRA claims (R-X6), each device by its DRA name and the CDI ids the kubelet
    gave it; bounded like devices."""
    out = []
    for claim in list(entries)[:MAX_DEVICES]:
        devices = tuple(
            ClaimDevice(
                r.driver_name,
                r.pool_name,
                r.device_name,
                r.share_id or None,
                tuple(c.name for c in r.cdi_devices[:MAX_CDI_DEVICES] if c.name),
            )
            for r in claim.claim_resources[:MAX_DEVICES]
            if r.driver_name and r.device_name
        )
        if claim.claim_name and devices:
            out.append(ContainerClaim(container, claim.claim_namespace, claim.claim_name, devices))
    return out


def from_list(response: pb.ListPodResourcesResponse) -> tuple[tuple[PodDevices, ...], str | None]:
    """The core's view of a `List` answer, and what was cut from it to stay within bounds."""
    cut = []
    if len(response.pod_resources) > MAX_PODS:
        cut.append(f"{len(response.pod_resources) - MAX_PODS} pods past {MAX_PODS}")
    pods = []
    for pod in response.pod_resources[:MAX_PODS]:
        devices: list[ContainerDevices] = []
        claims: list[ContainerClaim] = []
        if len(pod.containers) > MAX_CONTAINERS:
            cut.append(f"containers of {pod.namespace}/{pod.name} past {MAX_CONTAINERS}")
        for container in pod.containers[:MAX_CONTAINERS]:
            if any(len(d.device_ids) > MAX_DEVICES for d in container.devices):
                cut.append(f"devices of {pod.namespace}/{pod.name} past {MAX_DEVICES}")
            devices.extend(_devices(container.name, container.devices))
            claims.extend(_claims(container.name, container.dynamic_resources))
        pods.append(PodDevices(pod.namespace, pod.name, tuple(devices), tuple(claims)))
    error = f"answer cut to bounds: {'; '.join(cut[:3])}" if cut else None
    return tuple(pods), error


def from_allocatable(response: pb.AllocatableResourcesResponse) -> tuple[ContainerDevices, ...]:
    return tuple(_devices("", response.devices[: MAX_DEVICES * 4]))


def describe(exc: BaseException, method: str, timeout: float) -> str:
    """A failed call as an operator reads it, named by gRPC's status codes as the kubelet's own
    logs and grpcurl name them."""
    # The call carries its deadline (grpc-timeout), so the kubelet may say it passed first.
    if isinstance(exc, TimeoutError) or (
        isinstance(exc, GrpcError) and exc.status == DEADLINE_EXCEEDED
    ):
        return f"{method}: no answer in {timeout:g}s"
    if isinstance(exc, GrpcError):
        if exc.status == UNIMPLEMENTED:
            if method == "List":
                return "List: the kubelet does not serve podresources v1 (Kubernetes before 1.20)"
            return (
                "GetAllocatableResources: not served (Kubernetes before 1.21, or the "
                "KubeletPodResourcesGetAllocatable feature gate is off)"
            )
        return f"{method}: {exc.name}: {exc.message}"
    if isinstance(exc, Refused):
        return f"{method}: RESOURCE_EXHAUSTED: {exc}"
    if isinstance(exc, DecodeError):
        return f"{method}: INTERNAL: the answer is no {method} response ({exc})"
    if isinstance(exc, OSError):
        return f"{method}: UNAVAILABLE: {exc or type(exc).__name__}"
    return f"{method}: INTERNAL: {type(exc).__name__}: {exc}"


class PodResourcesClient:
    """Reads the kubelet's socket: one connection per read, both calls under one deadline.

    The calls are made on the poller's thread over a blocking socket (kube/h2grpc.py), each
    read of it held to the deadline, and nothing outlives a read: a kubelet that restarted is
    simply connected to again at the next period.
    """

    def __init__(
        self,
        socket: Path = DEFAULT_SOCKET,
        timeout: float = DEFAULT_TIMEOUT,
        mono: Callable[[], float] = time.monotonic,
    ) -> None:
        self.socket, self.timeout, self._mono = socket, timeout, mono

    def read(self) -> KubeletAnswer:
        """Both calls under one deadline; never raises."""
        started = self._mono()
        if not self.socket.exists():
            return KubeletAnswer(
                error=f"{self.socket} does not exist (is the pod-resources directory mounted?)",
                duration_seconds=round(self._mono() - started, 6),
            )
        answer = self._read(started + self.timeout)
        return dataclasses.replace(answer, duration_seconds=round(self._mono() - started, 6))

    def _read(self, deadline: float) -> KubeletAnswer:
        connection: Connection | None = None
        try:
            try:
                connection = Connection(str(self.socket), deadline, MAX_MESSAGE_BYTES, self._mono)
                answer = connection.unary(LIST, b"", deadline)
                pods, error = from_list(pb.decode(pb.ListPodResourcesResponse, answer))
            except Exception as exc:  # every failure is an answer's error, never the thread's
                return KubeletAnswer(error=describe(exc, "List", self.timeout))
            allocatable: tuple[ContainerDevices, ...] | None = None
            allocatable_error = None
            if deadline - self._mono() <= 0:
                allocatable_error = f"GetAllocatableResources: no time left of {self.timeout:g}s"
            else:
                try:
                    answer = connection.unary(ALLOCATABLE, b"", deadline)
                    allocatable = from_allocatable(
                        pb.decode(pb.AllocatableResourcesResponse, answer)
                    )
                except Exception as exc:
                    allocatable_error = describe(exc, "GetAllocatableResources", self.timeout)
            return KubeletAnswer(
                pods=pods, allocatable=allocatable, error=error, allocatable_error=allocatable_error
            )
        finally:
            if connection is not None:
                connection.close()

    __call__ = read

    def close(self) -> None:
        """Nothing outlives a read."""


class PodResourcesPoller:
    """Reads the kubelet's socket every `interval` seconds on a thread of its own, so that a
    round never waits on the kubelet (a round asks for the newest answer and gets it at once).

    Until the first read has returned a round has no answer: the kubelet's grants are absent,
    and the collector says why. A read that fails leaves the last good answer in use (device-plugin
    allocations change only when pods do) for at most `stale_after` seconds after it was read
    (three periods by default), the self-report saying how old it is; past that the answer is
    dropped, and the kubelet's grants and its allocatable cards are absent until it answers again.
    """

    def __init__(
        self,
        client: PodResourcesClient,
        interval: float,
        stale_after: float | None = None,
        mono: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client, self.interval, self._mono = client, interval, mono
        self.stale_after = stale_after if stale_after is not None else 3 * interval
        self._lock = threading.Lock()
        self._latest: KubeletAnswer | None = None
        self._good: tuple[float, KubeletAnswer] | None = None  # last answer with pods
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.reads = 0

    def read_once(self) -> KubeletAnswer:
        answer = self.client.read()
        self.reads += 1
        with self._lock:
            self._latest = answer
            if answer.pods is not None:
                self._good = (self._mono(), answer)
        return answer

    def __call__(self) -> KubeletAnswer:
        with self._lock:
            latest, good = self._latest, self._good
        if latest is None:
            return KubeletAnswer(error="the kubelet's pod-resources have not been read yet")
        if latest.pods is not None or good is None:
            return latest
        # This read failed: the last good answer stands while it is young enough, said to be
        # old and why; an older one is dropped rather than kept forever.
        at, answer = good
        age = self._mono() - at
        if age > self.stale_after:
            return KubeletAnswer(
                error=(
                    f"not answering for {age:.0f}s ({latest.error}); its last answer is older "
                    f"than {self.stale_after:g}s and no longer used"
                ),
                duration_seconds=latest.duration_seconds,
            )
        return KubeletAnswer(
            pods=answer.pods,
            allocatable=answer.allocatable,
            error=f"last read failed ({latest.error}); the answer of {age:.0f}s ago is in use",
            allocatable_error=answer.allocatable_error,
            duration_seconds=latest.duration_seconds,
        )

    def _loop(self) -> None:
        while not self._stop.is_set():
            started = self._mono()
            try:
                self.read_once()
            except Exception as exc:  # read() never raises; a bug here must not end the loop
                with self._lock:
                    self._latest = KubeletAnswer(error=f"{type(exc).__name__}: {exc}")
            self._stop.wait(max(0.0, self.interval - (self._mono() - started)))

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="pod-resources", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        self.client.close()


RECORDING_KEYS = ("list", "allocatable")


def read_recording(path: Path) -> KubeletAnswer:
    """A scenario's recorded answer: `{"list": <ListPodResourcesResponse>, "allocatable":
    <AllocatableResourcesResponse>}` in protobuf's JSON mapping; a missing key is a call that
    did not answer."""
    try:
        doc = json.loads(path.read_text())
        if not isinstance(doc, dict):
            raise ValueError("expected an object with 'list' and 'allocatable'")
        pods: tuple[PodDevices, ...] | None = None
        error: str | None = "List: not recorded"
        allocatable: tuple[ContainerDevices, ...] | None = None
        if isinstance(doc.get("list"), dict):
            pods, error = from_list(pb.from_json(pb.ListPodResourcesResponse, doc["list"]))
        if isinstance(doc.get("allocatable"), dict):
            answer = pb.from_json(pb.AllocatableResourcesResponse, doc["allocatable"])
            allocatable = from_allocatable(answer)
    except (OSError, ValueError) as exc:
        return KubeletAnswer(error=f"{path}: {exc}")
    return KubeletAnswer(
        pods=pods,
        allocatable=allocatable,
        error=error,
        allocatable_error=None if allocatable is not None else "not recorded",
        duration_seconds=0.0,
    )


class RecordedPodResources:
    """Replay's kubelet: the scenario's recorded answer every round."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __call__(self) -> KubeletAnswer:
        return read_recording(self.path)

    def close(self) -> None:
        """Nothing to release."""
