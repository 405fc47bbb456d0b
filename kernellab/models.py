# Over 400 lines on purpose: the whole data model in one module, read top to bottom.
"""The data model (docs/architecture.md describes every model). State machines live here as data; services enforce them."""
from __future__ import annotations

import hashlib

from django.conf import settings
from django.db import models
from django.db.models.signals import post_delete, post_save, pre_delete
from django.contrib.auth.signals import user_logged_out
from django.dispatch import receiver


class Role(models.TextChoices):
    VIEWER = "viewer", "Viewer"
    ENGINEER = "engineer", "Engineer"
    APPROVER = "approver", "Approver"
    ADMIN = "admin", "Admin"


# Each role can do everything the roles before it can.
ROLE_RANK = {Role.VIEWER: 0, Role.ENGINEER: 1, Role.APPROVER: 2, Role.ADMIN: 3}


class Workspace(models.Model):
    name = models.CharField(max_length=120, unique=True)
    slug = models.SlugField(max_length=120, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    members = models.ManyToManyField(settings.AUTH_USER_MODEL, through="Membership", related_name="workspaces")

    def __str__(self) -> str:
        return self.name


class Membership(models.Model):
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.VIEWER)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["workspace", "user"], name="one_membership_per_user")]

    def __str__(self) -> str:
        return f"{self.user} in {self.workspace} as {self.role}"


def invitation_token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class Invitation(models.Model):
    """A link that lets whoever holds it join a workspace once, with a role, until it expires.

    Only a hash of the link's token is stored, so the database alone cannot be turned into links."""

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="invitations")
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.VIEWER)
    token_hash = models.CharField(max_length=64, unique=True)
    note = models.CharField(max_length=200, blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    accepted_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    accepted_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"invitation to {self.workspace} as {self.role}"


def kernel_content_hash(source: str, launch: object = None, compile_options: object = None) -> str:
    """What makes two Kernel rows one: the exact source with its launch plan and compile options.
    (gpu_runner.source_hash is the exact source alone, the key of recorded measurements.)"""
    import json

    payload = json.dumps({"source": source, "launch": launch or [], "options": compile_options or []}, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()


class Kernel(models.Model):
    """CUDA source with its launch plan; identical content is stored once.

    One row serves every node, of any run in any workspace, with the same content, so its `name` is
    only the name its first writer gave it (maybe "by <someone>" of another workspace): pages show a
    node's own name (Node.name), never this one."""

    content_hash = models.CharField(max_length=64, unique=True)
    source = models.TextField()
    launch = models.JSONField(default=list)
    temps = models.JSONField(default=list, blank=True)
    compile_options = models.JSONField(default=list, blank=True)
    knobs = models.JSONField(null=True, blank=True)
    name = models.CharField(max_length=200, blank=True)
    compiler_facts = models.JSONField(default=dict, blank=True)
    compile_errors = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.name or self.content_hash[:12]

    def as_candidate(self) -> dict:
        return {
            "source": self.source,
            "launch": self.launch,
            "temps": self.temps,
            "compile_options": self.compile_options,
            "knobs": self.knobs,
            "name": self.name,
        }


class Problem(models.Model):
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="problems")
    name = models.SlugField(max_length=100)
    title = models.CharField(max_length=200)
    description = models.TextField(blank=True)
    spec_toml = models.TextField()
    family_source = models.TextField(blank=True)
    reference = models.ForeignKey(Kernel, on_delete=models.PROTECT, related_name="reference_of")
    bundled = models.BooleanField(default=False)
    # The reference as a run's GPU worker measured it, per target GPU, for a problem whose recording does not hold
    # it (an uploaded one): its time and counters, read as features (services.reference_measurements says the keys).
    reference_measurements = models.JSONField(default=dict, blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["workspace", "name"], name="problem_name_per_workspace")]
        ordering = ["name"]

    def __str__(self) -> str:
        return self.title


class RunStatus(models.TextChoices):
    CREATED = "created", "Created"
    RUNNING = "running", "Running"
    WAITING = "waiting", "Waiting for measurements"
    PAUSED = "paused", "Paused"
    FINISHED = "finished", "Finished"
    CANCELLED = "cancelled", "Cancelled"
    FAILED = "failed", "Failed"


RUN_TRANSITIONS = {
    "start": ({RunStatus.CREATED}, RunStatus.RUNNING),
    "pause": ({RunStatus.RUNNING, RunStatus.WAITING}, RunStatus.PAUSED),
    "resume": ({RunStatus.PAUSED}, RunStatus.RUNNING),
    "cancel": ({RunStatus.CREATED, RunStatus.RUNNING, RunStatus.WAITING, RunStatus.PAUSED}, RunStatus.CANCELLED),
    "wait": ({RunStatus.RUNNING}, RunStatus.WAITING),
    "wake": ({RunStatus.WAITING}, RunStatus.RUNNING),
    "finish": ({RunStatus.RUNNING, RunStatus.WAITING}, RunStatus.FINISHED),
    "fail": ({RunStatus.CREATED, RunStatus.RUNNING, RunStatus.WAITING, RunStatus.PAUSED}, RunStatus.FAILED),
}


class ApprovalMode(models.TextChoices):
    AUTO = "auto", "Automatic"
    MANUAL = "manual", "Approver decides"


class SearchRun(models.Model):
    problem = models.ForeignKey(Problem, on_delete=models.CASCADE, related_name="runs")
    name = models.CharField(max_length=200, blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    generator = models.CharField(max_length=40, default="template")
    surrogate = models.CharField(max_length=40, default="learned")
    confidence_threshold = models.FloatField(default=0.6)
    # Once the run has measured enough forecasts, the threshold becomes the lowest at which its accepted forecasts
    # erred at most this often (PolicySettings.conformal_target); None: the fixed threshold throughout.
    conformal_target = models.FloatField(null=True, blank=True)
    gpu_budget = models.PositiveIntegerField(default=40)
    puct_c = models.FloatField(default=1.0)
    children_per_step = models.PositiveIntegerField(default=4)
    # Parents expanded per step; the children of all of them are compile-checked in one batch.
    parents_per_step = models.PositiveIntegerField(default=1)
    # A step expands more parents until it has created at least this many children (0: off).
    min_children_per_step = models.PositiveIntegerField(default=0)
    # A step whose compile batch costs more than this share of its wall time measures more of what it
    # compiled, up to max_gpu_per_step (0: off).
    compile_share_target = models.FloatField(default=0.0)
    # While the GPU measures a step, the next step's children are expanded and compile-checked
    # (SearchSettings.prefetch_while_measuring); off for runs made before it existed.
    prefetch_while_measuring = models.BooleanField(default=False)
    max_gpu_per_step = models.PositiveIntegerField(default=2)
    # The surrogate relearns from the run after 1, 2, 4, 8 ... measured rows, then every retrain_every.
    retrain_every = models.PositiveIntegerField(default=10)
    max_steps = models.PositiveIntegerField(default=60)
    approval_mode = models.CharField(max_length=10, choices=ApprovalMode.choices, default=ApprovalMode.AUTO)
    target_gpu = models.CharField(max_length=40, default="h200")
    backend = models.CharField(max_length=16, default="auto")
    objective = models.CharField(max_length=20, default="time")
    energy_cap_j = models.FloatField(null=True, blank=True)
    feedback = models.CharField(max_length=10, default="notes")
    discovery_threshold = models.FloatField(default=2 ** 0.5)
    seed = models.PositiveIntegerField(default=0)
    # Candidates forecast at the root before the first measurement (0: no screening).
    screening_width = models.PositiveIntegerField(default=0)
    # LLM calls the run may make, shared by its generator and surrogate (None: the run uses no LLM).
    llm_call_budget = models.PositiveIntegerField(null=True, blank=True)
    llm_calls = models.PositiveIntegerField(default=0)
    status = models.CharField(max_length=12, choices=RunStatus.choices, default=RunStatus.CREATED)
    status_reason = models.TextField(blank=True)
    # Counters shown on the page; the driver's state holds the full picture.
    nodes_count = models.PositiveIntegerField(default=0)
    gpu_used = models.PositiveIntegerField(default=0)
    forecasts_count = models.PositiveIntegerField(default=0)
    best_speedup = models.FloatField(null=True, blank=True)
    best_node = models.ForeignKey("Node", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    change_seq = models.PositiveBigIntegerField(default=0)
    driver_state = models.JSONField(null=True, blank=True)
    lease_until = models.DateTimeField(null=True, blank=True)
    # The run form's one-time token: a form sent twice (a double click, a retried post) makes one run, not two.
    submission = models.CharField(max_length=64, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [models.UniqueConstraint(fields=["problem", "submission"], condition=~models.Q(submission=""),
                                               name="run_form_sent_once")]

    def __str__(self) -> str:
        return self.name or f"run {self.pk} of {self.problem}"

    @property
    def workspace(self) -> Workspace:
        return self.problem.workspace

    @property
    def gpu_queue(self) -> str:
        return "replay" if self.backend == "replay" else f"gpu.{self.target_gpu}"


class NodeState(models.TextChoices):
    PROPOSED = "proposed", "Proposed"
    FORECAST = "forecast", "Forecast"
    ACCEPTED = "accepted", "Accepted by forecast"
    AWAITING_APPROVAL = "awaiting-approval", "Awaiting approval"
    QUEUED = "queued", "Queued"
    MEASURING = "measuring", "Measuring"
    MEASURED = "measured", "Measured"
    FAILED_COMPILE = "failed-compile", "Failed to compile"
    FAILED_CORRECTNESS = "failed-correctness", "Failed correctness"
    FAILED_RUNTIME = "failed-runtime", "Failed at run time"
    # The replay backend has no recording of this source: nothing is known about the candidate.
    NOT_RECORDED = "not-recorded", "Not in the recorded data"
    REJECTED = "rejected", "Rejected"
    PRUNED = "pruned", "Pruned"
    CANCELLED = "cancelled", "Not measured: the run was cancelled"


class Node(models.Model):
    run = models.ForeignKey(SearchRun, on_delete=models.CASCADE, related_name="nodes")
    key = models.CharField(max_length=64)  # the driver's node id
    parent = models.ForeignKey("self", null=True, blank=True, on_delete=models.CASCADE, related_name="children")
    kernel = models.ForeignKey(Kernel, null=True, blank=True, on_delete=models.PROTECT, related_name="nodes")
    rationale = models.TextField(blank=True)
    origin = models.CharField(max_length=20, default="generator")  # generator | human | root
    author = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    # The node's own name, what the tree and every page listing the node show (empty: its key): its generator's name
    # for the candidate (a template variant's recipe and setting, an LLM child's "llm-<parent>"), "by <author>" for a
    # hand-written one, "<problem> reference" for the root. Set when the node is made (see save), never read from the
    # shared Kernel row, whose name is whichever node of whichever workspace stored that content first.
    name = models.CharField(max_length=200, blank=True)
    depth = models.PositiveIntegerField(default=0)
    value = models.FloatField(null=True, blank=True)
    state = models.CharField(max_length=24, choices=NodeState.choices, default=NodeState.PROPOSED)
    state_reason = models.TextField(blank=True)
    speedup = models.FloatField(null=True, blank=True)  # measured
    forecast_bin = models.PositiveSmallIntegerField(null=True, blank=True)
    forecast_confidence = models.FloatField(null=True, blank=True)
    is_discovery = models.BooleanField(default=False)
    # The generator's failed attempts to expand this node (reason, excerpt, step), oldest first.
    failed_proposals = models.JSONField(default=list, blank=True)
    # The run's change number of the last change about this node: what a cached panel is keyed by.
    change_seq = models.PositiveBigIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "key"], name="node_key_per_run")]
        indexes = [models.Index(fields=["run", "state"])]

    def __str__(self) -> str:
        return f"node {self.key} of run {self.run_id}"

    def save(self, *args, **kwargs) -> None:
        if self._state.adding and not self.name:
            self.name = self.own_name()[:200]
        super().save(*args, **kwargs)

    def own_name(self) -> str:
        """The name a node is made with when its maker gave none (services.search_port names every node the search
        makes): the root is its problem's reference, a hand-written one "by <author>"."""
        if self.origin == "root":
            return f"{self.run.problem.name} reference"
        if self.origin == "human" and self.author_id is not None:
            return f"by {self.author.get_username()}"
        return ""


class Forecast(models.Model):
    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="forecasts")
    surrogate = models.CharField(max_length=80)  # the surrogate's id, name@version
    probabilities = models.JSONField(default=list)
    bin = models.PositiveSmallIntegerField(null=True, blank=True)
    confidence = models.FloatField(null=True, blank=True)
    reasoning = models.TextField(blank=True)
    abstained = models.BooleanField(default=False)
    abstain_reason = models.TextField(blank=True)
    raw_sum = models.FloatField(null=True, blank=True)
    latency_s = models.FloatField(default=0.0)
    tokens_in = models.PositiveIntegerField(default=0)
    tokens_out = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)


class Measurement(models.Model):
    kernel = models.ForeignKey(Kernel, on_delete=models.PROTECT, related_name="measurements")
    problem = models.ForeignKey(Problem, on_delete=models.CASCADE, related_name="measurements")
    status = models.CharField(max_length=24)
    reason = models.TextField(blank=True)
    hardware = models.JSONField(default=dict)
    gpu_model = models.CharField(max_length=40, blank=True)
    reference_stats = models.JSONField(default=dict)
    candidate_stats = models.JSONField(default=dict)
    speedup = models.FloatField(null=True, blank=True)
    max_abs_error = models.FloatField(null=True, blank=True)
    max_rel_error = models.FloatField(null=True, blank=True)
    energy = models.JSONField(null=True, blank=True)
    compiler_facts = models.JSONField(default=dict, blank=True)
    profiler_metrics = models.JSONField(default=dict, blank=True)
    observer_errors = models.JSONField(default=dict, blank=True)
    backend = models.CharField(max_length=16)
    seed = models.BigIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)

    @property
    def energy_j_per_call(self) -> float | None:
        return (self.energy or {}).get("j_per_call")


class ExpertNote(models.Model):
    measurement = models.ForeignKey(Measurement, on_delete=models.CASCADE, related_name="expert_notes")
    expert = models.CharField(max_length=60)
    severity = models.CharField(max_length=12)
    finding = models.TextField()
    evidence = models.JSONField(default=dict)
    advice = models.TextField()


class VerificationState(models.TextChoices):
    PENDING = "pending-approval", "Pending approval"
    APPROVED = "approved", "Approved"
    REJECTED = "rejected", "Rejected"
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    DONE = "done", "Done"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled with its run"


VERIFICATION_TRANSITIONS = {
    "approve": ({VerificationState.PENDING}, VerificationState.APPROVED),
    "reject": ({VerificationState.PENDING}, VerificationState.REJECTED),
    "enqueue": ({VerificationState.APPROVED, VerificationState.FAILED}, VerificationState.QUEUED),
    "claim": ({VerificationState.QUEUED, VerificationState.RUNNING}, VerificationState.RUNNING),
    "finish": ({VerificationState.RUNNING}, VerificationState.DONE),
    "fail": ({VerificationState.RUNNING, VerificationState.QUEUED}, VerificationState.FAILED),
    "cancel": ({VerificationState.PENDING, VerificationState.APPROVED, VerificationState.QUEUED}, VerificationState.CANCELLED),
}


class Verification(models.Model):
    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="verifications")
    requested_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    requested_by_policy = models.CharField(max_length=200, blank=True)  # why the policy asked
    state = models.CharField(max_length=20, choices=VerificationState.choices, default=VerificationState.PENDING)
    approver = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    reason = models.TextField(blank=True)
    queue = models.CharField(max_length=60, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    max_attempts = models.PositiveIntegerField(default=3)
    claim_token = models.CharField(max_length=40, blank=True)
    # The Celery worker (its hostname, as in WorkerHeartbeat) that made the current claim: a claim whose worker
    # stopped beating, or started again since, is taken over without waiting for KERNELLAB_STALE_RUNNING_S.
    claimed_by = models.CharField(max_length=200, blank=True, default="", db_index=True)
    progress = models.CharField(max_length=120, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    measurement = models.ForeignKey(Measurement, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    decided_at = models.DateTimeField(null=True, blank=True)
    queued_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["created_at"]

    @property
    def outcome_label(self) -> str:
        """The state, except that a replay miss is not a finished measurement."""
        if self.state == VerificationState.DONE and self.measurement_id and self.measurement.status == "unavailable":
            return "Not in the recorded data"
        return self.get_state_display()


# How often a worker writes its heartbeat row.
HEARTBEAT_S = 15.0


class WorkerHeartbeat(models.Model):
    """A Celery worker says every few seconds which queues it consumes; a queue whose workers all
    went quiet has nobody to answer its verifications."""

    hostname = models.CharField(max_length=200, unique=True)
    queues = models.JSONField(default=list)
    started_at = models.DateTimeField()
    last_seen = models.DateTimeField(db_index=True)

    def __str__(self) -> str:
        return f"{self.hostname} on {', '.join(self.queues)}"


class Comment(models.Model):
    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="comments")
    # A deleted account's comments stay, by "a removed user" (REMOVED_USER), like everything else a person wrote.
    author = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    body = models.TextField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created_at"]

    @property
    def author_name(self) -> str:
        return self.author.get_username() if self.author_id is not None else REMOVED_USER


# What pages and change payloads say in place of a deleted account's name.
REMOVED_USER = "a removed user"


class Discovery(models.Model):
    node = models.OneToOneField(Node, on_delete=models.CASCADE, related_name="discovery")
    marked_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    auto = models.BooleanField(default=False)
    note = models.TextField(blank=True)
    parent_speedup = models.FloatField(null=True, blank=True)
    child_speedup = models.FloatField(null=True, blank=True)
    forecast_jump_bin = models.PositiveSmallIntegerField(null=True, blank=True)
    forecast_jump_probabilities = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    @property
    def jump(self) -> float | None:
        if self.parent_speedup and self.child_speedup:
            return self.child_speedup / self.parent_speedup
        return None


class RunChange(models.Model):
    """One change to a run's tree; seq is per run, gap-free and increasing."""

    run = models.ForeignKey(SearchRun, on_delete=models.CASCADE, related_name="changes")
    seq = models.PositiveBigIntegerField()
    kind = models.CharField(max_length=40)
    payload = models.JSONField(default=dict)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "seq"], name="change_seq_per_run")]
        ordering = ["seq"]


class SearchLesson(models.Model):
    """A search-memory lesson, shown per run (the driver's memory is the source)."""

    run = models.ForeignKey(SearchRun, on_delete=models.CASCADE, related_name="lessons")
    text = models.TextField()
    effect = models.FloatField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)


# Every write to a comment, wherever it comes from (the panel, Django admin, a shell), records a "comment" change
# about its node: live viewers reload the node's comments, and the node's change number, which names the cached
# story a panel shows (selectors.explorer.node_story), moves on, so a deleted or edited comment is gone at once.
# Receivers live here, not in a service module, so that every process that loads the models has them.


@receiver(post_save, sender=Comment, dispatch_uid="kernellab.comment_saved")
def _comment_saved(sender, instance: Comment, created: bool, raw: bool = False, **kwargs) -> None:
    if raw:  # loaddata: the fixture's rows, no change to tell
        return
    from kernellab.services.comments import comment_changed

    comment_changed(comment=instance, what="added" if created else "edited")


@receiver(post_delete, sender=Comment, dispatch_uid="kernellab.comment_deleted")
def _comment_deleted(sender, instance: Comment, origin=None, **kwargs) -> None:
    # Only a deletion of comments themselves: one that cascades from its node, run or workspace takes the node too.
    if isinstance(origin, Comment) or (isinstance(origin, models.QuerySet) and origin.model is Comment):
        from kernellab.services.comments import comment_changed

        comment_changed(comment=instance, what="deleted")


@receiver(pre_delete, sender=settings.AUTH_USER_MODEL, dispatch_uid="kernellab.comment_authors_deleted")
def _comment_author_deleted(sender, instance, **kwargs) -> None:
    # The account's comments stay (SET_NULL) and now read "a removed user": their nodes' panels are told so.
    from kernellab.services.comments import comments_of_removed_author

    comments_of_removed_author(user=instance)


# A live socket keeps streaming a run's changes until it learns its user's access is gone. Whatever may end that access
# (a membership removed, an account changed, deactivated or deleted, a logout) tells the user's sockets at once, from
# any process that loads the models; each then asks afresh (consumers.RunConsumer.access_changed).


@receiver(post_delete, sender=Membership, dispatch_uid="kernellab.membership_removed_access")
def _membership_removed(sender, instance: Membership, **kwargs) -> None:
    from kernellab.services.changes import access_changed

    access_changed(user_id=instance.user_id)


@receiver([post_save, post_delete], sender=settings.AUTH_USER_MODEL, dispatch_uid="kernellab.account_changed_access")
def _account_changed(sender, instance, created: bool = False, raw: bool = False, update_fields=None, **kwargs) -> None:
    if created or raw or (update_fields is not None and set(update_fields) <= {"last_login"}):  # a login changes nothing
        return
    from kernellab.services.changes import access_changed

    access_changed(user_id=instance.pk)


@receiver(user_logged_out, dispatch_uid="kernellab.logged_out_access")
def _logged_out(sender, request, user, **kwargs) -> None:
    if user is not None:
        from kernellab.services.changes import access_changed

        access_changed(user_id=user.pk)
