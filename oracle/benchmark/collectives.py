"""TP all-gather and reduce-scatter timed with torch.distributed, one JSON object on stdout.

    torchrun --nproc_per_node N -m paratune.oracle.benchmark.collectives --bytes 67108864 [--iters 20] [--backend gloo]

`--bytes` is the gathered buffer (BF16); each rank holds 1/N of it. The figure is the median over
iterations of the slowest rank. `measure_collectives` launches it from benchmark mode.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

TIMEOUT_S = 300


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m paratune.oracle.benchmark.collectives",
                                description=__doc__.splitlines()[0])
    p.add_argument("--bytes", type=int, required=True, help="gathered buffer size in bytes (BF16)")
    p.add_argument("--iters", type=int, default=20, help="timed iterations per collective")
    p.add_argument("--warmup", type=int, default=5, help="untimed iterations first")
    p.add_argument("--backend", choices=("nccl", "gloo"), help="default: nccl with CUDA, else gloo")
    args = p.parse_args(argv)
    if args.bytes < 2 or args.iters < 1 or args.warmup < 0:
        p.error("--bytes must be >= 2, --iters >= 1, --warmup >= 0")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch
    import torch.distributed as dist

    from .timing import timer

    backend = args.backend or ("nccl" if torch.cuda.is_available() else "gloo")
    device = "cuda" if backend == "nccl" else "cpu"
    if device == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group(backend)
    world = dist.get_world_size()
    n = max(world, args.bytes // 2 // world * world)
    full = torch.zeros(n, dtype=torch.bfloat16, device=device)
    shard = torch.zeros(n // world, dtype=torch.bfloat16, device=device)
    ops = {"all_gather": lambda: dist.all_gather_single(full, shard),
           "reduce_scatter": lambda: dist.reduce_scatter_single(shard, full)}
    mark, elapsed = timer(device)
    out: dict[str, object] = {"world": world, "backend": backend, "bytes": 2 * n}
    for name, op in ops.items():
        for _ in range(args.warmup):
            op()
        times = []
        for _ in range(args.iters):
            dist.barrier()
            t0 = mark()
            op()
            times.append(elapsed(t0, mark()))
        slowest = torch.tensor([statistics.median(times)], dtype=torch.float64, device=device)
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
        out[f"{name}_ms"] = slowest.item()
    if dist.get_rank() == 0:
        print(json.dumps(out))
    dist.destroy_process_group()
    return 0


def measure_collectives(nproc: int, nbytes: int, backend: str | None = None) -> dict:
    """Run this module under torchrun on `nproc` local processes and return its JSON (RuntimeError
    when that fails)."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(nproc),
           "-m", "paratune.oracle.benchmark.collectives", "--bytes", str(nbytes)]
    if backend:
        cmd += ["--backend", backend]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        raise RuntimeError(f"torchrun did not run: {exc}") from None
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"torchrun exited {proc.returncode}: {tail}")
    try:
        return json.loads(proc.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        raise RuntimeError(f"torchrun printed no JSON: {proc.stdout[-200:]!r}") from None


if __name__ == "__main__":
    sys.exit(main())
