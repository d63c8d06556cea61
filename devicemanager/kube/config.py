"""Where the API server is and how to authenticate to it: in-cluster or a kubeconfig file.

The agent's own reading of what it used lightkube's configuration for (issue 46: lightkube, its
models and its HTTP client cost a node in a cluster about 6 MiB once imported, for the two
dozen fields read here). In a pod: the service account's token (re-read when the API server
answers 401, as the kubelet rotates it), its CA and namespace, the server from
KUBERNETES_SERVICE_HOST/PORT. From a kubeconfig (JSON, or YAML: PyYAML imported only then):
the current context's cluster (server, certificate-authority[-data],
insecure-skip-tls-verify) and user (token, tokenFile, client-certificate[-data] and
client-key[-data], username and password, an exec plugin of
client.authentication.k8s.io/v1beta1 or v1alpha1), relative paths resolved against the file's
directory. An auth-provider is refused, as lightkube refused it.

The names of the fields are lightkube's (`user.token_file`, `cluster.certificate_auth`,
`abs_file`), which the kubelet's client reads too.
"""

from __future__ import annotations

import base64
import json
import os
import ssl
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DEFAULT_NAMESPACE = "default"


class ConfigError(Exception):
    """A configuration that names no usable cluster, context or credentials."""


@dataclass(frozen=True, slots=True)
class Exec:
    """A kubeconfig's exec plugin: a command that prints an ExecCredential."""

    api_version: str
    command: str
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class User:
    token: str | None = None
    token_file: str | None = None
    client_cert: str | None = None
    client_cert_data: str | None = None
    client_key: str | None = None
    client_key_data: str | None = None
    username: str | None = None
    password: str | None = None
    exec: Exec | None = None
    auth_provider: bool = False


@dataclass(frozen=True, slots=True)
class Cluster:
    server: str
    certificate_auth: str | None = None
    certificate_auth_data: str | None = None
    insecure: bool = False


@dataclass(frozen=True, slots=True)
class SingleConfig:
    """One context's cluster, user and namespace."""

    cluster: Cluster
    user: User | None = None
    namespace: str = DEFAULT_NAMESPACE
    fname: Path | None = None

    def abs_file(self, name: str) -> str:
        """A path of the configuration, relative ones taken from the file's directory."""
        if Path(name).is_absolute():
            return name
        if self.fname is None:
            raise ConfigError(f"{name} is relative, but the kubeconfig's path is unknown")
        return str(self.fname.parent / name)


@dataclass(frozen=True, slots=True)
class KubeConfig:
    """A configuration's contexts, and which is current."""

    contexts: Mapping[str, SingleConfig] = field(default_factory=dict)
    current_context: str | None = None

    def get(self, context_name: str | None = None) -> SingleConfig | None:
        name = context_name or self.current_context
        if name is None:
            return None
        try:
            return self.contexts[name]
        except KeyError as exc:
            raise ConfigError(f"context {name!r} not found") from exc

    @classmethod
    def from_service_account(cls, account: Path) -> KubeConfig:
        token_file = account / "token"
        try:
            token = token_file.read_text()
            namespace = (account / "namespace").read_text()
        except FileNotFoundError as exc:
            raise ConfigError(str(exc)) from exc
        host = os.environ["KUBERNETES_SERVICE_HOST"]
        port = os.environ["KUBERNETES_SERVICE_PORT"]
        if ":" in host:  # IPv6
            host = f"[{host}]"
        single = SingleConfig(
            cluster=Cluster(f"https://{host}:{port}", certificate_auth=str(account / "ca.crt")),
            user=User(token=token, token_file=str(token_file)),
            namespace=namespace,
        )
        return cls({"default": single}, "default")

    @classmethod
    def from_file(cls, path: Path) -> KubeConfig:
        path = Path(path).expanduser()
        if not path.is_file():
            raise ConfigError(f"configuration file {path} not found")
        text = path.read_text()
        try:
            # JSON is YAML too, and needs no YAML parser: one is imported only for the rest.
            doc = json.loads(text)
        except ValueError:
            import yaml  # type: ignore[import-untyped]

            doc = yaml.safe_load(text)
        return cls.from_dict(doc, path)

    @classmethod
    def from_dict(cls, doc: Any, fname: Path | None = None) -> KubeConfig:
        if not isinstance(doc, dict):
            raise ConfigError("the kubeconfig is not a mapping")
        clusters = {c["name"]: _cluster(c["cluster"]) for c in doc["clusters"]}
        users = {u["name"]: _user(u["user"]) for u in doc.get("users") or ()}
        contexts = {}
        for entry in doc["contexts"]:
            context = entry["context"]
            user = context.get("user")
            contexts[entry["name"]] = SingleConfig(
                cluster=clusters[context["cluster"]],
                user=users[user] if user else None,
                namespace=context.get("namespace") or DEFAULT_NAMESPACE,
                fname=fname,
            )
        return cls(contexts, doc.get("current-context"))


def _text(doc: Mapping[str, Any], key: str) -> str | None:
    value = doc.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise ConfigError(f"{key}: not a string")
    return value


def _cluster(doc: Mapping[str, Any]) -> Cluster:
    return Cluster(
        server=_text(doc, "server") or "http://localhost:8080",
        certificate_auth=_text(doc, "certificate-authority"),
        certificate_auth_data=_text(doc, "certificate-authority-data"),
        insecure=bool(doc.get("insecure-skip-tls-verify", False)),
    )


def _user(doc: Mapping[str, Any] | None) -> User:
    doc = doc or {}
    plugin = doc.get("exec")
    return User(
        token=_text(doc, "token"),
        token_file=_text(doc, "tokenFile"),
        client_cert=_text(doc, "client-certificate"),
        client_cert_data=_text(doc, "client-certificate-data"),
        client_key=_text(doc, "client-key"),
        client_key_data=_text(doc, "client-key-data"),
        username=_text(doc, "username"),
        password=_text(doc, "password"),
        exec=(
            Exec(
                api_version=plugin["apiVersion"],
                command=plugin["command"],
                args=tuple(plugin.get("args") or ()),
                env=tuple((e["name"], e["value"]) for e in plugin.get("env") or ()),
            )
            if plugin
            else None
        ),
        auth_provider=bool(doc.get("auth-provider")),
    )


def _data_file(data: str) -> str:
    """A base64 `-data` field written to a file of its own, for ssl's loaders, which read
    files only; removed at once after loading (the loaders have read it by then)."""
    handle, name = tempfile.mkstemp(prefix="devicemanager-")
    with os.fdopen(handle, "wb") as out:
        out.write(base64.b64decode(data))
    return name


def tls_context(config: SingleConfig) -> ssl.SSLContext:
    """Verification of the API server's certificate, and the user's own certificate if any."""
    cluster, user = config.cluster, config.user
    made: list[str] = []
    try:
        if cluster.certificate_auth:
            ctx = ssl.create_default_context(cafile=config.abs_file(cluster.certificate_auth))
        elif cluster.certificate_auth_data:
            made.append(_data_file(cluster.certificate_auth_data))
            ctx = ssl.create_default_context(cafile=made[-1])
        elif cluster.insecure:
            ctx = ssl.create_default_context()
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        else:
            ctx = ssl.create_default_context(cafile=_certifi())
        if user is not None and (user.client_cert or user.client_cert_data):
            if user.client_cert_data:
                made.append(_data_file(user.client_cert_data))
                cert = made[-1]
            else:
                cert = config.abs_file(user.client_cert or "")
            if user.client_key_data:
                made.append(_data_file(user.client_key_data))
                key = made[-1]
            else:
                key = config.abs_file(user.client_key or "")
            ctx.load_cert_chain(cert, key)
        return ctx
    finally:
        for name in made:
            os.unlink(name)


def _certifi() -> str | None:
    """The CA bundle httpx verified against when no CA is configured (certifi's), where it is
    installed; else the system's."""
    try:
        import certifi
    except ImportError:
        return None
    return str(certifi.where())
