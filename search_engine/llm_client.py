"""One way to call an OpenAI-compatible chat endpoint: time-outs, retries with back-off, a concurrency
limit, token and latency accounting, and a forced tool call with a plain-content fallback.

Works unchanged against a hosted model, vLLM or llama.cpp's server: the caller gives base_url,
api_key and model.
"""

from __future__ import annotations

import re
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

# Calls in a row that the endpoint failed (each already retried max_retries times where retrying can help) before
# the client gives up with LLMUnreachable: a refused or dropped connection, an answer of HTTP 401/403/404 (a wrong
# key, model or address), or server errors (5xx), rate limits (429) and time-outs that outlasted every retry. One
# such call may be a server restarting; three in a row is an endpoint that is wrong or down, and every further call
# would only spend the run's LLM budget on the same error.
UNREACHABLE_AFTER_CALLS = 3

# HTTP statuses that say the key (401, 403), the model or the address (404) is wrong: no retry can help.
CONFIGURATION_STATUSES = (401, 403, 404)


def redact_url(url: str | None) -> str:
    """An endpoint's address as it may be shown in a message, a log or a run's status: without the user:password
    part and the query string or fragment (where credentials go), "(default)" when none was given."""
    if not url:
        return "(default)"
    text = str(url).strip().split("#", 1)[0].split("?", 1)[0]
    scheme, sep, rest = text.partition("://")
    if not sep:
        scheme, rest = "", text
    if "@" in rest:  # userinfo: everything up to the last @ (a password may hold characters a parser stops at)
        rest = rest.rpartition("@")[2]
    return f"{scheme}{sep}{rest}"


def as_clause(sentence: str) -> str:
    """A sentence as the end of another: its full stop dropped, its first word in lower case unless it is a name
    (LLM, HTTP)."""
    text = sentence.strip().rstrip(".")
    first = text.split(" ", 1)[0]
    if first[:1].isupper() and first[1:2].islower():
        text = text[0].lower() + text[1:]
    return text


@dataclass(frozen=True)
class EndpointFailure:
    """Why one call got nothing from the endpoint itself: `kind` is connection, timeout, server (5xx),
    overloaded (429), auth (401, 403) or not-found (404); `detail` the error's own words."""

    kind: str
    detail: str
    status: int | None = None


# The most of the server's own words a message about a failing endpoint quotes: a status line shows the first 160
# characters of a run's reason, and what to check comes after them.
DETAIL_CHARS = 60


class LLMUnreachable(Exception):
    """The endpoint failed several calls in a row (UNREACHABLE_AFTER_CALLS): the caller cannot go on.

    `problem` says what happened, as a clause ("the LLM endpoint http://host/v1 did not answer: Connection error");
    `check(...)` what to check, in the caller's own names for the settings (a run's environment variables, a
    command's flags); str() is the problem as a sentence, without advice. The address never shows credentials."""

    def __init__(self, base_url: str | None, failure: EndpointFailure | str, *, model: str | None = None,
                 calls: int = 1) -> None:
        if isinstance(failure, str):
            failure = EndpointFailure("connection", failure)
        self.base_url = redact_url(base_url)
        self.failure = failure
        self.kind = failure.kind
        self.detail = failure.detail
        self.status = failure.status
        self.model = model
        self.calls = calls
        super().__init__(self.problem[0].upper() + self.problem[1:] + ".")

    @property
    def problem(self) -> str:
        where = f"the LLM endpoint {self.base_url}"
        in_a_row = f"{self.calls} calls in a row" if self.calls > 1 else "a call"
        if self.kind == "auth":
            what = f"{where} refused the API key (HTTP {self.status})"
        elif self.kind == "not-found":
            what = f"{where} answered HTTP 404" + (f" for model {self.model}" if self.model else "")
        elif self.kind == "timeout":
            what = f"{where} timed out on {in_a_row}"
        elif self.kind in ("server", "overloaded"):
            what = f"{where} answered HTTP {self.status} to {in_a_row}"
        else:
            what = f"{where} did not answer"
        # The server's words, less the status the clause already gives ("Error code: 404 - no such model").
        detail = "" if self.kind == "timeout" else re.sub(r"^Error code: \d+ - ", "", self.detail.strip()).rstrip(".")
        if len(detail) > DETAIL_CHARS:
            detail = detail[: DETAIL_CHARS - 1].rstrip() + "…"
        return f"{what}: {detail}" if detail else what

    def check(self, *, base_url: str, api_key: str, model: str, timeout: str) -> str:
        """What to check, as a clause ("check OPENAI_API_KEY"), given the caller's names for the endpoint's
        address, key, model and time-out settings."""
        return {
            "auth": f"check {api_key}",
            "not-found": f"check {model} and {base_url}",
            "timeout": f"check the server or raise {timeout}",
            "server": "check the server's logs",
            "overloaded": "check the server's rate limits",
        }.get(self.kind, f"check {base_url} and that the server runs")


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
        # What the calls came to, for the run's last word when the budget is spent: how many gave something the
        # search used (a candidate, a forecast), and the reason the last one that did not failed.
        self.useful = 0
        self.last_error: str | None = None
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

    def note(self, error: str | None) -> None:
        """What a call came to: None when the search could use its answer, else the reason it could not."""
        with self._lock:
            if error is None:
                self.useful += 1
            else:
                self.last_error = error

    @property
    def every_call_failed(self) -> bool:
        return self.used > 0 and self.useful == 0 and self.last_error is not None


class AnswerTooLarge(Exception):
    """The HTTP body of an answer passed the size cap while it was being read."""


class _CappedStream(httpx.SyncByteStream):
    def __init__(self, stream, max_bytes: int, limit_chars: int) -> None:
        self.stream = stream
        self.max_bytes = max_bytes
        self.limit_chars = limit_chars

    def __iter__(self):
        read = 0
        for chunk in self.stream:
            read += len(chunk)
            if read > self.max_bytes:
                raise AnswerTooLarge(f"The LLM answer is over the {self.limit_chars // 1024} KiB limit "
                                     f"(KERNELLAB_LLM_MAX_ANSWER_KB); reading stopped at {self.max_bytes // 1024} KiB.")
            yield chunk

    def close(self) -> None:
        self.stream.close()


class _CappedTransport(httpx.HTTPTransport):
    """Stops reading an HTTP body at max_bytes, so a runaway answer cannot fill the worker's memory."""

    def __init__(self, max_bytes: int, limit_chars: int | None = None) -> None:
        super().__init__()
        self.max_bytes = max_bytes
        self.limit_chars = limit_chars or max_bytes

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = super().handle_request(request)
        response.stream = _CappedStream(response.stream, self.max_bytes, self.limit_chars)
        return response


@dataclass
class LLMClient:
    base_url: str | None = field(repr=False)  # may hold credentials: shown only through redact_url
    api_key: str | None = field(repr=False)
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
    unreachable_after: int = UNREACHABLE_AFTER_CALLS  # calls in a row the endpoint failed; 0: never give up
    _semaphore: threading.BoundedSemaphore = field(init=False, repr=False)
    _unreachable_calls: int = field(default=0, init=False, repr=False)
    _unreachable_lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.client is None:
            # JSON escapes (\n, \") make the body of an answer longer than its text: room for twice.
            http_client = httpx.Client(transport=_CappedTransport(2 * self.max_answer_chars + 64 * 1024,
                                                                  self.max_answer_chars),
                                       timeout=self.timeout_s)
            # The openai client's own retries are off: this class retries with its own back-off.
            self.client = openai.OpenAI(base_url=self.base_url, api_key=self.api_key or "not-needed",
                                        timeout=self.timeout_s, max_retries=0, http_client=http_client)
        self._semaphore = threading.BoundedSemaphore(max(1, self.max_concurrency))

    def chat(self, messages: list[dict], *, tool: dict | None = None, max_tokens: int | None = None,
             temperature: float | None = None, seed: int | None = None, force_tool: bool = True) -> ChatAnswer:
        """One chat completion; with a tool, the call is forced (tool_choice names the function) unless
        `force_tool` is False, when the model may call it or answer in text.

        Raises LLMUnreachable once `unreachable_after` calls in a row got nothing from the endpoint itself
        (EndpointFailure: no connection, HTTP 401/403/404, or 5xx, 429 and time-outs after every retry); an
        exception that interrupts the call (a worker's time limit) propagates, noting what it was waiting for."""
        try:
            answer, failure = self._chat(messages, tool=tool, max_tokens=max_tokens, temperature=temperature,
                                         seed=seed, force_tool=force_tool)
        except BaseException as exc:
            note_waiting_for(exc, f"an answer from the LLM endpoint {redact_url(self.base_url)} (model {self.model})")
            raise
        if self.budget is not None and answer.error and answer.attempts:  # (no attempt: the budget was spent)
            self.budget.note(answer.error)
        with self._unreachable_lock:
            self._unreachable_calls = self._unreachable_calls + 1 if failure else 0
            calls = self._unreachable_calls
            give_up = bool(failure and self.unreachable_after and calls >= self.unreachable_after)
        if give_up:
            raise LLMUnreachable(self.base_url, failure, model=self.model, calls=calls)
        return answer

    def _chat(self, messages, *, tool, max_tokens, temperature, seed,
              force_tool) -> tuple[ChatAnswer, EndpointFailure | None]:
        """The answer, and why the endpoint itself failed the call (EndpointFailure), else None."""
        answer = ChatAnswer()
        failure = None
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
                    tries = f"{attempt} attempt" + ("s" if attempt != 1 else "")
                    answer.error = f"The LLM endpoint did not answer after {tries}: {_short(exc)}"
                    failure = _endpoint_failure(exc)
                    break
                self.sleep(min(self.max_backoff_s, self.backoff_s * 2 ** (attempt - 1)))
                continue
            except openai.APIError as exc:
                answer.error = f"The LLM endpoint answered with an error: {_short(exc)}"
                if getattr(exc, "status_code", None) in CONFIGURATION_STATUSES:
                    failure = _endpoint_failure(exc)  # a wrong key, model or address: no retry can help
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
        return answer, failure

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
                                f"{self.max_answer_chars // 1024} KiB limit (KERNELLAB_LLM_MAX_ANSWER_KB).")
                return


def _endpoint_failure(exc: Exception) -> EndpointFailure:
    """The kind of failure an exception of the openai client is (see EndpointFailure)."""
    status = getattr(exc, "status_code", None)
    if isinstance(exc, openai.APITimeoutError):
        kind = "timeout"
    elif isinstance(exc, openai.APIConnectionError):
        kind = "connection"
    elif status in (401, 403):
        kind = "auth"
    elif status == 404:
        kind = "not-found"
    elif status == 429:
        kind = "overloaded"
    else:
        kind = "server"
    return EndpointFailure(kind, _short(exc), status if isinstance(status, int) else None)


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
