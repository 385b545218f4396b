"""Summaries across trained state-tracking models (several recipes and seeds)."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from aocsim.io.model_files import CARD_FILE, read_card


def collect_cards(roots: list[Path]) -> list[dict[str, Any]]:
    """Model cards of every state-tracking model directory directly under `roots`."""
    cards = []
    for root in roots:
        for card_path in sorted(root.glob(f"*/{CARD_FILE}")):
            card = read_card(card_path.parent)
            if card.get("task") == "state_tracking":
                cards.append(card)
    return cards


def seed_table(cards: list[dict[str, Any]], mode: str = "simultaneous") -> list[dict[str, Any]]:
    """Per recipe: number of seeds, mean and best per-token accuracy at each evaluated length."""
    by_recipe: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for card in cards:
        by_recipe[card["training"]["name"]].append(card)
    rows = []
    for name, group_cards in sorted(by_recipe.items()):
        row: dict[str, Any] = {"recipe": name, "seeds": sorted(c["seed"] for c in group_cards),
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
    keys = [k for k in rows[0] if k.endswith("L")] if rows else []
    head = f"{'recipe':18s} {'seeds':8s} " + " ".join(f"{k + ' mean/best':>17s}" for k in keys)
    lines = [head + f" {'agree':>6s} {'train min':>9s}"]
    for r in rows:
        cells = " ".join(f"{r[k]['mean']:8.4f}/{r[k]['best']:.4f}" for k in keys)
        seeds = ",".join(str(s) for s in r["seeds"])
        lines.append(f"{r['recipe']:18s} {seeds:8s} {cells} {r['agreement_min']:6.4f} {r['minutes']:9.1f}")
    return "\n".join(lines)


def markdown_seed_table(rows: list[dict[str, Any]]) -> str:
    """The seed table as Markdown (per-token accuracy, mean / best over seeds)."""
    keys = [k for k in rows[0] if k.endswith("L")] if rows else []
    head = "| recipe | seeds | " + " | ".join(f"{k} (L = {rows[0][k]['length']}) mean / best" for k in keys)
    lines = [head + " | min mode agreement | train minutes |", "|---" * (len(keys) + 4) + "|"]
    for r in rows:
        cells = " | ".join(f"{r[k]['mean']:.4f} / {r[k]['best']:.4f}" for k in keys)
        seeds = ", ".join(str(s) for s in r["seeds"])
        lines.append(f"| {r['recipe']} | {seeds} | {cells} | {r['agreement_min']:.4f} | {r['minutes']:.1f} |")
    return "\n".join(lines)
