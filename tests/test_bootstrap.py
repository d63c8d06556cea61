"""scripts/bootstrap on a machine of stand-ins: it rebuilds a .venv an older Python made, refuses
an interpreter older than 3.11, and installs the test tools only when asked to.

The script runs for real, copied with the pyproject.toml it hashes into a temporary repository,
under a PATH holding only the tools it uses. The interpreters are stand-ins: each answers the
version check by running the real check code under the real Python with `sys.version_info` set
to the version it plays, and records `-m venv` and `-m pip` instead of doing them, so nothing is
downloaded and nothing outside the temporary directory changes.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import REPO

# What bootstrap and the stand-ins run besides bash's builtins.
TOOLS = ("bash", "cat", "cp", "cut", "dirname", "mkdir", "rm", "sha256sum")
LOCKED = "pip install -q --constraint requirements.lock -e"


@dataclass(frozen=True)
class Machine:
    repo: Path
    path: str  # PATH: the tools, a fake `id` saying root, a fake `apt-get`; no curl, gcc, promtool
    log: Path  # what the stand-ins were asked to do, a line each

    def python(self, version: str) -> Path:
        """A stand-in interpreter that plays Python `version`."""
        major, minor, micro = version.split(".")
        script = self.log.parent / f"python{version}"
        script.write_text(
            f"#!{shutil.which('bash')}\n"
            'case "$1" in\n'
            f"  -c) exec {sys.executable} -c 'import sys; sys.version_info = "
            f'({major}, {minor}, {micro}); exec(sys.argv[1])\' "$2" ;;\n'
            f'  --version) echo "Python {version}" ;;\n'
            '  -m) case "$2" in\n'
            '        venv) mkdir -p "$3/bin" && cp "$0" "$3/bin/python" '
            f'&& echo "venv $3" >> {self.log} ;;\n'
            f'        pip) shift 2; echo "pip $*" >> {self.log} ;;\n'
            "        *) exit 1 ;;\n"
            "      esac ;;\n"
            f'  *) echo "unexpected python $*" >> {self.log}; exit 1 ;;\n'
            "esac\n"
        )
        script.chmod(0o755)
        return script

    def bootstrap(self, *args: str, python: Path | str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.repo / "scripts" / "bootstrap"), *args],
            capture_output=True,
            text=True,
            env={"PATH": self.path, "HOME": str(self.repo), "PYTHON": str(python)},
            check=False,
            timeout=60,
        )

    def asked(self) -> list[str]:
        return self.log.read_text().splitlines() if self.log.exists() else []

    def stamp(self) -> str:
        files = (self.repo / "pyproject.toml", self.repo / "requirements.lock")
        return hashlib.sha256(b"".join(f.read_bytes() for f in files)).hexdigest()


@pytest.fixture
def machine(tmp_path: Path) -> Machine:
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    shutil.copy2(REPO / "scripts" / "bootstrap", repo / "scripts" / "bootstrap")
    shutil.copy2(REPO / "pyproject.toml", repo / "pyproject.toml")
    shutil.copy2(REPO / "requirements.lock", repo / "requirements.lock")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in TOOLS:
        found = shutil.which(tool)
        assert found, f"{tool} is needed to run scripts/bootstrap"
        (bin_dir / tool).symlink_to(found)
    log = tmp_path / "asked.log"
    fakes = {
        "id": "echo 0\n",
        "apt-get": f'echo "apt-get $*" >> {log}\n',
    }
    for name, body in fakes.items():
        (bin_dir / name).write_text(f"#!{shutil.which('bash')}\n{body}")
        (bin_dir / name).chmod(0o755)
    return Machine(repo, str(bin_dir), log)


def test_a_venv_made_by_an_older_python_is_rebuilt(machine: Machine) -> None:
    venv = machine.repo / ".venv"
    (venv / "bin").mkdir(parents=True)
    shutil.copy2(machine.python("3.9.18"), venv / "bin" / "python")
    (venv / "lib").mkdir()
    (venv / "lib" / "left-by-3.9").write_text("")
    out = machine.bootstrap(python=machine.python("3.11.9"))
    assert out.returncode == 0, out.stderr
    assert out.stderr == (
        "bootstrap: rebuilding .venv: it was made by Python 3.9.18; "
        "devicemanager needs 3.11 or newer\n"
    )
    assert not (venv / "lib").exists()  # the old .venv was removed, not reused
    assert machine.asked() == [
        "venv .venv",
        "pip install -q --upgrade pip",
        f"{LOCKED} .",
    ]
    rebuilt = subprocess.run(
        [str(venv / "bin" / "python"), "--version"], capture_output=True, text=True, check=True
    )
    assert rebuilt.stdout == "Python 3.11.9\n"
    assert (venv / ".bootstrapped-run").read_text() == machine.stamp() + "\n"
    # Made by 3.11 now: the next run keeps it and, nothing having changed, does nothing.
    again = machine.bootstrap(python=machine.python("3.11.9"))
    assert (again.returncode, again.stderr) == (0, "")
    assert len(machine.asked()) == 3


@pytest.mark.parametrize("purpose", ("run", "test"))
@pytest.mark.parametrize("bad", ("3.9.18", "3.10.14", "missing"))
def test_an_interpreter_older_than_3_11_is_refused(
    machine: Machine, purpose: str, bad: str
) -> None:
    python = machine.repo / "no-such-python" if bad == "missing" else machine.python(bad)
    out = machine.bootstrap(purpose, python=python)
    assert out.returncode == 2
    assert out.stderr.startswith(
        f"bootstrap: devicemanager needs Python 3.11 or newer; found {python} ("
    )
    assert out.stderr.endswith("Set PYTHON=/path/to/python3.11\n")
    assert machine.asked() == []  # nothing made, nothing installed
    assert not (machine.repo / ".venv").exists()


def test_the_run_set_up_installs_no_test_tools(machine: Machine) -> None:
    python = machine.python("3.11.9")
    # This machine lacks curl, gcc and promtool, and says it is root with apt-get: a test
    # set-up would install them; a run set-up must not.
    run = machine.bootstrap(python=python)
    assert (run.returncode, run.stderr) == (0, "")
    assert machine.asked() == ["venv .venv", "pip install -q --upgrade pip", f"{LOCKED} ."]
    venv = machine.repo / ".venv"
    assert (venv / ".bootstrapped-run").read_text() == machine.stamp() + "\n"
    assert not (venv / ".bootstrapped-test").exists()

    # The test set-up on the same machine: the system tools and the package's test extra.
    test = machine.bootstrap("test", python=python)
    assert test.returncode == 0, test.stderr
    assert test.stderr == "bootstrap: installing curl gcc libc6-dev prometheus\n"
    assert machine.asked()[3:] == [
        "apt-get update -qq",
        "apt-get install -y -qq --no-install-recommends curl gcc libc6-dev prometheus",
        "pip install -q --upgrade pip",
        f"{LOCKED} .[test]",
    ]
    assert (venv / ".bootstrapped-test").read_text() == machine.stamp() + "\n"

    # A test set-up also serves running: the next run set-up installs nothing.
    again = machine.bootstrap("run", python=python)
    assert (again.returncode, again.stderr) == (0, "")
    assert len(machine.asked()) == 7


def test_an_unknown_purpose_is_a_usage_error(machine: Machine) -> None:
    out = machine.bootstrap("deploy", python=machine.python("3.11.9"))
    assert (out.returncode, out.stderr) == (2, "usage: scripts/bootstrap [run|test]\n")
    assert machine.asked() == []


def test_the_stand_in_interpreters_answer_the_check_as_the_real_one_would(
    machine: Machine,
) -> None:
    # The stand-ins are only as good as their answer to bootstrap's own check: the same code,
    # judged by the version each plays.
    (check,) = re.findall(r"-c '([^']+)'", (REPO / "scripts" / "bootstrap").read_text())
    for version, code in (("3.9.18", 1), ("3.10.14", 1), ("3.11.0", 0), ("3.13.1", 0)):
        result = subprocess.run(
            [str(machine.python(version)), "-c", check], env=dict(os.environ), check=False
        )
        assert result.returncode == code, version
