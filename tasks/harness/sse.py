"""An incremental HTTP/1.1 response parser that hands out server-sent-event payloads as they complete.

Bytes go in as they come off the socket (`feed`); out come the `data:` payloads of every event completed by them,
with the transfer framing (chunked, Content-Length, or read until close) removed and events split across reads
joined again. `[DONE]` is a payload like any other: the caller decides what it means. Pure: no I/O, no asyncio.

    parser = ResponseParser()
    for payload in parser.feed(data):    # b'{"choices": [...]}', b'[DONE]'
        ...
    parser.done                          # the whole response has been read; parser.status, parser.keep_alive
"""

from __future__ import annotations

HEAD, BODY, CHUNK_SIZE, CHUNK_DATA, TRAILER, DONE = range(6)
MAX_HEAD = 64 * 1024
ERROR_BODY_KEPT = 4096


class ProtocolError(ValueError):
    """The peer sent something that is not an HTTP/1.1 response."""


class ResponseParser:
    def __init__(self) -> None:
        self.state = HEAD
        self.status = 0
        self.headers: dict[str, str] = {}
        self.keep_alive = True
        self.chunked = False
        self.remaining = -1        # body bytes left (Content-Length) or in the current chunk; -1: until close
        self.buf = b""             # unparsed bytes of the head or of chunk framing
        self.pending = b""         # body bytes of an event not yet complete
        self.body = bytearray()    # the start of a non-200 body, for the error message
        self.sep = b""             # the event separator, learnt from the first line ending

    @property
    def done(self) -> bool:
        return self.state == DONE

    def feed(self, data: bytes) -> list[bytes]:
        """The payloads of the events completed by `data`."""
        if self.state == CHUNK_SIZE and self.sep == b"\n\n" and not (self.buf or self.pending):
            # The common case of a streaming engine: one read = one chunk = one `data: ...` event. Checked, not
            # assumed: anything else (chunk extensions, several lines, a partial chunk) takes the general path.
            nl = data.find(b"\r\n", 0, 10)
            if nl > 0 and data.endswith(b"\n\n\r\n") and data.startswith(b"data: ", nl + 2):
                try:
                    size = int(data[:nl], 16)
                except ValueError:
                    size = -1
                if size == len(data) - nl - 4 and data.find(b"\n", nl + 2) == len(data) - 4:
                    return [data[nl + 8:-4]]
        out: list[bytes] = []
        if self.state == HEAD:
            data = self._head(data)
        if not data or self.state == DONE:
            return out
        if self.chunked:
            body, ended = self._dechunk(data)
        elif self.remaining >= 0:
            body = data[:self.remaining]
            self.remaining -= len(body)
            ended = self.remaining == 0
        else:
            body, ended = data, False
        if body:
            self._body(body, out)
        if ended:
            self._finish(out)
        return out

    def _dechunk(self, data: bytes) -> tuple[bytes, bool]:
        """The chunk data in `data` (joined) and whether the last chunk and trailer were seen. Walks `data` by index:
        a whole answer in one read is never copied more than once."""
        if self.buf:
            data, self.buf = self.buf + data, b""
        parts: list[bytes] = []
        pos, end = 0, len(data)
        while pos < end:
            if self.state == CHUNK_DATA:
                take = min(self.remaining, end - pos)
                parts.append(data[pos:pos + take])
                pos += take
                self.remaining -= take
                if self.remaining == 0:
                    self.state = CHUNK_SIZE
                continue
            nl = data.find(b"\r\n", pos)
            if nl < 0:
                self.buf = data[pos:]
                if len(self.buf) > MAX_HEAD:
                    raise ProtocolError("chunk framing line over 64 KiB")
                break
            line, pos = data[pos:nl], nl + 2
            if self.state == TRAILER:
                if not line:
                    return b"".join(parts), True
                continue
            if not line:   # the CRLF that ends a chunk's data
                continue
            try:
                size = int(line.split(b";", 1)[0], 16)
            except ValueError:
                raise ProtocolError(f"bad chunk size line {line[:40]!r}") from None
            if size == 0:
                self.state = TRAILER
            else:
                self.state, self.remaining = CHUNK_DATA, size
        return b"".join(parts) if len(parts) != 1 else parts[0], False

    def close(self) -> list[bytes]:
        """The connection closed: the events a read-until-close body still held; raises when a framed body was cut."""
        if self.state == DONE:
            return []
        if self.state == BODY and not self.chunked and self.remaining < 0:
            out: list[bytes] = []
            self._finish(out)
            return out
        raise ProtocolError("the connection closed before the response was complete")

    def _head(self, data: bytes) -> bytes:
        self.buf += data
        end = self.buf.find(b"\r\n\r\n")
        if end < 0:
            if len(self.buf) > MAX_HEAD:
                raise ProtocolError("response head over 64 KiB")
            return b""
        head, rest = self.buf[:end].decode("latin-1"), self.buf[end + 4:]
        self.buf = b""
        lines = head.split("\r\n")
        parts = lines[0].split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
            raise ProtocolError(f"not an HTTP/1.x status line: {lines[0][:80]!r}")
        self.status = int(parts[1])
        for line in lines[1:]:
            key, _, value = line.partition(":")
            self.headers[key.strip().lower()] = value.strip()
        connection = self.headers.get("connection", "").lower()
        self.keep_alive = connection != "close" and (parts[0] != "HTTP/1.0" or connection == "keep-alive")
        if "chunked" in self.headers.get("transfer-encoding", "").lower():
            self.chunked, self.state = True, CHUNK_SIZE
        elif "content-length" in self.headers:
            self.remaining, self.state = int(self.headers["content-length"]), BODY
            if self.remaining == 0:
                self.state = DONE
        else:
            self.keep_alive, self.state = False, BODY   # read until the server closes
        return rest

    def _body(self, data: bytes, out: list[bytes]) -> None:
        if self.status != 200:
            if len(self.body) < ERROR_BODY_KEPT:
                self.body += data[:ERROR_BODY_KEPT - len(self.body)]
            return
        if not self.sep:
            nl = (self.pending + data).find(b"\n")
            if nl < 0:
                self.pending += data
                return
            self.sep = b"\r\n\r\n" if nl > 0 and (self.pending + data)[nl - 1:nl] == b"\r" else b"\n\n"
        pending = self.pending + data if self.pending else data
        sep = self.sep
        start = 0
        while (end := pending.find(sep, start)) >= 0:
            block = pending[start:end]
            start = end + len(sep)
            if block[:6] == b"data: " and b"\n" not in block:   # the common case: one data line
                out.append(block[6:])
            elif block:
                _event(block, out)
        self.pending = pending[start:]

    def _finish(self, out: list[bytes]) -> None:
        if self.pending.strip() and self.status == 200:
            _event(self.pending, out)
        self.pending = b""
        self.state = DONE


def _event(block: bytes, out: list[bytes]) -> None:
    """The general case of an event: several lines, comments, `event:`/`id:` fields, `data:` with or without a
    space; a data payload split over several lines is joined with newlines, as the SSE standard says."""
    data = [line[5:].removeprefix(b" ") for line in block.replace(b"\r\n", b"\n").split(b"\n")
            if line.startswith(b"data:")]
    if data:
        out.append(b"\n".join(data))
