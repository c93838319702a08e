"""`python -m bench.replicas_ack`: the latency cost of LOCKGATE_REDIS_MIN_REPLICAS_ACK alone,
as `python -m bench.core --only ack` (the scenario lives in bench/redis_modes.py; `make bench`
runs it with the others)."""

import sys

from bench import core

if __name__ == "__main__":
    sys.argv[1:1] = ["--only", "ack"]
    core.main()
