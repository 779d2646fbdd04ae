"""``python -m distfl.tools.bench _flower|_server-math ...``: the bench's own subprocesses,
each printing its result as one tagged JSON line (``distfl bench`` is the command):

- ``_flower WORKLOAD_JSON [TMP]``: Flower's simulation (:mod:`distfl.tools.bench.flower`);
- ``_server-math K CAP``: FedGWC's server math for K clients, the address space capped at
  CAP bytes (:mod:`distfl.tools.bench.server_math`).
"""

from __future__ import annotations

import sys

from distfl.tools.bench.common import print_result


def child_main(argv: list[str]) -> int:
    if argv and argv[0] == "_flower" and len(argv) in (2, 3):
        # imported from its module, so that Ray's actors find the client functions there
        from distfl.tools.bench.flower import flower_child

        print_result(flower_child(argv[1], argv[2] if len(argv) > 2 else None))
        return 0
    if argv and argv[0] == "_server-math" and len(argv) == 3:
        from distfl.tools.bench.server_math import server_math_child

        print_result(server_math_child(int(argv[1]), int(argv[2])))
        return 0
    print("usage: distfl bench (this module's entry points are internal)", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(child_main(sys.argv[1:]))
