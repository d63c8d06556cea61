"""HPACK (RFC 7541), as much of it as a gRPC client needs: decoding the header blocks a server
answers with (static and dynamic table, Huffman strings), and encoding a request's few headers.

The kubelet's grpc-go Huffman-codes its header values and may index them in the dynamic table,
so both are decoded here; the `hpack` package would do the same for about 0.5 MiB more
resident memory (docs/performance.md). Requests are sent as literals that are never indexed:
the encoder then keeps no state, and the server's table holds nothing of ours.
"""

from __future__ import annotations

Header = tuple[str, str]


class HpackError(Exception):
    """A header block this decoder cannot read (a COMPRESSION_ERROR in HTTP/2's terms)."""


# RFC 7541 Appendix A.
STATIC_TABLE: tuple[Header, ...] = (
    (":authority", ""),
    (":method", "GET"),
    (":method", "POST"),
    (":path", "/"),
    (":path", "/index.html"),
    (":scheme", "http"),
    (":scheme", "https"),
    (":status", "200"),
    (":status", "204"),
    (":status", "206"),
    (":status", "304"),
    (":status", "400"),
    (":status", "404"),
    (":status", "500"),
    ("accept-charset", ""),
    ("accept-encoding", "gzip, deflate"),
    ("accept-language", ""),
    ("accept-ranges", ""),
    ("accept", ""),
    ("access-control-allow-origin", ""),
    ("age", ""),
    ("allow", ""),
    ("authorization", ""),
    ("cache-control", ""),
    ("content-disposition", ""),
    ("content-encoding", ""),
    ("content-language", ""),
    ("content-length", ""),
    ("content-location", ""),
    ("content-range", ""),
    ("content-type", ""),
    ("cookie", ""),
    ("date", ""),
    ("etag", ""),
    ("expect", ""),
    ("expires", ""),
    ("from", ""),
    ("host", ""),
    ("if-match", ""),
    ("if-modified-since", ""),
    ("if-none-match", ""),
    ("if-range", ""),
    ("if-unmodified-since", ""),
    ("last-modified", ""),
    ("link", ""),
    ("location", ""),
    ("max-forwards", ""),
    ("proxy-authenticate", ""),
    ("proxy-authorization", ""),
    ("range", ""),
    ("referer", ""),
    ("refresh", ""),
    ("retry-after", ""),
    ("server", ""),
    ("set-cookie", ""),
    ("strict-transport-security", ""),
    ("transfer-encoding", ""),
    ("user-agent", ""),
    ("vary", ""),
    ("via", ""),
    ("www-authenticate", ""),
)

# RFC 7541 Appendix B, the code length of each symbol (0-255, then 256, EOS). The code is
# canonical (each length's codes follow the shorter ones', in symbol order), so the lengths
# alone give every code: tests/test_hpack.py checks the result against the RFC's examples.
_LENGTHS = bytes.fromhex(
    "0d171c1c1c1c1c1c1c181e1c1c1e1c1c1c1c1c1c1c1c1e1c1c1c1c1c1c1c1c1c"
    "060a0a0c0d06080b0a0a080b080606060505050606060606060607080f060c0a"
    "0d06070707070707070707070707070707070707070707070807080d130d0e06"
    "0f05060506050606060507070606060506070605050607070707070f0b0e0d1c"
    "1416141416161617161717171717181718181617181717171715161716171718"
    "1615141616171715171616181516171715151615171617171416161617161617"
    "1a1a1413161716191a1a1a1b1b1a181913151a1b1b1a1b1815151a1a1c1b1b1b"
    "14181415161515171616191918181a171a1b1a1a1b1b1b1b1b1c1b1b1b1b1b1a"
    "1e"
)


def _huffman_codes() -> dict[tuple[int, int], int]:
    """(length, code) -> symbol, assigned canonically from the lengths."""
    codes: dict[tuple[int, int], int] = {}
    code, previous = -1, min(_LENGTHS)
    for symbol in sorted(range(257), key=lambda s: (_LENGTHS[s], s)):
        length = _LENGTHS[symbol]
        code = (code + 1) << (length - previous)
        previous = length
        codes[(length, code)] = symbol
    return codes


_CODES: dict[tuple[int, int], int] | None = None


def huffman_decode(data: bytes) -> bytes:
    """RFC 7541 5.2: the padding is at most 7 bits, all ones; EOS inside the string is an error."""
    global _CODES
    if _CODES is None:
        _CODES = _huffman_codes()
    out = bytearray()
    code = length = 0
    for byte in data:
        for shift in range(7, -1, -1):
            code = (code << 1) | ((byte >> shift) & 1)
            length += 1
            symbol = _CODES.get((length, code))
            if symbol is not None:
                if symbol == 256:
                    raise HpackError("EOS inside a Huffman-coded string")
                out.append(symbol)
                code = length = 0
            elif length > 30:
                raise HpackError("no Huffman code is that long")
    if length > 7 or code != (1 << length) - 1:
        raise HpackError("a Huffman-coded string padded with other than EOS's first bits")
    return bytes(out)


def _integer(block: bytes, at: int, prefix: int) -> tuple[int, int]:
    """RFC 7541 5.1: an integer in a `prefix`-bit prefix, then 7-bit continuation bytes."""
    if at >= len(block):
        raise HpackError("the header block ends inside an integer")
    limit = (1 << prefix) - 1
    value = block[at] & limit
    at += 1
    if value < limit:
        return value, at
    shift = 0
    while True:
        if at >= len(block):
            raise HpackError("the header block ends inside an integer")
        byte = block[at]
        at += 1
        value += (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, at
        if shift > 28:  # nothing this decoder reads needs more than 2**28
            raise HpackError("an integer past 2**28")


def _string(block: bytes, at: int) -> tuple[str, int]:
    if at >= len(block):
        raise HpackError("the header block ends before a string")
    huffman = bool(block[at] & 0x80)
    length, at = _integer(block, at, 7)
    if at + length > len(block):
        raise HpackError("a string runs past the header block")
    raw = block[at : at + length]
    data = huffman_decode(raw) if huffman else raw
    try:
        return data.decode("utf-8"), at + length
    except UnicodeDecodeError as exc:
        raise HpackError(f"a header that is not UTF-8 ({exc})") from None


class Decoder:
    """One connection's decoding context: the dynamic table persists from block to block."""

    def __init__(self, max_table_size: int = 4096, max_list_size: int = 65536) -> None:
        self.max_table_size = max_table_size  # what our SETTINGS_HEADER_TABLE_SIZE allows
        # A block of one-byte references to a large entry decodes to far more than it is long:
        # the decoded list is bounded as HTTP/2's SETTINGS_MAX_HEADER_LIST_SIZE counts it.
        self.max_list_size = max_list_size
        self._size_limit = max_table_size  # what the encoder last said it uses
        self._table: list[Header] = []  # newest first
        self._size = 0

    def _entry(self, index: int) -> Header:
        if 0 < index <= len(STATIC_TABLE):
            return STATIC_TABLE[index - 1]
        dynamic = index - len(STATIC_TABLE) - 1
        if 0 <= dynamic < len(self._table):
            return self._table[dynamic]
        raise HpackError(f"no table entry {index}")

    def _evict(self) -> None:
        while self._size > self._size_limit and self._table:
            name, value = self._table.pop()
            self._size -= len(name.encode()) + len(value.encode()) + 32

    def _add(self, header: Header) -> None:
        self._table.insert(0, header)
        self._size += len(header[0].encode()) + len(header[1].encode()) + 32
        self._evict()

    def decode(self, block: bytes) -> list[Header]:
        headers: list[Header] = []
        size = 0
        at = 0
        while at < len(block):
            if size > self.max_list_size:
                raise HpackError(f"a header list past {self.max_list_size} bytes")
            first = block[at]
            if first & 0x80:  # indexed (6.1)
                index, at = _integer(block, at, 7)
                headers.append(self._entry(index))
                size += len(headers[-1][0]) + len(headers[-1][1]) + 32
                continue
            if first & 0xE0 == 0x20:  # dynamic table size update (6.3)
                size, at = _integer(block, at, 5)
                if size > self.max_table_size:
                    raise HpackError(f"a table size of {size}, past the {self.max_table_size}")
                self._size_limit = size
                self._evict()
                continue
            # A literal: with incremental indexing (6.2.1, 6-bit index), without (6.2.2) or
            # never indexed (6.2.3), both with a 4-bit index.
            indexing = bool(first & 0x40)
            index, at = _integer(block, at, 6 if indexing else 4)
            if index:
                name = self._entry(index)[0]
            else:
                name, at = _string(block, at)
            value, at = _string(block, at)
            if indexing:
                self._add((name, value))
            headers.append((name, value))
            size += len(name) + len(value) + 32
        if size > self.max_list_size:
            raise HpackError(f"a header list past {self.max_list_size} bytes")
        return headers


def _literal(text: str) -> bytes:
    """A string literal, not Huffman-coded, its length in a 7-bit prefix."""
    data = text.encode()
    return _prefixed(len(data), 7, 0) + data


def _prefixed(value: int, prefix: int, flags: int) -> bytes:
    limit = (1 << prefix) - 1
    if value < limit:
        return bytes([flags | value])
    out = bytearray([flags | limit])
    value -= limit
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_STATIC_NAMES: dict[str, int] = {}
for _index, (_name, _) in enumerate(STATIC_TABLE, start=1):
    _STATIC_NAMES.setdefault(_name, _index)


def encode(headers: list[Header]) -> bytes:
    """Each header a literal without indexing (6.2.2), named by the static table where it has
    the name: no state is kept, on either side."""
    out = bytearray()
    for name, value in headers:
        index = _STATIC_NAMES.get(name)
        if index is not None:
            out += _prefixed(index, 4, 0x00)
        else:
            out += b"\x00" + _literal(name)
        out += _literal(value)
    return bytes(out)
