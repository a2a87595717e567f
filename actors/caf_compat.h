// File: actors/caf_compat.h
// The one place hart touches CAF 0.17's dialect (style R18): includes, atoms
// and the unsafe (shared_ptr, never serialized) message types. Moving to CAF
// 0.18+ changes this header, not the actors.
#pragma once

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#include <caf/all.hpp>
#pragma GCC diagnostic pop

#include "actors/msg/serve_msgs.h"
#include "actors/msg/weight_sync_msgs.h"
#include "runtime/weight_sync/sync_server.h"

namespace hart::actors {

using submit_atom = caf::atom_constant<caf::atom("submit")>;    // gateway -> engine: a generation
using control_atom = caf::atom_constant<caf::atom("control")>;  // gateway -> engine: a control verb
using events_atom = caf::atom_constant<caf::atom("events")>;    // engine -> gateway: token/finish events
using reply_atom = caf::atom_constant<caf::atom("reply")>;      // engine -> gateway: a control reply
using inbound_atom = caf::atom_constant<caf::atom("inbound")>;  // transport -> gateway: a decoded request
using sync_atom = caf::atom_constant<caf::atom("wsync")>;       // sync socket -> weight sync: a decoded message
using swap_atom = caf::atom_constant<caf::atom("swap")>;        // weight sync -> engine: swap at a step boundary
using swapped_atom = caf::atom_constant<caf::atom("swapped")>;  // engine -> weight sync: the swap's outcome

}  // namespace hart::actors

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::shared_ptr<const hart::actors::inbound_request>)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::shared_ptr<const hart::actors::submit_request>)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::shared_ptr<const hart::actors::control_call>)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::shared_ptr<const hart::sched::event_batch>)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::shared_ptr<const hart::actors::addressed_reply>)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::shared_ptr<const hart::weight_sync::inbound_sync>)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::shared_ptr<const hart::actors::swap_request>)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::shared_ptr<const hart::actors::swap_outcome>)
