"""Model directories: a YAML model card plus HDF5 weights, never pickle.

A model directory holds `card.yaml` (architecture, training settings, data
split, metrics, seed, software versions, and the list of weight tensors with
their shapes and the SHA-256 of the weight file) and `weights.h5` (one dataset
per tensor, named as in the model's `state_dict`). Loading checks the card
against the weights and fails with one line naming what disagrees.
"""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import tempfile
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import torch
import yaml
from torch import nn

from aocsim._version import __version__
from aocsim._checks import short, torch_device
from aocsim.errors import InputError, ModelFileError, UnknownNameError
from aocsim.paths import models_dir

CARD_FILE = "card.yaml"
WEIGHTS_FILE = "weights.h5"
REQUIRED_CARD_KEYS = ("name", "kind", "config", "weights")

def software_versions() -> dict[str, str]:
    """Versions recorded in model cards and result files."""
    return {"aocsim": __version__, "torch": str(torch.__version__), "numpy": str(np.__version__),
            "python": platform.python_version()}


def to_plain(obj: Any) -> Any:
    """Recursively convert numpy / torch scalars, tuples and str subclasses to plain YAML types."""
    if isinstance(obj, dict):
        return {str(k): to_plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_plain(v) for v in obj]
    if isinstance(obj, (bool, np.bool_)):
        return bool(obj)
    if isinstance(obj, (int, np.integer)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        return float(obj)
    if isinstance(obj, torch.Tensor) and obj.numel() == 1:
        return obj.item()
    if obj is None:
        return None
    return str(obj)


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def bundled_models() -> list[str]:
    """Names of the models shipped with aocsim."""
    root = models_dir()
    return sorted(p.parent.name for p in root.glob(f"*/{CARD_FILE}")) if root.is_dir() else []


def resolve_model_dir(name_or_path: str | Path) -> Path:
    """A model directory from a bundled name or a path; errors list the bundled names."""
    if not isinstance(name_or_path, (str, os.PathLike)) or str(name_or_path).strip() == "":
        raise InputError(f"name_or_path = {short(name_or_path)}; expected a bundled model name "
                         f"({', '.join(bundled_models())}) or a model directory")
    path = Path(name_or_path)
    if os.path.isdir(path):  # os.path's tests answer False for names the OS rejects (too long, NUL)
        return path
    if path.name == CARD_FILE and os.path.isfile(path):
        return path.parent
    bundled = models_dir() / str(name_or_path)
    if isinstance(name_or_path, str) and "/" not in name_or_path and os.path.isdir(bundled):
        return bundled
    raise UnknownNameError("model (neither a bundled name nor a directory)", str(name_or_path),
                           bundled_models())


def save_model(model: nn.Module, directory: str | Path, card: dict[str, Any], *,
               overwrite: bool = False) -> Path:
    """Write `card.yaml` and `weights.h5` into `directory` atomically.

    Args:
        model: the module; its `state_dict` is stored.
        directory: target folder; must not exist unless `overwrite`.
        card: model card fields (name, kind, config, ... ); `weights` is added.
        overwrite: replace an existing directory.
    """
    directory = Path(directory)
    if directory.exists() and not overwrite:
        raise ModelFileError(f"{directory} exists; refusing to overwrite it (pass overwrite=True / --force)")
    missing = [k for k in REQUIRED_CARD_KEYS if k != "weights" and k not in card]
    if missing:
        raise ModelFileError(f"model card lacks {missing}")
    directory.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=directory.parent))
    try:
        state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
        with h5py.File(tmp / WEIGHTS_FILE, "w") as h5:
            for key, value in state.items():
                h5.create_dataset(key, data=value.numpy())
        full = dict(card)
        full["weights"] = {
            "file": WEIGHTS_FILE,
            "sha256": _sha256(tmp / WEIGHTS_FILE),
            "dtype": str(next(iter(state.values())).dtype).replace("torch.", ""),
            "tensors": {k: list(v.shape) for k, v in state.items()},
        }
        (tmp / CARD_FILE).write_text(yaml.safe_dump(to_plain(full), sort_keys=False))
        if directory.exists():
            shutil.rmtree(directory)
        tmp.chmod(0o755)  # mkdtemp makes it private
        tmp.rename(directory)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    return directory


def read_card(directory: Path) -> dict[str, Any]:
    """Parse and minimally validate `card.yaml` of a model directory."""
    card_path = directory / CARD_FILE
    if not card_path.is_file():
        raise ModelFileError(f"{card_path}: model card missing")
    try:
        card = yaml.safe_load(card_path.read_text())
    except yaml.YAMLError as exc:
        raise ModelFileError(f"{card_path}: not valid YAML ({str(exc).splitlines()[0]})") from None
    if not isinstance(card, dict):
        raise ModelFileError(f"{card_path}: expected a mapping, got {type(card).__name__}")
    missing = [k for k in REQUIRED_CARD_KEYS if k not in card]
    if missing:
        raise ModelFileError(f"{card_path}: missing keys {missing}")
    _check_card_types(card, card_path)
    return card


def _check_card_types(card: dict[str, Any], card_path: Path) -> None:
    """The types the loader relies on, so that a damaged card fails with one line naming the field."""
    expected = {"name": (str, "a string"), "kind": (str, "a string"), "task": (str, "a string"),
                "config": (dict, "a mapping"), "weights": (dict, "a mapping of file, sha256, tensors")}
    for key, (kind, words) in expected.items():
        if key in card and not isinstance(card[key], kind):
            raise ModelFileError(f"{card_path}: {key} = {short(card[key])}; expected {words}")
    tensors = card["weights"].get("tensors", {})
    ok = isinstance(tensors, dict) and all(
        isinstance(k, str) and isinstance(v, list) and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                                                           for d in v) for k, v in tensors.items())
    if not ok:
        raise ModelFileError(f"{card_path}: weights.tensors = {short(tensors)}; expected a mapping of tensor "
                             "names to shapes (lists of sizes)")


def _weights_path(directory: Path, card: dict[str, Any]) -> Path:
    """The weight file named by the card, confined to the model's folder."""
    where = directory / CARD_FILE
    meta = card["weights"]
    if not isinstance(meta, dict):
        raise ModelFileError(f"{where}: weights = {short(meta)}; expected a mapping with file, sha256, tensors")
    name = meta.get("file", WEIGHTS_FILE)
    # A card is data someone else may have written: it must not point at files elsewhere.
    if not isinstance(name, str) or not name.isprintable() or Path(name).is_absolute() \
            or ".." in Path(name).parts or any(len(part.encode()) > 255 for part in Path(name).parts):
        raise ModelFileError(f"{where}: weights.file = {short(name)}; expected a relative file name inside "
                             "the model folder (no absolute path, no '..', no control characters)")
    path = directory / name
    if not path.resolve().is_relative_to(directory.resolve()):
        raise ModelFileError(f"{where}: weights.file = {name!r} resolves to {path.resolve()}, outside the model "
                             "folder; expected a file inside it")
    return path


def _read_weights(directory: Path, card: dict[str, Any]) -> dict[str, torch.Tensor]:
    path = _weights_path(directory, card)
    if not path.is_file():
        raise ModelFileError(f"{path}: weight file missing")
    expected = card["weights"].get("sha256")
    if not isinstance(expected, str) or len(expected) != 64:
        raise ModelFileError(f"{directory / CARD_FILE}: weights.sha256 = {short(expected)}; expected the "
                             f"SHA-256 (64 hex digits) of {path.name}, as save_model writes it")
    if _sha256(path) != expected.lower():
        raise ModelFileError(f"{path}: SHA-256 does not match the model card (corrupt or replaced file)")
    try:
        with h5py.File(path, "r") as h5:
            tensors = {k: torch.from_numpy(np.asarray(h5[k])) for k in h5.keys()}
    except (OSError, TypeError, ValueError) as exc:
        raise ModelFileError(f"{path}: not a readable HDF5 file of tensors ({exc})") from None
    for key, t in tensors.items():
        if not (t.is_floating_point() or t.is_complex()):
            continue
        bad = int((~torch.isfinite(t)).sum())
        if bad:  # a NaN weight would evaluate to a meaningless accuracy instead of failing
            raise ModelFileError(f"{path}: tensor {key!r} has {bad} non-finite value(s) (NaN or inf) of "
                                 f"{t.numel()}; expected finite weights")
    return tensors


def load_model(name_or_path: str | Path, *, device: str | torch.device = "cpu") -> nn.Module:
    """Load a trained model from a bundled name (e.g. "digits-deq48") or a directory.

    The returned module is in eval mode, on `device` ("cpu", "cuda", "cuda:N"),
    and has the parsed model card as `model.card`. Nothing is unpickled.
    """
    target = torch_device(device)
    directory = resolve_model_dir(name_or_path)
    card = read_card(directory)
    from aocsim.nn.registry import builder  # torch models: imported here, not at start-up

    build = builder(card["kind"])
    tensors = _read_weights(directory, card)
    declared = {k: list(v) for k, v in card["weights"].get("tensors", {}).items()}
    found = {k: list(v.shape) for k, v in tensors.items()}
    if declared and declared != found:
        diff = [k for k in sorted(set(declared) | set(found)) if declared.get(k) != found.get(k)]
        raise ModelFileError(f"{directory}: model card and weights disagree on {diff} "
                             f"(card {[declared.get(k) for k in diff]}, file {[found.get(k) for k in diff]})")
    dtype = next(iter(tensors.values())).dtype if tensors else torch.float64
    try:
        model = build(card["config"], dtype)
    except (TypeError, ValueError, RuntimeError, MemoryError) as exc:  # incl. sizes too large to allocate
        raise ModelFileError(f"{directory / CARD_FILE}: invalid config ({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})") from None
    expected = {k: list(v.shape) for k, v in model.state_dict().items()}
    if expected != found:
        bad = [k for k in sorted(set(expected) | set(found)) if expected.get(k) != found.get(k)]
        raise ModelFileError(f"{directory}: weights do not fit the card's config at {bad} "
                             f"(config wants {[expected.get(k) for k in bad]}, "
                             f"file has {[found.get(k) for k in bad]})")
    model.load_state_dict(tensors)
    model.to(target)
    model.eval()
    model.card = card
    return model
