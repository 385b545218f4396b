"""A sweep on a SLURM cluster through dask-jobqueue: `slurm_client` and `sweep_on_slurm`.

`slurm_client(jobs)` starts a Dask scheduler in this process and submits `jobs` SLURM jobs (sbatch)
whose workers connect to it; the job settings come from the user's Dask jobqueue config
(~/.config/dask/jobqueue.yaml, section `jobqueue: slurm:`, or DASK_JOBQUEUE__SLURM__* variables),
a few of them overridden by the caller. Each job runs one worker process per core, one thread each,
torch on one thread: a point's numbers never depend on where it ran (run.py, run_point).

A job that ends mid-point (walltime, a node lost, scancel) loses no finished point: the client
writes each point as it arrives (store.py), Dask runs the lost point again on another worker, and
every `watch_s` seconds the jobs SLURM no longer lists (squeue) are submitted again, so that `jobs`
jobs keep working until the sweep ends. Run again with --resume, a sweep does only what is missing.

dask-jobqueue is imported only here and only when used (`pip install 'aocsim[cluster]'`). Two parts
of SpecCluster that dask-jobqueue builds on are used directly: `_correct_state` (submit the jobs
now, so that a job sbatch refuses is a one-line error rather than a wait) and `_lock` (replace ended
jobs without racing Dask's own bookkeeping). See docs/SWEEPS.md, "Running on a SLURM cluster".
"""

from __future__ import annotations

import contextlib
import getpass
import logging
import shutil
import threading
from pathlib import Path
from typing import Any, Iterator

import xarray as xr

from aocsim.errors import AocsimError, InputError
from aocsim.experiments.sweep.spec import SweepSpec, load_spec

log = logging.getLogger(__name__)
CONFIG = "jobqueue.slurm"
COMMANDS = ("sbatch", "squeue", "scancel")
# Every job starts its workers with one thread for OpenMP and MKL: run_point sets torch's threads to
# one per point, and this keeps the thread pools made at import time from taking a job's cores.
ONE_THREAD = ["export OMP_NUM_THREADS=1", "export MKL_NUM_THREADS=1"]


def _jobqueue() -> Any:
    try:
        from dask_jobqueue import SLURMCluster
    except ImportError:
        raise InputError("--slurm needs dask-jobqueue; install it with pip install 'aocsim[cluster]'") from None
    return SLURMCluster


def job_settings(cores: int | None = None, memory: str | None = None, walltime: str | None = None,
                 **options: Any) -> dict[str, Any]:
    """The SLURMCluster arguments: `cores` and `memory` per job and `walltime` (each from the jobqueue
    config when None), `options` (any other SLURMCluster argument) as given, one worker process per
    core (`processes = cores`) and ONE_THREAD after the config's job-script-prologue."""
    import dask

    from aocsim._checks import integer

    _jobqueue()  # loads dask-jobqueue's defaults into dask.config too
    for command in COMMANDS:
        if shutil.which(command) is None:
            raise InputError(f"--slurm: {command} not found on PATH; expected a SLURM login node (sbatch, squeue "
                             "and scancel on PATH)")
    cores = cores if cores is not None else dask.config.get(f"{CONFIG}.cores", None)
    memory = memory if memory is not None else dask.config.get(f"{CONFIG}.memory", None)
    for key, value, example in (("cores", cores, "8"), ("memory", memory, "16GB")):
        if value is None:
            raise InputError(f"{CONFIG}.{key} is not set; expected the {key} per job in ~/.config/dask/jobqueue.yaml "
                             f"(jobqueue: slurm: {key}: {example}) or DASK_JOBQUEUE__SLURM__{key.upper()}")
    cores = integer(cores, f"{CONFIG}.cores", minimum=1)
    if options.get("processes", cores) != cores:
        raise InputError(f"processes = {options['processes']!r} with cores = {cores}; expected none (aocsim runs one "
                         "worker process per core, one torch thread each)")
    prologue = list(options.pop("job_script_prologue", None)
                    or dask.config.get(f"{CONFIG}.job-script-prologue", None) or [])
    settings = {**options, "cores": cores, "processes": cores, "memory": memory,
                "job_script_prologue": [*prologue, *ONE_THREAD]}
    if walltime is not None:
        settings["walltime"] = walltime
    return settings


def _checked(jobs: int, watch_s: float = 60.0, **settings: Any) -> dict[str, Any]:
    from aocsim._checks import integer, real

    integer(jobs, "--slurm JOBS", minimum=1)
    real(watch_s, "watch_s", low=0, low_open=True)
    return job_settings(**settings)


@contextlib.contextmanager
def slurm_client(jobs: int, *, cores: int | None = None, memory: str | None = None, walltime: str | None = None,
                 watch_s: float = 60.0, **options: Any) -> Iterator[Any]:
    """A `distributed.Client` of `jobs` SLURM jobs (settings: `job_settings`), for
    `sweep(..., scheduler=client)`; the jobs are cancelled and the scheduler closed on leaving.

    The jobs are submitted before the client is yielded (a job sbatch refuses is a one-line error);
    every `watch_s` seconds the jobs SLURM no longer lists are submitted again.
    """
    settings = _checked(jobs, watch_s, cores=cores, memory=memory, walltime=walltime, **options)
    from distributed import Client

    try:
        cluster = _jobqueue()(**settings)
    except (ValueError, TypeError) as exc:
        raise InputError(f"dask-jobqueue refused the SLURM settings ({_first_line(str(exc))}); expected settings "
                         f"of {CONFIG} (docs/SWEEPS.md)") from None
    client, keeper = None, None
    try:
        client = Client(cluster, set_as_default=False)
        try:
            cluster.sync(_submit, cluster, jobs)  # sbatch now: a refused job is an error, not a wait
        except RuntimeError as exc:
            raise InputError(f"sbatch refused the job: {_stderr(exc)}; expected settings SLURM accepts in "
                             f"{CONFIG} (queue, account, walltime, memory)") from None
        log.info("submitted %d SLURM jobs of %d cores: %s", jobs, settings["cores"],
                 ", ".join(str(j.job_id) for j in cluster.workers.values()))
        keeper = _Keeper(cluster, float(watch_s))
        keeper.start()
        yield client
    finally:
        if keeper is not None:
            keeper.stop()
        if client is not None:
            client.close()
        cluster.close()  # scancel of every job still known


def sweep_on_slurm(spec: SweepSpec | str | Path, out: str | Path, jobs: int, *, resume: bool = False,
                   overwrite: bool = False, progress: bool = False, **cluster: Any) -> xr.Dataset:
    """`sweep` on `jobs` SLURM jobs (`slurm_client(jobs, **cluster)`), a grid or a search. The settings,
    the spec, its models and the folder are checked (and the folder prepared) before any job is
    submitted; a sweep with nothing left to run submits none. Returns the Dataset, as `sweep` does."""
    from aocsim.experiments.sweep import status
    from aocsim.experiments.sweep.run import check_models, fingerprint, provenance, sweep
    from aocsim.experiments.sweep.store import SweepStore
    from aocsim.hardware.profiles.profile import load_device

    spec = spec if isinstance(spec, SweepSpec) else load_spec(spec)
    _checked(jobs, **cluster)  # a bad setting is an error before any work
    base = load_device(spec.profile)
    check_models(spec, base)
    store = SweepStore(out)
    store.prepare(spec, fingerprint(provenance(spec, base)), resume=resume, overwrite=overwrite)
    done = status(out)  # a search's: the points of its budget written so far
    if done["done"] >= done["total"]:
        return sweep(spec, out, resume=True, progress=progress)  # only results.nc to write
    from distributed import KilledWorker

    try:
        with slurm_client(jobs, **cluster) as client:
            return sweep(spec, out, scheduler=client, resume=True, progress=progress)
    except KilledWorker as exc:  # distributed.scheduler.allowed-failures: a point that ends its workers
        raise AocsimError(f"point {exc.task}: the workers running it ended {exc.allowed_failures + 1} times "
                          f"(distributed.scheduler.allowed-failures = {exc.allowed_failures}); the finished points "
                          f"are kept in {out}: see the jobs' logs ({CONFIG}.log-directory), then run again with "
                          "--resume") from None


class _Keeper(threading.Thread):
    """Every `every` seconds: the jobs SLURM no longer lists are submitted again (`_replace_ended`)."""

    def __init__(self, cluster: Any, every: float) -> None:
        super().__init__(name="aocsim-slurm-jobs", daemon=True)
        self.cluster, self.every, self.stopped = cluster, every, threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(self.every):
            try:
                self.cluster.sync(_replace_ended, self.cluster)
            except Exception as exc:  # squeue or sbatch failed for now: the next round tries again
                log.warning("SLURM jobs not checked (%s); trying again in %.0f s", _first_line(str(exc)), self.every)

    def stop(self) -> None:
        self.stopped.set()
        self.join()


async def _replace_ended(cluster: Any) -> list[str]:
    """Submit a new job for each of `cluster`'s jobs that squeue no longer lists (ended: walltime, a node
    lost, scancel), that sbatch refused, or that Dask dropped after losing its worker; returns their
    names. A new job gets a new name, so that Dask's timer for the old one's lost workers never closes it."""
    from dask_jobqueue.core import Job
    from distributed.deploy.spec import ProcessInterface

    async with cluster._lock:
        listed = set((await Job._call(["squeue", "--noheader", "--format=%i", f"--user={getpass.getuser()}"])).split())
        ended = [name for name in cluster.worker_spec
                 if name not in cluster.workers or cluster.workers[name].job_id not in listed]
        for name in ended:
            job = cluster.workers.pop(name, None)
            cluster.worker_spec.update(cluster.new_worker_spec())  # a new name while the old one is taken
            del cluster.worker_spec[name]
            log.warning("SLURM job %s ended; submitting another (its points in flight run again elsewhere)",
                        getattr(job, "job_id", name))
            if job is not None:
                await ProcessInterface.close(job)  # marked closed: SLURM has ended it, nothing to scancel
    if ended:
        await _submit(cluster, len(cluster.worker_spec))
    return ended


async def _submit(cluster: Any, jobs: int) -> None:
    """Submit jobs (sbatch) until `cluster` has `jobs`; sbatch's refusal is raised (RuntimeError). A job
    sbatch refused is forgotten (its name stays planned: the next `_replace_ended` submits it again)."""
    from distributed.deploy.spec import ProcessInterface

    while len(cluster.worker_spec) < jobs:
        cluster.worker_spec.update(cluster.new_worker_spec())
    try:
        await cluster._correct_state()
    finally:
        for name, job in list(cluster.workers.items()):
            if job.job_id is None:
                del cluster.workers[name]
                await ProcessInterface.close(job)  # marked closed: there is no job to scancel


def _stderr(exc: BaseException) -> str:
    """The first line sbatch wrote to stderr, from dask-jobqueue's RuntimeError (its whole output)."""
    text = str(exc)
    err = text.split("stderr:", 1)[1] if "stderr:" in text else text
    return _first_line(err) or _first_line(text)


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")
