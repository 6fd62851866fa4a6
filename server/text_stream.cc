#include "server/text_stream.h"

#include <algorithm>

namespace q38 {
namespace {

// Moves `end` back to the start of the UTF-8 character it falls inside, if any.
size_t CharBoundary(const std::string& s, size_t end) {
  while (end > 0 && end < s.size() && (static_cast<unsigned char>(s[end]) & 0xC0) == 0x80) --end;
  return end;
}

}  // namespace

TextStream::TextStream(const Tokenizer& tokenizer, std::vector<std::string> stops)
    : decoder_(tokenizer, DecodeOptions{.skip_special_tokens = true}), stops_(std::move(stops)) {
  for (const std::string& s : stops_) holdback_ = std::max(holdback_, s.size() - 1);
}

TextStream::Delta TextStream::Add(absl::Span<const int32_t> ids) {
  Delta d;
  if (stopped_) {
    d.stopped = true;
    return d;
  }
  text_ += decoder_.Add(ids);
  // A stop string can only begin in what has not been returned yet.
  size_t first = std::string::npos;
  for (const std::string& s : stops_) first = std::min(first, text_.find(s, sent_));
  if (first != std::string::npos) {
    d.text = text_.substr(sent_, first - sent_);
    d.stopped = stopped_ = true;
    sent_ = first;
    return d;
  }
  const size_t safe = CharBoundary(text_, text_.size() > sent_ + holdback_ ? text_.size() - holdback_ : sent_);
  if (safe > sent_) {
    d.text = text_.substr(sent_, safe - sent_);
    sent_ = safe;
  }
  return d;
}

std::string TextStream::Finish() {
  if (stopped_) return "";
  text_ += decoder_.Finish();
  std::string rest = text_.substr(sent_);
  sent_ = text_.size();
  return rest;
}

}  // namespace q38
