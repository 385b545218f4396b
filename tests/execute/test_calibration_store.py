"""The calibration store (`aocsim.disk_memo`): a chip placed once on a computer is read back by later
processes, bit for bit, and only by code and settings that would compute the same result."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
import xarray as xr

from aocsim import compare, disk_memo
from aocsim.execute import map_fit
from aocsim.tasks.groups import group, word_problems

TOKENS, TARGETS = word_problems(group("parity"), 2, 16, identity_prob=0.5, generator=8)


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty store (tests run with the store off, tests/conftest.py) and an empty memory of fits."""
    monkeypatch.setenv(disk_memo.STORE_VARIABLE, str(tmp_path))
    monkeypatch.setattr(map_fit, "FITS", map_fit.FITS.fresh())
    return tmp_path / "calibration"


def test_the_store_is_where_the_environment_says_and_a_sweeps_folder_comes_first(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(disk_memo.STORE_VARIABLE)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert disk_memo.current_folder() == tmp_path / "xdg" / "aocsim" / "calibration"
    monkeypatch.setenv(disk_memo.STORE_VARIABLE, str(tmp_path / "mine"))
    assert disk_memo.current_folder() == tmp_path / "mine" / "calibration"
    with disk_memo.use(tmp_path / "sweep" / "fits"):
        assert disk_memo.current_folder() == tmp_path / "sweep" / "fits"
        with disk_memo.use(None):
            assert disk_memo.current_folder() is None
    assert disk_memo.current_folder() == tmp_path / "mine" / "calibration"
    monkeypatch.setenv(disk_memo.STORE_VARIABLE, " OFF ")
    assert disk_memo.current_folder() is None


@pytest.mark.slow
def test_spawned_workers_fill_the_store_and_a_later_run_reads_it_without_fitting(
        store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two chips placed on two processes (one spawned) write their programs; a run that has neither
    in memory reads both (a fit now fails the test) and gives the Dataset a run that fits them gives.
    Against the two-process run, the same statistics only: each process runs its chip as its own
    batch, and a product's last bits may follow the batch's rows (docs/DEVICE_RUNS.md)."""
    spread = compare("parity-implicit", "aoc48", TOKENS, TARGETS, seeds=(0,), chips=(0, 1), workers=2)
    assert len(list(store.glob("fits-*.h5"))) == 2
    map_fit.FITS.clear()
    monkeypatch.setattr(map_fit, "_fit_maps", lambda *a, **k: pytest.fail("fitted again"))
    read = compare("parity-implicit", "aoc48", TOKENS, TARGETS, seeds=(0,), chips=(0, 1))
    monkeypatch.setenv(disk_memo.STORE_VARIABLE, "off")
    map_fit.FITS.clear()
    with pytest.raises(pytest.fail.Exception, match="fitted again"):  # the store off: nothing read
        compare("parity-implicit", "aoc48", TOKENS, TARGETS, seeds=(0,), chips=(0,))
    monkeypatch.undo()  # the store off, fitted here: the same Dataset again
    monkeypatch.setenv(disk_memo.STORE_VARIABLE, "off")
    map_fit.FITS.clear()
    alone = compare("parity-implicit", "aoc48", TOKENS, TARGETS, seeds=(0,), chips=(0, 1))
    xr.testing.assert_identical(read.drop_attrs(), alone.drop_attrs())
    assert bool((spread["prediction"] == alone["prediction"]).all())
    xr.testing.assert_allclose(spread.drop_attrs(), alone.drop_attrs(), rtol=1e-5, atol=1e-6)  # float32 rounding


def test_an_entry_is_read_only_by_the_same_code_torch_cpu_and_thread_count(store: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    record = [{"values": torch.arange(6.0).view(2, 3), "scale": 0.5, "pair": (1, 2)}]
    disk_memo.save("fits", ("a key",), record)
    (read,) = disk_memo.load("fits", ("a key",))
    assert torch.equal(read["values"], record[0]["values"]) and (read["scale"], read["pair"]) == (0.5, (1, 2))
    assert disk_memo.load("fits", ("another key",)) is None
    threads = torch.get_num_threads()
    torch.set_num_threads(threads + 1)  # a reduction's rounding follows the thread count
    try:
        assert disk_memo.load("fits", ("a key",)) is None
    finally:
        torch.set_num_threads(threads)
    monkeypatch.setattr(torch, "__version__", "another torch")
    assert disk_memo.load("fits", ("a key",)) is None
    monkeypatch.undo()
    monkeypatch.setenv(disk_memo.STORE_VARIABLE, str(store.parent))
    assert disk_memo.load("fits", ("a key",)) is not None
    cpu = disk_memo.cpu_model()  # MKL picks its kernels by the CPU (least squares, exp2, log2)
    monkeypatch.setattr(disk_memo, "cpu_model", lambda: "AuthenticAMD / another model / 25 / 17 / 1 / flags")
    assert disk_memo.load("fits", ("a key",)) is None
    monkeypatch.setattr(disk_memo, "cpu_model", lambda: cpu)
    assert disk_memo.load("fits", ("a key",)) is not None
    real = disk_memo.code_digest()
    monkeypatch.setattr(disk_memo, "code_digest", lambda: "other code")
    assert disk_memo.load("fits", ("a key",)) is None
    monkeypatch.setattr(disk_memo, "code_digest", lambda: real)
    assert disk_memo.load("fits", ("a key",)) is not None


def test_a_cpu_is_named_by_its_model_and_flags_not_its_clock() -> None:
    """The stores' CPU (disk_memo.cpu_identity): two generations a hypervisor names alike differ by their flags;
    the same CPU at another clock, or another core of it, is the same; an Arm CPU is named by its part and
    features. Fails with the flags left out of the digest."""
    x86 = ("processor\t: {core}\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 143\n"
           "model name\t: Intel(R) Xeon(R) Processor\ncpu MHz\t\t: {mhz}\ncache size\t: 4096 KB\n"
           "flags\t\t: fpu sse2 avx2 {extra}\nbogomips\t: {mhz}\n\nprocessor\t: 1\nflags\t\t: other\n")
    one = disk_memo.cpu_identity(x86.format(core=0, mhz=2100.0, extra="avx512f"))
    assert one.startswith("GenuineIntel / Intel(R) Xeon(R) Processor / ")
    assert disk_memo.cpu_identity(x86.format(core=3, mhz=3400.5, extra="avx512f")) == one
    assert disk_memo.cpu_identity(x86.format(core=0, mhz=2100.0, extra="avx512f amx_tile")) != one
    arm = "processor\t: 0\nBogoMIPS\t: 50.00\nFeatures\t: fp asimd {f}\nCPU implementer\t: 0x41\nCPU part\t: 0xd0c\n"
    assert disk_memo.cpu_identity(arm.format(f="sve")).startswith("0x41 / 0xd0c / ")
    assert disk_memo.cpu_identity(arm.format(f="sve")) != disk_memo.cpu_identity(arm.format(f="sve2"))
    assert disk_memo.cpu_identity("") == ""


def test_the_code_digest_follows_every_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package = Path(disk_memo.__file__).parent
    digests = []
    for text in ("x = 1\n", "x = 2\n"):
        copy = tmp_path / text[4]
        for module in package.rglob("*.py"):
            target = copy / module.relative_to(package)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(module.read_bytes())
        (copy / "execute" / "tile_program.py").write_text(text)  # a change deep in the package
        monkeypatch.setattr(disk_memo, "__file__", str(copy / "disk_memo.py"))
        disk_memo.code_digest.cache_clear()
        digests.append(disk_memo.code_digest())
    disk_memo.code_digest.cache_clear()
    assert digests[0] != digests[1]


def test_the_store_forgets_its_least_recently_used_entries(store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(disk_memo, "STORE_ENTRIES", 3)

    def entry(i: int) -> Path:
        return disk_memo._path("emitters", disk_memo._digest((i,)))

    for i in range(3):
        disk_memo.save("emitters", (i,), [{"v": torch.full((2,), float(i))}])
        os.utime(entry(i), (1000 + i, 1000 + i))  # entries 0, 1, 2 used in that order, long ago
    (read,) = disk_memo.load("emitters", (0,))  # used now: the newest
    assert torch.equal(read["v"], torch.zeros(2))
    disk_memo.save("emitters", (3,), [{"v": torch.zeros(2)}])
    assert [entry(i).exists() for i in range(4)] == [True, False, True, True]
    with disk_memo.use(store):  # a sweep's folder keeps everything
        disk_memo.save("emitters", (4,), [{"v": torch.zeros(2)}])
    assert len(list(store.glob("*.h5"))) == 4


@pytest.mark.slow
def test_the_compare_bench_times_a_later_process_on_a_store_of_its_own(store: Path) -> None:
    """`aocsim bench compare`: the first compare places the chip, a new process reads it back; neither
    reads nor writes the user's store, whose setting is as it was afterwards."""
    from aocsim.experiments.bench import bench_compare, format_compare_bench

    before = os.environ[disk_memo.STORE_VARIABLE]
    rows = bench_compare((("parity", "parity-implicit", None),), sequences=4, length_factor=1)
    assert [(r.case, r.new_process, r.calibrated) for r in rows] == [("parity", False, False),
                                                                     ("parity, chip calibrated", True, True)]
    assert all(r.tokens == 4 * 16 and r.device_s > 0 and r.exact_s > 0 for r in rows)
    assert rows[0].placed > 0 and rows[1].placed == 0  # the first compare placed the chip, the second read it
    assert not store.exists() and os.environ[disk_memo.STORE_VARIABLE] == before
    assert format_compare_bench(rows).splitlines()[2].endswith("(a new process; the chip's calibration read "
                                                               "from the store)")


def test_fits_read_from_the_store_count_against_the_memorys_size(store: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from aocsim import load_model
    from aocsim.execute.registry import resolve, resolve_profile
    from aocsim.execute.ssm_device import calibration_inputs, fit_programs

    model = load_model("parity-implicit")
    calibration = calibration_inputs(model, TOKENS)
    chips = [resolve_profile("aoc48", chip) for chip in (0, 1, 2)]
    for profile in chips:
        fit_programs(model, profile, calibration, resolve(model, profile, {"fit_probes": 128}).placement)
    map_fit.FITS.clear()
    monkeypatch.setattr(map_fit.FITS, "size", 2)
    monkeypatch.setattr(map_fit, "_fit_maps", lambda *a, **k: pytest.fail("fitted again"))
    for profile in chips:
        fit_programs(model, profile, calibration, resolve(model, profile, {"fit_probes": 128}).placement)
    assert len(map_fit.FITS) == 2


def test_a_write_that_fails_leaves_no_part_behind(store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import h5py

    def broken(self, name, data=None, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(h5py.Group, "create_dataset", broken)
    disk_memo.save("fits", ("a key",), [{"values": torch.zeros(3)}])
    assert store.is_dir() and list(store.iterdir()) == []
    assert disk_memo.load("fits", ("a key",)) is None
