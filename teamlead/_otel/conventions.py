"""The names teamlead's spans and metrics use, and what they may carry.

The ``gen_ai.*`` names follow the OpenTelemetry semantic conventions for generative AI
(agent spans ``invoke_agent``, model spans ``chat``, the client metrics); the
``teamlead.*`` names are what those conventions have no word for (resumes, the inbox wait,
the spawn gate, the relay's pacing). Spans are named as the conventions say:
``{operation} {agent name or model}``.

Privacy:

- no header but the CLI's session and agent ids is ever read, so the API key cannot
  reach a span; every text that does go in passes :func:`teamlead._redact.redact`;
- prompt and result text only when the conventions' opt-in says so:
  ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` = ``true``, ``span_only`` or
  ``span_and_event`` (:func:`capture_content`);
- ids (session, agent, tool use, trial) are span attributes only; metric attributes are
  the operation, provider, model, token type, bucket and outcome, never an id.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping

from .._redact import redact

__all__ = [
    "CAPTURE_VARIABLE",
    "PROVIDER",
    "capture_content",
    "messages",
]

PROVIDER = "anthropic"
#: The conventions' opt-in for prompt and completion text.
CAPTURE_VARIABLE = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
_CAPTURE_ON = frozenset({"true", "1", "yes", "span_only", "span_and_event"})
#: The most characters of one captured text (a span attribute is not a transcript).
MAX_CAPTURED_CHARS = 8192

# -- gen_ai.* ---------------------------------------------------------------------------
OPERATION = "gen_ai.operation.name"
PROVIDER_NAME = "gen_ai.provider.name"
AGENT_ID = "gen_ai.agent.id"
AGENT_NAME = "gen_ai.agent.name"
CONVERSATION_ID = "gen_ai.conversation.id"
REQUEST_MODEL = "gen_ai.request.model"
RESPONSE_MODEL = "gen_ai.response.model"
RESPONSE_ID = "gen_ai.response.id"
FINISH_REASONS = "gen_ai.response.finish_reasons"
INPUT_TOKENS = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
CACHE_READ_TOKENS = "gen_ai.usage.cache_read.input_tokens"
CACHE_CREATION_TOKENS = "gen_ai.usage.cache_creation.input_tokens"
TOKEN_TYPE = "gen_ai.token.type"
INPUT_MESSAGES = "gen_ai.input.messages"
OUTPUT_MESSAGES = "gen_ai.output.messages"
ERROR_TYPE = "error.type"

INVOKE_AGENT = "invoke_agent"
CHAT = "chat"


def capture_content(environ: Mapping[str, str]) -> bool:
    """Whether prompt and result text may go into spans (the conventions' opt-in).

    Example:
        >>> capture_content({"OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "SPAN_ONLY"})
        True
        >>> capture_content({})
        False
    """
    return (environ.get(CAPTURE_VARIABLE) or "").strip().lower() in _CAPTURE_ON


def messages(role: str, text: str, scrub: Callable[[str], str] = redact) -> str:
    """One message in the conventions' shape (``[{role, parts: [{type, content}]}]``), as
    the JSON string a span attribute holds, redacted (by ``scrub``) and capped.

    Example:
        >>> messages("user", "hello")
        '[{"role": "user", "parts": [{"type": "text", "content": "hello"}]}]'
    """
    content = scrub(text)[:MAX_CAPTURED_CHARS]
    return json.dumps([{"role": role, "parts": [{"type": "text", "content": content}]}])
