#include "worker/model/host_shared_table.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "worker/comm/peer_process.h"

namespace q38 {
namespace {

using Clock = std::chrono::steady_clock;

std::string NoticeDir() { return std::filesystem::is_directory("/dev/shm") ? "/dev/shm" : std::filesystem::temp_directory_path().string(); }

absl::Status Errno(absl::string_view what) { return absl::UnavailableError(absl::StrCat(what, ": ", strerror(errno))); }

// A notice's "pid fd", or {0, 0} where it cannot be read yet.
std::pair<int32_t, int> ReadNotice(const std::string& path) {
  std::ifstream f(path);
  int32_t pid = 0;
  int fd = 0;
  if (!(f >> pid >> fd)) return {0, 0};
  return {pid, fd};
}

std::shared_ptr<const uint8_t> Mapping(void* base, size_t bytes, std::function<void()> also = {}) {
  return std::shared_ptr<const uint8_t>(static_cast<const uint8_t*>(base), [bytes, also](const uint8_t* p) {
    munmap(const_cast<uint8_t*>(p), bytes);
    if (also) also();
  });
}

// This process makes the table: a memfd filled and published, the notice taken away with the last
// copy of the mapping here (other processes keep theirs).
absl::StatusOr<HostSharedTable> Make(const std::string& notice, const std::string& claim, size_t bytes,
                                     const std::function<void(uint8_t*)>& fill) {
  const int fd = memfd_create("q38-host-shared-table", MFD_CLOEXEC);
  if (fd < 0) return Errno("memfd_create");
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    close(fd);
    return Errno("size the shared table");
  }
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) {
    close(fd);
    return Errno("map the shared table");
  }
  fill(static_cast<uint8_t*>(base));
  const std::string tmp = absl::StrCat(notice, ".", getpid());
  {
    std::ofstream f(tmp);
    f << getpid() << " " << fd << "\n";
    if (!f) return absl::UnavailableError("cannot write " + tmp);
  }
  std::filesystem::rename(tmp, notice);
  HostSharedTable t;
  t.made_here = true;
  t.data = Mapping(base, bytes, [fd, notice, claim] {
    std::error_code ec;
    std::filesystem::remove(notice, ec);
    std::filesystem::remove(claim, ec);
    close(fd);
  });
  return t;
}

}  // namespace

absl::StatusOr<HostSharedTable> MapHostSharedTable(const std::string& key, size_t bytes,
                                                   const std::function<void(uint8_t*)>& fill, int timeout_ms) {
  const std::string base = absl::StrCat(NoticeDir(), "/q38-", key, "-", bytes);
  const std::string notice = base + ".table", claim = base + ".claim";
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    // The claim elects the maker; it holds the maker's pid, so that a maker that died is seen.
    const int c = open(claim.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);
    if (c >= 0) {
      const std::string pid = std::to_string(getpid());
      const bool written = write(c, pid.data(), pid.size()) == static_cast<ssize_t>(pid.size());
      close(c);
      if (!written) return Errno("claim the shared table");
      return Make(notice, claim, bytes, fill);
    }
    if (errno != EEXIST) return Errno("claim the shared table");
    if (auto [pid, fd] = ReadNotice(notice); pid > 0) {
      // Only the maker's memfd of the right size: a pid reused since names another process's file.
      const std::string path = absl::StrCat("/proc/", pid, "/fd/", fd);
      std::error_code ec;
      const bool ours = std::filesystem::read_symlink(path, ec).string().rfind("/memfd:q38-host-shared-table", 0) == 0;
      const int mine = ours ? open(path.c_str(), O_RDONLY | O_CLOEXEC) : -1;
      struct stat st {};
      if (mine >= 0 && (fstat(mine, &st) != 0 || static_cast<size_t>(st.st_size) != bytes)) {
        close(mine);
        return absl::FailedPreconditionError(absl::StrCat(base, ": the shared table is not of ", bytes, " bytes"));
      }
      if (mine >= 0) {
        void* at = mmap(nullptr, bytes, PROT_READ, MAP_SHARED, mine, 0);
        close(mine);
        if (at == MAP_FAILED) return Errno("map the shared table");
        return HostSharedTable{Mapping(at, bytes), false};
      }
      if (ours && !ProcessGone(pid)) return Errno(absl::StrCat("open process ", pid, "'s shared table"));
    }
    // A maker that is gone leaves its claim and maybe its notice: take both away and claim again.
    int32_t maker = 0;
    std::ifstream(claim) >> maker;
    if (maker > 0 && ProcessGone(maker)) {
      std::error_code ec;
      std::filesystem::remove(notice, ec);
      std::filesystem::remove(claim, ec);
      continue;
    }
    if (Clock::now() > deadline) {
      return absl::DeadlineExceededError(absl::StrCat("process ", maker, " did not finish the shared table ", base,
                                                      " within ", timeout_ms, " ms"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

}  // namespace q38
