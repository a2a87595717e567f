"""A client for `hart serve --http-bind` (docs/http.md), standard library only: SGLang's
/generate for rollouts (log-probs, weight versions, cumulative streams), OpenAI's chat
completions, and the control verbs RL loops call around a weight update."""
from .client import HartClient
from .errors import HartConnectionError, HartError
from .results import ChatChoice, ChatDelta, ChatResult, GenerateResult

__all__ = ["HartClient", "HartError", "HartConnectionError", "GenerateResult", "ChatResult", "ChatChoice", "ChatDelta"]
