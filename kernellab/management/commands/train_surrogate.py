"""Train a surrogate on a dataset.

- learned: fit the ordinal-calibrated classifier on the dataset's rows (minus --exclude-problem) and
  save it (a .pkl that evaluate_surrogate --model and the search can load);
- roofline / llm have no weights: "training" fits a recalibration (temperature or isotonic) of their
  forecasts on the dataset and saves it as JSON for evaluate_surrogate --recalibration.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from kernellab.management.commands.evaluate_surrogate import (add_surrogate_arguments, build_surrogate,
                                                              check_arguments, llm_unreachable_reason)
from kernellab.management.commands.export_dataset import check_out_file, write_failure
from kernellab.management.commands.import_dataset import add_workspace_argument, load_dataset, plural
from search_engine.lab import recalibration
from search_engine.lab.datasets import row_problem, training_rows
from search_engine.lab.experiment import forecast_rows

PROBLEMS_LISTED = 30


def surrogates_dir(workspace_slug: str | None) -> Path:
    """DATA_DIR/surrogates/<workspace slug>: where a model or recalibration is saved without --out."""
    from kernellab.management.database import require_migrated_database
    from kernellab.services.errors import ServiceError
    from kernellab.services.lab import lab_workspace_for_command

    require_migrated_database()
    try:
        workspace = lab_workspace_for_command(workspace_slug)
    except ServiceError as exc:
        raise CommandError(f"{exc} (Or name the file to save with --out.)") from None
    return Path(settings.DATA_DIR) / "surrogates" / workspace.slug


def dataset_stem(path: Path) -> str:
    """The dataset's name without its suffixes (rows.jsonl.gz -> rows)."""
    from search_engine.lab.datasets import dataset_suffix

    suffix = dataset_suffix(path)
    return path.name[:-len(suffix)] if suffix else path.stem


def problem_list(problems: list[str]) -> str:
    """The dataset's problems, the first PROBLEMS_LISTED named and the others counted."""
    shown = ", ".join(problems[:PROBLEMS_LISTED])
    more = f" and {len(problems) - PROBLEMS_LISTED} more" if len(problems) > PROBLEMS_LISTED else ""
    return f"{shown}{more}"


class Command(BaseCommand):
    help = "Train the learned surrogate on a dataset, or fit a recalibration of the roofline / LLM surrogate."

    def add_arguments(self, parser):
        parser.add_argument("--dataset", required=True, help="a .jsonl/.csv file or an imported dataset's name")
        add_workspace_argument(parser)
        add_surrogate_arguments(parser)
        parser.add_argument("--exclude-problem", action="append", default=[], help="leave a problem out (repeatable)")
        parser.add_argument("--recalibrate", choices=recalibration.METHODS, default="temperature",
                            help="roofline/llm: which recalibration to fit (default temperature)")
        parser.add_argument("--out", help="where to save (default DATA_DIR/surrogates/<workspace>/<surrogate>-<dataset>"
                                          ".pkl|.json)")
        parser.add_argument("--seed", type=int, default=0)
        parser.add_argument("--threads", type=int, default=1)

    def handle(self, *args, **options):
        from threadpoolctl import threadpool_limits

        if options["surrogate"] == "learned" and options["model"]:
            raise CommandError("--model loads a trained surrogate; train_surrogate makes a new one (leave it out).")
        # Checked before the dataset is read and the model fitted (minutes on a real dataset), not after.
        check_arguments(options)
        learned = options["surrogate"] == "learned"
        check_out_file(options["out"], "--out", example="surrogate.pkl" if learned else "recalibration.json",
                       kinds="a .pkl" if learned else "a .json")
        path, dataset = load_dataset(options["dataset"], workspace=options["workspace"])
        excluded = set(options["exclude_problem"])
        unknown = sorted(excluded - set(dataset.problems))
        if unknown:
            # (a misspelt name would leave the problem meant to be held out in the training rows)
            raise CommandError(f"--exclude-problem names no problem of {path.name}: {', '.join(unknown)} (its "
                               f"problems: {problem_list(dataset.problems)}).")
        rows = [r for r in dataset.rows if row_problem(r) not in excluded]
        if not rows:
            raise CommandError("No rows left to train on after --exclude-problem.")
        surrogate, description = build_surrogate(options)
        if not options["out"]:
            # each workspace's own folder, as for its datasets and reports: one team's training never replaces
            # another's model of a dataset of the same name
            folder = surrogates_dir(options["workspace"])
        started = time.monotonic()
        with threadpool_limits(limits=max(1, options["threads"])):
            if options["surrogate"] == "learned":
                surrogate.fit(training_rows(rows), groups=[row_problem(r) for r in rows])
                out = Path(options["out"] or folder / f"learned-{dataset_stem(path)}.pkl")
                try:
                    out.parent.mkdir(parents=True, exist_ok=True)
                    surrogate.save(out)
                except OSError as exc:
                    raise write_failure(out, exc) from None
                self.stdout.write(
                    f"Trained {surrogate.id} on {plural(surrogate.trained_rows, 'row')} of {path} "
                    f"({plural(len({row_problem(r) for r in rows}), 'problem')}) in {time.monotonic() - started:.1f} s; "
                    f"temperature {surrogate.temperature:.3f}. Saved to {out}.")
                return
            from search_engine.llm_client import LLMUnreachable

            try:
                forecasts = forecast_rows(surrogate, rows, batch_size=32,
                                          progress=lambda p: self.stderr.write(p.line()))
            except LLMUnreachable as exc:   # (calls in a row failed: the rest would too)
                reason = llm_unreachable_reason(exc)
                raise CommandError(f"{reason[0].upper()}{reason[1:]} (no recalibration was saved).") from None
            try:
                model = recalibration.fit_on_forecasts(options["recalibrate"], forecasts,
                                                       [int(r["true_bin"]) for r in rows])
            except ValueError as exc:
                raise CommandError(str(exc)) from None
        out = Path(options["out"] or folder / f"{options['surrogate']}-{dataset_stem(path)}-{model.name}.json")
        try:
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps({**model.to_dict(), "surrogate": description["id"], "dataset": str(path),
                                       "rows": len(rows)}))
        except OSError as exc:
            raise write_failure(out, exc) from None
        what = f"temperature {model.temperature:.3f}" if model.name == "temperature" else "isotonic maps per bin"
        article = "an" if model.name[:1] in "aeiou" else "a"
        self.stdout.write(f"Fitted {article} {model.name} recalibration of {description['id']} on "
                          f"{plural(len(rows), 'row')} of {path} "
                          f"({what}) in {time.monotonic() - started:.1f} s. Saved to {out}; use it with "
                          f"evaluate_surrogate --recalibration {out}.")
