// The load map: which file is mapped where, with its GNU build-id, so that addresses can be
// stored module-relative and matched to the right binary later.
//
// Every module seen stays recorded (old samples must still resolve after a dlclose). Records are
// appended to chunks that never move and are never changed once published, and indexed by a
// fixed open-addressing table of (bias, start) that readers probe without a lock. A refresh
// runs before every dlclose, so its cost is the cost of a dlclose: it reads glibc's load and
// unload counters (no change: done), then walks the loader's list, where only the objects
// loaded since the last walk -- the last ones of the list -- are looked up (a survivor keeps its
// place and its name), and only a module not recorded yet allocates. It used to rebuild the
// whole map, a few allocations per module and every module compared with every other: about
// 40 us per dlclose with 100 modules loaded, 150 us with 300.
#include <elf.h>
#include <link.h>
#include <unistd.h>

#include <atomic>
#include <climits>
#include <cstddef>
#include <cstring>
#include <mutex>

#include "runtime.hpp"

namespace csp::measure {

namespace {

constexpr std::size_t kChunkModules = 256;
constexpr std::size_t kMaxChunks = 256;        // 65,536 modules; beyond, new modules go unrecorded
constexpr std::size_t kIndexSlots = 1u << 17;  // at most half full

struct Entry {
  ModuleRecord record;
};

constinit std::mutex g_mapMutex;  // serializes appends; lookups and views take no lock
Entry* g_chunks[kMaxChunks];
constinit std::atomic<std::size_t> g_count{0};  // published records
// Record index + 1 per slot, 0 = empty; written once, under g_mapMutex, after the record.
std::atomic<std::uint32_t> g_index[kIndexSlots];
// glibc's load and unload counters at the last complete walk (written under g_mapMutex).
constinit std::atomic<unsigned long long> g_seenAdds{0}, g_seenSubs{0};
constinit std::atomic<bool> g_haveCounters{false};

Entry& entryAt(std::size_t i) { return g_chunks[i / kChunkModules][i % kChunkModules]; }

std::size_t slotOf(std::uint64_t bias, std::uint64_t begin) {
  std::uint64_t h = (bias ^ (begin * 0x9E3779B97F4A7C15ULL)) * 0xC2B2AE3D27D4EB4FULL;
  return static_cast<std::size_t>(h >> 40) & (kIndexSlots - 1);
}

// The module as the loader describes it, without allocating.
struct Sighting {
  std::uint64_t bias = 0, begin = ~std::uint64_t{0}, end = 0;
  const char* name = "";  // empty for the main program (and unnamed objects)
  bool first = false;     // the loader's first entry: the main program
};

bool sameModule(const Entry& e, const Sighting& s) {
  const ModuleRecord& r = e.record;
  if (r.bias != s.bias || r.begin != s.begin || r.end != s.end) return false;
  return s.name[0] == '\0' ? r.unnamed : !r.unnamed && std::strcmp(r.path.c_str(), s.name) == 0;
}

bool isRecorded(const Sighting& s) {
  for (std::size_t slot = slotOf(s.bias, s.begin);; slot = (slot + 1) & (kIndexSlots - 1)) {
    const std::uint32_t entry = g_index[slot].load(std::memory_order_acquire);
    if (entry == 0) return false;
    if (sameModule(entryAt(entry - 1), s)) return true;
  }
}

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

// The loader's list as the last walk saw it: each object's name pointer, in order. An object
// that stays loaded keeps its place and its name string; glibc appends new objects at the end
// of their namespace's list. So after A loads and S unloads, the last A objects of a walk are
// looked up, and every earlier one must match the previous list in order (up to S objects of it
// gone); one that does not (another dlmopen namespace after the base one) is looked up too.
// Only the thread holding g_walking uses and replaces it; another thread refreshing at the same
// time (or a dlclose within a dlclose) looks every object up instead. `next` is the list a walk
// fills, swapped with `previous` after it: no allocation once it is large enough.
// Never destroyed: walks run at exit (finalizeAll, and the dlclose of another library's
// destructor), and those may come after this library's static destructors. As two static vectors
// (one swapped into the other) they were destroyed before such a walk, which then swapped a freed
// buffer into the other one: freed twice at exit, or written after it was freed.
struct WalkNames {
  std::vector<const char*> previous, next;
};
WalkNames& walkNames() {
  static auto* names = new WalkNames;
  return *names;
}
std::atomic_flag g_walking = ATOMIC_FLAG_INIT;

struct Walk {
  bool first = true;
  bool unchanged = false;  // no load or unload since the last walk: stopped at the first module
  unsigned long long adds = 0, subs = 0;
  bool incremental = false;                   // the previous walk's list applies
  std::vector<const char*>* names = nullptr;  // this walk's, when it will become the previous list
  std::size_t position = 0;
  std::size_t newFrom = 0;          // entries from here on were loaded since the last walk
  std::size_t next = 0;             // the next entry of the previous list to match
  unsigned long long goneLeft = 0;  // entries of the previous list that may be missing
  std::vector<ModuleRecord> fresh;  // modules not recorded yet (allocated only when there is one)
};

void startWalk(Walk& walk) {
  walk.unchanged = g_haveCounters.load(std::memory_order_acquire) && walk.adds != 0 &&
                   walk.adds == g_seenAdds.load(std::memory_order_relaxed) &&
                   walk.subs == g_seenSubs.load(std::memory_order_relaxed);
  if (!walk.incremental || !g_haveCounters.load(std::memory_order_acquire)) {
    walk.incremental = false;
    return;
  }
  const unsigned long long added = walk.adds - g_seenAdds.load(std::memory_order_relaxed);
  const unsigned long long gone = walk.subs - g_seenSubs.load(std::memory_order_relaxed);
  const std::size_t previous = walkNames().previous.size();
  const unsigned long long expected = previous + added - std::min<unsigned long long>(gone, previous + added);
  walk.newFrom = static_cast<std::size_t>(expected > added ? expected - added : 0);
  walk.goneLeft = gone;
}

// True if `name` continues the previous walk's order: the object was there before.
bool survived(Walk& walk, const char* name) {
  const std::vector<const char*>& previous = walkNames().previous;
  std::size_t j = walk.next;
  unsigned long long skip = walk.goneLeft;
  while (j < previous.size() && previous[j] != name && skip > 0) ++j, --skip;
  if (j >= previous.size() || previous[j] != name) return false;
  walk.next = j + 1;
  walk.goneLeft = skip;
  return true;
}

int visit(dl_phdr_info* info, std::size_t size, void* out) {
  auto& walk = *static_cast<Walk*>(out);
  if (walk.first && size >= offsetof(dl_phdr_info, dlpi_subs) + sizeof info->dlpi_subs) {
    walk.adds = info->dlpi_adds;
    walk.subs = info->dlpi_subs;
    startWalk(walk);
    if (walk.unchanged) return 1;
  } else if (walk.first) {
    walk.incremental = false;  // a loader without the counters
  }
  const char* name = info->dlpi_name != nullptr ? info->dlpi_name : "";
  if (walk.names != nullptr) walk.names->push_back(name);
  const std::size_t position = walk.position++;
  if (walk.incremental && position < walk.newFrom && survived(walk, name)) {
    walk.first = false;
    return 0;
  }
  Sighting s;
  s.first = walk.first;
  walk.first = false;
  s.bias = info->dlpi_addr;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_LOAD) continue;
    s.begin = std::min<std::uint64_t>(s.begin, info->dlpi_addr + ph.p_vaddr);
    s.end = std::max<std::uint64_t>(s.end, info->dlpi_addr + ph.p_vaddr + ph.p_memsz);
  }
  if (s.begin >= s.end) return 0;
  s.name = name;
  if (isRecorded(s)) return 0;
  ModuleRecord m;
  m.bias = s.bias;
  m.begin = s.begin;
  m.end = s.end;
  m.unnamed = s.name[0] == '\0';
  m.path = !m.unnamed ? std::string(s.name) : s.first ? mainExecutable() : std::string("[anonymous]");
  // Build-ids are read here, while the loader guarantees the module stays mapped.
  m.buildId = buildIdOf(info);
  walk.fresh.push_back(std::move(m));
  return 0;
}

// Caller holds g_mapMutex. Another thread's walk may have recorded the module meanwhile.
void append(ModuleRecord&& m) {
  const Sighting s{m.bias, m.begin, m.end, m.unnamed ? "" : m.path.c_str(), false};
  if (isRecorded(s)) return;
  const std::size_t i = g_count.load(std::memory_order_relaxed);
  if (i / kChunkModules >= kMaxChunks || 2 * i >= kIndexSlots) {
    reportOnce("loadmap-full",
               "csp: warning: more than 65536 modules loaded; later ones are not recorded and their "
               "samples stay unresolved\n");
    return;
  }
  if (g_chunks[i / kChunkModules] == nullptr) g_chunks[i / kChunkModules] = new Entry[kChunkModules];
  entryAt(i).record = std::move(m);
  g_count.store(i + 1, std::memory_order_release);
  std::size_t slot = slotOf(s.bias, s.begin);
  while (g_index[slot].load(std::memory_order_relaxed) != 0) slot = (slot + 1) & (kIndexSlots - 1);
  g_index[slot].store(static_cast<std::uint32_t>(i + 1), std::memory_order_release);
}

}  // namespace

const ModuleRecord& LoadMapView::operator[](std::size_t i) const { return entryAt(i).record; }

void refreshLoadMap() {
  Walk walk;
  WalkNames& names = walkNames();
  const bool owner = !g_walking.test_and_set(std::memory_order_acquire);
  if (owner) {
    names.next.clear();
    names.next.reserve(names.previous.size() + 16);
    walk.names = &names.next;
    walk.incremental = true;
  }
  dl_iterate_phdr(visit, &walk);
  if (!walk.unchanged) {
    TerminationGuard guard;
    std::lock_guard lock(g_mapMutex);
    for (auto& m : walk.fresh) append(std::move(m));
    if (owner) {
      // Only a walk that kept its names moves the counters on: they and the previous list go
      // together.
      names.previous.swap(names.next);
      g_seenAdds.store(walk.adds, std::memory_order_relaxed);
      g_seenSubs.store(walk.subs, std::memory_order_relaxed);
      g_haveCounters.store(true, std::memory_order_release);
    }
  }
  if (owner) g_walking.clear(std::memory_order_release);
}

LoadMapView loadMapSnapshot() { return LoadMapView(g_count.load(std::memory_order_acquire)); }

}  // namespace csp::measure
