"""Torch's and XLA's thread pool sizes in a process that applies the cgroup limits first, as app.py and the CLI
do (test_host). Reads the cgroup files under PLAYGROUND_CGROUP_ROOT; prints `TORCH_THREADS XLA_THREADS`."""

import os
from pathlib import Path

from playground import host


def root_cgroup(proc_file: Path = Path("/proc/self/cgroup")) -> dict[str, str]:
    """Our cgroup is the root of the fake tree under PLAYGROUND_CGROUP_ROOT."""
    return {"": "/"}


def main() -> None:
    host.own_cgroups = root_cgroup
    host.apply_thread_limits()
    import jax.numpy as jnp
    import torch

    x = jnp.ones((512, 512))
    (x @ x).block_until_ready()
    names = []
    for task in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{task}/comm") as comm:
            names.append(comm.read())
    print(torch.get_num_threads(), sum(n.startswith("tf_XLAEigen") for n in names))


if __name__ == "__main__":
    main()
