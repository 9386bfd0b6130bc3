"""Reading user files: workloads (native or Primus) and target clusters."""

from .cluster_file import load_cluster
from .workload_file import load_workload

__all__ = ["load_cluster", "load_workload"]
