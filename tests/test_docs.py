"""The docs document every flag and scenario the code has; fixtures/README every scenario."""

from __future__ import annotations

from devicemanager.config import SERVE_FLAGS
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


def test_every_family_the_agent_can_publish_is_a_row_of_the_metrics_table() -> None:
    from devicemanager import exposition
    from devicemanager.figures import Pair, PodLevel
    from devicemanager.grants import InstanceRef
    from tests.conftest import scenario_monitor

    table = (REPO / "docs" / "metrics.md").read_text()
    rows = {line.split("`")[1] for line in table.splitlines() if line.startswith("| `")}
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
    )
    text = exposition.render(exposition.families(published.snapshot, True, extras)).decode()
    names = {line.split()[2] for line in text.splitlines() if line.startswith("# TYPE")}
    assert names - rows == set(), "families missing from docs/metrics.md's table"
    assert rows - names == set(), "rows of docs/metrics.md's table no code publishes"
