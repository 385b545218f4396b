"""The compiled tile product (`TiledMatrix(..., compile=True)`, aocsim/hardware/engine/tile_pass.py): the eager
body traced and compiled, the same numbers to float rounding, every number an input of the graph.

A graph takes seconds to build, so the tests share a few small graphs (`_product` keeps them per process)."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from _toolchain import NO_TOOLCHAIN
from aocsim import disk_memo
from aocsim.errors import AocsimError
from aocsim.hardware.engine import backends, tile_pass
from aocsim.hardware.engine.machine import Mount
from aocsim.hardware.engine.tiles import TiledMatrix
from aocsim.hardware.profiles.profile import load_device

pytestmark = pytest.mark.skipif(NO_TOOLCHAIN, reason="needs a C++ compiler and Python headers")

# Every noise source of aoc48 on (RIN, detector noise, kT/C on 4 tile columns, droop between waves), its DAC
# and ADC codes; time-multiplexed on 5 modules (reload keys per call), 3 averaged passes, predistorted.
SETTINGS = {
    "analog": dict(mount=Mount(0, 5, True), predistort=True, passes=3, partial_sums="analog"),
    "digital": dict(mount=None, predistort=False, passes=1, partial_sums="digital"),
}
BOUND = {torch.float32: 1e-5, torch.float64: 1e-12}  # node volts: float rounding, far below an ADC code (6e-4 V)


def _matrix(dtype: torch.dtype, setting: str, device: object = "aoc48", chip: int = 3) -> TiledMatrix:
    w = torch.randn(20, 30, generator=torch.Generator().manual_seed(chip), dtype=torch.float64).to(dtype)
    s = SETTINGS[setting]
    return TiledMatrix(device, w, tile_size=8, generator=chip, predistort=s["predistort"], mount=s["mount"])


def _product(tm: TiledMatrix, setting: str, compile: bool, call: int = 2, seed: int = 5):
    t = torch.randn(3, 30, generator=torch.Generator().manual_seed(7), dtype=torch.float64).to(tm.weight.dtype)
    s = SETTINGS[setting]
    return tm(t, partial_sums=s["partial_sums"], generator=seed, call=call, passes=s["passes"], keep_partials=True,
              compile=compile, samples=torch.tensor([4, 0, 9]))


def _assert_same(eager, compiled, dtype: torch.dtype) -> None:
    assert (eager.partials - compiled.partials).abs().max() < BOUND[dtype]
    assert torch.equal(eager.input_scale, compiled.input_scale)
    assert eager.adc_clipped == compiled.adc_clipped
    # y: ADC codes averaged; a rounding can flip a code only where a node sits on a code boundary
    code = float(torch.tensor(load_device("aoc48")["readout.range_v"]).diff()) / 4095
    assert ((eager.y - compiled.y).abs() / eager.input_scale[:, None]).max() <= code * 1.001


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("setting", ["analog", "digital"])
def test_compiled_product_equals_eager_with_every_noise_on(dtype: torch.dtype, setting: str) -> None:
    tm = _matrix(dtype, setting)
    eager, compiled = _product(tm, setting, False), _product(tm, setting, True)
    _assert_same(eager, compiled, dtype)
    assert eager.partials.std() > 0.01  # the product carries signal (not all clipped or zero)
    again = _product(tm, setting, True)  # the same seed: the same bits
    assert torch.equal(again.y, compiled.y) and torch.equal(again.partials, compiled.partials)
    assert not torch.equal(_product(tm, setting, True, seed=6).partials, compiled.partials)  # another seed draws anew


def test_a_cached_graph_gives_another_chip_and_call_their_own_numbers() -> None:
    # Every number is an input: a graph compiled for one chip, seed and call serves another chip (other
    # constants, emitter cubics, an ADC range and DAC grid of its own) and another call (other keys and
    # reload keys) with that chip's and call's numbers. Fails if any of them is baked into the graph.
    first = _matrix(torch.float32, "analog")
    _product(first, "analog", True)
    graphs = len(backends.GRAPHS)
    other = load_device("aoc48", overrides={"variation.chip_seed": 11, "readout.range_v": [-0.9, 1.1],
                                            "injection.dac_bits": 10, "noise.multiplier": 2.0})
    second = _matrix(torch.float32, "analog", other, chip=4)
    for tm, call in ((second, 2), (second, 9), (first, 9)):
        eager, compiled = _product(tm, "analog", False, call), _product(tm, "analog", True, call)
        _assert_same(eager, compiled, torch.float32)
    assert len(backends.GRAPHS) == graphs  # one graph served them all
    assert not torch.equal(_product(second, "analog", True).partials, _product(first, "analog", True).partials)


def _tanh_body(x: torch.Tensor, scale: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return (torch.tanh(x * scale) + 0.25,)


def _read_only(*args: object) -> None:
    raise PermissionError("read-only file system")


@pytest.mark.slow
def test_a_compiled_graph_is_kept_in_the_kernel_store_and_loaded_without_inductor(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    # A graph built once is kept in the kernel store (aocsim/disk_memo.py) and loaded from it by this process
    # and by a new one, without building again and, in the new process, without importing Inductor; a package
    # that cannot be loaded is built again. Fails if the package is not kept, not found under the same key,
    # or loaded through Inductor's Python modules (seconds of imports in every process).
    monkeypatch.setenv(disk_memo.KERNEL_VARIABLE, str(tmp_path / "kernels"))
    monkeypatch.setattr(backends, "GRAPHS", backends.GRAPHS.fresh())
    args = (torch.linspace(-2, 2, 12).view(3, 4), torch.tensor(1.5, dtype=torch.float64))
    key = ("kernel store test", tuple(a.shape for a in args))
    path = disk_memo.kernel_path(backends.GRAPHS.key((key, backends.argument_key(args))))
    path.parent.mkdir(parents=True)
    path.write_bytes(b"not a package")  # left by a failed disk, say: built again and written over
    first = backends.graph(key, _tanh_body, args, "a test graph", "the same")(*args)[0]
    assert torch.allclose(first, torch.tanh(args[0] * 1.5) + 0.25) and path.stat().st_size > 10_000
    backends.GRAPHS.clear()
    monkeypatch.setattr(backends, "_build", None)  # loading must not build,
    monkeypatch.setattr(backends.os, "utime", _read_only)  # even from a store this process cannot write to
    assert torch.equal(backends.graph(key, _tanh_body, args, "a test graph", "the same")(*args)[0], first)
    code = (f"import sys, torch; torch.set_num_threads({torch.get_num_threads()}); "  # (a key's part)
            "from aocsim.hardware.engine import backends; import test_tile_compile as t; backends._build = None; "
            "args = (torch.linspace(-2, 2, 12).view(3, 4), torch.tensor(1.5, dtype=torch.float64)); "
            "out = backends.graph(('kernel store test', tuple(a.shape for a in args)), t._tanh_body, args, 'a', 'b')(*args)[0]; "
            "print(out.tolist(), 'torch._inductor' in sys.modules)")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True,
                          cwd=Path(__file__).parent)
    values, inductor = done.stdout.strip().splitlines()[-1].rsplit(" ", 1)
    assert torch.equal(torch.tensor(ast.literal_eval(values)), first) and inductor == "False"
    assert not [r for r in caplog.records if r.levelname in ("WARNING", "ERROR")]


@pytest.mark.slow
def test_a_graph_is_never_served_for_inputs_of_other_strides(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The key of a compiled graph is derived from its arguments' strides too (issue 39, finding: a tile
    product compiled for a contiguous input and served for a transposed one returned products off by up to
    8.75): a transposed input of the same shape gets its own graph, in this process and from the kernel
    store, and the product it gives is the eager one. Fails with the strides left out of the key."""
    monkeypatch.setenv(disk_memo.KERNEL_VARIABLE, str(tmp_path / "kernels"))
    monkeypatch.setattr(backends, "GRAPHS", backends.GRAPHS.fresh())
    tm = _matrix(torch.float64, "digital")
    t = torch.randn(30, 3, generator=torch.Generator().manual_seed(8), dtype=torch.float64)
    for x in (t.T.contiguous(), t.T):  # the same shape and values; the second one's memory transposed
        assert x.shape == (3, 30)
        got = [tm(x, partial_sums="digital", generator=5, call=1, compile=c).y for c in (False, True)]
        assert (got[0] - got[1]).abs().max() <= 1e-9 * got[0].abs().max()
    assert len(backends.GRAPHS) == 2
    backends.GRAPHS.clear()  # a new process: both read from the store, each for its own strides
    for x in (t.T, t.T.contiguous()):
        eager, compiled = (tm(x, partial_sums="digital", generator=5, call=1, compile=c).y for c in (False, True))
        assert (eager - compiled).abs().max() <= 1e-9 * eager.abs().max()


def test_the_kernel_store_forgets_its_least_recently_used_packages(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(disk_memo, "KERNEL_ENTRIES", 2)
    built = tmp_path / "built.pt2"
    built.write_bytes(b"a package")
    kept = [tmp_path / "kernels" / f"graph-{i}.pt2" for i in range(3)]
    for i, path in enumerate(kept[:2]):
        disk_memo.keep_kernel(built, path)
        os.utime(path, (1000 + i, 1000 + i))
    os.utime(kept[0], (2000, 2000))  # used since: the other one is forgotten first
    disk_memo.keep_kernel(built, kept[2])
    assert [p.exists() for p in kept] == [True, False, True] and kept[2].read_bytes() == b"a package"
    assert not list((tmp_path / "kernels").glob("*.part"))


def test_a_missing_toolchain_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_compiler(*args: object, **kwargs: object) -> None:
        raise RuntimeError("C++ compiler not found")

    monkeypatch.setattr(backends, "_compile", no_compiler)
    monkeypatch.setattr(backends, "GRAPHS", backends.GRAPHS.fresh())
    with pytest.raises(AocsimError, match=r"could not compile the tile product \(RuntimeError: C\+\+ compiler not "
                                          r"found\); .* compile=False runs the same product eagerly"):
        _product(_matrix(torch.float32, "digital"), "digital", True)
    with pytest.raises(Exception, match="compile = 1; expected True or False"):
        _matrix(torch.float32, "digital")(torch.ones(1, 30), compile=1)


@pytest.mark.slow
def test_a_placed_ssm_predicts_the_same_compiled(monkeypatch: pytest.MonkeyPatch) -> None:
    # A short run of a hybrid SSM with its injection and in_proj on tiles of the noisy aoc48: with the tile products
    # compiled, the eager run's results in statistics (tests/_parity.py; the nodes differ by float rounding).
    from aocsim.execute.placement import Placement
    from aocsim.execute.registry import place
    from aocsim.experiments.workloads import default_workload
    from aocsim.io.model_files import load_model

    from aocsim.hardware.engine import tile_product

    compiled_calls, eager_rows = [], set()
    monkeypatch.setattr(tile_product, "run", lambda plan, x, compile: compiled_calls.append(compile) or
                        (None if compile else eager_rows.add(x["t"].shape[0])) or tile_pass.run(plan, x, compile))
    from aocsim.execute.compiled_mix import CompiledMixBlock

    mixed = []  # the blocks' token middles run compiled (aocsim/execute/compiled_mix.py)
    monkeypatch.setattr(CompiledMixBlock, "mix", lambda self, p, cache, run=CompiledMixBlock.mix:
                        mixed.append(p.shape[0]) or run(self, p, cache))
    model = load_model("parity-implicit")
    w = default_workload(model, sequences=4, length_factor=1)
    runs = {}
    for flag in (False, True):
        placed = place(model, "aoc48", Placement(on_tiles=("inject", "in_proj"), compile=flag), calibration=w.calibration)
        compiled_calls.clear()
        eager_rows.clear()
        runs[flag] = placed.run(w.inputs[:, :7], seed=1)
    first = list(compiled_calls)
    compiled_calls.clear()
    again = placed.run(w.inputs[:, :7], seed=1)  # a second run: the same calls compiled, the same bits
    assert compiled_calls == first and torch.equal(again.outputs, runs[True].outputs)
    assert 10 < sum(first) < len(first)  # a token's passes ran compiled, the calibration passes eagerly
    assert 4 * 7 in eager_rows  # and the injection's pass over every position eagerly (one call)
    assert len(mixed) > 10 and set(mixed) == {4}  # the digital middle compiled, for the whole batch
    from _parity import assert_agree

    assert_agree(runs[False].outputs.argmax(-1), runs[True].outputs.argmax(-1), "predictions")
    same = assert_agree(runs[False].solve.iterations, runs[True].solve.iterations, "iterations")
    assert (runs[False].outputs - runs[True].outputs)[same].abs().max() < 1e-3


@pytest.mark.slow
def test_only_digital_middles_are_compiled() -> None:
    """The blocks' token middle runs compiled with `compile` and digital elementwise functions; analog ones
    (keyed per pass, aocsim/execute/elementwise.py) keep it eager, as does a plain placement."""
    from aocsim.execute.compiled_mix import CompiledMixBlock
    from aocsim.execute.placement import HYBRID, Placement
    from aocsim.execute.ssm_device import calibration_inputs, place_ssm
    from aocsim.experiments.workloads import default_workload
    from aocsim.io.model_files import load_model

    model = load_model("parity-implicit")
    cal = calibration_inputs(model, default_workload(model, sequences=2, length_factor=1).calibration)
    device = load_device("aoc48")
    for options, compiled in (({"compile": True}, True), ({"compile": True, "elementwise": "analog"}, False),
                              ({}, False)):
        placed = place_ssm(model, device, cal, Placement(**options).resolved(HYBRID), generator=0)
        assert all(isinstance(b, CompiledMixBlock) == compiled for b in placed.model.blocks), options


@pytest.mark.slow
def test_a_compiled_middle_is_served_only_for_its_own_weights() -> None:
    """The compiled middle's graph bakes in the block's weights: two copies that differ in one weight `mix`
    reads get two graphs (their keys differ), each equal to its own eager middle; an identical copy shares
    the first's key."""
    import copy

    from aocsim.execute.compiled_mix import install_compiled_mix
    from aocsim.nn.implicit_ssm import ImplicitSSM, SSMConfig
    from aocsim.nn.ssm_blocks import Mamba2Block

    model = ImplicitSSM(SSMConfig(vocab_size=5, d_model=16, n_layers=1, d_state=8, head_dim=8),
                        generator=torch.Generator().manual_seed(0)).double().eval()
    twin, other = copy.deepcopy(model), copy.deepcopy(model)
    with torch.no_grad():
        other.blocks[0].out_norm.weight.mul_(1.5)
    copies = (model, twin, other)
    eager = [copy.deepcopy(m) for m in copies]
    for m in copies:
        install_compiled_mix(m)
    keys = [m.blocks[0].mix_key for m in copies]
    assert keys[0] == keys[1] != keys[2]
    p = torch.randn(3, model.config.d_in_proj, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    with torch.no_grad():
        for m, e in zip(copies, eager):
            cache = e.blocks[0].init_cache(3, p)
            got, want = m.blocks[0].mix(p, cache)[0], Mamba2Block.mix(e.blocks[0], p, cache)[0]
            torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-12)
    assert not torch.allclose(copies[0].blocks[0].mix(p, cache)[0], copies[2].blocks[0].mix(p, cache)[0])
