// The model and generation config parsers (config.json, generation_config.json) on arbitrary text:
// OK or an error, never a crash; a config that parses also survives writing and parsing again.
#include <cstdint>
#include <string>

#include "common/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  if (auto config = q38::ParseModelConfig(text); config.ok()) {
    if (!q38::ParseModelConfig(q38::ModelConfigJson(*config)).ok()) __builtin_trap();
  }
  if (auto generation = q38::ParseGenerationConfig(text); generation.ok()) {
    if (!q38::ParseGenerationConfig(q38::GenerationConfigJson(*generation)).ok()) __builtin_trap();
  }
  return 0;
}
