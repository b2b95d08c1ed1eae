#!/usr/bin/env python3
"""CSP benchmark suite: speed, memory and scaling of CSP side by side with a baseline.

    python3 tests/bench/run.py [--quick | --tiny] [--build DIR] [--out DIR] [--work DIR]
                               [--runs N] [--scenarios a,b,...] [--keep] [--regenerate]

Writes OUT/report.json (machine-readable) and OUT/report.md (a Markdown summary). Every figure
is the median of several runs with min and max; every time is also given as a ratio to a
baseline measured in the same run, interleaved with the measured runs (run i of the measured
command is paired with the baseline run just before it, and the ratio is taken per pair):

  postproc  csp-prof-mpi on 4,096 / 16,384 / 65,536 profiles (quick: 1,024 / 4,096) with -np 1
            and -np 2: wall and CPU time (all processes), CPU per non-zero value, peak memory,
            log-log slopes over the profile count;
            baseline: the floor, `cat` of every input byte to /dev/null from the page cache
  growth    log-log slopes of time and peak memory over the profile count (from postproc) and
            over the CCT size (its own series at a fixed profile count); same floor
  views     csp-views Calling Context, Callers, Flat and --node on the largest database;
            baseline: `csp-views --info` (open the database, read the metadata)
  overhead  the compute-bound test app uninstrumented vs csp-run at 200 and 1,000 samples/s,
            gperftools' CPU profiler and `perf record -g` at the same rates; and thread churn:
            5,000 short threads one after the other (tests/apps/hostile.cpp `threads`) under
            csp-run (one profile per thread); and lock-heavy threads (tests/apps/threads.cpp
            `heavy`) under csp-run and csp-run --idleness; baseline: the uninstrumented run
  diff      csp-diff between the two largest databases; baseline: `csp-views --info` of both
  dbwrite   tests/bench db_write_bench (database writer alone);
            baseline: copying the database it wrote (`cp -r`, page cache to disk)
  hpctoolkit  the HPCToolkit database of 4,096 profiles (postproc's shape): csp-prof-mpi
            --hpctoolkit and csp-export; baseline: csp-prof-mpi alone
  balance   the read's balancing between neighbouring processes: csp-prof-mpi -np 2 on postproc's
            largest input (full mode 4,096 profiles, quick 1,024), with the processes' cores idle
            and with a CPU hog (`yes`) pinned to the second process's core (a node shared with
            another job), each with balancing and with --no-balance; per-process profile counts;
            baseline: --no-balance on the same machine state
  hpcrun    HPCToolkit's measurements as input: csp-prof-mpi -np 2 on 1,024 and 4,096 *.hpcrun
            files of postproc's shape (quick: 256 / 1,024), written by tests/bench/hpcrun_bench
            --write with the same profiles in CSP's format; with and without --hpctoolkit; peak
            memory per process at both sizes; baseline: csp-prof-mpi on the CSP-format copy

Inputs come from csp-gen with fixed seeds and are cached in WORK/inputs (delete the directory or
pass --regenerate to rebuild them); databases and other temporary data live in WORK/tmp-PID and
are removed at the end unless --keep. A scenario whose tool is not built is reported as
"not run" with the reason; the exit status is 1 if any scenario failed or produced no numbers.
No figure is compared to a target: this is a measurement, not a test of speed.
"""

import argparse
import datetime
import json
import math
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Mode parameters. Profiles are ranks x THREADS per-thread profiles; the throughput shape is
# docs/benchmarks.md, "Targets" (~5,000 CCT nodes, 2 metrics).
MODES = {
    "full": dict(runs=3, threads=4, nodes=5000, profiles=[4096, 16384, 65536], nps=[1, 2],
                 cct_profiles=1024, cct_nodes=[1250, 5000, 20000],
                 view_runs=5, overhead_units=500, overhead_runs=5, rates=[200, 1000], churn_threads=5000,
                 lock_iterations=1000000,
                 dbwrite=dict(profiles=16384, nodes=5000, writers=2), hpctoolkit_profiles=4096,
                 hpcrun_profiles=[1024, 4096]),
    "quick": dict(runs=3, threads=4, nodes=5000, profiles=[1024, 4096], nps=[1, 2],
                  cct_profiles=256, cct_nodes=[1250, 5000],
                  view_runs=3, overhead_units=100, overhead_runs=3, rates=[200, 1000], churn_threads=5000,
                  lock_iterations=500000,
                  dbwrite=dict(profiles=1024, nodes=5000, writers=2), hpctoolkit_profiles=1024,
                  hpcrun_profiles=[256, 1024]),
    "tiny": dict(runs=1, threads=4, nodes=300, profiles=[16, 64], nps=[1, 2],
                 cct_profiles=16, cct_nodes=[150, 600],
                 view_runs=1, overhead_units=5, overhead_runs=1, rates=[200, 1000], churn_threads=200,
                 lock_iterations=20000,
                 dbwrite=dict(profiles=64, nodes=300, writers=2), hpctoolkit_profiles=64,
                 hpcrun_profiles=[16, 64]),
}
SCENARIOS = ["postproc", "growth", "views", "overhead", "diff", "dbwrite", "hpctoolkit", "hpcrun", "balance"]

# Reference figures of docs/benchmarks.md, "Targets" (hpcprof on this kind of machine; not measured here).
REFERENCE = {
    "hpcprof": {"profiles_1024_s": 102, "profiles_4096_s": 668, "peak_gb": 2.5, "database_gb": 2.26,
                "input_mb_4096": 727, "floor_s_4096": 0.35},
    "targets": {"profiles_4096_np2_s": 20, "profiles_16384_np2_s": 80, "peak_gb_per_process": 1.0,
                "bytes_per_value": 20},
}


class BenchError(Exception):
    """A failure that ends one scenario with a message (the others still run)."""


class NotRun(Exception):
    """A scenario or variant that cannot run here (a tool is missing); not a failure unless the
    tool was expected (--expect)."""

    def __init__(self, msg, tool=None):
        super().__init__(msg)
        self.tool = tool


def mpi_environment():
    """The environment for mpirun: Open MPI refuses to run as root without these two."""
    env = dict(os.environ)
    if os.geteuid() == 0:
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    return env


def mpirun_placement(np, workers, cores):
    """mpirun's placement options. By default one worker thread per process, one core per process
    when the machine has them: -np is the number of cores used. More workers or more processes
    than cores: unbound (and oversubscribed if need be)."""
    if workers == 1 and np <= cores:
        return ["--bind-to", "core"]
    return ["--oversubscribe", "--bind-to", "none"]


def log(msg):
    print(f"bench: {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# Statistics


def count_profiles(directory):
    """Thread profiles in a measurement directory: one per *.cspprof file, and one per record of
    every *.cspbundle (a process's ended threads, appended one after the other; each record starts
    with the 32-byte profile header whose bytes 16-23 give the payload length, little-endian)."""
    if not os.path.isdir(directory):
        return 0
    n = 0
    for e in os.scandir(directory):
        if e.name.endswith(".cspprof"):
            n += 1
        elif e.name.endswith(".cspbundle"):
            with open(e.path, "rb") as f:
                data = f.read()
            at = 0
            while at + 32 <= len(data) and data[at:at + 8] == b"CSPPROF\x1a":
                n += 1
                at += 32 + int.from_bytes(data[at + 16:at + 24], "little")
    return n


def stat(values, unit):
    """Median, min and max of a list of numbers (all runs kept for the JSON report)."""
    values = [float(v) for v in values]
    if not values:
        raise BenchError("no runs to summarize")
    return {"median": statistics.median(values), "min": min(values), "max": max(values),
            "n": len(values), "unit": unit, "runs": values}


def ratios(measured, baseline):
    """Per-pair ratios of two equally long run lists (run i against baseline run i)."""
    return [m / b if b > 0 else float("nan") for m, b in zip(measured, baseline)]


def loglog_slope(xs, ys):
    """Least-squares slope of log(y) over log(x): 1 = linear growth, 0 = flat."""
    pts = [(math.log(x), math.log(y)) for x, y in zip(xs, ys) if x > 0 and y > 0]
    if len(pts) < 2:
        return None
    mx = sum(p[0] for p in pts) / len(pts)
    my = sum(p[1] for p in pts) / len(pts)
    sxx = sum((p[0] - mx) ** 2 for p in pts)
    if sxx == 0:
        return None
    return sum((p[0] - mx) * (p[1] - my) for p in pts) / sxx


# ---------------------------------------------------------------------------------------------
# Running commands


class Result:
    def __init__(self, wall, cpu, maxrss_kb, stdout, stderr):
        self.wall, self.cpu, self.maxrss_kb, self.stdout, self.stderr = wall, cpu, maxrss_kb, stdout, stderr


GNU_TIME = "/usr/bin/time"


def error_line(stderr):
    """The line of a failed command's stderr that says what went wrong: the first with "error"
    (CSP's tools write `tool: error: ...`; mpirun adds a banner after it), else the last."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip() and not line.startswith("---")]
    for line in lines:
        if "error" in line.lower():
            return line
    return lines[-1] if lines else "(no message)"


def timed(cmd, what, env=None, capture=False, rss=False):
    """Runs cmd; returns its wall time, CPU time (user + system of it and of the descendants it
    reaped), with stdout if capture, and with rss its peak RSS (KiB). Output goes to anonymous
    files, not pipes, so that the process can be reaped with wait4 for its resource usage. The
    peak RSS comes from GNU time, which forks the command from a small process: Linux carries a
    process's RSS high-water mark across exec, so wait4's figure for a child forked from this
    Python would never be below Python's own size. A non-zero exit raises BenchError with the
    end of stderr."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err, \
            tempfile.NamedTemporaryFile("w+", prefix="csp-bench-rss-") as rss_file:
        if rss:
            if not os.access(GNU_TIME, os.X_OK):
                raise NotRun(f"tool missing: {GNU_TIME} (package time)")
            cmd = [GNU_TIME, "-f", "%M", "-o", rss_file.name] + list(cmd)
        t0 = time.monotonic()
        try:
            p = subprocess.Popen(cmd, stdout=out if capture else subprocess.DEVNULL, stderr=err, env=env)
        except OSError as e:
            raise BenchError(f"{what}: cannot start {cmd[0]}: {e.strerror}")
        try:
            _, status, ru = os.wait4(p.pid, 0)
        except KeyboardInterrupt:
            p.terminate()  # mpirun forwards SIGTERM to its ranks
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
            raise
        wall = time.monotonic() - t0
        p.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
        peak = 0
        if rss and p.returncode == 0:
            lines = rss_file.read().split()
            peak = int(lines[-1]) if lines and lines[-1].isdigit() else 0
    if p.returncode != 0:
        raise BenchError(f"{what}: exit status {p.returncode}: {error_line(stderr)}\n"
                         f"  command: {' '.join(map(str, cmd))}")
    return Result(wall, ru.ru_utime + ru.ru_stime, peak, stdout, stderr)


# ---------------------------------------------------------------------------------------------
# The suite


class Suite:
    def __init__(self, args):
        self.args = args
        self.mode = "tiny" if args.tiny else "quick" if args.quick else "full"
        self.p = dict(MODES[self.mode])
        if args.profiles:
            self.p["profiles"] = args.profiles
        if args.runs:
            self.p["runs"] = self.p["view_runs"] = self.p["overhead_runs"] = args.runs
        self.build = os.path.abspath(args.build)
        self.work = os.path.abspath(args.work or os.path.join(self.build, "bench-work"))
        self.out = os.path.abspath(args.out or os.path.join(self.build, "bench-report"))
        self.tmp = os.path.join(self.work, f"tmp-{os.getpid()}")
        self.env = mpi_environment()
        self.cores = len(os.sched_getaffinity(0))
        self.workers = args.workers
        self.expect = set(t for t in (args.expect or "").split(",") if t)
        self.databases = {}  # profiles -> database directory (np 2) kept for views and diff
        self.report = {"scenarios": {}}

    # tools ------------------------------------------------------------------------------------

    def tool(self, rel, hint):
        path = os.path.join(self.build, rel)
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            raise NotRun(f"tool missing: {os.path.relpath(path, REPO) if path.startswith(REPO) else path}"
                         f" ({hint})", tool=os.path.basename(rel))
        return path

    def gen_tool(self):
        return self.tool("launcher/csp-gen", "ninja -C build csp-gen")

    def prof_tool(self):
        return self.tool("launcher/csp-prof-mpi", "ninja -C build csp-prof-mpi")

    def cores_used(self, np):
        return min(np * self.workers, self.cores)

    def mpirun(self, np):
        mpirun = shutil.which("mpirun", path=self.env.get("PATH"))
        if not mpirun:
            raise NotRun("tool missing: mpirun (Open MPI, package openmpi-bin)")
        return [mpirun, "-np", str(np)] + mpirun_placement(np, self.workers, self.cores)

    # inputs -----------------------------------------------------------------------------------

    def inputs(self, profiles, nodes):
        """The measurement directory of `profiles` per-thread profiles (csp-gen, seed 1), made once
        and cached; returns (directory, csp-gen summary)."""
        threads = self.p["threads"] if profiles % self.p["threads"] == 0 else 1
        ranks = profiles // threads
        name = f"r{ranks}-t{threads}-n{nodes}-m2-s1"
        d = os.path.join(self.work, "inputs", name)
        marker = os.path.join(self.work, "inputs", name + ".json")
        if os.path.isfile(marker) and not self.args.regenerate:
            with open(marker) as f:
                info = json.load(f)
            found = sum(1 for e in os.scandir(d) if e.name.endswith(".cspprof")) if os.path.isdir(d) else 0
            if found == profiles:
                return d, info
            log(f"cached input {d} holds {found} profiles, expected {profiles}: regenerating")
        gen = self.gen_tool()
        os.makedirs(os.path.dirname(d), exist_ok=True)
        # ~40 bytes per (profile, node) of csp-gen's profiles, and room for the databases.
        need = profiles * nodes * 40 * 2
        free = shutil.disk_usage(os.path.dirname(d)).free
        if free < need:
            raise BenchError(f"{os.path.dirname(d)}: {free / 2**30:.1f} GiB free, about {need / 2**30:.1f} GiB "
                             f"needed for {profiles} profiles of {nodes} nodes and their databases (--work DIR)")
        if os.path.exists(marker):
            os.remove(marker)
        cmd = [gen, "--ranks", str(ranks), "--threads", str(threads), "--nodes", str(nodes), "--metrics", "2",
               "--seed", "1", "-o", d, "--force"]
        log(f"generating {profiles} profiles of ~{nodes} nodes: {' '.join(cmd[1:])}")
        r = timed(cmd, "csp-gen", env=self.env, capture=True)
        m = re.search(r"wrote (\d+) profiles to .*?: (\d+) CCT nodes, (\d+) non-zero values, ([\d.]+) MiB", r.stdout)
        if not m:
            raise BenchError(f"csp-gen: unexpected summary: {r.stdout.strip()!r}")
        info = {"args": cmd[1:-3], "profiles": int(m.group(1)), "cct_nodes": int(m.group(2)),
                "nonzero_values": int(m.group(3)), "bytes": self.dir_bytes(d), "nodes": nodes,
                "ranks": ranks, "threads": threads}
        with open(marker, "w") as f:
            json.dump(info, f, indent=1)
        return d, info

    @staticmethod
    def dir_bytes(d):
        total = 0
        for root, _, files in os.walk(d):
            for f in files:
                try:
                    total += os.lstat(os.path.join(root, f)).st_size
                except FileNotFoundError:
                    pass
        return total

    def floor(self, d):
        """Time to read every input byte from the page cache: cat to /dev/null."""
        cmd = ["sh", "-c", 'find "$1" -type f -name "*.cspprof" -print0 | xargs -0 cat > /dev/null', "sh", d]
        return timed(cmd, "floor (cat inputs)", env=self.env).wall

    # csp-prof-mpi -----------------------------------------------------------------------------

    def prof(self, meas, np, db, label, extra=()):
        """One csp-prof-mpi run under mpirun. Each rank runs under /usr/bin/time so that its own
        peak RSS is known; wall time is measured here (mpirun start-up included)."""
        prof = self.prof_tool()
        gnu_time = GNU_TIME
        if not os.access(gnu_time, os.X_OK):
            raise NotRun(f"tool missing: {GNU_TIME} (package time)")
        stamp = os.path.join(self.tmp, f"rank-time-{label}")
        for old in self.glob_prefix(stamp):
            os.remove(old)
        wrap = ['sh', '-c', 'f="$1"; shift; exec "$0" -f "%e %M %U %S %R" -o "$f.${OMPI_COMM_WORLD_RANK:-0}" "$@"',
                gnu_time, stamp]
        cmd = self.mpirun(np) + wrap + [prof, "-j", str(self.workers), meas, "-o", db, "--force", *extra]
        r = timed(cmd, f"csp-prof-mpi -np {np} on {os.path.basename(meas)}", env=self.env, capture=True)
        rss, busy, faults, cpu = [], [], [], 0.0
        for f in self.glob_prefix(stamp):
            with open(f) as fh:
                rank_wall, rank_rss, user, system, minor = fh.read().strip().splitlines()[-1].split()
            rss.append(int(rank_rss))
            faults.append(int(minor))
            cpu += float(user) + float(system)
            # The share of its time a rank spends on a CPU (its threads together; with -j 1 and
            # binding, at most about 1): low values mean waiting for other ranks or for I/O.
            busy.append((float(user) + float(system)) / max(float(rank_wall), 0.01))
            os.remove(f)
        if len(rss) != np:
            raise BenchError(f"csp-prof-mpi -np {np}: peak memory of {len(rss)} of {np} ranks found")
        out = r.stdout
        res = {"wall": r.wall, "peak_rss_mib": max(rss) / 1024.0, "rss_per_rank_mib": [x / 1024.0 for x in rss],
               "cpu_busy_mean": sum(busy) / len(busy), "cpu_s": cpu,
               # Minor page faults of the ranks: the most, and the most over the fewest (ranks
               # that fault in fresh pages for every profile fall behind the others).
               "page_faults_max": max(faults), "page_fault_spread": max(faults) / max(min(faults), 1),
               "db_bytes": self.dir_bytes(db)}
        m = re.search(r"profiles per rank (\d+) to (\d+)", out)
        if m:  # the fewest and the most profiles of a process
            res["profiles_per_rank"] = [int(m.group(1)), int(m.group(2))]
        m = re.search(r"canonical CCT (\d+) nodes", out)
        res["canonical_nodes"] = int(m.group(1)) if m else None
        m = re.search(r"per-thread values (\d+) \(each stored by profile and by node\)", out)
        # Distinct non-zero per-thread values; each is stored in both orders.
        res["values_distinct"] = int(m.group(1)) if m else None
        m = re.search(r"HPCToolkit database .*?: .*?([\d.]+) MiB \(([\d.]+) bytes per value\)", out)
        if m:
            res["hpctoolkit_mib"], res["hpctoolkit_bytes_per_value"] = float(m.group(1)), float(m.group(2))
        m = re.search(r"time ([\d.]+) s:(.*)", out)
        if m:
            res["internal_s"] = float(m.group(1))
            # "name 1.23s" items separated by commas; names have spaces ("read + attribute").
            res["phases"] = {k.strip(): float(v)
                             for k, v in re.findall(r"([^,]+?) ([\d.]+)s(?:,|$)", m.group(2).strip())}
        # Several processes: per phase the slowest rank's seconds ("name 1.23s (rank 1)").
        m = re.search(r"slowest rank per phase:(.*)", out)
        if m:
            res["slowest_phases"] = {k.strip(): float(v) for k, v in
                                     re.findall(r"([^,]+?) ([\d.]+)s \(rank \d+\)(?:,|$)", m.group(1).strip())}
        return res

    @staticmethod
    def glob_prefix(prefix):
        d, base = os.path.split(prefix)
        return [os.path.join(d, f) for f in os.listdir(d) if f.startswith(base + ".")] if os.path.isdir(d) else []

    def prof_series(self, meas, info, nps, runs, label, keep_db_for=None):
        """runs x (floor, csp-prof-mpi -np P for P in nps), interleaved. Returns per-np figures."""
        self.floor(meas)  # warm the page cache
        raw = {np: [] for np in nps}
        floors = {np: [] for np in nps}
        for r in range(runs):
            for np in nps:
                floors[np].append(self.floor(meas))
                db = os.path.join(self.tmp, f"db-{label}-np{np}")
                log(f"{label}: run {r + 1}/{runs}, -np {np}")
                raw[np].append(self.prof(meas, np, db, f"{label}-np{np}"))
                if not (keep_db_for and np == max(nps) and r == runs - 1):
                    shutil.rmtree(db, ignore_errors=True)
                else:
                    self.databases[keep_db_for] = db
        result = {}
        for np in nps:
            rs = raw[np]
            walls = [x["wall"] for x in rs]
            dbb = rs[-1]["db_bytes"]
            distinct = rs[-1]["values_distinct"]
            fig = {
                "processes": np,
                "cores": self.cores_used(np),
                "wall_s": stat(walls, "s"),
                "floor_s": stat(floors[np], "s"),
                "time_over_floor": stat(ratios(walls, floors[np]), "x"),
                # CPU time of all processes (user + system), the figure that a loaded machine
                # disturbs least, and per non-zero per-thread value.
                "cpu_s": stat([x["cpu_s"] for x in rs], "s"),
                "cpu_over_floor": stat(ratios([x["cpu_s"] for x in rs], floors[np]), "x"),
                "cpu_ns_per_nonzero_value": stat([x["cpu_s"] * 1e9 / distinct for x in rs], "ns")
                if distinct else None,
                # Per non-zero value of the input (the statements' values csp-gen wrote: issue
                # 28's unit), not per stored value (each input value becomes about three).
                "cpu_ns_per_input_value": stat([x["cpu_s"] * 1e9 / info["nonzero_values"] for x in rs], "ns")
                if info.get("nonzero_values") else None,
                "profiles_per_s_per_core": stat([info["profiles"] / w / self.cores_used(np) for w in walls],
                                                "profiles/s"),
                "cct_nodes_per_s_per_core": stat([info["cct_nodes"] / w / self.cores_used(np) for w in walls],
                                                 "nodes/s"),
                "peak_rss_per_process_mib": stat([x["peak_rss_mib"] for x in rs], "MiB"),
                "cpu_busy_per_process": stat([x["cpu_busy_mean"] for x in rs], "CPU s / wall s"),
                "page_faults_per_process": stat([x["page_faults_max"] for x in rs], "minor faults"),
                "page_fault_spread": stat([x["page_fault_spread"] for x in rs], "most / fewest"),
                "database_mib": dbb / 1048576.0,
                "canonical_cct_nodes": rs[-1]["canonical_nodes"],
                "nonzero_values": distinct,
                "bytes_per_nonzero_value": dbb / distinct if distinct else None,
            }
            if all("internal_s" in x for x in rs):
                fig["internal_s"] = stat([x["internal_s"] for x in rs], "s")
                phases = {}
                for x in rs:
                    for k, v in x.get("phases", {}).items():
                        phases.setdefault(k, []).append(v)
                fig["phases_s"] = {k: statistics.median(v) for k, v in phases.items()}
            if rs and all("slowest_phases" in x for x in rs):
                slowest = {}
                for x in rs:
                    for k, v in x["slowest_phases"].items():
                        slowest.setdefault(k, []).append(v)
                fig["slowest_phases_s"] = {k: statistics.median(v) for k, v in slowest.items()}
            result[np] = fig
        if len(nps) > 1 and 1 in raw:
            base = [x["wall"] for x in raw[1]]
            for np in nps:
                if np != 1:
                    result[np]["speedup_over_np1"] = stat(ratios(base, [x["wall"] for x in raw[np]]), "x")
        return result

    # scenarios --------------------------------------------------------------------------------

    def scenario_postproc(self):
        sizes = []
        for profiles in self.p["profiles"]:
            meas, info = self.inputs(profiles, self.p["nodes"])
            per_np = self.prof_series(meas, info, self.p["nps"], self.p["runs"], f"p{profiles}",
                                      keep_db_for=profiles)
            sizes.append({"profiles": profiles, "input": info, "input_mib": info["bytes"] / 1048576.0,
                          "by_np": {str(k): v for k, v in per_np.items()}})
        slopes = {}
        xs = [s["profiles"] for s in sizes]
        for np in self.p["nps"]:
            figs = [s["by_np"][str(np)] for s in sizes]
            slopes[str(np)] = {
                "wall": loglog_slope(xs, [f["wall_s"]["median"] for f in figs]),
                "cpu": loglog_slope(xs, [f["cpu_s"]["median"] for f in figs]),
                "peak_rss": loglog_slope(xs, [f["peak_rss_per_process_mib"]["median"] for f in figs])}
        return {"baseline": "floor: cat of all input files to /dev/null from the page cache",
                "shape": {"threads_per_rank": self.p["threads"], "nodes": self.p["nodes"], "metrics": 2,
                          "workers_per_process": self.workers},
                "sizes": sizes, "loglog_slopes": slopes}

    def scenario_growth(self):
        out = {"baseline": "floor: cat of all input files to /dev/null from the page cache",
               "note": "slope of log(y) over log(x) by least squares on the medians: 1 = linear, 0 = flat"}
        post = self.report["scenarios"].get("postproc", {})
        if post.get("status") == "ok":
            by_np = {}
            for np in self.p["nps"]:
                xs = [s["profiles"] for s in post["sizes"]]
                ts = [s["by_np"][str(np)]["wall_s"]["median"] for s in post["sizes"]]
                ms = [s["by_np"][str(np)]["peak_rss_per_process_mib"]["median"] for s in post["sizes"]]
                fs = [s["by_np"][str(np)]["time_over_floor"]["median"] for s in post["sizes"]]
                it = [s["by_np"][str(np)].get("internal_s", {}).get("median") for s in post["sizes"]]
                by_np[str(np)] = {"profiles": xs, "wall_s": ts, "peak_rss_mib": ms, "time_over_floor": fs,
                                  "time_slope": loglog_slope(xs, ts), "memory_slope": loglog_slope(xs, ms),
                                  "internal_time_slope": loglog_slope(xs, it) if None not in it else None}
            out["over_profiles"] = by_np
        else:
            out["over_profiles"] = None
            out["over_profiles_note"] = "postproc did not run: no profile-count series"
        np = max(self.p["nps"])
        profiles = self.p["cct_profiles"]
        points = []
        for nodes in self.p["cct_nodes"]:
            meas, info = self.inputs(profiles, nodes)
            fig = self.prof_series(meas, info, [np], self.p["runs"], f"cct{nodes}")[np]
            points.append({"nodes_option": nodes, "input_cct_nodes": info["cct_nodes"],
                           "input_mib": info["bytes"] / 1048576.0, **fig})
        xs_in = [pt["input_cct_nodes"] for pt in points]
        xs_can = [pt["canonical_cct_nodes"] or 0 for pt in points]
        out["over_cct_size"] = {
            "profiles": profiles, "processes": np, "points": points,
            "time_slope_over_input_nodes": loglog_slope(xs_in, [pt["wall_s"]["median"] for pt in points]),
            "memory_slope_over_canonical_nodes": loglog_slope(
                xs_can, [pt["peak_rss_per_process_mib"]["median"] for pt in points]),
        }
        return out

    def largest_db(self):
        if self.databases:
            p = max(self.databases)
            return p, self.databases[p]
        profiles = max(self.p["profiles"])
        meas, info = self.inputs(profiles, self.p["nodes"])
        db = os.path.join(self.tmp, f"db-p{profiles}-np2")
        log(f"building the database of {profiles} profiles for views/diff")
        self.prof(meas, max(self.p["nps"]), db, f"p{profiles}-np2")
        self.databases[profiles] = db
        return profiles, db

    def interleaved(self, variants, runs, what):
        """runs x (the baseline, then every other variant); variants: [(name, cmd, env)], the
        baseline first. The order of the others rotates from round to round so that none always
        follows the same one. Returns {name: {"wall": [...], "cpu": [...], "rss": [...]}}."""
        res = {name: {"wall": [], "cpu": [], "rss": []} for name, _, _ in variants}
        for name, cmd, env in variants:  # warm-up: page cache, dynamic loader
            timed(cmd, f"{what} {name}", env=env)
        base, others = variants[0], variants[1:]
        for r in range(runs):
            k = r % len(others) if others else 0
            for name, cmd, env in [base] + others[k:] + others[:k]:
                x = timed(cmd, f"{what} {name}", env=env, rss=True)
                res[name]["wall"].append(x.wall)
                res[name]["cpu"].append(x.cpu)
                res[name]["rss"].append(x.maxrss_kb / 1024.0)
        return res

    def latency_table(self, res, base):
        rows = {}
        for name, v in res.items():
            rows[name] = {"wall_s": stat(v["wall"], "s"),
                          "over_baseline": stat(ratios(v["wall"], res[base]["wall"]), "x"),
                          "peak_rss_mib": stat(v["rss"], "MiB")}
        return rows

    def scenario_views(self):
        views = self.tool("launcher/csp-views", "lands with issue 6; ninja -C build csp-views")
        profiles, db = self.largest_db()
        node = self.drill_node(views, db)
        variants = [("info (baseline)", [views, "--info", db], self.env),
                    ("calling context", [views, db], self.env),
                    ("callers", [views, "--callers", db], self.env),
                    ("flat", [views, "--flat", db], self.env),
                    (f"node {node}", [views, "--node", str(node), db], self.env)]
        res = self.interleaved(variants, self.p["view_runs"], "csp-views")
        return {"baseline": "csp-views --info (open the database and read its metadata)",
                "database_profiles": profiles, "database_mib": self.dir_bytes(db) / 1048576.0,
                "drill_down_node": node, "commands": self.latency_table(res, "info (baseline)")}

    def drill_node(self, views, db):
        """The node of the drill-down: the deepest context the default Calling Context view shows
        (a hot call path, as a user would pick), else node 1."""
        try:
            r = timed([views, "--format", "json", db], "csp-views --format json", env=self.env, capture=True)
            nodes = json.loads(r.stdout).get("nodes", [])
        except (BenchError, ValueError, AttributeError):
            return 1
        best = None
        for n in nodes:
            node_id = n.get("cct_node", n.get("id"))
            if isinstance(node_id, int) and node_id > 0 and (best is None or n.get("depth", 0) > best[0]):
                best = (n.get("depth", 0), node_id)
        return best[1] if best else 1

    def scenario_overhead(self):
        app = self.tool("tests/apps/csp-app-compute", "lands with issue 3; ninja -C build csp-app-compute")
        run = self.tool("launcher/csp-run", "lands with issue 3; ninja -C build csp-run")
        units = str(self.p["overhead_units"])
        variants = [("uninstrumented", [app, units], self.env)]
        skipped = {}
        for rate in self.p["rates"]:
            meas = os.path.join(self.tmp, f"csp-run-{rate}")
            # csp-run execs the program (no extra process) and replaces the profile each run.
            variants.append((f"csp-run {rate}/s", [run, "-e", f"cpu-time@{rate}", "-o", meas, "--", app, units],
                             self.env))
        libprofiler = self.find_libprofiler()
        for rate in self.p["rates"]:
            if libprofiler is None:
                skipped[f"gperftools {rate}/s"] = "not run: libprofiler.so not found (package libgoogle-perftools-dev)"
                continue
            env = dict(self.env, LD_PRELOAD=libprofiler, CPUPROFILE=os.path.join(self.tmp, f"gperf-{rate}.prof"),
                       CPUPROFILE_FREQUENCY=str(rate))
            variants.append((f"gperftools {rate}/s", [app, units], env))
        perf = shutil.which("perf", path=self.env.get("PATH"))
        perf_reason = None if perf else "not run: perf not found (package linux-perf)"
        if perf:
            probe = subprocess.run([perf, "record", "-q", "-g", "-F", "200", "-o", os.path.join(self.tmp, "probe.data"),
                                    "--", "true"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            if probe.returncode != 0:
                first = (probe.stderr.strip().splitlines() or ["?"])[0]
                perf_reason = f"not run: perf record fails here: {first}"
        for rate in self.p["rates"]:
            if perf_reason:
                skipped[f"perf record -g {rate}/s"] = perf_reason
                continue
            variants.append((f"perf record -g {rate}/s",
                             [perf, "record", "-q", "-g", "-F", str(rate),
                              "-o", os.path.join(self.tmp, f"perf-{rate}.data"),
                              "--", app, units], self.env))
        res = self.interleaved(variants, self.p["overhead_runs"], "overhead")
        # An overhead is only meaningful if the profiler profiled: every one must have written output.
        for rate in self.p["rates"]:
            meas = os.path.join(self.tmp, f"csp-run-{rate}")
            if count_profiles(meas) == 0:
                raise BenchError(f"csp-run -e cpu-time@{rate} wrote no profile into {meas}")
            for name, out in [(f"gperftools {rate}/s", f"gperf-{rate}.prof"),
                              (f"perf record -g {rate}/s", f"perf-{rate}.data")]:
                path = os.path.join(self.tmp, out)
                if name in res and not (os.path.isfile(path) and os.path.getsize(path) > 0):
                    raise BenchError(f"{name} wrote no profile ({path})")
        rows = {}
        base = res["uninstrumented"]
        for name, v in res.items():
            rows[name] = {"wall_s": stat(v["wall"], "s"), "cpu_s": stat(v["cpu"], "s"),
                          "wall_over_uninstrumented": stat(ratios(v["wall"], base["wall"]), "x"),
                          "cpu_over_uninstrumented": stat(ratios(v["cpu"], base["cpu"]), "x"),
                          "peak_rss_mib": stat(v["rss"], "MiB")}
        return {"baseline": "the same app uninstrumented, first in every round",
                "app": f"csp-app-compute {units}", "variants": rows, "not_run": skipped,
                "note": "cpu = user + system time of the command and its children (perf's own process "
                        "included for perf record)",
                "churn": self.thread_churn_or_reason(run),
                "locks": self.lock_heavy_or_reason(run)}

    def lock_heavy_or_reason(self, run):
        try:
            return self.lock_heavy(run)
        except NotRun as e:
            return {"not_run": str(e)}

    def lock_heavy(self, run):
        """Lock-heavy threads (tests/apps/threads.cpp `heavy`): 4 threads take one mutex for a
        short critical section ITERATIONS times each, with some computation outside it. Under
        csp-run --idleness every acquisition goes through the mutex wrappers (trylock first;
        waits timed, lock blame collected). Target: CPU time within 5 % of csp-run without
        idleness accounting."""
        app = self.tool("tests/apps/csp-app-threads", "ninja -C build csp-app-threads")
        iterations = str(self.p["lock_iterations"])
        meas = os.path.join(self.tmp, "csp-run-locks")
        variants = [("uninstrumented", [app, "heavy", "4", iterations], self.env),
                    ("csp-run cpu-time@200", [run, "-o", meas + "-plain", "--", app, "heavy", "4", iterations],
                     self.env),
                    ("csp-run --idleness cpu-time@200",
                     [run, "--idleness", "-o", meas + "-idle", "--", app, "heavy", "4", iterations], self.env)]
        res = self.interleaved(variants, self.p["overhead_runs"], "lock-heavy")
        for d in (meas + "-plain", meas + "-idle"):
            if count_profiles(d) == 0:
                raise BenchError(f"lock-heavy: no profile in {d}")
        base = res["uninstrumented"]
        plain = res["csp-run cpu-time@200"]
        rows = {name: {"wall_s": stat(v["wall"], "s"), "cpu_s": stat(v["cpu"], "s"),
                       "wall_over_uninstrumented": stat(ratios(v["wall"], base["wall"]), "x"),
                       "cpu_over_uninstrumented": stat(ratios(v["cpu"], base["cpu"]), "x"),
                       "cpu_over_csp_run": stat(ratios(v["cpu"], plain["cpu"]), "x")} for name, v in res.items()}
        return {"app": f"csp-app-threads heavy 4 {iterations}", "variants": rows}

    def thread_churn_or_reason(self, run):
        try:
            return self.thread_churn(run)
        except NotRun as e:
            return {"not_run": str(e)}

    def thread_churn(self, run):
        """Thread churn: N short threads (about 70 us each, uninstrumented), one after the other;
        under csp-run every thread is registered, gets timers and an alternate signal stack, and
        hands its profile to the process's bundle writer when it ends."""
        hostile = self.tool("tests/apps/csp-app-hostile", "ninja -C build csp-app-hostile")
        threads = str(self.p["churn_threads"])
        iterations = "20000"
        meas = os.path.join(self.tmp, "csp-run-churn")
        variants = [("uninstrumented", [hostile, "threads", threads, iterations], self.env),
                    ("csp-run cpu-time@200", [run, "-o", meas, "--", hostile, "threads", threads, iterations],
                     self.env)]
        res = self.interleaved(variants, self.p["overhead_runs"], "thread churn")
        # Every run (the warm-up included) adds its own profiles: file names carry the pid.
        written = count_profiles(meas)
        per_run = int(threads) + 1
        if written == 0 or written % per_run != 0:
            raise BenchError(f"thread churn: {written} profiles in {meas}, not a multiple of {per_run}")
        written = per_run
        base = res["uninstrumented"]
        rows = {name: {"wall_s": stat(v["wall"], "s"), "cpu_s": stat(v["cpu"], "s"),
                       "wall_over_uninstrumented": stat(ratios(v["wall"], base["wall"]), "x"),
                       "cpu_over_uninstrumented": stat(ratios(v["cpu"], base["cpu"]), "x"),
                       "peak_rss_mib": stat(v["rss"], "MiB")} for name, v in res.items()}
        return {"app": f"csp-app-hostile threads {threads} {iterations}", "threads": int(threads),
                "profiles_written": written, "variants": rows}

    @staticmethod
    def find_libprofiler():
        for d in ["/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib",
                  "/usr/local/lib"]:
            for n in ["libprofiler.so", "libprofiler.so.0"]:
                if os.path.exists(os.path.join(d, n)):
                    return os.path.join(d, n)
        return None

    def scenario_diff(self):
        diff = self.tool("launcher/csp-diff", "lands with issue 7; ninja -C build csp-diff")
        views = self.tool("launcher/csp-views", "the baseline needs csp-views (issue 6)")
        if len(self.databases) < 2:
            for profiles in sorted(self.p["profiles"])[-2:]:
                if profiles not in self.databases:
                    meas, _ = self.inputs(profiles, self.p["nodes"])
                    db = os.path.join(self.tmp, f"db-p{profiles}-np2")
                    log(f"building the database of {profiles} profiles for diff")
                    self.prof(meas, max(self.p["nps"]), db, f"p{profiles}-np2")
                    self.databases[profiles] = db
        small, large = sorted(self.databases)[-2:]
        a, b = self.databases[small], self.databases[large]
        out_db = os.path.join(self.tmp, "diff-db")
        both_info = ["sh", "-c", '"$0" --info "$1" && "$0" --info "$2"', views, a, b]
        variants = [("info of both (baseline)", both_info, self.env),
                    ("csp-diff --weak (report)", [diff, "--weak", a, b], self.env),
                    ("csp-diff --weak -o (result database)", [diff, "--weak", a, b, "-o", out_db, "--force"], self.env)]
        res = self.interleaved(variants, self.p["view_runs"], "csp-diff")
        return {"baseline": "csp-views --info on both databases",
                "runs_compared": [small, large], "commands": self.latency_table(res, "info of both (baseline)")}

    def scenario_dbwrite(self):
        bench = self.tool("tests/bench/db_write_bench", "ninja -C build db_write_bench")
        s = self.p["dbwrite"]
        walls, copies, bpv, rss, cpus = [], [], [], [], []
        for r in range(self.p["runs"]):
            d = os.path.join(self.tmp, "dbwrite")
            shutil.rmtree(d, ignore_errors=True)
            os.makedirs(d)
            x = timed([bench, "--profiles", str(s["profiles"]), "--nodes", str(s["nodes"]), "--writers",
                       str(s["writers"]), "--dir", d, "--keep"], "db_write_bench", env=self.env, capture=True,
                      rss=True)
            m = re.search(r"wall time\s+([\d.]+) s", x.stdout)
            b = re.search(r"both orders\s+([\d.]+) bytes/value", x.stdout)
            k = re.search(r"kept (\S+)", x.stdout)
            cpu = re.search(r"CPU time\s+([\d.]+) s", x.stdout)
            if cpu:
                cpus.append(float(cpu.group(1)))
            if not (m and b and k):
                raise BenchError("db_write_bench: unexpected output (no wall time, bytes/value or kept path)")
            copy = os.path.join(self.tmp, "dbwrite-copy")
            shutil.rmtree(copy, ignore_errors=True)
            copy_cmd = ["sh", "-c", 'cp -r "$1" "$2" && find "$2" -type f -exec sync {} +', "sh", k.group(1), copy]
            copies.append(timed(copy_cmd, "cp -r database", env=self.env).wall)
            walls.append(float(m.group(1)))
            bpv.append(float(b.group(1)))
            rss.append(x.maxrss_kb / 1024.0)  # the largest of the root and its writers
            shutil.rmtree(copy, ignore_errors=True)
            shutil.rmtree(d, ignore_errors=True)
        out = {"baseline": "cp -r of the written database and fsync of every copied file (sync FILE...)", "shape": s,
               "write_s": stat(walls, "s"), "copy_s": stat(copies, "s"),
               "write_over_copy": stat(ratios(walls, copies), "x"),
               "bytes_per_value_both_orders": stat(bpv, "bytes")}
        out["peak_rss_mib"] = stat(rss, "MiB")
        if len(cpus) == len(walls):
            out["cpu_s"] = stat(cpus, "s")
        return out

    def export(self, db, np, out, label):
        """csp-export DB --hpctoolkit OUT under mpirun, each rank under GNU time (peak RSS)."""
        export = self.tool("launcher/csp-export", "ninja -C build csp-export")
        stamp = os.path.join(self.tmp, f"rank-time-{label}")
        wrap = ['sh', '-c', 'f="$1"; shift; exec "$0" -f "%e %M %U %S %R" -o "$f.${OMPI_COMM_WORLD_RANK:-0}" "$@"',
                GNU_TIME, stamp]
        r = timed(self.mpirun(np) + wrap + [export, db, "--hpctoolkit", out, "--force"], f"csp-export -np {np}",
                  env=self.env, capture=True)
        rss = []
        for f in self.glob_prefix(stamp):
            with open(f) as fh:
                rss.append(int(fh.read().strip().splitlines()[-1].split()[1]))
            os.remove(f)
        m = re.search(r"\(([\d.]+) bytes per value\)", r.stdout)
        return {"wall": r.wall, "peak_rss_mib": max(rss) / 1024.0 if rss else None,
                "bytes": self.dir_bytes(out), "bytes_per_value": float(m.group(1)) if m else None}

    def scenario_hpctoolkit(self):
        """The HPCToolkit database of the postproc shape: csp-prof-mpi alone (the baseline),
        csp-prof-mpi --hpctoolkit, and csp-export of the database, interleaved per round."""
        self.tool("launcher/csp-export", "ninja -C build csp-export")
        profiles = self.p["hpctoolkit_profiles"]
        meas, info = self.inputs(profiles, self.p["nodes"])
        self.floor(meas)
        by_np = {}
        for np in self.p["nps"]:
            base, both, exp = [], [], []
            db = os.path.join(self.tmp, f"hpctk-db-np{np}")
            out = os.path.join(self.tmp, f"hpctk-out-np{np}")
            for r in range(self.p["runs"]):
                log(f"hpctoolkit: run {r + 1}/{self.p['runs']}, -np {np}")
                base.append(self.prof(meas, np, db, f"hpctk-base-np{np}"))
                both.append(self.prof(meas, np, db, f"hpctk-both-np{np}", ("--hpctoolkit", out)))
                exp.append(self.export(db, np, out, f"hpctk-export-np{np}"))
            bw, ww, ew = [x["wall"] for x in base], [x["wall"] for x in both], [x["wall"] for x in exp]
            by_np[str(np)] = {
                "processes": np,
                "prof_s": stat(bw, "s"),
                "prof_with_hpctoolkit_s": stat(ww, "s"),
                "export_s": stat(ew, "s"),
                "with_hpctoolkit_over_prof": stat(ratios(ww, bw), "x"),
                "export_over_prof": stat(ratios(ew, bw), "x"),
                "hpctoolkit_phase_s": stat([x.get("phases", {}).get("hpctoolkit", 0.0) for x in both], "s"),
                "prof_peak_rss_mib": stat([x["peak_rss_mib"] for x in base], "MiB"),
                "prof_with_hpctoolkit_peak_rss_mib": stat([x["peak_rss_mib"] for x in both], "MiB"),
                "export_peak_rss_mib": stat([x["peak_rss_mib"] for x in exp if x["peak_rss_mib"]], "MiB"),
                "csp_database_mib": base[-1]["db_bytes"] / 1048576.0,
                "hpctoolkit_mib": exp[-1]["bytes"] / 1048576.0,
                "hpctoolkit_bytes_per_value": exp[-1]["bytes_per_value"],
            }
            shutil.rmtree(db, ignore_errors=True)
            shutil.rmtree(out, ignore_errors=True)
        return {"baseline": "csp-prof-mpi alone (the CSP database), interleaved with --hpctoolkit and csp-export",
                "shape": {"profiles": profiles, "nodes": self.p["nodes"], "metrics": 2}, "input": info,
                "by_np": by_np}

    def hpcrun_inputs(self, profiles, nodes):
        """`profiles` *.hpcrun files of `nodes` nodes and 2 metrics, and the same profiles in CSP's
        format (tests/bench/hpcrun_bench --write), made once and cached; returns (directory, info)
        with the two formats in its hpcrun/ and csp/."""
        bench = self.tool("tests/bench/hpcrun_bench", "ninja -C build hpcrun_bench")
        d = os.path.join(self.work, "inputs", f"hpcrun-p{profiles}-n{nodes}")
        marker = d + ".json"
        if os.path.isfile(marker) and not self.args.regenerate:
            with open(marker) as f:
                info = json.load(f)
            found = [sum(1 for e in os.scandir(os.path.join(d, sub)) if e.name.endswith(ext))
                     if os.path.isdir(os.path.join(d, sub)) else 0 for sub, ext in (("hpcrun", ".hpcrun"), ("csp", ".cspprof"))]
            if found == [profiles, profiles]:
                return d, info
            log(f"cached input {d} holds {found} profiles, expected {profiles} of each format: regenerating")
        # ~33 bytes per (profile, node) in each format, and room for the databases.
        need = profiles * nodes * 33 * 4
        free = shutil.disk_usage(self.work).free
        if free < need:
            raise BenchError(f"{self.work}: {free / 2**30:.1f} GiB free, about {need / 2**30:.1f} GiB needed for "
                             f"{profiles} hpcrun profiles of {nodes} nodes, their CSP copies and databases (--work DIR)")
        if os.path.exists(marker):
            os.remove(marker)
        log(f"writing {profiles} hpcrun profiles of {nodes} nodes and their CSP copies")
        timed([bench, "--write", d, "--profiles", str(profiles), "--nodes", str(nodes)], "hpcrun_bench --write",
              env=self.env)
        info = {"profiles": profiles, "nodes": nodes, "hpcrun_bytes": self.dir_bytes(os.path.join(d, "hpcrun")),
                "csp_bytes": self.dir_bytes(os.path.join(d, "csp"))}
        with open(marker, "w") as f:
            json.dump(info, f, indent=1)
        return d, info

    def scenario_balance(self):
        if self.cores < 2 or self.workers != 1:
            raise NotRun(f"needs 2 cores and one worker per process (here {self.cores} cores, -j {self.workers})")
        if not shutil.which("taskset", path=self.env.get("PATH")):
            raise NotRun("tool missing: taskset (package util-linux)")
        profiles = min(max(self.p["profiles"]), 4096)
        meas, info = self.inputs(profiles, self.p["nodes"])
        hog_core = sorted(os.sched_getaffinity(0))[1]  # mpirun --bind-to core puts rank 1 there
        self.floor(meas)  # warm the page cache
        states = {}
        # Tiny mode (the smoke test, beside the other tests): only the hog, so as not to take a
        # core from them for long.
        for state in ("hog on rank 1's core",) if self.mode == "tiny" else ("idle", "hog on rank 1's core"):
            hog = None
            if state != "idle":
                hog = subprocess.Popen(["taskset", "-c", str(hog_core), "yes"], stdout=subprocess.DEVNULL)
            try:
                raw = {"balanced": [], "static": []}
                variants = [("static", ["--no-balance"]), ("balanced", [])]
                for r in range(self.p["runs"]):
                    for name, extra in variants if r % 2 == 0 else variants[::-1]:  # alternating order
                        log(f"balance: {state}, run {r + 1}/{self.p['runs']}, {name}")
                        db = os.path.join(self.tmp, "db-balance")
                        raw[name].append(self.prof(meas, 2, db, "balance", extra=extra))
                        shutil.rmtree(db, ignore_errors=True)
            finally:
                if hog:
                    hog.kill()
                    hog.wait()
            walls = {k: [x["wall"] for x in v] for k, v in raw.items()}
            states[state] = {
                "wall_s": {k: stat(v, "s") for k, v in walls.items()},
                "balanced_over_static": stat(ratios(walls["balanced"], walls["static"]), "x"),
                "profiles_per_rank": {k: [x.get("profiles_per_rank") for x in v] for k, v in raw.items()},
                "slowest_phases_s": {k: {p: statistics.median(x["slowest_phases"][p] for x in v)
                                         for p in ("read + attribute", "metrics")
                                         if all(p in x.get("slowest_phases", {}) for x in v)}
                                     for k, v in raw.items()}}
        return {"baseline": "csp-prof-mpi --no-balance (static shares) in the same machine state",
                "profiles": profiles, "input_mib": info["bytes"] / 1048576.0, "hog_core": hog_core,
                "states": states}

    def scenario_hpcrun(self):
        """csp-prof-mpi on *.hpcrun files against the same profiles in CSP's format (the baseline),
        and with --hpctoolkit, interleaved per round, at two profile counts."""
        np = max(self.p["nps"])
        sizes = []
        for profiles in self.p["hpcrun_profiles"]:
            d, info = self.hpcrun_inputs(profiles, self.p["nodes"])
            runs = {"csp": [], "hpcrun": [], "hpcrun_hpctoolkit": []}
            db = os.path.join(self.tmp, f"hpcrun-db-p{profiles}")
            out = os.path.join(self.tmp, f"hpcrun-hpctk-p{profiles}")
            for r in range(self.p["runs"]):
                log(f"hpcrun: {profiles} profiles, run {r + 1}/{self.p['runs']}, -np {np}")
                runs["csp"].append(self.prof(os.path.join(d, "csp"), np, db, f"hpcrun-csp-p{profiles}"))
                runs["hpcrun"].append(self.prof(os.path.join(d, "hpcrun"), np, db, f"hpcrun-p{profiles}"))
                runs["hpcrun_hpctoolkit"].append(self.prof(os.path.join(d, "hpcrun"), np, db,
                                                           f"hpcrun-hpctk-p{profiles}", ("--hpctoolkit", out)))
                shutil.rmtree(db, ignore_errors=True)
                shutil.rmtree(out, ignore_errors=True)
            wall = {k: [x["wall"] for x in v] for k, v in runs.items()}
            cpu = {k: [x["cpu_s"] for x in v] for k, v in runs.items()}
            sizes.append({
                "profiles": profiles, "hpcrun_input_mib": info["hpcrun_bytes"] / 1048576.0,
                "csp_input_mib": info["csp_bytes"] / 1048576.0,
                "wall_s": {k: stat(v, "s") for k, v in wall.items()},
                "cpu_s": {k: stat(v, "s") for k, v in cpu.items()},
                "peak_rss_per_process_mib": {k: stat([x["peak_rss_mib"] for x in v], "MiB") for k, v in runs.items()},
                "hpcrun_over_csp": stat(ratios(wall["hpcrun"], wall["csp"]), "x"),
                "hpcrun_over_csp_cpu": stat(ratios(cpu["hpcrun"], cpu["csp"]), "x"),
                # What writing the HPCToolkit database adds to the hpcrun run, in per cent.
                "hpctoolkit_added_pct": stat([100.0 * (w / b - 1.0) for w, b in
                                              zip(wall["hpcrun_hpctoolkit"], wall["hpcrun"])], "%"),
                "hpctoolkit_added_cpu_pct": stat([100.0 * (w / b - 1.0) for w, b in
                                                  zip(cpu["hpcrun_hpctoolkit"], cpu["hpcrun"])], "%"),
            })
        xs = [x["profiles"] for x in sizes]
        return {"baseline": f"csp-prof-mpi -np {np} on the same profiles in CSP's format (hpcrun_bench --write), "
                            "interleaved with the hpcrun runs",
                "shape": {"nodes": self.p["nodes"], "metrics": 2, "processes": np,
                          "workers_per_process": self.workers},
                "sizes": sizes,
                "peak_rss_loglog_slope": {k: loglog_slope(xs, [x["peak_rss_per_process_mib"][k]["median"]
                                                               for x in sizes]) for k in sizes[0]["wall_s"]}}

    # driver -----------------------------------------------------------------------------------

    def machine(self):
        info = {"hostname": platform.node(), "kernel": platform.release(), "cores": self.cores,
                "cpus_online": os.cpu_count(), "python": platform.python_version()}
        try:
            with open("/proc/meminfo") as f:
                info["mem_total_gib"] = int(f.readline().split()[1]) / 1048576.0
            with open("/proc/cpuinfo") as f:
                m = re.search(r"model name\s*:\s*(.*)", f.read())
                info["cpu"] = m.group(1) if m else None
        except OSError:
            pass
        return info

    def run(self):
        wanted = self.args.scenarios.split(",") if self.args.scenarios else SCENARIOS
        for w in wanted:
            if w not in SCENARIOS:
                raise SystemExit(f"bench: error: --scenarios: unknown scenario '{w}' (known: {', '.join(SCENARIOS)})")
        for d in (self.work, self.out):
            os.makedirs(d, exist_ok=True)
        os.makedirs(self.tmp)
        commit = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
        self.report.update({
            "suite": "csp-bench", "mode": self.mode, "parameters": self.p,
            "started_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "commit": commit.stdout.strip() or None, "build": self.build, "machine": self.machine(),
            "load_average_start": os.getloadavg(), "reference": REFERENCE})
        t0 = time.monotonic()
        try:
            for name in SCENARIOS:
                if name not in wanted:
                    continue
                log(f"== {name}")
                s0 = time.monotonic()
                try:
                    body = getattr(self, f"scenario_{name}")()
                    entry = {"status": "ok", **body}
                except NotRun as e:
                    if e.tool and e.tool in self.expect:
                        entry = {"status": "failed", "reason": f"{e} (a tool this build has: --expect)"}
                        log(f"{name}: FAILED: {entry['reason']}")
                    else:
                        entry = {"status": "not run", "reason": str(e)}
                        log(f"{name}: not run: {e}")
                except BenchError as e:
                    entry = {"status": "failed", "reason": str(e)}
                    log(f"{name}: FAILED: {e}")
                entry["seconds"] = time.monotonic() - s0
                self.report["scenarios"][name] = entry
        finally:
            if self.args.keep:
                log(f"kept temporary data in {self.tmp}")
            else:
                shutil.rmtree(self.tmp, ignore_errors=True)
        self.report["load_average_end"] = os.getloadavg()
        self.report["seconds"] = time.monotonic() - t0
        problems = check(self.report)
        self.report["problems"] = problems
        with open(os.path.join(self.out, "report.json"), "w") as f:
            json.dump(self.report, f, indent=1)
        with open(os.path.join(self.out, "report.md"), "w") as f:
            f.write(markdown(self.report))
        log(f"report: {os.path.join(self.out, 'report.md')} and report.json ({self.report['seconds']:.0f} s)")
        for p in problems:
            log(f"problem: {p}")
        return 1 if problems else 0


def numbers(x):
    """Every number in a JSON value (to check that a scenario produced figures)."""
    if isinstance(x, bool):
        return []
    if isinstance(x, (int, float)):
        return [x]
    if isinstance(x, dict):
        return [n for v in x.values() for n in numbers(v)]
    if isinstance(x, list):
        return [n for v in x for n in numbers(v)]
    return []


def medians(x):
    if isinstance(x, dict):
        here = [x["median"]] if "median" in x and "runs" in x else []
        return here + [m for k, v in x.items() if k != "runs" for m in medians(v)]
    if isinstance(x, list):
        return [m for v in x for m in medians(v)]
    return []


def check(report):
    """What the smoke test asserts: every scenario ran (or was not run for a stated reason) and
    every scenario that ran produced finite figures. Never a speed."""
    problems = []
    for name, s in report["scenarios"].items():
        if s["status"] == "failed":
            problems.append(f"{name}: failed: {s['reason'].splitlines()[0]}")
        elif s["status"] == "ok":
            ms = medians(s)
            if not ms:
                problems.append(f"{name}: no figures")
            bad = [m for m in ms if not isinstance(m, (int, float)) or not math.isfinite(m)]
            if bad:
                problems.append(f"{name}: {len(bad)} figure(s) not finite")
    return problems


# ---------------------------------------------------------------------------------------------
# Markdown


def fmt(x, digits=3):
    if x is None:
        return "–"
    if isinstance(x, float) and not math.isfinite(x):
        return "nan"
    if isinstance(x, int):
        return f"{x:,}"
    a = abs(x)
    if a >= 1e6:
        return f"{x:,.0f}"
    if a >= 100:
        return f"{x:.0f}"
    if a >= 10:
        return f"{x:.1f}"
    return f"{x:.{digits - 1}f}" if a >= 1 else f"{x:.{digits}f}"


def mmm(s):
    """'median (min–max)' of a stat."""
    if s is None:
        return "–"
    return f"{fmt(s['median'])} ({fmt(s['min'])}–{fmt(s['max'])})"


def table(head, rows):
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(" --- " for _ in head) + "|"]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def reference_table(post, ref):
    """CSP's measured figures beside the targets (docs/benchmarks.md) and hpcprof's figures (which
    were measured elsewhere, not by this run)."""
    by = {size["profiles"]: size for size in post["sizes"]}
    h, t = ref["hpcprof"], ref["targets"]
    rows = []

    def np2(p):
        return by[p]["by_np"].get("2") if p in by else None

    if np2(1024):
        w = np2(1024)["wall_s"]["median"]
        rows.append(["1,024 profiles, -np 2: wall s", fmt(w), "",
                     f"{h['profiles_1024_s']} s (CSP × {fmt(h['profiles_1024_s'] / w)})"])
    if np2(4096):
        f = np2(4096)
        w = f["wall_s"]["median"]
        rows.append(["4,096 profiles, -np 2: wall s", fmt(w), f"≤ {t['profiles_4096_np2_s']} s",
                     f"{h['profiles_4096_s']} s (CSP × {fmt(h['profiles_4096_s'] / w)})"])
        rows.append(["4,096 profiles, -np 2: time / floor", fmt(f["time_over_floor"]["median"]), "",
                     f"{fmt(h['profiles_4096_s'] / h['floor_s_4096'])} ({h['profiles_4096_s']} s / "
                     f"{h['floor_s_4096']} s to read {h['input_mb_4096']} MB)"])
        rows.append(["4,096 profiles: database MiB", fmt(f["database_mib"]), "",
                     f"{h['database_gb']} GB"])
    if np2(16384):
        rows.append(["16,384 profiles, -np 2: wall s", fmt(np2(16384)["wall_s"]["median"]),
                     f"≤ {t['profiles_16384_np2_s']} s", ""])
    peaks = [f["peak_rss_per_process_mib"]["max"] for size in post["sizes"] for f in size["by_np"].values()]
    bpv = [f["bytes_per_nonzero_value"] for size in post["sizes"] for f in size["by_np"].values()
           if f["bytes_per_nonzero_value"]]
    if peaks:
        rows.append(["largest peak memory of a process, MiB", fmt(max(peaks)), f"≤ {t['peak_gb_per_process']} GB",
                     f"{h['peak_gb']} GB"])
    if bpv:
        rows.append(["largest bytes per non-zero per-thread value", fmt(max(bpv)), f"≤ {t['bytes_per_value']}", ""])
    if not rows:
        return ""
    return ("Beside the targets of docs/benchmarks.md (the target is CSP's; hpcprof's figures were measured on this kind of "
            "machine, not by this run; no target is checked here):\n\n" +
            table(["figure", "CSP, this run (median)", "target", "hpcprof (reference)"], rows))


def markdown(rep):
    m = rep["machine"]
    out = [f"# CSP benchmarks ({rep['mode']} mode)\n",
           f"{rep['started_utc']}, commit {rep.get('commit')}, {m.get('cpu')}, {m['cores']} cores, "
           f"{m.get('mem_total_gib', 0):.0f} GiB; load average at start "
           f"{', '.join(f'{x:.1f}' for x in rep['load_average_start'])}, at end "
           f"{', '.join(f'{x:.1f}' for x in rep['load_average_end'])}; {rep['seconds']:.0f} s in all.\n",
           "Figures are median (min–max) over the runs; a ratio to a baseline is taken within each round "
           "(the baseline runs first in every round), then the median over the rounds. Nothing here is "
           "compared to a target automatically.\n"]
    sc = rep["scenarios"]

    def header(name, title):
        s = sc.get(name)
        out.append(f"\n## {title}\n")
        if s is None:
            out.append("not selected\n")
            return None
        if s["status"] != "ok":
            first, _, rest = s["reason"].partition("\n")
            out.append(f"**{s['status']}**: {first}\n")
            if rest:  # the command, as a code block
                out.append("".join(f"    {line.strip()}\n" for line in rest.splitlines()))
            return None
        out.append(f"Baseline: {s['baseline']}.\n")
        return s

    s = header("postproc", "Post-processing throughput and scaling (csp-prof-mpi)")
    if s:
        rows = []
        for size in s["sizes"]:
            for np, f in size["by_np"].items():
                rows.append([f"{size['profiles']:,}", fmt(size["input_mib"]), np, mmm(f["wall_s"]),
                             mmm(f["floor_s"]), mmm(f["time_over_floor"]), mmm(f["cpu_s"]),
                             mmm(f["cpu_over_floor"]), mmm(f.get("cpu_ns_per_input_value")),
                             mmm(f.get("cpu_ns_per_nonzero_value")),
                             mmm(f.get("speedup_over_np1")),
                             fmt(f["profiles_per_s_per_core"]["median"]),
                             fmt(f["cct_nodes_per_s_per_core"]["median"]),
                             mmm(f["peak_rss_per_process_mib"]), fmt(f["cpu_busy_per_process"]["median"]),
                             fmt(f.get("page_faults_per_process", {}).get("median")),
                             fmt(f.get("page_fault_spread", {}).get("median")),
                             fmt(f["database_mib"]),
                             fmt(f["bytes_per_nonzero_value"])])
        out.append(table(["profiles", "input MiB", "-np", "wall s", "floor s", "time / floor", "CPU s (all processes)",
                          "CPU / floor", "CPU ns per non-zero input value", "CPU ns per stored value",
                          "speed-up vs np 1",
                          "profiles/s/core", "CCT nodes/s/core", "peak MiB per process", "CPU busy per process",
                          "page faults per process (most)", "page faults: most / fewest process", "database MiB",
                          "bytes per stored value"], rows))
        phases = []
        for size in s["sizes"]:
            for np, f in size["by_np"].items():
                for k in f.get("phases_s", {}):
                    if k not in phases:
                        phases.append(k)
        if phases:
            out.append("csp-prof-mpi's own time and phases (rank 0's summary; medians, s):\n")
            rows = [[f"{size['profiles']:,}", np, fmt(f.get("internal_s", {}).get("median"))] +
                    [fmt(f.get("phases_s", {}).get(k)) for k in phases]
                    for size in s["sizes"] for np, f in size["by_np"].items()]
            out.append(table(["profiles", "-np", "total"] + phases, rows))
            rows = [[f"{size['profiles']:,}", np] + [fmt(f["slowest_phases_s"].get(k)) for k in phases]
                    for size in s["sizes"] for np, f in size["by_np"].items() if f.get("slowest_phases_s")]
            if rows:
                out.append("The slowest rank's time per phase (medians, s; the other ranks wait for it at the next "
                           "collective step, in unify structure and combine + metadata):\n")
                out.append(table(["profiles", "-np"] + phases, rows))
        if s.get("loglog_slopes"):
            out.append("Log-log slopes over the profile count (1 = linear, 0 = flat):\n")
            out.append(table(["-np", "wall time", "CPU time", "peak MiB per process"],
                             [[np, fmt(g["wall"]), fmt(g["cpu"]), fmt(g["peak_rss"])]
                              for np, g in s["loglog_slopes"].items()]))
        out.append(reference_table(s, rep["reference"]))

    s = header("growth", "Growth: time and memory against the profile count and the CCT size")
    if s:
        out.append(f"{s['note']}.\n\n")
        if s.get("over_profiles"):
            rows = [[np, ", ".join(f"{x:,}" for x in g["profiles"]), ", ".join(fmt(t) for t in g["wall_s"]),
                     fmt(g["time_slope"]), fmt(g.get("internal_time_slope")),
                     ", ".join(fmt(x) for x in g["peak_rss_mib"]), fmt(g["memory_slope"])]
                    for np, g in s["over_profiles"].items()]
            out.append(table(["-np", "profiles", "wall s", "time slope", "time slope (own total, no mpirun start-up)",
                              "peak MiB per process", "memory slope"], rows))
        c = s["over_cct_size"]
        out.append(f"\nOver the CCT size ({c['profiles']:,} profiles, -np {c['processes']}):\n\n")
        rows = [[fmt(p["input_cct_nodes"] / c["profiles"]), fmt(p["canonical_cct_nodes"]), fmt(p["input_mib"]),
                 mmm(p["wall_s"]), mmm(p["time_over_floor"]), mmm(p["peak_rss_per_process_mib"])] for p in c["points"]]
        out.append(table(["CCT nodes per profile", "canonical CCT nodes", "input MiB", "wall s", "time / floor",
                          "peak MiB per process"], rows))
        out.append(f"\nTime slope over input CCT nodes {fmt(c['time_slope_over_input_nodes'])}; memory slope over "
                   f"canonical CCT nodes {fmt(c['memory_slope_over_canonical_nodes'])}.\n")

    for name, title in [("views", "Views latency (csp-views)"), ("diff", "Scaling-loss analysis latency (csp-diff)")]:
        s = header(name, title)
        if s:
            if name == "views":
                out.append(f"Database of {s['database_profiles']:,} profiles, {fmt(s['database_mib'])} MiB.\n\n")
            else:
                out.append(f"Databases of {s['runs_compared'][0]:,} and {s['runs_compared'][1]:,} profiles.\n\n")
            rows = [[k, mmm(v["wall_s"]), mmm(v["over_baseline"]), mmm(v["peak_rss_mib"])]
                    for k, v in s["commands"].items()]
            out.append(table(["command", "wall s", "/ baseline", "peak MiB"], rows))

    s = header("overhead", "Measurement overhead (compute-bound app)")
    if s:
        out.append(f"App: `{s['app']}`; {s['note']}.\n\n")
        rows = [[k, mmm(v["wall_s"]), mmm(v["wall_over_uninstrumented"]), mmm(v["cpu_s"]),
                 mmm(v["cpu_over_uninstrumented"]), mmm(v.get("peak_rss_mib"))] for k, v in s["variants"].items()]
        rows += [[k, why, "", "", "", ""] for k, why in s["not_run"].items()]
        out.append(table(["variant", "wall s", "wall / uninstrumented", "cpu s", "cpu / uninstrumented",
                          "peak MiB (largest process)"], rows))
        c = s.get("churn")
        if c and "not_run" in c:
            out.append(f"\nThread churn: {c['not_run']}.\n")
        elif c:
            out.append(f"\nThread churn: `{c['app']}` ({c['threads']:,} threads one after the other, "
                       f"{c['profiles_written']:,} profiles written per run).\n\n")
            rows = [[k, mmm(v["wall_s"]), mmm(v["wall_over_uninstrumented"]), mmm(v["cpu_s"]),
                     mmm(v["cpu_over_uninstrumented"])] for k, v in c["variants"].items()]
            out.append(table(["variant", "wall s", "wall / uninstrumented", "cpu s", "cpu / uninstrumented"], rows))
        c = s.get("locks")
        if c and "not_run" in c:
            out.append(f"\nLock-heavy threads: {c['not_run']}.\n")
        elif c:
            out.append(f"\nLock-heavy threads: `{c['app']}` (idleness accounting: mutex wrappers, lock blame).\n\n")
            rows = [[k, mmm(v["wall_s"]), mmm(v["wall_over_uninstrumented"]), mmm(v["cpu_s"]),
                     mmm(v["cpu_over_uninstrumented"]), mmm(v["cpu_over_csp_run"])] for k, v in c["variants"].items()]
            out.append(table(["variant", "wall s", "wall / uninstrumented", "cpu s", "cpu / uninstrumented",
                              "cpu / csp-run"], rows))

    s = header("dbwrite", "Database writer alone (db_write_bench)")
    if s:
        sh = s["shape"]
        out.append(f"{sh['profiles']:,} profiles x {sh['nodes']:,} nodes x 2 metrics, {sh['writers']} writers.\n\n")
        out.append(table(["write s", "CPU s (all processes)", "copy s", "write / copy", "bytes per value (both orders)",
                          "peak MiB"],
                         [[mmm(s["write_s"]), mmm(s.get("cpu_s")), mmm(s["copy_s"]), mmm(s["write_over_copy"]),
                           mmm(s["bytes_per_value_both_orders"]), mmm(s.get("peak_rss_mib"))]]))

    s = header("hpctoolkit", "HPCToolkit database (csp-prof-mpi --hpctoolkit, csp-export)")
    if s:
        sh = s["shape"]
        out.append(f"{sh['profiles']:,} profiles x ~{sh['nodes']:,} nodes x 2 metrics; baseline: csp-prof-mpi alone.\n\n")
        rows = [[k, mmm(v["prof_s"]), mmm(v["prof_with_hpctoolkit_s"]), mmm(v["with_hpctoolkit_over_prof"]),
                 mmm(v["export_s"]), mmm(v["export_over_prof"]), mmm(v["prof_peak_rss_mib"]),
                 mmm(v["export_peak_rss_mib"]), f"{v['csp_database_mib']:.1f}", f"{v['hpctoolkit_mib']:.1f}",
                 v["hpctoolkit_bytes_per_value"]] for k, v in s["by_np"].items()]
        out.append(table(["-np", "prof s", "prof --hpctoolkit s", "ratio", "csp-export s", "export / prof",
                          "prof peak MiB", "export peak MiB", "CSP db MiB", "HPCToolkit MiB", "bytes/value"], rows))

    s = header("hpcrun", "HPCToolkit measurements as input (csp-prof-mpi on *.hpcrun)")
    if s:
        sh = s["shape"]
        out.append(f"~{sh['nodes']:,} nodes x 2 metrics per profile, -np {sh['processes']}; the ratio is hpcrun / "
                   "CSP format; --hpctoolkit: what writing the HPCToolkit database adds to the hpcrun run.\n\n")
        rows = [[f"{x['profiles']:,}", f"{x['hpcrun_input_mib']:.1f}", f"{x['csp_input_mib']:.1f}",
                 mmm(x["wall_s"]["csp"]), mmm(x["wall_s"]["hpcrun"]), mmm(x["hpcrun_over_csp"]),
                 mmm(x["hpcrun_over_csp_cpu"]), mmm(x["wall_s"]["hpcrun_hpctoolkit"]), mmm(x["hpctoolkit_added_pct"]),
                 mmm(x["hpctoolkit_added_cpu_pct"]),
                 mmm(x["peak_rss_per_process_mib"]["csp"]), mmm(x["peak_rss_per_process_mib"]["hpcrun"]),
                 mmm(x["peak_rss_per_process_mib"]["hpcrun_hpctoolkit"])] for x in s["sizes"]]
        out.append(table(["profiles", "hpcrun MiB", "CSP MiB", "CSP-format s", "hpcrun s", "hpcrun / CSP",
                          "CPU hpcrun / CSP", "hpcrun --hpctoolkit s", "--hpctoolkit adds %", "adds % CPU",
                          "peak MiB/process CSP", "hpcrun", "hpcrun --hpctoolkit"], rows))
        sl = s["peak_rss_loglog_slope"]
        out.append(f"\nLog-log slope of peak memory per process over the profile count: CSP format "
                   f"{fmt(sl['csp'])}, hpcrun {fmt(sl['hpcrun'])}, hpcrun --hpctoolkit {fmt(sl['hpcrun_hpctoolkit'])} "
                   "(0: flat).\n")

    s = header("balance", "Balancing the read between neighbouring processes (csp-prof-mpi -np 2)")
    if s:
        out.append(f"{s['profiles']:,} profiles ({s['input_mib']:.0f} MiB); the ratio is balanced / --no-balance "
                   f"within each round; a hog is `yes` pinned to core {s['hog_core']} (rank 1's).\n\n")
        rows = []
        for state, x in s["states"].items():
            counts = x["profiles_per_rank"]["balanced"]
            rows.append([state, mmm(x["wall_s"]["static"]), mmm(x["wall_s"]["balanced"]), mmm(x["balanced_over_static"]),
                         ", ".join(f"{c[0]}–{c[1]}" for c in counts if c),
                         fmt(x["slowest_phases_s"]["static"].get("metrics")),
                         fmt(x["slowest_phases_s"]["balanced"].get("metrics"))])
        out.append(table(["cores", "--no-balance s", "balanced s", "balanced / static", "profiles per rank (balanced)",
                          "slowest metrics s: static", "balanced"], rows))

    if rep["problems"]:
        out.append("\n## Problems\n\n" + "\n".join(f"- {p}" for p in rep["problems"]) + "\n")
    return paragraphs("".join(x if x.endswith("\n") else x + "\n" for x in out))


def paragraphs(text):
    """One blank line between paragraphs, headings and tables (Markdown needs it around tables)."""
    lines, prev = [], None
    for line in text.splitlines():
        kind = None if not line.strip() else "table" if line.startswith("|") else "heading" if line.startswith("#") \
            else "text"
        if kind and prev and (kind != "table" or prev != "table") and lines and lines[-1] != "":
            lines.append("")
        if kind is None:
            if lines and lines[-1] != "":
                lines.append("")
        else:
            lines.append(line)
        prev = kind or prev
    return "\n".join(lines).strip() + "\n"


def int_list(text):
    try:
        return [int(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}': expected comma-separated integers")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="See docs/benchmarks.md.")
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true", help="small sizes, a few minutes (CI smoke runs)")
    mode.add_argument("--tiny", action="store_true", help="tiny sizes, under a minute (the ctest smoke test)")
    ap.add_argument("--build", default=os.path.join(REPO, "build"), help="build directory (default: build)")
    ap.add_argument("--out", help="report directory (default: BUILD/bench-report)")
    ap.add_argument("--work", help="inputs cache and temporary data (default: BUILD/bench-work)")
    ap.add_argument("--runs", type=int, help="runs per figure (default: 3 full and quick, 5 for views and overhead "
                                             "in full mode, 2 tiny)")
    ap.add_argument("--profiles", type=int_list, metavar="LIST",
                    help="profile counts of postproc (comma-separated multiples of 4), instead of the mode's")
    ap.add_argument("--workers", type=int, default=1, metavar="N",
                    help="csp-prof-mpi -j N: worker threads per process (default 1, so that -np is the core count)")
    ap.add_argument("--scenarios", help=f"comma-separated subset of {','.join(SCENARIOS)} (default: all)")
    ap.add_argument("--expect", metavar="TOOLS",
                    help="comma-separated tools (csp-views, csp-run, ...) that must be present: a scenario "
                         "not run for want of one of them counts as failed (the smoke test passes the tools "
                         "its build defines)")
    ap.add_argument("--keep", action="store_true", help="keep temporary data (databases, measurements)")
    ap.add_argument("--regenerate", action="store_true", help="regenerate cached inputs")
    args = ap.parse_args()
    if args.runs is not None and args.runs < 1:
        ap.error("--runs must be at least 1")
    if args.workers < 1:
        ap.error("--workers must be at least 1")
    if args.profiles and any(p < 1 for p in args.profiles):
        ap.error("--profiles: counts must be positive")
    if not os.path.isdir(args.build):
        ap.error(f"--build {args.build}: no such directory (bash scripts/build.sh build Release)")
    def terminate(signum, frame):  # SIGTERM: stop like Ctrl-C, so that temporary data is removed
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, terminate)
    try:
        return Suite(args).run()
    except KeyboardInterrupt:
        log("interrupted")
        return 130


if __name__ == "__main__":
    sys.exit(main())
