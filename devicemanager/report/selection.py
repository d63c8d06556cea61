"""`--node`, `--namespace`, `--pod`: which series a report is of, the same rule for text and for
Prometheus's answers (one reader, one filter). Pure.

- `--node`: device and container series that name the node (by any of the node label names a
  family uses, the workload's `exported_` one first); quota series are cluster-wide and kept
  only without `--node`.
- `--namespace`, `--pod`: container series of that namespace or pod (this agent's by its
  Instance, `instance_name`), a namespace's quotas (none for `--pod`), and the device series of
  the devices those containers sit on (by UUID, or by node and index).

A series that names none of the labels asked about is not kept. Families the report does not
read are kept as they are (they are listed, never summarized).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from devicemanager.report.families import BY_NAME, Family, Scope, labels_for
from devicemanager.report.parse import Parsed, Sample
from devicemanager.report.read import family_of, label_of, scope_of


@dataclass(frozen=True, slots=True)
class Selection:
    node: str | None = None
    namespace: str | None = None
    pod: str | None = None

    def __bool__(self) -> bool:
        return any(v is not None for v in (self.node, self.namespace, self.pod))

    def by_holder(self) -> bool:
        return self.namespace is not None or self.pod is not None

    def keeps_quotas(self) -> bool:
        return self.node is None and self.pod is None


def _named(sample: Sample, family: Family, meaning: str, wanted: str | None) -> bool:
    return wanted is None or label_of(sample, labels_for(family), meaning) == wanted


def keeps_container(selection: Selection, family: Family, sample: Sample) -> bool:
    return (
        _named(sample, family, "node", selection.node)
        and _named(sample, family, "namespace", selection.namespace)
        and _named(sample, family, "pod", selection.pod)
    )


def keeps_quota(selection: Selection, family: Family, sample: Sample) -> bool:
    return selection.keeps_quotas() and _named(sample, family, "namespace", selection.namespace)


def _device_keys(family: Family, sample: Sample) -> tuple[str | None, tuple[str, str] | None]:
    labels = labels_for(family)
    uuid = label_of(sample, labels, "uuid")
    node = label_of(sample, labels, "node")
    index = label_of(sample, labels, "index")
    return uuid, (node, index) if node is not None and index is not None else None


def select(parsed: Sequence[Parsed], selection: Selection) -> tuple[Parsed, ...]:
    """Each source with only the series the selection keeps (all of them without one)."""
    if not selection:
        return tuple(parsed)
    resolved: list[list[tuple[Sample, Family | None]]] = []
    uuids: set[str] = set()
    places: set[tuple[str, str]] = set()
    for p in parsed:
        declared = dict(p.types)
        declared.update({name: "" for name, _, _ in p.declared if name not in declared})
        rows = [(s, BY_NAME.get(family_of(s, declared))) for s in p.samples]
        resolved.append(rows)
        for sample, family in rows:
            if family is None or scope_of(family, sample) is not Scope.CONTAINER:
                continue
            if keeps_container(selection, family, sample):
                uuid, place = _device_keys(family, sample)
                if uuid is not None:
                    uuids.add(uuid)
                if place is not None:
                    places.add(place)

    def keeps(sample: Sample, family: Family | None) -> bool:
        if family is None:
            return True
        scope = scope_of(family, sample)
        if scope is Scope.QUOTA:
            return keeps_quota(selection, family, sample)
        if scope is Scope.CONTAINER:
            return keeps_container(selection, family, sample)
        if not _named(sample, family, "node", selection.node):
            return False
        if not selection.by_holder():
            return True
        uuid, place = _device_keys(family, sample)
        return (uuid is not None and uuid in uuids) or (place is not None and place in places)

    return tuple(
        replace(p, samples=tuple(s for s, family in rows if keeps(s, family)))
        for p, rows in zip(parsed, resolved, strict=True)
    )
