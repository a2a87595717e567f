// File: runtime/protocol/routing_parts.h — a sample's routing (final_event::
// routing, docs/protocol.md §5.3) too large for one message: the server cuts
// it into routing_part replies of whole positions, each within a limit of ids,
// sent before the final (final_event::routing_parts counts them); a client
// feeds what it receives to a routing_assembler, which puts the routing back
// into the final.
//
//   auto parts = split_routing(std::move(f.routing), f.request_id, f.sample_index, max_ids);
//   f.routing_parts = uint32_t(parts.size());            // then send parts..., f
//
//   routing_assembler a;                                   // client side
//   HART_RETURN_IF_ERROR(a.add(part));                     // for each routing_part
//   HART_RETURN_IF_ERROR(a.complete(&final));              // for each final
#pragma once

#include "runtime/core/status.h"
#include "runtime/protocol/messages.h"

#include <cstdint>
#include <map>
#include <utility>
#include <vector>

namespace hart::protocol {

/// Whole positions per part, each part's ids (over all layers) <= max_ids
/// (at least one position per part). An empty routing gives no parts.
std::vector<routing_part> split_routing(routing_info&& routing, uint64_t request_id, uint32_t sample_index,
                                        int64_t max_ids);

/// Joins the parts of each (request, sample), in position order, and hands the
/// routing to that sample's final. Parts must continue where the previous one
/// ended with the same layers and k (a refused part changes nothing); a
/// final's routing_parts must match the parts received (a final that does not
/// is refused, and its sample's parts are dropped: the sample is over).
class routing_assembler {
 public:
  status add(routing_part&& part);
  /// Moves the sample's joined routing into f (when f.routing_parts > 0) and
  /// forgets the sample; f unchanged when it has no parts.
  status complete(final_event* f);
  /// Samples with parts waiting for their final.
  size_t pending() const { return pending_.size(); }

 private:
  struct joined {
    routing_info routing;
    uint32_t parts = 0;
  };
  std::map<std::pair<uint64_t, uint32_t>, joined> pending_;
};

}  // namespace hart::protocol
