"""What the client returns: small dataclasses over the server's JSON, each keeping the raw
object for fields they do not name (docs/http.md has every field)."""
import base64
import struct
from dataclasses import dataclass, field


@dataclass
class GenerateResult:
    """One sample of SGLang's /generate: a whole answer, or one cumulative stream chunk."""

    text: str
    """Decoded output; never holds special tokens or the stop string."""
    output_ids: list
    """The exact token record (the stop token only with sampling_params no_stop_trim)."""
    output_token_logprobs: list
    """One log-prob per output id, of the distribution sampled (return_logprob; else empty)."""
    output_top_logprobs: list
    """Per output id, the top_logprobs_num most likely (logprob, token_id) pairs."""
    finish_reason: str | None
    """One of "stop", "length", "abort"; None in a stream chunk before the last."""
    weight_version: str
    """The version of the weights that made these tokens (a string, as SGLang's)."""
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    """Prompt tokens served from the prefix cache."""
    rid: str
    """The request id: the caller's rid, or the one the server named (for abort)."""
    index: int
    """Which sample of an n > 1 request this is."""
    meta_info: dict = field(repr=False)
    """Everything the server sent: finish_reason's detail (matched stop, abort message),
    e2e_latency, cached_tokens_details, ..."""

    @property
    def input_token_logprobs(self):
        """With return_logprob and logprob_start_len: (logprob, token_id) of each prompt token from
        that position (logprob None for position 0); else []."""
        return [(lp, tok) for lp, tok, _ in self.meta_info.get("input_token_logprobs", [])]

    @property
    def abort_message(self):
        """Why an aborted generation was aborted ("aborted by pause_generation", the request's
        abort_message, ...); None unless finish_reason is "abort"."""
        finish = self.meta_info.get("finish_reason") or {}
        return finish.get("message") if finish.get("type") == "abort" else None

    def routed_experts(self, layers, k):
        """With return_routed_experts: the routed experts of every position from
        routed_experts_start_len, as [position][layer][k] expert ids (the base64 little-endian
        int32 the server sends; layers and k are the model's: /model_info). None without it."""
        packed = self.meta_info.get("routed_experts")
        if packed is None:
            return None
        raw = base64.b64decode(packed)
        ids = struct.unpack("<%di" % (len(raw) // 4), raw)
        per_position = layers * k
        if per_position <= 0 or len(ids) % per_position:
            raise ValueError("routed_experts: %d ids are not whole positions of %d layers x %d" % (len(ids), layers, k))
        return [[list(ids[p + l * k:p + (l + 1) * k]) for l in range(layers)] for p in range(0, len(ids), per_position)]

    @classmethod
    def from_json(cls, obj):
        meta = obj["meta_info"]
        finish = meta.get("finish_reason")
        return cls(
            text=obj["text"],
            output_ids=obj["output_ids"],
            output_token_logprobs=[lp for lp, _, _ in meta.get("output_token_logprobs", [])],
            output_top_logprobs=[[(lp, tok) for lp, tok, _ in top] for top in meta.get("output_top_logprobs", [])],
            finish_reason=finish["type"] if finish else None,
            weight_version=meta["weight_version"],
            prompt_tokens=meta["prompt_tokens"],
            completion_tokens=meta["completion_tokens"],
            cached_tokens=meta["cached_tokens"],
            rid=meta["id"],
            index=obj.get("index", 0),
            meta_info=meta,
        )


@dataclass
class ChatChoice:
    """One choice of a /v1/chat/completions answer."""

    index: int
    content: str
    reasoning_content: str | None
    """What the model wrote before closing its thinking (thinking mode; else None)."""
    finish_reason: str | None
    """One of "stop", "length", "abort"."""
    logprobs: list
    """OpenAI's logprobs.content entries {token, logprob, bytes, top_logprobs} (logprobs=True)."""


@dataclass
class ChatResult:
    """A whole /v1/chat/completions answer."""

    choices: list
    usage: dict
    """{prompt_tokens, completion_tokens, total_tokens, prompt_tokens_details {cached_tokens}}."""
    weight_version: str | None
    """From system_fingerprint ("hart-w<version>")."""
    raw: dict = field(repr=False)

    @property
    def content(self):
        """The first choice's content."""
        return self.choices[0].content

    @classmethod
    def from_json(cls, obj):
        fingerprint = obj.get("system_fingerprint") or ""
        return cls(
            choices=[
                ChatChoice(
                    index=c["index"],
                    content=c["message"].get("content") or "",
                    reasoning_content=c["message"].get("reasoning_content"),
                    finish_reason=c.get("finish_reason"),
                    logprobs=(c.get("logprobs") or {}).get("content") or [],
                )
                for c in obj["choices"]
            ],
            usage=obj.get("usage") or {},
            weight_version=fingerprint[len("hart-w"):] if fingerprint.startswith("hart-w") else None,
            raw=obj,
        )


@dataclass
class ChatDelta:
    """One piece of a streamed chat answer: new text of one choice, or (index None) the
    closing usage chunk."""

    index: int | None
    content: str
    reasoning_content: str
    finish_reason: str | None
    """Set on the choice's last delta."""
    logprobs: list
    usage: dict | None
    raw: dict = field(repr=False)

    @classmethod
    def from_chunk(cls, chunk):
        """The deltas of one chat.completion.chunk: one per choice, or the usage alone."""
        if not chunk["choices"]:
            return [cls(None, "", "", None, [], chunk.get("usage"), chunk)]
        return [
            cls(
                index=c["index"],
                content=c["delta"].get("content") or "",
                reasoning_content=c["delta"].get("reasoning_content") or "",
                finish_reason=c.get("finish_reason"),
                logprobs=(c.get("logprobs") or {}).get("content") or [],
                usage=None,
                raw=chunk,
            )
            for c in chunk["choices"]
        ]
