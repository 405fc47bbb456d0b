"""Forms of the explorer pages. They check what a browser can get wrong (sizes, file types,
encodings, numbers); the services decide everything about the domain."""
from __future__ import annotations

import json
import re

from django import forms
from django.conf import settings
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth.forms import AuthenticationForm

from kernellab.models import ApprovalMode, Problem
from kernellab.selectors.backends import BACKENDS
from kernellab.services.runs import FEEDBACK, GENERATORS, OBJECTIVES, SEED_MAX, SURROGATES

SOURCE_SUFFIXES = (".cu", ".cuh")


def _limit() -> int:
    return settings.KERNELLAB_UPLOAD_MAX_BYTES


def _too_big(label: str, size: int) -> str:
    return f"{label} is {size // 1024} KiB; the limit is {_limit() // 1024} KiB."


def _text(text: str) -> str:
    """A text as the checks and the database take it: without the byte order mark some editors put
    first (tomllib refuses it: "Invalid statement (at line 1, column 1)"), with Unix line ends."""
    return text.removeprefix("\ufeff").replace("\r\n", "\n")


def _read_text_upload(upload, *, label: str, suffixes: tuple[str, ...]) -> str:
    name = upload.name or ""
    if not name.lower().endswith(suffixes):
        raise forms.ValidationError(f"{label} must be a {' or '.join(suffixes)} file; {name!r} is not.")
    if upload.size > _limit():
        raise forms.ValidationError(_too_big(label, upload.size))
    raw = upload.read(_limit() + 1)
    if b"\x00" in raw:
        raise forms.ValidationError(f"{label} is a binary file, not text.")
    try:
        return _text(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise forms.ValidationError(f"{label} is not UTF-8 text.") from None


# Django reads a form's text fields as UTF-8 and puts U+FFFD where a byte is not: a script that sent Latin-1 would
# have its bytes replaced without a word, where the same bytes as a file are refused as "not UTF-8 text".
NOT_UTF8_MARK = "\ufffd"


def _check_text(text: str, *, label: str, pasted: bool = False) -> str:
    if pasted and NOT_UTF8_MARK in text:
        line = text.count("\n", 0, text.index(NOT_UTF8_MARK)) + 1
        raise forms.ValidationError(f"{label} was not sent as UTF-8 text: line {line} holds a byte that is not "
                                    "UTF-8 (read as U+FFFD). Send it as UTF-8, or upload it as a file.")
    size = len(text.encode())
    if size > _limit():
        raise forms.ValidationError(_too_big(label, size))
    if "\x00" in text:
        raise forms.ValidationError(f"{label} contains a NUL character, so it is not text.")
    return text


class ProblemUploadForm(forms.Form):
    """A problem as pasted text or as files; a file wins over the text box for the same part."""

    spec_toml = forms.CharField(label="problem.toml", required=False, strip=False, widget=forms.Textarea(attrs={"rows": 16, "spellcheck": "false"}))
    reference_source = forms.CharField(label="reference.cu", required=False, strip=False, widget=forms.Textarea(attrs={"rows": 16, "spellcheck": "false"}))
    family_source = forms.CharField(label="family.cu (optional template with knobs)", required=False, strip=False, widget=forms.Textarea(attrs={"rows": 6, "spellcheck": "false"}))
    spec_file = forms.FileField(label="or upload problem.toml", required=False)
    reference_file = forms.FileField(label="or upload reference.cu", required=False)
    family_file = forms.FileField(label="or upload family.cu", required=False)

    def clean_spec_file(self):
        upload = self.cleaned_data.get("spec_file")
        return _read_text_upload(upload, label="problem.toml", suffixes=(".toml",)) if upload else None

    def clean_reference_file(self):
        upload = self.cleaned_data.get("reference_file")
        return _read_text_upload(upload, label="reference.cu", suffixes=SOURCE_SUFFIXES) if upload else None

    def clean_family_file(self):
        upload = self.cleaned_data.get("family_file")
        return _read_text_upload(upload, label="family.cu", suffixes=SOURCE_SUFFIXES) if upload else None

    def clean(self):
        data = super().clean()
        parts = {}
        for part, text_field, file_field, label in (
            ("spec_toml", "spec_toml", "spec_file", "problem.toml"),
            ("reference_source", "reference_source", "reference_file", "reference.cu"),
            ("family_source", "family_source", "family_file", "family.cu"),
        ):
            if text_field in self.errors:
                continue
            text = data.get(file_field) or data.get(text_field) or ""
            try:
                parts[part] = _check_text(_text(text), label=label, pasted=not data.get(file_field))
            except forms.ValidationError as exc:
                self.add_error(text_field, exc)
        # A part whose file or text was refused has its reason already; "paste it" would be a second one.
        for part, file_field, missing in (("spec_toml", "spec_file", "Paste problem.toml or upload it."),
                                          ("reference_source", "reference_file",
                                           "Paste the reference kernel or upload reference.cu.")):
            if not (parts.get(part) or "").strip() and part not in self.errors and file_field not in self.errors:
                self.add_error(part, missing)
        data.update(parts)
        return data


def _stored_length(field: str, label: str) -> dict:
    """max_length of a Problem column, with a sentence naming the field and the limit (a longer
    value is a DataError on PostgreSQL)."""
    limit = Problem._meta.get_field(field).max_length
    return {"max_length": limit, "error_messages": {
        "max_length": f"{label} may be at most {limit} characters; this one has %(show_value)d."}}


class PytorchProblemUploadForm(forms.Form):
    """A KernelBench-format program (class Model, get_inputs, get_init_inputs) as text or a .py file."""

    name = forms.CharField(help_text="letters, digits and underscores; the file's name if empty", required=False,
                           **_stored_length("name", "The name"))
    title = forms.CharField(required=False, **_stored_length("title", "The title"))
    program = forms.CharField(label="reference.py", required=False, strip=False,
                              widget=forms.Textarea(attrs={"rows": 24, "spellcheck": "false"}))
    program_file = forms.FileField(label="or upload the program (.py)", required=False)

    def clean_program_file(self):
        upload = self.cleaned_data.get("program_file")
        return _read_text_upload(upload, label="The program", suffixes=(".py",)) if upload else None

    def clean(self):
        data = super().clean()
        if "program" in self.errors:
            return data
        text = _text(data.get("program_file") or data.get("program") or "")
        try:
            data["program"] = _check_text(text, label="The program", pasted=not data.get("program_file"))
        except forms.ValidationError as exc:
            self.add_error("program", exc)
            return data
        if not text.strip() and "program" not in self.errors and "program_file" not in self.errors:
            self.add_error("program", "Paste a KernelBench program or upload its .py file.")
        given = data.get("name") or ""
        if given and not re.fullmatch(r"[A-Za-z0-9_]+", given):
            # a typed name is used as written (a file's name is made into one): say so rather than drop characters
            others = "".join(sorted({c for c in given if not (c.isascii() and (c.isalnum() or c == "_"))}))
            self.add_error("name", f"A name is letters, digits and underscores; this one also has {others!r}.")
        if not data.get("name") and "name" not in self.errors:   # a refused name has its reason already
            upload = self.files.get("program_file")
            data["name"] = (upload.name.rsplit(".", 1)[0] if upload else "")
            limit = self.fields["name"].max_length
            if len(data["name"]) > limit:
                self.add_error("name", f"The file's name makes a name of {len(data['name'])} characters; the limit "
                                       f"is {limit}: give a shorter name.")
            elif not data["name"] and "program" not in self.errors:
                self.add_error("name", "Name the problem (letters, digits and underscores).")
        return data


class RunCreateForm(forms.Form):
    name = forms.CharField(required=False, max_length=200)
    generator = forms.ChoiceField(choices=[(g, g) for g in GENERATORS])
    surrogate = forms.ChoiceField(choices=[(s, s) for s in SURROGATES])
    confidence_threshold = forms.FloatField(min_value=0.125, max_value=1.0, initial=0.6, help_text="Forecasts at least this confident are trusted; the rest go to the GPU.")
    conformal_target = forms.FloatField(
        min_value=0.01, max_value=0.99, required=False, label="Trusted forecasts' error rate, at most",
        help_text="Once the run has measured 10 forecasts, the threshold becomes the lowest confidence at which the "
                  "forecasts it would trust erred at most this often on this run's own measurements (none are trusted "
                  "when no confidence does). On a problem the surrogate has never seen, its confidence means little "
                  "until the run has measured some of it. 0.2 is the benchmarked setting for problems with knobs; "
                  "empty: the threshold above throughout.")
    gpu_budget = forms.IntegerField(min_value=1, max_value=100000, initial=40, label="GPU budget (measurements)")
    children_per_step = forms.IntegerField(min_value=1, max_value=64, initial=4, label="Children per parent",
                                           help_text="Candidates the generator proposes for each parent a step expands.")
    parents_per_step = forms.IntegerField(
        min_value=1, max_value=16, initial=1, required=False, label="Parents expanded per step",
        help_text="Their children are compiled together in one batch, so more parents make searches of "
                  "nvcc-compiled kernels faster. Empty means 1.")
    min_children_per_step = forms.IntegerField(
        min_value=0, max_value=256, initial=0, required=False, label="Children per step, at least",
        help_text="A step expands more parents until it has this many children, so their compile checks run "
                  "together on every core (0: off).")
    compile_share_target = forms.FloatField(
        min_value=0.0, max_value=0.9, initial=0.0, required=False, label="Compile share of a step, at most",
        help_text="When a step's compile checks would take more than this share of its wall time (nvcc costs "
                  "~0.5 s a batch, a measurement ~0.1 s on an H200), the step measures more of what it compiled, up to the "
                  "GPU measurements per step. 0.25 is the benchmarked setting for your own kernels; 0: off.")
    prefetch_while_measuring = forms.BooleanField(
        required=False, initial=True, label="Compile the next step while the GPU measures",
        help_text="The next step's parents (among the kernels already measured) are expanded and their children "
                  "compile-checked while a GPU worker measures this step; forecasts and decisions still wait for its "
                  "results. On an H200 it took compiling from 17-43% of a search's wall time to 2-4% (docs/search.md).")
    screening_width = forms.IntegerField(
        min_value=0, max_value=4096, initial=0, required=False, label="Screening width at the root",
        help_text="Candidates proposed and forecast when the reference is expanded; the surrogate sends only the "
                  "most promising to the GPU. 0 uses children per parent. Forecasts are cheap: 256 is the "
                  "benchmarked setting for the template generator; it needed fewer measurements on 4 of 6 "
                  "bundled families and helped least where the learned surrogate knows no similar problem "
                  "(sgemm, docs/search.md).")
    max_gpu_per_step = forms.IntegerField(min_value=1, max_value=64, initial=2, label="GPU measurements per step")
    retrain_every = forms.IntegerField(
        min_value=1, max_value=1000, initial=10, required=False, label="Surrogate relearns every",
        help_text="measurements: after the run's 1st, 2nd, 4th and 8th, then this often, the surrogate learns from the "
                  "run's own measurements and forecasts again every candidate still unmeasured. 5 is the benchmarked "
                  "setting for problems with knobs. Empty means 10.")
    max_steps = forms.IntegerField(min_value=1, max_value=100000, initial=60)
    approval_mode = forms.ChoiceField(choices=ApprovalMode.choices, initial=ApprovalMode.AUTO)
    target_gpu = forms.CharField(max_length=40, initial="h200", label="Target GPU")
    backend = forms.ChoiceField(choices=[(b, b) for b in BACKENDS], initial="auto", help_text="auto measures on the target GPU's workers; replay answers from recorded measurements of bundled problems.")
    objective = forms.ChoiceField(choices=[(o, o) for o in OBJECTIVES], initial="time")
    energy_cap_j = forms.FloatField(required=False, min_value=0.0, label="Energy cap (J per call)")
    feedback = forms.ChoiceField(choices=[(f, f) for f in FEEDBACK], initial="notes", help_text="What the generator sees after a measurement: expert notes, raw profiler numbers, or nothing.")
    seed = forms.IntegerField(min_value=0, max_value=SEED_MAX, initial=0)
    start = forms.BooleanField(required=False, initial=True, label="Start at once")
    # One token per page: the form sent twice makes one run (services.runs.run_create). A page from before the field
    # posts none, and makes a run each time, as it did.
    submission = forms.CharField(required=False, max_length=64, widget=forms.HiddenInput)

    def __init__(self, *args, problem=None, llm_configured: bool = False, **kwargs):
        super().__init__(*args, **kwargs)
        self.llm_configured = llm_configured
        if not self.is_bound:
            import secrets

            self.fields["submission"].initial = secrets.token_hex(16)
        from gpu_runner.spec import reference_kind

        # A PyTorch (KernelBench) problem's candidates are ModelNew programs: only recorded ones can be
        # proposed; the learned surrogate reads them with the program surrogate.
        pytorch = problem is not None and reference_kind(problem.spec_toml) == "pytorch"
        if problem is not None and not self.is_bound:
            from kernellab.services.runs import run_defaults

            for name, value in run_defaults(problem=problem).items():
                self.fields[name].initial = value
            if problem.family_source and not pytorch:
                # the form's own: 256 screened at the root, the setting benchmarked for the template generator
                # (./kl search keeps run_create's 0, since every screened candidate is a compile check)
                self.fields["screening_width"].initial = 256
        # Only backends that can measure this problem now are offered; the others say why not.
        self.backend_choices = []
        if problem is not None:
            from kernellab.selectors.backends import run_backend_choices

            target = (self.data.get("target_gpu") if self.is_bound else None) or self.fields["target_gpu"].initial
            self.backend_choices = run_backend_choices(problem=problem, target_gpu=str(target))
            offered = [c.name for c in self.backend_choices if c.available]
            # The widget offers these; any backend still validates, so a stale page gets the service's sentence.
            self.fields["backend"].widget.choices = [(name, name) for name in offered]
            if not self.is_bound:
                # "auto" only where it means a GPU: in the embedded setup without one it would be replay anyway.
                auto = next(c for c in self.backend_choices if c.name == "auto")
                preferred = ["auto", "replay"] if auto.measures_with != "replay" else ["replay"]
                self.fields["backend"].initial = next((name for name in preferred if name in offered), offered[0] if offered else None)
        generators = GENERATORS
        self.nothing_to_propose = ""
        if pytorch:
            from kernellab.selectors.kernelbench import recorded_solutions

            # Its one generator replays recorded ModelNew programs: without any, a run could propose nothing.
            generators = ["replayed"] if recorded_solutions(problem=problem)[0] else []
            if not generators:
                self.nothing_to_propose = self.no_recorded_solutions(problem)
                self.fields["generator"].help_text = self.nothing_to_propose
        elif problem is not None:
            from kernellab.selectors.kernelbench import lab_dataset_solutions

            # A CUDA problem replays only candidates that a lab dataset holds for it.
            generators = [g for g in GENERATORS if g != "replayed" or lab_dataset_solutions(problem=problem)]
        self.fields["generator"].choices = [(g, self._label(g)) for g in generators]
        self.fields["surrogate"].choices = [(s, self._label(s)) for s in SURROGATES]

    @staticmethod
    def no_recorded_solutions(problem) -> str:
        """Why a PyTorch problem without recorded solutions gets no run (the form and the problem page say it)."""
        return (f"{problem.title} has no recorded solutions to replay (no bundled candidates, no CUDA-L1 solutions "
                "of its KernelBench task, no rows in this workspace's lab datasets), so a search run of it could "
                "propose nothing.")

    @property
    def can_propose(self) -> bool:
        return not self.nothing_to_propose

    def clean(self):
        cleaned = super().clean()
        if self.nothing_to_propose:
            self.errors.pop("generator", None)  # (no choice to make): the sentence below says why
            raise forms.ValidationError(self.nothing_to_propose)
        return cleaned

    def clean_retrain_every(self):
        return self.cleaned_data.get("retrain_every") or 10  # a page from before the field posts none

    def clean_parents_per_step(self):
        return self.cleaned_data.get("parents_per_step") or 1  # a page from before the field posts none

    def clean_min_children_per_step(self):
        return self.cleaned_data.get("min_children_per_step") or 0  # a page from before the field posts none

    def clean_compile_share_target(self):
        value = self.cleaned_data.get("compile_share_target") or 0.0  # a page from before the field posts none
        if value and value < 0.05:
            raise forms.ValidationError("Use 0 (off) or a share between 0.05 and 0.9.")
        return value

    @property
    def backends_unavailable(self) -> list:
        return [c for c in self.backend_choices if not c.available]

    @property
    def can_measure(self) -> bool:
        return not self.backend_choices or any(c.available for c in self.backend_choices)

    def _label(self, choice: str) -> str:
        if choice == "llm" and not self.llm_configured:
            return "llm (needs OPENAI_BASE_URL)"
        return choice


class CommentForm(forms.Form):
    body = forms.CharField(widget=forms.Textarea(attrs={"rows": 3}), max_length=5000, strip=True)


class DiscoveryForm(forms.Form):
    note = forms.CharField(widget=forms.Textarea(attrs={"rows": 2}), required=False, max_length=4000)


class HumanChildForm(forms.Form):
    source = forms.CharField(strip=False, widget=forms.Textarea(attrs={"rows": 18, "spellcheck": "false"}))
    launch = forms.CharField(widget=forms.Textarea(attrs={"rows": 5, "spellcheck": "false"}), required=False, help_text="JSON list of launches; empty keeps the parent's launch plan.")

    def clean_source(self):
        return _check_text(self.cleaned_data["source"].replace("\r\n", "\n"), label="The kernel source", pasted=True)

    def clean_launch(self):
        text = (self.cleaned_data.get("launch") or "").strip()
        if not text:
            return None
        try:
            launch = json.loads(text)
        except json.JSONDecodeError as exc:
            raise forms.ValidationError(f"The launch plan is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg}).") from None
        if not isinstance(launch, list) or not all(isinstance(step, dict) for step in launch):
            raise forms.ValidationError("The launch plan must be a JSON list of launch objects.")
        return launch


def _client_address(request) -> str:
    """The address a log-in comes from, for the throttle. Directly, REMOTE_ADDR: a client can write
    X-Forwarded-For, so it cannot key a limit. Behind the TLS proxy (KERNELLAB_BEHIND_TLS_PROXY), REMOTE_ADDR is
    the proxy's for everyone, so the right-most X-Forwarded-For entry, the one the proxy appended: what a client
    wrote stands to its left. Without that header, REMOTE_ADDR again."""
    if request is None:
        return ""
    address = request.META.get("REMOTE_ADDR", "")
    if settings.KERNELLAB_BEHIND_TLS_PROXY:
        forwarded = request.META.get("HTTP_X_FORWARDED_FOR", "").split(",")[-1].strip()
        address = forwarded or address
    return address


class _ThrottledLogin:
    """Refuses a log-in, with a sentence, once a user name from one address has failed too often."""

    throttled = ""

    def clean(self):
        from django.core.exceptions import ValidationError

        from kernellab.services.login_throttle import (LoginThrottled, login_failure_record, login_failures_clear,
                                                       login_throttle_check)

        # The service counts the name as log-in reads it (NFKC, casefolded): look-alike spellings share a counter.
        attempt = {"username": str(self.data.get("username", "")), "address": _client_address(self.request)}
        try:
            login_throttle_check(**attempt)
        except LoginThrottled as exc:
            self.throttled = str(exc)
            raise ValidationError(self.throttled, code="throttled") from None
        try:
            cleaned = super().clean()
        except ValidationError:
            login_failure_record(**attempt)
            raise
        login_failures_clear(**attempt)
        return cleaned


class LoginForm(_ThrottledLogin, AuthenticationForm):
    pass


class AdminLoginForm(_ThrottledLogin, AdminAuthenticationForm):
    pass
