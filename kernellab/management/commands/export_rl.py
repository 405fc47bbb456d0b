"""Export a dataset as RL training examples: the LLM surrogate's own prompt with the true bin.

Each line: {"prompt": [system, user messages], "true_bin": b, "speedup": s, "problem": p, "id": ..., "source": ...}
— TRL's conversational prompt format; the rewards are search_engine.lab.rl.REWARD_FUNCTIONS
(correctness, brier, crps), which read `true_bin` from the dataset column.
"""
from __future__ import annotations

from collections import Counter

from django.core.management.base import BaseCommand, CommandError

from kernellab.management.commands.export_dataset import (check_distinct_outputs, check_jsonl_out, check_out_file,
                                                          write_failure)
from kernellab.management.commands.import_dataset import add_workspace_argument, load_dataset, plural
from search_engine.lab.datasets import split_rows, write_dataset
from search_engine.lab.rl import rl_examples


class Command(BaseCommand):
    help = "Write prompts in the LLM surrogate's format with their true bins (JSONL) for GRPO training."

    def add_arguments(self, parser):
        parser.add_argument("--dataset", required=True, help="a .jsonl/.csv file or an imported dataset's name")
        add_workspace_argument(parser)
        parser.add_argument("--out", required=True, help="output .jsonl (or .jsonl.gz)")
        parser.add_argument("--eval-out", help="also hold out --eval-fraction of the problems into this file")
        parser.add_argument("--eval-fraction", type=float, default=0.2)
        parser.add_argument("--seed", type=int, default=0)

    def handle(self, *args, dataset, out, eval_out, eval_fraction, seed, workspace, **options):
        if not 0 < eval_fraction < 1:  # (nan too) checked here, so the message names the option given
            raise CommandError(f"--eval-fraction must be between 0 and 1 (both excluded), not {eval_fraction:g}.")
        check_out_file(out, "--out")
        check_out_file(eval_out, "--eval-out")
        check_jsonl_out(out, "--out")
        check_jsonl_out(eval_out, "--eval-out")
        check_distinct_outputs(("--out", out), ("--eval-out", eval_out))
        path, data = load_dataset(dataset, workspace=workspace)
        rows, held = data.rows, []
        if eval_out:
            try:
                rows, held = split_rows(data.rows, eval_fraction, seed=seed, by_problem=True)
            except ValueError as exc:
                raise CommandError(str(exc)) from None
        try:
            n = write_dataset(out, rl_examples(rows))
        except OSError as exc:
            raise write_failure(out, exc) from None
        bins = Counter(int(r["true_bin"]) for r in rows)
        self.stdout.write(f"Wrote {plural(n, 'prompt')} to {out}; true bins " +
                          ", ".join(f"{b}: {bins.get(b, 0)}" for b in range(1, 9)) + ".")
        if eval_out:
            try:
                m = write_dataset(eval_out, rl_examples(held))
            except OSError as exc:
                raise write_failure(eval_out, exc) from None
            problems = sorted({r.get("pack") or r.get("problem_id") for r in held})
            self.stdout.write(f"Wrote {plural(m, 'held-out prompt')} ({', '.join(problems)}) to {eval_out}.")
