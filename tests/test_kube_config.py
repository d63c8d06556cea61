"""The agent's own reading of a kubeconfig and the service account (kube/config.py), and the
credentials and connections of its one HTTP client (kube/http.py), through the fake API server
where a server is needed."""

from __future__ import annotations

import base64
import json
import socket
import stat
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from devicemanager.kube.client import KubeClient, KubeError, config_from
from devicemanager.kube.config import ConfigError, Exec, KubeConfig, User
from devicemanager.kube.http import Credentials, Http, HttpError
from tests.kube_server import FakeApiServer


@pytest.fixture
def api(tmp_path: Path) -> Iterator[FakeApiServer]:
    server = FakeApiServer(tmp_path).start()
    yield server
    server.stop()


def test_a_kubeconfig_in_yaml_with_relative_paths_and_the_current_context(tmp_path: Path) -> None:
    (tmp_path / "kube").mkdir()
    path = tmp_path / "kube" / "config"
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: b\n"
        "clusters:\n"
        "- name: one\n  cluster: {server: 'https://10.0.0.1:6443', certificate-authority: ca.crt}\n"
        "users:\n- name: u\n  user: {tokenFile: tok}\n"
        "contexts:\n"
        "- name: a\n  context: {cluster: one}\n"
        "- name: b\n  context: {cluster: one, user: u, namespace: ns}\n"
    )
    single = KubeConfig.from_file(path).get()
    assert single is not None and single.user is not None
    assert single.cluster.server == "https://10.0.0.1:6443" and single.namespace == "ns"
    assert single.abs_file(single.cluster.certificate_auth or "") == str(tmp_path / "kube/ca.crt")
    assert single.user.token_file == "tok"
    other = KubeConfig.from_file(path).get("a")
    assert other is not None and other.user is None and other.namespace == "default"
    with pytest.raises(ConfigError, match="'c' not found"):
        KubeConfig.from_file(path).get("c")
    with pytest.raises(ConfigError, match="not found"):
        KubeConfig.from_file(tmp_path / "absent")


def test_certificate_data_verifies_the_server_and_a_wrong_ca_is_refused(
    api: FakeApiServer, tmp_path: Path
) -> None:
    doc = json.loads(api.kubeconfig(tmp_path / "kc").read_text())
    cluster = doc["clusters"][0]["cluster"]
    cluster["certificate-authority-data"] = base64.b64encode(api.ca.read_bytes()).decode()
    del cluster["certificate-authority"]
    config = KubeConfig.from_dict(doc)
    client = KubeClient(config, timeout=5)
    api.closers.append(client.close)
    assert client.list_pods("node-1") == ([], str(api.version))
    # A CA that did not sign the server's certificate: refused, said as TLS's refusal.
    (tmp_path / "other").mkdir()
    stranger = FakeApiServer(tmp_path / "other")
    cluster["certificate-authority-data"] = base64.b64encode(stranger.ca.read_bytes()).decode()
    refused = KubeClient(KubeConfig.from_dict(doc), timeout=5)
    api.closers.append(refused.close)
    with pytest.raises(KubeError, match="CERTIFICATE_VERIFY_FAILED"):
        refused.list_pods("node-1")
    stranger.httpd.server_close()


def test_an_exec_plugin_is_run_for_the_token_and_again_after_a_401(
    api: FakeApiServer, tmp_path: Path
) -> None:
    counter = tmp_path / "runs"
    plugin = tmp_path / "plugin.py"
    plugin.write_text(
        "import json, pathlib, sys\n"
        f"p = pathlib.Path({str(counter)!r})\n"
        "n = int(p.read_text()) + 1 if p.exists() else 1\n"
        "p.write_text(str(n))\n"
        "token = 'stale' if n == 1 else 'token-1'\n"
        "print(json.dumps({'kind': 'ExecCredential', 'status': {'token': token}}))\n"
    )
    plugin.chmod(plugin.stat().st_mode | stat.S_IXUSR)
    doc = json.loads(api.kubeconfig(tmp_path / "kc").read_text())
    doc["users"][0]["user"] = {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1beta1",
            "command": sys.executable,
            "args": [str(plugin)],
        }
    }
    client = KubeClient(KubeConfig.from_dict(doc), timeout=5)
    api.closers.append(client.close)
    # The first token is refused (401): the plugin runs again, and its new token is used.
    assert client.list_pods("node-1")[0] == []
    assert counter.read_text() == "2"


def test_credentials_of_each_kind() -> None:
    assert Credentials(User(token="t")).header() == "Bearer t"
    assert not Credentials(User(token="t")).renew()  # a static token is what it is
    basic = Credentials(User(username="a", password="b")).header()
    assert basic == "Basic " + base64.b64encode(b"a:b").decode()
    assert Credentials(None).header() is None
    with pytest.raises(ConfigError, match="auth-provider"):
        Credentials(User(auth_provider=True))
    old = Exec("client.authentication.k8s.io/v0", "true")
    with pytest.raises(ConfigError, match="not implemented"):
        Credentials(User(exec=old)).header()


def test_in_cluster_configuration_from_the_service_account(
    api: FakeApiServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    account = api.service_account(tmp_path / "sa")
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "::1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "6443")
    config = config_from(None, account)
    assert config is not None
    single = config.get()
    assert single is not None and single.user is not None
    assert single.cluster.server == "https://[::1]:6443"
    assert single.user.token_file == str(account / "token")
    assert single.namespace == "gpustack-system"


def test_closing_the_client_ends_a_read_that_waits_in_another_thread() -> None:
    # A server that accepts and never answers: the watch's read blocks until close().
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    client = Http(f"http://127.0.0.1:{port}", None, timeout=300)
    failed: list[BaseException] = []

    def read() -> None:
        try:
            with client.stream("GET", "/watch") as response:
                response.read()
        except HttpError as exc:
            failed.append(exc)

    reader = threading.Thread(target=read)
    reader.start()
    accepted, _ = listener.accept()
    client.close()
    reader.join(30)
    accepted.close()
    listener.close()
    assert not reader.is_alive() and len(failed) == 1
