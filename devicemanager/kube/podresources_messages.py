"""The kubelet's pod-resources messages (package v1) that the agent reads, as frozen dataclasses,
decoded from protobuf's wire format (what the socket answers) and from protobuf's JSON mapping
(what a scenario's podresources.json records).

Written by hand from the API's published contract: `FIELDS` names each message's fields by the
kubelet's numbers, and both decoders follow it. Fields we leave out are skipped on the wire (as
protobuf skips unknown fields) and ignored in JSON; tests/test_podresources.py checks `FIELDS`
field for field against the kubelet's `api.proto`, and the decoders against protobuf's own on
random messages. Decoding this way costs none of protobuf's runtime (about 2.8 MiB resident:
docs/performance.md).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, TypeVar


class DecodeError(ValueError):
    """Bytes or a document that are no such message."""


@dataclass(frozen=True, slots=True)
class CDIDevice:
    name: str = ""


@dataclass(frozen=True, slots=True)
class ClaimResource:
    cdi_devices: tuple[CDIDevice, ...] = ()
    driver_name: str = ""
    pool_name: str = ""
    device_name: str = ""
    share_id: str | None = None  # `optional`: None when absent, "" when sent empty


@dataclass(frozen=True, slots=True)
class DynamicResource:
    claim_name: str = ""
    claim_namespace: str = ""
    claim_resources: tuple[ClaimResource, ...] = ()


@dataclass(frozen=True, slots=True)
class ContainerDevices:
    resource_name: str = ""
    device_ids: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ContainerResources:
    name: str = ""
    devices: tuple[ContainerDevices, ...] = ()
    dynamic_resources: tuple[DynamicResource, ...] = ()


@dataclass(frozen=True, slots=True)
class PodResources:
    name: str = ""
    namespace: str = ""
    containers: tuple[ContainerResources, ...] = ()


@dataclass(frozen=True, slots=True)
class ListPodResourcesResponse:
    pod_resources: tuple[PodResources, ...] = ()


@dataclass(frozen=True, slots=True)
class AllocatableResourcesResponse:
    devices: tuple[ContainerDevices, ...] = ()


Message = (
    CDIDevice
    | ClaimResource
    | DynamicResource
    | ContainerDevices
    | ContainerResources
    | PodResources
    | ListPodResourcesResponse
    | AllocatableResourcesResponse
)
M = TypeVar("M", bound=Message)

# message -> field number -> (field name, "string" or the message it holds, repeated). Every
# field read is a string or a message: length-delimited on the wire. The request messages are
# empty and sent as zero bytes.
FIELDS: dict[type[Any], dict[int, tuple[str, str | type[Any], bool]]] = {
    ListPodResourcesResponse: {1: ("pod_resources", PodResources, True)},
    PodResources: {
        1: ("name", "string", False),
        2: ("namespace", "string", False),
        3: ("containers", ContainerResources, True),
    },
    ContainerResources: {
        1: ("name", "string", False),
        2: ("devices", ContainerDevices, True),
        5: ("dynamic_resources", DynamicResource, True),
    },
    DynamicResource: {
        2: ("claim_name", "string", False),
        3: ("claim_namespace", "string", False),
        4: ("claim_resources", ClaimResource, True),
    },
    ClaimResource: {
        1: ("cdi_devices", CDIDevice, True),
        2: ("driver_name", "string", False),
        3: ("pool_name", "string", False),
        4: ("device_name", "string", False),
        5: ("share_id", "string", False),
    },
    CDIDevice: {1: ("name", "string", False)},
    ContainerDevices: {1: ("resource_name", "string", False), 2: ("device_ids", "string", True)},
    AllocatableResourcesResponse: {1: ("devices", ContainerDevices, True)},
}

_VARINT, _I64, _LEN, _I32 = 0, 1, 2, 5


def _plan(kind: type[Any]) -> tuple[dict[int, tuple[int, type[Any] | None, bool]], list[Any]]:
    """A message's fields by number -> (position in its dataclass, the message it holds or None
    for a string, repeated), and the dataclass's defaults in order: decoding fills a list and
    makes the message from it once."""
    names = [f.name for f in dataclasses.fields(kind)]
    by_number = {
        number: (names.index(name), None if isinstance(held, str) else held, repeated)
        for number, (name, held, repeated) in FIELDS[kind].items()
    }
    defaults = [f.default for f in dataclasses.fields(kind)]
    return by_number, defaults


_PLANS = {kind: _plan(kind) for kind in FIELDS}


def _varint(data: bytes, at: int, end: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if at >= end:
            raise DecodeError("the message ends inside a varint")
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, at
        shift += 7
        if shift >= 70:
            raise DecodeError("a varint longer than ten bytes")


# Repeated entries (messages and strings, at every depth) one answer may hold. An empty pod is
# two bytes on the wire and a hundred in Python: 16 MiB of them would be 8 million objects.
# The reader's own bounds (2,048 pods, 64 containers, 256 devices) cut a node's answer to far
# fewer; a node's real answer holds a few thousand.
MAX_ENTRIES = 1 << 18


def decode(kind: type[M], data: bytes | memoryview, max_entries: int = MAX_ENTRIES) -> M:
    """One message from its wire bytes. A field we do not declare, or declared and sent with
    another wire type, is skipped as protobuf skips unknown fields; a singular field sent twice
    keeps its last value, as protobuf's does. Past `max_entries` repeated entries the answer is
    refused (DecodeError) before another is built."""
    raw = bytes(data)
    return _decode(kind, raw, 0, len(raw), [max_entries, max_entries])


def _decode(kind: type[M], data: bytes, at: int, end: int, left: list[int]) -> M:
    # left: the repeated entries still allowed, and the bound (for the refusal's text)
    plan, defaults = _PLANS[kind]
    values = list(defaults)
    lists: dict[int, list[Any]] = {}
    while at < end:
        tag = data[at]  # one byte for every field number below 16, so nearly always
        if tag < 0x80:
            at += 1
        else:
            tag, at = _varint(data, at, end)
        number, wire = tag >> 3, tag & 7
        if not 0 < number < 1 << 29:
            raise DecodeError(f"field number {number}")
        if wire == _LEN:
            if at >= end:
                raise DecodeError("the message ends inside a length")
            length = data[at]
            if length < 0x80:
                at += 1
            else:
                length, at = _varint(data, at, end)
            stop = at + length
            if stop > end:
                raise DecodeError("a field runs past the end of its message")
            spec = plan.get(number)
            if spec is not None:
                index, held, repeated = spec
                if repeated:
                    left[0] -= 1
                    if left[0] < 0:
                        raise DecodeError(f"more than {left[1]} repeated entries")
                if held is None:
                    try:
                        value: Any = data[at:stop].decode()
                    except UnicodeDecodeError as exc:
                        raise DecodeError(f"a string that is not UTF-8 ({exc.reason})") from None
                else:
                    value = _decode(held, data, at, stop, left)
                if repeated:
                    lists.setdefault(index, []).append(value)
                else:
                    values[index] = value
            at = stop
        elif wire == _VARINT:
            _, at = _varint(data, at, end)
        elif wire in (_I64, _I32):
            at += 8 if wire == _I64 else 4
            if at > end:
                raise DecodeError("the message ends inside a fixed-width field")
        else:  # groups (3, 4) are proto2's, and 6, 7 are no wire type
            raise DecodeError(f"wire type {wire}")
    for index, items in lists.items():
        values[index] = tuple(items)
    return kind(*values)


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.capitalize() for part in rest)


def from_json(kind: type[M], doc: object) -> M:
    """One message from protobuf's JSON mapping, as `json_format.ParseDict` with
    `ignore_unknown_fields` reads it: each field by its JSON (lowerCamel) or its proto name, a
    null as the field's default, keys we do not declare ignored."""
    if not isinstance(doc, dict):
        raise DecodeError(f"{kind.__name__}: expected an object, got {type(doc).__name__}")
    values: dict[str, Any] = {}
    for name, held, repeated in FIELDS[kind].values():
        raw = doc.get(_camel(name), doc.get(name))
        if raw is None:
            continue
        if repeated:
            if not isinstance(raw, list):
                raise DecodeError(f"{kind.__name__}.{name}: expected a list")
            values[name] = tuple(_json_value(kind, name, held, item) for item in raw)
        else:
            values[name] = _json_value(kind, name, held, raw)
    return kind(**values)


def _json_value(kind: type[Any], name: str, held: str | type[Any], raw: object) -> object:
    if held != "string":
        assert isinstance(held, type)
        return from_json(held, raw)
    if not isinstance(raw, str):
        raise DecodeError(f"{kind.__name__}.{name}: expected a string, got {raw!r}")
    return raw
