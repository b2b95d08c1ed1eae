@0x8cbaafcbb55194f3;
# CSP per-thread profile, format major version 1.
#
# A profile file is a 32-byte header (see docs/profile-format.md) followed by one unpacked
# Cap'n Proto message whose root is ThreadProfile. The header carries the magic, the format
# version and a checksum of the message, so that readers can reject foreign, newer or damaged
# files before touching the message.
#
# Lists that describe nodes are stored column-wise (one list per field) so that a reader walks
# them with unit stride and the file stays small.

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("csp::schema");

struct ThreadProfile {
  identity @0 :Identity;
  metrics @1 :List(MetricDescriptor);
  modules @2 :List(LoadModule);
  strings @3 :List(Text);          # string table used by symbolic frames; index 0 is ""
  frames @4 :Frames;
  cct @5 :Cct;
  values @6 :Values;
  regions @7 :RegionProfile;
  stats @8 :MeasurementStats;
  # Format 1.2: OpenMP logical call paths (docs/profile-format.md, "Logical contexts").
  logical @9 :LogicalContexts;
  # Format 1.3 (docs/profile-format.md "Clocks across processes"): the process's clock
  # against the reference process's, and the MPI communication events of the thread.
  clock @10 :ClockSync;
  commLog @11 :CommLog;
}

# The process's CLOCK_MONOTONIC against the reference process's (MPI rank 0), as guaranteed
# bounds: at two moments, a local reading trapped between two reference readings (a ping-pong at
# MPI initialisation and one at finalisation). Same in every thread profile of the process.
struct ClockSync {
  state @0 :ClockState;
  referenceRank @1 :UInt32;
  initLocalNs @2 :UInt64;          # local reading ...
  initRefLoNs @3 :UInt64;          # ... taken after this reference reading
  initRefHiNs @4 :UInt64;          # ... and before this one
  finalLocalNs @5 :UInt64;
  finalRefLoNs @6 :UInt64;
  finalRefHiNs @7 :UInt64;
  rounds @8 :UInt32;               # ping-pong rounds per exchange (the tightest is kept)
  costNs @9 :UInt64;               # CPU time the exchanges took in this process (its thread)
}

enum ClockState {
  none @0;                         # not measured (no MPI, no --region-log, or no exchange)
  reference @1;                    # this process's clock is the reference
  sameClock @2;                    # same kernel as the reference: same CLOCK_MONOTONIC
  measured @3;                     # both exchanges: frequency and zero bounded
  initOnly @4;                     # MPI_Finalize never ran: the zero only, frequency unbounded
}

# MPI calls of the thread (docs/profile-format.md "Communication events"), column-wise, in the
# order they ended. Peers are ranks of MPI_COMM_WORLD.
struct CommLog {
  kind @0 :List(UInt8);            # 1 send, 2 receive, 3 collective, 4 wait
  beginNs @1 :List(UInt64);        # CLOCK_MONOTONIC of the measured process
  endNs @2 :List(UInt64);
  peer @3 :List(Int32);            # send: destination; receive: source; collective: root, -1 (all wait for all), -2 (scan)
  tag @4 :List(Int32);
  comm @5 :List(UInt64);           # communicator: 0 = MPI_COMM_WORLD, else a hash of its members
  sequence @6 :List(UInt64);       # n-th message of (sender, receiver, tag, comm); n-th collective of comm
  region @7 :List(UInt32);         # innermost open region node of the thread (0: none)
  eventsLost @8 :UInt64;
  waitBeginNs @9 :List(UInt64);    # start of the wait/test that completed a non-blocking operation (= beginNs if blocking)
  op @10 :List(UInt8);             # collective: which one (CollectiveOp: 1 barrier, 2 bcast, ...); 0 otherwise
}

struct Identity {
  idTuple @0 :List(IdElement);     # outermost first, e.g. host, rank, thread
  pid @1 :UInt32;
  hostname @2 :Text;
  executable @3 :Text;
  commandLine @4 :List(Text);
  startTimeNs @5 :UInt64;          # CLOCK_REALTIME, nanoseconds since the epoch
  endTimeNs @6 :UInt64;
  settings @7 :List(Setting);      # measurement settings as key/value text
}

struct IdElement {
  kind @0 :IdKind;
  value @1 :UInt64;
}

enum IdKind {
  node @0;                         # a compute node (host) index
  rank @1;                         # MPI rank
  thread @2;                       # thread index within its process, in creation order
  core @3;                         # hardware core
  process @4;                      # process index when there is no MPI rank (e.g. fork children)
}

struct Setting {
  key @0 :Text;
  value @1 :Text;
}

struct MetricDescriptor {
  name @0 :Text;
  unit @1 :Text;                   # unit of value = count x period, e.g. "ns"
  kind @2 :MetricKind;
  period @3 :UInt64;               # value of one sample (>= 1); 1 for counted metrics
  description @4 :Text;
}

enum MetricKind {
  sampled @0;                      # counts are samples; value = count x period
  counted @1;                      # counts are exact event counts; period is 1
}

struct LoadModule {
  path @0 :Text;
  buildId @1 :Data;                # GNU build-id note, empty when the module has none
  loadBegin @2 :UInt64;            # lowest mapped address in the measured process
  loadEnd @3 :UInt64;              # one past the highest mapped address
  loadBias @4 :UInt64;             # address = bias + ELF virtual address
}

# Frame table. A CCT node names one frame; identical frames are stored once.
# Either every frame is an address frame (from measurement) or a symbolic frame (from csp-gen
# and importers); `kind` says which table is filled.
struct Frames {
  kind @0 :FrameKind;
  # Address frames: module index into ThreadProfile.modules, offset relative to the module's
  # load bias (so that profiles of different processes agree despite ASLR).
  addressModule @1 :List(UInt32);
  addressOffset @2 :List(UInt64);
  # Symbolic frames: the scope they open, named through the string table.
  symbolicScope @3 :List(ScopeKind);
  symbolicName @4 :List(UInt32);   # procedure (ProcFrame, Alien); 0 otherwise
  symbolicFile @5 :List(UInt32);   # source file
  symbolicLine @6 :List(UInt32);   # line: of the statement, call, loop head, inlining call, or procedure
  symbolicModule @7 :List(UInt32); # load module name (ProcFrame); 0 otherwise
}

enum FrameKind {
  address @0;
  symbolic @1;
}

enum ScopeKind {
  root @0;
  procFrame @1;
  alien @2;
  loop @3;
  callSite @4;
  stmt @5;
}

# The raw calling context tree. Node 0 is the root (parent = 0xFFFFFFFF, frame = 0xFFFFFFFF);
# every other node's parent index is smaller than its own index.
struct Cct {
  parent @0 :List(UInt32);
  frame @1 :List(UInt32);
  # Format 1.1: empty, or per node how the measurement found the frame where the unwind tables
  # gave out: kind << 28 | link << 14 | slot (docs/profile-format.md, "Frames found without
  # unwind tables"). Older readers ignore it and see the scanned candidate frames as frames.
  unwindNote @2 :List(UInt32);
}

# Sparse sample counts, sorted by (node, metric), no duplicates, no zeros.
struct Values {
  node @0 :List(UInt32);
  metric @1 :List(UInt16);
  count @2 :List(UInt64);
}

struct RegionProfile {
  names @0 :List(Text);            # static region id -> name
  # Region tree, column-wise. Node 0 is the root (no region); parent index < own index.
  parent @1 :List(UInt32);
  staticId @2 :List(UInt32);
  dynamicId @3 :List(UInt64);
  count @4 :List(UInt64);          # completed visits
  inclusiveNs @5 :List(UInt64);
  exclusiveNs @6 :List(UInt64);
  # Optional event log, in time order: enter/exit of region nodes.
  eventTimeNs @7 :List(UInt64);    # CLOCK_MONOTONIC nanoseconds
  eventNode @8 :List(UInt32);
  eventIsEnter @9 :List(Bool);
  eventsLost @10 :UInt64;          # events not logged because the buffer was full
  mismatchedEnds @11 :UInt64;      # csp_region_end calls that did not match the open region
  unclosedAtExit @12 :UInt64;      # regions still open when the thread ended
  # Optional numeric attribute of enter events (a data-centric property, csp_region_begin_attr):
  # both lists empty, or as long as the event log; eventHasAttr is false on exit events.
  eventAttr @13 :List(Int64);
  eventHasAttr @14 :List(Bool);
}

struct MeasurementStats {
  samples @0 :UInt64;              # signals handled
  unwindFailures @1 :UInt64;       # samples whose unwind stopped early (path kept, truncated)
  droppedSamples @2 :UInt64;       # samples not recorded (arena full, re-entrancy)
  truncatedPaths @3 :UInt64;       # samples whose path exceeded the depth limit
}

# The creation contexts of OpenMP parallel regions and explicit tasks that a thread's samples ran
# in. A raw CCT node whose frame lies in the pseudo module "[omp context]" marks its subtree as
# sampled in the body of context `offset` (0xFFFFFFFF: a worker waiting in the runtime's pool).
struct LogicalContexts {
  parent @0 :List(UInt32);         # the creator's context, 0xFFFFFFFF: created outside any
  kind @1 :List(UInt8);            # 0 parallel region, 1 explicit task
  pathBegin @2 :List(UInt32);      # size + 1 offsets into pathFrame (empty when there is no context)
  pathFrame @3 :List(UInt32);      # the creators' frames, outermost first, ending with the call into the runtime
}
