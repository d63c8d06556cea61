"""Rules the semantic mutation run (scripts/mutate --semantic) found unpinned: each a bug a person
makes on a busy day (a `strip()` dropped, two fallbacks swapped, two escapes reordered, a
missing key not defaulted), each with a hand-written expected value."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from devicemanager.figures import exposition, slices, snapshot
from devicemanager.grants.allocations import parse_hami
from devicemanager.grants.quantity import parse_quantity
from devicemanager.model import DeviceProcesses, Reason
from devicemanager.node.attribution import DeviceAttribution, Resolver, RowCounts


def test_a_hami_annotation_ending_in_a_newline_after_its_terminator_is_one_slot() -> None:
    """R-G1: HAMi writes `…;` after the last container's slot; an annotation edited by hand or
    by a tool ends `;\\n`. The terminator is still a terminator, not a second container."""
    (got,) = parse_hami("GPU-a,NVIDIA,20000,30:;\n", ["main"])
    assert (got.container, got.device_id, got.memory_mib, got.cores_percent) == (
        "main",
        "GPU-a",
        20000,
        30,
    )


def test_a_quantity_with_spaces_around_it_is_read() -> None:
    """R-G2: limits come from pod specs and annotations; YAML leaves a trailing newline or
    space in a quoted value, and the quantity is still the quantity."""
    assert parse_quantity(" 500m\n") == Decimal("0.5")
    assert parse_quantity("\t16Gi ") == Decimal(16 * 2**30)


def test_the_clock_rate_given_to_the_resolver_is_the_one_it_uses(tmp_path: Path) -> None:
    """R-A2: /proc start times are in clock ticks; a resolver told the rate (the tests, a node
    read through a recorded tree) uses that rate, never the host's sysconf."""
    assert Resolver(tmp_path, ticks_per_second=1000).ticks_per_second == 1000
    assert Resolver(tmp_path, ticks_per_second=7).ticks_per_second == 7


def test_the_librarys_own_reason_wins_over_the_attributions() -> None:
    """R-S2: a device whose per-process call was refused (`permission`) says so, even where a
    row could not be placed: the first fact a reader needs is that the library did not answer."""
    verdict = DeviceAttribution("GPU-a", Reason.UNKNOWN_POD, (), RowCounts(returned=1))
    vendor = DeviceProcesses(
        "GPU-a", memory_reason=Reason.PERMISSION, cores_reason=Reason.UNSUPPORTED
    )
    device, _ = slices._device_entry("nvidia", verdict, vendor, None)
    assert (device.memory_reason, device.cores_reason) == (Reason.PERMISSION, Reason.UNSUPPORTED)
    # And where the library answered, the attribution's reason is the device's.
    device, _ = slices._device_entry("nvidia", verdict, DeviceProcesses("GPU-a"), None)
    assert (device.memory_reason, device.cores_reason) == (Reason.UNKNOWN_POD, Reason.UNKNOWN_POD)


def test_a_snapshot_group_without_accelerators_reads_as_a_group_of_none() -> None:
    """R-S1: a consumer reading another agent's snapshot (an older or trimmed one) finds a group
    with no `accelerators` key: that group has no cards, and reading goes on."""
    doc = {
        "node": "n1",
        "groups": [{"manufacturer": "nvidia", "driverVersion": "580.1"}],
        "backends": [],
    }
    snap = snapshot.from_json(doc)
    assert [(g.manufacturer, g.cards) for g in snap.groups] == [("nvidia", ())]


def test_a_help_text_with_a_backslash_and_a_newline_reads_back_exactly() -> None:
    """R-E1: HELP text is escaped backslash first, then newline, so `\\n` written literally and
    a real newline stay two different things when read back."""
    family = exposition.GaugeFamily("x_total_bytes", "a \\n literal, a\nnewline, a \\ alone")
    text = exposition.render([family]).decode()
    (parsed,) = text_string_to_metric_families(text)
    assert parsed.documentation == "a \\n literal, a\nnewline, a \\ alone"
