"""Sweeps on SLURM jobs through dask-jobqueue (aocsim/experiments/sweep/cluster.py), with a local
stand-in for SLURM: fake sbatch, squeue and scancel on PATH that run each job script as a local
process group on loopback. The same Dataset as a local run, for a grid and a search; a job killed
mid-point loses no finished point (its point runs again on a job submitted in its place); one-line
errors; no process left."""

from __future__ import annotations

import os
import re
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Iterator

import dask
import distributed
import pytest
import xarray as xr
import yaml
from click.testing import CliRunner

from aocsim.cli import main
from aocsim.errors import AocsimError
from aocsim.experiments.sweep import parse_spec, status, sweep
from aocsim.experiments.sweep.cluster import sweep_on_slurm

pytest.importorskip("dask_jobqueue")  # the test extra has it; aocsim[cluster] does too

# (an axis outside tile_product.PER_LOAD: each point its own call, so that a job can be killed between points)
SPEC = {"model": "digits-deq48", "device": "aoc48", "data": {"samples": 30},
        "axes": {"injection.dac_bits": [12, 10, 8]}, "seeds": 1, "chips": 1,
        "metrics": ["accuracy", "agreement", "iterations", "energy_per_inference_j"]}
# The user's jobqueue config, as ~/.config/dask/jobqueue.yaml would give it: everything on loopback.
LOOPBACK = {"jobqueue.slurm.cores": 1, "jobqueue.slurm.memory": "4GB",
            "jobqueue.slurm.scheduler-options": {"host": "127.0.0.1", "dashboard_address": "127.0.0.1:0"},
            "jobqueue.slurm.worker-extra-args": ["--host", "127.0.0.1", "--dashboard-address", "127.0.0.1:0",
                                                 "--no-dashboard"]}

# The stand-in: job N's script, log and process group id (STATE/N.sh, N.log, N.id).
COMMON = '''
import os, signal, subprocess, sys, shutil, time
STATE = {state!r}

def members(pgid):
    """Live (not zombie) processes of the group."""
    out = []
    for entry in os.listdir("/proc"):
        try:
            fields = open(f"/proc/{{entry}}/stat").read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[2] == str(pgid) and fields[0] != "Z":
            out.append(int(entry))
    return out

def jobs():
    out = {{}}
    for name in os.listdir(STATE):
        if name.endswith(".id") and open(os.path.join(STATE, name)).read():
            out[name[:-3]] = int(open(os.path.join(STATE, name)).read())
    return out
'''
SBATCH = '''
if os.path.exists(os.path.join(STATE, "refuse")):
    sys.exit("sbatch: error: invalid partition specified: nope")
n = 1
while True:
    try:
        fd = os.open(os.path.join(STATE, f"{n}.id"), os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        break
    except FileExistsError:
        n += 1
script = os.path.join(STATE, f"{n}.sh")
shutil.copy(sys.argv[-1], script)  # dask-jobqueue removes its file once sbatch returns
with open(os.path.join(STATE, f"{n}.log"), "wb") as log:
    job = subprocess.Popen(["bash", script], stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                           start_new_session=True, env={**os.environ, "SLURM_JOB_ID": str(n)})
os.write(fd, str(job.pid).encode())
os.close(fd)
print(f"Submitted batch job {n}")
'''
SQUEUE = '''
for n, pgid in sorted(jobs().items()):
    if members(pgid):
        print(n)
'''
SCANCEL = '''
for n in sys.argv[1:]:
    pgid = jobs().get(n)
    if pgid is None:
        continue
    for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):  # as SLURM: TERM, then KILL
        for pid in members(pgid):
            os.kill(pid, sig)
        deadline = time.monotonic() + wait
        while members(pgid) and time.monotonic() < deadline:
            time.sleep(0.05)
'''


def _fake(state: Path) -> dict:
    """The stand-in's helpers, run here."""
    scope: dict = {}
    exec(COMMON.format(state=str(state)), scope)
    return scope


@pytest.fixture
def slurm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Fake sbatch, squeue and scancel first on PATH, the loopback jobqueue config; afterwards no job's
    process is left (each found is killed, and the test fails)."""
    if not Path("/proc/self/stat").is_file():
        pytest.skip("the SLURM stand-in finds a job's processes in /proc (Linux)")
    state = tmp_path / "slurm"
    (state / "bin").mkdir(parents=True)
    for name, body in (("sbatch", SBATCH), ("squeue", SQUEUE), ("scancel", SCANCEL)):
        path = state / "bin" / name
        path.write_text(f"#!{sys.executable}\n" + COMMON.format(state=str(state)) + body)
        path.chmod(0o755)
    monkeypatch.setenv("PATH", f"{state / 'bin'}{os.pathsep}{os.environ['PATH']}")
    with dask.config.set(LOOPBACK):
        yield state
    fake = _fake(state)
    left = {n: fake["members"](pgid) for n, pgid in fake["jobs"]().items()}
    for pid in (p for pids in left.values() for p in pids):
        os.kill(pid, signal.SIGKILL)
    assert not any(left.values()), f"job processes left running: {left}"


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory) -> xr.Dataset:
    """SPEC on one local worker."""
    return sweep(parse_spec(SPEC), tmp_path_factory.mktemp("local") / "sweep", workers=1)


def _spec_file(tmp_path: Path) -> Path:
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(SPEC, sort_keys=False))
    return path


@pytest.mark.slow
def test_a_sweep_on_slurm_jobs_gives_the_local_dataset(local: xr.Dataset, slurm: Path, tmp_path: Path) -> None:
    out = tmp_path / "on-slurm"
    result = CliRunner().invoke(main, ["--threads", "1", "sweep", str(_spec_file(tmp_path)), "--out", str(out),
                                       "--slurm", "2"])
    assert result.exit_code == 0, result.output
    assert "(2 SLURM jobs)" in result.output
    with xr.open_dataset(out / "results.nc", engine="h5netcdf") as ds:
        xr.testing.assert_identical(local, ds.load())
    assert sorted(_fake(slurm)["jobs"]()) == ["1", "2"]  # two jobs, none submitted again
    script = (slurm / "1.sh").read_text()  # one worker process per core, one thread each
    assert "export OMP_NUM_THREADS=1" in script and "--nthreads 1" in script and "--nworkers" not in script
    again = CliRunner().invoke(main, ["--threads", "1", "sweep", str(_spec_file(tmp_path)), "--out", str(out),
                                      "--slurm", "2", "--resume"])
    assert again.exit_code == 0, again.output
    assert sorted(_fake(slurm)["jobs"]()) == ["1", "2"]  # nothing left to run: no job submitted


@pytest.mark.slow
def test_a_search_on_slurm_jobs_asks_and_runs_the_local_trials(slurm: Path, tmp_path: Path) -> None:
    search = {"model": "digits-deq48", "device": "aoc48", "data": {"samples": 30}, "seeds": 1, "chips": 1,
              "search": {"objectives": {"agreement": "max", "energy_j": "min"}, "budget": 2, "batch": 2,
                         "sampler": "random", "seed": 3},
              "space": {"slm.bits": {"int": [2, 6]}}, "metrics": ["agreement", "energy_j"]}
    local = sweep(parse_spec(search), tmp_path / "local", workers=1)
    xr.testing.assert_identical(local, sweep_on_slurm(parse_spec(search), tmp_path / "on-slurm", 2))


def _kill_after_the_first_point(slurm: Path, out: Path) -> tuple[dict, dict, list[str]]:
    """sweep_on_slurm(SPEC) on one job, SIGKILLed (its whole process group) once a point is written:
    what the sweep returned or raised, the point files at the kill (content and mtime), and the tasks
    the scheduler had given the job then."""
    done: dict = {}

    def run() -> None:
        try:
            done["ds"] = sweep_on_slurm(parse_spec(SPEC), out, 1, watch_s=1.0)
        except BaseException as exc:  # reported by the tests
            done["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 90
    while not list((out / "points").glob("*.nc")) and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    scheduler = re.search(r"dask_worker (\S+)", (slurm / "1.sh").read_text()).group(1)
    with distributed.Client(scheduler, timeout=10, set_as_default=False) as probe:
        running = [str(k) for keys in probe.processing().values() for k in keys]
    os.killpg(_fake(slurm)["jobs"]()["1"], signal.SIGKILL)
    before = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in (out / "points").glob("*.nc")}
    thread.join(timeout=120)
    assert not thread.is_alive(), "the sweep did not finish after its job was killed"
    assert any(k.startswith("aocsim-point-") for k in running), running  # killed mid-point
    assert 1 <= len(before) < 3, sorted(before)  # after a finished point, with points left
    after = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in (out / "points").glob("*.nc")}
    assert {name: after.get(name) for name in before} == before  # kept as they were, not run again
    return done, before, running


@pytest.mark.slow
def test_a_job_killed_mid_point_loses_no_finished_point(local: xr.Dataset, slurm: Path, tmp_path: Path) -> None:
    done, _, _ = _kill_after_the_first_point(slurm, tmp_path / "killed")
    assert "error" not in done, done.get("error")
    xr.testing.assert_identical(local, done["ds"])
    assert sorted(_fake(slurm)["jobs"]()) == ["1", "2"]  # the killed job was replaced by one more
    names = [re.search(r"--name (\S+)", (slurm / f"{n}.sh").read_text()).group(1) for n in ("1", "2")]
    assert names[0] != names[1]  # else Dask's timer for the lost worker could cancel the new job


@pytest.mark.slow
def test_a_point_whose_workers_keep_dying_is_a_one_line_error(slurm: Path, tmp_path: Path) -> None:
    out = tmp_path / "dying"
    with dask.config.set({"distributed.scheduler.allowed-failures": 0}):  # the scheduler runs here
        done, before, _ = _kill_after_the_first_point(slurm, out)
    error = str(done.get("error"))
    assert isinstance(done.get("error"), AocsimError) and "\n" not in error, error
    assert "the workers running it ended 1 times (distributed.scheduler.allowed-failures = 0); the finished " \
           "points are kept" in error
    assert status(out)["done"] == len(before)  # finished points kept; the sweep resumes from them


@pytest.mark.parametrize("other", [["--scheduler", "tcp://127.0.0.1:1"], ["--workers", "2"]])
def test_slurm_with_another_place_to_run_is_a_one_line_error(other: list[str], tmp_path: Path) -> None:
    out = tmp_path / "d"
    result = CliRunner().invoke(main, ["sweep", str(_spec_file(tmp_path)), "--out", str(out), "--slurm", "2", *other])
    assert result.exit_code == 1
    assert result.output == f"Error: --slurm and {other[0]} together; expected one of --slurm, --scheduler and " \
                            "--workers\n"
    assert not out.exists()


def test_missing_pieces_are_one_line_errors_before_any_work(slurm: Path, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    spec, out = _spec_file(tmp_path), tmp_path / "d"

    def error(*args: str) -> str:
        result = CliRunner().invoke(main, ["sweep", str(spec), "--out", str(out), "--slurm", "2", *args])
        assert result.exit_code == 1 and result.output.count("\n") == 1, result.output
        return result.output

    with monkeypatch.context() as m:
        m.setenv("PATH", str(tmp_path))  # no sbatch
        assert "--slurm: sbatch not found on PATH; expected a SLURM login node" in error()
    with monkeypatch.context() as m:
        m.setitem(sys.modules, "dask_jobqueue", None)
        assert "pip install 'aocsim[cluster]'" in error()
    with dask.config.set({"jobqueue.slurm.memory": None}):
        assert "jobqueue.slurm.memory is not set; expected the memory per job" in error()
    assert not out.exists()  # nothing written so far
    (slurm / "refuse").touch()
    assert "sbatch refused the job: sbatch: error: invalid partition specified: nope" in error()
    assert _fake(slurm)["jobs"]() == {}
