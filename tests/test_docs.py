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
