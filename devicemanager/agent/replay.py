"""Replay: run the agent over a whole recorded node instead of live libraries and a cluster.

A scenario is a directory, `fixtures/nodes/<scenario>/`:

    scenario.json        provenance ("recorded" or "synthetic"), description, node name
    vendors/<m>.json     {"meta": {...}, "payload": {...}}: what `devicemanager record <m>` wrote
    pods.json            the node's pods, a PodList as the API server returns it
    podresources.json    optional: the kubelet's pod-resources answer, {"list": ...,
                         "allocatable": ...} in protobuf's JSON mapping (R-X2)
    dra/resourceslices.json   optional: the node's ResourceSlices, a ResourceSliceList as
                         the API server answers it (R-X6)
    dra/resourceclaims.json   optional: the ResourceClaims its pods hold, a ResourceClaimList
    dra/devicetaintrules.json optional: the cluster's DeviceTaintRules, a DeviceTaintRuleList
    proc/<pid>/...       a /proc tree for the processes the payloads name
    sys/bus/pci/devices/<bus id>/{vendor,class}   optional: the node's PCI bus, which the
                         lost-card rule compares with what each library enumerates

Each payload goes through its own vendor's pure `parse`, the very code the live agent runs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devicemanager.backend import Backend, backend_class
from devicemanager.model import Payload, ReadRequest, VendorReading

SCENARIO_FILE = "scenario.json"
PROVENANCES = ("recorded", "synthetic")


class ScenarioError(ValueError):
    """A replay directory that is not a usable scenario."""


@dataclass(frozen=True, slots=True)
class Scenario:
    root: Path
    provenance: str
    description: str
    node: str
    vendor_files: dict[str, Path]
    pods_file: Path | None
    proc_root: Path
    podresources_file: Path | None = None
    slices_file: Path | None = None
    claims_file: Path | None = None
    rules_file: Path | None = None
    sys_root: Path | None = None


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ScenarioError(f"{path}: {exc}") from exc


def load_scenario(root: Path) -> Scenario:
    meta = _json(root / SCENARIO_FILE)
    if not isinstance(meta, dict):
        raise ScenarioError(f"{root / SCENARIO_FILE}: not a JSON object")
    provenance = meta.get("provenance")
    if provenance not in PROVENANCES:
        raise ScenarioError(f"{root}: provenance must be one of {PROVENANCES}, not {provenance!r}")
    vendor_files = {p.stem: p for p in sorted((root / "vendors").glob("*.json"))}
    if not vendor_files:
        raise ScenarioError(f"{root}: no vendors/<manufacturer>.json payload")
    pods = root / "pods.json"
    podresources = root / "podresources.json"
    slices, claims = root / "dra" / "resourceslices.json", root / "dra" / "resourceclaims.json"
    rules = root / "dra" / "devicetaintrules.json"
    return Scenario(
        root=root,
        provenance=provenance,
        description=str(meta.get("description", "")),
        node=str(meta.get("node") or root.name),
        vendor_files=vendor_files,
        pods_file=pods if pods.exists() else None,
        proc_root=root / "proc",
        podresources_file=podresources if podresources.exists() else None,
        slices_file=slices if slices.exists() else None,
        claims_file=claims if claims.exists() else None,
        rules_file=rules if rules.exists() else None,
        sys_root=root / "sys" if (root / "sys").is_dir() else None,
    )


def load_recording(path: Path) -> tuple[dict[str, Any], Payload]:
    """The (meta, payload) of a file `devicemanager record` wrote."""
    doc = _json(path)
    if not (isinstance(doc, dict) and isinstance(doc.get("payload"), dict)):
        raise ScenarioError(f"{path}: expected {{'meta': {{...}}, 'payload': {{...}}}}")
    meta = doc.get("meta")
    if not isinstance(meta, dict) or meta.get("kind") not in PROVENANCES:
        raise ScenarioError(f"{path}: meta.kind must be one of {PROVENANCES}")
    return meta, doc["payload"]


class ReplayBackend:
    """Answers every round with a recorded payload; parsing is the real vendor's."""

    def __init__(self, manufacturer: str, path: Path) -> None:
        self.manufacturer = manufacturer
        self.path = path
        # Constructed, never opened: only its pure parse() is used, so no SDK is needed.
        self._vendor: Backend = backend_class(manufacturer)()
        self._payload: Payload | None = None

    def open(self) -> None:
        _, self._payload = load_recording(self.path)

    def read(self, request: ReadRequest) -> Payload:
        if self._payload is None:
            raise RuntimeError("read() before open()")
        return self._payload

    def parse(self, payload: Payload) -> VendorReading:
        return self._vendor.parse(payload)

    def close(self) -> None:
        self._payload = None
