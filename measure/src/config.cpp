// Measurement settings from the environment (csp-run sets them; launchers that cannot wrap the
// program set them directly). Documented in docs/measurement.md.
#include <limits.h>
#include <signal.h>
#include <unistd.h>

#include <unistd.h>
#include <cerrno>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "csp/measure/events.hpp"
#include "runtime.hpp"

namespace csp::measure {

namespace {

bool parseUnsigned(std::string_view text, std::uint64_t& out) {
  if (text.empty()) return false;
  std::uint64_t v = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
    if (v > (~std::uint64_t{0} - 9) / 10) return false;
    v = v * 10 + static_cast<std::uint64_t>(c - '0');
  }
  out = v;
  return true;
}

// Why `spec` cannot be sampled (nullptr: it can, and `e` is set).
const char* parseEvent(std::string_view spec, EventConfig& e) {
  EventSpec parsed;
  if (const char* why = parseEventSpec(spec, parsed)) return why;
  e = {std::string(parsed.name), parsed.clock, parsed.periodNs};
  return nullptr;
}

std::uint64_t envNumber(const char* name, std::uint64_t fallback, std::uint64_t lo, std::uint64_t hi) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  std::uint64_t n = 0;
  if (!parseUnsigned(v, n) || n < lo || n > hi) {
    std::fprintf(stderr, "csp: warning: %s=%s is not a number in [%llu, %llu]; using %llu\n", name, v,
                 static_cast<unsigned long long>(lo), static_cast<unsigned long long>(hi),
                 static_cast<unsigned long long>(fallback));
    return fallback;
  }
  return n;
}

bool envFlag(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' && std::strcmp(v, "0") != 0 && std::strcmp(v, "no") != 0 &&
         std::strcmp(v, "off") != 0;
}

}  // namespace

Config readConfig() {
  Config c;
  const char* events = std::getenv("CSP_EVENTS");
  c.eventsText = events != nullptr && *events != '\0' ? events : "cpu-time@200";
  if (c.eventsText != "none") {
    const std::string given = c.eventsText;
    std::string_view rest = given;
    c.eventsText.clear();  // becomes the events actually used, recorded in every profile
    while (!rest.empty()) {
      const auto comma = rest.find(',');
      const std::string_view item = rest.substr(0, comma);
      rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
      EventConfig e;
      const char* why = parseEvent(item, e);
      if (why == nullptr && c.events.size() >= static_cast<std::size_t>(kMaxEvents)) why = "too many events";
      for (const auto& other : c.events)
        if (why == nullptr && other.name == e.name) why = "the event is given twice";
      if (why != nullptr) {
        std::fprintf(stderr, "csp: warning: ignoring event '%.*s' in CSP_EVENTS: %s\n", static_cast<int>(item.size()),
                     item.data(), why);
        continue;
      }
      c.events.push_back(e);
      if (!c.eventsText.empty()) c.eventsText.push_back(',');
      c.eventsText.append(item);
    }
    if (c.events.empty()) {
      std::fprintf(stderr, "csp: warning: no usable event in CSP_EVENTS; sampling cpu-time@200\n");
      c.events.push_back({"cpu-time", CLOCK_THREAD_CPUTIME_ID, 5'000'000});
      c.eventsText = "cpu-time@200";
    }
  }
  if (const char* out = std::getenv("CSP_OUTPUT"); out != nullptr) c.output = out;
  if (c.output.empty()) {
    // csp-<program>-<pid>: named after the process that starts the measurement.
    char exe[PATH_MAX];
    const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    std::string prog = n > 0 ? std::string(exe, static_cast<std::size_t>(n)) : std::string("program");
    if (auto slash = prog.rfind('/'); slash != std::string::npos) prog = prog.substr(slash + 1);
    c.output = "csp-" + prog + "-" + std::to_string(getpid());
  }
  if (c.output.front() != '/') {
    // Resolved once, now: the program may change its working directory before threads end.
    char cwd[PATH_MAX];
    if (getcwd(cwd, sizeof cwd) != nullptr) c.output = std::string(cwd) + (cwd[1] == '\0' ? "" : "/") + c.output;
  }
  if (const char* sig = std::getenv("CSP_SIGNAL"); sig != nullptr && *sig != '\0') {
    std::string_view v = sig;
    if (v.substr(0, 3) == "SIG") v.remove_prefix(3);
    std::uint64_t n = 0;
    int chosen = 0;
    if (parseUnsigned(v, n) && n >= 1 && n <= static_cast<std::uint64_t>(SIGRTMAX)) {
      chosen = static_cast<int>(n);
    } else if (v == "PROF") {
      chosen = SIGPROF;
    } else if (v.substr(0, 5) == "RTMIN" && (v.size() == 5 || (v[5] == '+' && parseUnsigned(v.substr(6), n)))) {
      chosen = SIGRTMIN + (v.size() == 5 ? 0 : static_cast<int>(n));
    } else if (v.substr(0, 5) == "RTMAX" && (v.size() == 5 || (v[5] == '-' && parseUnsigned(v.substr(6), n)))) {
      chosen = SIGRTMAX - (v.size() == 5 ? 0 : static_cast<int>(n));
    }
    // Signals that cannot be caught, are synchronous faults, or that csp handles otherwise.
    const bool usable = chosen >= 1 && chosen <= SIGRTMAX && chosen != SIGKILL && chosen != SIGSTOP &&
                        chosen != SIGSEGV && chosen != SIGBUS && chosen != SIGILL && chosen != SIGFPE &&
                        chosen != SIGTERM && chosen != SIGINT && chosen != SIGHUP && chosen != SIGXCPU &&
                        (chosen < 32 || chosen >= SIGRTMIN);
    if (usable)
      c.signal = chosen;
    else
      std::fprintf(stderr,
                   "csp: warning: CSP_SIGNAL=%s is not a usable signal (a number, PROF, RTMIN+N or RTMAX-N); "
                   "using the first free real-time signal\n",
                   sig);
  }
  c.regionLog = envFlag("CSP_REGION_LOG");
  c.idleness = envFlag("CSP_IDLENESS");
  c.logical = std::getenv("CSP_LOGICAL") == nullptr || *std::getenv("CSP_LOGICAL") == '\0' || envFlag("CSP_LOGICAL");
  c.regionLogCapacity =
      static_cast<std::uint32_t>(envNumber("CSP_REGION_LOG_EVENTS", c.regionLogCapacity, 1, 1u << 28));
  c.verbose = static_cast<int>(envNumber("CSP_VERBOSE", 0, 0, 9));
  c.maxDepth = static_cast<std::uint32_t>(envNumber("CSP_MAX_DEPTH", c.maxDepth, 16, 1u << 20));
  c.maxNodes = static_cast<std::uint32_t>(envNumber("CSP_MAX_NODES", c.maxNodes, 1024, 1u << 28));
  return c;
}

}  // namespace csp::measure
