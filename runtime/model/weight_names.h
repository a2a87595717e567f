// File: runtime/model/weight_names.h
// One canonical spelling for every V4 tensor: the official release names
// without the `model.` prefix (`layers.3.attn.wq_a.weight`, `embed.weight`,
// `layers.0.ffn.experts.7.w2.weight`). Checkpoints may use the official names,
// the Hugging Face module names (`model.layers.3.self_attn.q_a_proj.weight`),
// or the mix Hugging Face writes on save (`model.layers.3.attn.wq_a.weight`,
// `model.embed_tokens.weight`); all map here. FP8 scales (`.scale` or
// `.weight_scale_inv`) map to `<name>.scale`.
#pragma once

#include <string>
#include <string_view>

namespace hart {

/// Canonical name of a checkpoint tensor name. Unknown names pass through
/// with only the `model.` prefix removed.
std::string canonical_weight_name(std::string_view name);

}  // namespace hart
