// Collectives for CPU worker processes of one host through one shared-memory segment. Each rank
// posts its tensor into its own slot and bumps its sequence word; a rank that needs a peer's data
// sleeps on that word with a futex (no polling of sockets, no spinning while peers compute).
// Slots alternate between two banks: a rank can only reach collective s + 2 after every rank has
// posted s + 1, which each does only after it has finished reading s, so bank s % 2 is free again.
#include <fcntl.h>
#include <linux/futex.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status.h"
#include "worker/comm/communicator.h"

namespace q38 {
namespace {

using Clock = std::chrono::steady_clock;
constexpr uint64_t kMagic = 0x71333873686d3031;  // "q38shm01"

struct alignas(64) RankWord {
  std::atomic<uint32_t> posted{0};   // the last collective whose data this rank has written
  std::atomic<uint32_t> sleepers{0};  // peers asleep on `posted`
  std::atomic<int32_t> pid{0};
};
struct Header {
  std::atomic<uint64_t> magic;
  int32_t world;
  uint64_t slot_bytes;
  std::atomic<int32_t> attached;
};

size_t Align(size_t n) { return (n + 63) / 64 * 64; }
size_t SegmentBytes(int world, size_t slot_bytes) {
  return Align(sizeof(Header)) + world * sizeof(RankWord) + 2 * world * slot_bytes;
}

long Futex(std::atomic<uint32_t>* word, int op, uint32_t value, const timespec* timeout) {
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, value, timeout, nullptr, 0);
}

// A process that exited, or one that exited and is not yet reaped.
bool Gone(int32_t pid) {
  if (pid <= 0) return false;
  if (kill(pid, 0) != 0) return errno == ESRCH;
  std::ifstream stat(absl::StrCat("/proc/", pid, "/stat"));
  std::string line;
  std::getline(stat, line);
  const size_t close = line.rfind(')');
  return close != std::string::npos && close + 2 < line.size() && line[close + 2] == 'Z';
}

class ShmCommunicator final : public Communicator {
 public:
  ShmCommunicator(void* base, size_t bytes, int rank, int world, int timeout_ms)
      : base_(static_cast<char*>(base)), bytes_(bytes), rank_(rank), world_(world), timeout_ms_(timeout_ms) {
    header_ = reinterpret_cast<Header*>(base_);
    words_ = reinterpret_cast<RankWord*>(base_ + Align(sizeof(Header)));
    slots_ = base_ + Align(sizeof(Header)) + world * sizeof(RankWord);
    slot_bytes_ = header_->slot_bytes;
    // Spinning helps only where every rank has a core of its own; elsewhere it takes the core
    // from the peer being waited for.
    spin_ = std::thread::hardware_concurrency() > static_cast<unsigned>(world) ? 500 : 0;
  }
  ~ShmCommunicator() override { munmap(base_, bytes_); }

  int rank() const override { return rank_; }
  int size() const override { return world_; }
  std::string version() const override { return "shm-1"; }

  absl::Status AllReduceSum(Tensor& t) override {
    ASSIGN_OR_RETURN(float* data, HostF32(t));
    const size_t per = slot_bytes_ / sizeof(float);
    for (size_t begin = 0, n = t.numel(); begin < n; begin += per) {
      const size_t count = std::min(per, n - begin);
      RETURN_IF_ERROR(Post(data + begin, count * sizeof(float), "all-reduce"));
      RETURN_IF_ERROR(AwaitAll("all-reduce"));
      // In rank order from zero, as the in-process group adds: every rank gets the same bits.
      float* out = data + begin;
      std::fill(out, out + count, 0.0f);
      for (int r = 0; r < world_; ++r) {
        const float* in = reinterpret_cast<const float*>(Slot(r));
        for (size_t i = 0; i < count; ++i) out[i] += in[i];
      }
    }
    return absl::OkStatus();
  }

  absl::Status AllGather(const Tensor& in_t, Tensor& out_t) override {
    ASSIGN_OR_RETURN(const float* in, HostF32(in_t));
    ASSIGN_OR_RETURN(float* out, HostF32(out_t));
    const size_t n = in_t.numel();
    if (out_t.numel() != static_cast<int64_t>(n) * world_) return absl::InvalidArgumentError("all-gather: output is not world × input");
    const size_t per = slot_bytes_ / sizeof(float);
    for (size_t begin = 0; begin < n || begin == 0; begin += per) {
      const size_t count = std::min(per, n - begin);
      RETURN_IF_ERROR(Post(in + begin, count * sizeof(float), "all-gather"));
      RETURN_IF_ERROR(AwaitAll("all-gather"));
      for (int r = 0; r < world_; ++r) std::memcpy(out + r * n + begin, Slot(r), count * sizeof(float));
      if (n == 0) break;
    }
    return absl::OkStatus();
  }

  absl::Status Broadcast(void* data, size_t n, int root) override {
    if (root < 0 || root >= world_) return absl::InvalidArgumentError(absl::StrCat("broadcast: root ", root, " outside the group"));
    char* bytes = static_cast<char*>(data);
    for (size_t begin = 0; begin < n || begin == 0; begin += slot_bytes_) {
      const size_t count = std::min<size_t>(slot_bytes_, n - begin);
      // Every rank posts (the root its bytes, the others nothing), so that sequence numbers stay
      // in step and the bank rule above holds.
      RETURN_IF_ERROR(Post(bytes + begin, rank_ == root ? count : 0, "broadcast"));
      RETURN_IF_ERROR(AwaitAll("broadcast"));
      if (rank_ != root) std::memcpy(bytes + begin, Slot(root), count);
      if (n == 0) break;
    }
    return absl::OkStatus();
  }

 private:
  char* Slot(int r) const { return slots_ + (static_cast<size_t>(seq_ % 2) * world_ + r) * slot_bytes_; }

  absl::Status Post(const void* src, size_t n, const char* what) {
    if (failed_) return absl::UnavailableError(absl::StrCat("shm ", what, ": the group failed earlier"));
    ++seq_;
    if (n) std::memcpy(Slot(rank_), src, n);
    RankWord& mine = words_[rank_];
    mine.posted.store(seq_, std::memory_order_seq_cst);
    if (mine.sleepers.load(std::memory_order_seq_cst) > 0) Futex(&mine.posted, FUTEX_WAKE, INT32_MAX, nullptr);
    return absl::OkStatus();
  }

  // Waits until every rank has posted collective seq_.
  absl::Status AwaitAll(const char* what) {
    const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms_);
    for (int r = 0; r < world_; ++r) {
      if (r == rank_) continue;
      RankWord& w = words_[r];
      auto reached = [&] { return static_cast<int32_t>(w.posted.load(std::memory_order_acquire) - seq_) >= 0; };
      for (int i = 0; i < spin_ && !reached(); ++i) __builtin_ia32_pause();
      while (!reached()) {
        w.sleepers.fetch_add(1, std::memory_order_seq_cst);
        const uint32_t seen = w.posted.load(std::memory_order_seq_cst);
        if (static_cast<int32_t>(seen - seq_) < 0) {
          timespec slice{0, 100'000'000};  // wake now and then to look for a dead peer
          Futex(&w.posted, FUTEX_WAIT, seen, &slice);
        }
        w.sleepers.fetch_sub(1, std::memory_order_seq_cst);
        if (reached()) break;
        if (Gone(w.pid.load())) {
          failed_ = true;
          return absl::UnavailableError(absl::StrCat("shm ", what, ": rank ", r, " (pid ", w.pid.load(), ") exited"));
        }
        if (Clock::now() > deadline) {
          failed_ = true;
          return absl::DeadlineExceededError(absl::StrCat("shm ", what, ": rank ", r, " did not arrive within ",
                                                          timeout_ms_, " ms"));
        }
      }
    }
    return absl::OkStatus();
  }

  char* base_;
  size_t bytes_;
  int rank_, world_, timeout_ms_;
  Header* header_;
  RankWord* words_;
  char* slots_;
  size_t slot_bytes_;
  int spin_;
  uint32_t seq_ = 0;
  bool failed_ = false;  // after a timeout the peers' sequence numbers no longer match ours
};

std::string NameFile(const ShmOptions& o) { return (std::filesystem::path(o.store_dir) / (o.prefix + ".shm")).string(); }

std::string Hostname() {
  char buf[256] = {};
  gethostname(buf, sizeof(buf) - 1);
  return buf;
}

// Rank 0 creates the segment and names it in the store; the others read the name and open it.
absl::StatusOr<int> CreateOrOpen(const ShmOptions& o, const std::string& host, Clock::time_point deadline, std::string& name) {
  const std::string file = NameFile(o);
  if (o.rank == 0) {
    std::random_device rd;
    name = absl::StrFormat("/q38-%d-%08x%08x", getpid(), rd(), rd());
    const int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0) return absl::UnavailableError(absl::StrCat("shm: cannot create ", name, ": ", strerror(errno)));
    const std::string tmp = absl::StrCat(file, ".tmp");
    {
      std::ofstream out(tmp);
      out << name << "\n" << host << "\n";
      if (!out) {
        close(fd);
        shm_unlink(name.c_str());
        return absl::UnavailableError(absl::StrCat("shm: cannot write ", tmp));
      }
    }
    std::error_code ec;
    std::filesystem::rename(tmp, file, ec);
    if (ec) {
      close(fd);
      shm_unlink(name.c_str());
      return absl::UnavailableError(absl::StrCat("shm: cannot publish ", file, ": ", ec.message()));
    }
    return fd;
  }
  while (true) {
    std::ifstream in(file);
    std::string their_host;
    if (in && std::getline(in, name) && std::getline(in, their_host)) {
      if (their_host != host) {
        return absl::FailedPreconditionError(absl::StrCat("shm: rank 0 runs on ", their_host, ", rank ", o.rank, " on ", host,
                                                          "; shared memory joins ranks of one host only (use gloo)"));
      }
      const int fd = shm_open(name.c_str(), O_RDWR, 0);
      if (fd >= 0) return fd;
      return absl::UnavailableError(absl::StrCat("shm: cannot open ", name, ": ", strerror(errno)));
    }
    if (Clock::now() > deadline) {
      return absl::DeadlineExceededError(absl::StrCat("shm: rank 0 did not publish ", file, " within ", o.timeout_ms, " ms"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<Communicator>> ConnectSharedMemory(const ShmOptions& o) {
  if (o.size < 1 || o.rank < 0 || o.rank >= o.size) {
    return absl::InvalidArgumentError(absl::StrCat("shm: rank ", o.rank, " outside a group of ", o.size));
  }
  if (o.slot_bytes < 64 || o.slot_bytes % 64 != 0) return absl::InvalidArgumentError("shm: slot_bytes must be a positive multiple of 64");
  const auto deadline = Clock::now() + std::chrono::milliseconds(o.timeout_ms);
  const std::string host = Hostname();
  std::string name;
  ASSIGN_OR_RETURN(const int fd, CreateOrOpen(o, host, deadline, name));
  const size_t bytes = SegmentBytes(o.size, o.slot_bytes);
  auto forget = [&] {
    if (o.rank != 0) return;
    shm_unlink(name.c_str());
    std::error_code ec;
    std::filesystem::remove(NameFile(o), ec);
  };
  auto fail = [&](absl::Status s) {
    close(fd);
    forget();
    return s;
  };
  if (o.rank == 0 && ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    return fail(absl::UnavailableError(absl::StrCat("shm: cannot size ", name, " to ", bytes, " bytes: ", strerror(errno))));
  }
  // The others wait until rank 0 has sized and stamped the segment.
  Header* header = nullptr;
  void* base = MAP_FAILED;
  while (true) {
    struct stat st {};
    if (fstat(fd, &st) == 0 && static_cast<size_t>(st.st_size) == bytes) {
      base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      if (base == MAP_FAILED) return fail(absl::UnavailableError(absl::StrCat("shm: cannot map ", name, ": ", strerror(errno))));
      header = static_cast<Header*>(base);
      if (o.rank == 0) {
        header->world = o.size;
        header->slot_bytes = o.slot_bytes;
        header->magic.store(kMagic, std::memory_order_release);
      }
      if (header->magic.load(std::memory_order_acquire) == kMagic) break;
      munmap(base, bytes);
      base = MAP_FAILED;
    }
    if (Clock::now() > deadline) return fail(absl::DeadlineExceededError(absl::StrCat("shm: ", name, " was not set up in time")));
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (header->world != o.size || header->slot_bytes != o.slot_bytes) {
    munmap(base, bytes);
    return fail(absl::FailedPreconditionError(absl::StrCat("shm: ", name, " holds a group of ", header->world,
                                                           ", this rank expects ", o.size)));
  }
  close(fd);  // the mapping keeps the segment
  auto* words = reinterpret_cast<RankWord*>(static_cast<char*>(base) + Align(sizeof(Header)));
  words[o.rank].pid.store(getpid());
  header->attached.fetch_add(1);
  // A connected group is a whole one; then the name goes, so no segment outlives its ranks.
  while (header->attached.load() < o.size) {
    if (Clock::now() > deadline) {
      const int joined = header->attached.load();
      munmap(base, bytes);
      forget();
      return absl::DeadlineExceededError(absl::StrCat("shm: ", joined, " of ", o.size, " ranks joined within ",
                                                      o.timeout_ms, " ms"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  forget();
  return std::unique_ptr<Communicator>(std::make_unique<ShmCommunicator>(base, bytes, o.rank, o.size, o.timeout_ms));
}

}  // namespace q38
