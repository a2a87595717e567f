"""The one exception type the client raises for what the server refused or could not answer."""
import json


class HartError(Exception):
    """The server answered with a non-2xx status, or reported a failure mid-stream.

    status: the HTTP status (for a failure mid-stream, the stream's own 200; None for
    HartConnectionError); message: the server's message; body: the parsed JSON answer (the
    raw text when it is not JSON).
    """

    def __init__(self, status, message, body=None):
        super().__init__(f"HTTP {status}: {message}" if status is not None else message)
        self.status = status
        self.message = message
        self.body = body


class HartConnectionError(HartError):
    """No answer: the server could not be reached, closed the connection, or sent nothing
    for the client's timeout. status is None, so callers can retry these and not the 4xx."""

    def __init__(self, message):
        super().__init__(None, message)


def error_from_answer(status, raw):
    """A HartError from a non-2xx answer, in any of the server's shapes (docs/http.md):
    OpenAI's {"error": {"message", ...}}, the weight endpoints' {"success": false, "message"}."""
    text = raw.decode(errors="replace")
    try:
        body = json.loads(text)
    except ValueError:
        return HartError(status, text.strip() or "(empty answer)", text)
    message = None
    if isinstance(body, dict):
        error = body.get("error")
        message = error.get("message") if isinstance(error, dict) else body.get("message")
    return HartError(status, message or text.strip(), body)
