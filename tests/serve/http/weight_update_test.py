"""Weight updates over HTTP as the RL stacks send them (shared/docs/field-notes.md §3.2, §3.5):
slime's sequence around an update (pause -> flush_cache -> update -> continue) with generations
in flight, in abort mode (slime) and retract mode (Miles: the retracted generations resume on
the new weights), /update_weights_from_disk, /update_weight_version, /server_info and
/model_info (the checkpoint serving and its version), and bad updates refused with nothing
changed. Python's standard-library HTTP client only.

Usage: python3 weight_update_test.py http://127.0.0.1:PORT PERTURBED_DIR MODEL_DIR OTHER_MODEL_DIR
  PERTURBED_DIR: MODEL_DIR's weights scaled (another set of weights for the same network)
  OTHER_MODEL_DIR: a checkpoint of a different network (must be refused)
"""
import json
import sys
import threading
import time
import urllib.error
import urllib.request

BASE, PERTURBED, MODEL, OTHER = sys.argv[1:5]
PROMPT = [5, 6, 7, 8]


def call(path, body=None, method=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(BASE + path, data=data, method=method or ("POST" if data is not None else "GET"),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, json.loads(r.read().decode())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read().decode())


def ok(path, body=None, method=None):
    status, out = call(path, body, method)
    assert status == 200, f"{path}: {status} {out}"
    return out


def version():
    return ok("/get_weight_version")["weight_version"]


def greedy(n=8):
    return ok("/generate", {"input_ids": PROMPT, "sampling_params": {"max_new_tokens": n, "temperature": 0}})


def loads():
    return ok("/v1/loads")["aggregate"]["total_reqs"]


def wait_idle(seconds=20):
    deadline = time.time() + seconds
    while loads() != 0:
        assert time.time() < deadline, "still busy"
        time.sleep(0.02)


class stream:
    """A long streamed /generate on a thread: every event it got, and when the first came."""

    def __init__(self, rid):
        self.events, self.first, self.done = [], threading.Event(), threading.Event()
        body = {"input_ids": [3, 4, 5], "rid": rid, "stream": True,
                "sampling_params": {"max_new_tokens": 100000, "ignore_eos": True, "temperature": 0}}
        self.thread = threading.Thread(target=self._run, args=(body,))
        self.thread.start()

    def _run(self, body):
        req = urllib.request.Request(BASE + "/generate", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=120) as r:
            for line in r:
                line = line.decode().strip()
                if line == "data: [DONE]":
                    break
                if line.startswith("data: "):
                    self.events.append(json.loads(line[6:]))
                    self.first.set()
        self.done.set()

    def join(self):
        self.thread.join(60)
        assert not self.thread.is_alive()
        return self.events[-1]["meta_info"]


def test_server_info():
    info = ok("/server_info")
    assert info["model_path"] == MODEL and info["weight_version"] == "0", info
    assert info["internal_states"][0]["weight_version"] == 0 and "running" in info["internal_states"][0]
    assert ok("/get_server_info")["served_model_name"] == info["served_model_name"]


def expect_serving(path, weight_version):
    """/model_info and /server_info name the checkpoint the serving weights came from (SGLang's
    model_path after update_weights_from_disk) beside their version; the tokenizer stays."""
    for info in (ok("/model_info"), ok("/get_model_info"), ok("/server_info"), ok("/get_server_info")):
        assert info["model_path"] == path and info["weight_version"] == weight_version, info
        assert info["tokenizer_path"] == MODEL, info


def test_slime_sequence_abort_mode(before):
    """slime: pause (abort) -> flush_cache -> update -> continue; in-flight generations end with abort."""
    runs = [stream(f"flight-{i}") for i in range(3)]
    for s in runs:
        assert s.first.wait(60)
    ok("/pause_generation", {})
    for s in runs:
        meta = s.join()
        assert meta["finish_reason"]["type"] == "abort" and meta["weight_version"] == "0", meta
        assert meta["finish_reason"]["message"] == "aborted by pause_generation", meta
    assert ok("/flush_cache", method="GET")["success"]
    out = ok("/update_weights_from_disk", {"model_path": PERTURBED, "weight_version": "1"})
    assert out["success"] and out["weight_version"] == "1", out
    expect_serving(PERTURBED, "1")
    ok("/continue_generation", {})
    assert version() == "1"
    after = greedy()
    assert after["meta_info"]["weight_version"] == "1"
    assert after["output_ids"] != before["output_ids"], "the new weights answer as the old ones did"
    return after


def test_miles_sequence_retract_mode(perturbed):
    """Miles: pause (retract) -> update -> continue; the retracted generation resumes on the new weights."""
    s = stream("retracted")
    assert s.first.wait(60)
    ok("/pause_generation", {"mode": "retract"})
    assert ok("/flush_cache", {})["success"]
    # No weight_version: the next one (2). The original weights again, from their own directory.
    out = ok("/update_weights_from_disk", {"model_path": MODEL})
    assert out["weight_version"] == "2", out
    expect_serving(MODEL, "2")
    n_before = len(s.events)
    ok("/continue_generation", {})
    deadline = time.time() + 60
    while not s.events or s.events[-1]["meta_info"]["weight_version"] != "2":
        assert time.time() < deadline, "the retracted generation did not resume on the new weights"
        time.sleep(0.02)
    assert len(s.events) > n_before
    ok("/abort_request", {"rid": "retracted"})
    meta = s.join()
    assert meta["finish_reason"]["type"] == "abort" and meta["weight_version"] == "2", meta
    wait_idle()
    # Back on the original weights: the original answer.
    return greedy()


def test_relabel_keeps_weights_and_cache(original):
    assert greedy()["output_ids"] == original["output_ids"]
    # A prompt of more than a page (128 tokens) leaves full pages in the prefix cache.
    long = {"input_ids": [(7 * i) % 400 + 10 for i in range(300)],
            "sampling_params": {"max_new_tokens": 4, "temperature": 0}}
    first = ok("/generate", long)
    out = ok("/update_weight_version", {"new_version": "7", "abort_all_requests": False})
    assert out["success"] and out["weight_version"] == "7", out
    assert version() == "7"
    again = ok("/generate", long)
    assert again["output_ids"] == first["output_ids"]
    assert again["meta_info"]["weight_version"] == "7"
    assert again["meta_info"]["cached_tokens"] >= 128, again["meta_info"]  # a relabel keeps the prefix cache
    expect_serving(MODEL, "7")  # relabelled: the same weights, from the same directory


def test_bad_updates_change_nothing():
    cases = [
        ("/update_weights_from_disk", {"model_path": "/no/such/checkpoint"}, "/no/such/checkpoint", 404),
        ("/update_weights_from_disk", {"model_path": OTHER}, "num_hidden_layers"),
        ("/update_weights_from_disk", {"model_path": MODEL, "weight_version": "3"}, "not above"),
        ("/update_weights_from_disk", {"model_path": MODEL, "load_format": "dummy"}, "load_format"),
        ("/update_weights_from_disk", {"model_path": MODEL, "flush_cache": False}, "flush_cache"),
        ("/update_weights_from_disk", {}, "model_path"),
        ("/update_weights_from_disk", {"model_path": MODEL, "lora": 1}, "unknown field"),
        ("/update_weight_version", {}, "new_version"),
        ("/update_weight_version", {"new_version": "v8"}, "new_version"),
        ("/update_weight_version", {"new_version": 7}, "not above"),
    ]
    for path, body, text, *want in cases:
        status, out = call(path, body)
        assert status == (want[0] if want else 400), (path, body, status, out)
        assert out["success"] is False and text in out["message"] and text in out["error"]["message"], (body, out)
        expect_serving(MODEL, "7")
    assert len(greedy()["output_ids"]) == 8


original = greedy()
test_server_info()
print("test_server_info: ok", flush=True)
perturbed = test_slime_sequence_abort_mode(original)
print("test_slime_sequence_abort_mode: ok", flush=True)
back = test_miles_sequence_retract_mode(perturbed)
assert back["output_ids"] == original["output_ids"], (back, original)
print("test_miles_sequence_retract_mode: ok", flush=True)
test_relabel_keeps_weights_and_cache(original)
print("test_relabel_keeps_weights_and_cache: ok", flush=True)
test_bad_updates_change_nothing()
print("test_bad_updates_change_nothing: ok", flush=True)
