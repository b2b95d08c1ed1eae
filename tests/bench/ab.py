#!/usr/bin/env python3
"""A/B of two csp-prof-mpi binaries on one input: run side by side, in pairs, and compared.

A change to the post-processing that saves a few per cent is smaller than this machine's swings
(a virtual machine's cores change speed by 10-40 % for minutes at a time), so a single run of
each says nothing. Here the two binaries run in alternating pairs (base first in pairs 1, 3, ..., new
first in pairs 2, 4, ..., so that a drift of the machine hits both alike), each pair gives the ratio
new / base of its wall and CPU times, and the report is the median ratio with its range and how
many pairs the new binary won. With -np 1 the process is pinned to one CPU, so that its CPU time
is not spread over cores that other work uses. Both databases are then compared with csp-db-dump:
a change meant to be faster must give the same database (exit status 3 when they differ, unless
--allow-different).

    tests/bench/ab.py --base /tmp/prof-before --new build/launcher/csp-prof-mpi \\
        --input DIR [--np 2] [--pairs 7] [--new-args=--no-balance]

The binaries are copied into the work directory first: rebuilding during the run changes
nothing. See docs/benchmarks.md, "A/B of two builds".
"""
import argparse
import hashlib
import os
import resource
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

from run import mpi_environment, mpirun_placement, stat  # the suite's: both place and summarize runs alike


def die(message, code=2):
    print(f"ab: error: {message}", file=sys.stderr)
    sys.exit(code)


def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


class Runner:
    def __init__(self, args):
        self.args = args
        self.env = mpi_environment()
        self.cores = sorted(os.sched_getaffinity(0))
        self.cpu = args.cpu if args.cpu is not None else self.cores[-1]
        if args.cpu is not None and args.cpu not in self.cores:
            die(f"--cpu {args.cpu}: not among this process's CPUs {self.cores}")
        if args.np > 1 and not shutil.which("mpirun", path=self.env.get("PATH")):
            die("mpirun not found (package openmpi-bin)")

    def command(self, binary, db, extra):
        prof = [binary, "-j", str(self.args.jobs), self.args.input, "-o", db, "--force", "-q", *extra]
        if self.args.np == 1:
            return prof
        return ["mpirun", "-np", str(self.args.np)] + mpirun_placement(self.args.np, self.args.jobs, len(self.cores)) + prof

    def run(self, binary, db, extra):
        """One run: (wall seconds, CPU seconds of the process and its children)."""
        cmd = self.command(binary, db, extra)
        pin = (lambda: os.sched_setaffinity(0, {self.cpu})) if self.args.np == 1 else None
        cpu0, t0 = children_cpu(), time.monotonic()
        r = subprocess.run(cmd, env=self.env, preexec_fn=pin, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                           text=True)
        wall, cpu = time.monotonic() - t0, children_cpu() - cpu0
        if r.returncode != 0:
            die(f"{shlex.join(cmd)} failed ({r.returncode}): {r.stderr.strip()[-2000:]}", 1)
        return wall, cpu


def dump_digest(dump, db):
    r = subprocess.run([dump, db], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if r.returncode != 0:
        die(f"{dump} {db} failed: {r.stderr.decode(errors='replace').strip()}", 1)
    return hashlib.sha256(r.stdout).hexdigest()


def spread(values):
    """'median (min-max)', three decimals: the changes compared here are a few per cent."""
    s = stat(values, "")
    return f"{s['median']:.3f} ({s['min']:.3f}-{s['max']:.3f})"


def main():
    p = argparse.ArgumentParser(description="A/B of two csp-prof-mpi binaries on one input, in alternating pairs.")
    p.add_argument("--base", required=True, help="the baseline csp-prof-mpi binary")
    p.add_argument("--new", required=True, help="the csp-prof-mpi binary to compare with it")
    p.add_argument("--input", required=True, help="measurement directory (csp-gen makes one)")
    p.add_argument("--np", type=int, default=1, help="processes (mpirun -np; 1: no mpirun, pinned to one CPU)")
    p.add_argument("--jobs", type=int, default=1, help="csp-prof-mpi -j (default 1)")
    p.add_argument("--pairs", type=int, default=7, help="pairs of runs (default 7)")
    p.add_argument("--warmup", type=int, default=1,
                   help="unmeasured runs of each binary first (page cache, the copies' first start; default 1)")
    p.add_argument("--cpu", type=int, help="-np 1: the CPU to pin to (default: the last one allowed)")
    p.add_argument("--base-args", default="", help="extra csp-prof-mpi arguments of the base runs (shell words)")
    p.add_argument("--new-args", default="", help="extra csp-prof-mpi arguments of the new runs (shell words)")
    p.add_argument("--dump", help="csp-db-dump, to compare the databases (default: BUILD/tests/csp-db-dump)")
    p.add_argument("--build", default="build", help="build directory, for the default --dump (default: build)")
    p.add_argument("--allow-different", action="store_true", help="different databases are not an error")
    p.add_argument("--work", help="directory for the copies and databases (default: a temporary one, removed)")
    a = p.parse_args()
    if a.pairs < 1:
        die("--pairs must be at least 1")
    if a.warmup < 0:
        die("--warmup must not be negative")
    if a.np < 1 or a.jobs < 1:
        die("--np and --jobs must be at least 1")
    for what, path in (("--base", a.base), ("--new", a.new)):
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            die(f"{what} {path}: no executable file")
    if not os.path.isdir(a.input):
        die(f"--input {a.input}: no directory")
    dump = a.dump or os.path.join(a.build, "tests", "csp-db-dump")
    if a.dump and not os.access(dump, os.X_OK):
        die(f"--dump {dump}: no executable file")
    compare = os.access(dump, os.X_OK)

    work = a.work or tempfile.mkdtemp(prefix="csp-ab-")
    os.makedirs(work, exist_ok=True)
    try:
        runner = Runner(a)
        sides = {}
        for side, binary, extra in (("base", a.base, a.base_args), ("new", a.new, a.new_args)):
            copy = os.path.join(work, f"csp-prof-mpi-{side}")
            shutil.copy2(binary, copy)
            sides[side] = (copy, os.path.join(work, f"db-{side}"), shlex.split(extra))
        where = f"pinned to CPU {runner.cpu}" if a.np == 1 else f"mpirun -np {a.np}"
        print(f"ab: {a.pairs} pairs on {a.input}, -j {a.jobs}, {where}")
        print("| pair | first | base wall s | new wall s | new / base wall | base CPU s | new CPU s | new / base CPU |")
        print("| --- | --- | --- | --- | --- | --- | --- | --- |")
        for _ in range(a.warmup):
            for side in ("base", "new"):
                runner.run(*sides[side])
        ratios_wall, ratios_cpu, times = [], [], {"base": [], "new": []}
        for i in range(a.pairs):
            order = ("base", "new") if i % 2 == 0 else ("new", "base")
            got = {}
            for side in order:
                binary, db, extra = sides[side]
                got[side] = runner.run(binary, db, extra)
                times[side].append(got[side])
            rw, rc = got["new"][0] / got["base"][0], got["new"][1] / max(got["base"][1], 1e-9)
            ratios_wall.append(rw)
            ratios_cpu.append(rc)
            print(f"| {i + 1} | {order[0]} | {got['base'][0]:.3f} | {got['new'][0]:.3f} | {rw:.3f} | "
                  f"{got['base'][1]:.3f} | {got['new'][1]:.3f} | {rc:.3f} |")
        won_wall = sum(r < 1 for r in ratios_wall)
        won_cpu = sum(r < 1 for r in ratios_cpu)
        print()
        print(f"wall s: base {spread([t[0] for t in times['base']])}, new {spread([t[0] for t in times['new']])}")
        print(f"CPU s:  base {spread([t[1] for t in times['base']])}, new {spread([t[1] for t in times['new']])}")
        print(f"new / base, median of the pairs (range): wall {spread(ratios_wall)}, CPU {spread(ratios_cpu)}")
        print(f"new faster in {won_wall} of {a.pairs} pairs (wall), {won_cpu} of {a.pairs} (CPU)")
        if not compare:
            print(f"databases not compared: {dump} not found (build csp-db-dump or give --dump)")
            return 0
        same = dump_digest(dump, sides["base"][1]) == dump_digest(dump, sides["new"][1])
        print(f"databases: {'identical' if same else 'DIFFERENT'} (csp-db-dump)")
        return 0 if same or a.allow_different else 3
    finally:
        if not a.work:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
