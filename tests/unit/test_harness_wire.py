"""The harness's HTTP/SSE hot path: the incremental response parser, the raw HTTP pool and the client over it, against
scripted servers on 127.0.0.1 that write exact bytes."""

from __future__ import annotations

import asyncio
import json

import pytest

from tasks.engines import Endpoint
from tasks.harness.client import CompletionClient
from tasks.harness.sse import ProtocolError, ResponseParser
from tasks.harness.wire import HttpPool, post_bytes


def sse(*events: dict | str, sep: str = "\n\n") -> bytes:
    return b"".join(f"data: {e if isinstance(e, str) else json.dumps(e)}{sep}".encode() for e in events)


def chunked(body: bytes, size: int = 7) -> bytes:
    parts = [body[i:i + size] for i in range(0, len(body), size)]
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"


def head(status: int = 200, extra: str = "Transfer-Encoding: chunked\r\n") -> bytes:
    return f"HTTP/1.1 {status} X\r\nContent-Type: text/event-stream\r\n{extra}\r\n".encode()


EVENTS = [{"choices": [{"text": "a", "token_ids": [1]}]}, {"choices": [{"text": "bc", "token_ids": [2, 3]}]},
          {"choices": [], "usage": {"completion_tokens": 3}}, "[DONE]"]
PAYLOADS = [json.dumps(e).encode() if isinstance(e, dict) else e.encode() for e in EVENTS]


def feed_in_pieces(data: bytes, step: int) -> tuple[ResponseParser, list[bytes]]:
    parser, out = ResponseParser(), []
    for i in range(0, len(data), step):
        out += parser.feed(data[i:i + step])
    return parser, out


@pytest.mark.parametrize("step", [1, 2, 3, 5, 64, 100_000])
@pytest.mark.parametrize("framing", ["chunked", "length", "close", "crlf"])
def test_every_split_of_the_bytes_gives_the_same_events(step: int, framing: str) -> None:
    body = sse(*EVENTS, sep="\r\n\r\n" if framing == "crlf" else "\n\n")
    if framing in ("chunked", "crlf"):
        data = head() + chunked(body)
    elif framing == "length":
        data = head(extra=f"Content-Length: {len(body)}\r\n") + body
    else:
        data = head(extra="") + body
    parser, out = feed_in_pieces(data, step)
    out += parser.close()
    assert out == PAYLOADS and parser.done and parser.status == 200
    assert parser.keep_alive == (framing != "close")


def test_one_event_per_read_takes_the_fast_path_and_agrees_with_the_general_one() -> None:
    """A streaming engine writes each event as a chunk of its own; reads of exactly one chunk skip the general
    parser, and anything irregular among them (a chunk extension, two lines, a split chunk) still parses."""
    reads = [head(), b"%x\r\n%s\r\n" % (len(sse(EVENTS[0])), sse(EVENTS[0]))]
    reads.append(b"%x;ext=1\r\n%s\r\n" % (len(sse(EVENTS[1])), sse(EVENTS[1])))       # extension: general path
    two_lines = b"event: x\n" + sse(EVENTS[2])
    reads.append(b"%x\r\n%s\r\n" % (len(two_lines), two_lines))                          # two lines: general path
    last = b"%x\r\n%s\r\n0\r\n\r\n" % (len(sse(EVENTS[3])), sse(EVENTS[3]))
    reads += [last[:5], last[5:]]                                                        # split: general path
    parser, out = ResponseParser(), []
    for data in reads:
        out += parser.feed(data)
    assert out == PAYLOADS and parser.done
    _, bytewise = feed_in_pieces(b"".join(reads), 1)
    assert bytewise == PAYLOADS


def test_general_events_comments_multiline_data_and_no_done() -> None:
    body = (b": keep-alive comment\n\nevent: message\nid: 4\ndata:{\"a\":\ndata: 1}\n\n"
            b"data: {\"b\": 2}\n\n" b"data: {\"c\": 3}")   # the last event has no separator: the body end ends it
    parser, out = feed_in_pieces(head() + chunked(body, 5), 3)
    assert out == [b'{"a":\n1}', b'{"b": 2}', b'{"c": 3}'] and parser.done


def test_non_200_keeps_the_body_and_bad_responses_raise() -> None:
    parser = ResponseParser()
    assert parser.feed(head(404, "Content-Length: 9\r\n") + b"not found") == []
    assert parser.done and parser.status == 404 and bytes(parser.body) == b"not found"
    with pytest.raises(ProtocolError, match="status line"):
        ResponseParser().feed(b"SSH-2.0-OpenSSH\r\n\r\n")
    cut = ResponseParser()
    cut.feed(head() + b"20\r\ndata: {}")
    with pytest.raises(ProtocolError, match="closed before"):
        cut.close()
    with pytest.raises(ProtocolError, match="chunk size"):
        ResponseParser().feed(head() + b"zz\r\n")
    assert post_bytes("/v1/x", b"{}", "h:1").startswith(b"POST /v1/x HTTP/1.1\r\nHost: h:1\r\n")


async def scripted(answers: list[bytes], close_after: bool = False) -> tuple[asyncio.Server, dict]:
    """A server that answers the n-th request with answers[n % len] (each split in two writes); it records the
    requests and the most connections open at once."""
    seen = {"requests": [], "open": 0, "peak": 0, "connections": 0}

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen["open"] += 1
        seen["connections"] += 1
        seen["peak"] = max(seen["peak"], seen["open"])
        try:
            while True:
                head_bytes = await reader.readuntil(b"\r\n\r\n")
                length = int(head_bytes.split(b"Content-Length: ")[1].split(b"\r\n")[0])
                body = await reader.readexactly(length)
                answer = answers[len(seen["requests"]) % len(answers)]
                seen["requests"].append(json.loads(body))
                if not answer:   # close without answering, as a server that dropped an idle connection does
                    break
                writer.write(answer[:len(answer) // 2])
                await writer.drain()
                await asyncio.sleep(0.01)
                writer.write(answer[len(answer) // 2:])
                await writer.drain()
                if close_after:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            seen["open"] -= 1
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, seen


def client_for(server: asyncio.Server, *, nvext: bool = False, concurrency: int = 4) -> CompletionClient:
    port = server.sockets[0].getsockname()[1]
    endpoint = Endpoint(f"http://127.0.0.1:{port}", "m", accepts_token_ids=True, returns_token_ids=True,
                        token_ids_in="nvext" if nvext else "choice")
    return CompletionClient(endpoint, max_tokens=3, temperature=0.0, max_concurrency=concurrency)


def test_client_streams_tokens_calls_first_once_and_reuses_connections() -> None:
    async def main() -> None:
        server, seen = await scripted([head() + chunked(sse(*EVENTS), 11)])
        client = client_for(server, concurrency=2)
        firsts: list[list[int]] = []
        results = await asyncio.gather(*[client.complete((7, i), firsts.append) for i in range(6)])
        await client.aclose()
        server.close()
        for r in results:
            assert (r.tokens, r.text, r.engine_tokens, r.error) == ([1, 2, 3], "abc", 3, None)
        assert firsts == [[1]] * 6
        assert seen["peak"] <= 2 and seen["connections"] == 2 and len(seen["requests"]) == 6
        assert seen["requests"][0] == {"model": "m", "prompt": [7, 0], "max_tokens": 3, "temperature": 0.0,
                                       "stream": True, "stream_options": {"include_usage": True},
                                       "return_token_ids": True}

    asyncio.run(main())


def test_client_reads_dynamo_nvext_token_ids() -> None:
    events = [{"choices": [{"delta": {"content": "x"}}], "nvext": {"completion_token_ids": [9]}},
              {"choices": [{"delta": {"content": "y"}}], "nvext": {"completion_token_ids": [8]}}]

    async def main() -> None:
        server, _ = await scripted([head() + chunked(sse(*events))])   # no [DONE]: the body's end ends it
        client = client_for(server, nvext=True)
        result = await client.send("/v1/chat/completions", {"messages": []}, prepared=True)
        await client.aclose()
        server.close()
        assert (result.tokens, result.text, result.error) == ([9, 8], "xy", None)

    asyncio.run(main())


def test_error_event_non_200_and_a_dead_server_become_errors() -> None:
    error = head() + chunked(sse(EVENTS[0], {"error": {"message": "boom", "code": 500}}, "[DONE]"))
    refused = head(400, "Content-Type: application/json\r\nContent-Length: 24\r\n") + b'{"detail":"bad request"}'

    async def main() -> None:
        server, _ = await scripted([error, refused])
        client = client_for(server, concurrency=1)
        first = await client.complete((1,))
        second = await client.complete((1,))
        await client.aclose()
        server.close()
        assert first.error is not None and "boom" in first.error and first.tokens == []
        assert second.error == 'HTTP 400: {"detail":"bad request"}'
        dead = CompletionClient(Endpoint("http://127.0.0.1:9", "m", True, True), max_tokens=1, temperature=0.0,
                                max_concurrency=1)
        gone = await dead.complete((1,))
        assert gone.error is not None and "Error" in gone.error

    asyncio.run(main())


def test_a_keep_alive_connection_the_server_closed_is_replaced() -> None:
    async def main() -> None:
        server, seen = await scripted([head() + chunked(sse(*EVENTS))], close_after=True)
        client = client_for(server, concurrency=1)
        results = [await client.complete((i,)) for i in range(3)]
        await client.aclose()
        server.close()
        assert [r.error for r in results] == [None] * 3 and seen["connections"] == 3

    asyncio.run(main())


def test_a_request_the_server_drops_unanswered_is_sent_again_once() -> None:
    ok = head() + chunked(sse(*EVENTS))

    async def main() -> None:
        server, seen = await scripted([ok, b"", ok])
        client = client_for(server, concurrency=1)
        results = [await client.complete((i,)) for i in range(2)]
        server2, seen2 = await scripted([b""])
        never = client_for(server2, concurrency=1)
        dropped = await never.complete((1,))
        for c in (client, never):
            await c.aclose()
        server.close()
        server2.close()
        assert [r.error for r in results] == [None, None] and seen["connections"] == 2 and len(seen["requests"]) == 3
        assert dropped.error is not None and len(seen2["requests"]) == 2   # one retry, then the error

    asyncio.run(main())


def test_only_http_urls_are_accepted() -> None:
    from submission.base.errors import LaunchError

    with pytest.raises(LaunchError, match="plain http"):
        HttpPool("https://example.com", max_connections=1)
