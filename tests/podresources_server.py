"""A stand-in kubelet pod-resources server: real gRPC (grpcio) over a unix socket, the real protos
(protobuf, tests/proto), so the agent's own HTTP/2 client and decoder meet another implementation.

It serves a recorded answer (a scenario's podresources.json, parsed into the real messages and
serialised by protobuf), and can be told to be slow, to be a kubelet that predates v1 or
GetAllocatableResources, to answer bytes that are no message at all, or to fail after its headers.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from google.protobuf import json_format

from tests.proto import podresources_v1_pb2 as pb


@dataclass
class Behaviour:
    recording: dict[str, Any]
    delay: float = 0.0  # seconds each call sleeps before answering
    serve_v1: bool = True  # False: a kubelet before 1.20 (only v1alpha1)
    serve_allocatable: bool = True  # False: a kubelet before 1.21
    garbage: bool = False  # answer bytes that do not decode
    answer_bytes: int = 0  # > 0: answer this many bytes (a message larger than any bound)
    fail_after_headers: bool = False  # headers, then no message: UNAVAILABLE in the trailers
    calls: list[str] = field(default_factory=list)
    released: threading.Event = field(default_factory=threading.Event)


def _identity(data: bytes) -> bytes:
    return data


def _handler(behaviour: Behaviour, method: str, response: Any) -> grpc.RpcMethodHandler:
    def answer(request: bytes, context: grpc.ServicerContext) -> bytes:
        behaviour.calls.append(method)
        if behaviour.delay:
            behaviour.released.wait(behaviour.delay)
        if behaviour.fail_after_headers:
            context.send_initial_metadata(())
            context.abort(grpc.StatusCode.UNAVAILABLE, "the kubelet is shutting down")
        if behaviour.garbage:
            return b"\xff\xff\xff\xff not a protobuf message"
        if behaviour.answer_bytes:
            return b"\x00" * behaviour.answer_bytes
        doc = behaviour.recording.get("list" if method == "List" else "allocatable", {})
        message = json_format.ParseDict(doc, response(), ignore_unknown_fields=True)
        return bytes(message.SerializeToString())

    return grpc.unary_unary_rpc_method_handler(
        answer, request_deserializer=_identity, response_serializer=_identity
    )


@contextmanager
def serving(socket: Path, behaviour: Behaviour) -> Iterator[Behaviour]:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    handlers = {}
    if behaviour.serve_v1:
        handlers["List"] = _handler(behaviour, "List", pb.ListPodResourcesResponse)
        if behaviour.serve_allocatable:
            handlers["GetAllocatableResources"] = _handler(
                behaviour, "GetAllocatableResources", pb.AllocatableResourcesResponse
            )
        server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler("v1.PodResourcesLister", handlers),)
        )
    else:
        # A 1.19 kubelet: only the v1alpha1 service exists, so v1 calls are UNIMPLEMENTED.
        server.add_generic_rpc_handlers(
            (
                grpc.method_handlers_generic_handler(
                    "v1alpha1.PodResourcesLister",
                    {"List": _handler(behaviour, "List", pb.ListPodResourcesResponse)},
                ),
            )
        )
    server.add_insecure_port(f"unix://{socket}")
    server.start()
    try:
        yield behaviour
    finally:
        behaviour.released.set()
        server.stop(grace=None)
        time.sleep(0.01)


def load(path: Path) -> dict[str, Any]:
    doc = json.loads(path.read_text())
    assert isinstance(doc, dict)
    return doc
