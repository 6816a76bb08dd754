"""What the content server serves, apart from the server: the tests compare with it without
importing the `mcp` SDK (a second of CPU) where they start no server."""

from __future__ import annotations

import struct
import zlib

NOTE_TEXT = "Meeting notes: ship the release on Friday.\n"


def png(width: int = 2, height: int = 2) -> bytes:
    """A real, valid PNG (grey pixels): providers check what they are sent."""
    row = b"\x00" + b"\x80" * width
    raw = zlib.compress(row * height)

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", raw) + chunk(b"IEND", b"")


PNG = png()
