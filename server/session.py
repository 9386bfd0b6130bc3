"""Server state: the ledger, the allowed roots and the run the tools act on, with its loaded inputs."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from paratune.ledger import Fidelity, Ledger, RunInfo, TrialRecord
from paratune.oracle.constraints import pinned
from paratune.oracle.errors import InputError
from paratune.oracle.inputs import load_cluster, load_workload
from paratune.oracle.inputs.read_guard import reads_under
from paratune.oracle.knob_bounds import check_knob_bounds
from paratune.oracle.specs import ClusterSpec, TrialConfig, Workload
from paratune.planner.run.measurements import Adopted, adopt_measurements
from paratune.planner.run.steps import score

from .paths import AllowedRoots


@dataclass(frozen=True)
class ActiveRun:
    """The current run and the workload and cluster it was opened with."""

    run: RunInfo
    workload: Workload
    cluster: ClusterSpec
    workload_file: str
    adopted: Adopted  # measurements of the pair from earlier runs the run took when it was opened


class Session:
    """One server's state; tools read the active run and write through the ledger."""

    def __init__(self, ledger: Ledger, roots: AllowedRoots,
                 constrain: Callable[[ClusterSpec], ClusterSpec] = lambda cluster: cluster):
        self.ledger = ledger
        self.roots = roots
        self._constrain = constrain  # the server command line's --stack/--fix/--allow/--exclude
        self._active: ActiveRun | None = None

    def open_run(self, workload_file: Path, cluster_file: Path, *, resume: bool = True,
                 confined: bool = True, calibration_from: Path | None = None) -> ActiveRun:
        """Load both files and open (or resume) their run; it becomes the active one. The cluster's stack
        and search constraints (its file's, then the server command line's) bind every tool of the run.
        `confined`: every file the two pull in (extends, model files, presets) must lie under the roots
        too; the command line's own --workload / --target-cluster are the operator's and are not. The run
        takes the measurements of its model and cluster from the ledger's earlier runs, or from
        `calibration_from`'s (a `paratune tune` folder), as `paratune tune` does (`adopt_measurements`)."""
        def load() -> tuple[ClusterSpec, Workload]:
            cluster = self._constrain(load_cluster(cluster_file))
            workload = load_workload(workload_file, stack=cluster.stack, stack_from=str(cluster_file))
            return cluster, pinned(workload, cluster)

        if confined:
            with reads_under(self.roots.readable):
                cluster, workload = load()
        else:
            cluster, workload = load()
        run = self.ledger.open_run(workload, cluster, resume=resume)
        adopted = adopt_measurements(self.ledger, run.id, calibration_from, key="calibration_from")
        self._active = ActiveRun(run, workload, cluster, str(workload_file), adopted)
        return self._active

    @property
    def active(self) -> ActiveRun:
        if self._active is None:
            raise InputError("no run is open: call open_run with a workload file and a cluster file first")
        return self._active

    def bounded(self, trial: TrialConfig, key: str = "config") -> TrialConfig:
        """`trial` when every knob is one a layout of the active run can have (`oracle.knob_bounds`); else
        InputError naming `key.knob`."""
        a = self.active
        try:
            check_knob_bounds(a.workload, a.cluster.world_size, trial)
        except InputError as exc:
            raise InputError(exc.message, key=f"{key}.{exc.key}") from None
        return trial

    def evaluate(self, trial: TrialConfig, fidelity: Fidelity, origin: str) -> tuple[TrialRecord, bool]:
        """(trial, cached): one layout of the active run, its knobs bounded, scored through the ledger (dedupe +
        budget)."""
        a = self.active
        cfg = a.workload.effective(self.bounded(trial))
        return score(self.ledger, a.run.id, a.workload, a.cluster, cfg, fidelity, origin=origin)
