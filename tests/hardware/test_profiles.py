"""Device profiles: bundled files, twin import, overrides, round trips, bad input, fuzzing."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import torch

from aocsim import OpticalLoop, load_device
from aocsim.errors import InputError, ProfileError, UnknownNameError
from aocsim.hardware.profiles.profile import available_devices, profile_from_dict
from aocsim.hardware.profiles.schema import FIELDS, markdown
from aocsim.hardware.profiles.twin_import import twin_profile
from aocsim.paths import devices_dir

DATA = Path(__file__).parents[1] / "data"
BUNDLED = ["aoc-projected", "aoc16", "aoc16-twin", "aoc48", "aoc48-twin", "ideal"]


def _same_values(a, b, skip=("name", "description", "provenance.source", "provenance.date")) -> None:
    assert set(a.values) == set(b.values)
    for key in a.values:
        if key in skip:
            continue
        va, vb = a.values[key], b.values[key]
        if isinstance(va, np.ndarray):
            np.testing.assert_array_equal(va, vb, err_msg=key)
        else:
            assert va == vb, key


def test_bundled_profiles() -> None:
    assert available_devices() == BUNDLED
    for name in BUNDLED:
        dev = load_device(name)
        assert dev.name == name
        assert dev["provenance.licence"]


@pytest.mark.parametrize(("name", "cal_file", "date"), [("aoc48-twin", "aoc48-2025-04.yaml", "2025-04"),
                                                          ("aoc16-twin", "aoc16-2024-06.yaml", "2024-06")])
def test_twin_profiles_carry_the_calibration_files_verbatim(name: str, cal_file: str, date: str) -> None:
    cal = yaml.safe_load((DATA / "calibration" / cal_file).read_text())
    imported = profile_from_dict(twin_profile(cal, name=name, description="x", date=date))
    _same_values(imported, load_device(name))


def test_noisy_profiles_are_twin_plus_overrides() -> None:
    twin, noisy = load_device("aoc48-twin"), load_device("aoc48")
    assert noisy["slm.bits"] == 9 and twin["slm.bits"] is None
    np.testing.assert_array_equal(noisy["slm.distortion_pos"], twin["slm.distortion_pos"])
    assert not twin["crosstalk.pbs.enabled"] and not noisy["crosstalk.pbs.enabled"]


def test_overrides_apply_and_leave_the_original_alone() -> None:
    base = load_device("aoc48")
    dev = load_device("aoc48", overrides={"slm.bits": 6, "crosstalk.pbs.enabled": True})
    assert dev["slm.bits"] == 6 and dev["crosstalk.pbs.enabled"] is True
    assert base["slm.bits"] == 9 and dev.overrides == {"slm.bits": 6, "crosstalk.pbs.enabled": True}
    with pytest.raises(TypeError):
        dev.values["slm.bits"] = 3  # read-only


@pytest.mark.parametrize("name", BUNDLED)
def test_round_trip_profile_file_object_file(name: str, tmp_path: Path) -> None:
    dev = load_device(name)
    path = tmp_path / "copy.yaml"
    path.write_text(yaml.safe_dump(dev.to_dict()))
    _same_values(load_device(path), dev, skip=())
    _same_values(profile_from_dict(json.loads(dev.to_json())), dev, skip=())


def test_exponent_floats_without_a_dot_are_numbers(tmp_path: Path) -> None:
    text = yaml.safe_dump(load_device("ideal").to_dict()).replace("bandwidth_hz: 50000000.0", "bandwidth_hz: 5e7")
    assert "5e7" in text
    path = tmp_path / "p.yaml"
    path.write_text(text)
    assert load_device(path)["noise.bandwidth_hz"] == 5e7


def test_schema_document_is_current() -> None:
    doc = devices_dir() / "SCHEMA.md"
    if not doc.is_file():
        pytest.skip("installed without the schema document")
    assert doc.read_text() == markdown(), "run: aocsim devices schema > devices/SCHEMA.md"


def _write(tmp_path: Path, tree: dict) -> Path:
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(tree))
    return path


def _twin_tree() -> dict:
    return load_device("aoc48-twin").to_dict()


def test_unknown_key_in_file_names_file_and_key(tmp_path: Path) -> None:
    tree = _twin_tree()
    tree["slm"]["bitz"] = 8
    path = _write(tmp_path, tree)
    with pytest.raises(ProfileError, match=rf"{path}: unknown key 'slm.bitz' \(did you mean 'slm.bits'\?\)"):
        load_device(path)


def test_per_channel_array_of_wrong_length(tmp_path: Path) -> None:
    tree = _twin_tree()
    tree["emitter"]["fan_in_pos"] = [1.0] * 47
    path = _write(tmp_path, tree)
    with pytest.raises(ProfileError, match=r"emitter.fan_in_pos has shape \[47\]; expected \[48\]"):
        load_device(path)


def test_negative_bandwidth(tmp_path: Path) -> None:
    tree = _twin_tree()
    tree["loop"]["bandwidth_hz"] = -5.0e6
    with pytest.raises(ProfileError, match=r"loop.bandwidth_hz = -5000000.0; expected values > 0"):
        load_device(_write(tmp_path, tree))


def test_non_numeric_value(tmp_path: Path) -> None:
    tree = _twin_tree()
    tree["noise"]["thermal"]["temperature_k"] = "warm"
    with pytest.raises(ProfileError, match=r"noise.thermal.temperature_k = 'warm'; expected a finite number"):
        load_device(_write(tmp_path, tree))
    with pytest.raises(ProfileError, match=r"emitter.poly_pos = \['a', 'b'\]; expected numbers of shape \[4\]"):
        load_device("aoc48", {"emitter.poly_pos": ["a", "b"]})


@pytest.mark.parametrize(("overrides", "message"), [
    ({"slm.bitz": 3}, "unknown key 'slm.bitz'"),
    ({"slm.bits": 1}, r"slm.bits = 1; expected values >= 2"),
    ({"slm.bits": 8.5}, r"slm.bits = 8.5; expected a finite integer"),
    ({"crosstalk.pbs.enabled": "yes"}, r"crosstalk.pbs.enabled = 'yes'; expected true or false"),
    ({"crosstalk.order": "pd_first"}, r"expected one of \['tia_pbs_pd', 'tia_pd_pbs'\]"),
    ({"noise.rin.rin_db_per_hz": 3.0}, r"expected values <= 0"),
    ({"injection.clip": [1.0, -1.0]}, r"injection.clip = \[1.0, -1.0\]; expected \[low, high\] with low < high"),
    ({"slm.bits": None, "nonlinearity.coeffs": None}, r"nonlinearity.coeffs = None; expected 5 or 6"),
    ({"crosstalk.pbs.model": "mirrored_poly", "crosstalk.pbs.enabled": True}, r"crosstalk.pbs.poly_pos"),
    ({"noise.bandwidth_hz": float("nan")}, r"expected a finite number"),
])
def test_bad_overrides_name_key_value_and_expectation(overrides: dict, message: str) -> None:
    with pytest.raises(ProfileError, match=message):
        load_device("aoc48", overrides)


def test_missing_and_unknown_profiles(tmp_path: Path) -> None:
    with pytest.raises(UnknownNameError, match="unknown device profile 'aoc99'; known: aoc-projected, aoc16, aoc16-twin"):
        load_device("aoc99")
    with pytest.raises(ProfileError, match="profile file not found"):
        load_device(tmp_path / "nothing.yaml")
    (tmp_path / "broken.yaml").write_text("name: [unclosed\n")
    with pytest.raises(ProfileError, match="not valid YAML"):
        load_device(tmp_path / "broken.yaml")
    tree = _twin_tree()
    del tree["readout"]["samples"]
    with pytest.raises(ProfileError, match="missing key 'readout.samples'"):
        load_device(_write(tmp_path, tree))


def test_variants_and_their_errors(tmp_path: Path) -> None:
    variant = tmp_path / "mine.yaml"
    variant.write_text(yaml.safe_dump({"name": "mine", "base": "aoc48", "overrides": {"slm.bits": 7}}))
    assert load_device(variant)["slm.bits"] == 7
    variant.write_text(yaml.safe_dump({"name": "mine", "base": "aoc48", "channels": 12}))
    with pytest.raises(ProfileError, match="unknown key 'channels' in a variant"):
        load_device(variant)
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    a.write_text(yaml.safe_dump({"name": "a", "base": str(b)}))
    b.write_text(yaml.safe_dump({"name": "b", "base": str(a)}))
    with pytest.raises(ProfileError, match="cycle"):
        load_device(a)


# -- fuzzing: nothing but ProfileError may escape the loader ---------------------------------

_values = st.one_of(
    st.none(), st.booleans(), st.integers(-10**6, 10**6), st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8), st.lists(st.floats(-1e3, 1e3), max_size=60),
    st.lists(st.lists(st.floats(-5, 5), min_size=3, max_size=3), max_size=50), st.dictionaries(st.text(max_size=4),
                                                                                             st.integers(), max_size=2),
)
_keys = st.sampled_from([f.key for f in FIELDS] + ["slm", "noise.shot", "bogus.key", ""])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(edits=st.lists(st.tuples(_keys, _values), min_size=1, max_size=4))
def test_fuzzed_overrides_raise_only_profile_errors(edits: list) -> None:
    try:
        dev = load_device("aoc48", dict(edits))
    except ProfileError:
        return
    # A profile that validates must also run: a loop builds and steps without crashing.
    n = dev.channels or 8
    w = torch.linspace(-1, 1, n * n, dtype=torch.float64).reshape(n, n)
    try:
        loop = OpticalLoop(dev, w, alpha=0.5, beta=18.6, generator=torch.Generator().manual_seed(0))
        loop.step(torch.zeros(2, n, dtype=torch.float64), torch.zeros(2, n, dtype=torch.float64),
                  generator=torch.Generator().manual_seed(1))
    except InputError:
        pass


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(text=st.one_of(st.text(max_size=200), st.binary(max_size=200).map(lambda b: b.decode("latin-1"))))
def test_fuzzed_profile_files_raise_only_profile_errors(text: str, tmp_path: Path) -> None:
    path = tmp_path / "fuzz.yaml"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    try:
        load_device(path)
    except ProfileError:
        pass


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_fuzzed_profile_trees_raise_only_profile_errors(data: st.DataObject) -> None:
    flat = {k: v.tolist() if isinstance(v, np.ndarray) else v for k, v in load_device("aoc16").values.items()}
    for _ in range(data.draw(st.integers(1, 3))):
        action = data.draw(st.sampled_from(["set", "delete", "add"]))
        key = data.draw(st.sampled_from(sorted(flat)))
        if action == "delete":
            flat.pop(key, None)
        elif action == "add":
            flat[data.draw(st.text(min_size=1, max_size=10))] = data.draw(_values)
        else:
            flat[key] = data.draw(_values)
    try:
        profile_from_dict(flat)
    except ProfileError:
        pass


def test_a_pickled_profile_comes_back_equal_and_read_only() -> None:
    import pickle

    profile = load_device("aoc48", overrides={"slm.bits": 6})
    back = pickle.loads(pickle.dumps(profile))  # how worker processes receive profiles
    assert (back.name, back.origin, dict(back.overrides)) == (profile.name, profile.origin, {"slm.bits": 6})
    assert list(back.values) == list(profile.values)
    for key, value in profile.values.items():
        assert np.array_equal(back[key], value) if isinstance(value, np.ndarray) else back[key] == value, key
    array = next(v for v in back.values.values() if isinstance(v, np.ndarray))
    with pytest.raises(ValueError):
        array[...] = 0.0  # still read-only
    with pytest.raises(TypeError):
        back.values["slm.bits"] = 9  # type: ignore[index]


def test_a_profile_file_changed_on_disk_is_read_anew(tmp_path: Path) -> None:
    """Files are parsed once per process while unchanged (a compare loads its profile per part); an edit,
    even one of the same size within the file system's clock tick, is seen at the next load, and a
    loaded profile's values are its own (the parse is copied)."""
    variant = tmp_path / "mine.yaml"
    for bits in (7, 5, 7):  # the same size each time, written within microseconds
        variant.write_text(yaml.safe_dump({"name": "mine", "base": "aoc48", "overrides": {"slm.bits": bits}}))
        assert load_device(variant)["slm.bits"] == bits
    variant.write_text(yaml.safe_dump({"name": "mine", "base": "aoc48",
                                       "overrides": {"slm.bits": 5, "readout.adc_bits": 9}}))
    again = load_device(variant)
    assert again["slm.bits"] == 5 and again["readout.adc_bits"] == 9
    assert load_device(variant).to_dict() == again.to_dict()
