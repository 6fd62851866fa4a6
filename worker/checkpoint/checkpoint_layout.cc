#include "worker/checkpoint/checkpoint_layout.h"

#include <cstdio>

namespace q38 {

std::string ShardFileName(int index, int count) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "model-%05d-of-%05d.safetensors", index, count);
  return buf;
}

}  // namespace q38
