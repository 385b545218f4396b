"""`aocsim devices list|show|schema`: the device profiles."""

from __future__ import annotations

from typing import Any

import click

from aocsim.cli.common import friendly, parse_overrides, profile_option


EXAMPLE_ITERATIONS = 20  # an early stop's example: the digits DEQ's mean on aoc48 is about 18


@click.group()
def devices() -> None:
    """Device profiles of virtual AOC machines (devices/*.yaml)."""


@devices.command("list")
@friendly
def devices_list() -> None:
    """List the bundled device profiles."""
    from aocsim.hardware.profiles.profile import available_devices, load_device

    for name in available_devices():
        dev = load_device(name)
        n = dev.channels if dev.channels is not None else "any"
        click.echo(f"{name:12s} {str(n):>4s} channels  {dev['description'].splitlines()[0][:90]}")


@devices.command("show")
@profile_option("name")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
              help="Dotted-key override, YAML value (repeatable), e.g. --set slm.bits=6.")
@click.option("--key", "keys", multiple=True, metavar="KEY",
              help="Print only this profile value with its unit (repeatable), e.g. --key noise.power_per_unit_w.")
@friendly
def devices_show(name: str, overrides: tuple[str, ...], keys: tuple[str, ...]) -> None:
    """Show profile NAME (bundled name or .yaml path), its noise budget and its energy figures; with
    --key, only the values asked for, one line each with the unit of the profile schema.

    The budget gives, per noise source, the standard deviation it adds at the
    loop node (millivolts), the SNR against a full-scale sine and the
    effective bits, at the reference operating point of aocsim.hardware.engine.budget.
    The energy lines (aocsim.hardware.physics.energy) give the static powers, TOPS/W
    and the time and energy of one native inference.
    """
    from aocsim.hardware.engine.budget import format_budget, noise_budget
    from aocsim.hardware.physics.energy import format_energy, format_inference
    from aocsim.hardware.profiles.profile import load_device

    dev = load_device(name, parse_overrides(overrides))
    if keys:
        for key in keys:
            click.echo(key_line(dev, key))
        return
    about, v = dev.values, dev.parts
    click.echo(f"{dev.name}: {about['description']}")
    click.echo(f"  source   {about['provenance.source']} ({about['provenance.date']}; {about['provenance.licence']})")
    click.echo(f"  file     {dev.origin}" + (f"  overrides {dict(dev.overrides)}" if dev.overrides else ""))
    click.echo(f"  channels {dev.channels if dev.channels is not None else 'any'}; nonlinearity "
               f"{v.nonlinearity.kind}; SLM bits {v.slm.bits}; PBS leakage "
               f"{'on' if v.crosstalk.pbs.enabled else 'off'}; closed-loop correction "
               f"{'on' if v.closed_loop.enabled else 'off'}; round trip {v.loop.round_trip_s * 1e9:g} ns")
    click.echo("")
    rows = noise_budget(dev)
    click.echo(format_budget(rows))
    click.echo("")
    click.echo(format_energy(dev))
    if dev.channels is None:
        return
    from aocsim.hardware.engine.dynamics import loop_activity, stop_rule

    its = EXAMPLE_ITERATIONS
    for readout in (True, False):  # a native inference under each stop rule (what `aocsim compare` prices)
        what = stop_rule(v.readout, readout=readout) + ("" if readout else f", after {its} iterations")
        click.echo(format_inference(dev, loop_activity(v, dev.channels, its, readout=readout), what, its))
    click.echo("")
    click.echo(one_light(dev, rows[-1].enob))


def one_light(dev: Any, enob: float) -> str:
    """The precision and TOPS/W of one light (docs/PHYSICS.md section 6): the noise budget's total effective
    bits `enob`, and TOPS/W with the loop running and for one inference in its readout window."""
    from aocsim.hardware.engine.budget import reference_light
    from aocsim.hardware.engine.dynamics import loop_activity
    from aocsim.hardware.physics.energy import emitter_optical_power_w, inference_tops_per_watt, tops_per_watt
    from aocsim.hardware.physics.projection import paper_gap
    from aocsim.units import ops_per_watt, si

    light, v, its = reference_light(dev), dev.parts, EXAMPLE_ITERATIONS
    window = inference_tops_per_watt(dev, loop_activity(v, dev.channels, its, readout=True), its)
    bias = light.parts.noise.bias_units
    lines = [f"One light (docs/PHYSICS.md section 6): {si(light.bias_w, 'W')} per detector "
             f"({bias:g} units of {si(v.noise.power_per_unit_w, 'W')}"
             f"{', the reference load' + chr(39) + 's own (auto)' if v.noise.bias_units == 'auto' else ''}), the "
             f"bias light of the budget's shot noise; each emitter emits {si(emitter_optical_power_w(dev), 'W')} for "
             f"the 2N pixels it lights",
             f"  precision    {enob:.1f} effective bits (the budget's total per iteration)",
             f"  efficiency   {ops_per_watt(tops_per_watt(dev))} with the loop running; {ops_per_watt(window)} for one "
             f"inference of "
             f"{its} iterations in its readout window"]
    if light.negative > 0:
        lines.append(f"note: at the budget's reference point {100 * light.negative:.1f} % of the detector readings "
                     "would need negative light: noise.bias_units is too small for the signal")
    return "\n".join([*lines, "", paper_gap(dev, light.parts, enob)])


@devices.command("schema")
def devices_schema() -> None:
    """Print the profile schema (Markdown; the source of devices/SCHEMA.md)."""
    from aocsim.hardware.profiles.schema import markdown

    click.echo(markdown(), nl=False)



def key_line(dev: Any, key: str) -> str:
    """'KEY = VALUE UNIT' for one profile key (the unit from aocsim/hardware/profiles/schema.py)."""
    import numpy as np

    from aocsim.hardware.profiles.checks import suggest
    from aocsim.hardware.profiles.schema import BY_KEY

    if key not in BY_KEY:
        raise click.ClickException(f"--key {key!r} is not a profile key{suggest(key)}; expected a dotted key of "
                                   "devices/SCHEMA.md")
    value = dev.values[key]
    if isinstance(value, np.ndarray):
        text = " ".join(np.array2string(value, separator=", ", threshold=12).split())  # one line
    else:
        text = f"{value:g}" if isinstance(value, float) else str(value)
    unit = BY_KEY[key].unit
    return f"{key} = {text}" + (f" {unit}" if unit and value is not None else "")
