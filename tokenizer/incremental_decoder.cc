#include "tokenizer/incremental_decoder.h"

namespace q38 {

std::string IncrementalDecoder::Add(int32_t id) { return Add(absl::MakeConstSpan(&id, 1)); }

std::string IncrementalDecoder::Add(absl::Span<const int32_t> ids) {
  bytes_.clear();
  for (int32_t id : ids) tokenizer_->AppendTokenBytes(id, options_, &bytes_);
  std::string delta;
  stream_.Append(bytes_, &delta);
  return delta;
}

std::string IncrementalDecoder::Finish() {
  std::string delta;
  stream_.Finish(&delta);
  return delta;
}

}  // namespace q38
