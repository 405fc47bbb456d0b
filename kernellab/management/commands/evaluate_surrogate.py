"""Evaluate a surrogate (learned, roofline, or an LLM endpoint) on a dataset; print, save and show the report.

Protocols:
- plain: forecast every row (a learned surrogate comes from --model, or is trained on --train first);
- --loo: leave one problem out (learned only): each problem forecast by a model trained on the others;
- --recalibrate temperature,isotonic: fitted on a calibration split (--calibration-fraction of the rows,
  or of the problems with --split-by problem) and reported on the rest, before and after; under --loo
  the calibration is nested leave-one-problem-out instead;
- --pairs FILE: discovery detection on parent -> child pairs;
- --heldout: the frozen held-out KernelBench tasks (search_engine/heldout.py) measured as
  benchmarks/surrogate_heldout.py measures them (Spearman within task, recovered speedup at the top
  1% beside random on the same pools, Brier/CRPS beside uniform and roofline, ECE after the run's
  first measurement, cold forecasts/s), on CUDA-L1's programs and the H200 records; the learned
  surrogate is the shipped program surrogate (or --model, a saved one), trained without them.
The report is saved under DATA_DIR/reports/<workspace>/ and shown at /lab/reports/<id>/ to the workspace's members.
"""
from __future__ import annotations

import math
import os
import re
import shlex
import sys
import time

from django.core.management.base import BaseCommand, CommandError

from kernellab.management.commands.export_dataset import check_out_file, write_failure
from kernellab.management.commands.import_dataset import add_workspace_argument, load_dataset
from kernellab.management.database import require_migrated_database
from kernellab.services.errors import ServiceError
from kernellab.services.lab import lab_workspace_for_command, report_save
from search_engine.lab import recalibration
from search_engine.lab.datasets import COMPARISON, PAIR, row_problem, split_rows, training_rows
from search_engine.lab.evaluation import cost_summary, evaluate, format_table
from search_engine.lab.experiment import (dataset_summary, discovery_block, forecast_rows, loo_forecasts,
                                          loo_recalibrated, new_report, recalibration_block)


def add_surrogate_arguments(parser) -> None:
    parser.add_argument("--surrogate", choices=["learned", "roofline", "llm"], default="learned")
    parser.add_argument("--model", help="learned: a saved model (.pkl) from train_surrogate")
    parser.add_argument("--llm-model", default=os.environ.get("KERNELLAB_SURROGATE_MODEL"),
                        help="llm: the model name (default $KERNELLAB_SURROGATE_MODEL)")
    parser.add_argument("--base-url", default=os.environ.get("OPENAI_BASE_URL"),
                        help="llm: the OpenAI-compatible endpoint (default $OPENAI_BASE_URL)")
    parser.add_argument("--concurrency", type=int, default=4, help="llm: requests in flight at once")
    parser.add_argument("--max-tokens", type=int, default=1024, help="llm: answer token limit")
    parser.add_argument("--timeout", type=float, default=None,
                        help="llm: seconds per request (default $KERNELLAB_LLM_TIMEOUT_S, else 120); the retries and "
                             "the answer size limit are $KERNELLAB_LLM_RETRIES and $KERNELLAB_LLM_MAX_ANSWER_KB, as a run's")
    parser.add_argument("--cache", help="llm: forecast cache (SQLite file; default DATA_DIR/forecast-cache.sqlite3)")
    parser.add_argument("--no-cache", action="store_true", help="llm: ask the endpoint for every row")
    parser.add_argument("--no-tools", action="store_true", help="llm: ask for a JSON answer, not a tool call")
    parser.add_argument("--price-in", type=float, help="llm: dollars per million input tokens")
    parser.add_argument("--price-out", type=float, help="llm: dollars per million output tokens")


def _why(exc: BaseException) -> str:
    """An exception's message, or its type's name where it has none (an empty pickle's EOFError)."""
    message = str(exc).strip()
    return f"{type(exc).__name__}: {message}" if message and not isinstance(exc, (OSError, ValueError)) else \
        message or type(exc).__name__


# What to check for each way an LLM endpoint fails (LLMUnreachable.check), in this command's names.
LLM_FLAG_NAMES = {"base_url": "--base-url", "api_key": "OPENAI_API_KEY", "model": "--llm-model",
                  "timeout": "--timeout"}


def llm_unreachable_reason(exc) -> str:
    """What happened to the endpoint and what to check, as one clause (the address without credentials)."""
    return f"{exc.problem}; {exc.check(**LLM_FLAG_NAMES)}"


def command_line() -> str:
    """This command's line as a report keeps it, with every address in it shown without credentials."""
    from search_engine.llm_client import redact_url

    return "manage.py evaluate_surrogate " + shlex.join(redact_url(a) if "://" in a else a for a in sys.argv[2:])


def check_base_url(url: str) -> None:
    """An LLM endpoint is an http(s) URL with a host: anything else fails only once every row has been asked."""
    from urllib.parse import urlparse

    from search_engine.llm_client import redact_url

    try:
        parsed = urlparse(url)
        host = parsed.hostname
    except ValueError:
        parsed, host = None, None
    if parsed is None or parsed.scheme not in ("http", "https") or not host:
        raise CommandError(f"--base-url {redact_url(url)!r} is no http(s) URL with a host; give the endpoint as "
                           "http://HOST[:PORT]/v1 or https://HOST/v1.")


def check_arguments(options) -> None:
    """What the arguments themselves can tell, before any row is loaded or forecast (evaluate_surrogate's and
    train_surrogate's: an option a command does not have is None here)."""
    if options.get("limit") is not None and options["limit"] < 1:
        raise CommandError(f"--limit must be a positive number of rows, not {options['limit']}.")
    if options.get("batch_size") is not None and options["batch_size"] < 1:
        raise CommandError(f"--batch-size must be a positive number of rows, not {options['batch_size']}.")
    timeout = options.get("timeout")
    if timeout is not None and not (math.isfinite(timeout) and timeout > 0):
        raise CommandError(f"--timeout must be a positive number of seconds, not {timeout:g}.")
    fraction = options.get("calibration_fraction")
    if fraction is not None and not 0 < fraction < 1:
        raise CommandError(f"--calibration-fraction must be between 0 and 1 (exclusive), not {fraction:g}.")
    if options.get("surrogate") == "llm" and options.get("base_url"):
        check_base_url(options["base_url"])


def read_recalibration(value: str):
    """A recalibration saved by train_surrogate, read and checked before any row is forecast: (the recalibration,
    the id of the surrogate it was fitted for, or None where the file does not say)."""
    import json

    from search_engine.bins import DEFAULT_BINS

    def refuse(why: str) -> CommandError:
        return CommandError(f"Cannot read the recalibration {value}: {why}.")

    try:
        with open(value, encoding="utf-8") as handle:
            data = json.load(handle)
    except OSError as exc:
        raise refuse((exc.strerror or str(exc)).rstrip(".")) from None
    except UnicodeDecodeError:
        raise refuse("it is not UTF-8 text") from None
    except ValueError as exc:   # (json.JSONDecodeError, and a number too long to convert)
        raise refuse(f"it is not JSON ({str(exc).rstrip('.')})") from None
    saved_for = data.get("surrogate") if isinstance(data, dict) else None
    if not isinstance(data, dict) or data.get("method") not in recalibration.METHODS:
        raise refuse("it is no saved recalibration (a JSON object whose method is temperature or isotonic, "
                     "as train_surrogate writes)")
    if saved_for is not None and not isinstance(saved_for, str):
        raise refuse(f"its surrogate is {saved_for!r}, not a surrogate's id such as roofline@1")
    n_bins = DEFAULT_BINS.n_bins
    if data["method"] == "temperature":
        t = data.get("temperature")
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not (math.isfinite(t) and t > 0):
            raise refuse(f"its temperature is {t!r}, not a positive number")
    else:
        maps = data.get("maps")
        if not isinstance(maps, list) or len(maps) != n_bins:
            raise refuse(f"an isotonic recalibration has one map per bin ({n_bins}), and this one has "
                         f"{len(maps) if isinstance(maps, list) else 'none'}")
        for b, pair in enumerate(maps, start=1):
            ok = isinstance(pair, list) and len(pair) == 2 and all(
                isinstance(side, list) and side and all(
                    isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in side)
                for side in pair) and len(pair[0]) == len(pair[1]) and pair[0] == sorted(pair[0])
            if not ok:
                raise refuse(f"the map of bin {b} is not two equally long lists of numbers, the first increasing")
        floor = data.get("floor", 1e-3)
        if isinstance(floor, bool) or not isinstance(floor, (int, float)) or not 0 < floor < 1:
            raise refuse(f"its floor is {floor!r}, not a number between 0 and 1")
    saved = recalibration.from_dict(data)
    # What the checks above may still miss shows on a trial: every forecast must stay a distribution over the bins.
    import numpy as np

    trial = np.vstack([np.full(n_bins, 1.0 / n_bins), np.eye(n_bins) * 0.93 + 0.07 / n_bins])
    try:
        out = saved.apply(trial)
    except (ValueError, TypeError, IndexError, ZeroDivisionError) as exc:
        raise refuse(f"applying it fails ({_why(exc)})") from None
    if out.shape != trial.shape or not np.all(np.isfinite(out)) or not np.allclose(out.sum(axis=1), 1.0):
        raise refuse("it does not turn a forecast into probabilities over the bins")
    return saved, saved_for


def check_recalibration_for(path: str, saved_for: str | None, surrogate_id: str) -> None:
    """A recalibration fits one surrogate's forecasts (train_surrogate records its id, e.g. roofline@1, or
    llm@MODEL/PROMPT-VERSION): applied to another surrogate's, or another version's, it would be wrong."""
    if saved_for is not None and saved_for != surrogate_id:
        raise CommandError(f"The recalibration {path} was fitted for {saved_for}, not for {surrogate_id}; fit one "
                           f"for {surrogate_id} with train_surrogate, or evaluate {saved_for}.")


def build_surrogate(options) -> tuple[object, dict]:
    """(surrogate, description) from the command's options; a learned one may still need fit()."""
    from django.conf import settings

    kind = options["surrogate"]
    if kind == "roofline":
        from search_engine.surrogates.roofline import RooflineSurrogate

        surrogate = RooflineSurrogate()
        return surrogate, {"id": surrogate.id, "kind": kind, "settings": {"sigma": surrogate.sigma}}
    if kind == "llm":
        from search_engine.llm_client import LLMClient, redact_url
        from search_engine.surrogates.cache import MemoryCache, SqliteCache
        from search_engine.surrogates.llm import LLMSurrogate

        if not options.get("base_url") or not options.get("llm_model"):
            raise CommandError("The LLM surrogate needs an endpoint and a model: --base-url (or OPENAI_BASE_URL) "
                               "and --llm-model (or KERNELLAB_SURROGATE_MODEL).")
        check_base_url(options["base_url"])
        # The endpoint's settings as a run takes them (kernellab.config.llm_endpoint); --timeout wins over its own.
        endpoint = settings.KERNELLAB_LLM
        timeout = options.get("timeout") if options.get("timeout") is not None else endpoint.timeout_s
        client = LLMClient(base_url=options["base_url"], api_key=os.environ.get("OPENAI_API_KEY") or "none",
                           model=options["llm_model"], max_concurrency=max(1, options["concurrency"]),
                           max_tokens=options["max_tokens"], timeout_s=timeout, max_retries=endpoint.max_retries,
                           max_answer_chars=endpoint.max_answer_chars)
        if options.get("no_cache"):
            cache = MemoryCache()
        else:
            cache = SqliteCache(options.get("cache") or (settings.DATA_DIR / "forecast-cache.sqlite3"))
        surrogate = LLMSurrogate(client, cache=cache, use_tools=not options.get("no_tools"),
                                 max_tokens=options["max_tokens"])
        return surrogate, {"id": surrogate.id, "kind": kind, "settings": {
            "base_url": redact_url(options["base_url"]), "model": options["llm_model"],
            "concurrency": options["concurrency"], "max_tokens": options["max_tokens"], "timeout_s": timeout,
            "retries": endpoint.max_retries, "max_answer_kb": endpoint.max_answer_chars // 1024,
            "tools": not options.get("no_tools"),
            "cache": "none" if options.get("no_cache") else str(options.get("cache") or "DATA_DIR/forecast-cache.sqlite3")}}
    from search_engine.surrogates.learned import LearnedSurrogate

    if options.get("model"):
        try:
            surrogate = LearnedSurrogate.load(options["model"])
        except Exception as exc:  # noqa: BLE001 - a pickle of anything may fail in any way; say what it was
            raise CommandError(f"Cannot load the learned surrogate {options['model']}: {_why(exc)}") from None
        return surrogate, {"id": surrogate.id, "kind": kind, "settings": {
            "model": str(options["model"]), "trained_rows": surrogate.trained_rows, "temperature": surrogate.temperature}}
    surrogate = LearnedSurrogate(seed=options.get("seed") or 0)
    return surrogate, {"id": surrogate.id, "kind": kind, "settings": {"seed": surrogate.seed}}


# Options of a dataset's evaluation that --heldout does not read (refused with it, by name), and the reverse.
HELDOUT_IGNORES = (("train", "--train"), ("loo", "--loo"), ("recalibrate", "--recalibrate"),
                   ("recalibration", "--recalibration"), ("calibration_fraction", "--calibration-fraction"),
                   ("split_by", "--split-by"), ("title", "--title"), ("workspace", "--workspace"),
                   ("price_in", "--price-in"), ("price_out", "--price-out"))
HELDOUT_ONLY = (("cuda_l1", "--cuda-l1"), ("kernelbench", "--kernelbench"), ("out", "--out"))


def _listed(flags: list[str]) -> str:
    return flags[0] if len(flags) == 1 else f"{', '.join(flags[:-1])} and {flags[-1]}"


def _rows_of(path, limit) -> str:
    return f"the first {limit} rows of {path.name} hold" if limit else f"{path.name} holds"


_KERNELBENCH_TASK = re.compile(r"^\d+_.+\.py$")


def check_kernelbench(folder) -> None:
    """KernelBench's checkout names the tasks of the torch backend's records (level<N>/<task>_<name>.py); a folder
    without them would silently drop every one of those records from the held-out rows."""
    if not folder.exists():
        raise CommandError(f"KernelBench's folder {folder} does not exist; name it with --kernelbench.")
    if not folder.is_dir():
        raise CommandError(f"KernelBench's folder {folder} is a file, not a folder; name the folder with --kernelbench.")
    for level in folder.glob("level*"):
        if level.name[5:].isdigit() and level.is_dir() and any(
                _KERNELBENCH_TASK.match(p.name) for p in level.glob("*.py")):
            return
    raise CommandError(f"KernelBench's folder {folder} holds no KernelBench task (level<N>/<number>_<name>.py); "
                       "name KernelBench's checkout with --kernelbench.")


class Command(BaseCommand):
    help = "Evaluate a surrogate on a dataset: accuracy, Brier, CRPS, NLL, ECE, AURC, risk and recovered speedup."

    def add_arguments(self, parser):
        parser.add_argument("--dataset", help="a .jsonl/.csv file or an imported dataset's name")
        parser.add_argument("--heldout", action="store_true",
                            help="score on the held-out KernelBench tasks (CUDA-L1 and H200 records) instead of --dataset")
        parser.add_argument("--cuda-l1", help="--heldout: CUDA-L1's folder (default: where the replayed generator reads it)")
        parser.add_argument("--kernelbench", help="--heldout: KernelBench's folder (default ../shared/datasets/kernelbench)")
        parser.add_argument("--out", help="--heldout: also write the figures to this JSON file")
        add_workspace_argument(parser)
        add_surrogate_arguments(parser)
        parser.add_argument("--train", help="learned: train on this dataset first")
        parser.add_argument("--loo", action="store_true", help="learned: leave one problem out")
        parser.add_argument("--recalibrate", default="", help="comma-separated: temperature, isotonic")
        parser.add_argument("--recalibration", help="apply a recalibration saved by train_surrogate (JSON)")
        parser.add_argument("--calibration-fraction", type=float, default=0.3)
        parser.add_argument("--split-by", choices=["row", "problem"], default="row")
        parser.add_argument("--pairs", help="parent -> child pairs for discovery detection (file or name)")
        parser.add_argument("--limit", type=int, help="only the first N rows (and pairs)")
        parser.add_argument("--batch-size", type=int, default=32)
        parser.add_argument("--seed", type=int, default=0)
        parser.add_argument("--title", default="")
        parser.add_argument("--no-save", action="store_true", help="print only")
        parser.add_argument("--threads", type=int, default=1,
                            help="learned: CPU threads for the trees (more threads on a busy machine are slower)")

    def handle(self, *args, **options):
        from threadpoolctl import threadpool_limits

        with threadpool_limits(limits=max(1, options["threads"])):
            self._handle(options)

    def _progress(self, p) -> None:
        # A terminal gets one line rewritten in place; a log gets a line every few seconds and the last one.
        tty = self.stderr.isatty()
        now = time.monotonic()
        if not tty and p.done < p.total and now - getattr(self, "_last_progress", 0.0) < 5.0:
            return
        self._last_progress = now
        self.stderr.write(p.line(), ending="\n" if p.done == p.total or not tty else "\r")
        self.stderr.flush()

    def _log(self, line: str) -> None:
        self.stderr.write(line)

    def _given(self, options) -> set[str]:
        """The options given a value other than their default (a flag given its default reads as not given)."""
        parser = self.create_parser("manage.py", "evaluate_surrogate")
        return {dest for dest, value in options.items() if value != parser.get_default(dest)}

    def _handle(self, options):
        check_arguments(options)
        given = self._given(options)
        if options["heldout"]:
            if options["dataset"] or options["pairs"]:
                raise CommandError("--heldout scores the held-out KernelBench tasks, not a dataset: leave out "
                                   "--dataset and --pairs, or leave out --heldout.")
            ignored = [flag for dest, flag in HELDOUT_IGNORES if dest in given]
            if ignored:
                raise CommandError(f"--heldout does not read {_listed(ignored)}: leave "
                                   f"{'it' if len(ignored) == 1 else 'them'} out, or leave out --heldout and "
                                   "name a --dataset.")
            return self._heldout(options)
        if not options["dataset"]:
            raise CommandError("Name a --dataset to evaluate on, or score the held-out tasks with --heldout.")
        heldout_only = [flag for dest, flag in HELDOUT_ONLY if dest in given]
        if heldout_only:
            raise CommandError(f"{_listed(heldout_only)} {'is' if len(heldout_only) == 1 else 'are'} read with "
                               "--heldout only (a dataset's report is saved under DATA_DIR/reports): leave "
                               f"{'it' if len(heldout_only) == 1 else 'them'} out, or add --heldout.")
        methods = tuple(m.strip() for m in options["recalibrate"].split(",") if m.strip())
        for m in methods:
            if m not in recalibration.METHODS:
                raise CommandError(f"--recalibrate: unknown method {m!r}; use temperature and/or isotonic.")
        if options["loo"] and options["surrogate"] != "learned":
            raise CommandError("--loo trains a surrogate per held-out problem: it needs --surrogate learned.")
        if options["loo"] and (options["model"] or options["train"]):
            raise CommandError("--loo trains its own models; leave out --model and --train.")
        if options["loo"] and options["recalibration"]:
            raise CommandError("--loo trains a model per problem and --recalibration applies a saved recalibration "
                               "to one model's forecasts: leave out one of them.")
        saved_recalibration = saved_for = None
        if options["recalibration"]:
            # Read and checked before any row is forecast: a typo must not cost a paid endpoint's whole run.
            saved_recalibration, saved_for = read_recalibration(options["recalibration"])
        path, dataset = load_dataset(options["dataset"], workspace=options["workspace"])
        rows = dataset.rows[: options["limit"]] if options["limit"] else dataset.rows
        pairs_path = pairs = None
        if options["pairs"]:
            # Read and checked before any row is forecast: a typo, or a dataset of comparisons, must not cost a
            # paid endpoint's whole run (or, under --loo, all the training).
            pairs_path, pairs = _read_pairs(options["pairs"], workspace=options["workspace"], limit=options["limit"])
        problems = sorted({row_problem(r) for r in rows})
        if options["loo"] and len(problems) < (3 if methods else 2):
            # (found otherwise only once a model per problem was trained)
            what = "Leave-one-problem-out with nested calibration (--recalibrate)" if methods else \
                "Leave-one-problem-out"
            raise CommandError(f"{what} needs rows of at least {'three' if methods else 'two'} problems; "
                               f"{_rows_of(path, options['limit'])} {len(problems)}: {', '.join(problems)}.")
        if methods and not options["loo"]:
            # The same seeded split as after forecasting: one that cannot be made, or leaves fewer than the two
            # calibration rows a fit needs, is refused before any row is forecast.
            try:
                _, calibration_rows = split_rows(rows, options["calibration_fraction"], seed=options["seed"],
                                                 by_problem=options["split_by"] == "problem")
            except ValueError as exc:
                raise CommandError(f"{str(exc).rstrip('.')} ({_rows_of(path, options['limit'])} "
                                   f"{len(problems)}).") from None
            if len(calibration_rows) < 2:
                of = f"{len(problems)} problems" if options["split_by"] == "problem" else f"{len(rows)} rows"
                raise CommandError(f"--recalibrate needs at least two rows to fit on, and the calibration split "
                                   f"(--calibration-fraction {options['calibration_fraction']:g} of the {of}) "
                                   f"holds {len(calibration_rows)}.")
        surrogate, description = build_surrogate(options)
        if options["recalibration"]:
            check_recalibration_for(options["recalibration"], saved_for, description["id"])
        workspace = None
        if not options["no_save"]:
            require_migrated_database()
            try:
                workspace = lab_workspace_for_command(options["workspace"])
            except ServiceError as exc:
                raise CommandError(f"{exc} (or pass --no-save)") from None
        if options["surrogate"] == "learned" and not options["model"] and not options["loo"]:
            if not options["train"]:
                raise CommandError("A learned surrogate needs --model (from train_surrogate), --train DATASET, or --loo.")
            train_path, train_set = load_dataset(options["train"], workspace=options["workspace"])
            started = time.monotonic()
            surrogate.fit(training_rows(train_set.rows), groups=[r.get("pack") for r in train_set.rows])
            description["settings"].update({"trained_on": str(train_path), "trained_rows": surrogate.trained_rows,
                                            "temperature": surrogate.temperature})
            self._log(f"trained on {surrogate.trained_rows} rows of {train_path} in {time.monotonic() - started:.1f} s")
        started = time.monotonic()
        recal = None
        if options["loo"]:
            make = lambda: type(surrogate)(seed=options["seed"])  # noqa: E731
            try:
                forecasts = loo_forecasts(rows, make, progress=self._log)
                if methods:
                    recal = loo_recalibrated(rows, make, forecasts, methods, progress=self._log)
            except ValueError as exc:
                raise CommandError(str(exc)) from None
            test_rows, test_forecasts = rows, forecasts
            protocol = f"leave one problem out ({len(dataset.problems)} problems)"
        else:
            from search_engine.llm_client import LLMUnreachable

            try:
                forecasts = forecast_rows(surrogate, rows, batch_size=options["batch_size"], progress=self._progress)
            except LLMUnreachable as exc:
                reason = llm_unreachable_reason(exc)
                raise CommandError(f"{reason[0].upper()}{reason[1:]} (no report was saved).") from None
            protocol = "every row"
            test_rows, test_forecasts = rows, forecasts
            if options["recalibration"]:
                saved = saved_recalibration
                test_forecasts = recalibration.apply_to_forecasts(saved, forecasts)
                protocol += f", recalibrated with {options['recalibration']} ({saved.name})"
                description["settings"]["recalibration"] = saved.to_dict() if saved.name == "temperature" else "isotonic"
            if methods:
                index = {id(r): i for i, r in enumerate(rows)}
                try:
                    rest, calibration = split_rows(rows, options["calibration_fraction"], seed=options["seed"],
                                                   by_problem=options["split_by"] == "problem")
                except ValueError as exc:
                    raise CommandError(str(exc)) from None
                cal_forecasts = [forecasts[index[id(r)]] for r in calibration]
                test_rows = rest
                test_forecasts = [test_forecasts[index[id(r)]] for r in rest]
                try:
                    recal = recalibration_block(cal_forecasts, calibration, test_forecasts, test_rows, methods)
                except ValueError as exc:
                    raise CommandError(str(exc)) from None
                recal["calibration"] = (f"{options['calibration_fraction']:.0%} of the "
                                        f"{'problems' if options['split_by'] == 'problem' else 'rows'} "
                                        f"(seed {options['seed']}), reported on the other {len(rest)} rows")
                protocol += f"; recalibration fitted on {len(calibration)} rows, all figures on the other {len(rest)}"
        wall = time.monotonic() - started
        evaluation = evaluate(test_forecasts, test_rows)
        cost = cost_summary(forecasts, wall_s=wall, price_in_per_mtok=options["price_in"],
                            price_out_per_mtok=options["price_out"])
        discovery = None
        if options["pairs"]:
            if options["loo"]:
                self._log("discovery detection under --loo: each problem's pairs forecast by its held-out model")
                make = lambda: type(surrogate)(seed=options["seed"])  # noqa: E731
                pair_forecasts = _loo_pair_forecasts(rows, pairs, make)
                discovery, _ = discovery_block(None, pairs, forecasts=pair_forecasts)
            else:
                discovery, pair_forecasts = discovery_block(surrogate, pairs, batch_size=options["batch_size"],
                                                            progress=self._progress)
                pair_cost = cost_summary(pair_forecasts)
                for key in ("tokens_in", "tokens_out", "cached", "forecasts"):
                    cost[key] += pair_cost[key]
            discovery["dataset"] = dataset_summary(pairs_path.stem, pairs, str(pairs_path))
        title = options["title"] or f"{description['id']} on {path.stem}" + (" (leave one problem out)" if options["loo"] else "")
        report = new_report(title=title, surrogate=description, dataset=dataset_summary(path.stem, rows, str(path)),
                            protocol=protocol, evaluation=evaluation, cost=cost, recalibration_result=recal,
                            discovery=discovery, command=command_line())
        self.stdout.write(self._text(report))
        if rows and not evaluation["answered"] and not (cost["tokens_out"] or cost["cached"]):
            # The endpoint never answered: nothing was forecast and nothing was spent, the figures would be the
            # tie-break's, so there is no report to save, as with --heldout. (A model that answered, if unusably,
            # keeps its report: what it cost and why each answer was refused are the result.)
            why, count = next(iter(evaluation["abstain_reasons"].items()), ("no reason given", len(rows)))
            raise CommandError(f"{description['id']} made no forecast: all {evaluation['rows']} rows abstained "
                               f"({count} with: {why}). No report was saved.")
        if workspace is not None:
            report_id, report_path = report_save(workspace=workspace, report=report)
            self.stdout.write(f"\nSaved report {report_id} in {workspace.name} ({report_path}); "
                              f"in the browser: /lab/reports/{report_id}/")

    def _heldout(self, options) -> None:
        import json
        from pathlib import Path

        from django.conf import settings

        from kernellab.selectors.kernelbench import cuda_l1_dir
        from search_engine.lab.heldout_eval import HEADLINE, heldout_report, limit_pools, split_heldout
        from search_engine.lab.program_rows import program_rows
        from search_engine.surrogates import program_features
        from search_engine.surrogates.roofline import RooflineSurrogate

        # Checked before any row is read or forecast: what would otherwise end the run only once it was scored (an
        # --out it cannot write), or quietly score it on fewer rows (a KernelBench folder without its tasks drops
        # every record of the torch backend).
        check_out_file(options["out"], "--out", example="heldout.json", kinds="a .json")
        cuda_l1 = Path(options["cuda_l1"]) if options["cuda_l1"] else cuda_l1_dir()
        kernelbench = Path(options["kernelbench"]) if options["kernelbench"] else \
            Path(settings.BASE_DIR).parent / "shared" / "datasets" / "kernelbench"
        if not cuda_l1.is_dir():
            raise CommandError(f"CUDA-L1's folder {cuda_l1} does not exist; name it with --cuda-l1.")
        check_kernelbench(kernelbench)
        from search_engine.lab.program_rows import check_cuda_l1

        try:
            check_cuda_l1(cuda_l1)
        except ValueError as exc:
            raise CommandError(f"{exc} Name the folder with --cuda-l1.") from None
        problems = Path(settings.BASE_DIR) / "kernellab" / "problems"
        records = [p for p in sorted(problems.glob("*/records/h200.jsonl.gz"))
                   if p.parent.parent.name == "kernelbench" or (p.parent.parent / "reference.py").exists()]
        try:
            rows = program_rows(cuda_l1_dir=cuda_l1, kernelbench_dir=kernelbench, records=records)
        except ValueError as exc:   # (a folder the rows cannot be read from, in a sentence naming it)
            raise CommandError(str(exc)) from None
        _, test = split_heldout(rows)
        if options["limit"]:
            test = limit_pools(test, options["limit"])
        if options["surrogate"] == "learned":
            from search_engine.surrogates.program import ProgramSurrogate

            try:
                surrogate = ProgramSurrogate.load(options["model"]) if options["model"] else ProgramSurrogate.shipped()
            except Exception as exc:  # noqa: BLE001 - a pickle of anything may fail in any way; say what it was
                raise CommandError(f"Cannot load the program surrogate {options['model'] or ''}: {_why(exc)}"
                                   .replace(" :", ":")) from None
            description = {"id": surrogate.id, "kind": "learned", "settings": {
                "model": options["model"] or "shipped", "trained_rows": surrogate.trained_rows,
                "trained_tasks": surrogate.trained_tasks}}
        else:
            surrogate, description = build_surrogate(options)
        self._log(f"scoring {description['id']} on {len(test)} held-out rows of {len({r['task'] for r in test})} tasks")
        from search_engine.llm_client import LLMUnreachable

        try:
            report = heldout_report(surrogate, test, roofline=RooflineSurrogate(), clear=program_features.clear_caches,
                                    clear_pool=program_features.clear_candidates, batch_size=options["batch_size"],
                                    seed=options["seed"])
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        except LLMUnreachable as exc:   # (calls in a row refused: the rest would be too)
            raise CommandError(f"{description['id']} made no forecast: {llm_unreachable_reason(exc)} "
                               "(nothing was written).") from None
        if report["rows"] and report["abstained"] == report["rows"]:
            # Nothing was forecast (an endpoint that never answered, a model that cannot read these programs):
            # the ranking figures would be the random tie-break's, so there is no report to write.
            why, count = next(iter(report["abstain_reasons"].items()), ("no reason given", report["rows"]))
            raise CommandError(f"{description['id']} made no forecast: all {report['rows']} abstained "
                               f"({count} with: {why}). Nothing was written.")
        report = {"surrogate": description, "command": command_line(),
                  **{key: report.get(key) for key in HEADLINE}, "abstained": report["abstained"],
                  "abstain_reasons": report["abstain_reasons"],
                  "cost": report["cost"], "report": report}
        for key in HEADLINE + ("abstained",):
            value = report.get(key)
            shown = "—" if value is None else format(value, ".3f") if isinstance(value, float) else value
            self.stdout.write(f"{key:<30}{shown}")
        if report["abstain_reasons"]:
            self.stdout.write("abstentions (ranked last, not scored for Brier/CRPS): "
                              + "; ".join(f"{n}x {why}" for why, n in report["abstain_reasons"].items()))
        if options["out"]:
            out = Path(options["out"]).expanduser()
            try:
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_text(json.dumps(report, indent=1, default=float) + "\n")
            except OSError as exc:
                raise write_failure(out, exc) from None
            self.stdout.write(f"wrote {options['out']}")

    def _text(self, report: dict) -> str:
        ev = report["evaluation"]
        columns = [("as forecast", ev)]
        if report["recalibration"]:
            columns += [(f"+{m}", block["evaluation"]) for m, block in report["recalibration"]["methods"].items()]
        lines = [report["title"], f"protocol: {report['protocol']}",
                 f"rows {ev['rows']}, answered {ev['answered']}, abstained {ev['abstained']}", ""]
        if ev["rows"] and not ev["answered"]:
            # Every row ranks last together, in the tie-break order: its figures are no result of the model's.
            lines.append("No answer was usable: no figures (a ranking of unanswered rows is the tie-break's order).")
        else:
            if ev["answered"] < ev["rows"]:
                lines.append(f"The probability scores cover the {ev['answered']} answered rows of {ev['rows']}; "
                             "unanswered rows rank last for recovered speedup.")
            lines.append(format_table(columns))
        if ev["abstain_reasons"]:
            lines.append("abstentions: " + "; ".join(f"{n}x {why}" for why, n in ev["abstain_reasons"].items()))
        ref = ev["reference_scores"]
        if ev["answered"]:
            lines.append(f"reference: uniform forecast Brier {ref['uniform']['brier']:.3f}, CRPS "
                         f"{ref['uniform']['crps']:.3f}, NLL {ref['uniform']['nll']:.3f}; always bin "
                         f"{ref['majority_bin']}: accuracy {ref['majority_accuracy']:.3f}")
        cost = report["cost"]
        if cost["tokens_in"] or cost["tokens_out"] or cost["cached"]:
            usd = f", ${cost['usd']:.4f}" if cost.get("usd") is not None else ""
            lines.append(f"cost: {cost['tokens_in']} tokens in, {cost['tokens_out']} out{usd}; {cost['cached']} cached; "
                         f"mean latency {cost['latency_mean_s']:.2f} s (p95 {cost['latency_p95_s']:.2f} s)")
        lines.append(f"wall time {cost['wall_s']:.1f} s")
        disc = report.get("discovery")
        if disc:
            lines += ["", f"discovery detection: {disc['pairs']} pairs, {disc['discoveries']} discoveries "
                          f"(child >= {disc['ratio']:.3f}x parent; base rate {disc['base_rate']:.3f})",
                      f"{'flag when':<28}{'level':>7}{'flagged':>9}{'precision':>11}{'recall':>8}{'chance P':>10}{'lift':>7}"]
            for label, key in (("P(discovery) >= level", "by_probability"), ("bin >= 6, confidence >= level", "by_confident_bin")):
                for row in disc[key]:
                    fmt = lambda x: "—" if x is None else f"{x:.3f}"  # noqa: E731
                    lines.append(f"{label:<28}{row['level']:>7.2f}{row['flagged']:>9}{fmt(row['precision']):>11}"
                                 f"{fmt(row['recall']):>8}{row['chance_precision']:>10.3f}"
                                 f"{('—' if row['lift'] is None else format(row['lift'], '.2f')):>7}")
        return "\n".join(lines)


def _read_pairs(value: str, *, workspace: str | None, limit: int | None) -> tuple:
    """(path, pairs) of --pairs, the first `limit` of them; CommandError naming the file where it holds
    comparisons, not parent -> child pairs, or cannot be read as pairs."""
    try:
        path, found = load_dataset(value, workspace=workspace)
    except CommandError:
        found = None  # read again as pairs below, for the errors a file of pairs gets
    if found is not None and found.kind == COMPARISON and found.rows:
        raise CommandError(f"--pairs {value} is a dataset of comparisons, not pairs: discovery detection needs "
                           "parent -> child pairs (pair_id, parent_code, child_code, g_speedup, ...).")
    if found is None or found.kind != PAIR:
        path, found = load_dataset(value, workspace=workspace, kind=PAIR)
    return path, (found.rows[:limit] if limit else found.rows)


def _loo_pair_forecasts(rows: list[dict], pairs: list[dict], make) -> list:
    """Pairs of each problem forecast by a learned surrogate trained on the other problems' rows."""
    from search_engine.lab.datasets import row_problem, row_request

    out = [None] * len(pairs)
    for name in sorted({p["problem_id"] for p in pairs}):
        train = [r for r in rows if row_problem(r) != name]
        surrogate = make()
        surrogate.fit(training_rows(train), groups=[row_problem(r) for r in train])
        idx = [i for i, p in enumerate(pairs) if p["problem_id"] == name]
        for i, f in zip(idx, surrogate.forecast_many([row_request(pairs[i]) for i in idx])):
            out[i] = f
    return out
