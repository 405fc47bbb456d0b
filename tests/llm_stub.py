"""Stub OpenAI-compatible servers on loopback. ChatServer answers each request with what a function of the
request says (a text, or an Answer: any body, status or delay); the tests that need an endpoint answering one
way use it. StubServer answers every chat call with a seeded draw from a catalogue of malformed answers (and
some good ones, so that runs grow and reach the surrogate).

StubServer is used by the fuzz test (tests/kernellab/test_llm_fuzz.py) and its benchmark (benchmarks/llm_fuzz.py).
A request that offers tools is the surrogate's, except one offering only search_cutlass, the generator's
(answered by the catalogue's `code_search()` where it has one); one without is the generator's. Every answer served
is logged with its kind and whether the search can use it ("use") or must record it as a failure
("fail"), so a caller can check that each unusable answer left a reason on a node."""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

SAXPY_DIR = Path(__file__).resolve().parent / "gpu_runner" / "problems" / "saxpy"
SLOW_S = 1.3  # longer than the 1 s client time-out the fuzz test gives the endpoint
HUGE_CHARS = 300 * 1024  # over the 256 KiB answer cap
DEEP = 100_000


def recorded_saxpy_variants(gpu: str = "h200") -> list[dict]:
    """Variants of the bundled saxpy family that have recorded measurements: good generator answers
    are these, so that they pass the check and measure on the replay backend without nvcc."""
    from gpu_runner import load_problem, render_variant, source_hash, valid_variants
    from gpu_runner.backends.replay import read_records

    spec = load_problem(SAXPY_DIR)
    recorded = {r.get("source_hash") for r in read_records(SAXPY_DIR / "records" / f"{gpu}.jsonl.gz")}
    variants = []
    for knobs in valid_variants(spec):
        candidate = render_variant(spec, knobs).to_dict()
        if source_hash(candidate["source"]) in recorded:
            variants.append({"source": candidate["source"], "launch": candidate["launch"], "knobs": knobs})
    return variants


def _completion(message, *, usage=None, finish="stop", choices=None) -> dict:
    body = {"id": "stub", "object": "chat.completion", "created": 0, "model": "stub"}
    body["choices"] = choices if choices is not None else [{"index": 0, "message": message, "finish_reason": finish}]
    body["usage"] = usage if usage is not None else {"prompt_tokens": 120, "completion_tokens": 40, "total_tokens": 160}
    return body


def _tool_message(arguments) -> dict:
    return {"role": "assistant", "content": None,
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "submit_forecast", "arguments": arguments}}]}


def _content(text) -> dict:
    return {"role": "assistant", "content": text}


def text_answer(text: str, *, usage: dict | None = None) -> Answer:
    """A chat completion whose message says `text`."""
    return Answer("text", "use", _completion(_content(text), usage=usage))


def forecast_answer(arguments: str | dict, *, usage: dict | None = None) -> Answer:
    """A chat completion calling submit_forecast with `arguments` (a JSON string, or anything else as it is)."""
    return Answer("forecast", "use", _completion(_tool_message(arguments), usage=usage, finish="tool_calls"))


GOOD_PROBS = [0.0, 0.02, 0.05, 0.13, 0.4, 0.3, 0.1, 0.0]


@dataclass
class Answer:
    """What the stub sends: a JSON body (or raw bytes), an HTTP status, an optional delay."""

    kind: str = ""
    outcome: str = ""  # "use" or "fail"
    body: dict | None = None
    raw: bytes | None = None
    status: int = 200
    delay_s: float = 0.0
    content_type: str = "application/json"

    def payload(self) -> bytes:
        if self.raw is not None:
            return self.raw
        return json.dumps(self.body).encode()


def _common(path: str, rng: random.Random) -> list[tuple[str, str, callable]]:
    """Malformed answers that break the envelope, the same for both paths."""
    return [
        ("message-null", "fail", lambda: Answer("", "", _completion(None))),
        ("choices-string", "fail", lambda: Answer("", "", _completion(None, choices="abc"))),
        ("choice-string", "fail", lambda: Answer("", "", _completion(None, choices=["abc"]))),
        ("choices-empty", "fail", lambda: Answer("", "", _completion(None, choices=[]))),
        ("choices-missing", "fail", lambda: Answer("", "", {"id": "stub", "object": "chat.completion"})),
        ("message-number", "fail", lambda: Answer("", "", _completion(7))),
        ("tool-function-null", "fail", lambda: Answer("", "", _completion(
            {"role": "assistant", "content": None, "tool_calls": [{"function": None}]}))),
        ("tool-calls-string", "fail", lambda: Answer("", "", _completion(
            {"role": "assistant", "content": None, "tool_calls": "call it"}))),
        ("content-number", "fail", lambda: Answer("", "", _completion(_content(12345)))),
        ("content-list", "fail", lambda: Answer("", "", _completion(_content(["a", 1])))),
        ("content-null", "fail", lambda: Answer("", "", _completion(_content(None)))),
        ("content-braces-40k", "fail", lambda: Answer("", "", _completion(_content("{" * 40_000)))),
        ("content-huge", "fail", lambda: Answer("", "", _completion(_content("x" * HUGE_CHARS)))),
        ("body-over-cap", "fail", lambda: Answer("", "", _completion(_content("\\" * (700 * 1024))))),
        ("body-cut-off", "fail", lambda: Answer("", "", raw=json.dumps(_completion(_content("Rationale: x"))).encode()[:57])),
        ("body-nested-100k", "fail", lambda: Answer("", "", raw=b'{"choices": ' + b"[" * DEEP + b"]" * DEEP + b"}")),
        ("body-empty", "fail", lambda: Answer("", "", raw=b"")),
        ("body-html", "fail", lambda: Answer("", "", raw=b"<html><body>502 Bad Gateway</body></html>",
                                              content_type="text/html")),
        ("body-number", "fail", lambda: Answer("", "", raw=b"12345")),
        ("http-500", "fail", lambda: Answer("", "", {"error": {"message": "internal"}}, status=500)),
        ("http-503", "fail", lambda: Answer("", "", {"error": {"message": "overloaded"}}, status=503)),
        ("http-429", "fail", lambda: Answer("", "", {"error": {"message": "slow down"}}, status=429)),
        ("http-404", "fail", lambda: Answer("", "", {"error": {"message": "no such model"}}, status=404)),
        ("http-401", "fail", lambda: Answer("", "", raw=b"unauthorised", status=401, content_type="text/plain")),
        ("slow", "fail", lambda: Answer("", "", _completion(_content("late")), delay_s=SLOW_S)),
    ]


class AnswerCatalogue:
    """Seeded answers for the generator and the surrogate; good ones about one time in four."""

    def __init__(self, seed: int, variants: list[dict], good_share: float = 0.25) -> None:
        self.rng = random.Random(seed)
        self.variants = variants
        self.good_share = good_share
        self._next_variant = 0

    def _good_kernel(self) -> str:
        variant = self.variants[self._next_variant % len(self.variants)]
        self._next_variant += 1
        return (f"Rationale: knobs {variant['knobs']}\n```cuda\n{variant['source']}\n```\n"
                f"```json\n{json.dumps(variant['launch'])}\n```")

    def generator(self) -> Answer:
        rng = self.rng
        if rng.random() < self.good_share:
            kinds = [
                ("good", "use", lambda k: _completion(_content(k))),
                ("good-usage-words", "use", lambda k: _completion(
                    _content(k), usage={"prompt_tokens": "many", "completion_tokens": [1]})),
                ("good-usage-string", "use", lambda k: _completion(_content(k), usage="lots")),
                ("good-finish-number", "use", lambda k: _completion(_content(k), finish=42)),
                ("good-tokens-huge", "use", lambda k: _completion(
                    _content(k), usage={"prompt_tokens": 10**30, "completion_tokens": -5})),
            ]
            kind, outcome, make = rng.choice(kinds)
            return Answer(kind, outcome, make(self._good_kernel()))
        code = self.variants[rng.randrange(len(self.variants))]["source"]
        specific = [
            ("content-empty", "fail", lambda: Answer("", "", _completion(_content("")))),
            ("prose", "fail", lambda: Answer("", "", _completion(_content("I would unroll the loop.")))),
            ("code-cut-off", "fail", lambda: Answer("", "", _completion(
                _content("Rationale: cut\n```cuda\n" + code[: len(code) // 2] + "\n```"), finish="length"))),
            ("code-truncated-unclosed", "fail", lambda: Answer("", "", _completion(
                _content("Rationale: cut\n```cuda\n" + code[: len(code) // 3])))),
            ("launch-garbled", "fail", lambda: Answer("", "", _completion(
                _content(f"Rationale: x\n```cuda\n{code}\n```\n```json\n[{{\"kernel\": \n```")))),
            ("launch-nested-100k", "fail", lambda: Answer("", "", _completion(
                _content(f"Rationale: x\n```cuda\n{code}\n```\n```json\n" + "[" * DEEP + "]" * DEEP + "\n```")))),
            ("launch-wrong-type", "fail", lambda: Answer("", "", _completion(
                _content(f"Rationale: x\n```cuda\n{code}\n```\n```json\n{{\"launch\": 5}}\n```")))),
            ("launch-steps-garbage", "fail", lambda: Answer("", "", _completion(
                _content(f"Rationale: x\n```cuda\n{code}\n```\n```json\n[{{\"kernel\": 1, \"grid\": \"x\"}}]\n```")))),
            ("wrong-kernel", "fail", lambda: Answer("", "", _completion(
                _content("Rationale: r\n```cuda\n__global__ void other(float* y) { y[0] = 1; }\n```")))),
            ("huge-rationale", "fail", lambda: Answer("", "", _completion(
                _content("Rationale: " + "very " * 60_000 + "\n```cuda\n" + code + "\n```")))),
            ("backticks-40k", "fail", lambda: Answer("", "", _completion(_content("```" * 13_000)))),
        ]
        return self._draw(specific + _common("generator", rng))

    def surrogate(self) -> Answer:
        rng = self.rng
        if rng.random() < self.good_share:
            probabilities = [round(p * (0.5 + rng.random()), 4) for p in GOOD_PROBS]
            good = json.dumps({"reasoning": "memory bound; wider loads", "probabilities": probabilities, "predicted_bin": 5})
            kinds = [
                ("good", "use", lambda: _completion(_tool_message(good))),
                ("good-in-content", "use", lambda: _completion(_content("Here you go:\n```json\n" + good + "\n```"))),
                ("good-usage-words", "use", lambda: _completion(_tool_message(good), usage={"prompt_tokens": "many"})),
                ("good-arguments-object", "use", lambda: _completion(_tool_message(json.loads(good)))),
            ]
            kind, outcome, make = rng.choice(kinds)
            return Answer(kind, outcome, make())

        def forecast(**fields) -> str:
            values = {"reasoning": "r", "probabilities": GOOD_PROBS, "predicted_bin": 5, **fields}
            return "{" + ", ".join(f'"{k}": {v if isinstance(v, str) and k != "reasoning" else json.dumps(v)}'
                                   for k, v in values.items()) + "}"

        specific = [
            ("bin-infinity", "fail", lambda: Answer("", "", _completion(_tool_message(forecast(predicted_bin="Infinity"))))),
            ("bin-nan", "fail", lambda: Answer("", "", _completion(_tool_message(forecast(predicted_bin="NaN"))))),
            ("bin-1e400", "fail", lambda: Answer("", "", _completion(_tool_message(forecast(predicted_bin="1e400"))))),
            ("bin-huge-int", "fail", lambda: Answer("", "", _completion(_tool_message(forecast(predicted_bin="9" * 500))))),
            ("bin-string", "fail", lambda: Answer("", "", _completion(_tool_message(forecast(predicted_bin='"five"'))))),
            ("prob-1e400", "fail", lambda: Answer("", "", _completion(_tool_message(
                forecast(probabilities="[1e400, 0, 0, 0, 0, 0, 0, 0]"))))),
            ("prob-huge-int", "fail", lambda: Answer("", "", _completion(_tool_message(
                forecast(probabilities="[" + "9" * 400 + ", 0, 0, 0, 0, 0, 0, 0]"))))),
            ("probs-short", "fail", lambda: Answer("", "", _completion(_tool_message(forecast(probabilities=[0.5, 0.5]))))),
            ("probs-strings", "fail", lambda: Answer("", "", _completion(_tool_message(forecast(probabilities=["a"] * 8))))),
            ("probs-zero", "fail", lambda: Answer("", "", _completion(_tool_message(forecast(probabilities=[0] * 8))))),
            ("probs-negative", "fail", lambda: Answer("", "", _completion(_tool_message(forecast(probabilities=[-1] * 8))))),
            ("arguments-number", "fail", lambda: Answer("", "", _completion(_tool_message(12345)))),
            ("arguments-list", "fail", lambda: Answer("", "", _completion(_tool_message([1, 2])))),
            ("arguments-cut-off", "fail", lambda: Answer("", "", _completion(
                _tool_message(forecast()[:30]), finish="length"))),
            ("arguments-nested-100k", "fail", lambda: Answer("", "", _completion(
                _tool_message('{"probabilities": ' + "[" * DEEP + "]" * DEEP + "}")))),
            ("arguments-object-nested-100k", "fail", lambda: Answer("", "", _completion(
                _tool_message('{"a": ' * DEEP + "1" + "}" * DEEP)))),
            ("arguments-braces-40k", "fail", lambda: Answer("", "", _completion(_tool_message("{" * 40_000)))),
            ("arguments-huge", "fail", lambda: Answer("", "", _completion(_tool_message('"' + "x" * HUGE_CHARS + '"')))),
            ("reasoning-deep", "fail", lambda: Answer("", "", _completion(_tool_message(
                forecast(reasoning=None, probabilities="[" * 5000 + "]" * 5000))))),
            ("refusal", "fail", lambda: Answer("", "", _completion(
                {"role": "assistant", "content": None, "refusal": "I cannot help with that."}))),
            ("content-prose", "fail", lambda: Answer("", "", _completion(_content("As an AI, I can't run kernels.")))),
            ("content-json-not-forecast", "fail", lambda: Answer("", "", _completion(_content('{"bin": "fast"}')))),
        ]
        return self._draw(specific + _common("surrogate", rng))

    def _draw(self, kinds) -> Answer:
        kind, outcome, make = self.rng.choice(kinds)
        answer = make()
        answer.kind, answer.outcome = kind, outcome
        return answer


@dataclass
class ServedAnswer:
    path: str  # "generator" or "surrogate"
    kind: str
    outcome: str


class ChatServer:
    """A small OpenAI-compatible server on 127.0.0.1 (port 0: a free one), serving in a thread from `with` to the
    block's end. Every POST (/v1/chat/completions or any other path) is answered by `answer(request)`, given the
    request's JSON: the text of a chat completion (see text_answer), or an Answer (any body or raw bytes, an HTTP
    status, a delay before answering). `requests` lists the requests it got, in order."""

    def __init__(self, answer: Callable[[dict], Answer | str]) -> None:
        self.answer = answer
        self.requests: list[dict] = []
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                request = json.loads(self.rfile.read(length) or b"{}")
                with server._lock:  # one answer at a time: a seeded catalogue draws in the order served
                    server.requests.append(request)
                    answer = server.answer(request)
                if isinstance(answer, str):
                    answer = text_answer(answer)
                if answer.delay_s:
                    time.sleep(answer.delay_s)
                payload = answer.payload()
                try:
                    self.send_response(answer.status)
                    self.send_header("Content-Type", answer.content_type)
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up on a slow answer

        class Server(ThreadingHTTPServer):
            def handle_error(self, request, client_address) -> None:
                pass  # a client that hung up on a slow answer is expected here

        self.httpd = Server(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class StubServer(ChatServer):
    """A ChatServer answering from a catalogue (generator(), surrogate(), optionally code_search()); `served`
    lists every answer with its path, kind and outcome."""

    def __init__(self, catalogue) -> None:
        self.catalogue = catalogue
        self.served: list[ServedAnswer] = []
        super().__init__(self._from_catalogue)

    def _from_catalogue(self, request: dict) -> Answer:
        tools = [t.get("function", {}).get("name") for t in request.get("tools") or [] if isinstance(t, dict)]
        path = "generator" if not tools or tools == ["search_cutlass"] else "surrogate"
        if path == "surrogate":
            answer = self.catalogue.surrogate()
        elif tools and hasattr(self.catalogue, "code_search"):
            answer = self.catalogue.code_search()
        else:  # the generator offered search_cutlass and the model answers without it
            answer = self.catalogue.generator()
        self.served.append(ServedAnswer(path, answer.kind, answer.outcome))
        return answer


# ---- fuzzing real runs ------------------------------------------------------------------------------
BUDGET_SPENT = "LLM calls is spent"
DUPLICATE = "already in the tree"


@contextmanager
def patient_llm_clients():
    """Runs' LLM clients that never give up on an endpoint (LLMClient.unreachable_after 0). The catalogues serve
    HTTP errors and time-outs at random among their malformed answers, and a fuzz wants each recorded on its node:
    a run pauses once its endpoint fails UNREACHABLE_AFTER_CALLS calls in a row, which a random draw may do now
    and then, abandoning the step's other answers. That pause is tested on its own (tests/kernellab/
    test_qa3_llm_runs.py)."""
    from kernellab.services import run_context

    original = run_context.llm_client

    def patient(role: str, *, budget=None):
        client = original(role, budget=budget)
        client.unreachable_after = 0
        return client

    run_context.llm_client = patient
    try:
        yield
    finally:
        run_context.llm_client = original


def readable(reason) -> bool:
    """A sentence a person can read on the node: text, capitalised, ends like a sentence, no trace."""
    return (isinstance(reason, str) and 0 < len(reason) <= 1200 and reason[0].isupper()
            and reason.rstrip()[-1] in ".…" and "Traceback" not in reason)


def fuzz_runs(*, problem, user, stub: StubServer, min_answers: int, llm_call_budget: int = 50,
              max_runs: int = 200, gpu_budget: int = 6) -> dict:
    """Start runs (LLM generator + LLM surrogate, replay backend) on `problem` until the stub has served
    at least `min_answers`, with Celery eager and exceptions propagating, and count what happened."""
    from kernellab.celery import app
    from kernellab.models import Forecast, Node, RunStatus, SearchRun
    from kernellab.services.runs import run_create

    from django.conf import settings

    endpoint = settings.KERNELLAB_LLM
    app.conf.task_always_eager = True
    app.conf.task_eager_propagates = True  # an exception escaping a task is a worker crash, not a log line
    runs: list[int] = []
    crashes: list[str] = []
    started = time.monotonic()
    with patient_llm_clients():  # (every answer recorded: see patient_llm_clients)
        while len(stub.served) < min_answers and len(runs) < max_runs:
            # A surrogate model of its own per run: usable forecasts are cached per model, and the next run's
            # surrogate should be asked again about the same few good kernels.
            settings.KERNELLAB_LLM = replace(endpoint, surrogate_model=f"{endpoint.surrogate_model}-{len(runs)}")
            try:
                run = run_create(problem=problem, user=user, generator="llm", surrogate="llm", backend="replay",
                                 gpu_budget=gpu_budget, children_per_step=4, max_gpu_per_step=2,
                                 llm_call_budget=llm_call_budget, seed=len(runs))
                runs.append(run.pk)
            except Exception as exc:  # counted, and the fuzz goes on: the figure is the point
                crashes.append(f"{type(exc).__name__}: {exc}"[:300])
                run = SearchRun.objects.filter(problem=problem).order_by("-pk").first()
                if run is not None and run.pk not in runs:
                    runs.append(run.pk)
    elapsed = time.monotonic() - started
    settings.KERNELLAB_LLM = endpoint

    failed_runs, statuses, proposal_failures, unreadable = [], {}, [], []
    for run in SearchRun.objects.filter(pk__in=runs):
        statuses[run.status] = statuses.get(run.status, 0) + 1
        if run.status != RunStatus.FINISHED:
            failed_runs.append({"run": run.pk, "status": run.status, "reason": run.status_reason})
    for failures in Node.objects.filter(run__in=runs).values_list("failed_proposals", flat=True):
        proposal_failures.extend(f.get("reason") for f in failures)
    abstentions = list(Forecast.objects.filter(node__run__in=runs, abstained=True).values_list("abstain_reason", flat=True))
    unreadable = [r for r in proposal_failures + abstentions if not readable(r)]

    served = list(stub.served)
    kinds: dict[str, int] = {}
    for answer in served:
        key = f"{answer.path}:{answer.kind}"
        kinds[key] = kinds.get(key, 0) + 1
    generator_bad = sum(1 for a in served if a.path == "generator" and a.outcome == "fail")
    surrogate_bad = sum(1 for a in served if a.path == "surrogate" and a.outcome == "fail")
    generator_recorded = sum(1 for r in proposal_failures if r and BUDGET_SPENT not in r and DUPLICATE not in r)
    surrogate_recorded = sum(1 for r in abstentions if BUDGET_SPENT not in r)
    return {
        "answers": len(served),
        "malformed_answers": generator_bad + surrogate_bad,
        "runs": len(runs),
        "failed_runs": len(failed_runs),
        "worker_crashes": len(crashes),
        "run_statuses": statuses,
        "generator_answers": sum(1 for a in served if a.path == "generator"),
        "generator_malformed": generator_bad,
        "generator_failures_recorded": generator_recorded,
        "surrogate_answers": sum(1 for a in served if a.path == "surrogate"),
        "surrogate_malformed": surrogate_bad,
        "surrogate_abstentions_recorded": surrogate_recorded,
        "unreadable_reasons": len(unreadable),
        "unreadable_examples": unreadable[:5],
        "failed_run_examples": failed_runs[:5],
        "crash_examples": crashes[:5],
        "answer_kinds": dict(sorted(kinds.items())),
        "seconds": round(elapsed, 2),
    }
