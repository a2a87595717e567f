// File: actors/cli/device_engine.h
// The engine a command runs on, picked by `--device cpu|cuda`: the CPU engine
// behind forward_engine, or the GPU engine where hart was built with CUDA.
#pragma once

#include <memory>

#include "actors/cli/cli_common.h"
#include "runtime/model/forward_engine.h"

namespace hart::cli {

/// invalid_argument for an unknown device; failed_precondition for `cuda`
/// in a build without CUDA or on a machine without a device.
status_or<std::unique_ptr<forward_engine>> load_forward_engine(const common_options& o);

}  // namespace hart::cli
