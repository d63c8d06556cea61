"""What to do per fault (R-X11): each reason and error event's action as its manufacturer
documents it, every entry with its source, and docs/vendors.md's table the same as the code's."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from devicemanager.figures.actions import TABLE, Action, action_for

REPO = Path(__file__).resolve().parent.parent
ROW = re.compile(r"^\| ([a-z, ]+) \| `([^`]+)` \| `([a-z_]+)` \| (.+) \| <(https://[^>]+)> \|$")


def test_xid_43_restarts_the_workload_and_xid_79_reboots_the_node() -> None:
    # NVIDIA's catalogue: XID 43 is the application's fault (RESTART_APP); XID 79, a GPU
    # fallen off the bus, is a node reboot where the card cannot be reset (RESTART_BM).
    assert action_for("nvidia", "xid_43") is Action.RESTART_WORKLOAD
    assert action_for("nvidia", "xid_79") is Action.REBOOT_NODE
    assert action_for("nvidia", "gpu_is_lost") is Action.REBOOT_NODE


def test_every_entry_cites_a_manufacturers_document() -> None:
    assert len({(e.manufacturers, e.reason) for e in TABLE}) == len(TABLE)
    for entry in TABLE:
        assert entry.source.startswith("https://"), entry
        assert entry.says, entry
        assert entry.action is not Action.UNKNOWN, entry  # unknown is the default, not a row


@pytest.mark.parametrize(
    ("manufacturer", "reason", "action"),
    [
        # the card lost from the PCI bus: as NVIDIA documents a GPU fallen off the bus
        ("nvidia", "lost", Action.REBOOT_NODE),
        ("nvidia", "lost:0000:14:00.0", Action.REBOOT_NODE),  # as the bus names it: its id
        # a DRA taint naming an XID takes that XID's action; the driver's gpu-lost as XID 79
        ("nvidia", "gpu.nvidia.com/xid=79", Action.REBOOT_NODE),
        ("nvidia", "gpu.nvidia.com/xid=43", Action.RESTART_WORKLOAD),
        ("nvidia", "gpu.nvidia.com/gpu-lost", Action.REBOOT_NODE),
        # several parts: the most drastic documented one
        ("nvidia", "xid_43,row_remap_failure", Action.REPLACE_CARD),
        ("nvidia", "xid_79,kubelet:Unhealthy", Action.REBOOT_NODE),
        # nothing documented: unknown
        ("nvidia", "kubelet:Unhealthy", Action.UNKNOWN),
        ("nvidia", "not_enumerated", Action.UNKNOWN),
        ("nvidia", "xid_999", Action.UNKNOWN),
        ("nvidia", "gpu.nvidia.com/unmonitored", Action.UNKNOWN),
        ("nvidia", "", Action.UNKNOWN),
        ("nvidia", None, Action.UNKNOWN),
        # an NVIDIA row names no other manufacturer's reason
        ("thead", "xid_79", Action.UNKNOWN),
        ("amd", "lost", Action.UNKNOWN),
        ("ascend", "alarm_major", Action.UNKNOWN),
        # Ascend's fault levels
        ("ascend", "ascend:RestartNPU", Action.RESET_CARD),
        ("ascend", "ascend:SeparateNPU", Action.REPLACE_CARD),
        ("ascend", "ascend:NotHandleFault", Action.NONE),
    ],
)
def test_a_reason_takes_its_documented_action(
    manufacturer: str, reason: str | None, action: Action
) -> None:
    assert action_for(manufacturer, reason) is action


def test_the_docs_table_is_the_codes() -> None:
    text = (REPO / "docs" / "vendors.md").read_text()
    section = text.split("### What to do per fault (R-X11)", 1)[1].split("\n### ", 1)[0]
    rows = [m.groups() for line in section.splitlines() if (m := ROW.match(line))]
    want = [(", ".join(e.manufacturers), e.reason, e.action.value, e.says, e.source) for e in TABLE]
    assert rows == want
