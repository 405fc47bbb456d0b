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

try:  # the HTTP library the installed openai client is built on (httpx2 from openai 3, httpx before)
    import httpx2 as httpx
except ImportError:  # pragma: no cover - older openai
    import httpx

# An answer longer than this is refused unread: a kernel and its rationale fit in a few KiB, and
# every reader after this one (JSON, regular expressions) would otherwise spend time in proportion.
DEFAULT_MAX_ANSWER_CHARS = 256 * 1024

_RETRYABLE = (openai.APIConnectionError, openai.APITimeoutError, openai.RateLimitError,
              openai.InternalServerError)

# What a malformed answer can raise while it is read: it becomes answer.error. Anything else (a worker's
# time limit, celery's SoftTimeLimitExceeded among them, KeyboardInterrupt) propagates to the caller.
_GARBLED = (ValueError, TypeError, AttributeError, KeyError, IndexError, LookupError, httpx.HTTPError)

# Calls in a row that found nobody at the endpoint (each already retried max_retries times) before the
# client gives up with LLMUnreachable: one refused call may be a server restarting, three in a row (twelve
# connection attempts over several back-offs) is an address that is wrong or a server that is down, and
# every further call only spends the run's LLM budget on the same error.
UNREACHABLE_AFTER_CALLS = 3


class LLMUnreachable(Exception):
    """The endpoint refused or dropped the connection on several calls in a row: the run cannot go on."""

    def __init__(self, base_url: str | None, detail: str) -> None:
        self.base_url = base_url
        self.detail = detail
        super().__init__(f"The LLM endpoint {base_url or '(default)'} did not answer: {detail.rstrip('.')}. "
                         "Check OPENAI_BASE_URL and resume.")


def never_swallow(exc: BaseException) -> bool:
    """Whether an exception must propagate even through a broad `except Exception`: a worker's time limit
    (celery's SoftTimeLimitExceeded subclasses Exception; named so that this package needs no celery) or an
    endpoint found unreachable."""
    if isinstance(exc, LLMUnreachable) or not isinstance(exc, Exception):
        return True
    return any(k.__name__ in ("SoftTimeLimitExceeded", "TimeLimitExceeded", "Terminated") for k in type(exc).__mro__)


def note_waiting_for(exc: BaseException, what: str) -> None:
    """Record on an exception that interrupts a call what the call was waiting for (the innermost note wins)."""
    if getattr(exc, "waiting_for", None) is None:
        try:
            exc.waiting_for = what
        except AttributeError:  # pragma: no cover - an exception type without a __dict__
            pass


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


class LLMCallBudget:
    """How many LLM calls a run may still make; shared by its generator and its surrogate."""

    def __init__(self, limit: int, used: int = 0) -> None:
        self.limit = max(0, int(limit))
        self.used = max(0, int(used))
        self._lock = threading.Lock()

    @property
    def spent(self) -> bool:
        return self.used >= self.limit

    def take(self) -> bool:
        with self._lock:
            if self.used >= self.limit:
                return False
            self.used += 1
            return True


class AnswerTooLarge(Exception):
    """The HTTP body of an answer passed the size cap while it was being read."""


class _CappedStream(httpx.SyncByteStream):
    def __init__(self, stream, max_bytes: int) -> None:
        self.stream = stream
        self.max_bytes = max_bytes

    def __iter__(self):
        read = 0
        for chunk in self.stream:
            read += len(chunk)
            if read > self.max_bytes:
                raise AnswerTooLarge(f"The LLM answer is larger than the {self.max_bytes // 1024} KiB limit.")
            yield chunk

    def close(self) -> None:
        self.stream.close()


class _CappedTransport(httpx.HTTPTransport):
    """Stops reading an HTTP body at max_bytes, so a runaway answer cannot fill the worker's memory."""

    def __init__(self, max_bytes: int) -> None:
        super().__init__()
        self.max_bytes = max_bytes

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = super().handle_request(request)
        response.stream = _CappedStream(response.stream, self.max_bytes)
        return response


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
    max_answer_chars: int = DEFAULT_MAX_ANSWER_CHARS
    budget: LLMCallBudget | None = None
    sleep: Callable[[float], None] = time.sleep
    client: object | None = None
    unreachable_after: int = UNREACHABLE_AFTER_CALLS  # calls in a row without a connection; 0: never give up
    _semaphore: threading.BoundedSemaphore = field(init=False, repr=False)
    _unreachable_calls: int = field(default=0, init=False, repr=False)
    _unreachable_lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.client is None:
            # JSON escapes (\n, \") make the body of an answer longer than its text: room for twice.
            http_client = httpx.Client(transport=_CappedTransport(2 * self.max_answer_chars + 64 * 1024),
                                       timeout=self.timeout_s)
            # The openai client's own retries are off: this class retries with its own back-off.
            self.client = openai.OpenAI(base_url=self.base_url, api_key=self.api_key or "not-needed",
                                        timeout=self.timeout_s, max_retries=0, http_client=http_client)
        self._semaphore = threading.BoundedSemaphore(max(1, self.max_concurrency))

    def chat(self, messages: list[dict], *, tool: dict | None = None, max_tokens: int | None = None,
             temperature: float | None = None, seed: int | None = None, force_tool: bool = True) -> ChatAnswer:
        """One chat completion; with a tool, the call is forced (tool_choice names the function) unless
        `force_tool` is False, when the model may call it or answer in text.

        Raises LLMUnreachable once `unreachable_after` calls in a row found no connection; an exception
        that interrupts the call (a worker's time limit) propagates, noting what it was waiting for."""
        try:
            answer, unreachable = self._chat(messages, tool=tool, max_tokens=max_tokens, temperature=temperature,
                                             seed=seed, force_tool=force_tool)
        except BaseException as exc:
            note_waiting_for(exc, f"an answer from the LLM endpoint {self.base_url or '(default)'} (model {self.model})")
            raise
        with self._unreachable_lock:
            self._unreachable_calls = self._unreachable_calls + 1 if unreachable else 0
            give_up = bool(unreachable and self.unreachable_after and self._unreachable_calls >= self.unreachable_after)
        if give_up:
            raise LLMUnreachable(self.base_url, unreachable)
        return answer

    def _chat(self, messages, *, tool, max_tokens, temperature, seed, force_tool) -> tuple[ChatAnswer, str | None]:
        """The answer, and the connection error when the endpoint could not be reached at all (else None)."""
        answer = ChatAnswer()
        unreachable = None
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
                kwargs["tool_choice"] = ({"type": "function", "function": {"name": tool["function"]["name"]}}
                                         if force_tool else "auto")
            # One call takes one unit of the budget, however many attempts (retries, a fallback without tools) it makes.
            if attempt == 1 and self.budget is not None and not self.budget.take():
                answer.error = f"The run's budget of {self.budget.limit} LLM calls is spent."
                attempt -= 1
                break
            try:
                with self._semaphore:
                    response = self.client.chat.completions.create(**kwargs)
                self._read(response, answer)
            except AnswerTooLarge as exc:
                answer.error = str(exc)
                break
            except openai.BadRequestError as exc:
                if use_tools:
                    # Some servers refuse tools outright; ask again for a JSON object in the content.
                    use_tools = False
                    continue
                answer.error = f"The LLM endpoint refused the request: {_short(exc)}"
                break
            except _RETRYABLE as exc:
                too_large = _cause(exc, AnswerTooLarge)
                if too_large is not None:
                    answer.error = str(too_large)
                    break
                if attempt > self.max_retries:
                    answer.error = f"The LLM endpoint did not answer after {attempt} attempts: {_short(exc)}"
                    # A time-out means a server took the connection (slow, not absent): only refused or
                    # dropped connections count towards LLMUnreachable.
                    if isinstance(exc, openai.APIConnectionError) and not isinstance(exc, openai.APITimeoutError):
                        unreachable = _short(exc)
                    break
                self.sleep(min(self.max_backoff_s, self.backoff_s * 2 ** (attempt - 1)))
                continue
            except openai.APIError as exc:
                answer.error = f"The LLM endpoint answered with an error: {_short(exc)}"
                break
            except RecursionError:
                answer.error = "The LLM answer is nested too deeply to read."
                break
            except _GARBLED as exc:  # a malformed response must not stop a search
                answer.error = f"The LLM answer could not be read: {type(exc).__name__}: {_short(exc)}"
                break
            answer.used_tools = use_tools
            break
        answer.attempts = attempt
        answer.latency_s = time.monotonic() - started
        return answer, unreachable

    def _read(self, response, answer: ChatAnswer) -> None:
        """Copy what the answer holds into `answer`; a field of the wrong shape becomes answer.error.

        Servers answer with anything (the openai client builds its objects without validating), so
        every field is read as if it may be missing, null, or of another type."""
        usage = _field(response, "usage")
        answer.tokens_in = _count(_field(usage, "prompt_tokens"))
        answer.tokens_out = _count(_field(usage, "completion_tokens"))
        choices = _field(response, "choices")
        if not isinstance(choices, (list, tuple)):
            answer.error = ("The LLM endpoint returned no choices." if choices is None else
                            f"The LLM answer's choices are {_kind(choices)}, not a list.")
            return
        if not choices:
            answer.error = "The LLM endpoint returned no choices."
            return
        choice = choices[0]
        message = _field(choice, "message")
        if message is None or isinstance(message, (str, int, float, bool, list)):
            answer.error = f"The LLM answer has {_kind(message)} where its message should be."
            return
        finish = _field(choice, "finish_reason")
        answer.finish_reason = finish if isinstance(finish, str) else None
        content = _field(message, "content")
        refusal = _field(message, "refusal")
        answer.refusal = refusal[: self.max_answer_chars] if isinstance(refusal, str) else None
        calls = _field(message, "tool_calls")
        function = None
        if isinstance(calls, (list, tuple)) and calls:
            function = _field(calls[0], "function")
            if function is None or isinstance(function, (str, int, float, bool, list)):
                answer.error = f"The LLM answer's tool call has {_kind(function)} where its function should be."
                return
        elif calls not in (None, [], ()):
            answer.error = f"The LLM answer's tool calls are {_kind(calls)}, not a list."
            return
        elif _field(message, "function_call") is not None:
            function = _field(message, "function_call")
        if function is not None:
            name, arguments = _field(function, "name"), _field(function, "arguments")
            if isinstance(arguments, dict):
                arguments = _dumps(arguments)
            if arguments is not None and not isinstance(arguments, str):
                answer.error = f"The LLM answer's tool arguments are {_kind(arguments)}, not text."
                return
            answer.tool_name = name if isinstance(name, str) else None
            answer.tool_arguments = arguments
        if content is not None and not isinstance(content, str):
            if answer.tool_arguments is None:
                answer.error = f"The LLM answer's content is {_kind(content)}, not text."
                return
            content = None
        answer.content = content
        for text in (answer.content, answer.tool_arguments):
            if text is not None and len(text) > self.max_answer_chars:
                answer.content = answer.tool_arguments = None
                answer.error = (f"The LLM answer is {len(text) // 1024} KiB long, over the "
                                f"{self.max_answer_chars // 1024} KiB limit.")
                return


def _field(obj, name: str):
    """obj.name or obj[name], or None when obj has no such field (objects, dicts and anything else)."""
    if obj is None:
        return None
    if isinstance(obj, dict):
        return obj.get(name)
    if isinstance(obj, (str, bytes, int, float, bool, list, tuple)):
        return None
    try:
        return getattr(obj, name, None)
    except Exception as exc:
        if never_swallow(exc):
            raise
        return None


def _count(value) -> int:
    """A token count, or 0 when the server sent something that is not a plain non-negative integer."""
    if isinstance(value, bool):
        return 0
    if isinstance(value, int):
        return max(0, min(value, 2**31 - 1))
    if isinstance(value, float) and value == value and 0 <= value < 2**31:
        return int(value)
    return 0


def _kind(value) -> str:
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return "a true/false value"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, (list, tuple)):
        return "a list"
    return "an object"


def _dumps(value) -> str | None:
    import json

    try:
        return json.dumps(value)
    except (TypeError, ValueError, RecursionError):
        return None


def _cause(exc: BaseException, kind: type) -> BaseException | None:
    seen = 0
    while exc is not None and seen < 16:
        if isinstance(exc, kind):
            return exc
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return None


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
    """The exception's message as the end of a sentence (it follows a colon in every use)."""
    text = str(exc).strip().replace("\n", " ") or type(exc).__name__
    text = text if len(text) <= limit else text[: limit - 1] + "…"
    return text if text.endswith((".", "…")) else text + "."
