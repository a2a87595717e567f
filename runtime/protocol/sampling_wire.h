// File: runtime/protocol/sampling_wire.h
// SamplingParams (hart.capnp) to and from sampling_options, for every schema
// that carries a generate's sampling: the client protocol's GenerateRequest,
// and the PD link's prefill, which hands the same parameters to the prefill
// server (runtime/pd_link). Reading checks the list counts against
// messages.h's limits before copying; the values themselves are
// validate_sampling's to judge. Readers may throw kj::Exception on malformed
// input; call them inside capnp_frame_read.
//
//   sampling_write(g.sampling, builder.initSampling());
//   HART_ASSIGN_OR_RETURN(sampling_options s, sampling_read(reader.getSampling()));
#pragma once

#include "runtime/core/status.h"
#include "runtime/protocol/hart.capnp.h"
#include "runtime/protocol/messages.h"

namespace hart::protocol {

void sampling_write(const sampling_options& in, wire::SamplingParams::Builder out);
/// invalid_argument naming the field: more stop strings or stop token ids than the limits.
status_or<sampling_options> sampling_read(wire::SamplingParams::Reader in);

}  // namespace hart::protocol
