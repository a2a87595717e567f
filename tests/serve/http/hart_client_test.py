"""python/hart_client against a real `hart serve --http-bind ... --api-key KEY`: every method,
the errors it raises (the server's 4xx with their status and message, no server, a silent
server, a stream cut short or failing mid-way, from a fake server), and the examples in
python/examples run as a user runs them, rl_loop.py for two iterations end to end.

Usage: python3 hart_client_test.py http://127.0.0.1:PORT API_KEY MODEL_DIR PYTHON_DIR
  MODEL_DIR: the served checkpoint; PYTHON_DIR: the repository's python/ (the package and examples)
"""
import ast
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

BASE, KEY, MODEL, PYTHON_DIR = sys.argv[1:5]
EXAMPLES = Path(PYTHON_DIR) / "examples"
sys.path.insert(0, PYTHON_DIR)
sys.path.insert(0, str(EXAMPLES))

import safetensors_io  # noqa: E402
from hart_client import ChatResult, GenerateResult, HartClient, HartConnectionError, HartError  # noqa: E402

client = HartClient(BASE, api_key=KEY, timeout=120)
PROMPT = [5, 6, 7, 8]
LONG = {"max_new_tokens": 100000, "ignore_eos": True, "temperature": 0}  # runs until aborted


def greedy(n, **extra):
    return {"max_new_tokens": n, "temperature": 0, **extra}


def expect_error(call, status, text):
    try:
        call()
    except HartError as e:
        assert e.status == status and text in e.message, (status, text, e.status, e.message)
        return e
    raise AssertionError(f"no HartError {status} ({text})")


def wait_until(cond, what, seconds=20):
    deadline = time.time() + seconds
    while not cond():
        assert time.time() < deadline, what
        time.sleep(0.01)


def total_reqs():
    return client.loads()["aggregate"]["total_reqs"]


def counter(name):
    for line in client.metrics().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"no {name} in /metrics")


class background:
    """A call on a thread: its result (or exception) once joined. A daemon, so that a failed
    assertion exits at once instead of waiting for a generation that runs until aborted."""

    def __init__(self, fn):
        self.result = self.error = None
        self.thread = threading.Thread(target=self._run, args=(fn,), daemon=True)
        self.thread.start()

    def _run(self, fn):
        try:
            self.result = fn()
        except Exception as e:
            self.error = e

    def join(self):
        self.thread.join(60)
        assert not self.thread.is_alive() and self.error is None, self.error
        return self.result


class stream:
    """generate_stream on a thread: its chunks, and an event at the first."""

    def __init__(self, **request):
        self.chunks, self.first = [], threading.Event()
        self.call = background(lambda: [self._keep(c) for c in client.generate_stream(**request)])

    def _keep(self, chunk):
        self.chunks.append(chunk)
        self.first.set()

    def join(self):
        self.call.join()
        return self.chunks[-1]


def test_info_and_auth():
    anonymous = HartClient(BASE)
    assert anonymous.health(), "/health needs no key"
    expect_error(anonymous.weight_version, 401, "API key")
    assert client.health() and client.health(generate=True)
    assert client.weight_version() == "0"
    info = client.model_info()
    assert info["model_path"] == MODEL and info["is_generation"] and info["weight_version"] == "0", info
    server = client.server_info()
    assert server["model_path"] == MODEL and server["weight_version"] == "0" and server["internal_states"], server
    assert client.models() == [Path(MODEL).name]
    assert client.loads()["aggregate"]["total_reqs"] == 0
    assert "# TYPE hart_generated_tokens_total counter" in client.metrics()


def test_generate():
    before = counter("hart_generated_tokens_total")
    out = client.generate(input_ids=PROMPT, sampling_params=greedy(6), return_logprob=True, top_logprobs_num=2,
                          rid="g-1")
    assert isinstance(out, GenerateResult) and len(out.output_ids) == 6 and isinstance(out.text, str), out
    assert out.rid == "g-1" and out.finish_reason == "length" and out.weight_version == "0", out
    assert out.prompt_tokens == len(PROMPT) and out.completion_tokens == 6 and out.cached_tokens == 0, out
    assert len(out.output_token_logprobs) == 6 and all(lp <= 0 for lp in out.output_token_logprobs), out
    # Greedy: each token is the most likely one, with its own log-prob.
    assert [top[0] for top in out.output_top_logprobs] == list(zip(out.output_token_logprobs, out.output_ids))
    assert all(len(top) == 2 for top in out.output_top_logprobs)
    assert out.meta_info["finish_reason"] == {"type": "length", "length": 6}
    assert counter("hart_generated_tokens_total") == before + 6

    plain = client.generate(input_ids=PROMPT, sampling_params=greedy(6))
    assert plain.output_ids == out.output_ids and plain.output_token_logprobs == [] and plain.rid != "g-1"

    # Routing replay: [position][layer][k] expert ids of tiny-a (6 layers, top-2 of 8), from position 2.
    routed = client.generate(input_ids=PROMPT, sampling_params=greedy(4), return_routed_experts=True,
                             routed_experts_start_len=2)
    experts = routed.routed_experts(layers=6, k=2)
    assert routed.output_ids == out.output_ids[:4], routed
    assert len(experts) == len(PROMPT) + 4 - 1 - 2, len(experts)  # every position fed: the last token is not
    assert all(len(layer) == 2 and all(0 <= e < 8 for e in layer) for pos in experts for layer in pos), experts
    assert plain.routed_experts(layers=6, k=2) is None
    try:  # 12 ids per position do not divide into positions of 7 layers x 2
        routed.routed_experts(layers=7, k=2)
        raise AssertionError("a shape that does not divide the ids was accepted")
    except ValueError:
        pass

    # Scoring: a greedy answer's log-probs are its tokens' prompt log-probs once appended.
    scored = client.score(PROMPT + out.output_ids)
    assert len(scored) == len(PROMPT) + 6 and scored[0] is None, scored
    assert all(abs(a - b) < 1e-4 for a, b in zip(scored[len(PROMPT):], out.output_token_logprobs)), scored
    assert client.score(PROMPT + out.output_ids, logprob_start_len=len(PROMPT)) == scored[len(PROMPT):]
    expect_error(lambda: client.score(PROMPT, logprob_start_len=len(PROMPT)), 400, "logprob_start")

    text = client.generate(text="hello", sampling_params=greedy(3))
    assert text.prompt_tokens > 0 and len(text.output_ids) == 3

    many = client.generate(input_ids=PROMPT, sampling_params={"max_new_tokens": 3, "n": 2, "sampling_seed": 1})
    assert isinstance(many, list) and [s.index for s in many] == [0, 1] and all(len(s.output_ids) == 3 for s in many)

    # The prefix cache, and flush_cache emptying it: a prompt of more than a page (128 tokens).
    long = [(7 * i) % 400 + 10 for i in range(300)]
    client.generate(input_ids=long, sampling_params=greedy(2))
    assert client.generate(input_ids=long, sampling_params=greedy(2)).cached_tokens >= 128
    client.flush_cache()
    assert client.generate(input_ids=long, sampling_params=greedy(2)).cached_tokens == 0
    return out


def test_generate_stream(whole):
    chunks = list(client.generate_stream(input_ids=PROMPT, sampling_params=greedy(6), return_logprob=True))
    assert len(chunks) >= 6 and all(isinstance(c, GenerateResult) for c in chunks)
    for a, b in zip(chunks, chunks[1:]):
        assert b.output_ids[:len(a.output_ids)] == a.output_ids, "chunks are cumulative"
        assert b.output_token_logprobs[:len(a.output_token_logprobs)] == a.output_token_logprobs
    assert all(c.finish_reason is None for c in chunks[:-1]) and chunks[-1].finish_reason == "length"
    last = chunks[-1]
    assert (last.output_ids, last.text, last.output_token_logprobs) == \
        (whole.output_ids, whole.text, whole.output_token_logprobs)

    two = list(client.generate_stream(input_ids=PROMPT, sampling_params={"max_new_tokens": 3, "n": 2}))
    finals = {c.index: c for c in two if c.finish_reason}
    assert sorted(finals) == [0, 1] and all(len(c.output_ids) == 3 for c in finals.values()), two


def test_chat():
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "Hello"}]
    params = {"max_tokens": 5, "temperature": 0, "ignore_eos": True}
    out = client.chat(messages, logprobs=True, **params)
    assert isinstance(out, ChatResult) and out.weight_version == "0", out
    choice = out.choices[0]
    assert out.content == choice.content and choice.finish_reason == "length" and choice.reasoning_content is None
    assert len(choice.logprobs) == 5 and out.usage["completion_tokens"] == 5, out
    assert out.usage["total_tokens"] == out.usage["prompt_tokens"] + 5

    deltas = list(client.chat_stream(messages, **params))
    assert "".join(d.content for d in deltas) == out.content, (deltas, out.content)
    assert [d.finish_reason for d in deltas if d.finish_reason] == ["length"]
    assert deltas[-1].index is None and deltas[-1].usage == out.usage, deltas[-1]
    assert all(d.usage is None for d in list(client.chat_stream(messages, include_usage=False, **params)))

    thinking = client.chat(messages, chat_template_kwargs={"thinking": True}, **params)
    assert thinking.choices[0].reasoning_content is not None, "a choice that never closes its thinking is all reasoning"


def test_server_errors():
    cases = [
        (lambda: client.generate(input_ids=[5], text="x"), 400, "exactly one"),
        (lambda: client.generate(input_ids=[5], sampling_params={"bogus": 1}), 400, "bogus"),
        (lambda: client.generate(input_ids=[5], lora_path="x"), 400, "lora_path"),
        (lambda: next(client.generate_stream(text="x", sampling_params={"temperature": -1})), 400, "temperature"),
        (lambda: client.chat([{"role": "bot", "content": "x"}]), 400, "role"),
        (lambda: client.chat([{"role": "user", "content": "x"}], model="nope"), 404, "nope"),
        (lambda: next(client.chat_stream([{"role": "user", "content": "x"}], tools=[{"type": "function"}])), 400,
         "tools"),
        (lambda: client.abort(), 400, "rid"),
        (lambda: client.pause(mode="sideways"), 400, "mode"),
        (lambda: client.update_weights_from_disk("/no/such/checkpoint"), 404, "/no/such/checkpoint"),
        (lambda: client.update_weights_from_disk(MODEL, weight_version="0"), 400, "positive integer"),
        (lambda: client.update_weight_version("v8"), 400, "new_version"),
    ]
    for call, status, text in cases:
        e = expect_error(call, status, text)
        assert isinstance(e.body, dict) and e.body["error"]["message"] == e.message, e.body
        assert client.weight_version() == "0" and total_reqs() == 0
    assert len(client.generate(input_ids=PROMPT, sampling_params=greedy(2)).output_ids) == 2


def fake_server(answer):
    """A port where one connection gets `answer` (raw bytes), then the end of the stream."""
    listener = socket.create_server(("127.0.0.1", 0))

    def serve():
        conn, _ = listener.accept()
        with conn, listener:
            conn.recv(65536)
            conn.sendall(answer)
            conn.shutdown(socket.SHUT_WR)
            # Closing with request bytes unread would reset the connection instead of ending it.
            while conn.recv(65536):
                pass

    threading.Thread(target=serve, daemon=True).start()
    return f"http://127.0.0.1:{listener.getsockname()[1]}"


def test_client_errors():
    with socket.create_server(("127.0.0.1", 0)) as s:
        closed_port = s.getsockname()[1]
    e = expect_error(lambda: HartClient(f"http://127.0.0.1:{closed_port}").weight_version(), None, "refused")
    assert isinstance(e, HartConnectionError)

    with socket.create_server(("127.0.0.1", 0)) as silent:  # accepts (backlog), never answers
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        t0 = time.time()
        e = expect_error(lambda: HartClient(url, timeout=0.3).health(), None, "timed out")
        assert isinstance(e, HartConnectionError) and time.time() - t0 < 5

    chunk = (b'data: {"text": "a", "output_ids": [7], "meta_info": {"finish_reason": null, "weight_version": "0", '
             b'"prompt_tokens": 1, "completion_tokens": 1, "cached_tokens": 0, "id": "f"}}\n\n')
    sse = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
    got = []
    cut = HartClient(fake_server(sse + chunk))
    e = expect_error(lambda: got.extend(cut.generate_stream(input_ids=[1])), None, "without data: [DONE]")
    assert isinstance(e, HartConnectionError) and [c.output_ids for c in got] == [[7]]

    failing = HartClient(fake_server(sse + chunk + b'data: {"error": {"message": "engine failed"}}\n\ndata: [DONE]\n\n'))
    expect_error(lambda: list(failing.generate_stream(input_ids=[1])), 200, "engine failed")

    proxy = HartClient(fake_server(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 11\r\n\r\nbad gateway"))
    e = expect_error(proxy.weight_version, 502, "bad gateway")
    assert e.body == "bad gateway"


def test_abort():
    s = stream(input_ids=[3, 4, 5], sampling_params=LONG, rid="to-abort")
    assert s.first.wait(60)
    assert client.abort(rid="to-abort") == 1
    last = s.join()
    assert last.finish_reason == "abort" and last.rid == "to-abort" and last.output_ids, last
    assert client.abort(rid="to-abort") == 0

    runs = [background(lambda: client.generate(input_ids=[3, 4, 5], sampling_params=LONG)) for _ in range(2)]
    wait_until(lambda: client.loads()["aggregate"]["total_running_reqs"] == 2, "two generations running")
    assert client.abort(abort_all=True) == 2
    assert [r.join().finish_reason for r in runs] == ["abort", "abort"]

    # Leaving a stream early disconnects, and the server aborts the generation.
    early = client.generate_stream(input_ids=[3, 4, 5], sampling_params=LONG)
    next(early)
    early.close()
    wait_until(lambda: total_reqs() == 0, "a closed stream's generation still runs")


def test_pause_and_resume():
    # Deterministic serving: a generation paused in place or retracted and recomputed ends with
    # the tokens it would have made unpaused.
    request = {"input_ids": [3, 4, 5], "sampling_params": greedy(100, ignore_eos=True)}
    unpaused = client.generate(**request)
    for mode in ("in_place", "retract"):
        s = stream(**request)
        assert s.first.wait(60)
        client.pause(mode=mode)
        queued = background(lambda: client.generate(input_ids=PROMPT, sampling_params=greedy(2)))
        # Both held: the paused stream neither ended nor was aborted (100 tokens outlast the pause's round
        # trip), and the one sent during the pause waits. (In retract mode the stream itself waits, so
        # one waiting request does not yet say the queued one arrived.)
        wait_until(lambda: total_reqs() == 2 and client.loads()["aggregate"]["total_waiting_reqs"] >= 1,
                   f"{mode}: both held")
        assert queued.thread.is_alive(), f"{mode}: {client.loads()['aggregate']}"
        client.resume()
        last = s.join()
        assert last.finish_reason == "length" and last.output_ids == unpaused.output_ids, (mode, last)
        assert queued.join().finish_reason == "length"

    s = stream(input_ids=[3, 4, 5], sampling_params=LONG)
    assert s.first.wait(60)
    client.pause()  # abort mode, SGLang's default
    aborted = s.join()
    assert aborted.finish_reason == "abort" and aborted.abort_message == "aborted by pause_generation", aborted
    client.resume()
    assert total_reqs() == 0


def test_weight_updates(original):
    assert client.update_weight_version("5") == "5" and client.weight_version() == "5"
    relabeled = client.generate(input_ids=PROMPT, sampling_params=greedy(6))
    assert relabeled.weight_version == "5" and relabeled.output_ids == original.output_ids

    assert client.update_weights_from_disk(MODEL, weight_version=6) == "6"
    assert client.generate(input_ids=PROMPT, sampling_params=greedy(6)).output_ids == original.output_ids

    s = stream(input_ids=[3, 4, 5], sampling_params=LONG)
    assert s.first.wait(60)
    assert client.update_weights_from_disk(MODEL, abort_all_requests=True) == "7"  # the next version
    last = s.join()
    assert last.finish_reason == "abort" and last.weight_version == "6", last
    assert client.weight_version() == "7"
    assert client.chat([{"role": "user", "content": "x"}], max_tokens=1).weight_version == "7"


def run_example(*args):
    r = subprocess.run([sys.executable, str(EXAMPLES / args[0]), BASE, "--api-key", KEY, *args[1:]],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"{args}: exit {r.returncode}\n{r.stdout}\n{r.stderr}"
    return r.stdout


def test_examples():
    out = run_example("rollout.py", "one", "two", "--samples", "2", "--max-new-tokens", "4")
    assert out.count("weights v7") == 4, out
    out = run_example("chat.py", "Hello", "--max-tokens", "4", "--temperature", "0")
    assert "[finish: " in out and "completion tokens]" in out, out

    with tempfile.TemporaryDirectory() as tmp:
        out = run_example("rl_loop.py", "--model-dir", MODEL, "--out", tmp, "--iterations", "2")
        assert "iteration 2: version 8" in out and "final rollout at version 9: ok" in out, out
        # The straggler: cut by each update's pause, resumed on the next weights.
        segments = ast.literal_eval(out.split("straggler segments (version, tokens, finish): ")[1].splitlines()[0])
        assert [(v, f) for v, _, f in segments] == [("7", "abort"), ("8", "abort")], out
        assert all(n > 0 for _, n, _ in segments), out
        assert client.weight_version() == "9"
        tensors, _ = safetensors_io.read(Path(tmp) / "step-2" / "model.safetensors")
        assert tensors["head.weight"].dtype == "BF16"  # what the server loaded and served as version 9
    print(out, end="")


test_info_and_auth()
print("test_info_and_auth: ok", flush=True)
original = test_generate()
print("test_generate: ok", flush=True)
test_generate_stream(original)
print("test_generate_stream: ok", flush=True)
test_chat()
print("test_chat: ok", flush=True)
test_server_errors()
print("test_server_errors: ok", flush=True)
test_client_errors()
print("test_client_errors: ok", flush=True)
test_abort()
print("test_abort: ok", flush=True)
test_pause_and_resume()
print("test_pause_and_resume: ok", flush=True)
test_weight_updates(original)
print("test_weight_updates: ok", flush=True)
test_examples()
print("test_examples: ok", flush=True)
