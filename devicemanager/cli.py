"""The `devicemanager` command: serve, snapshot, metrics, whois, record, crosscheck,
instance-metrics, summarize.

One error style for every command: a one-line message that names what to fix, no traceback
unless `--debug`, and one set of exit codes:

    0  ok
    1  the thing asked about is absent or unhealthy (a PID in no pod, an Instance with no pod,
       a vendor library not on this node)
    2  usage: a flag, argument or file given is wrong
    3  cannot reach or read: the agent, the cluster or a source did not answer as it should

`--debug` adds the traceback of an unexpected failure and keeps its exit code. A standard output
closed by its reader (`devicemanager snapshot | head -1`) ends the command quietly, exit 0.
`serve` ended by SIGTERM or SIGINT stops cleanly and exits 0.

Every input a command reads is bounded in size (files, tokens, CAs, answers) and every request
in time, so a wrong argument (`--cgroup-file /dev/zero`) is an error, not a process that grows
until the OOM killer ends it.
"""

from __future__ import annotations

import argparse
import gc
import io
import json
import math
import os
import platform
import re
import select
import stat
import sys
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TextIO, cast

from devicemanager import __version__
from devicemanager.agent.config import (
    Settings,
    add_serve_flags,
    default_service_account_dir,
    settings_from,
)
from devicemanager.backend import (
    BACKENDS,
    BackendUnavailable,
    create_backend,
    installed_version,
    sdk_versions,
)
from devicemanager.model import ReadRequest

if TYPE_CHECKING:
    from devicemanager.serve.tls import Minting

OK, ABSENT, USAGE, UNREACHABLE = 0, 1, 2, 3

MAX_CGROUP_BYTES = 64 * 1024  # what the agent reads of /proc/<pid>/cgroup (node/procfs.py)
MAX_PODS_BYTES = 64 << 20  # a node's PodList is a few MiB at most
MAX_KUBECONFIG_BYTES = 16 << 20


class CliError(Exception):
    """A failure the command reports in one line, with its exit code."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def version() -> str:
    """`devicemanager --version`: ours, the interpreter's and each vendor SDK that is installed."""
    parts = [f"Python {platform.python_version()}"]
    parts += sdk_versions(sorted(BACKENDS))
    return f"devicemanager {__version__} ({'; '.join(parts)})"


# -- serve ------------------------------------------------------------------------------------


def _cmd_serve(args: argparse.Namespace) -> int:
    try:
        settings = settings_from(args)
    except SystemExit as exc:  # the settings parser names the flag and what is wrong with it
        raise CliError(str(exc.code), USAGE) from None
    # What the start builds lives as long as the process and makes next to no garbage: the
    # cyclic collector's passes over the growing heap while the agent imports itself cost 15
    # to 35 ms of the time to ready. The argument parser's cycles go now, by a full pass (about
    # 2 ms over the heap the parser and cli have made: with the serve flags issue 42 added, the
    # parser's cycles already reach the oldest generation, which a pass over the young ones
    # left behind); then the collector is off until the first round, where serve freezes what
    # was built and turns it back on (wiring.settle_interpreter, tests/test_start).
    gc.collect()
    gc.disable()
    try:
        # The self-signed pair's child starts now and imports cryptography on another core
        # while this process imports the agent; serve names the hosts once the node is known.
        minting = _early_minting(settings)
        from devicemanager.agent.wiring import serve

        try:
            return serve(settings, minting)
        except (ValueError, ImportError) as exc:
            # A wrong scenario, manufacturer, library name or --cert-dir: say which.
            raise CliError(str(exc), USAGE) from None
        except OSError as exc:
            raise CliError(f"{type(exc).__name__}: {exc}", UNREACHABLE) from None
    finally:
        gc.enable()


def _early_minting(settings: Settings) -> Minting | None:
    """The self-signed pair's child, started before the names it is for are known; None with
    --cert-dir, or when it could not start (serve mints then, and says why if it cannot)."""
    if settings.cert_dir is not None:
        return None
    from devicemanager.serve.tls import Minting

    try:
        return Minting()
    except RuntimeError:
        return None


# -- snapshot and metrics: a running agent -------------------------------------------------------


def _client_call(fn: Callable[[], Any]) -> Any:
    from devicemanager.serve.client import FetchError

    try:
        return fn()
    except FetchError as exc:
        raise CliError(str(exc), USAGE if exc.usage else UNREACHABLE) from None


def default_token_file(environ: Mapping[str, str] = os.environ) -> Path:
    """The pod's own service-account token: where `serve --service-account-dir` (and its
    variable) says the account is mounted, the same file the agent's reviewer reads."""
    return default_service_account_dir(environ) / "token"


def _read_token(path: Path, flag: str) -> str:
    from devicemanager.serve.client import MAX_TOKEN_BYTES

    data = _small_file(flag, path, MAX_TOKEN_BYTES, "a bearer token")
    token = data.decode("ascii", "replace").strip()
    if not token or any(c.isspace() for c in token) or "\ufffd" in token:
        raise CliError(f"{flag}: {path} holds no bearer token", USAGE)
    return token


class Token:
    """The bearer token a command sends to the agent (for --access-control=kubernetes): the
    file --token-file names, sent wherever the command is pointed over HTTPS; by default the
    pod's own service-account token, when it is there, and sent only where the agent runs
    beside the command (a loopback address) or to an agent verified with --cacert;
    `--token-file ''` sends none."""

    def __init__(self, token_file: str | None, environ: Mapping[str, str] = os.environ) -> None:
        self.explicit = bool(token_file)
        self.path: Path | None
        if token_file is None:
            self.path = default_token_file(environ)
        else:
            self.path = Path(token_file) if token_file else None
        self._value: str | None = None

    def value(self) -> str | None:
        if self.path is None:
            return None
        if self._value is None:
            if not self.explicit and not self.path.is_file():
                return None  # not in a pod: no token, and none is needed without access control
            try:
                self._value = _read_token(self.path, "--token-file")
            except CliError:
                if self.explicit:
                    raise
                return None  # the pod's token unreadable: the agent's 401 says what is missing
        return self._value

    def for_url(self, url: str, verified: bool) -> str | None:
        from devicemanager.serve.client import token_goes_to

        if self.explicit:
            if not url.lower().startswith("https://"):
                raise CliError(f"--token-file: sent over https only, not to {url}", USAGE)
            return self.value()
        return self.value() if token_goes_to(url, verified) else None


def _token(args: argparse.Namespace, url: str) -> str | None:
    return Token(args.token_file).for_url(url, args.cacert is not None)


def _cmd_snapshot(args: argparse.Namespace) -> int:
    from devicemanager.serve import client

    doc = _client_call(
        lambda: client.fetch_snapshot(args.url, args.cacert, args.timeout, _token(args, args.url))
    )
    if args.json:
        print(json.dumps(doc, indent=2))
        return OK
    held = None
    given = args.metrics_url is not None
    metrics_url = args.metrics_url if given else client.metrics_url_beside(args.url)
    if metrics_url:
        # The grants each Instance holds are in /metrics, beside the cards' snapshot; without
        # them the cards are still worth printing, unless the operator named the URL: then
        # it failing, like an answer that is not Prometheus text, is the command failing.
        token = _token(args, metrics_url)
        try:
            text = client.fetch_metrics(metrics_url, args.cacert, args.timeout, token)
        except client.FetchError as exc:
            if given or isinstance(exc, client.NotServed):
                code = USAGE if exc.usage else UNREACHABLE
                raise CliError(f"--metrics-url: {exc}", code) from None
            print(f"devicemanager snapshot: no grants table: {exc}", file=sys.stderr)
        else:
            held = client.holdings(text)
    print(client.render_snapshot(doc, held))
    return OK


def _cmd_metrics(args: argparse.Namespace) -> int:
    from devicemanager.serve import client

    text = _client_call(
        lambda: client.fetch_metrics(args.url, args.cacert, args.timeout, _token(args, args.url))
    )
    sys.stdout.write(text)
    return OK


# -- record -----------------------------------------------------------------------------------


def _partition(value: str) -> tuple[str, str]:
    parent, sep, partition = value.partition(":")
    if not sep or not parent or not partition:
        raise argparse.ArgumentTypeError("expected PARENT_ID:PARTITION_ID")
    return parent, partition


def _library(value: str) -> tuple[str, str]:
    name, sep, path = value.rpartition("=")
    if not path:
        raise argparse.ArgumentTypeError("expected [LIBRARY=]PATH")
    return (name if sep else ""), path


# Between record's two reads: longer than GPM's 100 ms minimum, so a card's and a partition's
# GPM figures compare the second read's sample with the first's (issue 41).
RECORD_PARTITION_GAP = 0.25


def provenance(manufacturer: str, libraries: Mapping[str, str], kind: str | None) -> dict[str, str]:
    """What a recording may claim to be. Only a shipped backend on the vendor library the
    system resolves is taken for hardware: a backend named `module:Class` or a library given
    by path is a stand-in (the tests' fake libraries) until the operator says otherwise."""
    stand_in = ":" in manufacturer or bool(libraries)
    out = {"kind": kind or ("synthetic" if stand_in else "recorded")}
    if stand_in:
        given = " ".join(f"--library {k + '=' if k else ''}{v}" for k, v in libraries.items())
        out["source"] = f"devicemanager record {manufacturer} {given}".rstrip()
    return out


def record(
    manufacturer: str,
    libraries: Mapping[str, str],
    processes: bool,
    partitions: Sequence[tuple[str, str]],
    kind: str | None = None,
) -> dict[str, Any]:
    """What a backend's read() returns, wrapped with where and when it was recorded."""
    backend = create_backend(manufacturer, libraries)
    backend.open()
    try:
        payload = backend.read(ReadRequest(partition_ids=frozenset(partitions)))
        # GPM (a partition's compute, R-X5; a whole card's activity, issue 41) compares a read's
        # sample with the previous read's, at least 100 ms older: the second read is the one
        # kept, so a recording carries the figures and not only `no_baseline`.
        time.sleep(RECORD_PARTITION_GAP)
        # The second read with every card carved, so the fixture holds per-process answers.
        ids = frozenset(c.id for c in backend.parse(payload).cards) if processes else None
        payload = backend.read(
            ReadRequest(carved_device_ids=ids or frozenset(), partition_ids=frozenset(partitions))
        )
        reading = backend.parse(payload)
        # The manufacturer's tool, right after the read, kept beside it (`crosscheck --payload`
        # holds the recording to it); not beside a stand-in library, which no tool describes.
        tool = None
        if ":" not in manufacturer and not libraries:
            from devicemanager.crosscheck.shell import tool_answers_for_record

            tool = tool_answers_for_record(backend.manufacturer)
    finally:
        backend.close()
    sdk: str | None = getattr(backend, "sdk", None)  # a Python binding's distribution, if any
    sdk_version = installed_version(sdk) if sdk else None
    meta: dict[str, Any] = {
        **provenance(manufacturer, libraries, kind),
        "manufacturer": backend.manufacturer,
        "recordedAt": datetime.now(UTC).isoformat(timespec="seconds"),
        "driver": reading.driver_version,
        "sdk": sdk_version,
        "cards": sorted({c.name or "?" for c in reading.cards}),
        "machine": platform.machine(),
    }
    if tool is not None:
        meta["tool"] = tool
    return {"meta": meta, "payload": payload}


def _cmd_record(args: argparse.Namespace) -> int:
    try:
        doc = record(
            args.vendor,
            dict(args.library or []),
            not args.no_processes,
            args.partition or [],
            args.kind,
        )
    except BackendUnavailable as exc:
        raise CliError(f"{args.vendor} is not available here: {exc}", ABSENT) from None
    except (ValueError, ImportError) as exc:
        raise CliError(str(exc), USAGE) from None
    text = json.dumps(doc, indent=2, sort_keys=True) + "\n"
    if args.output:
        try:
            Path(args.output).write_text(text)
        except OSError as exc:
            raise CliError(f"--output: {exc.strerror}: {args.output}", USAGE) from None
    else:
        sys.stdout.write(text)
    return OK


# -- crosscheck -------------------------------------------------------------------------------


def _cmd_crosscheck(args: argparse.Namespace) -> int:
    from devicemanager.crosscheck.shell import CrosscheckError, command

    try:
        return command(args, lambda url: _token(args, url))
    except CrosscheckError as exc:
        raise CliError(str(exc), exc.code) from None


# -- whois ------------------------------------------------------------------------------------


def _small_file(flag: str, path: Path, limit: int, what: str) -> bytes:
    from devicemanager.serve.client import FetchError, read_bounded

    try:
        return read_bounded(flag, path, limit, what)
    except FetchError as exc:
        raise CliError(str(exc), USAGE) from None


def _pods(path: Path | None) -> Any:
    from devicemanager.node.pods import PodIndex
    from devicemanager.serve.client import json_document

    if path is None:
        return None
    data = _small_file("--pods", path, MAX_PODS_BYTES, "a node's PodList")
    try:
        return PodIndex.from_list(json_document(data))
    except (ValueError, TypeError, AttributeError):
        raise CliError(f"--pods: {path} is not a JSON PodList", USAGE) from None


def whois(
    pid: int | None, cgroup_file: Path | None, proc_root: Path, pods_file: Path | None
) -> dict[str, Any]:
    """One PID (or a saved cgroup file) resolved as the agent would, as one JSON object.

    `reason` is null when the process was placed in a pod; `no_such_process` when /proc has no
    such PID at all (as opposed to `exited`, a process that ended while it was being read)."""
    from devicemanager.node import cgroup
    from devicemanager.node.attribution import Identified, Resolver, place

    index = _pods(pods_file)
    if cgroup_file is not None:
        data = _small_file("--cgroup-file", cgroup_file, MAX_CGROUP_BYTES, "a cgroup file")
        text = data.decode(errors="replace")
        identified = Identified(cgroup.parse(text))
        doc: dict[str, Any] = {}
    else:
        assert pid is not None
        if not proc_root.is_dir():
            raise CliError(f"--proc-root: {proc_root} is not a directory", USAGE)
        if not (proc_root / str(pid)).exists():
            return {"pid": pid, "pod_uid": None, "container_id": None, "runtime": None,
                    "reason": "no_such_process"}  # fmt: skip
        _proc_files_are_files(proc_root, pid)
        identified = Resolver(proc_root).identify(pid)
        doc = {"pid": pid}
    identity = identified.identity
    doc.update(
        pod_uid=identity.pod_uid if identity else None,
        container_id=identity.container_id if identity else None,
        runtime=identity.runtime if identity else None,
    )
    reason = identified.reason or (identity.reason if identity else None)
    if index is not None and reason is None:
        resolution = place(identified, index)
        reason = resolution.reason
        if resolution.placement is not None:
            pod = index.get(resolution.placement.pod_uid)
            doc.update(
                namespace=pod.namespace if pod else None,
                pod=pod.name if pod else None,
                container=resolution.placement.container,
            )
    doc["reason"] = None if reason is None else reason.value
    return doc


def _proc_files_are_files(proc_root: Path, pid: int) -> None:
    """The files whois reads under --proc-root are files (the kernel's are regular files): a
    FIFO there would block the read until a writer came, a device would read without end. The
    agent's own reads need no such check: its /proc is the kernel's."""
    for name in ("stat", "cgroup"):
        path = proc_root / str(pid) / name
        try:
            mode = path.stat().st_mode
        except OSError:
            continue  # absent or unreadable: the read says so, as a reason
        if not stat.S_ISREG(mode):
            raise CliError(
                f"--proc-root: {path} is not a regular file ({_kind(mode)}): give the host's "
                "/proc, or a copy of it made of files",
                USAGE,
            )


def _kind(mode: int) -> str:
    for test, kind in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISDIR, "a directory")):  # fmt: skip
        if test(mode):
            return kind
    return "not a file"


def _cmd_whois(args: argparse.Namespace) -> int:
    if args.pid is None and args.cgroup_file is None:
        raise CliError("give a PID or --cgroup-file (one of them)", USAGE)
    if args.pid is not None and args.cgroup_file is not None:
        raise CliError("give a PID or --cgroup-file, not both", USAGE)
    doc = whois(args.pid, args.cgroup_file, args.proc_root, args.pods)
    print(json.dumps(doc, indent=2))
    return OK if doc["reason"] is None else ABSENT


def _pid(value: str) -> int:
    try:
        pid = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a PID") from None
    if pid <= 0:
        raise argparse.ArgumentTypeError(f"{value!r} is not a PID (PIDs are positive)")
    return pid


# -- instance-metrics -----------------------------------------------------------------------------


def kubeconfig_from(environ: Mapping[str, str] = os.environ) -> tuple[Path, str] | None:
    """As kubectl: $KUBECONFIG (its first file), else ~/.kube/config where it exists; with
    where it came from, for the messages that name it."""
    if environ.get("KUBECONFIG"):
        return Path(environ["KUBECONFIG"].split(os.pathsep)[0]), "$KUBECONFIG"
    home = Path(environ.get("HOME", "~")).expanduser() / ".kube" / "config"
    return (home, "~/.kube/config") if home.is_file() else None


def default_kubeconfig(environ: Mapping[str, str] = os.environ) -> Path | None:
    """As kubectl: $KUBECONFIG (its first file), else ~/.kube/config where it exists."""
    found = kubeconfig_from(environ)
    return None if found is None else found[0]


def _cmd_instance_metrics(args: argparse.Namespace) -> int:
    from devicemanager.figures.figures import InstanceMetricsUnavailable, metrics_json
    from devicemanager.kube.client import KubeClient, KubeError, config_from

    # The file and what to call it: the flag when given, else where kubectl would look.
    given = (args.kubeconfig, "--kubeconfig") if args.kubeconfig is not None else None
    kubeconfig, label = given or kubeconfig_from() or (None, "--kubeconfig")
    if kubeconfig is not None and not kubeconfig.is_file():
        raise CliError(f"{label}: {kubeconfig} is not a file", USAGE)
    if kubeconfig is not None and kubeconfig.stat().st_size > MAX_KUBECONFIG_BYTES:
        raise CliError(
            f"{label}: {kubeconfig} is larger than {MAX_KUBECONFIG_BYTES >> 20} MiB: "
            "not a kubeconfig",
            USAGE,
        )
    try:
        config = config_from(kubeconfig, args.service_account_dir)
        client = KubeClient(config) if config is not None else None
    except KubeError as exc:
        raise CliError(f"{label}: {kubeconfig}: {exc}", USAGE) from None
    except KeyError as exc:  # a section the file names and does not have (kube/config.py)
        raise CliError(
            f"{label}: {kubeconfig} cannot be used: it has no {exc.args[0]!r} section",
            USAGE,
        ) from None
    except Exception as exc:  # a file that is neither JSON nor YAML, or YAML of no kubeconfig
        raise CliError(f"{label}: {kubeconfig} cannot be used: {exc}", USAGE) from None
    if client is None:
        raise CliError("no cluster: not in a pod, no --kubeconfig and no ~/.kube/config", USAGE)
    from devicemanager.kube.sampler import InstanceSampler

    token = Token(
        args.token_file,
        {"DEVICEMANAGER_SERVICE_ACCOUNT_DIR": str(args.service_account_dir)},
    )

    def token_for(url: str) -> str | None:
        # The agents the API server names (their pod IPs) get the pod's own token; a
        # --snapshot-url only by the rule of `snapshot` (loopback, or a --token-file).
        if args.snapshot_url is None or token.explicit:
            return token.value() if url.startswith("https://") else None
        return token.for_url(url, verified=False)

    if token.explicit:
        token.value()  # a --token-file that cannot be used is said before anything is asked
    sampler = InstanceSampler(
        client,
        agent_namespace=args.agent_namespace,
        snapshot_url=args.snapshot_url,
        token=token_for,
    )
    try:
        sample = sampler.sample(args.namespace, args.name)
    except LookupError as exc:
        raise CliError(str(exc), ABSENT) from None
    except InstanceMetricsUnavailable as exc:
        raise CliError(f"unavailable: {exc}", UNREACHABLE) from None
    except KubeError as exc:
        raise CliError(str(exc), UNREACHABLE) from None
    finally:
        client.close()
    print(json.dumps(metrics_json(sample), indent=2))
    return OK


# -- the parser -------------------------------------------------------------------------------


class _Version(argparse.Action):
    """--version, worked out only when asked (it looks up the installed vendor SDKs)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, help="print the version and exit")

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> NoReturn:
        print(version())
        parser.exit()


def _common() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--version", action=_Version)
    common.add_argument(
        "--debug", action="store_true", help="show the traceback of an unexpected failure"
    )
    return common


def _agent_flags(parser: argparse.ArgumentParser, default_url: str, env: str) -> None:
    parser.add_argument(
        "--url", default=os.environ.get(env, default_url), help=f"(default: {default_url}) [${env}]"
    )
    parser.add_argument(
        "--cacert", help="verify the agent against this CA (default: no verification)"
    )
    parser.add_argument(
        "--timeout",
        type=_positive_float,
        default=10.0,
        help="seconds for the whole request (default: 10)",
    )
    _token_flag(parser)


def _token_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--token-file",
        default=os.environ.get("DEVICEMANAGER_TOKEN_FILE"),
        help="send this file's bearer token, for --access-control=kubernetes (default: the "
        "pod's service-account token, $DEVICEMANAGER_SERVICE_ACCOUNT_DIR/token or "
        f"{default_token_file({})}, sent only to a loopback address or an agent verified "
        "with --cacert; '' sends none) [$DEVICEMANAGER_TOKEN_FILE]",
    )


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value <= 0:
        raise argparse.ArgumentTypeError("must be positive")
    return value


MAX_TIMEOUT = 86400.0  # seconds: a day; a socket's timeout cannot hold much more (inf cannot)


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0:
        raise argparse.ArgumentTypeError("must be positive")
    if not value <= MAX_TIMEOUT:  # inf and nan (nan is not > 0 either)
        raise argparse.ArgumentTypeError(f"must be at most {MAX_TIMEOUT:g} seconds")
    return value


def _percent(text: str) -> float:
    """A threshold in percent: a finite number from 0 to 100."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 <= value <= 100:  # nan is neither
        raise argparse.ArgumentTypeError("must be a percent from 0 to 100")
    return value


_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def _idle(args: argparse.Namespace) -> Any:
    """`--window`'s idle thresholds, each flag's or its default."""
    from devicemanager.report.idle import DEFAULT_THRESHOLDS, Thresholds

    return Thresholds(
        DEFAULT_THRESHOLDS.sm_activity if args.idle_sm_activity is None else args.idle_sm_activity,
        DEFAULT_THRESHOLDS.busy_time if args.idle_busy_time is None else args.idle_busy_time,
    )


def _window(text: str) -> float:
    """A Prometheus duration (`90s`, `30m`, `1h`, `1h30m`, `7d`) in seconds, 1 s at least."""
    import re

    parts = re.findall(r"(\d+)([smhdw])", text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration (30m, 1h, 1h30m, 7d)")
    seconds = float(sum(int(n) * _DURATION_UNITS[u] for n, u in parts))
    if seconds < 1:
        raise argparse.ArgumentTypeError("must be 1s or longer")
    return seconds


def _at(text: str) -> float:
    """Unix seconds, or an RFC 3339 time (`2026-12-03T12:00:00Z`), as Prometheus's `time`."""
    import datetime

    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        if not math.isfinite(seconds):
            raise argparse.ArgumentTypeError(f"{text!r} is not a moment (Unix seconds)")
        return seconds
    try:
        when = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not Unix seconds or an RFC 3339 time"
        ) from None
    if when.tzinfo is None:
        raise argparse.ArgumentTypeError(f"{text!r} has no time zone (end it in Z or +00:00)")
    return when.timestamp()


def _pair(text: str, sep: str, what: str) -> tuple[str, str]:
    name, found, value = text.partition(sep)
    if not found or not name.strip():
        raise argparse.ArgumentTypeError(f"{text!r} is not {what}")
    return name.strip(), value.strip() if sep == ":" else value


def _label_matcher(text: str) -> tuple[str, str]:
    return _pair(text, "=", "NAME=VALUE")


def _header(text: str) -> tuple[str, str]:
    return _pair(text, ":", "'Name: value'")


def _summarize_token(args: argparse.Namespace) -> str | None:
    if args.bearer_token is not None and args.bearer_token_file is not None:
        raise CliError("--bearer-token and --bearer-token-file: give one", USAGE)
    if args.bearer_token is not None:
        return str(args.bearer_token).strip() or None
    if args.bearer_token_file is None:
        return None
    from devicemanager.serve.client import MAX_TOKEN_BYTES, read_bounded

    data: bytes = _client_call(
        lambda: read_bounded(
            "--bearer-token-file", args.bearer_token_file, MAX_TOKEN_BYTES, "a bearer token"
        )
    )
    token = data.decode("utf-8", "replace").strip()
    if not token:
        raise CliError(f"--bearer-token-file: {args.bearer_token_file} is empty", USAGE)
    return token


def _cmd_summarize(args: argparse.Namespace) -> int:
    from devicemanager.report import summarize, to_json, to_text
    from devicemanager.report.idle import IdleReport
    from devicemanager.report.idle import to_text as idle_text
    from devicemanager.report.parse import parse
    from devicemanager.report.prometheus_api import Query, read_prometheus, read_window
    from devicemanager.report.selection import Selection, select
    from devicemanager.report.sources import SourceError, read_source

    selection = Selection(node=args.node, namespace=args.namespace, pod=args.pod)
    live = bool(args.live or args.kubeconfig or args.context or args.list_contexts)
    if not live:
        for flag, given in _cluster_flags(args):
            if given is not None:
                raise CliError(
                    f"{flag} is for the cluster (--live, --kubeconfig, --context)", USAGE
                )
    elif args.prometheus is not None or args.sources:
        raise CliError(
            "--live, --kubeconfig and --context read the cluster instead of SOURCEs or "
            "--prometheus: give one",
            USAGE,
        )
    elif args.cacert is not None:
        raise CliError(
            "--cacert is for SOURCEs and --prometheus: the kubeconfig names the CA", USAGE
        )
    window: IdleReport | None = None
    if args.prometheus is None:
        for flag, given in (
            ("--bearer-token", args.bearer_token),
            ("--bearer-token-file", args.bearer_token_file),
            ("--label", args.label),
            ("--header", args.header),
            ("--window", args.window),
            ("--at", args.at),
            ("--idle-sm-activity", args.idle_sm_activity),
            ("--idle-busy-time", args.idle_busy_time),
        ):
            if given is not None:
                raise CliError(f"{flag} is for --prometheus", USAGE)
    elif args.sources:
        raise CliError("--prometheus reads Prometheus's API instead of SOURCEs: give one", USAGE)
    if args.cacert is not None:
        from devicemanager.serve.client import ca_context

        _client_call(lambda: ca_context("--cacert", args.cacert))  # a file with no CA: exit 2
    if live:
        return _summarize_cluster(args, selection)
    if args.prometheus is not None:
        if not args.prometheus.startswith(("http://", "https://")):
            raise CliError(f"--prometheus: {args.prometheus} is not an http(s):// URL", USAGE)
        query = Query(
            url=args.prometheus,
            token=_summarize_token(args),
            cacert=args.cacert,
            timeout=args.timeout,
            max_bytes=args.max_bytes,
            max_series=args.max_series,
            labels=tuple(args.label or ()),
            headers=tuple(args.header or ()),
            at=args.at,
        )
        try:
            parsed = read_prometheus(query, selection)
            if args.window is not None:
                window = read_window(query, args.window, selection, thresholds=_idle(args))
        except SourceError as exc:
            raise CliError(str(exc), UNREACHABLE) from None
    else:
        specs = args.sources or ["-"]
        if specs.count("-") > 1:
            raise CliError("standard input (-) can be read once", USAGE)
        texts: list[tuple[str, str]] = []
        for spec in specs:
            try:
                texts.append(
                    read_source(
                        spec,
                        sys.stdin.buffer,
                        cacert=args.cacert,
                        timeout=args.timeout,
                        max_bytes=args.max_bytes,
                    )
                )
            except SourceError as exc:
                raise CliError(str(exc), UNREACHABLE) from None
        parsed = select([parse(name, text) for name, text in texts], selection)
    report = summarize(parsed)
    if window is None:
        sys.stdout.write(to_json(report) if args.format == "json" else to_text(report))
    elif args.format == "json":
        doc = {**report.to_json(), "window": window.to_json()}
        sys.stdout.write(json.dumps(doc, indent=2, ensure_ascii=False, allow_nan=False) + "\n")
    else:
        sys.stdout.write(to_text(report) + idle_text(window))
    return OK


def _cluster_flags(args: argparse.Namespace) -> list[tuple[str, Any]]:
    return [
        ("--hami-namespace", args.hami_namespace),
        ("--hami-scheduler-service", args.hami_scheduler_service),
        ("--hami-monitor-selector", args.hami_monitor_selector),
        ("--hami-monitor-port", args.hami_monitor_port),
        ("--agent-namespace", args.agent_namespace),
        ("--agent-selector", args.agent_selector),
        ("--agent-port", args.agent_port),
        ("--max-pods", args.max_pods),
    ]


def _summarize_cluster(args: argparse.Namespace, selection: Any) -> int:
    """`summarize --live/--kubeconfig/--context` (R-X9): the cluster's sources through the API
    server; exit 3 only when none answered."""
    from devicemanager.report import cluster, summarize, to_json, to_text
    from devicemanager.report.sources import SourceError

    try:
        config, where = cluster.load_kubeconfig(
            args.kubeconfig, service_account=default_service_account_dir()
        )
        if args.list_contexts:
            found = cluster.contexts(config)
            if args.format == "json":
                print(json.dumps(found, indent=2))
            else:
                rows: list[tuple[str, ...]] = [("CURRENT", "NAME", "CLUSTER", "USER", "NAMESPACE")]
                rows += [
                    tuple(c[k] or "" for k in ("current", "name", "cluster", "user", "namespace"))
                    for c in found
                ]
                widths = [max(len(r[i]) for r in rows) for i in range(5)]
                for row in rows:
                    print("   ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())
            return OK
        chosen = cluster.single(config, args.context, where)
        client = cluster.connect(chosen, args.timeout)
    except cluster.ConfigError as exc:
        raise CliError(str(exc), USAGE) from None

    def given(value: str | None, default: str | None) -> str | None:
        return default if value is None else (value or None)  # "": not asked

    settings = cluster.Settings(
        hami_namespace=args.hami_namespace or cluster.HAMI_NAMESPACE,
        scheduler=given(args.hami_scheduler_service, cluster.SCHEDULER_SERVICE),
        monitor_selector=given(args.hami_monitor_selector, cluster.MONITOR_SELECTOR),
        monitor_port=args.hami_monitor_port or cluster.MONITOR_PORT,
        agent_namespace=args.agent_namespace or cluster.AGENT_NAMESPACE,
        agent_selector=given(args.agent_selector, cluster.AGENT_SELECTOR),
        agent_port=args.agent_port or cluster.AGENT_PORT,
        node=args.node,
        timeout=args.timeout,
        max_bytes=args.max_bytes,
        max_pods=args.max_pods or cluster.MAX_PODS,
    )
    try:
        gathered = cluster.gather(client, settings, selection)
    except SourceError as exc:
        raise CliError(f"{chosen.cluster.server}: {exc}", UNREACHABLE) from None
    finally:
        client.close()
    if gathered.answered == 0:
        said = "; ".join(f"{a.target.name}: {a.error}" for a in gathered.answers[:3])
        more = len(gathered.answers) - 3
        said += f"; and {more} more" if more > 0 else ""
        raise CliError(
            f"context {chosen.context_name!r}: no source answered ({said or 'none found'})",
            UNREACHABLE,
        )
    report = cluster.with_sources(summarize(gathered.parsed), gathered.answers)
    sys.stdout.write(to_json(report) if args.format == "json" else to_text(report))
    return OK


def build_parser() -> argparse.ArgumentParser:
    from devicemanager.serve import METRICS_URL, SNAPSHOT_URL  # not the client: httpx

    common = _common()
    parser = argparse.ArgumentParser(
        prog="devicemanager",
        description="Measure what every pod uses of the accelerators it was granted.",
        parents=[common],
        epilog="exit codes: 0 ok; 1 absent or unhealthy; 2 usage; 3 cannot reach or read",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser(
        "serve", parents=[common], help="run the agent: monitor loop and HTTPS server"
    )
    add_serve_flags(serve, os.environ)
    serve.set_defaults(func=_cmd_serve)

    snap = sub.add_parser(
        "snapshot",
        parents=[common],
        help="print a running agent's snapshot: cards, and the grants each Instance holds",
    )
    _agent_flags(snap, SNAPSHOT_URL, "DEVICEMANAGER_SNAPSHOT_URL")
    snap.add_argument(
        "--metrics-url",
        default=None,
        help="where the per-Instance series are read for the grants table ('' to skip) "
        "(default: /metrics beside --url)",
    )
    snap.add_argument(
        "--json", action="store_true", help="print the snapshot document, indented, for scripts"
    )
    snap.set_defaults(func=_cmd_snapshot)

    metrics = sub.add_parser(
        "metrics", parents=[common], help="print a running agent's /metrics (no curl needed)"
    )
    _agent_flags(metrics, METRICS_URL, "DEVICEMANAGER_METRICS_URL")
    metrics.set_defaults(func=_cmd_metrics)

    who = sub.add_parser(
        "whois", parents=[common], help="which pod and container a host PID belongs to"
    )
    who.add_argument(
        "pid", nargs="?", type=_pid, help="a host PID, as the vendor library reports it"
    )
    who.add_argument("--cgroup-file", type=Path, help="parse a saved /proc/<pid>/cgroup instead")
    who.add_argument(
        "--proc-root",
        type=Path,
        default=Path(os.environ.get("DEVICEMANAGER_PROC_ROOT", "/proc")),
        help="the /proc to read (default: /proc) [$DEVICEMANAGER_PROC_ROOT]",
    )
    who.add_argument(
        "--pods",
        type=Path,
        help="the node's pods as a PodList (kubectl get pods -o json), to name "
        "the pod and container and tell unknown pods and containers",
    )
    who.set_defaults(func=_cmd_whois)

    rec = sub.add_parser(
        "record", parents=[common], help="write what a real backend reads, as a replay fixture"
    )
    rec.add_argument("vendor", help="manufacturer (nvidia, amd, …) or module:Class")
    rec.add_argument("--output", "-o", help="file to write (default: standard output)")
    rec.add_argument(
        "--library",
        action="append",
        type=_library,
        metavar="[LIBRARY=]PATH",
        help="a vendor library (or its directory) to load; LIBRARY names one of the backend's "
        "libraries (default: its main one); repeatable",
    )
    rec.add_argument(
        "--kind",
        choices=["recorded", "synthetic"],
        help="what meta.kind claims (default: recorded for a shipped backend on the library "
        "the system resolves; synthetic for --library or a module:Class backend)",
    )
    rec.add_argument(
        "--no-processes",
        action="store_true",
        help="skip the per-process queries (by default every card is asked)",
    )
    rec.add_argument(
        "--partition",
        action="append",
        type=_partition,
        metavar="PARENT:ID",
        help="also read this partition (e.g. GPU-…:MIG-…); repeatable",
    )
    rec.set_defaults(func=_cmd_record)

    from devicemanager.crosscheck.flags import add_flags as add_crosscheck_flags

    cross = sub.add_parser(
        "crosscheck",
        parents=[common],
        help="compare each figure the agent publishes with the manufacturer's own tool "
        "(nvidia-smi, amd-smi, npu-smi, mx-smi, hy-smi, ppu-smi)",
    )
    add_crosscheck_flags(cross)
    _token_flag(cross)
    cross.set_defaults(func=_cmd_crosscheck)

    im = sub.add_parser(
        "instance-metrics", parents=[common], help="one Instance's sample, as the worker serves it"
    )
    im.add_argument("namespace")
    im.add_argument("name", help="the GPUStack Instance's name, or a plain pod's")
    im.add_argument(
        "--kubeconfig",
        type=Path,
        help="(default: $KUBECONFIG, else ~/.kube/config; in a pod the service account)",
    )
    im.add_argument(
        "--service-account-dir",
        type=Path,
        default=default_service_account_dir(),
        help="the pod's service account, used in a pod (default: "
        f"{default_service_account_dir({})}) [$DEVICEMANAGER_SERVICE_ACCOUNT_DIR]",
    )
    _token_flag(im)
    im.add_argument(
        "--agent-namespace",
        default=os.environ.get("KUBERNETES_POD_NAMESPACE", "gpustack-system"),
        help="where the Device Managers run (their snapshots are read)",
    )
    im.add_argument("--snapshot-url", help="read this snapshot instead of finding the agents")
    im.set_defaults(func=_cmd_instance_metrics)

    summ = sub.add_parser(
        "summarize",
        parents=[common],
        help="summarize HAMi's and this agent's Prometheus text: who holds and uses what",
    )
    summ.add_argument(
        "sources",
        nargs="*",
        metavar="SOURCE",
        help="a file, - for standard input (the default), or an http(s):// URL; several merge",
    )
    summ.add_argument("--format", choices=("text", "json"), default="text")
    summ.add_argument(
        "--prometheus",
        metavar="URL",
        help="ask this Prometheus's HTTP API (/api/v1/query; also Thanos Query, Mimir with its "
        "/prometheus prefix, VictoriaMetrics) instead of reading SOURCEs",
    )
    summ.add_argument("--node", help="only this node's devices and containers")
    summ.add_argument(
        "--namespace", help="only this namespace's containers and quotas, and their devices"
    )
    summ.add_argument("--pod", help="only this pod's containers, and their devices")
    summ.add_argument(
        "--cacert",
        help="verify https sources against this CA (default: no verification for SOURCEs, "
        "the system's CAs for --prometheus)",
    )
    summ.add_argument(
        "--timeout",
        type=_positive_float,
        default=10.0,
        help="seconds per URL or per query (default 10)",
    )
    summ.add_argument(
        "--max-bytes",
        type=_positive_int,
        default=64 * 1024 * 1024,
        help="refuse a source, or a query's answer, larger than this (default 64 MiB)",
    )
    summ.add_argument(
        "--max-series",
        type=_positive_int,
        default=200_000,
        help="with --prometheus: refuse answers holding more series than this, all queries "
        "together (default 200000)",
    )
    summ.add_argument(
        "--label",
        action="append",
        type=_label_matcher,
        metavar="NAME=VALUE",
        help="with --prometheus: a label every series must carry (cluster=prod); repeatable",
    )
    summ.add_argument(
        "--header",
        action="append",
        type=_header,
        metavar="'NAME: VALUE'",
        help="with --prometheus: send this header (X-Scope-OrgID: tenant for Mimir); repeatable",
    )
    summ.add_argument(
        "--bearer-token", help="with --prometheus: send this bearer token (visible in ps)"
    )
    summ.add_argument(
        "--bearer-token-file", help="with --prometheus: send this file's bearer token"
    )
    summ.add_argument(
        "--live",
        action="store_true",
        help="read the cluster of the kubeconfig's current context (as --kubeconfig and "
        "--context do): HAMi's scheduler, monitors and this agent's pods, through the API server",
    )
    summ.add_argument(
        "--kubeconfig",
        type=Path,
        help="read the cluster this kubeconfig names (default: $KUBECONFIG's files merged, else "
        "~/.kube/config, else in a pod its service account)",
    )
    summ.add_argument("--context", help="the kubeconfig's context to use (default: its current)")
    summ.add_argument(
        "--list-contexts", action="store_true", help="list the kubeconfig's contexts and exit"
    )
    summ.add_argument(
        "--hami-namespace", help="where HAMi's scheduler and device plugin run (kube-system)"
    )
    summ.add_argument(
        "--hami-scheduler-service",
        metavar="[SCHEME:]NAME:PORT",
        help="HAMi's scheduler Service and its metrics port (hami-scheduler:31993); '' skips it",
    )
    summ.add_argument(
        "--hami-monitor-selector",
        metavar="SELECTOR",
        help="HAMi's vGPU monitor pods (app.kubernetes.io/component=hami-device-plugin); "
        "'' skips them",
    )
    summ.add_argument(
        "--hami-monitor-port", metavar="[SCHEME:]PORT", help="their metrics port (9394)"
    )
    summ.add_argument("--agent-namespace", help="where this agent runs (gpustack-system)")
    summ.add_argument(
        "--agent-selector",
        metavar="SELECTOR",
        help="this agent's pods (app.kubernetes.io/name=gpustack-device-manager); '' skips them",
    )
    summ.add_argument(
        "--agent-port", metavar="[SCHEME:]PORT", help="this agent's port (https:32443)"
    )
    summ.add_argument(
        "--max-pods",
        type=_positive_int,
        help="refuse when more pods than this match a selector (default 1000)",
    )
    summ.add_argument(
        "--window",
        type=_window,
        metavar="DURATION",
        help="with --prometheus: add the idle-and-held section over this window before --at "
        "(30m, 1h, 1h30m, 7d)",
    )
    summ.add_argument(
        "--idle-sm-activity",
        type=_percent,
        metavar="PERCENT",
        help="with --window: a grant whose SM activity was measured is idle at or below this "
        "peak (default 1; the alert's threshold in deploy/prometheus-rules.yaml)",
    )
    summ.add_argument(
        "--idle-busy-time",
        type=_percent,
        metavar="PERCENT",
        help="with --window: a grant judged by its busy time (no activity measured) is idle at "
        "or below this peak (default 0)",
    )
    summ.add_argument(
        "--at",
        type=_at,
        metavar="TIME",
        help="with --prometheus: evaluate at this time, Unix seconds or RFC 3339 "
        "(2026-12-03T12:00:00Z) (default: now)",
    )
    summ.set_defaults(func=_cmd_summarize)
    return parser


def _fail(command: str, message: str, code: int) -> NoReturn:
    one_line = " ".join(message.split())  # a library's multi-line message (YAML's) folded
    print(printable(f"devicemanager {command}: {one_line}"), file=sys.stderr)
    raise SystemExit(code)


# What a terminal would act on rather than show: C0 controls but tab and newline, DEL, C1
# controls (ESC's 8-bit forms: CSI, OSC), the bidirectional overrides and isolates that reorder
# what follows, and lone surrogates (what a JSON `\ud800` decodes to; no encoding carries one).
_UNPRINTABLE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def printable(text: str) -> str:
    """`text` as a command prints it: without what a terminal would act on. A tenant's owner
    name holding `ESC]0;…BEL ESC[2J`, an exporter's label value or a server's error text
    reaches the terminal as the characters around it, never as a title set or a screen
    cleared (issue 44). JSON output is unchanged by it: json.dumps escapes these already."""
    return _UNPRINTABLE.sub("", text)


class _Printable:
    """Standard output, every write through `printable`: the one point where every
    command's output (tables, reports, JSON, text relayed from a server) meets the
    terminal."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        return int(self._stream.write(printable(text)))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _stdout_closed() -> bool:
    """Whether our standard output is a pipe whose reader has gone (`| head -1`): the kernel
    reports an error condition (POLLERR) on the writing end of a pipe with no reader left."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), 0)  # POLLERR and POLLHUP are always reported
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (OSError, ValueError):
        return False


def _quiet_stdout() -> None:
    """What is still buffered for a closed standard output goes nowhere, and no error about it
    is printed at exit."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)  # usage errors: argparse's message, exit 2
    if args.command == "serve":  # serve sets up its own logs from its flags
        return _run(args)
    from devicemanager.agent.logs import configure_command

    configure_command(args.command)
    stdout = sys.stdout
    for stream in (stdout, sys.stderr):  # a terminal that cannot show a character gets "?"
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors="replace")
    sys.stdout = cast(TextIO, _Printable(stdout))
    try:
        return _run(args)
    finally:
        sys.stdout = stdout


def _run(args: argparse.Namespace) -> int:
    command = args.command
    try:
        result: int = args.func(args)
        sys.stdout.flush()  # here, where a closed standard output is seen, not at exit
    except CliError as exc:
        _fail(command, str(exc), exc.code)
    except KeyboardInterrupt:
        _fail(command, "interrupted", 130)
    except BrokenPipeError as exc:
        if not _stdout_closed():  # a broken pipe of some other file: unexpected
            _unexpected(command, exc, args.debug)
        # The reader took what it wanted, as `head` does: not a failure of ours.
        _quiet_stdout()
        return OK
    except Exception as exc:
        _unexpected(command, exc, args.debug)
    return result


def _unexpected(command: str, exc: Exception, debug: bool) -> NoReturn:
    """A failure no command foresaw: one line, exit 3; with --debug its traceback first, and
    the same exit code, so a script sees the same outcome either way."""
    if debug:
        traceback.print_exception(exc)
    hint = "" if debug else " (run with --debug for the traceback)"
    _fail(command, f"{type(exc).__name__}: {exc}{hint}", UNREACHABLE)


if __name__ == "__main__":
    raise SystemExit(main())
