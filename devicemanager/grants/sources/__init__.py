"""Where a pod's grants come from: each source one module, all of the same shape. Pure.

A source is given what the node knows this round (`NodeInput`: the pod index, the kubelet's
answer, the DRA inventory, the alias map) and says, for each pod it speaks for, what that pod
holds (`Found`). Each source reads every pod behind that pod's own boundary
(node/isolation.py): one pod's data that raises is that pod's fault, never the node's.

A source is either the pod's own word (an allocation annotation) or what the kubelet allocated
(`allocated`: device plugins, DRA claims). grants/node.py lists the sources in precedence order
and runs the steps between sources and grants: which source's word a pod's grants are, and the
cross-pod rules (a card another pod holds is refused; where a card handed from one pod to others
would be given).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Protocol

from devicemanager.grants.deviceplugins import Aliases, KubeletAnswer
from devicemanager.grants.dra import DraInventory
from devicemanager.grants.grants import Grant
from devicemanager.model import PodFault
from devicemanager.node.pods import PodIndex


def _no_aliases() -> Aliases:
    return MappingProxyType({})


@dataclass(frozen=True, slots=True)
class NodeInput:
    """What every source is given: the node's pods and what the cluster said of them."""

    index: PodIndex
    kubelet: KubeletAnswer | None = None  # None: no kubelet asked (replay without one)
    dra: DraInventory | None = None  # None: the node's slices were not asked
    aliases: Aliases = field(default_factory=_no_aliases)  # (manufacturer, id) -> card id


@dataclass(frozen=True, slots=True)
class Found:
    """One source's grants by pod UID, for the pods it speaks for, and the pods whose data
    raised in it (left out, and the pod's grants with them)."""

    by_pod: Mapping[str, tuple[Grant, ...]]
    faults: Mapping[str, PodFault] = field(default_factory=dict)


class GrantSource(Protocol):
    """One way a pod is given a card: annotations, device plugins, DRA claims, ..."""

    @property
    def name(self) -> str: ...

    @property
    def allocated(self) -> bool:
        """True: the kubelet allocated these (the node's own record, what a pod's own word is
        checked against); False: the pod's own word, which wins where it speaks."""
        ...

    def found(self, node: NodeInput) -> Found: ...
