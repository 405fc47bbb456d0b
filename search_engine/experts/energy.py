"""Energy efficiency: joules per call, per byte and per FLOP, and power against the board's limit."""

from __future__ import annotations

from . import wording
from .note import ExpertNote
from .profile import KernelProfile
from .roofline import Bound

NAME = "energy"

# Mean power from the NVML energy counter above the enforced power limit by more than 5% cannot be
# the kernel's sustained draw: the window was too short for the counter or overlapped other work.
# (Seen on the H200 fixtures captured 2026-11-29: 0.4 s windows read up to 905 W against 700 W.)
OVER_LIMIT = 1.05
# At 90% of the limit or more the board is power-capped and lowers its clocks: energy and time
# both fall with every byte or instruction saved.
NEAR_LIMIT = 0.90
# Under 35% of the limit most of the chip idles during the call (latency- or launch-bound), and the
# static power paid for the call's duration dominates its energy.
LOW_POWER = 0.35


def examine(profile: KernelProfile, bound: Bound) -> list[ExpertNote]:
    energy = profile.energy or {}
    joules = energy.get("j_per_call")
    watts = energy.get("mean_w")
    if not isinstance(joules, (int, float)) or joules <= 0:
        return []
    limit = profile.peaks.power_limit_w
    evidence = {"j_per_call": joules, "mean_w": watts, "power_limit_w": limit}
    per = []
    if profile.bytes:
        evidence["pj_per_byte"] = wording.rounded(joules / profile.bytes * 1e12)
        per.append(f"{joules / profile.bytes * 1e12:.3g} pJ per byte")
    if profile.flops:
        evidence["pj_per_flop"] = wording.rounded(joules / profile.flops * 1e12)
        per.append(f"{joules / profile.flops * 1e12:.3g} pJ per FLOP")
    power = f" at {watts:.0f} W" if isinstance(watts, (int, float)) else ""
    finding = f"One call costs {joules:.3g} J{power}" + (f" ({', '.join(per)} of the problem)" if per else "") + "."
    severity, advice = "info", ("At roughly constant power, energy per call follows time: the faster variant is "
                                "also the cheaper one unless it draws more power.")
    if isinstance(watts, (int, float)) and limit:
        evidence.update(over_limit=OVER_LIMIT, near_limit=NEAR_LIMIT, low_power=LOW_POWER)
        if watts > OVER_LIMIT * limit:
            severity = "warning"
            finding = (f"The energy reading of {joules:.3g} J per call implies {watts:.0f} W, above the board's "
                       f"{limit:.0f} W limit, so it is not the kernel's sustained draw.")
            advice = ("Measure energy over a longer window of back-to-back launches (a second or more) before "
                      "comparing variants by energy.")
        elif watts >= NEAR_LIMIT * limit:
            severity = "warning"
            finding += (f" That is {wording.percent(100 * watts / limit)} of the {limit:.0f} W limit: the board "
                        "may be lowering its clocks.")
            advice = ("Cut bytes moved and instructions issued rather than adding parallel work: at the power limit "
                      "each saving lowers energy and lets the clocks rise.")
        elif watts < LOW_POWER * limit:
            finding += (f" That is {wording.percent(100 * watts / limit)} of the {limit:.0f} W limit: most of the "
                        "chip idles.")
            advice = ("Idle power dominates this call's energy, so shortening the kernel (more work in flight, fewer "
                      "launches) saves energy nearly in proportion to time.")
    return [ExpertNote(NAME, severity, finding, evidence, advice)]
