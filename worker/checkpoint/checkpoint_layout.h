// File names of a Hugging Face checkpoint directory.
#pragma once

#include <string>

namespace q38 {

inline constexpr char kSingleCheckpointFile[] = "model.safetensors";
inline constexpr char kCheckpointIndexFile[] = "model.safetensors.index.json";

// "model-00002-of-00005.safetensors" for index 2 (1-based) of count 5.
std::string ShardFileName(int index, int count);

}  // namespace q38
