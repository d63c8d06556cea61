"""What goes into the image (R-O6): the build context `.dockerignore` leaves to the builder, and
`requirements.lock`, the exact versions the image installs, against pyproject.toml's
dependencies. Checked without a Docker engine: the patterns are read as Docker reads them, and
the lock is read with `packaging`, as pip reads it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
import venv
from collections.abc import Iterator
from importlib import metadata
from importlib.util import MAGIC_NUMBER, cache_from_source
from pathlib import Path

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import NormalizedName, canonicalize_name
from packaging.version import Version

from tests.conftest import REPO

# -- .dockerignore, read as Docker reads it ------------------------------------------------------


def ignore_patterns(text: str) -> list[tuple[bool, re.Pattern[str]]]:
    """(is an exception, regex) per pattern line, in order. Docker's rules (moby's
    patternmatcher): blank lines and `#` comments are skipped; a leading `!` makes an exception;
    a pattern is cleaned as a path (leading and trailing `/` dropped); `*` and `?` match within
    one path element, `**` any number of elements (`**/` also none)."""
    patterns = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        exception = line.startswith("!")
        line = os.path.normpath(line.removeprefix("!").strip()).strip("/")
        regex, i = "", 0
        while i < len(line):
            if line.startswith("**/", i):
                regex, i = regex + "(?:.*/)?", i + 3
            elif line.startswith("**", i):
                regex, i = regex + ".*", i + 2
            elif line[i] == "*":
                regex, i = regex + "[^/]*", i + 1
            elif line[i] == "?":
                regex, i = regex + "[^/]", i + 1
            else:
                regex, i = regex + re.escape(line[i]), i + 1
        patterns.append((exception, re.compile(regex)))
    return patterns


def ignored(path: str, patterns: list[tuple[bool, re.Pattern[str]]]) -> bool:
    """Whether Docker leaves `path` (relative, `/`-separated) out of the context: the last
    pattern that matches it, or one of its parent directories, decides."""
    parts = path.split("/")
    candidates = ["/".join(parts[: n + 1]) for n in range(len(parts))]
    verdict = False
    for exception, regex in patterns:
        if any(regex.fullmatch(c) for c in candidates):
            verdict = not exception
    return verdict


def may_reinclude(directory: str, patterns: list[tuple[bool, re.Pattern[str]]]) -> bool:
    """Whether an exception could take back something under an ignored directory; if not, the
    walk need not descend (.venv, .git). Conservative: an exception whose literal head is
    under or above `directory`, or that begins with a wildcard."""
    for exception, regex in patterns:
        if not exception:
            continue
        head = re.split(r"[\[(.^*?+]", regex.pattern.replace("\\", ""), maxsplit=1)[0]
        if not head or head.startswith(directory + "/") or directory.startswith(head):
            return True
    return False


def build_context(root: Path = REPO) -> Iterator[str]:
    """Every file of the working tree that `docker build .` sends, ignored ones (a .venv, test
    outputs) included in the walk: the context is what is on disk, not what git tracks."""
    patterns = ignore_patterns((root / ".dockerignore").read_text())
    for directory, subdirs, files in os.walk(root):
        rel = Path(directory).relative_to(root).as_posix()
        rel = "" if rel == "." else rel + "/"
        subdirs[:] = sorted(
            d
            for d in subdirs
            if not (ignored(rel + d, patterns) and not may_reinclude(rel + d, patterns))
        )
        for name in sorted(files):
            if not ignored(rel + name, patterns):
                yield rel + name


def test_the_pattern_reader_reads_as_docker_does() -> None:
    """The examples of Docker's own .dockerignore reference, and how exceptions and parent
    directories combine (R-O6)."""
    patterns = ignore_patterns(
        "# comment\n*/temp*\n*/*/temp*\ntemp?\n**/*.go\n*.md\n!README.md\n/build/\n"
    )
    assert ignored("somedir/temporary.txt", patterns)
    assert ignored("somedir/temp", patterns) and ignored("somedir/temp/inner", patterns)
    assert ignored("somedir/subdir/temporary.txt", patterns)
    assert ignored("tempa", patterns) and not ignored("tempab", patterns)
    assert ignored("main.go", patterns) and ignored("a/b/c.go", patterns)
    assert ignored("CHANGES.md", patterns) and not ignored("README.md", patterns)
    assert ignored("build", patterns) and ignored("build/lib/x.py", patterns)
    assert not ignored("src/build.py", patterns) and not ignored("comment", patterns)
    allowlist = ignore_patterns("*\n!pkg/\n**/__pycache__\n")
    assert ignored(".venv/bin/python", allowlist) and ignored(".git/HEAD", allowlist)
    assert not ignored("pkg/mod.py", allowlist)
    assert ignored("pkg/__pycache__/mod.cpython-311.pyc", allowlist)
    assert ignored("__pycache__/x.pyc", allowlist)


def test_the_build_context_is_what_the_dockerfile_copies(tmp_path: Path) -> None:
    """No local .venv, .git, caches, build outputs or test and benchmark results reach the
    builder; everything the Dockerfile COPYs does (R-O6)."""
    context = set(build_context())
    for path in context:
        parts = path.split("/")
        assert not {".venv", ".git", "__pycache__", "build", ".hypothesis"} & set(parts), path
        assert not parts[0].endswith(".egg-info") and not path.endswith(".pyc"), path
    # What the build stage copies from the context (COPY without --from), every file of it.
    text = (REPO / "Dockerfile").read_text().replace("\\\n", " ")
    sources = [
        source
        for line in text.splitlines()
        if line.startswith("COPY ") and "--from" not in line
        for source in line.split()[1:-1]
    ]
    assert sources, "the Dockerfile copies nothing from the context"
    wanted = set()
    for source in sources:
        copied = REPO / source
        assert copied.exists(), source
        if copied.is_file():
            wanted.add(source)
        else:
            wanted |= {
                f.relative_to(REPO).as_posix()
                for f in copied.rglob("*")
                if f.is_file() and "__pycache__" not in f.parts and f.suffix not in (".pyc", ".pyo")
            }
    assert wanted - context == set(), "the Dockerfile copies files .dockerignore leaves out"
    assert context - wanted == set(), "the context holds files no COPY takes: ignore them"
    # A .venv and caches appear in the context of a tree that has them only through the
    # patterns: shown on a copy that has both.
    tree = tmp_path / "tree"
    (tree / ".venv" / "bin").mkdir(parents=True)
    (tree / ".venv" / "bin" / "python").write_text("")
    (tree / "devicemanager" / "__pycache__").mkdir(parents=True)
    (tree / "devicemanager" / "__pycache__" / "cli.cpython-311.pyc").write_text("")
    (tree / "devicemanager" / "cli.py").write_text("")
    (tree / ".git").mkdir()
    (tree / ".git" / "HEAD").write_text("")
    (tree / ".dockerignore").write_text((REPO / ".dockerignore").read_text())
    assert set(build_context(tree)) == {"devicemanager/cli.py"}


# -- requirements.lock, what the image installs ----------------------------------------------

# The image's interpreter: python:3.11-slim-bookworm, CPython on Linux (the Dockerfile's FROM).
IMAGE_ENVIRONMENT: dict[str, str] = {
    key: str(value) for key, value in default_environment().items()
}
IMAGE_ENVIRONMENT |= {
    "python_version": "3.11",
    "python_full_version": "3.11.0",
    "sys_platform": "linux",
    "platform_system": "Linux",
    "os_name": "posix",
    "implementation_name": "cpython",
    "platform_python_implementation": "CPython",
}


def lock_pins() -> dict[NormalizedName, Version]:
    pins: dict[NormalizedName, Version] = {}
    for raw in (REPO / "requirements.lock").read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        requirement = Requirement(line)
        (spec,) = requirement.specifier  # one exact pin a line, nothing else
        assert spec.operator == "==" and "*" not in spec.version, line
        name = canonicalize_name(requirement.name)
        assert name not in pins, f"{name} pinned twice"
        pins[name] = Version(spec.version)
    return pins


def applies(requirement: Requirement, extras: frozenset[str] = frozenset()) -> bool:
    """Whether a requirement holds in the image, for a distribution asked for with `extras`."""
    if requirement.marker is None:
        return True
    return any(
        requirement.marker.evaluate({**IMAGE_ENVIRONMENT, "extra": extra})
        for extra in (extras or {""})
    )


def runtime_dependencies() -> list[Requirement]:
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    return [Requirement(text) for text in pyproject["project"]["dependencies"]]


def test_the_dockerfile_installs_exactly_the_lock() -> None:
    """Both stages install from requirements.lock, the final one from nothing else (R-O6)."""
    text = (REPO / "Dockerfile").read_text().replace("\\\n", " ")
    runs = [line for line in text.splitlines() if line.startswith("RUN ")]
    build, final = runs
    assert "--requirement requirements.lock" in build
    assert "--no-index" in final and "--requirement /wheels/requirements.lock" in final


def test_the_lock_satisfies_every_runtime_dependency() -> None:
    """Every dependency of [project] that holds on the image's Python is pinned, at a version
    its specifier admits: a lock that falls behind pyproject.toml fails here, not in a build
    (R-O6)."""
    pins = lock_pins()
    for requirement in runtime_dependencies():
        if not applies(requirement):
            continue
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{requirement} has no pin in requirements.lock"
        assert requirement.specifier.contains(pins[name], prereleases=True), (
            f"requirements.lock pins {name}=={pins[name]}, pyproject.toml wants {requirement}"
        )


def test_every_pin_is_needed_and_agrees_with_the_others() -> None:
    """The lock holds the dependencies and theirs, nothing else, and each pin satisfies what the
    other pinned distributions ask of it (R-O6). Dependencies of dependencies are read from
    the metadata of the distributions installed here; where the installed version is not the
    pinned one its requirements are still those of a near version, good enough for the names,
    and its specifiers are not held against the lock."""
    pins = lock_pins()
    wanted: dict[NormalizedName, frozenset[str]] = {}
    queue = [r for r in runtime_dependencies() if applies(r)]
    mismatched = []
    while queue:
        requirement = queue.pop()
        name = canonicalize_name(requirement.name)
        extras = frozenset(requirement.extras) | wanted.get(name, frozenset())
        if name in wanted and wanted[name] >= extras:
            continue
        wanted[name] = extras
        try:
            installed = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            pytest.skip(f"{name} is not installed here: its dependencies cannot be read")
        exact = Version(installed.version) == pins.get(name)
        for text in installed.requires or ():
            dependency = Requirement(text)
            if not applies(dependency, extras):
                continue
            target = canonicalize_name(dependency.name)
            held = target in pins and dependency.specifier.contains(pins[target], prereleases=True)
            if exact and target in pins and not held:
                mismatched.append(f"{name}=={pins[name]} wants {dependency}")
            queue.append(dependency)
    assert set(wanted) - set(pins) == set(), "dependencies with no pin in requirements.lock"
    assert set(pins) - set(wanted) == set(), "pins no dependency needs: drop them"
    assert mismatched == [], mismatched


def test_the_benchmarks_tell_an_environment_that_is_not_the_lock() -> None:
    """(R-O6) bench/all.py compares `pip freeze` with requirements.lock before it measures: a
    pin installed at another version, or missing, is drift (bench/all.py refuses it unless
    --allow-drift, and records it beside each result); what the lock does not name (the test
    tools) and the spelling of a name are not."""
    from bench.common import lock_drift

    lock = "# a comment\ngrpcio==1.85.3\nPyYAML==6.0.4\ntyping_extensions==4.16.0\nh2==4.4.1\n"
    freeze = "grpcio==1.85.1\npyyaml==6.0.4\ntyping-extensions==4.16.0\npytest==9.2.0\n"
    freeze += "-e /work/tree\n"
    assert lock_drift(freeze, lock) == {
        "grpcio": {"lock": "1.85.3", "installed": "1.85.1"},
        "h2": {"lock": "4.4.1", "installed": None},
    }
    assert lock_drift(lock, lock) == {}


def test_the_environment_the_tests_run_in_is_the_lock() -> None:
    """(R-O6) The pins of requirements.lock are what is installed here: the figures of
    bench/results.json and the tests were measured on what the image installs."""
    from bench.common import environment_drift

    drift = environment_drift()
    missing = {name for name, d in drift.items() if d["installed"] is None}
    assert {n: d for n, d in drift.items() if n not in missing} == {}


# -- the agent's bytecode, as the image installs it -----------------------------------------------


def test_the_images_install_leaves_every_module_compiled(tmp_path: Path) -> None:
    """(R-O6) The image installs the agent's wheel with pip and then sets
    PYTHONDONTWRITEBYTECODE: every module must already have bytecode that matches its source,
    or each start compiles the agent anew (about 0.1 s; bench/startup.py installs its checkouts
    as the image does for the same reason). Built and installed here as the Dockerfile's two
    stages do (a wheel, then `pip install --no-index` of it), with PYTHONDONTWRITEBYTECODE
    already set."""
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    wheels, target = tmp_path / "wheels", tmp_path / "image"
    subprocess.run(
        [*pip, "wheel", "--no-deps", "--no-build-isolation", "--wheel-dir", str(wheels), "."],
        cwd=REPO,
        env=env,
        check=True,
        capture_output=True,
    )
    venv.create(target, with_pip=False)
    (wheel,) = wheels.glob("devicemanager-*.whl")
    subprocess.run(
        [
            *pip,
            "--python",
            str(target / "bin" / "python"),
            "install",
            "--no-deps",
            "--no-index",
            str(wheel),
        ],
        env=env,
        check=True,
        capture_output=True,
    )
    (site,) = (target / "lib").glob("python3.*/site-packages")
    sources = [p for top in ("devicemanager", "vendors") for p in (site / top).rglob("*.py")]
    assert len(sources) > 50 and (site / "devicemanager" / "agent" / "wiring.py") in sources
    stale = []
    for source in sources:
        compiled = Path(cache_from_source(str(source)))
        header = compiled.read_bytes()[:16] if compiled.exists() else b""
        stat = source.stat()
        matches = (
            header[:4] == MAGIC_NUMBER
            and int.from_bytes(header[8:12], "little") == int(stat.st_mtime) & 0xFFFFFFFF
            and int.from_bytes(header[12:16], "little") == stat.st_size & 0xFFFFFFFF
        )
        if not matches:
            stale.append(str(source.relative_to(site)))
    assert not stale, f"no matching bytecode for {stale[:5]}"
