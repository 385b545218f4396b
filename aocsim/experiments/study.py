"""Summaries across trained models: state tracking (several recipes and seeds), language models."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from aocsim.io.model_files import CARD_FILE, read_card


def collect_cards(roots: list[Path], task: str = "state_tracking") -> list[dict[str, Any]]:
    """Model cards of every model directory of `task` directly under `roots`."""
    cards = []
    for root in roots:
        for card_path in sorted(root.glob(f"*/{CARD_FILE}")):
            card = read_card(card_path.parent)
            if card.get("task") == task:
                cards.append(card)
    return cards


def language_table(cards: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per language model card: held-out bits per character in each evaluated mode."""
    rows = []
    for card in sorted(cards, key=lambda c: (c["training"]["name"], c["seed"])):
        heldout = card["metrics"]["heldout"]
        rows.append({"recipe": card["training"]["name"], "revision": card["training"].get("revision", 1),
                     "seed": card["seed"], "parameters": card.get("parameters"), "length": heldout["length"],
                     "bits": {m: heldout[m]["bits_per_character"] for m in ("simultaneous", "sequential") if m in heldout},
                     "minutes": card["training"]["train_seconds"] / 60,
                     "cpu_minutes": card["training"].get("train_cpu_seconds", float("nan")) / 60})
    return rows


def format_language_table(rows: list[dict[str, Any]], *, markdown: bool = False) -> str:
    """The language rows as text (or Markdown): held-out bits per character by mode ("-": not evaluated,
    explicit models have one pass, evaluated once); training minutes, wall clock and CPU (one thread)."""
    head = ["language model", "rev", "seed", "parameters", "eval length", "bpc simultaneous", "bpc sequential",
            "train min", "cpu min"]
    cells = [[r["recipe"], str(r["revision"]), str(r["seed"]), str(r["parameters"] or "-"), str(r["length"]),
              *(f"{r['bits'][m]:.4f}" if m in r["bits"] else "-" for m in ("simultaneous", "sequential")),
              f"{r['minutes']:.1f}", f"{r['cpu_minutes']:.1f}"] for r in rows]
    if markdown:
        return "\n".join(["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
                         + ["| " + " | ".join(c) + " |" for c in cells])
    widths = [max(len(x) for x in column) for column in zip(head, *cells)]
    return "\n".join(" ".join(x.ljust(w) if i == 0 else x.rjust(w) for i, (x, w) in enumerate(zip(line, widths)))
                     for line in [head, *cells])


def _eval_prob(card: dict[str, Any]) -> float:
    """Identity-token probability of the card's evaluation sequences (older cards: the training one)."""
    return card["data"].get("eval_identity_prob", card["training"]["identity_prob"])


def _length_keys(rows: list[dict[str, Any]]) -> list[str]:
    """The union of the rows' length keys ("1L", "4L", ...), by length factor."""
    return sorted({k for r in rows for k in r if k.endswith("L") and k[:-1].isdigit()}, key=lambda k: int(k[:-1]))


def seed_table(cards: list[dict[str, Any]], mode: str = "simultaneous") -> list[dict[str, Any]]:
    """Per recipe: number of seeds, mean and best per-token accuracy at each evaluated length.

    Cards of one recipe name but another recipe revision or evaluation distribution form
    separate rows (models trained before a recipe changed are not averaged with later ones).
    """
    by_recipe: dict[tuple[str, int, float], list[dict[str, Any]]] = defaultdict(list)
    for card in cards:
        by_recipe[(card["training"]["name"], card["training"].get("revision", 1), _eval_prob(card))].append(card)
    rows = []
    for (name, revision, p_eval), group_cards in sorted(by_recipe.items()):
        row: dict[str, Any] = {"recipe": name, "revision": revision, "eval_identity_prob": p_eval,
                               "seeds": sorted(c["seed"] for c in group_cards),
                               "minutes": max(c["training"]["train_seconds"] for c in group_cards) / 60}
        for key in group_cards[0]["metrics"]:
            accs = [c["metrics"][key][mode]["accuracy"] for c in group_cards]
            row[key] = {"length": group_cards[0]["metrics"][key]["length"], "mean": sum(accs) / len(accs),
                        "best": max(accs)}
        row["agreement_min"] = min(c["metrics"][k].get("mode_agreement", 1.0) for c in group_cards
                                   for k in c["metrics"])
        rows.append(row)
    return rows


def format_seed_table(rows: list[dict[str, Any]]) -> str:
    keys = _length_keys(rows)
    head = f"{'recipe':18s} {'rev':>3s} {'eval p_id':>9s} {'seeds':8s} " + " ".join(
        f"{k + ' mean/best':>17s}" for k in keys)
    lines = [head + f" {'agree':>6s} {'train min':>9s}"]
    for r in rows:
        cells = " ".join(f"{r[k]['mean']:8.4f}/{r[k]['best']:.4f}" if k in r else f"{'-':>17s}" for k in keys)
        seeds = ",".join(str(s) for s in r["seeds"])
        lines.append(f"{r['recipe']:18s} {r['revision']:3d} {r['eval_identity_prob']:9.4f} {seeds:8s} {cells} "
                     f"{r['agreement_min']:6.4f} {r['minutes']:9.1f}")
    return "\n".join(lines)


def markdown_seed_table(rows: list[dict[str, Any]]) -> str:
    """The seed table as Markdown (per-token accuracy, mean / best over seeds; "-": not evaluated)."""
    keys = _length_keys(rows)
    head = "| recipe | rev | eval identity prob | seeds | " + " | ".join(f"{k} mean / best" for k in keys)
    lines = [head + " | min mode agreement | train minutes |", "|---" * (len(keys) + 6) + "|"]
    for r in rows:
        cells = " | ".join(f"{r[k]['mean']:.4f} / {r[k]['best']:.4f} (L = {r[k]['length']})" if k in r else "-"
                           for k in keys)
        seeds = ", ".join(str(s) for s in r["seeds"])
        lines.append(f"| {r['recipe']} | {r['revision']} | {r['eval_identity_prob']:.4f} | {seeds} | {cells} | "
                     f"{r['agreement_min']:.4f} | {r['minutes']:.1f} |")
    return "\n".join(lines)
