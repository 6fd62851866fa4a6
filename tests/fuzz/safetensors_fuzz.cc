// SafetensorsFile::Open on arbitrary file contents: OK or an error, never a crash, and on OK every
// tensor lies inside the data section, which the tensors tile exactly.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <string>

#include "worker/checkpoint/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // One in-memory file, rewritten for each input: Open maps a path.
  static const int fd = memfd_create("fuzz.safetensors", 0);
  static const std::string path = "/proc/self/fd/" + std::to_string(fd);
  if (ftruncate(fd, 0) != 0 || (size > 0 && pwrite(fd, data, size, 0) != static_cast<ssize_t>(size))) __builtin_trap();
  auto file = q38::SafetensorsFile::Open(path);
  if (!file.ok()) return 0;
  const std::string_view section = (*file)->data();
  const auto* begin = reinterpret_cast<const uint8_t*>(section.data());
  size_t total = 0;
  volatile uint8_t sink = 0;
  for (const q38::TensorView& t : (*file)->tensors()) {
    if (t.nbytes > 0 && (t.data < begin || t.data + t.nbytes > begin + section.size())) __builtin_trap();
    if (t.nbytes > 0) sink = t.data[0] ^ t.data[t.nbytes - 1];  // touch both ends
    total += t.nbytes;
  }
  if (total != section.size()) __builtin_trap();
  return 0;
}
