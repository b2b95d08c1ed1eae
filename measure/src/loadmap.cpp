// The load map: which file is mapped where, with its GNU build-id, so that addresses can be
// stored module-relative and matched to the right binary later.
#include <elf.h>
#include <link.h>
#include <unistd.h>

#include <climits>
#include <cstddef>
#include <cstring>
#include <memory>
#include <mutex>

#include "runtime.hpp"

namespace csp::measure {

namespace {

constinit std::mutex g_mapMutex;
// In order of first sight; never shrinks; replaced (not changed) when a module appears, so that
// a writer keeps a consistent copy without holding the lock. Leaked so that exit handlers can
// still use it.
std::shared_ptr<const std::vector<ModuleRecord>>& snapshot() {
  static auto* m = new std::shared_ptr<const std::vector<ModuleRecord>>(std::make_shared<std::vector<ModuleRecord>>());
  return *m;
}
struct {
  unsigned long long adds = 0, subs = 0;
} g_seen;
bool g_haveCounters = false;

std::vector<std::uint8_t> buildIdOf(const dl_phdr_info* info) {
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_NOTE) continue;
    const auto* p = reinterpret_cast<const unsigned char*>(info->dlpi_addr + ph.p_vaddr);
    const unsigned char* end = p + ph.p_memsz;
    while (p + sizeof(ElfW(Nhdr)) <= end) {
      ElfW(Nhdr) note;
      std::memcpy(&note, p, sizeof note);
      const unsigned char* name = p + sizeof note;
      const unsigned char* desc = name + ((note.n_namesz + 3u) & ~3u);
      const unsigned char* next = desc + ((note.n_descsz + 3u) & ~3u);
      if (next > end || next <= p) break;
      if (note.n_type == NT_GNU_BUILD_ID && note.n_namesz == 4 && std::memcmp(name, "GNU", 4) == 0)
        return {desc, desc + note.n_descsz};
      p = next;
    }
  }
  return {};
}

std::string mainExecutable() {
  char buf[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : std::string("[executable]");
}

int collect(dl_phdr_info* info, std::size_t, void* out) {
  ModuleRecord m;
  m.bias = info->dlpi_addr;
  m.begin = ~std::uint64_t{0};
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_LOAD) continue;
    m.begin = std::min<std::uint64_t>(m.begin, info->dlpi_addr + ph.p_vaddr);
    m.end = std::max<std::uint64_t>(m.end, info->dlpi_addr + ph.p_vaddr + ph.p_memsz);
  }
  if (m.begin >= m.end) return 0;
  m.path = info->dlpi_name != nullptr && info->dlpi_name[0] != '\0' ? info->dlpi_name : "";
  // Build-ids are read here, while the loader guarantees the module stays mapped.
  m.buildId = buildIdOf(info);
  static_cast<std::vector<ModuleRecord>*>(out)->push_back(std::move(m));
  return 0;
}

}  // namespace

void refreshLoadMap() {
  // glibc counts loads and unloads: when neither changed since the last walk, there is nothing
  // new (the common case at thread exit).
  struct Counters {
    unsigned long long adds = 0, subs = 0;
  } now;
  dl_iterate_phdr(
      [](dl_phdr_info* info, std::size_t size, void* out) {
        if (size >= offsetof(dl_phdr_info, dlpi_subs) + sizeof info->dlpi_subs) {
          static_cast<Counters*>(out)->adds = info->dlpi_adds;
          static_cast<Counters*>(out)->subs = info->dlpi_subs;
        }
        return 1;  // the first module is enough
      },
      &now);
  {
    TerminationGuard guard;
    std::lock_guard lock(g_mapMutex);
    if (g_haveCounters && now.adds == g_seen.adds && now.subs == g_seen.subs && now.adds != 0) return;
  }
  std::vector<ModuleRecord> seen;
  dl_iterate_phdr(collect, &seen);
  TerminationGuard guard;
  std::lock_guard lock(g_mapMutex);
  auto next = std::make_shared<std::vector<ModuleRecord>>(*snapshot());
  for (auto& m : seen) {
    // The main program (first entry) has an empty name.
    if (m.path.empty()) m.path = &m == &seen.front() ? mainExecutable() : "[anonymous]";
    bool known = false;
    for (const auto& k : *next) known = known || (k.bias == m.bias && k.begin == m.begin && k.path == m.path);
    if (!known) next->push_back(std::move(m));
  }
  snapshot() = std::move(next);
  g_seen = {now.adds, now.subs};
  g_haveCounters = true;
}

std::shared_ptr<const std::vector<ModuleRecord>> loadMapSnapshot() {
  TerminationGuard guard;
  std::lock_guard lock(g_mapMutex);
  return snapshot();
}

}  // namespace csp::measure
