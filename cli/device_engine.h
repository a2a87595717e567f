// File: cli/device_engine.h
// The engine a command runs on, picked by `--device cpu|cuda`: the CPU engine
// behind forward_engine, or the GPU engine where hart was built with CUDA.
#pragma once

#include "cli/cli_common.h"
#include "runtime/gpu/gpu_engine.h"  // gpu_engine_params only, in a build without CUDA
#include "runtime/model/forward_engine.h"

#include <memory>

namespace hart::cli {

/// failed_precondition: --device cuda in a build without CUDA.
status no_cuda_build();

/// invalid_argument for an unknown device; failed_precondition for `cuda`
/// in a build without CUDA or on a machine without a device.
status_or<std::unique_ptr<forward_engine>> load_forward_engine(const common_options& o);

/// The GPU engine for `o` (--model, --precision, --deterministic,
/// --enforce-eager over `p`'s sizes): the checkpoint in o.model_dir, or with
/// --load-format dummy random weights made on the device for
/// dummy_model_config's shapes (routed experts MXFP4 where the release
/// format has them). failed_precondition in a build without CUDA.
status_or<std::unique_ptr<gpu_engine>> load_gpu_engine(const common_options& o, gpu_engine_params p);

}  // namespace hart::cli
