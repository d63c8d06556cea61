"""The agent's own reading of the kubelet's pod-resources wire (issue 46), held against the
implementations it replaced: its protobuf decoder against protobuf's on random messages (wire
bytes and the JSON mapping replay reads), its HPACK decoder against RFC 7541's examples and the
`hpack` package's encoder (which lightkube's h2 brings; the agent does not import it)."""

from __future__ import annotations

from typing import Any

import hpack as reference_hpack
import pytest
from google.protobuf import json_format
from hypothesis import given, settings
from hypothesis import strategies as st

from devicemanager.kube import hpack
from devicemanager.kube import podresources_messages as messages
from tests.proto import podresources_v1_pb2 as pb

text = st.text(max_size=12)


def cdi() -> st.SearchStrategy[Any]:
    return st.builds(pb.CDIDevice, name=text)


@st.composite
def claim_resource(draw: st.DrawFn) -> Any:
    resource = pb.ClaimResource(
        cdi_devices=draw(st.lists(cdi(), max_size=2)),
        driver_name=draw(text),
        pool_name=draw(text),
        device_name=draw(text),
    )
    share = draw(st.none() | text)
    if share is not None:
        resource.share_id = share  # `optional`: sent even when empty
    return resource


def container_devices() -> st.SearchStrategy[Any]:
    numa = st.builds(pb.NUMANode, ID=st.integers(-(2**63), 2**63 - 1))
    return st.builds(
        pb.ContainerDevices,
        resource_name=text,
        device_ids=st.lists(text, max_size=3),
        topology=st.none() | st.builds(pb.TopologyInfo, nodes=st.lists(numa, max_size=2)),
    )


def list_response() -> st.SearchStrategy[Any]:
    dynamic = st.builds(
        pb.DynamicResource,
        claim_name=text,
        claim_namespace=text,
        claim_resources=st.lists(claim_resource(), max_size=2),
    )
    container = st.builds(
        pb.ContainerResources,
        name=text,
        devices=st.lists(container_devices(), max_size=2),
        dynamic_resources=st.lists(dynamic, max_size=2),
    )
    pod = st.builds(
        pb.PodResources, name=text, namespace=text, containers=st.lists(container, max_size=2)
    )
    return st.builds(pb.ListPodResourcesResponse, pod_resources=st.lists(pod, max_size=3))


def ours(message: Any) -> Any:
    """protobuf's message as the agent's dataclasses hold it, read through protobuf's API."""
    kind = getattr(messages, type(message).__name__)
    values = {}
    for name, held, repeated in messages.FIELDS[kind].values():
        value = getattr(message, name)
        if repeated:
            values[name] = tuple(v if held == "string" else ours(v) for v in value)
        elif name == "share_id":
            values[name] = value if message.HasField("share_id") else None
        else:
            values[name] = value
    return kind(**values)


@settings(max_examples=200, deadline=None)
@given(list_response())
def test_the_wire_decodes_as_protobuf_decodes_it(message: Any) -> None:
    """Topology (not read) is skipped as an unknown field; `optional` share_id keeps presence."""
    wire = message.SerializeToString()
    assert messages.decode(messages.ListPodResourcesResponse, wire) == ours(message)


@settings(max_examples=100, deadline=None)
@given(list_response(), st.booleans())
def test_the_json_mapping_reads_as_protobuf_reads_it(message: Any, proto_names: bool) -> None:
    doc = json_format.MessageToDict(message, preserving_proto_field_name=proto_names)
    assert messages.from_json(messages.ListPodResourcesResponse, doc) == ours(message)


@settings(max_examples=100, deadline=None)
@given(st.lists(container_devices(), max_size=4))
def test_allocatable_decodes_as_protobuf_decodes_it(devices: list[Any]) -> None:
    message = pb.AllocatableResourcesResponse(devices=devices)
    wire = message.SerializeToString()
    assert messages.decode(messages.AllocatableResourcesResponse, wire) == ours(message)


def test_unknown_fields_of_every_wire_type_are_skipped() -> None:
    """A newer kubelet's fields (cpu_ids packed or not, memory, a fixed-width field) pass by."""
    pod = pb.PodResources(name="p", namespace="ns").SerializeToString()
    unknown = (
        b"\x20\x96\x01"  # field 4, varint 150 (cpu_ids, unpacked)
        + b"\x22\x02\x01\x02"  # field 4, length-delimited (cpu_ids, packed)
        + b"\x29" + bytes(8)  # field 5, fixed64
        + b"\x35" + bytes(4)  # field 6, fixed32
    )  # fmt: skip
    wire = b"\x0a" + bytes([len(pod + unknown)]) + pod + unknown
    assert pb.ListPodResourcesResponse.FromString(wire).pod_resources[0].name == "p"
    decoded = messages.decode(messages.ListPodResourcesResponse, wire)
    assert decoded == messages.ListPodResourcesResponse((messages.PodResources("p", "ns"),))


@pytest.mark.parametrize(
    "wire",
    [
        b"\xff\xff\xff\xff not a protobuf message",  # the stand-in kubelet's garbage
        b"\x00" * 8,  # field number 0
        b"\x0a\x05abc",  # a field past the end
        b"\x0a",  # ends inside a length
        b"\x0b",  # a group
        b"\x0a\x02\x0a\x80",  # a string that is not UTF-8, inside a pod
        b"\x08" + b"\xff" * 11,  # a varint of eleven bytes
    ],
)
def test_bytes_that_are_no_message_are_refused_as_protobuf_refuses_them(wire: bytes) -> None:
    from google.protobuf.message import DecodeError

    with pytest.raises(DecodeError):
        pb.ListPodResourcesResponse.FromString(wire)
    with pytest.raises(messages.DecodeError):
        messages.decode(messages.ListPodResourcesResponse, wire)


@pytest.mark.parametrize(
    "doc",
    [
        {"podResources": 7},
        {"podResources": [{"name": 3}]},
        {"podResources": [{"containers": [{"devices": [{"deviceIds": "GPU-1"}]}]}]},
    ],
)
def test_a_document_of_the_wrong_shape_is_refused_as_protobuf_refuses_it(doc: Any) -> None:
    with pytest.raises(json_format.ParseError):
        json_format.ParseDict(doc, pb.ListPodResourcesResponse(), ignore_unknown_fields=True)
    with pytest.raises(messages.DecodeError):
        messages.from_json(messages.ListPodResourcesResponse, doc)


# -- HPACK ---------------------------------------------------------------------------------------


def test_the_rfcs_huffman_coded_requests_decode_in_sequence() -> None:
    """RFC 7541 C.4: three requests on one connection, the dynamic table carried between them."""
    decoder = hpack.Decoder()
    first = bytes.fromhex("828684418cf1e3c2e5f23a6ba0ab90f4ff")
    second = bytes.fromhex("828684be5886a8eb10649cbf")
    third = bytes.fromhex("828785bf408825a849e95ba97d7f8925a849e95bb8e8b4bf")
    authority = (":authority", "www.example.com")
    assert decoder.decode(first) == [
        (":method", "GET"),
        (":scheme", "http"),
        (":path", "/"),
        authority,
    ]
    assert decoder.decode(second)[-1] == ("cache-control", "no-cache")
    assert decoder.decode(third) == [
        (":method", "GET"),
        (":scheme", "https"),
        (":path", "/index.html"),
        authority,
        ("custom-key", "custom-value"),
    ]


headers = st.lists(
    st.tuples(
        st.sampled_from(["content-type", "grpc-status", "grpc-message", "x-custom", ":status"]),
        st.text(max_size=40),
    ),
    max_size=6,
)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(headers, st.booleans()), min_size=1, max_size=5),
    st.sampled_from([0, 64, 4096]),
)
def test_blocks_decode_as_hpack_encodes_them(blocks: list[Any], table: int) -> None:
    """Huffman or not, indexed into a dynamic table of any size and evicted from it, block after
    block on one connection."""
    encoder = reference_hpack.Encoder()
    decoder = hpack.Decoder()
    encoder.header_table_size = table
    for block, huffman in blocks:
        assert decoder.decode(encoder.encode(block, huffman=huffman)) == block


def test_a_request_encodes_to_what_hpack_decodes() -> None:
    request = [
        (":method", "POST"),
        (":scheme", "http"),
        (":path", "/v1.PodResourcesLister/List"),
        (":authority", "localhost"),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
        ("grpc-timeout", "2000m"),
    ]
    assert reference_hpack.Decoder().decode(hpack.encode(request)) == request


@pytest.mark.parametrize(
    "block",
    [
        bytes([0xBF]),  # index 63: no dynamic entry yet
        bytes([0x80]),  # index 0
        bytes([0x40, 0x83, 0xFF, 0xFF, 0xFF]),  # a name Huffman-coded into EOS
        bytes([0x40, 0x05, 0x61]),  # a string past the block
        bytes([0x3F, 0xE2, 0x1F]),  # a table size (4097) past what SETTINGS allowed
    ],
)
def test_a_broken_block_is_an_error(block: bytes) -> None:
    with pytest.raises(hpack.HpackError):
        hpack.Decoder().decode(block)


def test_a_block_that_decodes_to_more_than_the_bound_is_an_error() -> None:
    """One 4 KiB entry, then a thousand one-byte references to it: 4 MiB from 5 KiB."""
    decoder = hpack.Decoder(max_list_size=65536)
    entry = reference_hpack.Encoder().encode([("x-big", "v" * 4000)], huffman=False)
    assert decoder.decode(entry) == [("x-big", "v" * 4000)]
    with pytest.raises(hpack.HpackError, match="past 65536"):
        decoder.decode(bytes([0x80 | 62]) * 1000)  # index 62: the dynamic table's newest


def test_an_answer_of_more_entries_than_the_bound_is_refused_before_it_is_built() -> None:
    """R-X2: 2^18 repeated entries at every depth are decoded; one more is refused before it is
    built, so an answer of millions of two-byte empty pods (16 MiB: 8 million objects) costs
    no more than the bound. Strings count as entries too."""
    assert messages.MAX_ENTRIES == 262_144
    empty_pod = b"\x0a\x00"  # field 1, length 0: an empty PodResources
    whole = messages.decode(messages.ListPodResourcesResponse, empty_pod * 262_144)
    assert len(whole.pod_resources) == 262_144
    with pytest.raises(messages.DecodeError, match="more than 262144 repeated entries"):
        messages.decode(messages.ListPodResourcesResponse, empty_pod * 262_145)
    # a pod with a container with a device of three ids: 1 + 1 + 1 + 3 entries
    device = b"\x0a\x01r" + b"\x12\x01a" * 3
    container = b"\x12" + bytes([len(device)]) + device
    pod = b"\x1a" + bytes([len(container)]) + container
    answer = b"\x0a" + bytes([len(pod)]) + pod
    assert messages.decode(messages.ListPodResourcesResponse, answer, max_entries=6)
    with pytest.raises(messages.DecodeError, match="more than 5 repeated entries"):
        messages.decode(messages.ListPodResourcesResponse, answer, max_entries=5)
