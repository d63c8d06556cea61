"""What to do about a fault, as its manufacturer documents it (R-X11).

An unhealthy card's reason (`xid_79`, `gpu_is_lost`, a DRA taint `gpu.nvidia.com/xid=79`, the
PCI bus's `lost`, …) and an error event (an XID by its code, an Ascend fault level) map to one
action: `none`, `restart_workload`, `reset_card`, `reboot_node`, `replace_card`, or `unknown`
where the manufacturer publishes none for it. Every entry of the table names the document it
comes from (docs/vendors.md shows the table; tests/test_actions.py holds the two together).
Pure: a table and a lookup, no I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum


class Action(StrEnum):
    NONE = "none"
    RESTART_WORKLOAD = "restart_workload"
    RESET_CARD = "reset_card"
    REBOOT_NODE = "reboot_node"
    REPLACE_CARD = "replace_card"
    UNKNOWN = "unknown"


# Most to least drastic: a reason of several parts (`xid_79,kubelet:Unhealthy`) takes the most
# drastic action its documented parts name; `unknown` only when no part is documented.
SEVERITY = (
    Action.REPLACE_CARD,
    Action.REBOOT_NODE,
    Action.RESET_CARD,
    Action.RESTART_WORKLOAD,
    Action.NONE,
)

XID_CATALOGUE = "https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html"
NVML_API = "https://docs.nvidia.com/deploy/nvml-api/group__nvmlDeviceQueries.html"
ROW_REMAPPING = "https://docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/index.html"
PAGE_RETIREMENT = "https://docs.nvidia.com/deploy/dynamic-page-retirement/index.html"
NVIDIA_DRA_HEALTH = (
    "https://github.com/kubernetes-sigs/dra-driver-nvidia-gpu/blob/main/"
    "site/content/docs/guides/gpu-health-checking.md"
)
ASCEND_FAULT_CODES = (
    "https://github.com/Ascend/mind-cluster/blob/master/"
    "component/ascend-device-plugin/build/faultCode.json"
)


@dataclass(frozen=True, slots=True)
class Entry:
    """One row of the table: a reason or an event of some manufacturers, its action, and where
    the manufacturer says so (`says`: the document's own words, shortened)."""

    manufacturers: tuple[str, ...]
    reason: str  # as the card's unhealthyReason names it, or `xid_<n>` for an XID event
    action: Action
    source: str
    says: str


NVIDIA = ("nvidia",)


def _xid(code: int, action: Action, says: str) -> Entry:
    return Entry(NVIDIA, f"xid_{code}", action, XID_CATALOGUE, f"XID {code}: {says}")


# NVIDIA's XID catalogue, "Resolution Bucket (Immediate Action)": RESTART_APP is restarting
# the workload, RESET_GPU a card reset, RESTART_BM a node reboot. Only the XIDs the catalogue
# gives one immediate action for; any other XID is `unknown`.
XIDS: tuple[Entry, ...] = (
    _xid(8, Action.RESTART_WORKLOAD, "GPU stopped processing; RESTART_APP"),
    _xid(11, Action.RESTART_WORKLOAD, "invalid or corrupted push buffer stream; RESTART_APP"),
    _xid(13, Action.RESTART_WORKLOAD, "graphics engine exception; RESTART_APP"),
    _xid(31, Action.RESTART_WORKLOAD, "GPU memory page fault; RESTART_APP"),
    _xid(
        43,
        Action.RESTART_WORKLOAD,
        "GPU stopped processing (the application's fault; the GPU stays healthy); RESTART_APP",
    ),
    _xid(45, Action.NONE, "preemptive cleanup after the application was stopped; IGNORE"),
    _xid(48, Action.RESET_CARD, "double bit ECC error; a GPU reset or node reboot clears it"),
    _xid(63, Action.RESET_CARD, "row remapping recorded; reset the GPU to activate it"),
    _xid(64, Action.RESET_CARD, "row remapping failed; RESET_GPU, then contact support"),
    _xid(68, Action.RESTART_WORKLOAD, "video decoder exception; RESTART_APP"),
    _xid(74, Action.RESET_CARD, "NVLink error; a GPU reset or node reboot clears it"),
    _xid(
        79,
        Action.REBOOT_NODE,
        "GPU has fallen off the bus; reset the GPU where it can be "
        "reached, else reboot the node (RESTART_BM)",
    ),
    _xid(
        94,
        Action.RESTART_WORKLOAD,
        "contained ECC error; the application is terminated, no reset is needed; RESTART_APP",
    ),
    _xid(95, Action.RESET_CARD, "uncontained ECC error; RESET_GPU"),
    _xid(109, Action.RESTART_WORKLOAD, "context switch timeout; RESTART_APP"),
    _xid(119, Action.RESET_CARD, "GSP RPC timeout; RESET_GPU"),
    _xid(120, Action.RESET_CARD, "GSP error; RESET_GPU"),
)

# The unhealthy reasons that are no XID: NVML's answers and the card lost from the bus.
REASONS: tuple[Entry, ...] = (
    Entry(
        NVIDIA,
        "gpu_is_lost",
        Action.REBOOT_NODE,
        NVML_API,
        "NVML_ERROR_GPU_IS_LOST: the GPU has fallen off the bus (XID 79: reboot the node)",
    ),
    Entry(
        NVIDIA,
        "lost",
        Action.REBOOT_NODE,
        XID_CATALOGUE,
        "a card the PCI bus shows and the library cannot reach has fallen off the bus "
        "(XID 79: RESTART_BM)",
    ),
    Entry(
        NVIDIA,
        "row_remap_pending",
        Action.RESET_CARD,
        ROW_REMAPPING,
        "a pending row remap takes effect at the next GPU reset",
    ),
    Entry(
        NVIDIA,
        "row_remap_failure",
        Action.REPLACE_CARD,
        ROW_REMAPPING,
        "a row remapping failure: the GPU should be replaced (RMA)",
    ),
    Entry(
        NVIDIA,
        "retired_pages_pending",
        Action.RESET_CARD,
        PAGE_RETIREMENT,
        "a retired page takes effect when the driver is reloaded (a GPU reset)",
    ),
    Entry(
        NVIDIA,
        "gpu.nvidia.com/gpu-lost",
        Action.REBOOT_NODE,
        NVIDIA_DRA_HEALTH,
        "the DRA driver's taint for a GPU it lost: fallen off the bus (XID 79)",
    ),
)

# Ascend's fault levels (mind-cluster's faultCode.json, the device plugin's handling of each
# fault code), by the action each level asks for. A reason names a level as `ascend:<level>`.
ASCEND_LEVELS: tuple[Entry, ...] = tuple(
    Entry(("ascend",), f"ascend:{level}", action, ASCEND_FAULT_CODES, says)
    for level, action, says in (
        ("NotHandleFault", Action.NONE, "no handling needed"),
        ("SubHealthFault", Action.NONE, "sub-health: the NPU goes on serving"),
        ("RestartRequest", Action.RESTART_WORKLOAD, "the inference request is retried"),
        ("RestartBusiness", Action.RESTART_WORKLOAD, "the job is restarted"),
        ("FreeRestartNPU", Action.RESET_CARD, "the NPU is reset once it is idle"),
        ("RestartNPU", Action.RESET_CARD, "the job is stopped and the NPU reset"),
        ("PreSeparateNPU", Action.REPLACE_CARD, "the NPU is to be isolated for repair"),
        ("SeparateNPU", Action.REPLACE_CARD, "the NPU is isolated for repair"),
    )
)

TABLE: tuple[Entry, ...] = XIDS + REASONS + ASCEND_LEVELS

_BY_REASON: dict[tuple[str, str], Action] = {
    (m, e.reason): e.action for e in TABLE for m in e.manufacturers
}
# A DRA taint naming an XID (`gpu.nvidia.com/xid=79`, KEP-5055; the NVIDIA driver's key).
_TAINT_XID = re.compile(r"gpu\.nvidia\.com/xid=(\d{1,6})")


def _one(manufacturer: str, reason: str) -> Action:
    reason = reason.strip()
    # The reason whole, else its kind before a detail (`lost:<bus id>`, `kubelet:Unhealthy:…`).
    for said in (reason, reason.split(":", 1)[0]):
        found = _BY_REASON.get((manufacturer, said))
        if found is not None:
            return found
    if (m := _TAINT_XID.fullmatch(reason)) is not None:
        return _BY_REASON.get((manufacturer, f"xid_{int(m.group(1))}"), Action.UNKNOWN)
    return Action.UNKNOWN


def action_for(manufacturer: str, reason: str | None) -> Action:
    """The action for an unhealthy card's reason (parts joined by commas), or for an XID
    (`xid_<n>`): the most drastic one a documented part names, else `unknown`."""
    if not reason:
        return Action.UNKNOWN
    named = {_one(manufacturer, part) for part in reason.split(",")}
    return next((a for a in SEVERITY if a in named), Action.UNKNOWN)
