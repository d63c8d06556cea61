"""The command line as operators meet it (issue 20): a version everywhere, one error style with
documented exit codes (0 ok, 1 absent or unhealthy, 2 usage, 3 cannot reach or read), no
traceback without --debug, and clean structured logs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from devicemanager import __version__
from devicemanager.cli import default_kubeconfig
from tests.conftest import NODES, REPO, Agent, agent_env
from tests.kube_server import FakeApiServer
from tests.world import cid, uid

COMMANDS = ("serve", "snapshot", "metrics", "whois", "record", "instance-metrics", "summarize")
H100 = NODES / "h100-8gpu-mixed"


def dm(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "devicemanager", *args],
        capture_output=True,
        text=True,
        env=agent_env(env),
        cwd=REPO,
        check=False,
        timeout=60,
    )


def one_line(result: subprocess.CompletedProcess[str], command: str) -> str:
    """The error a command printed: one line, naming the command, no traceback."""
    assert "Traceback" not in result.stderr, result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"devicemanager {command}: "), line
    return line


@pytest.mark.parametrize("command", ("", *COMMANDS))
def test_every_command_says_its_version(command: str) -> None:
    out = dm(*filter(None, [command]), "--version")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(f"devicemanager {__version__} (Python 3.")
    assert "nvidia-ml-py 13." in out.stdout  # the vendor SDK the image carries


def test_debug_adds_the_traceback_and_keeps_the_exit_code() -> None:
    # An unexpected failure (a backend whose read raises RuntimeError) is exit 3 either way;
    # --debug only adds the traceback, so a script sees the same outcome with it.
    plain = dm("record", "tests.fakes:FailingBackend")
    assert plain.returncode == 3
    assert one_line(plain, "record") == (
        "devicemanager record: RuntimeError: driver said no (run with --debug for the traceback)"
    )
    debug = dm("record", "tests.fakes:FailingBackend", "--debug")
    assert debug.returncode == 3
    assert debug.stderr.startswith("Traceback (most recent call last):")
    assert 'tests/fakes.py", line' in debug.stderr
    assert (
        debug.stderr.strip().splitlines()[-1]
        == "devicemanager record: RuntimeError: driver said no"
    )


def test_serve_with_a_cert_dir_that_is_not_a_directory_is_a_usage_error(tmp_path: Path) -> None:
    missing = tmp_path / "nonexistent"
    out = dm("serve", "--cert-dir", str(missing), "--replay", str(H100))
    assert out.returncode == 2
    assert (
        one_line(out, "serve") == f"devicemanager serve: --cert-dir: {missing} is not a directory"
    )
    a_file = tmp_path / "tls.crt"
    a_file.write_text("")
    from_env = dm("serve", "--replay", str(H100), env={"DEVICEMANAGER_CERT_DIR": str(a_file)})
    assert from_env.returncode == 2
    assert f"--cert-dir: {a_file} is not a directory" in one_line(from_env, "serve")


@pytest.mark.parametrize("command", ("snapshot", "metrics"))
@pytest.mark.parametrize("timeout", ("-1", "0"))
def test_a_timeout_that_is_not_positive_is_a_usage_error(command: str, timeout: str) -> None:
    # Refused by the parser before any connection, as summarize refuses it; never a raw
    # ValueError from the HTTP client with exit 3.
    out = dm(command, "--url", "https://127.0.0.1:1/", "--timeout", timeout)
    assert out.returncode == 2
    assert "Traceback" not in out.stderr and "ValueError" not in out.stderr
    assert out.stderr.strip().splitlines()[-1] == (
        f"devicemanager {command}: error: argument --timeout: must be positive"
    )


# -- whois ------------------------------------------------------------------------------------


def a_process(proc: Path, pid: int, pod: str) -> None:
    d = proc / str(pid)
    d.mkdir(parents=True)
    (d / "cgroup").write_text(f"0::/kubepods/burstable/pod{uid(pod)}/{cid(pod, 'main')}\n")
    (d / "comm").write_text("python3\n")
    (d / "stat").write_text(
        f"{pid} (python3) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 77 " + "0 " * 30
    )


def pods_file(path: Path, pod: str) -> Path:
    status = {"name": "main", "containerID": f"containerd://{cid(pod, 'main')}"}
    doc = {
        "kind": "PodList",
        "items": [
            {
                "metadata": {"name": pod, "namespace": "ns", "uid": uid(pod)},
                "status": {"containerStatuses": [status]},
            }
        ],
    }
    path.write_text(json.dumps(doc))
    return path


def test_whois_tells_placed_from_no_such_process_and_refuses_bad_input(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    a_process(proc, 10, "vllm-0")
    pods = pods_file(tmp_path / "pods.json", "vllm-0")
    placed = dm("whois", "10", "--proc-root", str(proc), "--pods", str(pods))
    assert placed.returncode == 0
    assert json.loads(placed.stdout)["pod"] == "vllm-0"
    nobody = dm("whois", "11", "--proc-root", str(proc))
    assert nobody.returncode == 1 and json.loads(nobody.stdout)["reason"] == "no_such_process"
    unknown = dm("whois", "10", "--proc-root", str(proc), "--pods", str(tmp_path / "none.json"))
    assert unknown.returncode == 2
    assert "--pods: No such file or directory" in one_line(unknown, "whois")
    negative = dm("whois", "-5")
    assert negative.returncode == 2 and "is not a PID" in negative.stderr
    root = dm("whois", "10", "--proc-root", str(tmp_path / "nonexistent"))
    assert root.returncode == 2 and "is not a directory" in one_line(root, "whois")


def test_whois_asks_for_one_of_a_pid_or_a_cgroup_file(tmp_path: Path) -> None:
    neither = dm("whois")
    assert neither.returncode == 2
    assert one_line(neither, "whois") == (
        "devicemanager whois: give a PID or --cgroup-file (one of them)"
    )
    saved = tmp_path / "cgroup"
    saved.write_text("0::/\n")
    both = dm("whois", "10", "--cgroup-file", str(saved))
    assert both.returncode == 2
    assert one_line(both, "whois") == "devicemanager whois: give a PID or --cgroup-file, not both"


def test_whois_honours_pods_for_a_saved_cgroup_file(tmp_path: Path) -> None:
    saved = tmp_path / "cgroup"
    saved.write_text(f"0::/kubepods/besteffort/pod{uid('vllm-0')}/{cid('vllm-0', 'main')}\n")
    pods = pods_file(tmp_path / "pods.json", "vllm-0")
    named = dm("whois", "--cgroup-file", str(saved), "--pods", str(pods))
    assert named.returncode == 0
    assert json.loads(named.stdout)["container"] == "main"
    other = pods_file(tmp_path / "other.json", "someone-else")
    stranger = dm("whois", "--cgroup-file", str(saved), "--pods", str(other))
    assert stranger.returncode == 1 and json.loads(stranger.stdout)["reason"] == "unknown_pod"


# -- a running agent ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def replay(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Agent]:
    from tests.conftest import start_agent

    agent = start_agent(
        ["--replay", str(H100), "--monitor-period", "1"], tmp_path_factory.mktemp("agent")
    )
    try:
        agent.wait_for("/readyz", 200)
        yield agent
    finally:
        agent.proc.terminate()
        agent.proc.wait(10)


def test_snapshot_shows_cards_and_the_grants_each_instance_holds(replay: Agent) -> None:
    out = dm(
        "snapshot",
        "--url",
        replay.url("/monitor/snapshot"),
        "--metrics-url",
        replay.url("/metrics"),
    )
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "backend nvidia: ok" in text
    assert "GPU-da0a3442-34af-5b36-ecd5-4257d0eb2ac9" in text
    grants = text.split("grants (each Instance's own figures; - = not measured)\n", 1)[1]
    # The busy 40% slice on card 3: 31,745 MiB of its 32,623 and 90% of its own cap.
    row = next(line for line in grants.splitlines() if "llama-3-8b " in line)
    assert row.split()[1:3] == ["llama-3-8b", "Sliced"]
    assert "31745/32623" in row and row.split()[-1] == "90.0"


def test_snapshot_pointed_at_metrics_says_so(replay: Agent) -> None:
    wrong = dm("snapshot", "--url", replay.url("/metrics"))
    assert wrong.returncode == 3
    assert "does not serve a snapshot (it answered text/plain" in one_line(wrong, "snapshot")
    assert "/monitor/snapshot" in wrong.stderr
    missing_ca = dm("snapshot", "--url", replay.url("/monitor/snapshot"), "--cacert", "/nope")
    assert missing_ca.returncode == 2 and "--cacert" in one_line(missing_ca, "snapshot")


def _into_a_closed_pipe(*args: str) -> subprocess.CompletedProcess[str]:
    """The command with its standard output a pipe whose reader has already gone, as
    `devicemanager snapshot | head -1` once head has its line: every write fails with EPIPE."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run(
            [sys.executable, "-m", "devicemanager", *args],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            env=agent_env(),
            cwd=REPO,
            check=False,
            timeout=60,
        )
    finally:
        os.close(write_end)


@pytest.mark.parametrize(
    "args",
    (
        ("snapshot", "--metrics-url", ""),
        ("snapshot", "--json"),
        ("metrics",),
    ),
    ids=("snapshot", "snapshot-json", "metrics"),
)
def test_a_closed_standard_output_ends_the_command_quietly(
    replay: Agent, args: tuple[str, ...]
) -> None:
    # Like most Unix tools behind `| head`: exit 0, nothing on stderr (no BrokenPipeError, no
    # "Exception ignored" at exit).
    path = "/metrics" if args[0] == "metrics" else "/monitor/snapshot"
    out = _into_a_closed_pipe(*args, "--url", replay.url(path))
    assert (out.returncode, out.stderr) == (0, "")


def test_metrics_prints_the_agents_exposition(replay: Agent) -> None:
    out = dm("metrics", "--url", replay.url("/metrics"))
    assert out.returncode == 0, out.stderr
    assert "gpustack_accelerator_backend_up{" in out.stdout
    assert "gpustack_instance_accelerator_memory_used_mib{" in out.stdout
    from prometheus_client.parser import text_string_to_metric_families

    (build,) = (
        s
        for f in text_string_to_metric_families(out.stdout)
        for s in f.samples
        if s.name == "gpustack_device_manager_build_info"
    )
    assert build.value == 1.0 and build.labels["version"] == __version__
    assert build.labels["sdk"].startswith("nvidia-ml-py 13.")
    down = dm("metrics", "--url", "https://127.0.0.1:1/metrics", "--timeout", "2")
    assert down.returncode == 3 and "ConnectError" in one_line(down, "metrics")


# -- record and instance-metrics --------------------------------------------------------------


def test_record_a_backend_that_cannot_be_imported_is_a_usage_error() -> None:
    out = dm("record", "foo:Bar")
    assert out.returncode == 2
    assert "backend 'foo:Bar' cannot be imported" in one_line(out, "record")


def test_instance_metrics_with_a_bad_kubeconfig_is_one_line(tmp_path: Path) -> None:
    missing = dm("instance-metrics", "ns", "x", "--kubeconfig", str(tmp_path / "nope"))
    assert missing.returncode == 2 and "is not a file" in one_line(missing, "instance-metrics")
    broken = tmp_path / "broken"
    broken.write_text("apiVersion: v1\nclusters: [this is: not: yaml\n")
    bad = dm("instance-metrics", "ns", "x", "--kubeconfig", str(broken))
    assert bad.returncode == 2 and "cannot be used" in one_line(bad, "instance-metrics")


NO_CONTEXTS = "apiVersion: v1\nkind: Config\nclusters: []\nusers: []\n"


def test_a_kubeconfig_without_contexts_is_named_as_such(tmp_path: Path) -> None:
    config = tmp_path / "config"
    config.write_text(NO_CONTEXTS)
    out = dm("instance-metrics", "ns", "x", "--kubeconfig", str(config))
    assert out.returncode == 2
    assert one_line(out, "instance-metrics") == (
        f"devicemanager instance-metrics: --kubeconfig: {config} cannot be used: "
        "it has no 'contexts' section"
    )


def test_a_kubeconfig_found_as_kubectl_would_is_named_by_where_it_came_from(
    tmp_path: Path,
) -> None:
    config = tmp_path / "config"
    config.write_text(NO_CONTEXTS)
    from_env = dm("instance-metrics", "ns", "x", env={"KUBECONFIG": str(config)})
    assert from_env.returncode == 2
    assert one_line(from_env, "instance-metrics") == (
        f"devicemanager instance-metrics: $KUBECONFIG: {config} cannot be used: "
        "it has no 'contexts' section"
    )
    gone = tmp_path / "gone"
    missing = dm("instance-metrics", "ns", "x", env={"KUBECONFIG": f"{gone}:{config}"})
    assert missing.returncode == 2
    assert one_line(missing, "instance-metrics") == (
        f"devicemanager instance-metrics: $KUBECONFIG: {gone} is not a file"
    )
    home = tmp_path / "home"
    (home / ".kube").mkdir(parents=True)
    (home / ".kube" / "config").write_text(NO_CONTEXTS)
    from_home = dm("instance-metrics", "ns", "x", env={"KUBECONFIG": "", "HOME": str(home)})
    assert from_home.returncode == 2
    assert one_line(from_home, "instance-metrics") == (
        f"devicemanager instance-metrics: ~/.kube/config: {home / '.kube' / 'config'} "
        "cannot be used: it has no 'contexts' section"
    )


def test_instance_metrics_reads_the_home_kubeconfig_like_kubectl(tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert default_kubeconfig({"HOME": str(home)}) is None
    api = FakeApiServer(tmp_path).start()
    try:
        (home / ".kube").mkdir(parents=True)
        api.kubeconfig(home / ".kube" / "config")
        assert default_kubeconfig({"HOME": str(home)}) == home / ".kube" / "config"
        assert default_kubeconfig({"KUBECONFIG": "/a:/b", "HOME": str(home)}) == Path("/a")
        out = dm("instance-metrics", "ns", "nothing-here", env={"HOME": str(home)})
    finally:
        api.stop()
    # It reached the (fake) API server through ~/.kube/config: the Instance has no pod.
    assert out.returncode == 1
    assert "no pod of Instance ns/nothing-here" in one_line(out, "instance-metrics")


# -- logs ---------------------------------------------------------------------------------------


def test_logs_are_clean_json_under_our_names_and_open_with_the_version(replay: Agent) -> None:
    lines = [json.loads(line) for line in replay.logs().splitlines() if line.startswith("{")]
    assert lines[0]["msg"] == f"devicemanager {__version__} starting"
    assert lines[0]["version"] == __version__ and lines[0]["python"].startswith("3.")
    for line in lines:
        assert "color_message" not in line and "\x1b[" not in json.dumps(line)
        assert line["logger"].startswith(("devicemanager", "instance-accelerator-metrics"))
