"""The gateway's serving threads (`gateway.threads`): each has its own event loop and its own
upstream connections, calls on every thread share one budget, a shutdown still waits for a
call whose client went away while the provider worked (it is billed, not dropped), and no
connection the kernel accepted for the gateway is reset when the drain ends."""

from __future__ import annotations

import json
import socket
import threading
import time

import httpx
import pytest
import usage_guard as ug
from provider_support import reserved, used
from test_gateway import ALICE, MESSAGES, at_once_within_budget, gateway_policy


def start(fake_provider, threads: int, **kw) -> tuple[ug.Guard, ug.Gateway]:  # type: ignore[no-untyped-def]
    document = gateway_policy(fake_provider, **kw)
    document["gateway"]["threads"] = threads
    guard = ug.Guard(ug.Policy.from_dict(document))
    return guard, ug.Gateway(guard, "127.0.0.1:0")


@pytest.mark.parametrize("threads", [1, 3])
def test_calls_on_every_thread_share_one_budget(fake, threads):
    """Many connections at once (spread over the threads by whoever accepts first): what is
    billed stays within the budget and equals what the calls reported."""
    guard, gateway = start(fake, threads, tokens_a_day=900)
    fake.output_tokens = 200
    try:
        at_once_within_budget(guard, gateway, 24)
    finally:
        gateway.shutdown()
        assert gateway.wait(10)


def test_shutdown_waits_for_a_call_whose_client_went_away(fake):
    """The client gives up while the provider works; the gateway is then shut down. The call
    runs on to the provider's answer and is billed from its usage (a serving thread's event
    loop is not torn down under it)."""
    guard, gateway = start(fake, 2)
    fake.delay = 1.0
    with pytest.raises(httpx.TimeoutException):
        httpx.post(
            f"{gateway.url}/v1/chat/completions",
            headers={"authorization": f"Bearer {ALICE}"},
            json={"model": "gpt-4o", "messages": MESSAGES, "max_tokens": 50},
            timeout=0.3,
        )
    assert reserved(guard, "alice", "gpt-4o") > 0
    gateway.shutdown()
    assert gateway.wait(10)
    deadline = time.monotonic() + 5
    while reserved(guard, "alice", "gpt-4o") and time.monotonic() < deadline:
        time.sleep(0.02)
    assert used(guard, "alice", "gpt-4o") == 21 + 12
    assert reserved(guard, "alice", "gpt-4o") == 0


def call_once(address: tuple[str, int]) -> str:
    """One call on a new connection: "refused" when the connect is refused, the answer's
    status when a whole answer came (its body as long as it said), else what went wrong."""
    request = json.dumps({"model": "gpt-4o", "messages": MESSAGES}).encode()
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nhost: {address[0]}\r\n"
        f"authorization: Bearer {ALICE}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(request)}\r\nconnection: close\r\n\r\n"
    ).encode()
    with socket.socket() as s:
        s.settimeout(20)  # a SYN the kernel dropped is sent again after a second
        try:
            s.connect(address)
        except ConnectionRefusedError:
            return "refused"
        got = b""
        try:
            s.sendall(head + request)
            while chunk := s.recv(65536):
                got += chunk
        except OSError as e:
            return f"accepted, then {e!r} after {got[:40]!r}"
    header, _, body = got.partition(b"\r\n\r\n")
    lines = header.decode("latin-1").split("\r\n")
    length = [
        int(v) for k, _, v in (x.partition(":") for x in lines[1:]) if k.lower() == "content-length"
    ]
    if not lines[0].startswith("HTTP/1.1 ") or length != [len(body)]:
        return f"accepted, then cut: {got[:80]!r}"
    return lines[0].split(" ")[1]


def test_clients_connecting_through_the_end_of_a_drain_are_answered_or_refused(fake):
    """Clients keep opening connections and calling while a drain runs (a call the provider
    holds) and as it ends. Each one is answered whole (503 while draining) or refused its
    connect: none is accepted and then reset or closed without an answer. Closing a
    listener resets the connections the kernel queued on it, and a serving thread that ends
    early drops the connections it took: the threads stop taking new ones together, the
    kernel stops completing them first, and what it had queued is answered."""
    _, gateway = start(fake, 2)
    host, port = gateway.url.removeprefix("http://").rsplit(":", 1)
    address = (host, int(port))
    fake.delay = 1.0
    held: list[int] = []
    slow = threading.Thread(
        target=lambda: held.append(
            httpx.post(
                f"{gateway.url}/v1/chat/completions",
                headers={"authorization": f"Bearer {ALICE}"},
                json={"model": "gpt-4o", "messages": MESSAGES},
                timeout=20,
            ).status_code
        )
    )
    slow.start()
    while not fake.bodies("/v1/chat/completions"):  # the held call reached the provider
        time.sleep(0.01)
    gateway.shutdown()
    outcomes: list[str] = []

    def client() -> None:
        while (outcome := call_once(address)) != "refused":
            outcomes.append(outcome)
        outcomes.append(outcome)

    clients = [threading.Thread(target=client) for _ in range(8)]
    for c in clients:
        c.start()
    for c in clients:
        c.join(60)
    slow.join(20)
    assert gateway.wait(10)
    assert held == [200]
    assert [o for o in outcomes if o not in ("503", "refused")] == []
    assert outcomes.count("refused") == 8 and outcomes.count("503") > 8


def test_threads_must_be_a_whole_number_in_range():
    for bad in (0, 257, 2.5, "2", True):
        with pytest.raises(ug.PolicyError) as e:
            ug.Policy.from_dict({"gateway": {"threads": bad}})
        assert "gateway.threads: must be a whole number from 1 to 256" in str(e.value)
