"""SGLang's native endpoints, the control verbs and /metrics of `hart serve --http-bind`,
driven with Python's standard-library HTTP client as the RL stacks drive SGLang
(shared/docs/field-notes.md §3), /metrics parsed by the Prometheus client's own parser.
Also: bad input gets a 4xx with a message and the server keeps serving; control verbs need no
body; a client that disconnects mid-stream has its generation aborted and its pages freed.

Usage: python3 sglang_http_test.py http://127.0.0.1:PORT
"""
import http.client
import json
import socket
import sys
import threading
import time
import urllib.error
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

BASE = sys.argv[1]
HOST, PORT = BASE.split("//")[1].split(":")


def call(path, body=None, method=None, raw=None):
    """(status, parsed JSON or text) of one request."""
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    req = urllib.request.Request(BASE + path, data=data, method=method or ("POST" if data is not None else "GET"),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            status, text, ctype = r.status, r.read().decode(), r.headers.get("Content-Type", "")
    except urllib.error.HTTPError as e:
        status, text, ctype = e.code, e.read().decode(), e.headers.get("Content-Type", "")
    return status, (json.loads(text) if "json" in ctype and text else text)


def ok(path, body=None, method=None):
    status, out = call(path, body, method)
    assert status == 200, f"{path}: {status} {out}"
    return out


def sse(path, body, on_event=None):
    """Events of a streamed POST (parsed JSON), until data: [DONE]."""
    req = urllib.request.Request(BASE + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    events = []
    with urllib.request.urlopen(req, timeout=120) as r:
        assert r.headers["Content-Type"].startswith("text/event-stream")
        for line in r:
            line = line.decode().rstrip("\n")
            if not line.startswith("data: "):
                assert line == "", line
                continue
            if line == "data: [DONE]":
                return events
            events.append(json.loads(line[6:]))
            if on_event:
                on_event(events[-1])
    raise AssertionError(f"{path}: the stream ended without [DONE]")


def metrics():
    status, text = call("/metrics")
    assert status == 200, status
    families = {f.name: f for f in text_string_to_metric_families(text)}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            name, kind = line.split()[2:4]
            base = name[:-6] if kind == "counter" and name.endswith("_total") else name
            assert families[base].type == kind, line
    return {s.name: s.value for f in families.values() for s in f.samples}, families


def loads():
    return ok("/v1/loads")["aggregate"]["total_reqs"]


def wait_idle(seconds):
    deadline = time.time() + seconds
    while loads() != 0:
        assert time.time() < deadline, f"still {loads()} requests after {seconds} s"
        time.sleep(0.05)


def greedy(ids, n, **extra):
    body = {"input_ids": ids, "sampling_params": {"max_new_tokens": n, "temperature": 0}}
    body.update(extra)
    return body


def test_info():
    assert call("/health")[0] == 200
    assert call("/health_generate")[0] == 200
    assert ok("/get_weight_version") == {"weight_version": "0"}
    info = ok("/model_info")
    assert info["is_generation"] and info["weight_version"] == "0" and info["model_path"], info
    assert ok("/v1/models")["data"][0]["object"] == "model"


def test_generate():
    prompt = [5, 6, 7]
    out = ok("/generate", greedy(prompt, 6, return_logprob=True, top_logprobs_num=2, rid="r-1"))
    ids, meta = out["output_ids"], out["meta_info"]
    assert len(ids) == 6 and isinstance(out["text"], str)
    assert meta["id"] == "r-1" and meta["finish_reason"] == {"type": "length", "length": 6}, meta
    assert meta["prompt_tokens"] == 3 and meta["completion_tokens"] == 6 and meta["weight_version"] == "0"
    assert "cached_tokens" in meta
    lps = meta["output_token_logprobs"]
    assert [t[1] for t in lps] == ids and all(t[0] <= 0 and t[2] is None for t in lps), lps
    # Greedy: each sampled token is the most likely one.
    assert [t[0][1] for t in meta["output_top_logprobs"]] == ids
    assert all(len(t) == 2 for t in meta["output_top_logprobs"])

    # The stream is cumulative (text, output_ids, logprobs), ends as the whole answer did.
    events = sse("/generate", greedy(prompt, 6, return_logprob=True, stream=True))
    assert len(events) >= 6
    for a, b in zip(events, events[1:]):
        assert b["output_ids"][:len(a["output_ids"])] == a["output_ids"] and b["text"].startswith(a["text"])
    assert events[-1]["output_ids"] == ids and events[-1]["text"] == out["text"]
    assert events[-1]["meta_info"]["finish_reason"]["type"] == "length"
    assert all(e["meta_info"]["finish_reason"] is None for e in events[:-1])

    # A text prompt's chunks carry its token count from the first on, as input_ids' do.
    events = sse("/generate", {"text": "hello there", "stream": True, "sampling_params": {"max_new_tokens": 4}})
    n_prompt = events[-1]["meta_info"]["prompt_tokens"]
    assert n_prompt > 0 and [e["meta_info"]["prompt_tokens"] for e in events] == [n_prompt] * len(events), events

    # stream_interval (SGLang): the first token's event, then every interval-th, and the final.
    events = sse("/generate", {"input_ids": prompt, "stream": True,
                               "sampling_params": {"max_new_tokens": 7, "temperature": 0, "ignore_eos": True,
                                                   "stream_interval": 3}})
    assert [len(e["output_ids"]) for e in events] == [1, 4, 7, 7], [e["output_ids"] for e in events]
    assert events[-1]["meta_info"]["finish_reason"]["type"] == "length"

    # OpenAI streams carry system_fingerprint in every chunk, as the whole answers do.
    for path, body in (("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}),
                       ("/v1/completions", {"prompt": "hi"})):
        chunks = sse(path, {**body, "max_tokens": 3, "ignore_eos": True, "stream": True,
                            "stream_options": {"include_usage": True}})
        assert len(chunks) >= 3 and all(c["system_fingerprint"] == "hart-w0" for c in chunks), (path, chunks)

    # A stop token: matched, trimmed from output_ids unless no_stop_trim (slime's setting).
    stop_id = ids[2]
    first = ids.index(stop_id)
    s = ok("/generate", greedy(prompt, 6, sampling_params={"max_new_tokens": 6, "temperature": 0, "stop_token_ids": [stop_id]}))
    assert s["meta_info"]["finish_reason"] == {"type": "stop", "matched": stop_id}, s["meta_info"]
    assert s["output_ids"] == ids[:first]
    s = ok("/generate", {"input_ids": prompt,
                         "sampling_params": {"max_new_tokens": 6, "temperature": 0, "stop_token_ids": [stop_id],
                                             "no_stop_trim": True, "skip_special_tokens": False}})
    assert s["output_ids"] == ids[:first + 1]

    # Seeded sampling replays; n > 1 answers a list.
    seeded = {"input_ids": prompt, "sampling_params": {"max_new_tokens": 5, "temperature": 1.0, "sampling_seed": 3}}
    assert ok("/generate", seeded)["output_ids"] == ok("/generate", seeded)["output_ids"]
    many = ok("/generate", {"text": "hello", "sampling_params": {"max_new_tokens": 3, "n": 2}})
    assert isinstance(many, list) and [m["index"] for m in many] == [0, 1] and all(len(m["output_ids"]) == 3 for m in many)


def test_prompt_logprobs():
    # Scoring (logprob_start_len, max_new_tokens 0: what RL stacks send for reference log-probs):
    # a greedy answer's own log-probs come back as the prompt log-probs of prompt + answer.
    prompt = [5, 6, 7, 8]
    out = ok("/generate", greedy(prompt, 5, return_logprob=True))
    ids, lps = out["output_ids"], [t[0] for t in out["meta_info"]["output_token_logprobs"]]
    scored = ok("/generate", {"input_ids": prompt + ids, "return_logprob": True, "logprob_start_len": 0,
                              "sampling_params": {"max_new_tokens": 0}})
    meta = scored["meta_info"]
    assert scored["output_ids"] == [] and meta["completion_tokens"] == 0, scored
    assert meta["finish_reason"]["type"] == "length" and meta["cached_tokens"] == 0, meta
    entries = meta["input_token_logprobs"]
    assert [e[1] for e in entries] == prompt + ids and entries[0][0] is None, entries
    assert all(e[0] is not None and e[0] <= 0 for e in entries[1:]), entries
    got = [e[0] for e in entries[len(prompt):]]
    assert all(abs(a - b) < 1e-4 for a, b in zip(got, lps)), (got, lps)
    # From a later position, beside a generation; without return_logprob nothing is returned.
    tail = ok("/generate", greedy(prompt + ids, 2, return_logprob=True, logprob_start_len=len(prompt)))
    assert [e[1] for e in tail["meta_info"]["input_token_logprobs"]] == ids
    assert "input_token_logprobs" not in ok("/generate", greedy(prompt, 2, logprob_start_len=0))["meta_info"]
    # Refused: a start past the prompt, max_new_tokens 0 without asking for log-probs.
    status, err = call("/generate", greedy(prompt, 2, return_logprob=True, logprob_start_len=4))
    assert status == 400 and "logprob_start" in err["error"]["message"], err
    status, err = call("/generate", {"input_ids": prompt, "sampling_params": {"max_new_tokens": 0}})
    assert status == 400 and "max_new_tokens" in err["error"]["message"], err


def long_stream(rid, seen, stop_after=None):
    """A generation that would run for a very long time, streamed on a thread."""
    result = {}

    def run():
        body = {"input_ids": [3, 4, 5], "rid": rid, "stream": True,
                "sampling_params": {"max_new_tokens": 100000, "ignore_eos": True, "temperature": 0}}
        result["events"] = sse("/generate", body, lambda e: seen.set())

    t = threading.Thread(target=run)
    t.start()
    return t, result


def test_control():
    # abort_request by rid ends a running stream with finish_reason abort.
    seen = threading.Event()
    t, res = long_stream("long-1", seen)
    assert seen.wait(60)
    assert ok("/abort_request", {"rid": "long-1"})["aborted"] == 1
    t.join(60)
    assert not t.is_alive()
    assert res["events"][-1]["meta_info"]["finish_reason"] == {
        "type": "abort", "message": "aborted by abort_request", "status_code": None, "err_type": None}
    wait_idle(10)
    assert ok("/abort_request", {"rid": "long-1"})["aborted"] == 0  # already over: still 200

    # pause in_place freezes it (still counted), continue resumes, abort_all ends everything.
    seen = threading.Event()
    t, res = long_stream("long-2", seen)
    assert seen.wait(60)
    ok("/pause_generation", {"mode": "in_place"})
    assert loads() == 1
    ok("/continue_generation", {})
    ok("/abort_request", {"abort_all": True, "abort_message": "rollout step over"})  # SGLang's AbortReq field
    t.join(60)
    assert res["events"][-1]["meta_info"]["finish_reason"]["message"] == "rollout step over"

    # pause (default mode abort) ends what runs; new work waits for continue_generation.
    seen = threading.Event()
    t, res = long_stream("long-3", seen)
    assert seen.wait(60)
    ok("/pause_generation", {})
    t.join(60)
    assert res["events"][-1]["meta_info"]["finish_reason"]["type"] == "abort"
    assert res["events"][-1]["meta_info"]["finish_reason"]["message"] == "aborted by pause_generation"
    waiting = {}
    w = threading.Thread(target=lambda: waiting.update(ok("/generate", greedy([9, 9], 2))))
    w.start()
    time.sleep(0.3)
    assert not waiting and loads() == 1
    ok("/continue_generation", {})
    w.join(60)
    assert len(waiting["output_ids"]) == 2
    wait_idle(10)

    # Bad control bodies.
    assert call("/pause_generation", {"mode": "sideways"})[0] == 400
    assert call("/abort_request", {})[0] == 400

    # GET (slime, verl) and POST (Miles) flush the cache.
    assert ok("/flush_cache", method="GET")["success"]
    assert ok("/flush_cache", {})["success"]


def bodiless_post(path):
    """(status, JSON, seconds) of a POST with neither Content-Length nor a body, as `curl -X POST` sends."""
    start = time.time()
    with socket.create_connection((HOST, int(PORT)), timeout=60) as sock:
        sock.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        got = b""
        while chunk := sock.recv(65536):
            got += chunk
    head, _, body = got.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body), time.time() - start


def test_control_without_a_body():
    """SGLang's control verbs take no body when every field has a default: none reads as {}."""
    for path in ("/pause_generation", "/continue_generation", "/flush_cache"):
        status, out, seconds = bodiless_post(path)
        assert status == 200 and out["success"] and seconds < 3, (path, status, out, seconds)
    status, out, _ = bodiless_post("/abort_request")  # which generation is not optional
    assert status == 400 and "rid" in out["error"]["message"], out
    status, out = call("/continue_generation", raw=b"{")  # a body that is there must be JSON
    assert status == 400 and "JSON" in out["error"]["message"], out
    assert len(ok("/generate", greedy([1, 2], 2))["output_ids"]) == 2  # the pause above was lifted


def test_disconnect_frees_pages():
    before, _ = metrics()
    sock = socket.create_connection((HOST, int(PORT)), timeout=60)
    body = json.dumps({"input_ids": [3, 4, 5, 6], "stream": True,
                       "sampling_params": {"max_new_tokens": 100000, "ignore_eos": True}}).encode()
    sock.sendall(b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: "
                 + str(len(body)).encode() + b"\r\n\r\n" + body)
    got = b""
    while got.count(b"data: ") < 3:
        chunk = sock.recv(65536)
        assert chunk, got
        got += chunk
    assert loads() == 1
    sock.close()  # mid-stream
    wait_idle(10)  # it would run for 100000 tokens
    # The aborted sequence's pages come back when the step it was in completes, which may be
    # just after the flush: flush again until they are gone (or fail after 10 s).
    deadline = time.time() + 10
    while True:
        ok("/flush_cache")
        after, _ = metrics()
        if after["hart_cache_full_pages_used"] == 0 and after["hart_cache_swa_pages_used"] == 0:
            break
        assert time.time() < deadline, after
        time.sleep(0.05)
    assert after["hart_running"] == 0
    generated = after["hart_generated_tokens_total"] - before["hart_generated_tokens_total"]
    assert generated < 5000, generated


def test_bad_input_keeps_serving():
    cases = [
        ("/generate", b'{"input_ids": [1, 2', 400, "not valid JSON"),
        ("/generate", b'[1, 2]', 400, "JSON object"),
        ("/generate", json.dumps({"input_ids": "1 2"}).encode(), 400, "input_ids"),
        ("/generate", json.dumps({"input_ids": [1], "sampling_params": {"top_k": "all"}}).encode(), 400, "sampling_params.top_k"),
        ("/generate", json.dumps({"input_ids": [1], "sampling_parms": {}}).encode(), 400, "unknown field"),
        ("/generate", json.dumps({"input_ids": [1, 10 ** 9]}).encode(), 400, "vocabulary"),
        ("/generate", json.dumps({"text": ""}).encode(), 400, "empty"),
        ("/v1/chat/completions", json.dumps({"messages": [{"role": "user", "content": 5}]}).encode(), 400, "content"),
        ("/generate", b"{" + b" " * (9 << 20) + b"}", 413, "limit"),
        ("/no/such/endpoint", b"{}", 404, "no endpoint"),
    ]
    for path, raw, want, text in cases:
        status, out = call(path, raw=raw)
        assert status == want, (path, raw[:60], status, out)
        assert text in out["error"]["message"], (path, out)
    # A body over the limit sent chunked (no Content-Length) is cut off too.
    conn = http.client.HTTPConnection(HOST, int(PORT), timeout=60)
    # 64 KiB chunks, just past 8 MiB: what the server leaves unread fits the socket's buffers.
    conn.request("POST", "/generate", body=iter([b"{"] + [b" " * (64 << 10)] * 129 + [b"}"]), encode_chunked=True,
                 headers={"Content-Type": "application/json", "Transfer-Encoding": "chunked"})
    assert conn.getresponse().status == 413
    conn.close()
    assert call("/health")[0] == 200
    assert len(ok("/generate", greedy([1, 2], 2))["output_ids"]) == 2


def test_metrics():
    values, families = metrics()
    assert families["hart_generated_tokens"].type == "counter" and values["hart_generated_tokens_total"] > 0
    assert families["hart_queue_depth"].type == "gauge"
    assert families["hart_weight_version"].type == "gauge" and values["hart_weight_version"] == 0
    assert "hart_cache_hit_rate" in values and "hart_time_to_first_token_us_mean" in values
    # Latency histograms: cumulative buckets up to +Inf, which equals the count.
    for name in ("hart_time_to_first_token_seconds", "hart_time_per_output_token_seconds",
                 "hart_e2e_request_latency_seconds", "hart_step_latency_seconds"):
        fam = families[name]
        assert fam.type == "histogram", (name, fam.type)
        buckets = [(s.labels["le"], s.value) for s in fam.samples if s.name == name + "_bucket"]
        assert buckets[-1][0] == "+Inf" and len(buckets) > 10, buckets
        assert all(a[1] <= b[1] for a, b in zip(buckets, buckets[1:])), buckets
        assert buckets[-1][1] == values[name + "_count"] > 0 and values[name + "_sum"] > 0, name


for test in (test_info, test_generate, test_prompt_logprobs, test_control, test_control_without_a_body, test_disconnect_frees_pages,
             test_bad_input_keeps_serving, test_metrics):
    test()
    print(f"{test.__name__}: ok", flush=True)
