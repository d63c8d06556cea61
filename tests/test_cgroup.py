"""The cgroup parser and the /proc resolver over fixture trees named after real environments.

fixtures/proc/<environment>/<pid>/{cgroup,stat,comm} with expected.json beside them (R-A1).
"""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from devicemanager.model import Reason
from devicemanager.node import cgroup
from devicemanager.node.attribution import Resolver
from tests.conftest import FIXTURES

PROC = FIXTURES / "proc"
CASES = [
    (env.name, pid, expected)
    for env in sorted(PROC.iterdir())
    if (env / "expected.json").exists()
    for pid, expected in json.loads((env / "expected.json").read_text())["expected"].items()
]
# Outcomes that come from stat or comm, not from the cgroup path.
PROCESS_LEVEL = {"zombie", "mediated"}


def case_id(case: tuple[str, str, dict[str, object]]) -> str:
    return f"{case[0]}/{case[2]['case']}"


@pytest.mark.parametrize("case", CASES, ids=[case_id(c) for c in CASES])
def test_resolver_over_the_fixture_tree(case: tuple[str, str, dict[str, object]]) -> None:
    env, pid, expected = case
    identified = Resolver(PROC / env).identify(int(pid))
    if identified.identity is None:
        got = {"pod_uid": None, "container_id": None, "runtime": None}
        got["reason"] = identified.reason.value if identified.reason else None
    else:
        i = identified.identity
        got = {
            "pod_uid": i.pod_uid,
            "container_id": i.container_id,
            "runtime": i.runtime,
            "reason": i.reason.value if i.reason else None,
        }
    want = {k: v for k, v in expected.items() if k not in ("case", "source")}
    if want["reason"] in PROCESS_LEVEL:
        assert got["reason"] == want["reason"]
    else:
        assert got == want


@pytest.mark.parametrize(
    "case", [c for c in CASES if c[2]["reason"] not in PROCESS_LEVEL], ids=case_id
)
def test_parser_alone_on_the_saved_file(case: tuple[str, str, dict[str, object]]) -> None:
    env, pid, expected = case
    identity = cgroup.parse((PROC / env / pid / "cgroup").read_text())
    assert identity.pod_uid == expected["pod_uid"]
    assert identity.container_id == expected["container_id"]
    assert identity.runtime == expected["runtime"]
    assert (identity.reason.value if identity.reason else None) == expected["reason"]


def test_every_reason_the_parser_can_give_has_a_fixture() -> None:
    seen = {c[2]["reason"] for c in CASES}
    for reason in (
        Reason.NO_POD_COMPONENT,
        Reason.AMBIGUOUS_POD,
        Reason.NO_CONTAINER_COMPONENT,
        Reason.AMBIGUOUS_CONTAINER,
        Reason.ZOMBIE,
        Reason.MEDIATED,
    ):
        assert reason.value in seen


# -- properties ----------------------------------------------------------------------------

HEX = "0123456789abcdef"
uids = st.text(HEX, min_size=32, max_size=32).map(
    lambda h: f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
)
cids = st.text(HEX, min_size=64, max_size=64)
segments = st.sampled_from(
    [
        "kubepods",
        "kubepods.slice",
        "burstable",
        "besteffort",
        "kubepods-burstable.slice",
        "system.slice",
        "..",
        ".",
        "",
        "init.scope",
        "user.slice",
        "docker",
        "kubelet.slice",
    ]
)


@st.composite
def kubelet_paths(draw: st.DrawFn) -> tuple[str, str, str]:
    uid, cid = draw(uids), draw(cids)
    prefix = "/".join(draw(st.lists(segments, max_size=4)))
    systemd = draw(st.booleans())
    if systemd:
        qos = draw(st.sampled_from(["", "burstable-", "besteffort-"]))
        pod = f"kubepods-{qos}pod{uid.replace('-', '_')}.slice"
        runtime = draw(st.sampled_from(["cri-containerd", "containerd", "crio", "docker"]))
        ctr = f"{runtime}-{cid}.scope"
    else:
        # The cgroupfs driver: <root>/kubepods[/burstable|/besteffort]/pod<uid>/<id>.
        qos = draw(st.sampled_from(["", "burstable/", "besteffort/"]))
        pod, ctr = f"kubepods/{qos}pod{uid}", cid
    return f"0::/{prefix}/{pod}/{ctr}\n", uid, cid


@settings(max_examples=400)
@given(st.text(max_size=300))
def test_the_parser_never_raises_and_only_names_uids_it_was_given(text: str) -> None:
    identity = cgroup.parse(text)
    if identity.pod_uid is not None:
        raw = identity.pod_uid.replace("-", "[-_]")
        # The UID occurs anchored: as a whole `pod<uid>` segment or a slice's last component.
        pattern = rf"(^|/)(pod|[^/]*-pod)({raw})(\.slice)?(/|:|$)"
        assert any(
            re.search(pattern, line.split(":", 2)[2], re.IGNORECASE)
            for line in text.splitlines()
            if line.count(":") >= 2
        )


@settings(max_examples=300)
@given(kubelet_paths())
def test_generated_kubelet_paths_resolve_to_their_pod_and_container(
    generated: tuple[str, str, str],
) -> None:
    text, uid, cid = generated
    identity = cgroup.parse(text)
    assert (identity.pod_uid, identity.container_id, identity.reason) == (uid, cid, None)


@settings(max_examples=300)
@given(uids, st.lists(st.booleans(), min_size=4, max_size=4), cids)
def test_dash_and_underscore_forms_are_one_uid(uid: str, flips: list[bool], cid: str) -> None:
    mixed = list(uid)
    for position, flip in zip((8, 13, 18, 23), flips, strict=True):
        if flip:
            mixed[position] = "_"
    spelled = "".join(mixed)
    for text in (
        f"0::/kubepods/pod{spelled}/{cid}\n",
        f"0::/kubepods/pod{spelled.upper()}/{cid}\n",
    ):
        assert cgroup.parse(text).pod_uid == uid


@settings(max_examples=200)
@given(
    uids,
    st.text(
        alphabet=st.characters(codec="ascii", exclude_characters="/\n"), min_size=1, max_size=6
    ),
)
def test_a_uid_inside_a_longer_segment_is_never_taken(uid: str, junk: str) -> None:
    assume(not junk.endswith("-"))
    text = f"0::/kubepods/{junk}pod{uid}/{'a' * 64}\n"
    assert cgroup.parse(text).pod_uid is None


def test_every_case_says_where_it_was_seen_or_why_it_is_synthetic() -> None:
    """A case taken from a public source cites it: a file at a commit or an issue thread; one
    that is not says `synthetic:` and why. This project's own tracker is no public source."""
    for env, pid, expected in CASES:
        source = str(expected.get("source", ""))
        assert source, f"{env}/{pid} says nowhere it was seen"
        assert "devicemanager issue" not in source.lower(), f"{env}/{pid}"
        if source.startswith("synthetic: "):
            assert len(source.removeprefix("synthetic: ")) >= 40, f"{env}/{pid} says not why"
            continue
        first = source.split()[0]
        assert first.startswith("https://github.com/"), f"{env}/{pid}: {first}"
        assert re.search(r"/blob/[0-9a-f]{40}/\S+|/(issues|pull)/\d+$", first), f"{env}/{pid}"
    public = [c for c in CASES if not str(c[2]["source"]).startswith("synthetic: ")]
    assert len(public) >= 45
    # Both halves of the bar are covered: processes in pods, and processes outside any.
    assert sum(bool(c[2]["pod_uid"]) for c in public) >= 25
    assert sum(c[2]["reason"] == "no_pod_component" for c in public) >= 10


# -- nothing outside a pod is ever called a pod ------------------------------------------------

# What the kubelet never writes as a whole segment: system units, other container managers,
# sessions, QoS levels, names that merely contain "pod" or a UID.
NON_POD_SEGMENTS = st.one_of(
    st.sampled_from(
        [
            "system.slice",
            "user.slice",
            "init.scope",
            "containerd.service",
            "docker",
            "ecs",
            "garden",
            "kubepods",
            "kubepods.slice",
            "kubepods-burstable.slice",
            "kubepods-besteffort.slice",
            "burstable",
            "besteffort",
            "..",
            ".",
            "",
            "podruntime.slice",
            "pods",
        ]
    ),
    cids,
    uids,
    cids.map(lambda c: f"docker-{c}.scope"),
    cids.map(lambda c: f"crio-{c}"),
    cids.map(lambda c: f"podman-{c}.scope"),
    cids.map(lambda c: f"libpod-{c}.scope"),
    uids.map(lambda u: f"xpod{u}"),
    uids.map(lambda u: f"pod{u}x"),
    uids.map(lambda u: f"pod-{u}"),
    uids.map(lambda u: f"backup-pod{u.replace('-', '_')}.slice"),
    uids.map(lambda u: f"pod{u.replace('-', '_')}.slice"),
    uids.map(lambda u: f"kubepods-pod{u}.scope"),
    uids.map(lambda u: f"pod{u[:-1]}"),
    st.builds(
        lambda u, c: f"kubepods-pod{u}:cri-containerd:{c}",  # no '.slice': not runc's form
        uids,
        cids,
    ),
)


# Where a cgroup merely named pod<uid> may sit that is not the kubelet's: no `kubepods` above it,
# and more above it than a cgroup namespace hides (`..`, then at most the QoS level).
NOT_KUBEPODS = st.sampled_from(
    [
        "system.slice",
        "user.slice",
        "docker",
        "ecs",
        "garden",
        "kubepods.slice",
        "kubepods-burstable.slice",
        "kubelet.slice",
        "containerd.service",
        "something",
        "podruntime.slice",
        "burstable",
        "besteffort",
    ]
)


@st.composite
def pod_named_cgroups_elsewhere(draw: st.DrawFn) -> str:
    uid, cid = draw(uids), draw(cids)
    above = draw(st.lists(NOT_KUBEPODS, min_size=1, max_size=4))
    # One QoS level directly above the pod is what a namespace may leave: make sure something
    # else is above it too.
    assume(any(s not in ("burstable", "besteffort") for s in above) or len(above) > 1)
    lead = draw(st.sampled_from(["/", "", "/../", "/../../"]))
    qos = draw(st.sampled_from(["", "burstable/", "besteffort/"]))
    return f"0::{lead}{'/'.join(above)}/{qos}pod{uid}/{cid}\n"


@settings(max_examples=300)
@given(pod_named_cgroups_elsewhere())
def test_a_pod_named_cgroup_outside_kubepods_is_no_pod(text: str) -> None:
    identity = cgroup.parse(text)
    assert (identity.pod_uid, identity.reason) == (None, Reason.NO_POD_COMPONENT), text


@settings(max_examples=200)
@given(
    uids,
    cids,
    st.integers(0, 4),
    st.sampled_from(["", "burstable/", "besteffort/"]),
    st.sampled_from(["/", ""]),
)
def test_a_cgroupfs_pod_whose_kubepods_a_namespace_elided_keeps_its_pod(
    uid: str, cid: str, ups: int, qos: str, lead: str
) -> None:
    """From a private cgroup namespace the kubelet's parents are `..` (SPIRE's
    `/../../../burstable/pod<uid>/<id>`), or nothing when the namespace root is kubepods."""
    text = f"0::{lead}{'../' * ups}{qos}pod{uid}/{cid}\n"
    identity = cgroup.parse(text)
    assert (identity.pod_uid, identity.container_id, identity.reason) == (uid, cid, None), text


@st.composite
def non_pod_files(draw: st.DrawFn) -> str:
    lines = []
    for hierarchy in range(draw(st.integers(1, 4))):
        segments = draw(st.lists(NON_POD_SEGMENTS, max_size=6))
        lead = draw(st.sampled_from(["/", "", "/../"]))
        controllers = draw(st.sampled_from(["", "memory", "name=systemd", "cpu,cpuacct"]))
        lines.append(f"{hierarchy}:{controllers}:{lead}{'/'.join(segments)}")
    return "\n".join(lines) + "\n"


@settings(max_examples=500)
@given(non_pod_files())
def test_no_generated_non_pod_path_is_ever_called_a_pod(text: str) -> None:
    identity = cgroup.parse(text)
    assert identity.pod_uid is None, text
    assert identity.reason in (Reason.NO_POD_COMPONENT, Reason.AMBIGUOUS_POD)


@st.composite
def public_pod_forms(draw: st.DrawFn) -> tuple[str, str, str]:
    """Every form a pod's process takes in fixtures/proc, with a generated pod and container."""
    uid, cid = draw(uids), draw(cids)
    u_ = uid.replace("-", "_")
    prefix = "/".join(draw(st.lists(st.sampled_from(["..", "system.slice", "docker"]), max_size=3)))
    form = draw(
        st.sampled_from(
            [
                f"kubepods-burstable-pod{u_}.slice:cri-containerd:{cid}",
                f"system.slice/containerd.service/kubepods-pod{u_}.slice:crio:{cid}",
                f"kubepods/burstable/pod{uid}/crio-{cid}",
                f"kubepods/pod{uid}/docker-{cid}",
                f"kubepods/besteffort/pod{uid}/{cid}",
                f"kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{u_}.slice/"
                f"docker-{cid}.scope",
            ]
        )
    )
    lead = draw(st.sampled_from(["/", "", "/../../"]))
    path = f"{lead}{prefix}/{form}" if prefix else f"{lead}{form}"
    return f"0::{path}\n", uid, cid


@settings(max_examples=300)
@given(public_pod_forms())
def test_every_public_form_keeps_its_pod(generated: tuple[str, str, str]) -> None:
    text, uid, cid = generated
    identity = cgroup.parse(text)
    assert (identity.pod_uid, identity.container_id, identity.reason) == (uid, cid, None), text
