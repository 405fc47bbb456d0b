"""One way to call an OpenAI-compatible chat endpoint: time-outs, retries with back-off, a concurrency
limit, token and latency accounting, and a forced tool call with a plain-content fallback.

Works unchanged against a hosted model, vLLM or llama.cpp's server: the caller gives base_url,
api_key and model.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Callable

import openai

_RETRYABLE = (openai.APIConnectionError, openai.APITimeoutError, openai.RateLimitError,
              openai.InternalServerError)


@dataclass
class ChatAnswer:
    content: str | None = None
    tool_name: str | None = None
    tool_arguments: str | None = None
    refusal: str | None = None
    finish_reason: str | None = None
    tokens_in: int = 0
    tokens_out: int = 0
    latency_s: float = 0.0
    attempts: int = 0
    used_tools: bool = False
    error: str | None = None  # a sentence when no answer came back


@dataclass
class LLMClient:
    base_url: str | None
    api_key: str | None
    model: str
    timeout_s: float = 120.0
    max_retries: int = 3
    backoff_s: float = 1.0
    max_backoff_s: float = 30.0
    max_concurrency: int = 4
    temperature: float = 0.0
    max_tokens: int = 1024
    seed: int | None = None
    extra_body: dict | None = None
    fold_system: bool = False  # for chat templates without a system role (Gemma): prepend it to the user turn
    sleep: Callable[[float], None] = time.sleep
    client: object | None = None
    _semaphore: threading.BoundedSemaphore = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.client is None:
            # The openai client's own retries are off: this class retries with its own back-off.
            self.client = openai.OpenAI(base_url=self.base_url, api_key=self.api_key or "not-needed",
                                        timeout=self.timeout_s, max_retries=0)
        self._semaphore = threading.BoundedSemaphore(max(1, self.max_concurrency))

    def chat(self, messages: list[dict], *, tool: dict | None = None, max_tokens: int | None = None,
             temperature: float | None = None, seed: int | None = None) -> ChatAnswer:
        """One chat completion; with a tool, the call is forced (tool_choice names the function)."""
        answer = ChatAnswer()
        if self.fold_system:
            messages = fold_system_message(messages)
        use_tools = tool is not None
        started = time.monotonic()
        attempt = 0
        while True:
            attempt += 1
            kwargs = {
                "model": self.model,
                "messages": messages,
                "max_tokens": max_tokens or self.max_tokens,
                "temperature": self.temperature if temperature is None else temperature,
            }
            if (seed if seed is not None else self.seed) is not None:
                kwargs["seed"] = seed if seed is not None else self.seed
            if self.extra_body:
                kwargs["extra_body"] = self.extra_body
            if use_tools:
                kwargs["tools"] = [tool]
                kwargs["tool_choice"] = {"type": "function", "function": {"name": tool["function"]["name"]}}
            try:
                with self._semaphore:
                    response = self.client.chat.completions.create(**kwargs)
            except openai.BadRequestError as exc:
                if use_tools:
                    # Some servers refuse tools outright; ask again for a JSON object in the content.
                    use_tools = False
                    continue
                answer.error = f"The LLM endpoint refused the request: {_short(exc)}"
                break
            except _RETRYABLE as exc:
                if attempt > self.max_retries:
                    answer.error = f"The LLM endpoint did not answer after {attempt} attempts: {_short(exc)}"
                    break
                self.sleep(min(self.max_backoff_s, self.backoff_s * 2 ** (attempt - 1)))
                continue
            except openai.APIError as exc:
                answer.error = f"The LLM endpoint answered with an error: {_short(exc)}"
                break
            except Exception as exc:  # a malformed response must not stop a search
                answer.error = f"The LLM call failed: {type(exc).__name__}: {_short(exc)}"
                break
            self._read(response, answer)
            answer.used_tools = use_tools
            break
        answer.attempts = attempt
        answer.latency_s = time.monotonic() - started
        return answer

    @staticmethod
    def _read(response, answer: ChatAnswer) -> None:
        usage = getattr(response, "usage", None)
        answer.tokens_in = int(getattr(usage, "prompt_tokens", 0) or 0)
        answer.tokens_out = int(getattr(usage, "completion_tokens", 0) or 0)
        choices = getattr(response, "choices", None) or []
        if not choices:
            answer.error = "The LLM endpoint returned no choices."
            return
        choice = choices[0]
        message = choice.message
        answer.finish_reason = choice.finish_reason
        answer.content = message.content
        answer.refusal = getattr(message, "refusal", None)
        calls = getattr(message, "tool_calls", None) or []
        if calls:
            answer.tool_name = calls[0].function.name
            answer.tool_arguments = calls[0].function.arguments
        elif getattr(message, "function_call", None) is not None:
            answer.tool_name = message.function_call.name
            answer.tool_arguments = message.function_call.arguments


def fold_system_message(messages: list[dict]) -> list[dict]:
    """The system text moved to the start of the first user message."""
    system = "\n\n".join(m["content"] for m in messages if m["role"] == "system")
    rest = [dict(m) for m in messages if m["role"] != "system"]
    if not system:
        return rest
    for m in rest:
        if m["role"] == "user":
            m["content"] = system + "\n\n" + m["content"]
            return rest
    return [{"role": "user", "content": system}] + rest


def _short(exc: Exception, limit: int = 300) -> str:
    text = str(exc).strip().replace("\n", " ")
    return text if len(text) <= limit else text[: limit - 1] + "…"
