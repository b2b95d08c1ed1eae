// csp-run: runs a program under libcsp-measure.so. It only prepares the environment (the
// preload and CSP_* settings) and then becomes the program with execvp, so that it can sit
// between mpirun/srun and the application without adding a process.
#include <fmt/format.h>
#include <limits.h>
#include <unistd.h>
#include <CLI/CLI.hpp>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <regex>
#include <string>
#include <string_view>
#include <vector>

#include "cli_parse.hpp"
#include "csp/measure/events.hpp"

namespace fs = std::filesystem;

namespace {

const char* kHelp =
    "csp-run: measure a program with CSP's sampling profiler (libcsp-measure.so).\n"
    "\n"
    "  csp-run [options] -- program [args...]\n"
    "  mpirun -np 4 csp-run -o meas -- ./app     (or srun ... csp-run ...)\n"
    "\n"
    "Every thread of the program (and of processes it forks or execs) is sampled; each thread's\n"
    "profile is written to the measurement directory when it ends. Each option has an\n"
    "environment variable that the library reads directly, for launchers that cannot wrap the\n"
    "program: LD_PRELOAD=<path>/libcsp-measure.so plus the CSP_* variables below. Options win\n"
    "over variables already set.\n"
    "\n"
    "Environment: CSP_EVENTS, CSP_OUTPUT, CSP_REGION_LOG, CSP_REGION_LOG_EVENTS, CSP_VERBOSE,\n"
    "CSP_MAX_DEPTH, CSP_MAX_NODES, CSP_SIGNAL, CSP_TERMINATION_WAIT, CSP_IDLENESS, CSP_LOGICAL,\n"
    "CSP_MEASURE_LIBRARY (see docs/measurement.md).\n"
    "\n"
    "If the program is ended by SIGTERM, SIGINT, SIGHUP or SIGXCPU (and has no handler of its own\n"
    "for it), every thread's profile is written first; the exit status is still the signal's.";

std::string sanitize(std::string s) {
  for (char& c : s)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-' && c != '_') c = '_';
  return s;
}

// All ranks of one job must pick the same directory, so the default is named after the job,
// not the process; the pid is used only when no launcher identifies a job.
std::string defaultOutput(const std::string& program) {
  std::string job;
  if (const char* slurm = std::getenv("SLURM_JOB_ID"); slurm != nullptr && *slurm != '\0') {
    job = slurm;
    if (const char* step = std::getenv("SLURM_STEP_ID"); step != nullptr && *step != '\0')
      job += fmt::format(".{}", step);
  } else {
    for (const char* name : {"OMPI_MCA_ess_base_jobid", "PMIX_NAMESPACE", "PMI_JOBID"}) {
      if (const char* v = std::getenv(name); v != nullptr && *v != '\0') {
        job = v;
        break;
      }
    }
  }
  if (job.empty()) job = std::to_string(getpid());  // execvp keeps the pid: it is the program's
  return fmt::format("csp-{}-{}", sanitize(fs::path(program).filename().string()), sanitize(job));
}

fs::path selfDirectory() {
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  return ec ? fs::path{} : self.parent_path();
}

std::optional<fs::path> findLibrary(const std::string& explicitPath) {
  if (!explicitPath.empty()) return fs::exists(explicitPath) ? std::optional(fs::absolute(explicitPath)) : std::nullopt;
  if (const char* env = std::getenv("CSP_MEASURE_LIBRARY"); env != nullptr && *env != '\0')
    return fs::exists(env) ? std::optional(fs::absolute(env)) : std::nullopt;
  const fs::path dir = selfDirectory();
  // Installed (bin/ next to lib/), or the build tree (launcher/ next to measure/).
  for (const fs::path& candidate :
       {dir / "libcsp-measure.so", dir / ".." / "lib" / "libcsp-measure.so", dir / ".." / "lib64" / "libcsp-measure.so",
        dir / ".." / "measure" / "libcsp-measure.so"}) {
    std::error_code ec;
    if (fs::exists(candidate, ec)) return fs::weakly_canonical(candidate, ec);
  }
  return std::nullopt;
}

// Why the -e options cannot be measured as given (empty: they can): the library would ignore
// such an event with a warning and sample something else.
std::string eventsProblem(const std::vector<std::string>& events) {
  std::vector<std::string_view> names;
  for (const auto& e : events) {
    if (e == "none") {
      if (events.size() > 1) return "--event none: samples nothing, so it cannot be combined with other events";
      continue;
    }
    csp::measure::EventSpec spec;
    if (const char* why = csp::measure::parseEventSpec(e, spec); why != nullptr)
      return fmt::format("--event {}: {}", e, why);
    for (const auto& n : names)
      if (n == spec.name) return fmt::format("--event {}: {} is given twice", e, spec.name);
    names.push_back(spec.name);
  }
  return {};
}

// The VALGRIND_LIB directory holding the csp-mem tool: CSP_MEMORY_TOOL_DIR, else installed
// (lib/csp/valgrind) or the build tree (measure/valgrind/lib).
std::optional<fs::path> findMemoryTool() {
  const auto holdsTool = [](const fs::path& d) {
    std::error_code ec;
    return fs::exists(d / "csp-mem-amd64-linux", ec);
  };
  if (const char* env = std::getenv("CSP_MEMORY_TOOL_DIR"); env != nullptr && *env != '\0')
    return holdsTool(env) ? std::optional(fs::absolute(env)) : std::nullopt;
  const fs::path dir = selfDirectory();
  for (const fs::path& candidate :
       {dir / ".." / "lib" / "csp" / "valgrind", dir / ".." / "measure" / "valgrind" / "lib"}) {
    std::error_code ec;
    if (holdsTool(candidate)) return fs::weakly_canonical(candidate, ec);
  }
  return std::nullopt;
}

struct MemoryOptions {
  bool footprint = true, time = true;
  std::uint32_t precision = 0;         // percent; 0: the tool's default
  std::uint32_t cell = 0;              // bytes; 0: the tool's default
  std::string routines;                // program (the default) or all
  std::vector<std::string> libraries;  // --memory-library: libraries whose routines are the program's too
};

// The executable `program` names, as the kernel will run it (PATH searched for a bare name; links
// resolved, since Valgrind names an object by the file it mapped). Empty if none is found.
std::string executablePath(const std::string& program) {
  std::error_code ec;
  if (program.find('/') != std::string::npos) return fs::canonical(program, ec).string();
  const char* path = std::getenv("PATH");
  std::string_view dirs = path != nullptr ? path : "";
  while (!dirs.empty()) {
    const auto colon = dirs.find(':');
    const fs::path candidate = fs::path(dirs.substr(0, colon)) / program;
    if (access(candidate.c_str(), X_OK) == 0) return fs::canonical(candidate, ec).string();
    dirs = colon == std::string_view::npos ? std::string_view{} : dirs.substr(colon + 1);
  }
  return {};
}

// The command line of the memory mode: the program under Valgrind with the csp-mem tool.
std::vector<std::string> memoryCommand(const std::vector<std::string>& command, const fs::path& outDir,
                                       const MemoryOptions& o) {
  std::vector<std::string> args{"valgrind", "--tool=csp-mem", "-q", "--out-dir=" + outDir.string()};
  if (!o.footprint) args.emplace_back("--footprint=no");
  if (o.precision != 0) args.push_back(fmt::format("--footprint-precision={}", o.precision));
  if (o.cell != 0) args.push_back(fmt::format("--cell={}", o.cell));
  if (!o.time) args.emplace_back("--time=no");
  if (o.routines == "all") {
    args.emplace_back("--routines=all");
  } else {
    if (const auto exe = executablePath(command.front()); !exe.empty()) args.push_back("--routine-object=" + exe);
    for (const auto& l : o.libraries) args.push_back("--routine-library=" + l);
  }
  args.insert(args.end(), command.begin(), command.end());
  return args;
}

void setEnv(const char* name, const std::string& value, bool verbose) {
  setenv(name, value.c_str(), 1);
  if (verbose) fmt::print(stderr, "csp-run: {}={}\n", name, value);
}

void preloadLibrary(const fs::path& lib, bool talk) {
  std::string preload = lib.string();
  if (const char* old = std::getenv("LD_PRELOAD"); old != nullptr && *old != '\0') preload += std::string(":") + old;
  setEnv("LD_PRELOAD", preload, talk);
}

// What csp-run's options set.
struct RunOptions {
  std::vector<std::string> events;
  std::string output, library, signal;
  bool regionLog = false, noRegionLog = false, idleness = false, noIdleness = false, noLogical = false;
  std::uint32_t regionLogEvents = 0, maxDepth = 0, maxNodes = 0;
  int verbose = 0;
  bool memory = false;
  MemoryOptions memoryOptions;
  bool noFootprint = false, noMemoryTime = false;
};

void defineOptions(CLI::App& app, RunOptions& r) {
  app.add_option("-e,--event", r.events,
                 "event to sample, repeatable: NAME[@RATE], NAME = cpu-time (thread CPU time) or real-time "
                 "(wall-clock time, also while blocked); RATE = samples per second (1 to 100000) or a period with "
                 "unit (ns, us, ms, s; 10us to 3600s); 'none' alone samples nothing (regions, idleness waits). "
                 "Default cpu-time@200. Env: CSP_EVENTS=cpu-time@200,real-time@1000")
      ->allow_extra_args(false);
  app.add_option("-o,--output", r.output,
                 "measurement directory (created; existing profiles of the same threads are replaced). Default "
                 "csp-<program>-<job id>, the job id from SLURM_JOB_ID[.SLURM_STEP_ID], Open MPI/PMIx, else the "
                 "pid. Env: CSP_OUTPUT");
  app.add_flag("--region-log", r.regionLog, "record the timestamped region enter/exit log. Env: CSP_REGION_LOG=1");
  app.add_flag("--no-region-log", r.noRegionLog, "do not record the region log (default)");
  app.add_flag("--idleness", r.idleness,
               "threaded programs: the metrics work, idleness (thesis 5.2.1), sync-wait, lock-wait, lock-blame and "
               "mpi-wait, from wrapped pthread and MPI waits and the OpenMP runtime's OMPT interface (LLVM libomp; "
               "GCC's libgomp has none); work and idleness are counted on the first event. Env: CSP_IDLENESS=1");
  app.add_flag("--no-idleness", r.noIdleness, "no idleness accounting (default)");
  app.add_flag("--no-logical", r.noLogical,
               "OpenMP: do not record where parallel regions and tasks were created (no OMPT tool unless "
               "--idleness); csp-prof-mpi then shows the native call paths. Env: CSP_LOGICAL=0");
  app.add_option("--region-log-events", r.regionLogEvents,
                 "region log capacity per thread; later events are counted as lost (default 1048576). "
                 "Env: CSP_REGION_LOG_EVENTS")
      ->check(CLI::Range(1u, 1u << 28));
  app.add_option("--max-depth", r.maxDepth,
                 "deepest call path kept; deeper samples keep their innermost frames "
                 "and count as truncated (default 1024). Env: CSP_MAX_DEPTH")
      ->check(CLI::Range(16u, 1u << 20));
  app.add_option("--max-nodes", r.maxNodes,
                 "CCT nodes per thread; samples beyond are counted as dropped "
                 "(default 262144). Env: CSP_MAX_NODES")
      ->check(CLI::Range(1024u, 1u << 28));
  app.add_option("--signal", r.signal,
                 "signal csp's timers raise: PROF, RTMIN+N, RTMAX-N or a number (default: the "
                 "first real-time signal from RTMIN+6 up that the program does not handle). "
                 "Env: CSP_SIGNAL");
  app.add_option("--library", r.library,
                 "libcsp-measure.so to preload (default: found next to csp-run, in "
                 "../lib or the build tree). Env: CSP_MEASURE_LIBRARY");
  app.add_flag("--memory", r.memory,
               "memory-access profiles instead of sampling: the program runs under Valgrind with CSP's csp-mem tool "
               "(cost and input size RMS/TRMS of every routine activation, all-window footprints; "
               "docs/memory-profiles.md). Needs valgrind. Env: CSP_MEMORY_TOOL_DIR (the tool's directory)");
  app.add_flag("--no-footprint", r.noFootprint, "--memory: no all-window footprints (faster)");
  app.add_option("--footprint-precision", r.memoryOptions.precision,
                 "--memory: guaranteed precision c of the footprints in percent (default 90)")
      ->check(CLI::Range(1u, 100u));
  app.add_option("--cell", r.memoryOptions.cell,
                 "--memory: bytes per memory cell of the input sizes, a power of two (default 4)")
      ->check(CLI::IsMember({1u, 2u, 4u, 8u, 16u, 32u, 64u}));
  app.add_option("--memory-routines", r.memoryOptions.routines,
                 "--memory: whose routines are activations: program (default: the executable's and those of "
                 "--memory-library; other libraries' routines are folded into their callers) or all")
      ->check(CLI::IsMember({"program", "all"}));
  app.add_option("--memory-library", r.memoryOptions.libraries,
                 "--memory: a library of the program (file name prefix, e.g. libfoo) whose routines are activations "
                 "too (repeatable)");
  app.add_flag("--no-memory-time", r.noMemoryTime,
               "--memory: no thread CPU time per activation (saves two clock readings per call)");
  app.add_flag("-v,--verbose", r.verbose,
               "report settings, and per thread the samples, unwind failures and drops "
               "when its profile is written. Env: CSP_VERBOSE=1");
}

// The options' contradictions and malformed values; empty when there are none.
std::string optionsProblem(const RunOptions& r) {
  if (r.regionLog && r.noRegionLog) {
    return "--region-log and --no-region-log contradict each other";
  }
  if (r.idleness && r.noIdleness) {
    return "--idleness and --no-idleness contradict each other";
  }
  if (!r.memory && (r.noFootprint || r.memoryOptions.precision != 0 || r.memoryOptions.cell != 0 ||
                    !r.memoryOptions.routines.empty() || !r.memoryOptions.libraries.empty() || r.noMemoryTime)) {
    return "--no-footprint, --footprint-precision, --cell, --memory-routines, --memory-library and --no-memory-time "
           "need --memory";
  }
  if (r.memoryOptions.routines == "all" && !r.memoryOptions.libraries.empty()) {
    return "--memory-library names libraries for --memory-routines program, not all";
  }
  if (r.memory && (!r.events.empty() || r.regionLog || r.idleness)) {
    return "--memory does not sample: --event, --region-log and --idleness do not apply";
  }
  if (auto problem = eventsProblem(r.events); !problem.empty()) return problem;

  if (!r.signal.empty()) {
    static const std::regex kSignal(R"((SIG)?(PROF|RTMIN(\+[0-9]+)?|RTMAX(-[0-9]+)?|[0-9]+))");
    if (!std::regex_match(r.signal, kSignal)) {
      return fmt::format("--signal {}: expected PROF, RTMIN+N, RTMAX-N or a signal number", r.signal);
    }
  }

  return {};
}

// The switches the measurement library reads from the environment.
void exportSwitches(const RunOptions& r, bool talk) {
  if (r.regionLog) setEnv("CSP_REGION_LOG", "1", talk);
  if (r.noRegionLog) setEnv("CSP_REGION_LOG", "0", talk);
  if (r.idleness) setEnv("CSP_IDLENESS", "1", talk);
  if (r.noLogical) setEnv("CSP_LOGICAL", "0", talk);
  if (r.noIdleness) setEnv("CSP_IDLENESS", "0", talk);
  if (r.regionLogEvents != 0) setEnv("CSP_REGION_LOG_EVENTS", std::to_string(r.regionLogEvents), talk);
  if (r.maxDepth != 0) setEnv("CSP_MAX_DEPTH", std::to_string(r.maxDepth), talk);
  if (r.maxNodes != 0) setEnv("CSP_MAX_NODES", std::to_string(r.maxNodes), talk);
  if (!r.signal.empty()) setEnv("CSP_SIGNAL", r.signal, talk);
  if (r.verbose > 0) setEnv("CSP_VERBOSE", std::to_string(r.verbose), talk);
}

}  // namespace

int main(int argc, char** argv) {
  // Everything after "--" is the program; without "--", the first non-option starts it.
  std::vector<std::string> command;
  int ownArgs = argc;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--") == 0) {
      command.assign(argv + i + 1, argv + argc);
      ownArgs = i;
      break;
    }
  }

  CLI::App app{kHelp, "csp-run"};
  RunOptions r;
  defineOptions(app, r);
  if (command.empty()) app.prefix_command();
  if (const auto exit = csp::cli::parseOrExit(app, "csp-run", [&] { app.parse(ownArgs, argv); })) return *exit;
  if (command.empty()) command = app.remaining();
  if (command.empty()) {
    fmt::print(stderr, "csp-run: error: no program given (usage: csp-run [options] -- program [args...])\n");
    return 2;
  }
  if (const auto problem = optionsProblem(r); !problem.empty()) {
    fmt::print(stderr, "csp-run: error: {}\n", problem);
    return 2;
  }
  r.memoryOptions.footprint = !r.noFootprint;
  r.memoryOptions.time = !r.noMemoryTime;
  auto& events = r.events;
  auto& output = r.output;
  auto& library = r.library;
  const bool memory = r.memory;
  const int verbose = r.verbose;
  const auto lib = memory ? std::optional<fs::path>(fs::path{}) : findLibrary(library);
  const auto tool = memory ? findMemoryTool() : std::nullopt;
  if (memory && !tool) {
    fmt::print(stderr, "csp-run: error: {}: the csp-mem Valgrind tool not found (set CSP_MEMORY_TOOL_DIR)\n",
               selfDirectory().string());
    return 2;
  }
  if (!lib) {
    fmt::print(stderr, "csp-run: error: {}: libcsp-measure.so not found (use --library or CSP_MEASURE_LIBRARY)\n",
               library.empty() ? selfDirectory().string() : library);
    return 2;
  }

  const bool talk = verbose > 0;
  if (!events.empty()) {
    std::string joined;
    for (const auto& e : events) joined += (joined.empty() ? "" : ",") + e;
    setEnv("CSP_EVENTS", joined, talk);
  }
  if (output.empty()) {
    const char* env = std::getenv("CSP_OUTPUT");
    output = env != nullptr && *env != '\0' ? env : defaultOutput(command.front());
  }
  std::error_code ec;
  const fs::path outDir = fs::absolute(output, ec);  // the program may change directory
  // Ranks share the directory, so an existing one (or a link to one) is used as it is; a link
  // to nothing is no place for profiles, and is never replaced.
  if (fs::is_symlink(fs::symlink_status(outDir, ec)) && !fs::exists(outDir, ec)) {
    fmt::print(stderr, "csp-run: error: {}: a dangling symbolic link, not a measurement directory\n", outDir.string());
    return 2;
  }
  fs::create_directories(outDir, ec);
  if (ec || !fs::is_directory(outDir)) {
    fmt::print(stderr, "csp-run: error: {}: cannot create the measurement directory{}\n", outDir.string(),
               ec ? ": " + ec.message() : "");
    return 2;
  }
  setEnv("CSP_OUTPUT", outDir.string(), talk);
  // The command as the user gave it, for every process it starts (also mpirun's helpers, a
  // shell's children): the database names it as the measured program. Arguments are separated
  // by the unit separator, which no argument of a sane command contains.
  {
    std::string joined;
    for (const auto& a : command) joined += (joined.empty() ? "" : "\x1f") + a;
    setEnv("CSP_COMMAND", joined, false);
  }
  exportSwitches(r, talk);
  if (memory) {
    setEnv("VALGRIND_LIB", tool->string(), talk);
    command = memoryCommand(command, outDir, r.memoryOptions);
  } else {
    preloadLibrary(*lib, talk);
  }

  std::vector<char*> args;
  args.reserve(command.size() + 1);
  for (auto& a : command) args.push_back(a.data());
  args.push_back(nullptr);
  execvp(args[0], args.data());
  fmt::print(stderr, "csp-run: error: {}: cannot run: {}\n", command.front(), std::strerror(errno));
  return errno == ENOENT ? 127 : 126;
}
