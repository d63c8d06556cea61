"""Rules of the node's side a person could break in one line, each pinned by a value written by
hand (issue "Tests that notice the bugs a person would make"). Each test cites the requirement
of docs/spec.md it holds in its own docstring or its section's header, and was seen to fail
with the bug its docstring names made in the code (then restored).

1. /proc/<pid>/cgroup: every line form the kernel writes names the pod and container, the last
   line included when the file does not end in a newline.
2. The pod index: an object that cannot be read is left out alone; every other pod is indexed.
3. /metrics: label values escaped as the text format says, so that they read back exactly.
4. `slices`: absent ("could not measure") and empty ("measured, nothing found") stay apart
   through the JSON and in every consumer.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from devicemanager.figures import exposition, snapshot
from devicemanager.figures.exposition import Extras
from devicemanager.figures.figures import (
    AcceleratorEntry,
    InstanceEntries,
    View,
    entry,
    exported,
    metrics_json,
    view_of_document,
)
from devicemanager.figures.slices import from_json as slices_from_json
from devicemanager.figures.slices import to_json as slices_to_json
from devicemanager.grants.allocations import Mode
from devicemanager.grants.grants import Grant, InstanceRef
from devicemanager.grants.node import node_grants
from devicemanager.kube.client import WatchEvent
from devicemanager.kube.informer import PodInformer
from devicemanager.kube.sampler import InstanceSampler, merged_view
from devicemanager.model import (
    BackendState,
    BackendStatus,
    Card,
    Group,
    Reason,
    SliceDevice,
    SliceSection,
    Snapshot,
)
from devicemanager.node import cgroup
from devicemanager.node.attribution import Placement, Resolver
from devicemanager.node.pods import PodIndex, PodInfo, pod_info
from tests.world import accel, card, gpu, pod

# -- 1. /proc/<pid>/cgroup, every line form (R-A1) ---------------------------------------------

# One pod and container per driver, spelled as the kubelet and the runtime write them.
CGROUPFS_UID = "3f2a9c1e-7b4d-4e8a-9c2f-1a2b3c4d5e6f"
CGROUPFS_CID = "4be8d0c59a1f" + "0123456789abcdef" * 3 + "7e3d"
CGROUPFS_PATH = f"/kubepods/burstable/pod{CGROUPFS_UID}/{CGROUPFS_CID}"
SYSTEMD_CID = "c0ffee00" * 8
SYSTEMD_PATH = (
    "/kubepods.slice/kubepods-besteffort.slice/"
    "kubepods-besteffort-pod8d1e6a0b_52c4_4f07_b1d9_0e6f3a2c7b95.slice/"
    f"cri-containerd-{SYSTEMD_CID}.scope"
)

# (pod UID, container id, runtime) each driver's path names, written out by hand: the systemd
# slice's underscores read back as the UID's dashes; only a scope prefix names a runtime.
EXPECTED = {
    "cgroupfs": (
        "3f2a9c1e-7b4d-4e8a-9c2f-1a2b3c4d5e6f",
        "4be8d0c59a1f0123456789abcdef0123456789abcdef0123456789abcdef7e3d",
        None,
    ),
    "systemd": (
        "8d1e6a0b-52c4-4f07-b1d9-0e6f3a2c7b95",
        "c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00",
        "containerd",
    ),
}
PATHS = {"cgroupfs": CGROUPFS_PATH, "systemd": SYSTEMD_PATH}

# Each form is the only line of its file that names the pod (a v1 controller the kubelet does
# not manage is left at `/`, as on real nodes), so a parser that skips that form finds no pod.
LINE_FORMS = {
    "v2": "0::{path}\n",
    "v1 one controller": "13:rdma:/\n6:memory:{path}\n",
    "v1 several controllers on one line": "13:rdma:/\n4:cpu,cpuacct:{path}\n",
    "v1 named hierarchy": "13:rdma:/\n1:name=systemd:{path}\n",
    "v1 every controller, as the kernel writes it": (
        "12:blkio:{path}\n11:cpu,cpuacct:{path}\n10:cpuset:{path}\n9:devices:{path}\n"
        "8:freezer:{path}\n7:hugetlb:{path}\n6:memory:{path}\n5:net_cls,net_prio:{path}\n"
        "4:perf_event:{path}\n3:pids:{path}\n2:rdma:/\n1:name=systemd:{path}\n0::/\n"
    ),
    "hybrid: named hierarchy and an empty unified line": "1:name=systemd:{path}\n0::/\n",
}


def cgroup_cases() -> Iterator[Any]:
    for driver in PATHS:
        for form, template in LINE_FORMS.items():
            text = template.format(path=PATHS[driver])
            yield pytest.param(text, EXPECTED[driver], id=f"{driver}-{form}")
            # The same file as a writer that omits the final newline leaves it.
            yield pytest.param(
                text.removesuffix("\n"), EXPECTED[driver], id=f"{driver}-{form}-no-final-newline"
            )


@pytest.mark.parametrize(("text", "expected"), list(cgroup_cases()))
def test_every_line_form_names_the_pod_and_container(
    text: str, expected: tuple[str, str, str | None]
) -> None:
    """(R-A1) v2 `0::`, v1 `N:controller:`, several controllers on a line, a named hierarchy,
    and a last line without its newline: each, alone, names the pod and container.
    Bugs seen failing: `text.split("\\n")[:-1]` for `splitlines()` (drops an unterminated last
    line), `line[:-1]` to chop the newline (cuts the container id's last digit), a controller
    check `re.fullmatch("[a-z_=]*", controllers)` (no comma) or `"[a-z_,]*"` (no `=`),
    `controllers.startswith("name=")` skipped as not a controller, and
    `if not parts[1]: continue` (skips the v2 line)."""
    identity = cgroup.parse(text)
    assert (identity.pod_uid, identity.container_id, identity.runtime, identity.reason) == (
        *expected,
        None,
    )


def test_an_unterminated_last_line_is_read_whole() -> None:
    """(R-A1) The last line, without its newline, is the one naming the pod; its container id
    ends at the file's last byte. Bugs seen failing: `for line in text.split("\\n")[:-1]`, and
    `splitlines(keepends=True)` with `line[:-1]` (the unterminated line loses its last digit)."""
    text = (
        "13:rdma:/\n"
        "4:cpu,cpuacct:/kubepods/besteffort/pod0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d/"
        "feedfacefeedface"
    )
    identity = cgroup.parse(text)
    assert (identity.pod_uid, identity.container_id) == (
        "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d",
        "feedfacefeedface",
    )


def write_process(proc: Path, pid: int, cgroup_text: str, comm: str) -> None:
    d = proc / str(pid)
    d.mkdir(parents=True)
    (d / "cgroup").write_text(cgroup_text)
    (d / "comm").write_text(comm)
    (d / "stat").write_text(
        f"{pid} ({comm.strip()}) S 1 {pid} 1 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 182101 "
        + "0 " * 30
    )


def pod_object(uid: str, name: str, container_id: str, **meta: Any) -> dict[str, Any]:
    return {
        "metadata": {"uid": uid, "name": name, "namespace": "ns", **meta},
        "status": {"containerStatuses": [{"name": "main", "containerID": container_id}]},
    }


@pytest.mark.parametrize("driver", ["cgroupfs", "systemd"])
@pytest.mark.parametrize("form", ["v1 several controllers on one line", "v1 named hierarchy", "v2"])
def test_procfs_and_the_resolver_place_a_file_without_its_final_newline(
    tmp_path: Path, driver: str, form: str
) -> None:
    """(R-A1, R-A2) Through /proc as files: a cgroup file and a comm without a final newline
    still place the process in its pod and container, in the first round (the full read) and
    the next (the cache's steady path). Bugs seen failing: `text.split("\\n")[:-1]`, and
    `splitlines(keepends=True)` with `line[:-1]`, in cgroup.parse."""
    text = LINE_FORMS[form].format(path=PATHS[driver]).removesuffix("\n")
    write_process(tmp_path, 4242, text, "python3")
    uid, cid, _ = EXPECTED[driver]
    index = PodIndex.of([pod_object(uid, "vllm-0", f"containerd://{cid}")])
    resolver = Resolver(tmp_path, ticks_per_second=100)
    for _ in range(2):
        (resolution,) = resolver.resolve([4242], index).values()
        assert resolution.placement == Placement(EXPECTED[driver][0], "main")
        assert resolution.reason is None


def test_the_mps_daemon_is_known_by_its_comm_without_a_newline(tmp_path: Path) -> None:
    """(R-A2) comm is written with its newline by the kernel; either way the MPS daemon is
    `mediated`, never charged to the pod it runs in. Bug seen failing: the comm read as
    `self._read(pid, "comm")[:-1]` (chopping a newline that is not there cuts `mps` to `mp`)."""
    for pid, comm in ((5001, "nvidia-cuda-mps\n"), (5002, "nvidia-cuda-mps")):
        write_process(tmp_path, pid, f"0::{CGROUPFS_PATH}\n", comm)
    resolver = Resolver(tmp_path, ticks_per_second=100)
    assert [resolver.identify(p).reason for p in (5001, 5002)] == [
        Reason.MEDIATED,
        Reason.MEDIATED,
    ]


# -- 2. the pod index: an unreadable object is left out alone (R-A4) ---------------------------


class Unreadable(dict[str, Any]):
    """A pod object whose every read raises: what nobody foresaw, standing in for any."""

    def get(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("this object cannot be read")


def good(n: int) -> dict[str, Any]:
    return pod_object(f"0000000{n}-0000-4000-8000-00000000000{n}", f"good-{n}", f"containerd://{n}")


# Objects with no UID to index them by: left out, each alone.
UNREADABLE: list[Any] = [
    None,
    "a pod",
    ["metadata"],
    42,
    {},
    {"metadata": None},
    {"metadata": "uid"},
    {"metadata": ["uid", "x"]},
    {"metadata": {"name": "no-uid"}},
    {"metadata": {"uid": 5}},
    {"metadata": {"uid": True}},
    {"metadata": {"uid": None}},
    {"metadata": {"uid": ""}},
    {"metadata": {"uid": ["0000000a-0000-4000-8000-00000000000a"]}},
    {"metadata": {"uid": {"id": "0000000b-0000-4000-8000-00000000000b"}}},
    Unreadable(metadata={"uid": "0000000c-0000-4000-8000-00000000000c"}),
]
# Objects whose identity reads but other parts do not: indexed, the damaged part read as
# nothing (R-A4 indexes every pod of the node, so its processes are excluded, not unknown).
DAMAGED: list[dict[str, Any]] = [
    {"metadata": {"uid": "d0000001-0000-4000-8000-000000000001", "annotations": ["a", "b"]}},
    {"metadata": {"uid": "d0000002-0000-4000-8000-000000000002", "annotations": "k=v"}},
    {"metadata": {"uid": "d0000003-0000-4000-8000-000000000003", "labels": 7}},
    {"metadata": {"uid": "d0000004-0000-4000-8000-000000000004", "ownerReferences": {"x": 1}}},
    {"metadata": {"uid": "D0000005-0000-4000-8000-000000000005"}, "spec": [], "status": "x"},
    {
        "metadata": {"uid": "d0000006-0000-4000-8000-000000000006", "name": 6, "namespace": []},
        "status": {"containerStatuses": {"name": "main"}},
    },
    {
        "metadata": {"uid": "d0000007-0000-4000-8000-000000000007"},
        "spec": {"containers": "main", "initContainers": [None, 3]},
        "status": {"containerStatuses": [None, {"containerID": 5, "name": "x"}, {"name": "m"}]},
    },
]
INDEXED = {
    "00000001-0000-4000-8000-000000000001",
    "00000002-0000-4000-8000-000000000002",
    "00000003-0000-4000-8000-000000000003",
    "d0000001-0000-4000-8000-000000000001",
    "d0000002-0000-4000-8000-000000000002",
    "d0000003-0000-4000-8000-000000000003",
    "d0000004-0000-4000-8000-000000000004",
    "d0000005-0000-4000-8000-000000000005",
    "d0000006-0000-4000-8000-000000000006",
    "d0000007-0000-4000-8000-000000000007",
}


def node_objects() -> list[Any]:
    """Good pods before, among and after every damaged and unreadable object."""
    return [good(1), *UNREADABLE[:8], *DAMAGED[:4], good(2), *UNREADABLE[8:], *DAMAGED[4:], good(3)]


def test_the_index_leaves_out_only_the_objects_it_cannot_read() -> None:
    """(R-A4) The exact UIDs indexed: every readable pod, whatever comes before or after an
    unreadable one. Bugs seen failing: `break` for `continue` after a skipped object (every
    later pod lost), the `try`/`except` around `pod_info` removed from PodIndex.of (one
    object that raises fails the node's whole index), and a pod whose annotations are not a
    mapping dropped whole (its processes would turn `unknown_pod` and poison their device)."""
    index = PodIndex.of(node_objects())
    assert set(index.pods) == INDEXED
    assert index.skipped == 16
    # The good pods' own parts are intact beside the damaged ones.
    assert index.container_name("00000002-0000-4000-8000-000000000002", "2") == "main"
    assert dict(index.pods["d0000001-0000-4000-8000-000000000001"].annotations) == {}


@pytest.mark.parametrize("obj", [o for o in UNREADABLE if type(o) is dict], ids=repr)
def test_an_object_without_a_string_uid_is_no_pod_and_raises_nothing(obj: dict[str, Any]) -> None:
    """(R-A4) pod_info itself answers None, never raises, for JSON of any shape: the sampler
    maps it over a namespace's pods with no guard of its own. Bugs seen failing: `if not uid`
    for `if not isinstance(uid, str) or not uid` (`5.lower()` raises), and
    `meta = obj.get("metadata") or {}` (`"uid".get` raises)."""
    assert pod_info(obj) is None


def test_the_informer_leaves_out_only_the_objects_it_cannot_read() -> None:
    """(R-A4) The informer's list and every watch event after it: an unreadable object is left
    out, never a failed list or a dead watch, and every other pod stays indexed; its resource
    version still counts, so the watch resumes after it. Bugs seen failing: `pod_info` for
    `_info` in `replace_all` (`None.get` fails the whole list: nothing indexed), the
    `try`/`except` removed from `_info`, and the `_info(...) is None` return moved above the
    version update."""
    informer = PodInformer(client=None, node="node-1")  # type: ignore[arg-type]
    informer.replace_all(node_objects(), "100")
    index = informer()
    assert index is not None and set(index.pods) == INDEXED
    # The client hands the informer JSON objects only.
    events = [o for o in UNREADABLE if type(o) is dict]
    for n, obj in enumerate(events, start=101):
        meta = obj.get("metadata")
        if isinstance(meta, dict):
            obj = {**obj, "metadata": {**meta, "resourceVersion": str(n)}}
        informer.apply(WatchEvent("MODIFIED", obj))
    informer.apply(WatchEvent("DELETED", {"metadata": {"uid": 9, "resourceVersion": "200"}}))
    informer.apply(WatchEvent("ADDED", good(4)))
    index = informer()
    assert index is not None
    assert set(index.pods) == INDEXED | {"00000004-0000-4000-8000-000000000004"}
    assert informer.version == "200"


# -- 3. /metrics label values, escaped as the text format says (R-E1) --------------------------

NAMESPACE = 'team-"a"'
INSTANCE = "line one\nline two"
INSTANCE_UID = "uid\\with\\backslashes\\"
NODE = 'node\\"quoted\\"'
CARD_NAME = "H100 \\n not a newline"
DRIVER = '550\\\n"'
CARD_ID = "GPU-,}={x}"


def escaping_snapshot(values: dict[str, str]) -> tuple[Snapshot, Extras]:
    """A round whose every label value the snapshot holds is one of `values`."""
    card_ = Card(id=values["id"], index=0, name=values["name"], memory_total_mib=80)
    snap = Snapshot(
        timestamp=1.0,
        period_seconds=15,
        node=values["node"],
        groups=(Group("nvidia", 1.0, (card_,), values["driver_version"]),),
        backends=(BackendStatus("nvidia", BackendState.OK, 0.1),),
    )
    ref = InstanceRef(values["namespace"], values["instance_name"], values["instance_uid"])
    info = PodInfo(uid="p", namespace=values["namespace"], name=values["instance_name"])
    entry_ = AcceleratorEntry("nvidia", values["id"], 0, Mode.EXCLUSIVE, memory_total_mib=80)
    return snap, Extras(instances=(InstanceEntries(ref, info, (entry_,)),))


def render_and_read(values: dict[str, str]) -> tuple[str, dict[str, list[dict[str, str]]]]:
    snap, extras = escaping_snapshot(values)
    text = exposition.render(exposition.families(snap, True, extras)).decode()
    read = {f.name: [s.labels for s in f.samples] for f in text_string_to_metric_families(text)}
    return text, read


HAND_WRITTEN = {
    "namespace": NAMESPACE,
    "instance_name": INSTANCE,
    "instance_uid": INSTANCE_UID,
    "node": NODE,
    "name": CARD_NAME,
    "driver_version": DRIVER,
    "id": CARD_ID,
}


def test_label_values_are_escaped_as_the_text_format_says() -> None:
    """(R-E1) `\\` as `\\\\`, `"` as `\\"`, a newline as `\\n`, the backslash first: the bytes
    written out by hand. Bugs seen failing: the backslash replaced last (`\\n` from a newline
    becomes `\\\\n`), the quote escaped before the backslash, and any one of the three
    replacements dropped."""
    text, _ = render_and_read(HAND_WRITTEN)
    assert (
        "gpustack_accelerator_info{"
        r'driver_version="550\\\n\"",id="GPU-,}={x}",index="0",manufacturer="nvidia",'
        r'name="H100 \\n not a newline",node="node\\\"quoted\\\"",parent_id=""} 1.0'
        "\n"
    ) in text
    assert (
        "gpustack_instance_accelerator_memory_total_mib{"
        r'container="",id="GPU-,}={x}",index="0",instance_name="line one\nline two",'
        r'instance_uid="uid\\with\\backslashes\\",manufacturer="nvidia",mode="Exclusive",'
        r'namespace="team-\"a\"",node="node\\\"quoted\\\"",pod="line one\nline two"} 80.0'
        "\n"
    ) in text


def test_label_values_read_back_exactly_with_a_real_parser() -> None:
    """(R-E1) prometheus_client's parser reads every label value back to the original: a
    quote, a newline, a literal `\\n`, backslashes, a trailing backslash, `\\"`."""
    _, read = render_and_read(HAND_WRITTEN)
    assert read["gpustack_accelerator_info"] == [
        {
            "node": 'node\\"quoted\\"',
            "manufacturer": "nvidia",
            "id": "GPU-,}={x}",
            "index": "0",
            "name": "H100 \\n not a newline",
            "driver_version": '550\\\n"',
            "parent_id": "",
        }
    ]
    assert read["gpustack_instance_accelerator_memory_total_mib"] == [
        {
            "namespace": 'team-"a"',
            "instance_name": "line one\nline two",
            "instance_uid": "uid\\with\\backslashes\\",
            "node": 'node\\"quoted\\"',
            "pod": "line one\nline two",
            "container": "",
            "id": "GPU-,}={x}",
            "index": "0",
            "manufacturer": "nvidia",
            "mode": "Exclusive",
        }
    ]


# What the escaping is about, mixed with what a label value may hold besides.
TRICKY = st.lists(
    st.one_of(
        st.sampled_from(["\\", '"', "\n", "n", '\\"', "\\n", "\\\\", ",", "}", "=", " "]),
        st.characters(codec="utf-8", exclude_categories=("Cs",)),
    ),
    max_size=12,
).map("".join)
LABELS = ("namespace", "instance_name", "instance_uid", "node", "name", "driver_version", "id")


@settings(max_examples=300, deadline=None)
@given(st.fixed_dictionaries({k: TRICKY for k in LABELS}))
def test_any_label_value_reads_back_exactly(values: dict[str, str]) -> None:
    """(R-E1) Over generated strings of backslashes, quotes, newlines and the rest: every
    label value the round holds reads back as it was. Bugs seen failing: as above."""
    _, read = render_and_read(values)
    (info,) = read["gpustack_accelerator_info"]
    assert {k: info[k] for k in ("node", "id", "name", "driver_version")} == {
        k: values[k] for k in ("node", "id", "name", "driver_version")
    }
    (series,) = read["gpustack_instance_accelerator_memory_total_mib"]
    assert {k: series[k] for k in ("namespace", "instance_name", "instance_uid", "node")} == {
        k: values[k] for k in ("namespace", "instance_name", "instance_uid", "node")
    }


def test_promtool_reads_the_escaped_text() -> None:
    """(R-E1) Prometheus's own parser takes the text: promtool exits 0 with nothing to say.
    Bugs seen failing: each of the escaping bugs above (`unexpected end of label value`, a
    sample line broken in two, an invalid escape sequence)."""
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (Debian package prometheus; .ci/run installs it)")
    text, _ = render_and_read(HAND_WRITTEN)
    result = subprocess.run(
        [promtool, "check", "metrics"], input=text.encode(), capture_output=True, check=False
    )
    assert result.returncode == 0, result.stderr.decode()
    assert result.stdout.strip() == b"" and result.stderr.strip() == b""


# -- 4. `slices` absent and `slices` empty stay different (R-S1, R-S2) ----------------------------

NOW = 1_800_000_000.0
GRANT_POD = pod("vllm-0", {"main": [accel(0, 3, units=400_000)]})
# A quarter of an 81559 MiB card: 400000 * 81559 // 1600000, written out.
QUOTA_MIB = 20389
# Measured, nothing found: the pass covered the card and no process ran on it.
NONE_HELD = SliceSection(devices=(SliceDevice("nvidia", gpu(0)),))


def round_with(section: SliceSection | None) -> Snapshot:
    return Snapshot(
        timestamp=NOW,
        period_seconds=15,
        node="node-1",
        groups=(Group("nvidia", NOW, (card(0),), "550.90.07"),),
        backends=(BackendStatus("nvidia", BackendState.OK, 0.1),),
        slices=section,
    )


def test_absent_and_empty_sections_encode_differently() -> None:
    """(R-S1, R-S2) No section: no `slices` key (and a `null` one reads as none); an empty one:
    the section with its empty lists (R-S1's `slices?`). Bugs seen failing: `if section.usages:`
    around the usages (an empty section loses its list), and `doc["slices"] = … if
    snapshot.slices is not None else None` (absent written as a key)."""
    absent = json.loads(snapshot.encode(round_with(None)))
    empty = json.loads(snapshot.encode(round_with(SliceSection())))
    assert "slices" not in absent
    assert empty["slices"] == {"schemaVersion": 1, "usages": [], "devices": []}
    assert slices_to_json(NONE_HELD) == {
        "schemaVersion": 1,
        "usages": [],
        "devices": [
            {
                "manufacturer": "nvidia",
                "deviceID": gpu(0),
                "rowsReturned": 0,
                "rowsAttributed": 0,
                "rowsNonInstance": 0,
                "rowsUnreadable": 0,
                "rowsAmbiguous": 0,
                "readsTruncated": 0,
            }
        ],
    }


def test_absent_and_empty_sections_read_back_as_themselves() -> None:
    """(R-S2) Reading back: absent (no key, or `null`) is None; empty is an empty section, not
    None. Bugs seen failing: `if not doc.get("usages") and not doc.get("devices"): return None`
    in slices.from_json (nothing found read as could not measure), and
    `slices_from_json(doc.get("slices")) or SliceSection()` in snapshot.from_json (could not
    measure read as nothing found)."""
    for section in (None, SliceSection(), NONE_HELD):
        doc = json.loads(snapshot.encode(round_with(section)))
        assert snapshot.from_json(doc).slices == section
    doc = json.loads(snapshot.encode(round_with(None)))
    assert snapshot.from_json({**doc, "slices": None}).slices is None
    assert slices_from_json(None) is None
    assert slices_from_json({"schemaVersion": 1}) == SliceSection()
    assert slices_from_json({"schemaVersion": 1, "usages": [], "devices": []}) is not None


def served(section: SliceSection | None) -> dict[str, Any]:
    """The round as a consumer fetches it: encoded and decoded."""
    return json.loads(snapshot.encode(round_with(section)))


def exporter_entry(section: SliceSection | None) -> AcceleratorEntry:
    index = PodIndex.of([GRANT_POD])
    view = view_of_document(served(section), NOW + 1)
    assert view is not None
    (instance,) = exported(index, node_grants(index), view, ["nvidia"])
    (entry_,) = instance.entries
    return entry_


def test_the_exporters_entry_is_absent_without_a_section_and_zero_when_none_held() -> None:
    """(R-S2, R-F1) The exporter's figures: no section, the used figures absent (the quota, a
    total, still stated); the card measured and nothing of this holder on it, measured zeros;
    an empty section that did not cover the card answers nothing, as docs/endpoints.md orders.
    Bugs seen failing: `return None` for the measured-zero answer in slices.figures (idle read
    as unmeasured), and `Figures(0, 0.0)` for a device not in `devices[]` (unmeasured read as
    idle)."""
    absent = exporter_entry(None)
    assert (absent.memory_total_mib, absent.memory_used_mib) == (QUOTA_MIB, None)
    assert (absent.cores_utilization_percent, absent.memory_utilization_percent) == (None, None)
    idle = exporter_entry(NONE_HELD)
    assert (idle.memory_total_mib, idle.memory_used_mib) == (QUOTA_MIB, 0)
    assert (idle.cores_utilization_percent, idle.memory_utilization_percent) == (0.0, 0.0)
    uncovered = exporter_entry(SliceSection())
    assert (uncovered.memory_used_mib, uncovered.cores_utilization_percent) == (None, None)


def series(section: SliceSection | None) -> dict[str, list[tuple[dict[str, str], float]]]:
    index = PodIndex.of([GRANT_POD])
    snap = snapshot.from_json(served(section))
    instances = exported(index, node_grants(index), View.of(snap), ["nvidia"])
    text = exposition.render(exposition.families(snap, True, Extras(instances=instances)))
    return {
        f.name: [(s.labels, s.value) for s in f.samples]
        for f in text_string_to_metric_families(text.decode())
    }


def test_metrics_publish_no_used_sample_without_a_section_and_zeros_when_none_held() -> None:
    """(R-E2, R-E5) /metrics: no section, no used sample and no capability sample; measured and
    none held, used 0 and the capability 1 for both entry points. Bugs seen failing: the
    measured-zero answer in slices.figures made `return None`, and `if section is not None:`
    dropped in capability_family."""
    absent, idle = series(None), series(NONE_HELD)
    for family in (
        "gpustack_instance_accelerator_memory_used_mib",
        "gpustack_instance_accelerator_cores_utilization_percent",
        "gpustack_accelerator_process_capability",
    ):
        assert absent.get(family, []) == [], family
    assert [v for _, v in absent["gpustack_instance_accelerator_memory_total_mib"]] == [20389.0]
    assert [v for _, v in idle["gpustack_instance_accelerator_memory_used_mib"]] == [0.0]
    assert [v for _, v in idle["gpustack_instance_accelerator_cores_utilization_percent"]] == [0.0]
    assert sorted(
        (labels["entry_point"], labels["reason"], v)
        for labels, v in idle["gpustack_accelerator_process_capability"]
    ) == [("cores", "", 1.0), ("memory", "", 1.0)]


class StubKube:
    """What the sampler asks of the API server: the Instance's pod and its kubelet summary."""

    def __init__(self, obj: dict[str, Any]) -> None:
        self.obj = obj

    def list_namespaced_pods(self, namespace: str, labels: str | None = None) -> list[Any]:
        return [self.obj]

    def stats_summary(self, node: str) -> dict[str, Any]:
        meta = self.obj["metadata"]
        ref = {"namespace": meta["namespace"], "name": meta["name"], "uid": meta["uid"]}
        return {
            "pods": [
                {
                    "podRef": ref,
                    "cpu": {"usageNanoCores": 250_000_000, "time": "2027-01-15T08:00:00Z"},
                    "memory": {"workingSetBytes": 2 * 1048576},
                    "ephemeral-storage": {"usedBytes": 1048576},
                }
            ]
        }

    def pod_metrics(self, namespace: str, name: str) -> Any:
        raise AssertionError("the kubelet answered")


def sampled(document: dict[str, Any]) -> list[dict[str, Any]]:
    """The accelerators of the sample the worker serves, from the agent's `document`."""
    obj = json.loads(json.dumps(GRANT_POD))
    obj["spec"]["nodeName"] = "node-1"
    sampler = InstanceSampler(
        StubKube(obj),  # type: ignore[arg-type]
        snapshot_url="https://agent/monitor/snapshot",
        fetch=lambda url: document,
        clock=lambda: NOW + 1,
    )
    return list(metrics_json(sampler.sample("ns", "vllm-0"))["sample"]["accelerators"])


def test_the_sample_omits_used_figures_without_a_section_and_says_zero_when_none_held() -> None:
    """(R-F7, R-S2) The per-Instance sample the worker serves: absent figures left out
    (omitempty), measured zeros written. Bugs seen failing: the measured-zero answer in
    slices.figures made `return None`, and the `if v is not None` filter dropped from
    metrics_json (absent written as `null`)."""
    absent, idle = sampled(served(None)), sampled(served(NONE_HELD))
    common = {
        "id": gpu(0),
        "mode": "Sliced",
        "memoryTotalMiB": QUOTA_MIB,
        "temperatureCelsius": 40.0,
        "powerUsageWatts": 100.0,
        "unhealthy": False,
    }
    assert absent == [common]
    assert idle == [
        {
            **common,
            "memoryUsedMiB": 0,
            "memoryUtilizationPercent": 0.0,
            "coresUtilizationPercent": 0.0,
        }
    ]


def sliced(manufacturer: str, device_id: str) -> Grant:
    return Grant("p1", ("main",), manufacturer, device_id, 0, Mode.SLICED, units=800_000)


def test_merging_agents_keeps_one_agents_absence_beside_anothers_measurement() -> None:
    """(R-S2, R-F7) The sampler merges the snapshots of a node's agents: the one that could not
    measure (no section) lends no zeros to its cards, and the one that measured keeps its
    zeros. Bugs seen failing: `if snap.slices is not None` dropped in merged_view (merge then
    reads the absent section's devices and the sample fails), an absent section emptying the
    merge for every agent, and the measured-zero answer made `return None`."""
    amd = Snapshot(
        timestamp=NOW,
        period_seconds=15,
        groups=(Group("amd", NOW, (Card(id="amd-0", index=0, memory_total_mib=65536),)),),
    )
    amd_doc = json.loads(snapshot.encode(amd))
    view = merged_view([amd_doc, served(NONE_HELD)], NOW + 1)
    assert view is not None
    got = [entry(g, view) for g in (sliced("amd", "amd-0"), sliced("nvidia", gpu(0)))]
    # Half of each card: 800000 * 65536 // 1600000 and 800000 * 81559 // 1600000.
    assert [(e.memory_total_mib, e.memory_used_mib, e.cores_utilization_percent) for e in got] == [
        (32768, None, None),
        (40779, 0, 0.0),
    ]
    alone = merged_view([amd_doc], NOW + 1)
    assert alone is not None
    only = entry(sliced("amd", "amd-0"), alone)
    assert (only.memory_used_mib, only.cores_utilization_percent) == (None, None)
