"""The figure table (devicemanager/figure_table.py) is where a card figure is declared, once.

Held here: a figure added as one more row reaches the snapshot (both ways), /metrics (its
family and sample), the capability gauge, the bounds and the docs check without another line
of code; the rows agree with what carries them (`Card`'s fields, `HealthFigure`'s members);
and no figure's name is spelled across the package again.
"""

from __future__ import annotations

import json
import re
from enum import StrEnum
from pathlib import Path
from typing import cast

import pytest

from devicemanager.figure_table import Family
from devicemanager.figures import exposition, snapshot
from devicemanager.figures.ranges import plausible_reading
from devicemanager.figures.snapshot import BackendResult
from devicemanager.model import (
    FIGURES,
    BackendState,
    BackendStatus,
    Card,
    CardFigure,
    CardHealth,
    FigureSpec,
    FigureTable,
    HealthFigure,
    Kind,
    Reason,
    Shape,
    VendorReading,
    finite_reading,
)
from tests.test_docs import table_families, undocumented
from vendors import _amd_smi, ascend, hygon, metax

REPO = Path(__file__).resolve().parent.parent
H = HealthFigure


class MadeUp(StrEnum):
    """A figure no code knows of: a fan's speed (issue 41 added GPM's SM activity, the example
    this test first used)."""

    FAN_SPEED = "fan_speed_percent"


FAN_SPEED = cast(HealthFigure, MadeUp.FAN_SPEED)
ROW = FigureSpec(
    MadeUp.FAN_SPEED,
    "percent",
    Family("fan_speed_percent", Kind.GAUGE, "The card's fan speed, percent of its maximum."),
    ("fanSpeed",),
    bounds=(0.0, 100.0),
    integer=False,
)
TABLE = FigureTable(card=FIGURES.card, health=(*FIGURES.health, ROW))


def served(card: Card) -> snapshot.Snapshot:
    result = BackendResult(
        status=BackendStatus("nvidia", BackendState.OK, 0.5),
        reading=VendorReading(manufacturer="nvidia", cards=(card,)),
        read_at=1.0,
    )
    return snapshot.assemble(1.0, 15.0, "node-a", [result])


def test_a_figure_added_as_one_row_reaches_every_output() -> None:
    """One row more, and nothing else: the health JSON holds it and reads it back, /metrics has
    its family and sample, the capability gauge names it, its bounds refuse an impossible
    value, and the docs check says its family has no row in docs/metrics.md yet."""
    health = CardHealth.of(
        {H.ENERGY_JOULES: 12.5, FAN_SPEED: 42.5},
        reasons=((H.PCIE_REPLAYS, Reason.UNSUPPORTED),),
        table=TABLE,
    )
    assert health.number(FAN_SPEED) == 42.5
    # The snapshot, both ways.
    doc = json.loads(json.dumps(snapshot.health_json(health, TABLE)))
    assert (doc["fanSpeed"], doc["energyJoules"]) == (42.5, 12.5)
    assert snapshot.health_from_json(doc, TABLE) == health
    blind = CardHealth.of(reasons=((FAN_SPEED, Reason.UNSUPPORTED),), table=TABLE)
    doc = json.loads(json.dumps(snapshot.health_json(blind, TABLE)))
    assert doc["fanSpeed"] is None
    assert doc["absentReasons"] == {"fan_speed_percent": "unsupported"}
    assert snapshot.health_from_json(doc, TABLE) == blind
    # /metrics: its family, its sample, and the capability gauge.
    snap = served(Card(id="GPU-a", index=0, health=health))
    text = exposition.render(exposition.health_families(snap, TABLE)).decode()
    labels = 'id="GPU-a",index="0",manufacturer="nvidia",node="node-a"'
    assert "# TYPE gpustack_accelerator_fan_speed_percent gauge" in text
    assert f"gpustack_accelerator_fan_speed_percent{{{labels}}} 42.5\n" in text
    assert (
        'gpustack_accelerator_figure_capability{figure="fan_speed_percent",id="GPU-a",'
        'manufacturer="nvidia",node="node-a",reason=""} 1.0\n'
    ) in text
    # Its family sits where its row is: after every family of the rows before it.
    families = [line.split()[2] for line in text.splitlines() if line.startswith("# TYPE")]
    assert families.index("gpustack_accelerator_fan_speed_percent") == (
        families.index("gpustack_accelerator_energy_joules_total") + 1
    )
    blind_text = exposition.render(
        exposition.health_families(served(Card(id="GPU-a", index=0, health=blind)), TABLE)
    ).decode()
    assert "gpustack_accelerator_fan_speed_percent{" not in blind_text
    assert 'figure="fan_speed_percent",id="GPU-a"' in blind_text
    assert 'reason="unsupported"} 0.0' in blind_text
    # The table as shipped knows nothing of it.
    assert "fan_speed" not in exposition.render(exposition.health_families(snap)).decode()
    # Its bounds.
    wild = CardHealth.of({FAN_SPEED: 150.0}, table=TABLE)
    reading = VendorReading("nvidia", cards=(Card(id="GPU-a", index=0, health=wild),))
    fixed, refused = plausible_reading(reading, TABLE)
    out = fixed.cards[0].health
    assert out is not None and out.number(FAN_SPEED) is None
    assert out.reason(FAN_SPEED) is Reason.INVALID_DATA
    assert refused == ("cards[0].health.fan_speed_percent",)
    # The docs check names its family until docs/metrics.md has a row for it.
    assert undocumented(table_families(TABLE)) == {"gpustack_accelerator_fan_speed_percent"}
    assert undocumented(table_families()) == set()


def test_a_value_of_the_wrong_shape_or_a_name_with_no_row_is_refused() -> None:
    """What `CardHealth(**figures)` let through to run time, the table refuses by its rows."""
    with pytest.raises(TypeError):
        CardHealth.of({H.ENERGY_JOULES: (("gpu_idle", True),)})
    with pytest.raises(TypeError):
        CardHealth.of({H.THROTTLE_REASONS: 1})
    with pytest.raises(TypeError):
        CardHealth.of({H.PCIE_REPLAYS: True})  # a bool is no count
    with pytest.raises(TypeError):
        CardHealth.of({FAN_SPEED: 1.0})  # not a row of the shipped table


def test_the_rows_agree_with_what_carries_them() -> None:
    """Each card row names a field (or property) of Card; each HealthFigure has one row; a
    number has bounds; a counter's family ends in `_total`; family names are unique."""
    assert [s.name for s in FIGURES.card] == list(CardFigure)
    card = Card(id="GPU-a", index=0)
    for spec in FIGURES.card:
        assert hasattr(card, spec.name), spec.name
        assert spec.grant_help is not None and (spec.bounds is None) == spec.derived
    assert [s.name for s in FIGURES.health] == list(HealthFigure)
    for spec in FIGURES.health:
        assert (spec.bounds is not None) == (spec.shape is Shape.NUMBER), spec.name
        assert spec.family.name.endswith("_total") == (spec.kind is Kind.COUNTER), spec.name
        # A number's label values fill its family's labels; the others add one label each.
        count = len(spec.family.labels) if spec.shape is Shape.NUMBER else 1
        assert len(spec.labels if spec.shape is Shape.NUMBER else (spec.name,)) == count
    names = FIGURES.family_names()
    assert len(names) == len(set(names))


def test_each_vendor_unsupported_set_is_a_set_of_the_tables_figures() -> None:
    for unsupported in (
        _amd_smi.AMD_UNSUPPORTED,
        hygon.HYGON_UNSUPPORTED,
        metax.METAX_UNSUPPORTED,
        ascend.ASCEND_UNSUPPORTED,
    ):
        assert isinstance(unsupported, frozenset)
        assert all(isinstance(f, HealthFigure) for f in unsupported)


# The card figures that are also the per-grant section's and the report's vocabulary: a grant's
# entry, a slice's usage, a partition and the report's rows carry the same names for their own
# figures (figures/figures.py, figures/slices.py, report/, serve/client.py), which are not the
# card's figures and are no row of the table.
PER_GRANT = {
    CardFigure.MEMORY_TOTAL_MIB,
    CardFigure.MEMORY_USED_MIB,
    CardFigure.CORES_UTILIZATION_PERCENT,
}
MAX_OTHER_FILES = 2


def spelled_in(name: str) -> list[str]:
    """The package's modules, besides the table's own, that spell `name` (in a string or as an
    identifier, in lower case, as a whole word)."""
    word = re.compile(rf"(?<![A-Za-z0-9_]){re.escape(name)}(?![A-Za-z0-9_])")
    root = REPO / "devicemanager"
    return sorted(
        str(path.relative_to(REPO))
        for path in root.rglob("*.py")
        if path.name != "figure_table.py" and word.search(path.read_text())
    )


@pytest.mark.parametrize(
    "spec",
    [s for s in (*FIGURES.card, *FIGURES.health) if s.name not in PER_GRANT],
    ids=lambda s: s.name.value,
)
def test_a_figure_is_spelled_in_at_most_two_modules_besides_its_row(spec: FigureSpec) -> None:
    """A health figure's name is spelled in model.py at most (CardHealth's typed accessors for
    the structured ones); a card figure's in model.py (Card's field) and figures/figures.py (the
    grant's entry, which copies the card's temperature and power). Everything else reads the
    table."""
    assert len(spelled_in(spec.name.value)) <= MAX_OTHER_FILES, spelled_in(spec.name.value)


def test_the_spelling_check_finds_a_spelling() -> None:
    # The check above can fail: a per-grant name is spelled in many modules.
    assert len(spelled_in(CardFigure.MEMORY_USED_MIB.value)) > MAX_OTHER_FILES
    assert "devicemanager/model.py" in spelled_in(HealthFigure.XID_ERRORS.value)


def test_a_health_figure_that_is_no_number_is_dropped_and_named_as_its_figure() -> None:
    """model.finite_reading names a NaN health figure as before the table: by its figure."""
    health = CardHealth.of({H.ENERGY_JOULES: float("nan"), H.CLOCK_SM_HZ: 5})
    reading = VendorReading("nvidia", cards=(Card(id="GPU-a", index=0, health=health),))
    fixed, dropped = finite_reading(reading)
    assert dropped == ("cards[0].health.energy_joules",)
    assert fixed.cards[0].health == CardHealth.of({H.CLOCK_SM_HZ: 5})


def test_the_tables_lookups_are_what_a_scan_of_its_rows_finds() -> None:
    """FigureTable works its lookups out once from the rows (every parse and rendering asks
    them per card and round): each name's spec is the first row of that name, the names are
    the rows' names, each family holds its rows in order, and a made-up table gets its own."""
    from devicemanager.figure_table import FIGURES, FigureTable

    for spec in FIGURES.health:
        assert FIGURES.health_spec(spec.name) is next(
            s for s in FIGURES.health if s.name == spec.name
        )
    assert FIGURES.health_spec("no_such_figure") is None
    assert set(FIGURES.health_names()) == {s.name for s in FIGURES.health}
    for family, specs in FIGURES.health_families():
        assert specs == tuple(s for s in FIGURES.health if s.family == family)
    assert [f for f, _ in FIGURES.health_families()] == list(
        dict.fromkeys(s.family for s in FIGURES.health)
    )
    small = FigureTable(card=FIGURES.card, health=FIGURES.health[:3])
    assert set(small.health_names()) == {s.name for s in FIGURES.health[:3]}
    assert small == FigureTable(card=FIGURES.card, health=FIGURES.health[:3])
