"""Flags with environment fallbacks (R-O4): flag beats environment beats default."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from devicemanager.agent.config import SERVE_FLAGS, parse_serve


def test_defaults() -> None:
    s = parse_serve([], env={})
    assert s.secure_port == 32443 and s.bind_address == "0.0.0.0"
    assert s.monitor_period == 15.0
    assert s.backend_timeout == pytest.approx(10.0)
    assert s.liveness_timeout == 150.0
    assert s.manufacturers == ("nvidia",)
    assert s.cert_dir is None and s.replay is None and s.proc_root is None
    assert s.node_name is None


def test_environment_fills_what_flags_leave_out_and_flags_win() -> None:
    env = {
        "DEVICEMANAGER_SECURE_PORT": "9443",
        "KUBERNETES_NODE_NAME": "gpu-7",
        "KUBERNETES_POD_NAMESPACE": "gpustack-system",
        "DEVICEMANAGER_MONITOR_PERIOD": "5",
        "DEVICEMANAGER_PROC_ROOT": "/host/proc",
        "DEVICEMANAGER_VENDOR_LIBRARY": "nvidia=/opt/nv/libnvidia-ml.so.1",
    }
    s = parse_serve(["--secure-port", "10443"], env=env)
    assert s.secure_port == 10443
    assert s.node_name == "gpu-7" and s.pod_namespace == "gpustack-system"
    assert s.monitor_period == 5.0 and s.liveness_timeout == 60.0
    assert s.proc_root == Path("/host/proc")
    assert s.vendor_libraries == {"nvidia": {"": "/opt/nv/libnvidia-ml.so.1"}}


def test_the_downward_api_name_wins_over_our_own_variable() -> None:
    s = parse_serve([], env={"KUBERNETES_NODE_NAME": "a", "DEVICEMANAGER_NODE_NAME": "b"})
    assert s.node_name == "a"


def test_repeated_and_comma_separated_libraries() -> None:
    s = parse_serve(
        [
            "--vendor-library",
            "nvidia=/a.so,amd=/b.so",
            "--vendor-library",
            "ascend=/c.so,hygon.hydmi=/d.so,hygon.rocm_smi=/e.so",
        ],
        env={},
    )
    assert s.vendor_libraries == {
        "nvidia": {"": "/a.so"},
        "amd": {"": "/b.so"},
        "ascend": {"": "/c.so"},
        "hygon": {"hydmi": "/d.so", "rocm_smi": "/e.so"},
    }


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--monitor-period", "soon"], "not a number"),
        (["--monitor-period", "0"], "must be positive"),
        (["--monitor-period", "0.01"], "at least"),
        (["--secure-port", "70000"], "out of range"),
        (["--secure-port", "https"], "not a port"),
        (["--vendor-library", "libnvidia-ml.so"], r"MANUFACTURER\[\.LIBRARY\]=PATH"),
        (["--log-format", "xml"], "json or text"),
        (["--access-control", "rbac"], "off or kubernetes"),
        (["--kubelet-insecure-tls", "maybe"], "true or false"),
        (["--kubelet-port", "99999"], "out of range"),
        (["--http-max-connections", "1"], "at least 2"),
        (["--http-max-header-bytes", "big"], "not a whole number"),
        (["--http-request-timeout", "0"], "must be positive"),
        (["--log-level", "loud"], "--log-level: debug, info, warning, error; got 'loud'"),
    ],
)
def test_bad_values_are_refused_with_the_flag_named(argv: list[str], message: str) -> None:
    with pytest.raises(SystemExit, match=message):
        parse_serve(argv, env={})


def test_every_flag_has_an_environment_variable() -> None:
    for flag in SERVE_FLAGS:
        assert flag.env, flag.name


def test_the_bounds_and_the_kubelet_from_the_environment() -> None:
    s = parse_serve(
        [],
        env={
            "KUBERNETES_HOST_IP": "10.0.0.7",
            "DEVICEMANAGER_KUBELET_INSECURE_TLS": "true",
            "DEVICEMANAGER_HTTP_MAX_CONNECTIONS": "32",
            "DEVICEMANAGER_ACCESS_CONTROL": "kubernetes",
        },
    )
    assert (s.kubelet_host, s.kubelet_port, s.kubelet_insecure_tls) == ("10.0.0.7", 10250, True)
    assert (s.http_max_connections, s.http_request_timeout, s.http_max_headers) == (32, 10.0, 100)
    assert (s.access_control, s.access_review_ttl, s.shutdown_timeout) == ("kubernetes", 30.0, 5.0)
    defaults = parse_serve([], env={})
    assert defaults.access_control == "off" and defaults.kubelet_host is None
    assert defaults.kubelet_insecure_tls is False


def test_a_cert_dir_must_be_a_directory_when_given(tmp_path: Path) -> None:
    missing = tmp_path / "nonexistent"
    with pytest.raises(SystemExit) as refused:
        parse_serve(["--cert-dir", str(missing)], env={})
    assert refused.value.code == f"--cert-dir: {missing} is not a directory"
    a_file = tmp_path / "tls.crt"
    a_file.write_text("")
    with pytest.raises(SystemExit, match="is not a directory"):
        parse_serve([], env={"DEVICEMANAGER_CERT_DIR": str(a_file)})
    assert parse_serve(["--cert-dir", str(tmp_path)], env={}).cert_dir == tmp_path


def test_serve_help_names_every_manufacturer() -> None:
    """`devicemanager serve --help` offers each shipped backend by name, from the registry
    itself, so a manufacturer added to BACKENDS is offered without another edit (R-O4)."""
    import contextlib
    import io

    from devicemanager.backend import BACKENDS
    from devicemanager.cli import main

    assert set(BACKENDS) == {"nvidia", "amd", "hygon", "metax", "ascend", "thead"}
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as exit_:
        main(["serve", "--help"])
    assert exit_.value.code == 0
    # argparse wraps help text to the terminal: compare with whitespace folded.
    help_text = " ".join(out.getvalue().split())
    (manufacturer,) = [f for f in SERVE_FLAGS if f.name == "--manufacturer"]
    for name in BACKENDS:
        assert re.search(rf"\b{name}\b", manufacturer.help), name
    offered = help_text.split("--manufacturer MANUFACTURER", 2)[-1].split("--replay", 1)[0]
    assert all(re.search(rf"\b{name}\b", offered) for name in BACKENDS), offered


def test_a_log_level_in_any_case_and_whether_manufacturer_was_given() -> None:
    """(R-O4) --log-level WARNING is warning; --manufacturer from the flag or its variable is
    told from the default, which only a given one must agree with --replay's scenario."""
    assert parse_serve(["--log-level", "WARNING"], env={}).log_level == "warning"
    default = parse_serve([], env={})
    assert default.manufacturers == ("nvidia",) and not default.manufacturers_given
    flag = parse_serve(["--manufacturer", "nvidia"], env={})
    assert flag.manufacturers == ("nvidia",) and flag.manufacturers_given
    env = parse_serve([], env={"DEVICEMANAGER_MANUFACTURER": "amd,hygon"})
    assert env.manufacturers == ("amd", "hygon") and env.manufacturers_given
