"""A replayed node in a cluster, for the benchmarks that measure the node users run (issue 46).

A replayed node (`serve --replay`) never starts the cluster's clients: its pods come from the
scenario's file. A node in a cluster watches its pods through the API server, reads the
kubelet's summary and pod-resources socket, and watches its ResourceSlices (DRA). This module
gives the benchmarks both halves of such a node without hardware:

- `ReplayedCards`, a backend answering every round with a scenario's recorded vendor payload
  (the scenario named by DM_BENCH_SCENARIO), for `serve --manufacturer
  bench.cluster_node:ReplayedCards`. It imports only what the replay imports.
- `python -m bench.cluster_node DIR SCENARIO`: the tests' fake API server
  (tests/kube_server.py) serving the scenario's pods and ResourceSlices, its fake kubelet
  serving a summary of those pods, and the fake pod-resources server
  (tests/podresources_server.py) on DIR/kubelet.sock answering the scenario's recording (or an
  empty one). Writes DIR/kubelet-port, then DIR/kubeconfig when all three answer, and runs
  until killed, in a process of its own so that the agent's figures are the agent's alone.

`agent_args(DIR, SCENARIO)` is the command line of `serve` for that node in that cluster.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from devicemanager.agent.replay import ReplayBackend, load_scenario

SCENARIO_ENV = "DM_BENCH_SCENARIO"
# The agent's own pod, Ready, so that it exports the pod-level families as a node's agent does.
AGENT_NAMESPACE, AGENT_POD = "gpustack-system", "device-manager-bench"


class ReplayedCards(ReplayBackend):
    """The recorded cards of the scenario DM_BENCH_SCENARIO names (its first manufacturer)."""

    def __init__(self, library: str | None = None) -> None:
        scenario = load_scenario(Path(os.environ[SCENARIO_ENV]))
        manufacturer, path = next(iter(scenario.vendor_files.items()))
        super().__init__(manufacturer, path)


def agent_args(world: Path, scenario: Path) -> tuple[list[str], dict[str, str]]:
    """`serve`'s arguments and environment for the scenario's node in the world's cluster."""
    node = load_scenario(scenario)
    args = [
        "--manufacturer",
        "bench.cluster_node:ReplayedCards",
        "--proc-root",
        str(node.proc_root),
        "--kubeconfig",
        str(world / "kubeconfig"),
        "--node-name",
        node.node,
        "--kubelet-host",
        "127.0.0.1",
        "--kubelet-port",
        (world / "kubelet-port").read_text().strip(),
        "--pod-resources-socket",
        str(world / "kubelet.sock"),
        "--pod-namespace",
        AGENT_NAMESPACE,
        "--pod-name",
        AGENT_POD,
    ]
    return args, {SCENARIO_ENV: str(scenario)}


def wait_for_world(world: Path, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not (world / "kubeconfig").exists():
        if time.monotonic() > deadline:
            raise SystemExit("the cluster's fake servers did not start")
        time.sleep(0.1)


def _items(path: Path | None) -> list[dict[str, Any]]:
    if path is None:
        return []
    doc = json.loads(path.read_text())
    items = doc.get("items", []) if isinstance(doc, dict) else doc
    return [i for i in items if isinstance(i, dict)]


def _serve(world: Path, root: Path) -> None:
    from tests.kube_server import FakeApiServer, FakeKubelet, summary_for
    from tests.podresources_server import Behaviour, serving

    scenario = load_scenario(root)
    api = FakeApiServer(world).start()
    pods = _items(scenario.pods_file)
    for pod in pods:
        pod.setdefault("spec", {})["nodeName"] = scenario.node
        api.add(pod)
    manufacturer = next(iter(scenario.vendor_files))
    api.add(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": AGENT_POD,
                "namespace": AGENT_NAMESPACE,
                "uid": "00000000-0000-4000-8000-00000000b46c",
                "labels": {
                    "app.kubernetes.io/component": "device-manager",
                    "gpustack.ai/manufacturer": manufacturer,
                },
            },
            "spec": {"nodeName": scenario.node, "containers": [{"name": "device-manager"}]},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
        }
    )
    for piece in _items(scenario.slices_file):
        api.put_slice(piece)
    kubelet = FakeKubelet(world / "kubelet", set(api.tokens), ca=api.authority)
    kubelet.summary = summary_for(pods)
    kubelet.start()
    (world / "kubelet-port").write_text(str(kubelet.port))
    recording: dict[str, Any] = {}
    if scenario.podresources_file is not None:
        recording = json.loads(scenario.podresources_file.read_text())
    with serving(world / "kubelet.sock", Behaviour(recording)):
        api.kubeconfig(world / "kubeconfig.tmp").rename(world / "kubeconfig")
        while True:
            time.sleep(3600)


if __name__ == "__main__":
    _serve(Path(sys.argv[1]), Path(sys.argv[2]))
