"""Every manufacturer's manifests (issue 20; R-O6): deploy/base and one kustomize overlay per
manufacturer (deploy/overlays/<manufacturer>), and their committed builds (deploy/rendered/, and
daemonset.yaml for NVIDIA), which `kubectl apply -f` takes where kustomize is not at hand.

Where kustomize 5 is found (kubectl or kustomize on the PATH or in .venv/bin),
scripts/manifests builds every overlay afresh and the committed files must be that build.
Everywhere, the committed builds are validated against the schemas of a current Kubernetes and
checked against the code and against what each vendor needs.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

import devicemanager
from devicemanager.agent.config import SERVE_FLAGS
from devicemanager.backend import BACKENDS, import_from_string
from devicemanager.kube.role import COMPONENT, COMPONENT_LABEL, MANUFACTURER_LABEL
from tests.conftest import REPO

DEPLOY = REPO / "deploy"
RENDERED = DEPLOY / "rendered"
MANUFACTURERS = sorted(BACKENDS)
SHARED_KINDS = {"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Service"}
POD_RESOURCES = "pod-resources"
PROBES = ("startupProbe", "readinessProbe", "livenessProbe")

# What each vendor's library needs from the host, as docs/vendors.md describes it: host path ->
# (hostPath type, mounted read-only). Device nodes are not mounted read-only (a device is opened
# for writing); library trees and registries are. NVIDIA's come from the container toolkit. No
# type creates what it mounts (DirectoryOrCreate, FileOrCreate): a monitor changes nothing on
# the node, and a path that must exist is checked by the kubelet before the pod starts.
HOST_PATHS: dict[str, dict[str, tuple[str, bool]]] = {
    "nvidia": {},
    "amd": {
        "/opt/rocm": ("Directory", True),
        "/dev/kfd": ("CharDevice", False),
        "/dev/dri": ("Directory", False),
    },
    "hygon": {
        "/opt/hyhal": ("Directory", True),
        "/dev/kfd": ("CharDevice", False),
        "/dev/mkfd": ("CharDevice", False),
        "/dev/dri": ("Directory", False),
        # The MIG registry (/etc/dmi_mig_config) exists only where partitions were made: read
        # through the host's /etc, which every node has (REMOUNTED), so that nothing is created.
        "/etc": ("Directory", True),
        "/etc/vdev": ("Directory", True),
    },
    "ascend": {
        "/usr/local/Ascend/driver": ("Directory", True),
        "/dev/davinci_manager": ("CharDevice", False),
        "/dev/devmm_svm": ("CharDevice", False),
        "/dev/hisi_hdc": ("CharDevice", False),
    },
    "metax": {
        "/opt/mxdriver": ("Directory", True),
        "/dev/mxcd": ("CharDevice", False),
        "/dev/dri": ("Directory", False),
    },
    "thead": {"/usr/local/PPU_SDK": ("Directory", True)},
}
# Host paths mounted elsewhere than where they lie on the host: (manufacturer, path) -> mountPath.
REMOUNTED = {("hygon", "/etc"): "/host/etc"}
# hostPath types that check what is there and create nothing.
CHECKING_TYPES = {"Directory", "File", "Socket", "CharDevice", "BlockDevice"}
# Only NVIDIA's container toolkit puts the devices in an unprivileged container's device cgroup;
# every other vendor's overlay is privileged (deploy/components/device-access says why).
UNPRIVILEGED = {"nvidia"}


def documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def header(path: Path) -> list[str]:
    """The leading comment block: what scripts/manifests writes before the build."""
    lines = path.read_text().splitlines()
    return lines[: next(i for i, line in enumerate(lines) if not line.startswith("#"))]


def keys(node: Any) -> set[str]:
    """Every mapping key in a YAML tree, inline patches (a kustomization's strings) included."""
    if isinstance(node, dict):
        return set(node) | {k for value in node.values() for k in keys(value)}
    if isinstance(node, list):
        return {k for item in node for k in keys(item)}
    if isinstance(node, str) and "\n" in node:
        return keys(yaml.safe_load(node))
    return set()


def build_of(manufacturer: str) -> list[dict[str, Any]]:
    return documents(RENDERED / f"{manufacturer}.yaml")


def daemonset(manufacturer: str) -> dict[str, Any]:
    (ds,) = [d for d in build_of(manufacturer) if d["kind"] == "DaemonSet"]
    return ds


def container(manufacturer: str) -> dict[str, Any]:
    (c,) = daemonset(manufacturer)["spec"]["template"]["spec"]["containers"]
    return c


@pytest.fixture(scope="module")
def fresh(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """scripts/manifests run into a directory of its own: the build of the sources as they are."""
    script = str(REPO / "scripts" / "manifests")
    which = subprocess.run([script, "--which"], capture_output=True, text=True, check=False)
    if which.returncode == 3:
        pytest.skip(
            "no kustomize 5 to build the overlays with (kubectl or kustomize on the PATH or in "
            ".venv/bin)"
        )
    assert which.returncode == 0, which.stderr
    out = tmp_path_factory.mktemp("manifests")
    result = subprocess.run([script, str(out)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    return out


# -- the committed builds are the sources built ------------------------------------------------


def test_one_overlay_and_one_build_per_manufacturer() -> None:
    overlays = sorted(p.name for p in (DEPLOY / "overlays").iterdir() if p.is_dir())
    assert overlays == MANUFACTURERS
    assert sorted(p.stem for p in RENDERED.glob("*.yaml")) == MANUFACTURERS


@pytest.mark.parametrize("manufacturer", MANUFACTURERS)
def test_the_committed_build_is_the_overlay_built(fresh: Path, manufacturer: str) -> None:
    built = fresh / "deploy" / "rendered" / f"{manufacturer}.yaml"
    committed = RENDERED / f"{manufacturer}.yaml"
    assert documents(committed) == documents(built), f"{committed} is stale: run scripts/manifests"
    assert header(committed) == header(built)


def test_daemonset_yaml_is_the_nvidia_overlay_built(fresh: Path) -> None:
    assert documents(REPO / "daemonset.yaml") == documents(fresh / "daemonset.yaml"), (
        "daemonset.yaml is stale: run scripts/manifests"
    )
    assert header(REPO / "daemonset.yaml") == header(fresh / "daemonset.yaml")


def test_daemonset_yaml_is_the_committed_nvidia_build() -> None:
    # Checked without kustomize too: the file at the top is the NVIDIA overlay, nothing else.
    assert documents(REPO / "daemonset.yaml") == build_of("nvidia")


# -- what the API server would accept ----------------------------------------------------------


@pytest.mark.parametrize("manufacturer", MANUFACTURERS)
def test_each_build_validates_against_a_current_kubernetes(manufacturer: str) -> None:
    import kubernetes_validate

    version = kubernetes_validate.latest_version()
    for doc in build_of(manufacturer):
        kubernetes_validate.validate(doc, version, strict=True)
    # Rules the API server applies beyond the schema: a DaemonSet's selector must match its
    # template's labels, and `privileged: true` beside `allowPrivilegeEscalation: false` is
    # refused ("cannot set allowPrivilegeEscalation to false and privileged to true").
    ds = daemonset(manufacturer)
    assert (
        ds["spec"]["selector"]["matchLabels"].items()
        <= ds["spec"]["template"]["metadata"]["labels"].items()
    )
    security = container(manufacturer)["securityContext"]
    assert not (security.get("privileged") and security.get("allowPrivilegeEscalation") is False)


def test_every_build_shares_one_namespace_rbac_and_service() -> None:
    # Applying several overlays to one cluster (nodes of several manufacturers) must not make
    # them fight over the objects they share: those are the same in every build.
    shared = {
        m: sorted(
            (d for d in build_of(m) if d["kind"] != "DaemonSet"),
            key=lambda d: (d["kind"], d["metadata"]["name"]),
        )
        for m in MANUFACTURERS
    }
    first = shared[MANUFACTURERS[0]]
    assert {d["kind"] for d in first} == SHARED_KINDS and len(first) == len(SHARED_KINDS)
    for manufacturer in MANUFACTURERS:
        assert shared[manufacturer] == first, manufacturer


def test_the_namespace_admits_what_the_agent_needs() -> None:
    (namespace,) = [d for d in build_of("nvidia") if d["kind"] == "Namespace"]
    labels = namespace["metadata"]["labels"]
    # hostPID (and hostPath) are beyond `baseline`: only `privileged` admits the pods.
    assert all(daemonset(m)["spec"]["template"]["spec"]["hostPID"] for m in MANUFACTURERS)
    assert labels["pod-security.kubernetes.io/enforce"] == "privileged"
    # Audit and warn one level stricter, so the privileges stay visible.
    assert labels["pod-security.kubernetes.io/audit"] == "baseline"
    assert labels["pod-security.kubernetes.io/warn"] == "baseline"


# -- each manufacturer's DaemonSet -------------------------------------------------------------


@pytest.mark.parametrize("manufacturer", MANUFACTURERS)
def test_each_daemonset_is_its_manufacturers(manufacturer: str) -> None:
    ds = daemonset(manufacturer)
    assert ds["metadata"]["name"] == f"gpustack-device-manager-{manufacturer}"
    template = ds["spec"]["template"]
    labels = template["metadata"]["labels"]
    # What the exporter election reads (devicemanager/kube/role.py): both labels on every pod.
    assert labels[COMPONENT_LABEL] == COMPONENT
    assert labels[MANUFACTURER_LABEL] == manufacturer
    assert ds["spec"]["selector"]["matchLabels"][MANUFACTURER_LABEL] == manufacturer
    args = container(manufacturer)["args"]
    assert args[0] == f"--manufacturer={manufacturer}"
    flags = {f.name for f in SERVE_FLAGS}
    assert all(arg.split("=", 1)[0] in flags for arg in args), args
    # The Service (shared) reaches every manufacturer's agents.
    (service,) = [d for d in build_of(manufacturer) if d["kind"] == "Service"]
    assert service["spec"]["selector"].items() <= labels.items()
    # It runs only on its manufacturer's nodes, and tolerates their taints.
    spec = template["spec"]
    terms = (
        spec.get("affinity", {})
        .get("nodeAffinity", {})
        .get("requiredDuringSchedulingIgnoredDuringExecution", {})
        .get("nodeSelectorTerms", [])
    )
    assert spec.get("nodeSelector") or (terms and all(t["matchExpressions"] for t in terms))
    # Every manufacturer tolerates the same taints: all of them (the base's; see below).
    base = yaml.safe_load((DEPLOY / "base" / "daemonset.yaml").read_text())
    assert spec["tolerations"] == base["spec"]["template"]["spec"]["tolerations"]


def test_no_daemonset_adopts_another_manufacturers_pods() -> None:
    for mine in MANUFACTURERS:
        selector = daemonset(mine)["spec"]["selector"]["matchLabels"].items()
        for other in MANUFACTURERS:
            labels = daemonset(other)["spec"]["template"]["metadata"]["labels"].items()
            assert (selector <= labels) == (mine == other), (mine, other)


def test_the_image_is_set_in_one_place() -> None:
    base = yaml.safe_load((DEPLOY / "base" / "kustomization.yaml").read_text())
    (image,) = base["images"]
    assert image == {"name": "gpustack/devicemanager", "newTag": devicemanager.__version__}
    for path in (DEPLOY / "overlays").rglob("*.yaml"):
        assert not {"image", "images"} & keys(yaml.safe_load(path.read_text())), path
    for manufacturer in MANUFACTURERS:
        assert container(manufacturer)["image"] == f"gpustack/devicemanager:{image['newTag']}"


@pytest.mark.parametrize("manufacturer", MANUFACTURERS)
def test_each_manufacturer_gets_the_least_privilege_its_devices_allow(manufacturer: str) -> None:
    security = container(manufacturer)["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    if manufacturer in UNPRIVILEGED:
        # The base's: not root, no capability, no escalation (tests/test_nonroot.py).
        assert security["privileged"] is False and security["allowPrivilegeEscalation"] is False
        assert security["runAsNonRoot"] is True and security["runAsUser"] != 0
        assert security["capabilities"] == {"drop": ["ALL"]}
        assert security["seccompProfile"] == {"type": "RuntimeDefault"}
        env = {e["name"]: e.get("value") for e in container(manufacturer)["env"]}
        assert env["NVIDIA_VISIBLE_DEVICES"] == "all"
        assert env["NVIDIA_DRIVER_CAPABILITIES"] == "utility"
    else:
        # Privileged, as root; nothing left that the runtime ignores for a privileged
        # container (a capability list, a seccomp profile) or the API server refuses.
        assert security["privileged"] is True and security["runAsUser"] == 0
        assert security["runAsNonRoot"] is False
        assert not {"allowPrivilegeEscalation", "capabilities", "seccompProfile"} & set(security)


@pytest.mark.parametrize("manufacturer", MANUFACTURERS)
def test_each_manufacturer_mounts_its_libraries_and_devices(manufacturer: str) -> None:
    spec = daemonset(manufacturer)["spec"]["template"]["spec"]
    mounts = {m["name"]: m for m in container(manufacturer)["volumeMounts"]}
    host: dict[str, tuple[str, bool]] = {}
    for volume in spec["volumes"]:
        if "hostPath" not in volume or volume["name"] == POD_RESOURCES:
            continue
        mount = mounts[volume["name"]]
        path = volume["hostPath"]["path"]
        # Mounted where it lies on the host: the libraries' own paths and the backend's search.
        assert mount["mountPath"] == REMOUNTED.get((manufacturer, path), path), mount
        host[path] = (volume["hostPath"]["type"], mount.get("readOnly", False))
    assert host == HOST_PATHS[manufacturer]
    # The backend finds its main library in a mounted tree without being told (the first
    # directory it searches), and the library's own dependencies where LD_LIBRARY_PATH says.
    backend = import_from_string(BACKENDS[manufacturer])
    directories = backend.libraries[0].directories
    trees = [
        REMOUNTED.get((manufacturer, path), path)
        for path, (_, read_only) in host.items()
        if read_only
    ]
    if manufacturer in UNPRIVILEGED:
        assert not directories and not trees  # the toolkit mounts it on the linker's path
        return
    assert any(directories[0].startswith(tree + "/") for tree in trees), directories
    env = {e["name"]: e.get("value") for e in container(manufacturer)["env"]}
    for entry in filter(None, (env.get("LD_LIBRARY_PATH") or "").split(":")):
        assert any(entry.startswith(tree + "/") for tree in trees), entry


def test_the_hygon_mig_registry_is_read_where_the_host_has_it() -> None:
    """The registry is read through the host's /etc, mounted read-only, so a node without MIG
    (no /etc/dmi_mig_config) still starts the pod and nothing is created on it (R-O6)."""
    from vendors import hygon

    env = {e["name"]: e.get("value") for e in container("hygon")["env"]}
    etc = REMOUNTED[("hygon", "/etc")]
    assert hygon.MIG_CONFIG.startswith("/etc/")
    assert env[hygon.MIG_CONFIG_ENV] == etc + hygon.MIG_CONFIG.removeprefix("/etc")
    assert HOST_PATHS["hygon"]["/etc"] == ("Directory", True)
    assert hygon.MIG_CONFIG not in HOST_PATHS["hygon"]  # not a hostPath of its own


@pytest.mark.parametrize("manufacturer", MANUFACTURERS)
def test_no_build_creates_anything_on_the_node(manufacturer: str) -> None:
    """Every hostPath a vendor needs names the type it must already have, never one that
    creates it (DirectoryOrCreate, FileOrCreate): a node where it is missing refuses the pod
    with that said, rather than gaining an empty directory in /etc (R-O6). The pod-resources
    mount keeps no type, as before: the kubelet makes that directory itself."""
    for volume in daemonset(manufacturer)["spec"]["template"]["spec"]["volumes"]:
        if "hostPath" not in volume:
            continue
        kind = volume["hostPath"].get("type", "")
        assert "OrCreate" not in kind, volume
        if volume["name"] != POD_RESOURCES:
            assert kind in CHECKING_TYPES, volume


@pytest.mark.parametrize("manufacturer", MANUFACTURERS)
def test_the_agent_stays_on_a_node_tainted_for_a_failing_card(manufacturer: str) -> None:
    """A device plugin or health controller that taints a node NoExecute for a failing card
    evicts the workloads, not the agent whose figures say what failed; a NoSchedule taint of any
    key (the device-plugin resource's, a team's) does not keep it off its nodes (R-O6)."""
    tolerations = daemonset(manufacturer)["spec"]["template"]["spec"]["tolerations"]

    def tolerated(taint: dict[str, str]) -> bool:
        # Kubernetes' rule: an empty key with Exists matches every key; an empty effect, every
        # effect; no tolerationSeconds is forever.
        return any(
            (t.get("key", "") in ("", taint["key"]))
            and t["operator"] == "Exists"
            and t.get("effect", "") in ("", taint["effect"])
            and "tolerationSeconds" not in t
            for t in tolerations
        )

    for taint in (
        {"key": "nvidia.com/gpu", "effect": "NoExecute"},
        {"key": "nvidia.com/gpu", "effect": "NoSchedule"},
        {"key": "amd.com/gpu", "effect": "NoExecute"},
        {"key": "huawei.com/Ascend910", "effect": "NoExecute"},
        {"key": "example.com/unhealthy-card", "effect": "NoExecute"},
        {"key": "dedicated", "effect": "NoSchedule"},
    ):
        assert tolerated(taint), taint


@pytest.mark.parametrize("manufacturer", MANUFACTURERS)
def test_every_probe_says_its_timeout(manufacturer: str) -> None:
    """The kubelet's default timeout (1 s) counts a throttled TLS handshake as a failure; each
    probe states one, shorter than its period, and the windows leave room (R-O6, R-O2)."""
    probes = {name: container(manufacturer)[name] for name in PROBES}
    for name, probe in probes.items():
        assert 1 < probe["timeoutSeconds"] < probe["periodSeconds"], (name, probe)
        assert probe["failureThreshold"] >= 2, (name, probe)
    window = {name: p["periodSeconds"] * p["failureThreshold"] for name, p in probes.items()}
    # Two minutes to open the vendor library and finish the first round.
    assert window["startupProbe"] >= 120
    # Out of the Service within a minute of going stale, but not before two monitor periods
    # have passed without a round; restarted only after longer than that.
    args = dict(a.split("=", 1) for a in container(manufacturer)["args"] if "=" in a)
    period = float(args["--monitor-period"])
    assert 2 * period <= window["readinessProbe"] <= 60
    assert window["livenessProbe"] > window["readinessProbe"]


# -- prometheus-operator and the docs ----------------------------------------------------------


def test_the_podmonitor_carries_the_label_kube_prometheus_stack_selects() -> None:
    (monitor,) = [d for d in documents(DEPLOY / "podmonitor.yaml") if d["kind"] == "PodMonitor"]
    (rule,) = documents(DEPLOY / "prometheusrule.yaml")
    # kube-prometheus-stack's default podMonitorSelector and ruleSelector match the Helm
    # release's name; both objects carry the chart's default release name, changed together.
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert monitor["metadata"]["labels"]["release"] == rule["metadata"]["labels"]["release"]


def test_the_docs_say_how_to_install_each_manufacturer() -> None:
    text = (REPO / "docs" / "kubernetes.md").read_text()
    assert "kubectl apply -f daemonset.yaml" in text
    for manufacturer in MANUFACTURERS:
        assert f"deploy/overlays/{manufacturer}" in text, manufacturer


# -- the rights that act (R-X11) ----------------------------------------------------------------


def _rules(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [rule for d in docs if d["kind"] == "ClusterRole" for rule in d["rules"]]


@pytest.mark.parametrize("manufacturer", MANUFACTURERS)
def test_every_build_may_write_events_and_nothing_else_of_them(manufacturer: str) -> None:
    rules = _rules(build_of(manufacturer))
    events = [r for r in rules if "events" in r["resources"]]
    # Create an Event, patch its series; never read back, and not the core group's events.
    assert events == [
        {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]}
    ]
    # Writing a node's status is the node-condition component's, opt-in: not in the base.
    assert not [r for r in rules if any(x.startswith("nodes/status") for x in r["resources"])]


def test_the_node_condition_component_turns_it_on_with_the_one_right_it_needs(
    fresh: Path, tmp_path: Path
) -> None:
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
        f"resources: [{os.path.relpath(DEPLOY / 'overlays' / 'nvidia', overlay)}]\n"
        f"components: [{os.path.relpath(DEPLOY / 'components' / 'node-condition', overlay)}]\n"
    )
    which = subprocess.run(
        [str(REPO / "scripts" / "manifests"), "--which"], capture_output=True, text=True
    )
    built = subprocess.run(
        [*which.stdout.split(), str(overlay)], capture_output=True, text=True, check=False
    )
    assert built.returncode == 0, built.stderr
    docs = [d for d in yaml.safe_load_all(built.stdout) if d]
    (ds,) = [d for d in docs if d["kind"] == "DaemonSet"]
    (agent,) = ds["spec"]["template"]["spec"]["containers"]
    assert {"name": "DEVICEMANAGER_NODE_CONDITION", "value": "true"} in agent["env"]
    added = [r for r in _rules(docs) if r not in _rules(build_of("nvidia"))]
    assert added == [{"apiGroups": [""], "resources": ["nodes/status"], "verbs": ["patch"]}]
