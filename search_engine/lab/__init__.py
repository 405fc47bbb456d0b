"""The surrogate lab: datasets of measured comparisons, evaluation reports, recalibration, RL export
and discovery detection. Plain Python over search_engine's bins, scoring rules, prompts and surrogates;
never Django, never gpu_runner (the kernellab commands render recorded variants and pass rows in)."""
