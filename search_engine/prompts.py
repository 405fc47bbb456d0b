"""The one place that builds LLM prompts and reads LLM answers.

Used by the LLM surrogate, the LLM generator and (later) the RL export, so that training and
inference see the same text.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass

from search_engine.bins import DEFAULT_BINS, BinTable
from search_engine.candidates import Candidate

FORECAST_TOOL_NAME = "submit_forecast"

ANALYSIS_CHECKLIST = (
    "1. Work (FLOPs) per output and in total: does the candidate do more, less or the same work?",
    "2. Memory access: coalescing of global loads and stores, vector widths (float4/int4), reuse through "
    "shared memory or registers, bytes moved in total.",
    "3. Arithmetic intensity (FLOPs per byte) and which roofline bound applies on this GPU.",
    "4. Warp divergence from data-dependent branches.",
    "5. Occupancy: registers per thread, shared memory per block, block size, spills.",
    "6. Parallelism: number of blocks versus SMs, waves, tail effects, work per thread.",
    "7. Synchronisation: __syncthreads, atomics, grid-wide barriers, serialisation.",
    "8. Launch overhead: number of kernel launches and how small each one is.",
    "9. Library calls versus custom code (cuBLAS/cuDNN/CUTLASS are hard to beat).",
    "10. Data types and tensor cores: fp16/bf16/tf32, mma/wmma use, conversions.",
)

HARDWARE_FIELDS = (
    ("name", "GPU"), ("compute_capability", "compute capability"), ("sm_count", "SMs"),
    ("memory_bytes", "memory (bytes)"), ("memory_bandwidth_gbs", "memory bandwidth (GB/s)"),
    ("sm_clock_mhz", "SM clock (MHz)"), ("mem_clock_mhz", "memory clock (MHz)"),
    ("fp32_tflops", "FP32 peak (TFLOP/s)"), ("fp16_tensor_tflops", "FP16 tensor peak (TFLOP/s)"),
    ("l2_bytes", "L2 cache (bytes)"), ("shared_per_sm_bytes", "shared memory per SM (bytes)"),
    ("registers_per_sm", "registers per SM"), ("driver", "driver"),
)


def forecast_tool(bins: BinTable = DEFAULT_BINS) -> dict:
    """The function the surrogate must call: reasoning first, then the distribution and the bin."""
    k = bins.n_bins
    return {
        "type": "function",
        "function": {
            "name": FORECAST_TOOL_NAME,
            "description": f"Submit the speedup forecast: {k} bin probabilities summing to 1 and the predicted bin.",
            "parameters": {
                "type": "object",
                "properties": {
                    "reasoning": {"type": "string", "description": "Short analysis following the checklist."},
                    "probabilities": {
                        "type": "array", "items": {"type": "number", "minimum": 0, "maximum": 1},
                        "minItems": k, "maxItems": k,
                        "description": f"Probability of each bin 1..{k}, in order, summing to 1.",
                    },
                    "predicted_bin": {"type": "integer", "minimum": 1, "maximum": k},
                },
                "required": ["reasoning", "probabilities", "predicted_bin"],
            },
        },
    }


def surrogate_system_prompt(bins: BinTable = DEFAULT_BINS) -> str:
    checklist = "\n".join(ANALYSIS_CHECKLIST)
    return (
        "You are a GPU execution simulator. Given a reference CUDA kernel, a candidate kernel that computes "
        "the same result, and the GPU's specification, you predict how fast the candidate runs relative to "
        "the reference, without running either.\n\n"
        "Speedup S = T_reference / T_candidate, reported as a probability distribution over these ordinal bins:\n"
        f"{bins.table_text()}\n\n"
        "Analyse before you answer:\n"
        f"{checklist}\n\n"
        f"Then call the function {FORECAST_TOOL_NAME} with your reasoning (a few sentences), the "
        f"{bins.n_bins} bin probabilities in bin order (each between 0 and 1, summing to 1; spread the mass "
        "when you are unsure) and the predicted bin. If you cannot call functions, reply with only a JSON "
        'object: {"reasoning": "...", "probabilities": [...], "predicted_bin": N}.'
    )


def render_candidate(candidate: Candidate, *, max_source_chars: int = 12000) -> str:
    source = candidate.get("source", "")
    if len(source) > max_source_chars:
        source = source[:max_source_chars] + "\n// ... (truncated)"
    launch = json.dumps(candidate.get("launch") or [], indent=1)
    parts = [f"```cuda\n{source}\n```", f"Launch plan (expressions of the problem sizes):\n```json\n{launch}\n```"]
    if candidate.get("temps"):
        parts.append("Temporaries: " + json.dumps(candidate["temps"]))
    if candidate.get("compile_options"):
        parts.append("Compiler options: " + " ".join(candidate["compile_options"]))
    return "\n".join(parts)


def hardware_table(hardware: dict) -> str:
    rows = [f"| {label} | {hardware[key]} |" for key, label in HARDWARE_FIELDS if hardware.get(key) is not None]
    extra = [f"| {k} | {v} |" for k, v in sorted(hardware.items())
             if k not in dict(HARDWARE_FIELDS) and isinstance(v, (int, float, str))]
    if not rows and not extra:
        return "(no hardware details given)"
    return "| property | value |\n|---|---|\n" + "\n".join(rows + extra)


def problem_text(problem: dict) -> str:
    lines = []
    if problem.get("name"):
        lines.append(f"Problem: {problem['name']}" + (f" — {problem['description']}" if problem.get("description") else ""))
    if problem.get("sizes"):
        lines.append("Sizes: " + ", ".join(f"{k}={v}" for k, v in problem["sizes"].items()))
    roofline = problem.get("roofline") or {}
    if roofline:
        lines.append("Work: " + ", ".join(f"{k} = {v}" for k, v in roofline.items()))
    return "\n".join(lines)


def compiler_text(facts: dict | None) -> str:
    if not facts:
        return ""
    keys = ("registers", "shared_bytes", "spill_stores", "spill_loads", "stack_bytes")
    shown = [f"{k}={facts[k]}" for k in keys if facts.get(k) is not None]
    return ("Compiler facts of the candidate: " + ", ".join(shown)) if shown else ""


def forecast_messages(request, bins: BinTable = DEFAULT_BINS) -> list[dict]:
    """System + user messages for one forecast (request: surrogates.base.ForecastRequest)."""
    user = [
        problem_text(request.problem),
        "## Reference kernel\n" + render_candidate(request.reference),
        "## Candidate kernel\n" + render_candidate(request.candidate),
        compiler_text(request.compiler_facts),
        "## Hardware\n" + hardware_table(request.hardware),
        f"Forecast the speedup bin of the candidate over the reference and call {FORECAST_TOOL_NAME}.",
    ]
    return [
        {"role": "system", "content": surrogate_system_prompt(bins)},
        {"role": "user", "content": "\n\n".join(part for part in user if part)},
    ]


# ---- reading forecast answers -------------------------------------------------------------------

@dataclass
class ParsedForecast:
    probabilities: list[float]
    predicted_bin: int
    reasoning: str
    raw_sum: float
    stated_bin: int | None


class AnswerError(ValueError):
    """The answer cannot be used; the message is the reason stored with the abstention."""


# Readers below look at no more than this much of an answer (the client refuses longer ones anyway).
MAX_ANSWER_CHARS = 256 * 1024
# How many balanced {...} spans are handed to the JSON parser before giving up on an answer.
MAX_JSON_CANDIDATES = 64


def find_json_object(text: str, *, max_chars: int = MAX_ANSWER_CHARS) -> dict | None:
    """The first JSON object in a text (a ```json block first, else the first balanced {...}).

    Linear in the text: one scan pairs the braces, and at most MAX_JSON_CANDIDATES spans are parsed."""
    if not isinstance(text, str) or not text:
        return None
    text = text[:max_chars]
    fence = text.find("```")
    if fence != -1:
        for match in re.finditer(r"```(?:json)?\s*(.*?)```", text[fence:], re.S):
            obj = _first_object(match.group(1))
            if obj is not None:
                return obj
    return _first_object(text)


def _first_object(text: str) -> dict | None:
    spans = _balanced_spans(text)
    spans.sort()
    for start, end in spans[:MAX_JSON_CANDIDATES]:
        obj = _loads(text[start : end + 1])
        if isinstance(obj, dict):
            return obj
    return None


def _balanced_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) of every balanced {...} in one pass; quotes count only inside braces."""
    spans: list[tuple[int, int]] = []
    opened: list[int] = []
    in_string = False
    escaped_at = -1
    for match in re.finditer(r'[{}"\\]', text):
        ch = match.group()
        i = match.start()
        if in_string:
            if i == escaped_at:
                continue
            if ch == "\\":
                escaped_at = i + 1
            elif ch == '"':
                in_string = False
            continue
        if ch == '"':
            in_string = bool(opened)
        elif ch == "{":
            opened.append(i)
        elif ch == "}" and opened:
            spans.append((opened.pop(), i))
    return spans


def _reject_constant(name: str):
    raise ValueError(f"{name} is not a number JSON allows")


def _loads(text: str):
    """json.loads, or None for text that is not JSON, nests too deeply, or holds NaN/Infinity."""
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except (ValueError, RecursionError):
        return None


def parse_forecast(tool_arguments: str | dict | None, content: str | None, bins: BinTable = DEFAULT_BINS,
                   refusal: str | None = None, max_chars: int | None = None) -> ParsedForecast:
    """Read a forecast from the tool call, else from a JSON object in the content; raise AnswerError.

    `max_chars`: the longest answer read (the LLM client's limit, KERNELLAB_LLM_MAX_ANSWER_KB; MAX_ANSWER_CHARS
    when not given)."""
    k = bins.n_bins
    limit = max_chars or MAX_ANSWER_CHARS
    obj = None
    if tool_arguments is not None and not isinstance(tool_arguments, (str, dict)):
        raise AnswerError("The tool call's arguments are not text.")
    if content is not None and not isinstance(content, str):
        raise AnswerError("The answer's content is not text.")
    if isinstance(tool_arguments, str) and len(tool_arguments) > limit:
        raise AnswerError(f"The tool call's arguments are over the {limit // 1024} KiB limit.")
    if isinstance(tool_arguments, dict):
        obj = tool_arguments
    elif tool_arguments:
        try:
            obj = json.loads(tool_arguments, parse_constant=_reject_constant)
        except RecursionError:
            raise AnswerError("The tool call's arguments are nested too deeply to read.") from None
        except ValueError:
            obj = find_json_object(tool_arguments, max_chars=limit)
            if obj is None:
                raise AnswerError("The tool call's arguments are not valid JSON (garbled or cut off).") from None
    if obj is None:
        obj = find_json_object(content or "", max_chars=limit)
    if obj is None:
        if refusal:
            raise AnswerError(f"The model refused: {refusal[:200]}")
        if content and re.search(r"\b(I can(no|')t|I am unable|I'm unable|as an AI)\b", content, re.I):
            raise AnswerError(f"The model refused: {content.strip()[:200]}")
        raise AnswerError("The answer holds no forecast (no tool call and no JSON object).")
    if not isinstance(obj, dict):
        raise AnswerError("The forecast is not a JSON object.")
    probabilities = obj.get("probabilities", obj.get("probs"))
    if not isinstance(probabilities, list):
        raise AnswerError("The forecast has no list of probabilities.")
    if len(probabilities) != k:
        raise AnswerError(f"The forecast has {len(probabilities)} probabilities instead of {k}.")
    values = []
    for p in probabilities:
        if isinstance(p, bool) or not isinstance(p, (int, float)):
            raise AnswerError("A probability is not a number.")
        if isinstance(p, int) and not 0 <= p <= 1:
            raise AnswerError("A probability is out of range [0, 1].")
        p = float(p)
        if not math.isfinite(p) or p < 0 or p > 1:
            raise AnswerError(f"A probability is out of range [0, 1]: {p:g}.")
        values.append(p)
    raw_sum = sum(values)
    if raw_sum <= 0:
        raise AnswerError("The probabilities sum to zero.")
    stated = obj.get("predicted_bin", obj.get("bin"))
    if stated is not None:
        if isinstance(stated, bool) or not isinstance(stated, (int, float)) \
                or (isinstance(stated, float) and not math.isfinite(stated)) or int(stated) != stated \
                or not 1 <= int(stated) <= k:
            shown = repr(stated) if len(repr(stated)) <= 40 else repr(stated)[:40] + "…"
            raise AnswerError(f"The predicted bin {shown} is not an integer within 1..{k}.")
        stated = int(stated)
    normalised = [p / raw_sum for p in values]
    predicted = max(range(k), key=lambda i: (normalised[i], -i)) + 1
    reasoning = obj.get("reasoning") or obj.get("analysis") or ""
    if not isinstance(reasoning, str):
        try:
            reasoning = json.dumps(reasoning)
        except (TypeError, ValueError, RecursionError):
            reasoning = "(the reasoning is not text)"
    if stated is not None and stated != predicted:
        reasoning = (reasoning + f" [stated bin {stated} differs from the most probable bin {predicted}]").strip()
    return ParsedForecast(normalised, predicted, reasoning, raw_sum, stated)


# ---- generator prompts ----------------------------------------------------------------------------

def generator_system_prompt() -> str:
    return (
        "You are an expert CUDA performance engineer. You improve a CUDA kernel so that it computes exactly "
        "the same outputs faster on the given GPU. Keep the kernel's name and parameter list unless you also "
        "give a new launch plan. Reply with one line starting with 'Rationale:' saying what you changed and "
        "why, then the complete new CUDA source in one ```cuda block, and, only if the launch changes, the new "
        "launch plan as a JSON list in one ```json block (same format as the current plan; grid, block and "
        "shared are expressions of the problem sizes)."
    )


def _feedback_text(context, feedback: str) -> str:
    if feedback == "none":
        return ""
    measurement = context.parent_measurement or {}
    if feedback == "notes":
        notes = context.parent_expert_notes or []
        if not notes:
            return "## Expert notes on the current kernel\n(none available)"
        lines = []
        for note in notes[:12]:
            line = f"- [{note.get('severity', 'info')}] {note.get('expert', '')}: {note.get('finding', '')}"
            if note.get("advice"):
                line += f" Advice: {note['advice']}"
            lines.append(line)
        return "## Expert notes on the current kernel\n" + "\n".join(lines)
    if feedback == "raw":
        raw = {}
        for key in ("speedup", "reference", "candidate", "compiler", "profiler", "energy"):
            if measurement.get(key) is not None:
                raw[key] = measurement[key]
        if not raw:
            return "## Raw measurements of the current kernel\n(none available)"
        return "## Raw measurements of the current kernel\n```json\n" + json.dumps(raw, indent=1)[:6000] + "\n```"
    raise ValueError("Feedback must be 'notes', 'raw' or 'none'.")


def generator_messages(context, *, feedback: str = "notes") -> list[dict]:
    """Messages asking for one improved kernel (context: generators.base.ProposalContext)."""
    speed = (f"It runs {context.parent_speedup:.3g}x as fast as the reference."
             if context.parent_speedup else "Its speed is not measured yet.")
    parts = [
        problem_text(context.problem),
        "## Current kernel\n" + speed + "\n" + render_candidate(context.parent),
        _feedback_text(context, feedback),
        "## Hardware\n" + hardware_table(context.hardware),
        "## What the search has learned so far\n" + (context.memory_text or "No lessons yet."),
        "Write one faster version of the current kernel.",
    ]
    return [
        {"role": "system", "content": generator_system_prompt()},
        {"role": "user", "content": "\n\n".join(p for p in parts if p)},
    ]


def code_search_note() -> str:
    """Said to the generator when it may call search_cutlass (see generators/llm.py)."""
    return ("## CUTLASS and CuTe\nThe CUTLASS/CuTe C++ headers are on the include path (`#include <cute/tensor.hpp>`, "
            "`<cutlass/...>`; sources that include them are compiled with --expt-relaxed-constexpr). Before you "
            "answer you may call search_cutlass(query) once to find a building block (copy atoms, MMA atoms, "
            "swizzled shared-memory layouts, pipelines) in the headers and the examples. The kernel keeps the "
            "current kernel's compiler options. wgmma (CuTe's SM90 GMMA MMA atoms, warpgroup_arrive) and setmaxnreg "
            "(cutlass::arch::warpgroup_reg_alloc) need -arch=sm_90a among them: without it CuTe compiles wgmma as a "
            "run-time error, which fails the compile, and leaves setmaxnreg out. TMA copies (SM90_TMA_LOAD, "
            "SM90_TMA_STORE) work with the default sm_90.")


def code_search_messages(query: str, results: str) -> list[dict]:
    """The generator's search_cutlass call and its results, followed by the request for the kernel."""
    call = f"search_cutlass({json.dumps(query)})"
    return [{"role": "assistant", "content": call},
            {"role": "user", "content": f"Results of {call} in the CUTLASS/CuTe headers and examples:\n\n{results}"
                                        "\n\nNow answer with the kernel as asked above."}]


@dataclass
class GeneratedKernel:
    source: str
    launch: list | None
    rationale: str


def parse_generated(content: str | None, *, max_chars: int | None = None) -> GeneratedKernel:
    """Read a generator answer; raise AnswerError with a reason when it holds no usable code.

    The code is the block's text as a file holds it: without the blank lines around it, ending in one newline, so
    that a kernel the model copies from a recording has the recording's source (and source_hash). Whether it is
    whole is for the compile check to say (and, for an answer cut off at the token limit, the caller; see
    generators/llm.py): braces in comments, strings and #if/#else branches make counting them no test.
    `max_chars`: the longest answer read (the LLM client's limit; MAX_ANSWER_CHARS when not given)."""
    limit = max_chars or MAX_ANSWER_CHARS
    if content is not None and not isinstance(content, str):
        raise AnswerError("The answer's content is not text.")
    if not content or not content.strip():
        raise AnswerError("The answer is empty.")
    if len(content) > limit:
        raise AnswerError(f"The answer is over the {limit // 1024} KiB limit.")
    blocks = re.findall(r"```([a-zA-Z+]*)\s*\n(.*?)```", content, re.S)
    code = None
    launch = None
    for lang, body in blocks:
        lang = lang.lower()
        if code is None and (lang in ("cuda", "cu", "cpp", "c++", "c") or "__global__" in body):
            code = body.strip() + "\n"
        elif launch is None and lang == "json":
            parsed = _loads(body)
            if parsed is None:
                raise AnswerError("The launch plan block is not valid JSON.")
            if isinstance(parsed, dict) and "launch" in parsed:
                parsed = parsed["launch"]
            if not isinstance(parsed, list) or not all(isinstance(s, dict) for s in parsed):
                raise AnswerError("The launch plan is not a list of launch steps.")
            launch = parsed
    if code is None:
        if "__global__" in content and "```" not in content:
            code = content.strip() + "\n"
        else:
            raise AnswerError("The answer holds no CUDA code block.")
    if "__global__" not in code:
        raise AnswerError("The code block defines no __global__ kernel.")
    match = re.search(r"Rationale:\s*(.+)", content)
    rationale = match.group(1).strip()[:500] if match else ""
    return GeneratedKernel(code, launch, rationale)
