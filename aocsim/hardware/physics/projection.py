"""What separates a profile from the AOC paper's projected efficiency (docs/PHYSICS.md section 6).

The paper (Kalinin et al., Nature 2025) projects about 500 TOPS/W at 8 bits for a scaled-up machine. A
module's energy per round trip is its emitters' light, E_light = 2 N^2 P_unit d t_rt / (eta eta_wpe), plus
the rest (electronics, SLMs, conversions when it converts every round trip). The target's energy per
round trip, 2 N^2 / target, leaves E_target - E_rest for the light, so the light's energy per operation,
P_unit d t_rt / (eta eta_wpe), must fall by E_light / (E_target - E_rest); neither efficiency exceeds 1,
so at eta = eta_wpe = 1 the light alone bounds the module at 1 / (P_unit d t_rt). Less light per unit costs
effective bits (`energy.bits_at_light`: half a bit per halving where shot noise dominates).
"""

from __future__ import annotations

from aocsim.hardware.physics.energy import bits_at_light, static_power_w, tops_per_watt
from aocsim.hardware.physics.light import light_bound_tops_per_watt, light_energy_per_op_j
from aocsim.hardware.profiles.parts import Parts
from aocsim.hardware.profiles.profile import DeviceProfile
from aocsim.units import ops_per_watt, si

PAPER_TOPS_PER_W = 500.0  # Kalinin et al., Nature 2025: the projection at 8-bit precision


def light_factor(profile: DeviceProfile, target_tops_per_w: float = PAPER_TOPS_PER_W) -> float:
    """The factor by which the light's energy per operation P_unit d t_rt / (eta eta_wpe) must fall for the
    module (the profile's channels, running its loop) to reach the target TOPS/W; inf where the rest of its
    power alone exceeds the target's budget, 1 or less where it already reaches it."""
    n, t_rt = int(profile.channels), float(profile.parts.loop.round_trip_s)
    per_round_trip = 2.0 * n * n / (tops_per_watt(profile) * 1e12)
    light = static_power_w(profile)["emitters"] * t_rt
    room = 2.0 * n * n / (target_tops_per_w * 1e12) - (per_round_trip - light)
    return light / room if room > 0 else float("inf")


def paper_gap(profile: DeviceProfile, at_bias: Parts, enob: float) -> str:
    """A paragraph: this module against the paper's 500 TOPS/W, computed from the profile. `at_bias`: its
    components with the bias of the noise budget's load (the shot-noise share), `enob` the budget's bits."""
    v, target = profile.parts, PAPER_TOPS_PER_W
    e = v.energy
    now = light_energy_per_op_j(v)
    lossless = now * e.optical_link_efficiency * e.emitter_wall_plug_efficiency  # at eta = eta_wpe = 1
    lines = [f"Against the paper's {target:g} TOPS/W (Kalinin et al., Nature 2025; docs/PHYSICS.md section 6):",
             f"  the light bounds this module at eta eta_wpe / (P_unit d t_rt) = "
             f"{ops_per_watt(light_bound_tops_per_watt(v))} (eta = {e.optical_link_efficiency:g}, eta_wpe = "
             f"{e.emitter_wall_plug_efficiency:g}); at eta = eta_wpe = 1, which neither can exceed, "
             f"{ops_per_watt(1.0 / lossless / 1e12)}"]
    k = light_factor(profile, target)
    if k == float("inf"):
        lines.append(f"  out of reach by the light: the rest of the module (electronics, SLMs, conversions) alone "
                     f"costs more than {ops_per_watt(target)} allows")
    elif k <= 1:
        lines.append(f"  it reaches {ops_per_watt(target)} already")
    else:
        bits = bits_at_light(at_bias, 1.0 / k)
        lines.append(f"  {ops_per_watt(target)} needs the light's energy per operation, P_unit d t_rt / (eta eta_wpe),"
                     f" {k:.3g}x lower ({si(now, 'J')} -> {si(now / k, 'J')}): with eta and eta_wpe as they are, "
                     f"P_unit {k:.3g}x lower costs {-bits:.2g} effective bits ({enob:.1f} -> {enob + bits:.1f}; half a "
                     f"bit per halving of the light where shot noise dominates)")
    return "\n".join(lines)
