"""A short load on a real framezip-server, for the monitoring tests: a few sessions with a video,
a few turns each (with the server's KV budget small enough that some sessions are evicted to the
KV store and restored), sessions with ZipVL (4/2-bit KV) and without compression (f16 KV), and
a few requests that fail on purpose (an unknown session: NOT_FOUND; a turn too big for the KV
budget: RESOURCE_EXHAUSTED), so every series the dashboard and the alerts read has data.

Uses the gRPC stubs of examples/python/chat_client.py (generated from proto/ at start), on
Debian's python3-grpcio.
"""

import os
import sys
import tempfile
import time

import grpc

SOURCE_DIR = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, os.path.join(SOURCE_DIR, "examples", "python"))
import chat_client  # noqa: E402  (the example's stub generation and upload helper)


def _chat(stub, pb2, session_id, text, max_tokens=0):
    """One turn; returns (status code name, stats or None)."""
    request = pb2.ChatRequest(session_id=session_id, text=text)
    if max_tokens:
        request.sampling.max_tokens = max_tokens
    stats = None
    try:
        for response in stub.Chat(request, timeout=300):
            if response.WhichOneof("event") == "stats":
                stats = response.stats
    except grpc.RpcError as e:
        return e.code().name, None
    return "OK", stats


def fail_on_purpose(stub, pb2, session_id, count):
    """An unknown session (NOT_FOUND) and a turn whose KV can never fit the server's budget
    (RESOURCE_EXHAUSTED "KV budget exceeded")."""
    code, _ = _chat(stub, pb2, "no-such-session", "Hello?")
    count(code)
    code, _ = _chat(stub, pb2, session_id, "Tell me everything.", max_tokens=4096)
    count(code)


def run_load(address, clip, log=print, pause_seconds=0.0):
    """Drives the load; returns a summary dict (turns by status, restored turns). pause_seconds
    between the rounds of follow-up turns lets a scraper see the series the first round creates
    (a histogram series born with its first observations shows no increase until the next)."""
    summary = {"turns": {}, "restored": 0, "cached": 0, "sessions": 0}

    def count(code):
        summary["turns"][code] = summary["turns"].get(code, 0) + 1

    with tempfile.TemporaryDirectory() as gen_dir:
        pb2, pb2_grpc = chat_client.load_stubs(gen_dir)
        channel = grpc.insecure_channel(address)
        stub = pb2_grpc.VideoChatStub(channel)
        # The server offers its --default-policy (the test runs it with zipvl) and none.
        policies = [pb2.POLICY_KIND_UNSPECIFIED, pb2.POLICY_KIND_UNSPECIFIED,
                    pb2.POLICY_KIND_UNSPECIFIED, pb2.POLICY_KIND_NONE]
        sessions = []
        for kind in policies:
            request = pb2.CreateSessionRequest(system_prompt="You are terse.")
            request.policy.kind = kind
            request.frames.num_frames = 4
            request.sampling.temperature = 0
            request.sampling.max_tokens = 8
            session = stub.CreateSession(request, timeout=30)
            chat_client.upload(stub, pb2, session.session_id, clip, [])
            sessions.append(session.session_id)
            summary["sessions"] += 1
            code, _ = _chat(stub, pb2, session.session_id, "What moves?")
            count(code)
            if len(sessions) == 1:
                fail_on_purpose(stub, pb2, session.session_id, count)
        # Follow-up turns: the earlier sessions were evicted from engine memory under the small
        # KV budget and restore their prefix from the store.
        for round_index, question in enumerate(("And then?", "What colour is it?")):
            if round_index:
                time.sleep(pause_seconds)
            for session_id in sessions:
                code, stats = _chat(stub, pb2, session_id, question)
                count(code)
                if stats is not None:
                    summary["cached"] += int(stats.cached_tokens > 0)
                    summary["restored"] += int(stats.kv_restore_seconds > 0)
        # The same failures again, after the pause: their series (born at the first ones) now
        # grow, so rates over them show the errors.
        fail_on_purpose(stub, pb2, sessions[0], count)
        for session_id in sessions[1:]:
            stub.DeleteSession(pb2.DeleteSessionRequest(session_id=session_id), timeout=30)
        channel.close()
    log(f"load: {summary}")
    return summary


def one_turn(address, clip, keep_session=False):
    """One session with the video and one turn; returns the turn's status code name. The session
    is deleted after, unless `keep_session`."""
    with tempfile.TemporaryDirectory() as gen_dir:
        pb2, pb2_grpc = chat_client.load_stubs(gen_dir)
        channel = grpc.insecure_channel(address)
        stub = pb2_grpc.VideoChatStub(channel)
        request = pb2.CreateSessionRequest()
        request.frames.num_frames = 4
        request.sampling.max_tokens = 8
        session = stub.CreateSession(request, timeout=30)
        chat_client.upload(stub, pb2, session.session_id, clip, [])
        code, _ = _chat(stub, pb2, session.session_id, "What moves?")
        if not keep_session:
            stub.DeleteSession(pb2.DeleteSessionRequest(session_id=session.session_id), timeout=30)
        channel.close()
    return code


def queue_burst(address, clients, seconds, max_tokens=256, started=None):
    """`clients` callers asking stateless turns (Generate: no session to create or delete) one
    after the other for `seconds`: with the server running one turn at a time, the others wait,
    and the wait queue holds about clients - 1 turns the whole time. That holds only while a
    turn costs the server more than it costs the caller, whose 24 threads share one Python
    interpreter: each turn decodes `max_tokens` tokens (ignore_eos) without compression, where
    the caller's cost is mostly per turn, not per token (with 32-token turns a fast server
    outran the callers and the queue stayed at 4). Sets the threading.Event `started` (if
    given) when the callers start, after the stubs are generated (protoc, seconds on a busy
    machine). Returns the turns' status codes."""
    import threading
    codes = {}
    lock = threading.Lock()
    with tempfile.TemporaryDirectory() as gen_dir:
        pb2, pb2_grpc = chat_client.load_stubs(gen_dir)
        channel = grpc.insecure_channel(address)
        stub = pb2_grpc.VideoChatStub(channel)
        deadline = time.monotonic() + seconds
        request = pb2.GenerateRequest()
        # Uncompressed: a turn's KV is what its tokens hold, so 256 of them fit the test
        # server's small budget (a compressing policy reserves room in each of its formats).
        request.policy.kind = pb2.POLICY_KIND_NONE
        request.sampling.max_tokens = max_tokens
        request.sampling.ignore_eos = True
        request.messages.add(role=pb2.ROLE_USER).content.add(text="Count to ten.")

        def caller():
            while time.monotonic() < deadline:
                try:
                    for _ in stub.Generate(request, timeout=300):
                        pass
                    code = "OK"
                except grpc.RpcError as e:
                    code = e.code().name
                with lock:
                    codes[code] = codes.get(code, 0) + 1

        threads = [threading.Thread(target=caller) for _ in range(clients)]
        for t in threads:
            t.start()
        if started is not None:
            started.set()
        for t in threads:
            t.join()
        channel.close()
    return codes


def overload(address, clip, turns):
    """One session, then `turns` turns that can never fit the server's KV budget: each ends
    RESOURCE_EXHAUSTED ("KV budget exceeded"), as turns do on a server out of capacity."""
    codes = {}
    with tempfile.TemporaryDirectory() as gen_dir:
        pb2, pb2_grpc = chat_client.load_stubs(gen_dir)
        channel = grpc.insecure_channel(address)
        stub = pb2_grpc.VideoChatStub(channel)
        session = stub.CreateSession(pb2.CreateSessionRequest(), timeout=30)
        chat_client.upload(stub, pb2, session.session_id, clip, [])
        for _ in range(turns):
            code, _ = _chat(stub, pb2, session.session_id, "Tell me everything.", max_tokens=4096)
            codes[code] = codes.get(code, 0) + 1
        stub.DeleteSession(pb2.DeleteSessionRequest(session_id=session.session_id), timeout=30)
        channel.close()
    return codes


if __name__ == "__main__":
    print(run_load(sys.argv[1], sys.argv[2]))
