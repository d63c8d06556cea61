"""The docs document every flag and scenario the code has; fixtures/README every scenario."""

from __future__ import annotations

import argparse
import json
import re

from devicemanager.agent.config import SERVE_FLAGS
from devicemanager.model import FIGURES, FigureTable
from tests.conftest import FIXTURES, REPO, SCENARIOS

README = (REPO / "README.md").read_text()
CONFIGURATION = (REPO / "docs" / "configuration.md").read_text()
DESIGN = (REPO / "docs" / "design.md").read_text()


def test_every_serve_flag_and_its_environment_variables_are_documented() -> None:
    for flag in SERVE_FLAGS:
        row = next(
            (line for line in CONFIGURATION.splitlines() if line.startswith(f"| `{flag.name}`")),
            None,
        )
        assert row is not None, f"{flag.name} is not in the flag table of docs/configuration.md"
        for env in flag.env:
            assert f"`{env}`" in row, f"{env} missing from the row of {flag.name}"


def parsers() -> dict[str, argparse.ArgumentParser]:
    """Every subcommand's parser, as `devicemanager` builds them."""
    from devicemanager.cli import build_parser

    (sub,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices)


def long_flags(parser: argparse.ArgumentParser) -> set[str]:
    return {
        option
        for action in parser._actions
        for option in action.option_strings
        if option.startswith("--") and option != "--help"
    }


def test_every_flag_of_every_command_is_documented() -> None:
    """docs/configuration.md names every flag each command accepts, from the parser itself: a
    flag of `serve` has a row of the table (SERVE_FLAGS and any added to the parser beside
    them), a flag of another command is in that command's entry, and the two every command
    takes are said once (R-O4)."""
    commands = parsers()
    assert {"serve", "snapshot", "metrics", "whois", "record", "instance-metrics"} <= set(commands)
    rows = {
        line.split("`")[1]
        for line in CONFIGURATION.split("## `devicemanager serve`", 1)[1]
        .split("\n## ", 1)[0]
        .splitlines()
        if line.startswith("| `--")
    }
    common = {"--version", "--debug"}
    for flag in common:
        assert f"`{flag}`" in CONFIGURATION.split("## Other commands", 1)[1], flag
    assert long_flags(commands["serve"]) - common - rows == set(), "serve flags with no row"
    assert {f.name for f in SERVE_FLAGS} <= rows
    assert rows - long_flags(commands["serve"]) == set(), "rows for flags serve does not take"
    entries = re.split(r"\n- ", CONFIGURATION.split("## Other commands", 1)[1])
    for name, parser in commands.items():
        if name == "serve":
            continue
        (entry,) = [e for e in entries if e.startswith(f"`devicemanager {name} ")]
        missing = {flag for flag in long_flags(parser) - common if flag not in entry}
        assert missing == set(), f"devicemanager {name}: flags not in its entry: {missing}"


def test_the_manufacturer_row_names_every_backend() -> None:
    """The doc offers what `serve --help` offers: every shipped backend (R-O4)."""
    from devicemanager.backend import BACKENDS

    row = next(line for line in CONFIGURATION.splitlines() if line.startswith("| `--manufacturer`"))
    for name in BACKENDS:
        assert f"`{name}`" in row, name


def test_the_readme_opens_with_the_two_commands() -> None:
    head = README.split("\n## ", 1)[0]
    assert "scripts/run" in head and "scripts/test" in head
    assert "bash scripts/test" in (REPO / ".ci" / "run").read_text()


def test_every_scenario_is_documented_with_its_provenance() -> None:
    fixtures_readme = (FIXTURES / "README.md").read_text()
    for name in SCENARIOS:
        assert f"`{name}`" in DESIGN
        row = next(line for line in fixtures_readme.splitlines() if line.startswith(f"| `{name}`"))
        assert "synthetic" in row or "recorded" in row


def metrics_rows() -> set[str]:
    """The family names docs/metrics.md's table has a row for."""
    table = (REPO / "docs" / "metrics.md").read_text()
    return {line.split("`")[1] for line in table.splitlines() if line.startswith("| `")}


def table_families(table: FigureTable = FIGURES) -> set[str]:
    """Every family the figure table declares (the card's, per grant, health), whether or not a
    scenario below publishes it: a figure added to the table needs its row in the docs."""
    return set(table.family_names())


def undocumented(names: set[str]) -> set[str]:
    return names - metrics_rows()


def test_every_family_the_agent_can_publish_is_a_row_of_the_metrics_table() -> None:
    from devicemanager.agent.selfmetrics import SelfMetrics
    from devicemanager.figures import exposition
    from devicemanager.figures.figures import Pair, PodLevel
    from devicemanager.grants.grants import InstanceRef
    from devicemanager.serve.counters import HttpCounters
    from tests.conftest import scenario_monitor

    rows = metrics_rows()
    names = table_families()
    # h100-mig-gpm's cards carry the health families and XID counts, a100-device-plugin-only an
    # unhealthy card, the Atlas node an NPU's active error code, a100-dra-only DRA device
    # taints and the kubelet's health word (R-X11).
    for other in (
        "h100-mig-gpm",
        "a100-device-plugin-only",
        "atlas800t-a2-8npu-vnpu-mixed",
        "a100-dra-only",
    ):
        monitor = scenario_monitor(other)
        text = exposition.render(exposition.families(monitor.run_round().snapshot)).decode()
        monitor.stop()
        names |= {line.split()[2] for line in text.splitlines() if line.startswith("# TYPE")}
    monitor = scenario_monitor("h100-8gpu-mixed")
    published = monitor.run_round()
    monitor.stop()
    pod = PodLevel(InstanceRef("ns", "n", "u"), Pair(1, 1), Pair(1, 1), Pair(1, 1))
    extras = exposition.Extras(
        exporting=True,
        kubelet_success=True,
        kubelet_duration=0.1,
        kubelet_age=1.0,
        pod_level=(pod,),
        podresources_success=True,
        podresources_duration=0.1,
        build=(("version", "0"), ("python", "3"), ("sdk", "")),
        # with an Event writer's counts, as in a cluster (R-X11)
        own=SelfMetrics(HttpCounters(), events=dict).families(1, 0),
        skipped_lines={"pods": 0},
    )
    text = exposition.render(exposition.families(published.snapshot, True, extras)).decode()
    names |= {line.split()[2] for line in text.splitlines() if line.startswith("# TYPE")}
    assert undocumented(names) == set(), "families missing from docs/metrics.md's table"
    assert rows - names == set(), "rows of docs/metrics.md's table no code publishes"


def _anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def test_every_relative_link_in_the_docs_leads_somewhere() -> None:
    # The README and docs/ link to each other and to files; a moved file or renamed heading
    # must not leave a reader at a 404.
    pages = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    broken = []
    for page in pages:
        text = re.sub(r"```.*?```", "", page.read_text(), flags=re.DOTALL)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue  # an external address: not checked here (no network)
            path, _, anchor = target.partition("#")
            file = (page.parent / path).resolve() if path else page
            if not file.exists():
                broken.append(f"{page.name}: {target} (no such file)")
                continue
            if anchor and file.suffix == ".md":
                headings = re.findall(r"^#+ (.+)$", file.read_text(), flags=re.MULTILINE)
                if anchor not in {_anchor(h) for h in headings}:
                    broken.append(f"{page.name}: {target} (no such heading)")
    assert not broken, broken


# A requirement id is a letter and a number after "R-" (R-V1, R-X5); SR-IOV and the like are not.
REQUIREMENT = re.compile(r"(?<![\w-])R-[A-Z]\d+\b")


def test_every_requirement_cited_in_the_code_and_tests_is_defined_in_the_spec() -> None:
    spec = (REPO / "docs" / "spec.md").read_text()
    defined = set(re.findall(r"^- (R-[A-Z]\d+) ", spec, flags=re.MULTILINE))
    cited: dict[str, list[str]] = {}
    for top in ("devicemanager", "vendors", "tests"):
        for path in sorted((REPO / top).rglob("*")):
            if not path.is_file() or "__pycache__" in path.parts:
                continue
            try:
                text = path.read_text()
            except UnicodeDecodeError:
                continue  # a compiled fake library, not a place ids are cited
            for found in set(REQUIREMENT.findall(text)):
                cited.setdefault(found, []).append(str(path.relative_to(REPO)))
    assert {"R-V1", "R-X5"} <= defined and "R-X5" in cited  # the two ends are both read
    undefined = {rid: files for rid, files in sorted(cited.items()) if rid not in defined}
    assert not undefined, f"cited but not defined in docs/spec.md: {undefined}"


def test_the_performance_tables_are_what_the_last_benchmark_run_printed() -> None:
    # README.md's and docs/performance.md's tables are rendered from bench/results.json by
    # bench/table.py; a figure typed in by hand, or a run not rendered, fails here.
    from bench import table

    said: list[str] = []
    assert table.main(["--check"], out=said.append) == 0, said
    doc = json.loads(table.RESULTS.read_text())
    for page in table.PAGES:
        text = (REPO / page).read_text()
        block = text[text.index(table.BEGIN) : text.index(table.END)]
        for result in doc["results"].values():
            assert result["machine"]["cpu"] in block and "| what |" in block, page
    assert set(doc["results"]) >= {"scrape", "round", "footprint", "sampler", "soak"}


def test_results_kept_from_another_day_are_dated_as_such() -> None:
    # bench/all.py --only reruns some benchmarks and keeps the others: the table must not date
    # the kept ones to the new run.
    from bench import table

    machine = {"cores": 2, "cpu": "AMD EPYC", "memory_gib": 24, "kernel": "6.1", "python": "3.11"}
    results = {
        "scrape": {"machine": {**machine, "date": "2026-12-02"}},
        "round": {"machine": {**machine, "date": "2026-12-01"}},
        "soak": {"machine": {**machine, "date": "2026-12-02"}},
    }
    lines = table.machines_line(results).splitlines()
    assert lines == [
        "Measured on 2026-12-02: 2 cores of AMD EPYC, 24 GiB, Linux 6.1, Python 3.11 "
        "(scrape, soak).",
        "Measured on 2026-12-01: 2 cores of AMD EPYC, 24 GiB, Linux 6.1, Python 3.11 (round).",
    ]
    del results["round"]
    assert table.machines_line(results) == (
        "Measured on 2026-12-02: 2 cores of AMD EPYC, 24 GiB, Linux 6.1, Python 3.11."
    )


def test_the_readme_reports_the_mutation_score_of_the_last_run() -> None:
    # docs/design.md's table is the last run of scripts/mutate; the README quotes its total.
    design = (REPO / "docs" / "design.md").read_text()
    total = re.search(
        r"\| \*\*core\*\* \| \*\*(\d+)\*\* \| \*\*(\d+)\*\* \| \*\*(\d+)\*\* \|", design
    )
    assert total is not None
    mutants, killed, equivalent = map(int, total.groups())
    readme = (REPO / "README.md").read_text()
    assert f"{killed} of {mutants - equivalent} non-equivalent mutants killed" in readme
    assert killed / (mutants - equivalent) >= 0.95
