"""What one round publishes: the snapshot and its two renderings, made once and swapped in whole.

The HTTP handlers only read a `Published`; nothing is rendered on the scrape path.
"""

from __future__ import annotations

from dataclasses import dataclass

from devicemanager.figures import exposition, snapshot
from devicemanager.model import Snapshot


@dataclass(frozen=True, slots=True)
class Published:
    """Everything the HTTP handlers serve, made once per round and swapped in whole."""

    snapshot: Snapshot
    snapshot_json: bytes
    snapshot_gzipped: bytes  # for a client that sends Accept-Encoding: gzip
    metrics: exposition.Exposition
    stale_metrics: exposition.Exposition  # the verdict alone, for when this round is too old
    published_at: float  # monotonic


def publish(
    snap: Snapshot, now_mono: float, extras: exposition.Extras = exposition.NO_EXTRAS
) -> Published:
    rendered = exposition.Rendered.of(snap, extras)
    document = exposition.Exposition.of(snapshot.encode(snap))
    return Published(
        snapshot=snap,
        snapshot_json=document.plain,
        snapshot_gzipped=document.gzipped,
        metrics=rendered.fresh,
        stale_metrics=rendered.stale,
        published_at=now_mono,
    )
