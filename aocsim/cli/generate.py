"""`aocsim generate MODEL --prompt TEXT`: text from a character-level language model, exact path."""

from __future__ import annotations

import click

from aocsim.cli.common import PROFILE_HELP, compute, friendly, profile_option


@click.command("generate")
@click.argument("model")
@click.option("--prompt", required=True, help="Text to continue (at least one character).")
@click.option("--length", type=int, default=200, show_default=True, help="Characters to generate (>= 1).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the sampling generator (>= 0).")
@click.option("--temperature", type=float, default=1.0, show_default=True,
              help="Softmax temperature (>= 0; 0: the most likely character each time).")
@profile_option("--device", default=None,
                help="Also generate on this device profile (a hybrid placement, one chip and one weight load, "
                     "as in aocsim compare) from the same sampling seed, printed beside the exact path's text: "
                     f"{PROFILE_HELP}.")
@click.option("--chip", type=click.IntRange(min=0), default=0, show_default=True, help="--device: the chip.")
@friendly
def generate_cmd(model: str, prompt: str, length: int, seed: int, temperature: float, device: str | None,
                 chip: int) -> None:
    """Continue PROMPT with LENGTH characters drawn from MODEL (a bundled name or a model directory).

    Language models only (charlm-*). Runs the exact path in sequential mode, one
    character at a time; with --device also the device (the same sampling seed), so that
    the two texts show what the noise does. Prompt characters outside the model's vocabulary map to its
    unknown id (a note on stderr says which); the unknown id prints as U+FFFD.
    Prints the prompt followed by the generated text.
    """
    from aocsim.experiments.generate import check_request, generate
    from aocsim.io.model_files import load_model

    loaded = load_model(model)
    # One-line errors (another kind of model, a bad length) before the thread note and any work.
    check_request(loaded, prompt, length, seed=seed, temperature=temperature)
    if device is not None:
        from aocsim.execute.registry import resolve_profile

        profile = resolve_profile(device)  # an unknown device: one line before any work
    with compute():
        result = generate(loaded, prompt, length, seed=seed, temperature=temperature)
        if device is not None:
            from aocsim.experiments.generate import DeviceNextLogits

            on_device = generate(loaded, prompt, length, seed=seed, temperature=temperature,
                                 next_logits=DeviceNextLogits(loaded, profile, max_length=len(prompt) + length,
                                                              chip=chip, seed=seed))
    if result.unknown:
        chars = ", ".join(repr(c) for c in result.unknown)
        click.echo(f"note: prompt character(s) {chars} are not in the vocabulary of {loaded.card['name']}; "
                   f"they map to unknown_id {loaded.card['unknown_id']}", err=True)
    if device is None:
        click.echo(prompt + result.text)
        return
    click.echo(f"exact path: {prompt + result.text}")
    click.echo(f"{profile.name} (chip {chip}): {prompt + on_device.text}")
