#include "common/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace q38 {
namespace {

absl::Status ErrnoError(int err, absl::string_view what, const std::string& path) {
  return absl::InternalError(absl::StrCat("cannot ", what, " '", path, "': ", std::strerror(err)));
}

}  // namespace

AtomicFileWriter::AtomicFileWriter(std::string path)
    : path_(std::move(path)), tmp_path_(path_ + ".tmp") {}

AtomicFileWriter::~AtomicFileWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(tmp_path_.c_str());
}

absl::Status AtomicFileWriter::Open() {
  do {
    fd_ = ::open(tmp_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  } while (fd_ < 0 && errno == EINTR);
  if (fd_ < 0) return ErrnoError(errno, "create", tmp_path_);
  return absl::OkStatus();
}

absl::Status AtomicFileWriter::Append(const void* data, size_t n) {
  if (fd_ < 0) return absl::InternalError(absl::StrCat("'", tmp_path_, "' is not open"));
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd_, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return ErrnoError(errno, "write", tmp_path_);
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return absl::OkStatus();
}

absl::Status AtomicFileWriter::Commit() {
  if (fd_ < 0) return absl::InternalError(absl::StrCat("'", tmp_path_, "' is not open"));
  if (::fsync(fd_) != 0) return ErrnoError(errno, "flush", tmp_path_);
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) return ErrnoError(errno, "close", tmp_path_);
  if (::rename(tmp_path_.c_str(), path_.c_str()) != 0) {
    return absl::InternalError(
        absl::StrCat("cannot rename '", tmp_path_, "' to '", path_, "': ", std::strerror(errno)));
  }
  committed_ = true;
  return absl::OkStatus();
}

absl::Status WriteFileAtomically(const std::string& path, std::string_view contents) {
  AtomicFileWriter w(path);
  if (absl::Status s = w.Open(); !s.ok()) return s;
  if (absl::Status s = w.Append(contents.data(), contents.size()); !s.ok()) return s;
  return w.Commit();
}

}  // namespace q38
