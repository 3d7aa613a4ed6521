"""Keep a real Ray cluster up on this machine (:class:`envs.ray_cluster.LocalCluster`) until Ctrl-C.

    python -m scripts.ray_cluster --workers 1     # prints the exports; Ctrl-C tears it down
"""

from __future__ import annotations

import argparse
import signal

from envs.ray_cluster import LocalCluster


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--head-cpus", type=int, default=2)
    parser.add_argument("--workers", type=int, default=1, help="worker nodes (1 CPU each)")
    args = parser.parse_args(argv)
    with LocalCluster(args.head_cpus, (1,) * args.workers) as cluster:
        exports = " ".join(f"{k}={v}" for k, v in {**cluster.driver_env, "RAY_ADDRESS": cluster.address}.items())
        print(f"Ray cluster up ({1 + args.workers} nodes, logs in {cluster.temp_dir}). In another shell:\n"
              f"  export {exports}\nCtrl-C tears it down.", flush=True)
        try:
            signal.pause()
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
