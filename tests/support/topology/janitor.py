"""The janitor of one topology: ``python -m tests.support.topology.janitor
RUN`` blocks until its stdin, a pipe only the owner holds open, reaches EOF
(the owner closed the topology, or died, even by SIGKILL), then reaps the
owner's run. It runs in a session of its own, so a signal to the owner's
process group does not take it along."""

from __future__ import annotations

import sys

from tests.support.topology.reap import reap_run


def main(argv: list[str]) -> int:
    (run_prefix,) = argv
    while sys.stdin.buffer.read(4096):
        pass
    stuck = reap_run(run_prefix)
    if stuck:
        print(f"pltopo janitor: could not remove {', '.join(stuck)}", file=sys.stderr)
    return 1 if stuck else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
