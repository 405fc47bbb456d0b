"""LLM surrogate: a chat model reads reference, candidate and hardware and forecasts the speedup bin.

One forced tool call; a JSON object in the content as the fallback. A garbled, partial, out-of-range
or refused answer, or an endpoint that does not answer, becomes an abstention with its reason; an endpoint
that fails several calls in a row (see LLMClient.chat) raises LLMUnreachable, which stops the run.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from search_engine.bins import DEFAULT_BINS, BinTable
from search_engine.llm_client import LLMClient, never_swallow, note_waiting_for, redact_url
from search_engine.prompts import AnswerError, forecast_messages, forecast_tool, parse_forecast
from search_engine.surrogates.base import Forecast, ForecastRequest
from search_engine.surrogates.cache import ForecastCache, MemoryCache


class LLMSurrogate:
    name = "llm"

    def __init__(self, client: LLMClient, *, bins: BinTable = DEFAULT_BINS, cache: ForecastCache | None = None,
                 use_tools: bool = True, max_tokens: int | None = None, prompt_version: str = "p1") -> None:
        self.client = client
        self.bins = bins
        self.cache = cache if cache is not None else MemoryCache()
        self.use_tools = use_tools
        self.max_tokens = max_tokens
        self.version = f"{client.model}/{prompt_version}"

    @property
    def id(self) -> str:
        return f"{self.name}@{self.version}"

    def forecast(self, request: ForecastRequest) -> Forecast:
        key = request.cache_key(self.id)
        cached = self.cache.get(key)
        if cached is not None:
            forecast = Forecast.from_dict(cached)
            forecast.cached = True
            return forecast
        answer = self.client.chat(forecast_messages(request, self.bins),
                                  tool=forecast_tool(self.bins) if self.use_tools else None,
                                  max_tokens=self.max_tokens)
        cost = {"latency_s": answer.latency_s, "tokens_in": answer.tokens_in, "tokens_out": answer.tokens_out}
        if answer.error:
            return Forecast.abstention(answer.error, surrogate=self.id, **cost)  # (the client noted it on the budget)
        budget = getattr(self.client, "budget", None)
        excerpt = answer.tool_arguments or answer.content
        excerpt = excerpt[:1000] if isinstance(excerpt, str) else ""
        try:
            parsed = parse_forecast(answer.tool_arguments, answer.content, self.bins, refusal=answer.refusal,
                                    max_chars=getattr(self.client, "max_answer_chars", None))
            forecast = Forecast.from_probabilities(parsed.probabilities, surrogate=self.id, reasoning=parsed.reasoning,
                                           raw_sum=parsed.raw_sum, **cost)
        except AnswerError as exc:
            reason = str(exc)
            if answer.finish_reason == "length":
                reason += " The answer hit the token limit."
            if budget is not None:
                budget.note(reason)
            return Forecast.abstention(reason, surrogate=self.id, reasoning=excerpt, **cost)
        except Exception as exc:  # whatever an answer holds, it becomes an abstention, never a crash
            if never_swallow(exc):
                raise
            reason = f"The answer could not be used ({type(exc).__name__}: {str(exc)[:200]})."
            if budget is not None:
                budget.note(reason)
            return Forecast.abstention(reason, surrogate=self.id, reasoning=excerpt, **cost)
        if budget is not None:
            budget.note(None)
        # Only usable answers are cached: an abstention may be a passing fault worth asking again.
        self.cache.put(key, forecast.to_dict())
        return forecast

    def forecast_many(self, requests: list[ForecastRequest]) -> list[Forecast]:
        if len(requests) <= 1:
            return [self.forecast(r) for r in requests]
        pool = ThreadPoolExecutor(max_workers=max(1, self.client.max_concurrency))
        try:
            forecasts = list(pool.map(self.forecast, requests))
        except BaseException as exc:  # as in LLMGenerator.propose: never wait for calls still out
            pool.shutdown(wait=False, cancel_futures=True)
            note_waiting_for(exc, f"{len(requests)} forecast(s) from the LLM endpoint {redact_url(self.client.base_url)}")
            raise
        pool.shutdown(wait=True)
        return forecasts
