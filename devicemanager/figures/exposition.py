"""/metrics: pure families from a Snapshot, rendered to bytes once when a round ends (R-E1).

A scrape only hands out bytes made here. An absent figure yields no sample (R-E2): a gauge
cannot say "unknown", and a zero would read as idle.

The text is Prometheus's format 0.0.4 exactly as prometheus_client writes it (labels sorted by
name, values through its float formatter), by a renderer made for these families: a label set
is escaped and joined once and shared by every family that carries it (one grant has seven),
and the verdict families, the only part that differs when a round turns stale, are rendered
apart from the figures, so the stale variant is not a second full render.
"""

from __future__ import annotations

import gzip
import io
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import cast

from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.utils import floatToGoString

from devicemanager.figures.actions import action_for
from devicemanager.figures.figures import AcceleratorEntry, InstanceEntries, PodLevel
from devicemanager.grants.grants import REFUSALS
from devicemanager.model import (
    FIGURES,
    BackendState,
    Card,
    Codes,
    Counts,
    FigureSpec,
    FigureTable,
    Flags,
    HealthFigure,
    HealthValue,
    Reason,
    Shape,
    Snapshot,
)

CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4
# prometheus_client's own float formatting (1.0, 36.0, +Inf…), so the bytes are its bytes.
_go_float: Callable[[float], str] = floatToGoString


def _float(value: float) -> str:
    """floatToGoString's text, most values without its steps: a finite float below 1e6 is its
    repr there (Go's exponent form starts at seven integer digits; NaN and the infinities have
    names), and a round writes hundreds of them. The rest go through floatToGoString itself;
    tests/test_exposition.py holds the two equal over every float."""
    if type(value) is float and -math.inf < value < 1e6:
        return repr(value)
    return _go_float(value)


def _escape(value: str) -> str:
    if "\\" not in value and "\n" not in value and '"' not in value:
        return value  # the common case, a label value with nothing to escape: no copy made
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


# Each label-name list's order by name, worked out once: a round renders thousands of label
# sets over a few dozen lists of names.
_ORDERS: dict[tuple[str, ...], tuple[int, ...]] = {}


def labelset(names: Sequence[str], values: Sequence[str]) -> str:
    """`{name="value",…}` sorted by name, values escaped: one series' labels, rendered once."""
    if not names:
        return ""
    key = tuple(names)
    if len(values) != len(key):
        raise ValueError(f"{len(values)} label values for {len(key)} names")
    order = _ORDERS.get(key)
    if order is None:
        order = _ORDERS[key] = tuple(sorted(range(len(key)), key=key.__getitem__))
    return "{" + ",".join(f'{key[i]}="{_escape(values[i])}"' for i in order) + "}"


class Labels:
    """A base label set (a card's, a grant's), and each label set made from it with a family's
    labels added: the base escaped and sorted once, each one-label family's set split once
    around its value, so a sample costs a concatenation (a card has dozens of health samples,
    a grant a dozen of activity), and a set of two labels more (a capability's figure and
    reason) rendered once and kept, up to MAX_JOINED. Made through `labels_of`, a card's or a
    grant's outlives the round: its labels are the same next round."""

    __slots__ = ("_joined", "_names", "_split", "_values")

    MAX_JOINED = 1024  # each card's figures and their reasons fit many times over

    def __init__(self, names: Sequence[str], values: Sequence[str]) -> None:
        self._names = tuple(names)
        self._values = tuple(values)
        self._split: dict[tuple[str, ...], tuple[str, str]] = {}
        self._joined: dict[tuple[tuple[str, ...], tuple[str, ...]], str] = {}

    def render(self, extra_names: Sequence[str], extra_values: Sequence[str]) -> str:
        """The label set of the base and these, as `labelset` renders it."""
        if len(extra_names) > 1:
            joined = (tuple(extra_names), tuple(extra_values))
            text = self._joined.get(joined)
            if text is None:
                text = labelset([*self._names, *joined[0]], [*self._values, *joined[1]])
                if len(self._joined) >= self.MAX_JOINED:
                    self._joined.clear()  # a tenant-controlled value set cannot grow it
                self._joined[joined] = text
            return text
        if len(extra_values) != len(extra_names):
            raise ValueError(f"{len(extra_values)} label values for {len(extra_names)} names")
        key = tuple(extra_names)
        split = self._split.get(key)
        if split is None:
            split = self._split[key] = self._around(key)
        if not key:
            return split[0]
        return split[0] + _escape(extra_values[0]) + split[1]

    def _around(self, key: tuple[str, ...]) -> tuple[str, str]:
        """The base's label set, or with one label more, the text before and after its value."""
        if not key:
            return labelset(self._names, self._values), ""
        if key[0] in self._names:
            raise ValueError(f"{key[0]} is a label of the base already")
        pairs = sorted(
            (name, f'{name}="{_escape(value)}"')
            for name, value in zip(self._names, self._values, strict=True)
        )
        before = [text for name, text in pairs if name < key[0]]
        after = [text for name, text in pairs if name > key[0]]
        head = "{" + "".join(f"{text}," for text in before) + f'{key[0]}="'
        return head, '"' + "".join(f",{text}" for text in after) + "}"


class LabelsKept:
    """The base label sets of the last two renderings, by names and values: a card's and a
    grant's labels are the same round after round, so their escaping, sorting and splitting is
    done when they first appear, not every round. `rotate` (once per rendering) forgets what
    the previous rendering did not use, so a node keeps at most two rounds' label sets (what
    one round's text holds, about), and more than MAX between rotations also rotates."""

    MAX = 65_536

    def __init__(self) -> None:
        self._current: dict[tuple[tuple[str, ...], tuple[str, ...]], Labels] = {}
        self._previous: dict[tuple[tuple[str, ...], tuple[str, ...]], Labels] = {}

    def __call__(self, names: Sequence[str], values: Sequence[str]) -> Labels:
        key = (tuple(names), tuple(values))
        found = self._current.get(key)
        if found is None:
            found = self._previous.get(key) or Labels(*key)
            if len(self._current) >= self.MAX:
                self.rotate()
            self._current[key] = found
        return found

    def rotate(self) -> None:
        self._previous, self._current = self._current, {}


labels_of = LabelsKept()


@dataclass(slots=True)
class GaugeFamily:
    """One family and its samples, label sets already rendered: a gauge unless `kind` says
    `counter` (whose name then ends in `_total`, as the sample names do)."""

    name: str
    documentation: str
    labels: Sequence[str] = ()
    samples: list[tuple[str, float]] = field(default_factory=list)
    # The TYPE line's word: "gauge", or "counter" for a family whose name ends in `_total`.
    kind: str = "gauge"

    def add_metric(self, values: Sequence[str], value: float) -> None:
        self.samples.append((labelset(self.labels, values), value))

    def add_rendered(self, labels: str, value: float) -> None:
        """A sample whose label set was rendered by `labelset` for these label names."""
        self.samples.append((labels, value))


CARD_LABELS = ["node", "manufacturer", "id", "index"]

# (family suffix, help): the figure table's card rows (each suffix is the name of the figure on
# a card), then the card's verdict.
_CARD_FAMILIES: tuple[tuple[str, str], ...] = (
    *((spec.name.value, spec.family.help) for spec in FIGURES.card),
    (
        "unhealthy",
        "1 when the card is unhealthy: lost, a pending or failed memory repair, a fatal error "
        "or alarm; the snapshot's unhealthyReason says which.",
    ),
)


def _figure(source: Card | AcceleratorEntry, suffix: str) -> float | None:
    """A family's value: each family suffix is also the name of the figure on a card or entry."""
    value: float | int | bool | None = getattr(source, suffix)
    return None if value is None else float(value)


def _sampled(help_text: str, period: int) -> str:
    # The figures are sampled by the monitor loop, not at scrape time; say so, as the
    # Prometheus guide asks of cached metrics.
    return f"{help_text} Sampled every {period}s by the monitor loop."


def card_families(snapshot: Snapshot) -> Iterator[GaugeFamily]:
    node = snapshot.node or ""
    info = GaugeFamily(
        "gpustack_accelerator_info",
        _sampled(
            "Accelerators this agent reads; value 1, identity in labels (parent_id: the "
            "physical card of a partition its library enumerates as a device of its own).",
            snapshot.period_seconds,
        ),
        labels=[*CARD_LABELS, "name", "driver_version", "parent_id"],
    )
    families = {
        suffix: GaugeFamily(
            f"gpustack_accelerator_{suffix}",
            _sampled(help_text, snapshot.period_seconds),
            labels=CARD_LABELS,
        )
        for suffix, help_text in _CARD_FAMILIES
    }
    for group in snapshot.groups:
        for card in group.cards:
            labels = [node, group.manufacturer, card.id, str(card.index)]
            info.add_metric(
                [*labels, card.name or "", group.driver_version or "", card.parent_id or ""], 1.0
            )
            rendered = labels_of(CARD_LABELS, labels).render((), ())
            for suffix, family in families.items():
                value = _figure(card, suffix)
                if value is not None:
                    family.add_rendered(rendered, value)
    yield info
    yield from families.values()


def _health_samples(
    held: Mapping[HealthFigure, HealthValue], spec: FigureSpec
) -> Iterator[tuple[tuple[str, ...], float]]:
    """(label values, value) of one health figure's samples, as its row's shape says."""
    value = held.get(cast(HealthFigure, spec.name))
    if value is None:
        return
    if spec.shape is Shape.NUMBER:
        yield spec.labels, float(cast(float, value))
    elif spec.shape is Shape.FLAGS:  # in the row's order of reasons, each the card reports
        active = dict(cast(Flags, value))
        for reason in spec.labels:
            if reason in active:
                yield (reason,), float(active[reason])
    elif spec.shape is Shape.COUNTS:
        for code, count in cast(Counts, value):
            yield (code,), float(count)
    else:
        for code in cast(Codes, value):
            yield (code,), 1.0


_CAPABILITY_BASE = ("node", "manufacturer", "id")
_CAPABILITY_EXTRA = ("figure", "reason")


def health_families(snapshot: Snapshot, table: FigureTable = FIGURES) -> Iterator[GaugeFamily]:
    """Issue 29's per-card families: error counters, memory repair, energy, clock throttling,
    clocks, PCIe replays, why each absent one is absent, and why an unhealthy card is. A family
    no card has a sample of is not written, so a node whose backend reads none is unchanged."""
    node = snapshot.node or ""
    out: list[GaugeFamily] = []
    cards = [(g, c) for g in snapshot.groups for c in g.cards]
    # Each card's figures by name and its labels, made once and used for every row.
    read = [
        (labels_of(CARD_LABELS, [node, g.manufacturer, c.id, str(c.index)]), c.health.held())
        for g, c in cards
        if c.health is not None
    ]
    for table_family, specs in table.health_families():
        family = GaugeFamily(
            table_family.name,
            _sampled(table_family.help, snapshot.period_seconds),
            labels=[*CARD_LABELS, *table_family.labels],
            kind=table_family.kind.value,
        )
        extra = table_family.labels
        for base, held in read:
            for spec in specs:
                if spec.shape is Shape.NUMBER:  # most rows: one sample, no generator
                    number = held.get(cast(HealthFigure, spec.name))
                    if number is not None:
                        text = base.render(extra, spec.labels)
                        family.add_rendered(text, float(cast(float, number)))
                    continue
                for values, value in _health_samples(held, spec):
                    family.add_rendered(base.render(extra, values), value)
        out.append(family)
    capability = GaugeFamily(
        "gpustack_accelerator_figure_capability",
        "1 when the card's library answered the figure this round; 0 with the reason it is "
        "absent (unsupported, permission, invalid_data, transient_driver_error).",
        labels=["node", "manufacturer", "id", "figure", "reason"],
    )
    reason = GaugeFamily(
        "gpustack_accelerator_unhealthy_reason",
        _sampled(
            "1 for an unhealthy card, with the reason in a label (the snapshot's "
            "unhealthyReason); gpustack_accelerator_unhealthy is unchanged.",
            snapshot.period_seconds,
        ),
        labels=[*CARD_LABELS, "reason", "action"],
    )
    taint = GaugeFamily(
        "gpustack_accelerator_device_taint_info",
        "1 per taint on the card's DRA devices (KEP-5055), from the driver's ResourceSlice or "
        "an admin's DeviceTaintRule, whatever its effect: NoSchedule and NoExecute also make the "
        "card unhealthy (reason key=value); None is information only (a non-fatal XID such as "
        "43, gpu.nvidia.com/unmonitored).",
        labels=[*CARD_LABELS, "key", "value", "effect"],
    )
    kubelet = GaugeFamily(
        "gpustack_accelerator_kubelet_health_info",
        "1 when the kubelet's allocatedResourcesStatus (KEP-4680) names a device on the card "
        "as not Healthy: Unhealthy (also in the unhealthy reason) or Unknown (the device's "
        "driver does not say; never unhealthy).",
        labels=[*CARD_LABELS, "health"],
    )
    for group, card in cards:
        labels = [node, group.manufacturer, card.id, str(card.index)]
        if card.unhealthy:
            said = card.unhealthy_reason or ""
            action = action_for(group.manufacturer, said).value
            reason.add_metric([*labels, said, action], 1.0)
        for t in card.device_taints:
            taint.add_metric([*labels, t.key, t.value, t.effect], 1.0)
        if card.kubelet_health is not None:
            kubelet.add_metric([*labels, card.kubelet_health], 1.0)
        for figure in card.invalid:  # a card figure out of physical range (issue 30)
            invalid = [node, group.manufacturer, card.id, figure, Reason.INVALID_DATA.value]
            capability.add_metric(invalid, 0.0)
        if card.health is None:
            continue
        reasons, held = dict(card.health.reasons), card.health.held()
        base = labels_of(_CAPABILITY_BASE, [node, group.manufacturer, card.id])
        for spec in table.health:
            figure = cast(HealthFigure, spec.name)
            why = reasons.get(figure)
            if why is None and figure not in held:
                continue  # not asked of this library: nothing to say
            text = base.render(
                _CAPABILITY_EXTRA, (spec.capability, "" if why is None else why.value)
            )
            capability.add_rendered(text, 1.0 if why is None else 0.0)
    out.extend((capability, reason, taint, kubelet))
    yield from (f for f in out if f.samples)


def topology_families(snapshot: Snapshot) -> Iterator[GaugeFamily]:
    """Links and placement (R-X3), as the backend last read them (once a minute, never per
    scrape): one `link_info` series per card, peer and kind of link, the count where the library
    gives one, and each card's NUMA node. Not written where no card has any."""
    node = snapshot.node or ""
    labels = ["node", "manufacturer", "id", "peer_id", "link"]
    info = GaugeFamily(
        "gpustack_accelerator_link_info",
        "1 per way the card is joined to a peer card of its node (link: nvlink, nvswitch, xgmi, "
        "icnlink, icnswitch, hsl, hccs, hccs_switch, metaxlink, or the PCIe path pcie_board, "
        "pcie_switch, pcie_switches, "
        "pcie_host_bridge, numa_node, system, pcie); a pair the library does not place has "
        "none. Read once a minute.",
        labels=labels,
    )
    count = GaugeFamily(
        "gpustack_accelerator_links",
        "How many links of that kind run from the card to the peer (NVLink: active links; "
        "nvswitch: the card's active links into the fabric). Read once a minute.",
        labels=labels,
    )
    numa = GaugeFamily(
        "gpustack_accelerator_numa_node",
        "The NUMA node the card is attached to. Read once a minute.",
        labels=CARD_LABELS,
    )
    for group in snapshot.groups:
        for card in group.cards:
            if card.numa_node is not None:
                numa.add_metric(
                    [node, group.manufacturer, card.id, str(card.index)], float(card.numa_node)
                )
            seen: set[tuple[str, str]] = set()
            for link in card.links or ():
                if (link.peer_id, link.link) in seen:
                    continue  # a duplicate label set would fail the whole scrape
                seen.add((link.peer_id, link.link))
                values = [node, group.manufacturer, card.id, link.peer_id, link.link]
                info.add_metric(values, 1.0)
                if link.count is not None:
                    count.add_metric(values, float(link.count))
    yield from (f for f in (info, count, numa) if f.samples)


@dataclass(frozen=True, slots=True)
class Extras:
    """What a round adds to the snapshot for /metrics: the node's Instances and the kubelet."""

    instances: tuple[InstanceEntries, ...] = ()
    pod_level: tuple[PodLevel, ...] = ()
    allocation_errors: int = 0
    # Pods whose own data raised this round, by stage (grants, figures, pod_level).
    pod_errors: Mapping[str, int] = field(default_factory=dict)
    exporting: bool | None = None  # None: no cluster, so no exporter role to hold
    kubelet_success: bool = False
    kubelet_duration: float | None = None
    kubelet_age: float | None = None  # seconds since the summary in use was read
    # The kubelet's pod-resources socket (device-plugin grants); None: not read on this node.
    podresources_success: bool | None = None
    podresources_duration: float | None = None
    # The node's DRA slices (R-X6); None: not read on this node. Claimed devices that gave no
    # grant, by reason (no_slice, unmatched_device, …).
    dra_success: bool | None = None
    dra_unresolved: Mapping[str, int] = field(default_factory=dict)
    # Lines of the watch streams that were no event, skipped since the agent started, by
    # watch (pods, resourceslices); None: nothing is watched (replay, a pods file).
    skipped_lines: Mapping[str, int] | None = None
    # Annotation grants refused this round, by reason (grants.REFUSALS).
    grants_refused: Mapping[str, int] = field(default_factory=dict)
    # The agent's build: (label, value) pairs of gpustack_device_manager_build_info.
    build: tuple[tuple[str, str], ...] = ()
    # The agent's report on itself (R-X8): process, HTTP and round counters, made by the agent
    # when the round ended (agent/selfmetrics.py); empty where no server runs (goldens, tests).
    own: tuple[GaugeFamily, ...] = ()


NO_EXTRAS = Extras()


def collector_families(
    snapshot: Snapshot, fresh: bool, extras: Extras = NO_EXTRAS
) -> Iterator[GaugeFamily]:
    """The collector's report on itself (R-E4), and each backend's verdict."""
    node = snapshot.node or ""
    if extras.build:
        # As node_exporter's build_info: value 1, the version in labels, whatever the round.
        build = GaugeFamily(
            "gpustack_device_manager_build_info",
            "The agent's version, the Python it runs on, and the vendor SDKs it loads; value 1.",
            labels=[k for k, _ in extras.build],
        )
        build.add_metric([v for _, v in extras.build], 1.0)
        yield build
    success = GaugeFamily(
        "gpustack_instance_metrics_collector_success",
        "1 when the source's last round succeeded: snapshot = the monitor snapshot is fresh; "
        "kubelet = the round had a fresh kubelet summary (exporting agent only); podresources = "
        "the round read the kubelet's device-plugin allocations; dra = the round had the node's "
        "DRA ResourceSlices; backends = some manufacturer's library answered the round.",
        labels=["source"],
    )
    duration = GaugeFamily(
        "gpustack_instance_metrics_collector_duration_seconds",
        "Duration of the source's last round, seconds.",
        labels=["source"],
    )
    if extras.exporting:
        success.add_metric(["kubelet"], 1.0 if fresh and extras.kubelet_success else 0.0)
        if extras.kubelet_duration is not None:
            duration.add_metric(["kubelet"], extras.kubelet_duration)
    if extras.podresources_success is not None:
        ok = fresh and extras.podresources_success
        success.add_metric(["podresources"], 1.0 if ok else 0.0)
        if extras.podresources_duration is not None:
            duration.add_metric(["podresources"], extras.podresources_duration)
    if extras.dra_success is not None:
        success.add_metric(["dra"], 1.0 if fresh and extras.dra_success else 0.0)
    success.add_metric(["snapshot"], 1.0 if fresh and snapshot.timestamp > 0 else 0.0)
    if snapshot.backends:
        # Whether any manufacturer's library answered: 0 is a node with nothing to measure.
        answered = any(b.state is BackendState.OK for b in snapshot.backends)
        success.add_metric(["backends"], 1.0 if fresh and answered else 0.0)
    if snapshot.round_duration_seconds is not None:
        duration.add_metric(["snapshot"], snapshot.round_duration_seconds)
    yield success
    yield duration
    if extras.dra_success is not None:
        unresolved = GaugeFamily(
            "gpustack_accelerator_dra_unresolved_devices",
            "Devices the node's pods were given through DRA claims that give no grant, by why: "
            "no_slice (no ResourceSlice lists it), duplicate_device (listed twice), "
            "unmatched_device (no attribute names a card the library enumerates), "
            "claim_unavailable (a share whose claim could not be read), no_inventory.",
            labels=["node", "reason"],
        )
        for reason, count in sorted(extras.dra_unresolved.items()):
            unresolved.add_metric([node, reason], float(count))
        yield unresolved
    if extras.skipped_lines is not None:
        skipped = GaugeFamily(
            "gpustack_instance_metrics_collector_skipped_lines",
            "Lines of the API server's watch streams that were no event (not JSON, cut short), "
            "skipped since the agent started, by source (pods, resourceslices); the watch went "
            "on past each.",
            labels=["source"],
        )
        for source, count in sorted(extras.skipped_lines.items()):
            skipped.add_metric([source], float(count))
        yield skipped
    if extras.exporting is not None:
        role = GaugeFamily(
            "gpustack_instance_metrics_exporter",
            "1 on the one agent of a node that publishes the pod-level families.",
            labels=["node"],
        )
        role.add_metric([node], 1.0 if extras.exporting else 0.0)
        yield role
        age = GaugeFamily(
            "gpustack_instance_metrics_collector_age_seconds",
            "How long ago the data behind the source's figures was read, seconds (kubelet: the "
            "summary, read beside the rounds; too old and success is 0 and used figures absent).",
            labels=["source"],
        )
        if extras.exporting and extras.kubelet_age is not None:
            age.add_metric(["kubelet"], extras.kubelet_age)
        yield age
    up = GaugeFamily(
        "gpustack_accelerator_backend_up",
        "1 when the manufacturer's library answered in the last round; 0 when it is missing, "
        "failed, timed out or is stuck (the snapshot's backends[] says which).",
        labels=["node", "manufacturer"],
    )
    read = GaugeFamily(
        "gpustack_accelerator_backend_read_duration_seconds",
        "How long the manufacturer's library took to answer in the last round, seconds.",
        labels=["node", "manufacturer"],
    )
    for status in snapshot.backends:
        labels = [node, status.manufacturer]
        up.add_metric(labels, 1.0 if fresh and status.state is BackendState.OK else 0.0)
        if status.duration_seconds is not None:
            read.add_metric(labels, status.duration_seconds)
    yield up
    yield read


# The families that describe another pod (the tenant's) carry that pod's `namespace`, `pod`
# and `container`, so they survive a scrape with honor_labels (the shipped PodMonitor and scrape
# config) and join kube-state-metrics `on (namespace, pod)`. Each is written even when empty
# (no one container holds the grant; a pod-level figure is the whole pod's): Prometheus stores
# an empty label as none, but a label the sample names, empty or not, keeps the scrape target's
# own (the agent's pod and container) off the series. The agent's own families carry none of
# these, nor `instance`, `job` or `endpoint`: those are the scrape target's.
HOLDER_LABELS = ("namespace", "pod", "container")
TARGET_LABELS = ("instance", "job", "endpoint")
INSTANCE_LABELS = ["namespace", "instance_name", "instance_uid", "node", "pod", "container"]
ACCELERATOR_LABELS = [*INSTANCE_LABELS, "id", "index", "manufacturer", "mode"]

# SPEC §7: the accelerator families, one series per grant, units mirroring the API fields: the
# figure table's card rows, each with its per-grant HELP, then the verdict.
_ENTRY_FAMILIES: tuple[tuple[str, str], ...] = (
    *((spec.name.value, spec.grant_help) for spec in FIGURES.card if spec.grant_help is not None),
    (
        "unhealthy",
        "1 when the card the grant is on is unhealthy, with why in `reason` (the card's "
        "unhealthyReason, e.g. xid_79; empty while it is healthy).",
    ),
)
# The one entry family with a label beyond ACCELERATOR_LABELS: why the card is unhealthy, on the
# series of every Instance it holds, as dcgm-exporter puts its pod labels on its error series.
UNHEALTHY_LABELS = [*ACCELERATOR_LABELS, "reason"]


def instance_families(
    snapshot: Snapshot, instances: Iterable[InstanceEntries]
) -> Iterator[GaugeFamily]:
    """`gpustack_instance_accelerator_*`: every Instance's own figures, one series per grant.
    An unmeasured figure has no sample (R-E2); the Instance label is `instance_name` (R-E6);
    `pod` is the pod holding the grant, `container` the one container that does (empty when
    two or more of the pod's do)."""
    node = snapshot.node or ""
    instances = tuple(instances)
    out = {
        suffix: GaugeFamily(
            f"gpustack_instance_accelerator_{suffix}",
            _sampled(help_text, snapshot.period_seconds),
            labels=UNHEALTHY_LABELS if suffix == "unhealthy" else ACCELERATOR_LABELS,
        )
        for suffix, help_text in _ENTRY_FAMILIES
    }
    for item in instances:
        ref = item.instance
        for e in item.entries:
            values = [
                ref.namespace,
                ref.name,
                ref.uid,
                node,
                item.pod.name,
                e.holder or "",  # two or more containers hold it: none of them alone
                e.id,
                "" if e.index is None else str(e.index),
                e.manufacturer,
                e.mode.value,
            ]
            labels = labels_of(ACCELERATOR_LABELS, values).render((), ())
            for suffix, family in out.items():
                value = _figure(e, suffix)
                if value is None:
                    continue
                if suffix == "unhealthy":
                    reason = (e.unhealthy_reason or "") if e.unhealthy else ""
                    family.add_metric([*values, reason], value)
                else:
                    family.add_rendered(labels, value)
    yield from out.values()
    yield from activity_families(snapshot, instances)


def activity_families(
    snapshot: Snapshot, instances: Iterable[InstanceEntries], table: FigureTable = FIGURES
) -> Iterator[GaugeFamily]:
    """`gpustack_instance_accelerator_<activity>` (issue 41): each grant's own activity, the
    card activity families' figures where the hardware measures the grant's holder alone (a
    partition, a whole card one Instance holds). A family no grant has a sample of is not
    written, so a node without activity is unchanged."""
    node = snapshot.node or ""
    grant_families = table.grant_activity_families()
    out = [
        GaugeFamily(
            f"gpustack_instance_accelerator_{family.suffix}",
            _sampled(family.help, snapshot.period_seconds),
            labels=[*ACCELERATOR_LABELS, *family.labels],
            kind=family.kind.value,
        )
        for family, _ in grant_families
    ]
    for item in instances:
        ref = item.instance
        for e in item.entries:
            if not e.activity:
                continue
            held = dict(e.activity)
            base = labels_of(ACCELERATOR_LABELS, [
                ref.namespace,
                ref.name,
                ref.uid,
                node,
                item.pod.name,
                e.holder or "",
                e.id,
                "" if e.index is None else str(e.index),
                e.manufacturer,
                e.mode.value,
            ])  # fmt: skip
            for family, (table_family, specs) in zip(out, grant_families, strict=True):
                for spec in specs:
                    value = held.get(cast(HealthFigure, spec.name))
                    if value is not None:
                        labels = base.render(table_family.labels, spec.labels)
                        family.add_rendered(labels, float(value))
    yield from (f for f in out if f.samples)


def capability_family(snapshot: Snapshot) -> Iterator[GaugeFamily]:
    """Per device and entry point, whether the per-process query answered, and if not, why
    (R-E5). No Instance labels: it is a property of the node's driver and one card."""
    family = GaugeFamily(
        "gpustack_accelerator_process_capability",
        "1 when the per-process query answered for this card and entry point (memory or cores) "
        "this round; 0 with the reason why the figures are absent.",
        labels=["node", "manufacturer", "id", "entry_point", "reason"],
    )
    section = snapshot.slices
    if section is not None:
        seen: set[tuple[str, str]] = set()
        for d in section.devices:
            if (d.manufacturer, d.device_id) in seen:
                continue  # a duplicate label set would fail the whole scrape
            seen.add((d.manufacturer, d.device_id))
            for entry_point, reason in (("memory", d.memory_reason), ("cores", d.cores_reason)):
                labels = [
                    snapshot.node or "",
                    d.manufacturer,
                    d.device_id,
                    entry_point,
                    "" if reason is None else reason.value,
                ]
                family.add_metric(labels, 0.0 if reason is not None else 1.0)
    yield family


_POD_FAMILIES: tuple[tuple[str, str, str], ...] = (
    ("cpu", "millicores", "CPU"),
    ("memory", "mib", "Memory"),
    ("storage", "mib", "Ephemeral storage (the pod-level aggregate the kubelet evicts on)"),
)


def pod_families(snapshot: Snapshot, pods: Iterable[PodLevel]) -> Iterator[GaugeFamily]:
    """`gpustack_instance_{cpu,memory,storage}_{total,used}_*`: published by the exporting agent
    only. A total is the sum of the regular containers' limits; used is absent when unmeasured."""
    node = snapshot.node or ""
    out: dict[str, GaugeFamily] = {}
    for resource, unit, what in _POD_FAMILIES:
        unit_text = "millicores" if unit == "millicores" else "MiB"
        out[f"{resource}_total"] = GaugeFamily(
            f"gpustack_instance_{resource}_total_{unit}",
            f"{what} the Instance declared: the sum of its containers' limits, {unit_text}.",
            labels=INSTANCE_LABELS,
        )
        out[f"{resource}_used"] = GaugeFamily(
            f"gpustack_instance_{resource}_used_{unit}",
            _sampled(
                f"{what} the Instance uses, as the kubelet measures it, {unit_text}.",
                snapshot.period_seconds,
            ),
            labels=INSTANCE_LABELS,
        )
    for p in pods:
        # The whole pod's figures: no one container's.
        labels = [p.instance.namespace, p.instance.name, p.instance.uid, node, p.pod, ""]
        for resource, pair in (
            ("cpu", p.cpu_millicores),
            ("memory", p.memory_mib),
            ("storage", p.storage_mib),
        ):
            out[f"{resource}_total"].add_metric(labels, float(pair.total))
            if pair.used is not None:
                out[f"{resource}_used"].add_metric(labels, float(pair.used))
    yield from out.values()


def verdict_families(
    snapshot: Snapshot, fresh: bool, extras: Extras = NO_EXTRAS
) -> Iterator[GaugeFamily]:
    """The collector's verdict on the round: the only families a stale round still publishes."""
    yield from collector_families(snapshot, fresh, extras)
    errors = GaugeFamily(
        "gpustack_accelerator_allocation_errors",
        "Pods of this node whose allocation annotation could not be read this round; they hold "
        "no grants until it is fixed (the log names them).",
    )
    if snapshot.timestamp > 0:
        errors.add_metric([], float(extras.allocation_errors))
    yield errors
    pod_errors = GaugeFamily(
        "gpustack_accelerator_pod_errors",
        "Pods of this node whose own data (annotations, figures) raised while this round used it, "
        "by stage; each is left out of that stage, logged once, and no other pod is affected.",
        labels=["stage"],
    )
    if snapshot.timestamp > 0:
        for stage in ("grants", "figures", "pod_level"):
            pod_errors.add_metric([stage], float(extras.pod_errors.get(stage, 0)))
    yield pod_errors
    # The agent's own figures describe the process, not the round: a stale round keeps them.
    yield from extras.own
    refused = GaugeFamily(
        "gpustack_accelerator_grants_refused",
        "Grants an allocation annotation states that this round refused, by why: "
        "held_by_another_pod (the kubelet's pod-resources answer or a DRA claim gives that card, "
        "partition or share to another pod and none of that card to this one; the log names "
        "the pod); contested_partition (two or more pods' annotations claim one partition the "
        "kubelet gave each only by its card; the one whose kubelet resource is the partition's "
        "profile is believed, else none; the log names each).",
        labels=["reason"],
    )
    if snapshot.timestamp > 0:
        for reason in REFUSALS:
            refused.add_metric([reason], float(extras.grants_refused.get(reason, 0)))
    yield refused


def figure_families(snapshot: Snapshot, extras: Extras = NO_EXTRAS) -> Iterator[GaugeFamily]:
    """The round's figures; none before the first round."""
    if snapshot.timestamp <= 0:
        return
    yield from card_families(snapshot)
    yield from health_families(snapshot)
    yield from topology_families(snapshot)
    yield from instance_families(snapshot, extras.instances)
    yield from capability_family(snapshot)
    if extras.exporting:
        yield from pod_families(snapshot, extras.pod_level)


def families(
    snapshot: Snapshot, fresh: bool = True, extras: Extras = NO_EXTRAS
) -> Iterator[GaugeFamily]:
    """Every family for a round. A stale one publishes its verdict and no figures (R-E4)."""
    yield from verdict_families(snapshot, fresh, extras)
    if fresh:
        yield from figure_families(snapshot, extras)


@dataclass(frozen=True, slots=True)
class Rendered:
    """One round's /metrics, fresh and stale: the figures are rendered once; only the small
    verdict differs between the two."""

    fresh: Exposition
    stale: Exposition

    @classmethod
    def of(cls, snapshot: Snapshot, extras: Extras = NO_EXTRAS) -> Rendered:
        labels_of.rotate()  # what the last two renderings used is kept; the rest goes
        # The fresh text in one pass (verdict, then figures): no second copy of the figures.
        return cls(
            fresh=Exposition.of(render(families(snapshot, True, extras))),
            stale=Exposition.of(render(verdict_families(snapshot, False, extras))),
        )


def render(families: Iterable[GaugeFamily]) -> bytes:
    """The exposition text of `families`, in order.

    Encoded a family at a time into one buffer: the text of a big node is megabytes, and
    joining every line first held the lines, their join and its encoding at once (three times
    the body at the round's peak, which the allocator then keeps; docs/performance.md)."""
    out = io.BytesIO()
    for f in families:
        doc = f.documentation.replace("\\", "\\\\").replace("\n", "\\n")
        name = f.name
        head = f"# HELP {name} {doc}\n# TYPE {name} {f.kind}\n"
        # A list made by a comprehension, not a generator into extend: a round writes every
        # sample through here.
        lines = [f"{name}{labels} {_float(value)}\n" for labels, value in f.samples]
        out.write((head + "".join(lines)).encode())
    return out.getvalue()


@dataclass(frozen=True, slots=True)
class Exposition:
    """Bytes ready to serve, plain and gzip-compressed: /metrics, and the snapshot's JSON."""

    plain: bytes
    gzipped: bytes

    @classmethod
    def of(cls, body: bytes) -> Exposition:
        # mtime=0 keeps the compressed bytes a pure function of the text. Level 1, nginx's
        # default `gzip_comp_level`: every round compresses its bodies whether or not anyone
        # scrapes, and level 6 took 2.5 times level 1's time for 11% fewer bytes (a node of
        # eight cards: 0.69 ms against 0.27 ms, 9.4 KB against 10.5 KB; issue 41).
        return cls(plain=body, gzipped=gzip.compress(body, compresslevel=1, mtime=0))
