"""HartClient: `hart serve --http-bind` (docs/http.md) from Python's standard library.

    client = HartClient("http://127.0.0.1:30000")
    out = client.generate(input_ids=[1, 2, 3], sampling_params={"max_new_tokens": 8}, return_logprob=True)
    out.output_ids, out.output_token_logprobs, out.weight_version

Every call opens its own connection, so one client may be shared by threads.
"""
import http.client
import json
import urllib.error
import urllib.request

from .errors import HartConnectionError, HartError, error_from_answer
from .results import ChatDelta, ChatResult, GenerateResult


class HartClient:
    """A client of one server.

    base_url: "http://HOST:PORT" of --http-bind. api_key: sent as `Authorization: Bearer KEY`
    (the server's --api-key). timeout: seconds the server may stay silent before a call fails
    with HartConnectionError; a non-streamed generation sends nothing until it ends, so this
    also bounds how long one may run.
    """

    def __init__(self, base_url, api_key=None, timeout=600.0):
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.timeout = timeout

    # -- generation ----------------------------------------------------------------------

    def generate(self, input_ids=None, text=None, sampling_params=None, return_logprob=False, top_logprobs_num=0,
                 rid=None, **fields):
        """POST /generate {input_ids | text, sampling_params, return_logprob, top_logprobs_num, rid,
        **fields} (SGLang's request: exactly one of input_ids and text; fields are further
        request fields, sent as given). Returns a GenerateResult, or a list of them (by index)
        when sampling_params asks for n > 1, as the server answers."""
        body = _generate_body(input_ids, text, sampling_params, return_logprob, top_logprobs_num, rid, fields)
        out = self._json("POST", "/generate", body)
        if isinstance(out, list):
            return [GenerateResult.from_json(sample) for sample in out]
        return GenerateResult.from_json(out)

    def score(self, input_ids, logprob_start_len=0):
        """The model's log-prob of each token of input_ids from logprob_start_len on (None for
        position 0, which nothing predicts): POST /generate with max_new_tokens 0, return_logprob
        and logprob_start_len, as RL stacks ask SGLang for reference log-probs."""
        out = self.generate(input_ids=input_ids, sampling_params={"max_new_tokens": 0}, return_logprob=True,
                            logprob_start_len=logprob_start_len)
        return [lp for lp, _ in out.input_token_logprobs]

    def generate_stream(self, input_ids=None, text=None, sampling_params=None, return_logprob=False,
                        top_logprobs_num=0, rid=None, **fields):
        """generate() with stream: true: yields a GenerateResult per server-sent event. Chunks are
        cumulative (text, output_ids and log-probs so far, SGLang's); finish_reason is None until
        a sample's last; with n > 1 samples interleave (GenerateResult.index). Closing the
        generator early (or breaking out of the loop that holds it) disconnects, and the server
        aborts the generation."""
        body = _generate_body(input_ids, text, sampling_params, return_logprob, top_logprobs_num, rid, fields)
        body["stream"] = True
        for event in self._events("/generate", body):
            yield GenerateResult.from_json(event)

    def chat(self, messages, max_tokens=None, temperature=None, **fields):
        """POST /v1/chat/completions {messages, max_tokens, temperature, **fields} (OpenAI's request;
        fields e.g. top_p, seed, n, stop, logprobs, top_logprobs, chat_template_kwargs={"thinking":
        True}; None values are left out). Returns a ChatResult."""
        body = _chat_body(messages, max_tokens, temperature, fields)
        return ChatResult.from_json(self._json("POST", "/v1/chat/completions", body))

    def chat_stream(self, messages, max_tokens=None, temperature=None, include_usage=True, **fields):
        """chat() with stream: true: yields a ChatDelta per choice per event (the new text only),
        then, with include_usage, one ChatDelta whose index is None and usage is set. Closing the
        generator early disconnects, and the server aborts the generation."""
        body = _chat_body(messages, max_tokens, temperature, fields)
        body["stream"] = True
        body["stream_options"] = {"include_usage": include_usage}
        for event in self._events("/v1/chat/completions", body):
            yield from ChatDelta.from_chunk(event)

    # -- control -------------------------------------------------------------------------

    def abort(self, rid=None, abort_all=False):
        """POST /abort_request {rid} or {abort_all: true} (every HTTP generation). The aborted
        generations end with finish_reason "abort" and their tokens so far. Returns how many were
        aborted (0 when nothing ran under rid)."""
        body = {"abort_all": True} if abort_all else {"rid": rid}
        return self._json("POST", "/abort_request", body)["aborted"]

    def pause(self, mode="abort"):
        """POST /pause_generation {mode}: "abort" (running and waiting generations end with
        abort), "retract" (they recompute after resume) or "in_place" (they keep their KV).
        New generations wait until resume()."""
        self._json("POST", "/pause_generation", {"mode": mode})

    def resume(self):
        """POST /continue_generation {}: undoes pause()."""
        self._json("POST", "/continue_generation", {})

    def flush_cache(self):
        """POST /flush_cache {}: drops the prefix cache's unused pages."""
        self._json("POST", "/flush_cache", {})

    def weight_version(self):
        """GET /get_weight_version: the serving weights' version (a string)."""
        return self._json("GET", "/get_weight_version")["weight_version"]

    def update_weights_from_disk(self, model_path, weight_version=None, abort_all_requests=False):
        """POST /update_weights_from_disk {model_path, weight_version?, abort_all_requests}: loads
        the checkpoint directory model_path (on the server's machine; it must describe the served
        network) and swaps it in at a step boundary. weight_version must be above the serving
        one (default: the next). Returns the new version once it serves."""
        body = {"model_path": model_path, "abort_all_requests": abort_all_requests}
        if weight_version is not None:
            body["weight_version"] = weight_version
        return self._json("POST", "/update_weights_from_disk", body)["weight_version"]

    def update_weight_version(self, new_version, abort_all_requests=False):
        """POST /update_weight_version {new_version, abort_all_requests}: renames the serving
        weights (new_version above the serving one) without changing them. Returns it."""
        body = {"new_version": new_version, "abort_all_requests": abort_all_requests}
        return self._json("POST", "/update_weight_version", body)["weight_version"]

    # -- information ---------------------------------------------------------------------

    def health(self, generate=False):
        """GET /health (gateway and scheduler answer), or with generate GET /health_generate (a
        token can be generated; False while paused). True on 200, False on another status."""
        try:
            with self._open("GET", "/health_generate" if generate else "/health") as r:
                self._read(r)
        except HartError as e:
            if e.status is None:
                raise
            return False
        return True

    def server_info(self):
        """GET /server_info: how the server was started, its version and stats (a dict)."""
        return self._json("GET", "/server_info")

    def model_info(self):
        """GET /model_info: {model_path, tokenizer_path, is_generation, weight_version, ...}."""
        return self._json("GET", "/model_info")

    def models(self):
        """GET /v1/models: the served model names (what a request's model may be)."""
        return [m["id"] for m in self._json("GET", "/v1/models")["data"]]

    def loads(self):
        """GET /v1/loads: SGLang's GetLoads {loads: [...], aggregate: {total_running_reqs,
        total_waiting_reqs, total_reqs, ...}}."""
        return self._json("GET", "/v1/loads")

    def metrics(self):
        """GET /metrics: Prometheus text (hart_* gauges, counters and histograms)."""
        with self._open("GET", "/metrics") as r:
            return self._read(r).decode()

    # -- transport -----------------------------------------------------------------------

    def _open(self, method, path, body=None):
        """The response to one request; HartError for a non-2xx answer."""
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Content-Type": "application/json"} if data is not None else {}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        request = urllib.request.Request(self.base_url + path, data=data, method=method, headers=headers)
        try:
            return urllib.request.urlopen(request, timeout=self.timeout)
        except urllib.error.HTTPError as e:
            with e:
                raise error_from_answer(e.code, self._read(e)) from None
        except (urllib.error.URLError, OSError, http.client.HTTPException) as e:
            reason = e.reason if isinstance(e, urllib.error.URLError) else e
            raise HartConnectionError(f"{method} {self.base_url}{path}: {reason}") from e

    def _read(self, response):
        try:
            return response.read()
        except (OSError, http.client.HTTPException) as e:
            raise HartConnectionError(f"{response.url}: reading the answer: {e}") from e

    def _json(self, method, path, body=None):
        with self._open(method, path, body) as r:
            return json.loads(self._read(r))

    def _events(self, path, body):
        """The JSON events of a server-sent-event stream, until data: [DONE]."""
        with self._open("POST", path, body) as r:
            try:
                for line in r:
                    line = line.decode().rstrip("\r\n")
                    if not line.startswith("data:"):
                        continue
                    data = line[len("data:"):].strip()
                    if data == "[DONE]":
                        return
                    event = json.loads(data)
                    # A failure after the first token comes as an event; the status was 200.
                    if "error" in event:
                        raise HartError(r.status, event["error"].get("message"), event)
                    yield event
            except (OSError, http.client.HTTPException) as e:
                raise HartConnectionError(f"{r.url}: the stream broke: {e}") from e
        raise HartConnectionError(f"{self.base_url}{path}: the stream ended without data: [DONE]")


def _generate_body(input_ids, text, sampling_params, return_logprob, top_logprobs_num, rid, fields):
    body = {"sampling_params": sampling_params or {}, **fields}
    # Both or neither is the server's to refuse (400), not silently resolved here.
    if input_ids is not None:
        body["input_ids"] = input_ids
    if text is not None:
        body["text"] = text
    if return_logprob:
        body["return_logprob"] = True
    if top_logprobs_num:
        body["top_logprobs_num"] = top_logprobs_num
    if rid is not None:
        body["rid"] = rid
    return body


def _chat_body(messages, max_tokens, temperature, fields):
    body = {"messages": messages, "max_tokens": max_tokens, "temperature": temperature, **fields}
    return {k: v for k, v in body.items() if v is not None}
