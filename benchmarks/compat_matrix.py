"""The support matrix, measured: per upstream version, the fault kinds named right at the operator's decision.

Run by hand: ``.venv/bin/python -m benchmarks.compat_matrix [--cells all|lane|NAME,...]
[--kinds sigkill,raise,hang] [--flavours flytekit,flyte2] [--trials 1]``.

Each cell (``testbed.compat``: one torch release, one flytekit line, one Flyte 2 line) gets a
virtualenv with this checkout's wheels installed from the wheels (kept under
``~/.cache/rootcause-compat``: the first run of a torch release installs its CUDA build, minutes and
about 5 GB). Each trial runs the installed demo of a flavour (2 pods x 2 workers, the training
operator's rule at the first pod exit) with one fault and counts it right when the console at the
decision names the pod the fault hit (the demo's exit code). Printed: one row per cell and flavour,
the versions pip resolved, right/total per kind, the median seconds of a run (the demo's whole job,
pod start to last exit), and whether any run said the diagnosis was off or unverified.
"""

from __future__ import annotations

import argparse
import statistics
import sys

from testbed import compat

DEFAULT_KINDS = ("sigkill", "raise", "hang")


def _cells(spec: str) -> tuple[compat.Cell, ...]:
    if spec == "all":
        return compat.MATRIX
    if spec == "lane":
        return compat.LANE
    wanted = set(spec.split(","))
    cells = tuple(cell for cell in compat.MATRIX if cell.name in wanted)
    unknown = wanted - {cell.name for cell in cells}
    if unknown:
        sys.exit(f"unknown cells {sorted(unknown)}; known: {[cell.name for cell in compat.MATRIX]}")
    return cells


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", default="all")
    parser.add_argument("--kinds", default=",".join(DEFAULT_KINDS))
    parser.add_argument("--flavours", default=",".join(sorted(compat.DEMOS)))
    parser.add_argument("--trials", type=int, default=1)
    args = parser.parse_args()
    kinds = args.kinds.split(",")
    wheels = compat.build_wheels()
    rows = []
    for cell in _cells(args.cells):
        try:
            python = compat.install_cell(cell, wheels)
        except RuntimeError as error:
            print(f"{cell.name}: could not install: {str(error)[-600:]}", flush=True)
            rows.append((cell.name, "not installable", "", "", "", ""))
            continue
        installed = compat.installed_versions(python)
        for flavour in args.flavours.split(","):
            runs = []
            for kind in kinds:
                for _ in range(args.trials):
                    run = compat.run_fault(cell, python, flavour, kind)
                    print(run.describe(), flush=True)
                    runs.append(run)
            per_kind = " ".join(
                f"{kind} {sum(r.right for r in runs if r.fault == kind)}/{sum(r.fault == kind for r in runs)}"
                for kind in kinds
            )
            warned = any("diagnosis is off" in r.output or "not verified" in r.output for r in runs)
            upstream = (f"flytekit {installed['flytekit']}" if flavour == "flytekit"
                        else f"flyte {installed['flyte']}")
            rows.append((cell.name, f"torch {installed['torch']}, {upstream}", flavour, per_kind,
                         f"{statistics.median(r.seconds for r in runs):.1f}", "yes" if warned else "no"))
    print()
    print("| cell | installed | flavour | right at the decision | median run (s) | warned |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
