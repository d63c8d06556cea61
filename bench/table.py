"""The performance tables of README.md and docs/performance.md, made from bench/results.json.

`bench/all.py` writes the results of one run; this renders them, so the figures in the docs
are a run's figures, never typed in. Each table sits between two markers in its page:

    <!-- performance:begin -->  ...  <!-- performance:end -->

    python bench/table.py            # print both tables
    python bench/table.py --write    # put them into README.md and docs/performance.md
    python bench/table.py --check    # exit 1 when a page's table is not the rendering
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results.json"
BEGIN, END = "<!-- performance:begin -->", "<!-- performance:end -->"
PAGES = {"README.md": "readme", "docs/performance.md": "page"}

Row = tuple[str, str, str, str, str]  # what, ours, baseline, goal, met


def _range(values: list[float], unit: str = "") -> str:
    return f"{values[0]:g}-{values[1]:g}{unit}"


def _met(ok: bool) -> str:
    return "yes" if ok else "**no**"


def rows(r: dict[str, Any]) -> list[Row]:
    out: list[Row] = []
    if s := r.get("scrape"):
        plain, gz = s["nginx_over_agent_plain"], s["nginx_over_agent_gzip"]
        out += [
            (
                f"`/metrics` throughput, plain ({s['series']:,} series, TLS, 4 connections)",
                f"{s['agent_plain_rps']:,.0f} req/s",
                f"nginx {s['nginx_plain_rps']:,.0f} req/s: nginx/agent {plain['median']} "
                f"({_range(plain['range'])})",
                "nginx/agent ≤ 1.3",
                _met(s["goal_plain_within_1_3x"]),
            ),
            (
                "`/metrics` throughput, gzip (how Prometheus scrapes)",
                f"{s['agent_gzip_rps']:,.0f} req/s",
                f"nginx `gzip_static` {s['nginx_gzip_rps']:,.0f} req/s: nginx/agent "
                f"{gz['median']} ({_range(gz['range'])})",
                "nginx/agent ≤ 2",
                _met(s["goal_gzip_within_2x"]),
            ),
            (
                "scrape p99, one scraper, gzip (plain)",
                f"{s['agent_p99_ms']['gzip']['median']} ms "
                f"({s['agent_p99_ms']['plain']['median']} ms)",
                f"nginx {s['nginx_p99_ms']['gzip']['median']} ms "
                f"({s['nginx_p99_ms']['plain']['median']} ms)",
                "gzip < 5 ms",
                _met(s["goal_p99_under_5ms"]),
            ),
            *(
                (
                    f"scrape p99 while rounds of {b['processes_placed']:,} processes run back "
                    "to back, gzip (plain)",
                    f"{b['p99_ms']['gzip']['median']} ms, range "
                    f"{_range(b['p99_ms']['gzip']['range'])} "
                    f"({b['p99_ms']['plain']['median']} ms)",
                    f"a round takes {b['round_ms']} ms",
                    "gzip < 5 ms" if i == 0 else "reported",
                    _met(b["gzip_p99_under_5ms"]) if i == 0 else "-",
                )
                for i, b in enumerate(s["busy"])
            ),
        ]
    if s := r.get("round"):
        without = s["without_pidfds"]
        out.append(
            (
                f"steady round, {s['processes']:,} processes in {s['pods']} pods, real /proc",
                f"{s['round_ms']} ms",
                f"reading each `stat` and `cgroup`: {s['floor_ms']} ms; round/floor "
                f"{s['round_over_floor']} ({_range(s['round_over_floor_range'])}); without "
                f"pidfds {without['round_over_floor']}",
                "round/floor ≤ 1.2",
                _met(s["goal_within_1_2x"]),
            )
        )
    if s := r.get("gpm"):
        out.append(
            (
                f"a round with GPM on every card, {s['cards']} H100s held whole (fake "
                "libnvidia-ml, real pynvml: the agent's cost, not the driver's)",
                f"{s['gpm_round_ms']} ms, {s['gpm_series']:,} series",
                f"today ({s['today']}, before issue 41): {s['today_round_ms']} ms, "
                f"{s['today_series']:,} series: gpm/today {s['gpm_over_today']} "
                f"({_range(s['gpm_over_today_range'])}); this code on a driver without GPM: "
                f"{s['without_round_ms']} ms, {s['without_series']:,} series: gpm/without "
                f"{s['gpm_over_without']} ({_range(s['gpm_over_without_range'])})",
                "gpm/today ≤ 1.1",
                _met(s["goal_within_1_1x"]),
            )
        )
    if s := r.get("footprint"):
        out.append(
            (
                f"resident memory after {s['rounds']} rounds, {s['cards']} cards x "
                f"{s['processes']:,} processes, {s['pods']:,} pods",
                f"{s['agent_rss_mib']} MiB",
                f"import floor {s['import_floor_rss_mib']} MiB (the agent adds "
                f"{s['agent_over_floor_mib']} MiB); dcgm-exporter: 400-512 MiB reported",
                "≤ 60 MiB",
                _met(s["goal_at_most_60_mib"]),
            )
        )
    if s := r.get("sampler"):
        out.append(
            (
                f"a worker sampling {s['rate_asked']:g} Instances a second",
                f"agent at {s['agent_core_percent_sampling']}% of a core "
                f"({s['samples_per_second']:g} samples/s)",
                f"idle {s['agent_idle_core_percent']}%; the old way "
                f"{s['before_agent_cpu_ms_per_sample']} ms of agent CPU per sample against "
                + _per_sample(s["agent_cpu_ms_per_sample"]),
                "< 10% of a core",
                _met(s["goal_under_10_percent_of_a_core"]),
            )
        )
    if s := r.get("peer"):
        rss, cpu = s["rss_agent_over_peer"], s["cpu_agent_over_peer"]
        cluster, real = s["rss_cluster_over_peer"], s["rss_real_node_over_peer"]
        hw = s["vendor_library_measured_on"]
        before = s.get("baseline_in_a_cluster_rss_mib")
        out += [
            (
                "resident memory beside prometheus-node-exporter, replay node (no cluster: no "
                "cluster client loaded), one gzip scraper every 15 s each",
                f"{s['agent_rss_mib']['median']} MiB",
                f"node_exporter {s['node_exporter_rss_mib']['median']} MiB: agent/node_exporter "
                f"{rss['median']} ({_range(rss['range'])})",
                "≤ 48 MiB, ≤ 2.5x node_exporter",
                _met(s["goal_rss_at_most_48_mib"] and s["goal_rss_within_2_5x"]),
            ),
            (
                "resident memory in a cluster configuration, beside it: the same recorded cards, "
                "the node's pods watched through the tests' API server, the kubelet's summary, "
                "pod-resources (gRPC) and DRA readers live (bench/cluster_node.py)",
                f"{s['agent_in_a_cluster_rss_mib']['median']} MiB",
                f"agent/node_exporter {cluster['median']} ({_range(cluster['range'])})"
                + (
                    f"; before ({s.get('baseline_commit') or 'issue 46'}) {before['median']} MiB, "
                    + _saved(s["cluster_saving_mib"]["median"])
                    + ", same run"
                    if before
                    else ""
                ),
                "≤ 44 MiB",
                _met(s["goal_cluster_rss_at_most_44_mib"]),
            ),
            (
                "a real NVIDIA node in a cluster, estimated: the cluster configuration plus what "
                f"the vendor library adds, {s['vendor_library_mib']} MiB, measured on an "
                f"{hw['card']} (driver {hw['driver']}, {hw['date']}: the agent on the card "
                f"{hw['agent_on_card_rss_mib']} MiB against replaying "
                f"{hw['agent_replaying_rss_mib']} MiB), until a run on hardware replaces it",
                f"{s['real_node_rss_mib']['median']} MiB",
                f"agent/node_exporter {real['median']} ({_range(real['range'])})",
                "the direction: ≤ 2.5x node_exporter",
                _met(s["real_node_within_2_5x"]),
            ),
            (
                "CPU beside prometheus-node-exporter, period 15 s, same scrapes",
                f"{s['agent_millicores']['median']} millicores "
                f"(in a cluster {s['agent_in_a_cluster_millicores']['median']})",
                f"node_exporter {s['node_exporter_millicores']['median']} millicores: "
                + (
                    f"agent/node_exporter {cpu['median']} ({_range(cpu['range'])})"
                    if cpu
                    else "too little to tell apart"
                ),
                "≤ 1.5x node_exporter",
                _met(s["goal_cpu_within_1_5x"]),
            ),
        ]
    if s := r.get("wakeups"):
        idle, scraped = s["idle"], s["one_scraper_every_15s"]
        base = s.get("baseline")
        out.append(
            (
                f"wake-ups with no scraper, period {s['period_seconds']:g} s "
                "(one scraper every 15 s)",
                f"{idle['wakeups_per_second']:g}/s, {idle['millicores']:g} millicores "
                f"({scraped['wakeups_per_second']:g}/s, {scraped['millicores']:g} millicores)",
                f"before ({base['commit']}): {base['idle']['wakeups_per_second']:g}/s, "
                f"{base['idle']['millicores']:g} millicores"
                if base
                else "—",
                "none beyond the round's",
                _met(s["goal_no_idle_wakeups"]),
            )
        )
    if s := r.get("startup"):
        base = s.get("baseline")
        ratio = s.get("current_over_baseline")
        out.append(
            (
                "exec to `/readyz` 200, replay node, installed as the image installs it"
                if s.get("installed")
                else "exec to `/readyz` 200, replay node",
                f"{s['exec_to_ready_s']['median']} s "
                f"({_range(s['exec_to_ready_s']['range'], ' s')})",
                f"before ({base['commit']}): {base['exec_to_ready_s']['median']} s; "
                f"after/before {ratio['median']} ({_range(ratio['range'])})"
                if base and ratio
                else "—",
                "≤ 0.3 s",
                _met(s["goal_at_most_0_3_s"]),
            )
        )
    return out


def _per_sample(ms: float) -> str:
    # The sampler's added CPU can be below what the process's CPU clock resolves over a window:
    # said so, not printed as a measured zero.
    return f"{ms} ms" if ms > 0 else "too little to tell from idle"


def extra_rows(r: dict[str, Any]) -> list[Row]:
    out: list[Row] = []
    if s := r.get("attribution"):
        out.append(
            (
                f"attribution alone, {s['processes']:,} processes, generated /proc tree",
                f"steady {s['steady_round_ms']} ms, first {s['first_round_ms']} ms",
                f"floor {s['floor_ms']} ms: steady/floor {s['steady_over_floor']}",
                "—",
                "—",
            )
        )
    if s := r.get("podindex"):
        out.append(
            (
                f"pod index, {s['pods']} pods at {s['events_per_second']:g} watch events/s",
                f"{s['informer_cpu_percent_of_a_core']}% of a core, {s['index_kib']} KiB",
                f"a bare watch: {s['informer_over_floor_per_event']}x its CPU per event; raw "
                f"objects {s['raw_objects_kib']} KiB ({s['index_over_raw_memory']}x)",
                "—",
                "—",
            )
        )
    if s := r.get("summarize"):
        out.append(
            (
                f"`summarize`, {s['series']:,} series of {s['devices']:,} GPUs",
                f"{s['summarize_s_median']} s ({_range(s['summarize_s_range'], ' s')})",
                f"parsing only: {s['parse_only_s_median']} s "
                f"({s['ratio_summarize_to_parse_only']}x)",
                "—",
                "—",
            )
        )
    if s := r.get("soak"):
        answered = s["requests"].get("200", 0)
        asked = sum(s["requests"].values())
        out.append(
            (
                f"soak, {s['seconds']:g} s: period 1 s, {s['scrapes_per_second']} scrapes/s, "
                f"{s['pods']} pods churning",
                f"RSS {s['rss_start_mib']} → {s['rss_end_mib']} MiB, fds {s['fds_start']} → "
                f"{s['fds_end']}",
                f"second half +{s['rss_growth_second_half_mib']} MiB; {answered:,} of {asked:,} "
                f"requests answered 200; kubelet fresh at the end: {s['kubelet_fresh_at_end']}",
                "flat",
                _met(s["rss_growth_second_half_mib"] <= 1.0 and s["fds_end"] <= s["fds_start"] + 2),
            )
        )
    if s := r.get("soak_hostile"):
        answered = s["requests"].get("200", 0)
        asked = sum(s["requests"].values())
        hostile = s["hostile"]
        refused = ", ".join(f"{k} {v:,.0f}" for k, v in sorted(s["refused_by_reason"].items()))
        out.append(
            (
                f"soak with hostile clients, {s['seconds']:g} s: the soak's scrapers beside one "
                "connection pipelining without reading, 100 bare TCP connections renewed every "
                "5 s, 20 slow headers, 5 new random tokens/s",
                f"RSS {s['rss_start_mib']} → {s['rss_end_mib']} MiB, fds {s['fds_start']} → "
                f"{s['fds_end']}",
                f"first half +{s['rss_growth_first_half_mib']} MiB, second half "
                f"+{s['rss_growth_second_half_mib']} MiB; scrapers: {answered:,} of {asked:,} "
                f"answered 200; refused: {refused}; strangers answered 401: "
                f"{hostile.get('stranger_401', 0):,}",
                "scrapers all 200; fds flat; growth slowing, under the 256 MiB limit",
                _met(
                    answered == asked
                    and s["fds_end"] <= s["fds_start"] + 2
                    and s["rss_growth_second_half_mib"] <= s["rss_growth_first_half_mib"]
                    and s["rss_end_mib"] < 256
                ),
            )
        )
    return out


def machine_line(m: dict[str, Any]) -> str:
    virt = ", virtualised" if m.get("virtualised") else ""
    drift = m.get("lock_drift") or {}
    off = "".join(f", {name} {d['installed']} (the lock: {d['lock']})" for name, d in drift.items())
    return (
        f"Measured on {m['date']}: {m['cores']} cores of {m['cpu']}{virt}, {m['memory_gib']} GiB, "
        f"Linux {m['kernel']}, Python {m['python']}"
        + (f", not requirements.lock: {off[2:]}" if off else "")
    )


def machines_line(results: dict[str, Any]) -> str:
    """Where and when the results were measured: one line, or one per machine and day when
    `bench/all.py --only` kept some from an earlier run."""
    benches: dict[str, list[str]] = {}
    for name, result in results.items():
        benches.setdefault(machine_line(result["machine"]), []).append(name)
    if len(benches) == 1:
        return f"{next(iter(benches))}."
    return "\n".join(f"{line} ({', '.join(names)})." for line, names in benches.items())


def table(items: list[Row]) -> str:
    lines = [
        "| what | the agent | baseline, same run | goal | met |",
        "|---|---|---|---|---|",
    ]
    lines += ["| " + " | ".join(row) + " |" for row in items]
    return "\n".join(lines)


def _saved(mib: float) -> str:
    """A saving in MiB as a reader says it: what was saved, or how much more it holds now."""
    return f"{mib} MiB saved" if mib >= 0 else f"{round(-mib, 1)} MiB more"


def render(kind: str, doc: dict[str, Any]) -> str:
    results = doc["results"]
    body = table(rows(results) if kind == "readme" else rows(results) + extra_rows(results))
    return f"{machines_line(results)}\n\n{body}\n"


def replaced(text: str, block: str, where: str) -> str:
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        raise SystemExit(f"{where}: no {BEGIN} … {END} block")
    return text[: start + len(BEGIN)] + "\n" + block + text[end:]


def main(argv: list[str] | None = None, out: Callable[[str], Any] = print) -> int:
    parser = argparse.ArgumentParser()
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true")
    mode.add_argument("--check", action="store_true")
    args = parser.parse_args(argv)
    doc = json.loads(RESULTS.read_text())
    stale = []
    for name, kind in PAGES.items():
        page = REPO / name
        block = render(kind, doc)
        if args.write:
            page.write_text(replaced(page.read_text(), block, name))
        elif args.check:
            if replaced(page.read_text(), block, name) != page.read_text():
                stale.append(name)
        else:
            out(f"{name}:\n{block}")
    if stale:
        out(f"not what bench/results.json says: {', '.join(stale)} (bench/table.py --write)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
