"""Model directories: the bundled digits model, round trips, corrupt files."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import h5py
import pytest
import torch
import yaml

from aocsim import DEQ, DEQConfig, load_model
from aocsim.errors import ModelFileError, UnknownNameError
from aocsim.experiments.evaluate import evaluate_model
from aocsim.io.model_files import bundled_models, resolve_model_dir, save_model


def test_bundled_digits_model_meets_its_card() -> None:
    model = load_model("digits-deq48")
    assert model.config.state_size == 48
    directory = resolve_model_dir("digits-deq48")
    assert (directory / "weights.h5").stat().st_size < 1_000_000
    metrics = evaluate_model(model)
    assert metrics["accuracy"] >= 0.95
    assert metrics["converged_fraction"] == 1.0
    # The card's figure is what the exact path gives today.
    assert metrics["accuracy"] == pytest.approx(model.card["metrics"]["test"]["accuracy"], abs=1e-12)
    assert model.contraction_bound() < 1.0


def test_float32_evaluation_agrees_with_float64() -> None:
    m64 = evaluate_model(load_model("digits-deq48"))
    m32 = evaluate_model(load_model("digits-deq48"), dtype=torch.float32, atol=1e-5)
    assert m32["dtype"] == "torch.float32"
    assert abs(m32["accuracy"] - m64["accuracy"]) <= 2 / 450


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    model = DEQ(DEQConfig(6, 4, 3), generator=torch.Generator().manual_seed(0))
    card = {"name": "tiny", "kind": "deq", "task": "digits", "config": model.config.to_dict()}
    return save_model(model, tmp_path / "tiny", card)


def test_round_trip_gives_identical_outputs(model_dir: Path) -> None:
    original = DEQ(DEQConfig(6, 4, 3), generator=torch.Generator().manual_seed(0))
    loaded = load_model(model_dir)
    x = torch.randn(3, 4, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    with torch.no_grad():
        assert torch.equal(original(x).logits, loaded(x).logits)
    assert load_model(model_dir / "card.yaml").card["name"] == "tiny"


def test_save_refuses_to_overwrite(model_dir: Path) -> None:
    before = (model_dir / "weights.h5").read_bytes()
    model = DEQ(DEQConfig(6, 4, 3), generator=torch.Generator().manual_seed(9))
    with pytest.raises(ModelFileError, match="exists; refusing to overwrite"):
        save_model(model, model_dir, {"name": "x", "kind": "deq", "config": model.config.to_dict()})
    assert (model_dir / "weights.h5").read_bytes() == before


def test_unknown_model_name_lists_bundled() -> None:
    assert "digits-deq48" in bundled_models()
    with pytest.raises(UnknownNameError, match="'no-such-model'; known: .*digits-deq48"):
        load_model("no-such-model")


def test_missing_card(model_dir: Path) -> None:
    (model_dir / "card.yaml").unlink()
    with pytest.raises(ModelFileError, match="card.yaml: model card missing"):
        load_model(model_dir)


def test_missing_weights(model_dir: Path) -> None:
    (model_dir / "weights.h5").unlink()
    with pytest.raises(ModelFileError, match="weights.h5: weight file missing"):
        load_model(model_dir)


def test_corrupt_weights_are_detected_by_checksum(model_dir: Path) -> None:
    data = bytearray((model_dir / "weights.h5").read_bytes())
    data[len(data) // 2] ^= 0xFF
    (model_dir / "weights.h5").write_bytes(bytes(data))
    with pytest.raises(ModelFileError, match="SHA-256 does not match"):
        load_model(model_dir)


def _reseal(model_dir: Path) -> None:
    """Write the weight file's current SHA-256 into the card (a consistent but damaged model)."""
    card = yaml.safe_load((model_dir / "card.yaml").read_text())
    card["weights"]["sha256"] = hashlib.sha256((model_dir / "weights.h5").read_bytes()).hexdigest()
    (model_dir / "card.yaml").write_text(yaml.safe_dump(card))


def test_unreadable_hdf5_with_matching_checksum(model_dir: Path) -> None:
    (model_dir / "weights.h5").write_bytes(b"not hdf5 at all")
    _reseal(model_dir)
    with pytest.raises(ModelFileError, match="not a readable HDF5 file"):
        load_model(model_dir)


def test_invalid_yaml_card(model_dir: Path) -> None:
    (model_dir / "card.yaml").write_text("name: [unclosed\n")
    with pytest.raises(ModelFileError, match="card.yaml: not valid YAML"):
        load_model(model_dir)


def test_card_tensor_list_disagreeing_with_weights(model_dir: Path) -> None:
    card = yaml.safe_load((model_dir / "card.yaml").read_text())
    card["weights"]["tensors"]["weight"] = [7, 7]
    (model_dir / "card.yaml").write_text(yaml.safe_dump(card))
    with pytest.raises(ModelFileError, match=r"model card and weights disagree on \['weight'\]"):
        load_model(model_dir)


def test_card_config_disagreeing_with_weights(model_dir: Path, tmp_path: Path) -> None:
    card = yaml.safe_load((model_dir / "card.yaml").read_text())
    card["config"]["state_size"] = 5
    card["config"]["blocks"] = [5]
    card["weights"].pop("tensors")
    (model_dir / "card.yaml").write_text(yaml.safe_dump(card))
    with pytest.raises(ModelFileError, match=r"weights do not fit the card's config at \['inject_bias'"):
        load_model(model_dir)


def test_card_with_bad_config_value(model_dir: Path) -> None:
    card = yaml.safe_load((model_dir / "card.yaml").read_text())
    card["config"]["alpha"] = 3.0
    (model_dir / "card.yaml").write_text(yaml.safe_dump(card))
    with pytest.raises(ModelFileError, match=r"invalid config \(DEQConfig.alpha = 3.0"):
        load_model(model_dir)


def test_card_of_unknown_kind(model_dir: Path) -> None:
    card = yaml.safe_load((model_dir / "card.yaml").read_text())
    card["kind"] = "transformer"
    (model_dir / "card.yaml").write_text(yaml.safe_dump(card))
    with pytest.raises(UnknownNameError, match="unknown model kind 'transformer'; known: deq"):
        load_model(model_dir)


def test_extra_tensor_in_weights(model_dir: Path) -> None:
    with h5py.File(model_dir / "weights.h5", "a") as h5:
        h5.create_dataset("stray", data=[1.0])
    _reseal(model_dir)
    with pytest.raises(ModelFileError, match=r"disagree on \['stray'\]"):
        load_model(model_dir)
    shutil.rmtree(model_dir)


def test_card_without_checksum_is_refused(model_dir: Path) -> None:
    card = yaml.safe_load((model_dir / "card.yaml").read_text())
    del card["weights"]["sha256"]
    (model_dir / "card.yaml").write_text(yaml.safe_dump(card))
    with pytest.raises(ModelFileError, match=r"card.yaml: weights.sha256 = None; expected the SHA-256 \(64 hex "
                                             r"digits\) of weights.h5, as save_model writes it$"):
        load_model(model_dir)


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_weights_are_refused(model_dir: Path, bad: float) -> None:
    with h5py.File(model_dir / "weights.h5", "a") as h5:
        h5["weight"][0, 1] = bad
    _reseal(model_dir)
    with pytest.raises(ModelFileError, match=r"weights.h5: tensor 'weight' has 1 non-finite value\(s\) \(NaN or "
                                             r"inf\) of 36; expected finite weights$"):
        load_model(model_dir)


@pytest.mark.parametrize("where", ["absolute", "dotdot", "symlink", "nul"])
def test_weight_paths_stay_inside_the_model_folder(model_dir: Path, tmp_path: Path, where: str) -> None:
    outside = tmp_path / "elsewhere.h5"
    shutil.copy(model_dir / "weights.h5", outside)
    name = {"absolute": str(outside), "dotdot": "../elsewhere.h5", "symlink": "link.h5", "nul": "w\x00.h5"}[where]
    if where == "symlink":
        (model_dir / "link.h5").symlink_to(outside)
    card = yaml.safe_load((model_dir / "card.yaml").read_text())
    card["weights"]["file"] = name
    (model_dir / "card.yaml").write_text(yaml.safe_dump(card))
    message = "outside the model folder" if where == "symlink" else "expected a relative file name inside"
    with pytest.raises(ModelFileError, match=f"card.yaml: weights.file = .*{message}"):
        load_model(model_dir)


def test_cli_refuses_a_card_without_checksum_and_with_nan_weights(model_dir: Path) -> None:
    # The case of issue 12: this used to print "accuracy 0.0978 ... max residual inf" and exit 0.
    from click.testing import CliRunner

    from aocsim.cli import main

    with h5py.File(model_dir / "weights.h5", "a") as h5:
        h5["inject_weight"][...] = float("nan")
    card = yaml.safe_load((model_dir / "card.yaml").read_text())
    del card["weights"]["sha256"]
    (model_dir / "card.yaml").write_text(yaml.safe_dump(card))
    out = CliRunner().invoke(main, ["evaluate", str(model_dir)])
    assert out.exit_code == 1 and len(out.output.strip().splitlines()) == 1
    assert "weights.sha256 = None" in out.output and "accuracy" not in out.output
    _reseal(model_dir)
    out = CliRunner().invoke(main, ["evaluate", str(model_dir)])
    assert out.exit_code == 1 and "tensor 'inject_weight' has 24 non-finite value(s)" in out.output


def test_error_messages_stay_on_one_line_with_line_breaks_in_names(model_dir: Path, tmp_path: Path) -> None:
    odd = tmp_path / "two\nlines"
    shutil.copytree(model_dir, odd)
    (odd / "weights.h5").unlink()
    with pytest.raises(ModelFileError) as info:
        load_model(odd)
    assert "\n" not in str(info.value) and "two\\nlines" in str(info.value)
    card = yaml.safe_load((model_dir / "card.yaml").read_text())
    card["weights"]["file"] = "w\n.h5"
    (model_dir / "card.yaml").write_text(yaml.safe_dump(card))
    with pytest.raises(ModelFileError, match=r"weights.file = 'w\\n.h5'; expected a relative file name"):
        load_model(model_dir)
