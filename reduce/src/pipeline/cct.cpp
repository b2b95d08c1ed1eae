// The canonical CCT of all ranks (canonical_cct.hpp, docs/postprocessing.md).
#include "stages.hpp"

namespace csp::reduce::stages {

FinalCct unifyCct(const Comm& comm, LocalCct& localCct, StringTable& strings) {
  faultPoint(comm, "structure");
  comm.reduceTree([&](const std::vector<std::byte>& theirs) { localCct.merge(theirs); },
                  [&] { return localCct.serialize(); });
  FinalCct cct;
  std::vector<std::byte> finalBytes;
  if (comm.rank() == 0) {
    cct = FinalCct::fromLocal(localCct, strings);
    if (comm.size() > 1) finalBytes = cct.serialize(strings);
  }
  if (comm.size() > 1) {
    comm.broadcast(finalBytes);
    if (comm.rank() != 0) cct = FinalCct::deserialize(finalBytes, strings);
  }
  return cct;
}

}  // namespace csp::reduce::stages
