// Collectives for CPU worker processes of one host through one shared memory segment: a file in
// the rendezvous directory, mapped by every rank (the coordinator owns that directory and removes
// it with its run directory, so a group killed mid-rendezvous leaves nothing elsewhere). Each rank
// posts its tensor into its own slot and bumps its sequence word; a rank that needs a peer's data
// sleeps on that word with a futex (no polling of sockets, no spinning while peers compute).
// Slots alternate between two banks: a rank can only reach collective s + 2 after every rank has
// posted s + 1, which each does only after it has finished reading s, so bank s % 2 is free again.
#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "worker/comm/communicator.h"
#include "worker/comm/peer_process.h"

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
  char host[64];  // rank 0's
};

size_t Align(size_t n) { return (n + 63) / 64 * 64; }
size_t SegmentBytes(int world, size_t slot_bytes) {
  return Align(sizeof(Header)) + world * sizeof(RankWord) + 2 * world * slot_bytes;
}

long Futex(std::atomic<uint32_t>* word, int op, uint32_t value, const timespec* timeout) {
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, value, timeout, nullptr, 0);
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
        if (ProcessGone(w.pid.load())) {
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

std::string SegmentFile(const ShmOptions& o) { return (std::filesystem::path(o.store_dir) / (o.prefix + ".shm")).string(); }

std::string Hostname() {
  char buf[256] = {};
  gethostname(buf, sizeof(buf) - 1);
  return buf;
}

// Rank 0 builds the segment under a temporary name, sized and stamped, and renames it into place,
// so that whoever opens it finds it whole.
absl::StatusOr<int> Create(const ShmOptions& o, const std::string& host, size_t bytes) {
  const std::string file = SegmentFile(o), tmp = file + ".tmp";
  const int fd = open(tmp.c_str(), O_CREAT | O_TRUNC | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("shm: cannot create ", tmp, ": ", strerror(errno)));
  auto fail = [&](const std::string& what) {
    const std::string why = strerror(errno);
    close(fd);
    unlink(tmp.c_str());
    return absl::UnavailableError(absl::StrCat("shm: cannot ", what, " ", tmp, ": ", why));
  };
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) return fail(absl::StrCat("size to ", bytes, " bytes"));
  void* base = mmap(nullptr, sizeof(Header), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) return fail("map");
  auto* header = static_cast<Header*>(base);
  header->world = o.size;
  header->slot_bytes = o.slot_bytes;
  std::strncpy(header->host, host.c_str(), sizeof(header->host) - 1);
  header->magic.store(kMagic, std::memory_order_release);
  munmap(base, sizeof(Header));
  if (rename(tmp.c_str(), file.c_str()) != 0) return fail("publish");
  return fd;
}

// The others open it once it is there.
absl::StatusOr<int> Open(const ShmOptions& o, Clock::time_point deadline) {
  const std::string file = SegmentFile(o);
  while (true) {
    const int fd = open(file.c_str(), O_RDWR | O_CLOEXEC);
    if (fd >= 0) return fd;
    if (errno != ENOENT) return absl::UnavailableError(absl::StrCat("shm: cannot open ", file, ": ", strerror(errno)));
    if (Clock::now() > deadline) {
      return absl::DeadlineExceededError(absl::StrCat("shm: rank 0 did not create ", file, " within ", o.timeout_ms, " ms"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<Communicator>> ConnectSharedMemory(const ShmOptions& o) {
  if (o.size < 1 || o.rank < 0 || o.rank >= o.size) {
    return absl::InvalidArgumentError(absl::StrCat("shm: rank ", o.rank, " outside a group of ", o.size));
  }
  if (o.slot_bytes < 64 || o.slot_bytes % 64 != 0) return absl::InvalidArgumentError("shm: slot_bytes must be a positive multiple of 64");
  const auto deadline = Clock::now() + std::chrono::milliseconds(o.timeout_ms);
  const std::string host = o.host.empty() ? Hostname() : o.host;
  const std::string file = SegmentFile(o);
  const size_t bytes = SegmentBytes(o.size, o.slot_bytes);
  ASSIGN_OR_RETURN(const int fd, o.rank == 0 ? Create(o, host, bytes) : Open(o, deadline));
  // Rank 0 takes the file away once the group is whole, or when it gives up; a group killed before
  // that leaves it to the removal of the rendezvous directory.
  auto forget = [&] {
    if (o.rank == 0) unlink(file.c_str());
  };
  struct stat st {};
  if (fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) != bytes) {
    close(fd);
    forget();
    return absl::FailedPreconditionError(absl::StrCat("shm: ", file, " holds ", st.st_size, " bytes, a group of ", o.size,
                                                      " with ", o.slot_bytes, "-byte slots needs ", bytes));
  }
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int map_errno = errno;
  close(fd);  // the mapping keeps the memory
  if (base == MAP_FAILED) {
    forget();
    return absl::UnavailableError(absl::StrCat("shm: cannot map ", file, ": ", strerror(map_errno)));
  }
  auto* header = static_cast<Header*>(base);
  auto refuse = [&](absl::Status s) {
    munmap(base, bytes);
    forget();
    return s;
  };
  if (header->magic.load(std::memory_order_acquire) != kMagic || header->world != o.size ||
      header->slot_bytes != o.slot_bytes) {
    return refuse(absl::FailedPreconditionError(absl::StrCat("shm: ", file, " is not a segment of a group of ", o.size)));
  }
  if (header->host != host) {
    return refuse(absl::FailedPreconditionError(absl::StrCat("shm: rank 0 runs on ", header->host, ", rank ", o.rank, " on ",
                                                             host, "; shared memory joins ranks of one host only (use gloo)")));
  }
  auto* words = reinterpret_cast<RankWord*>(static_cast<char*>(base) + Align(sizeof(Header)));
  words[o.rank].pid.store(getpid());
  header->attached.fetch_add(1);
  // A connected group is a whole one. A rank that gives up takes its count back, unless the group
  // became whole meanwhile (then it is connected after all), so no one else counts it.
  while (header->attached.load() < o.size) {
    if (Clock::now() > deadline) {
      int joined = header->attached.load();
      while (joined < o.size && !header->attached.compare_exchange_weak(joined, joined - 1)) {
      }
      if (joined >= o.size) break;
      words[o.rank].pid.store(0);
      return refuse(absl::DeadlineExceededError(absl::StrCat("shm: ", joined, " of ", o.size, " ranks joined within ",
                                                             o.timeout_ms, " ms")));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  forget();
  return std::unique_ptr<Communicator>(std::make_unique<ShmCommunicator>(base, bytes, o.rank, o.size, o.timeout_ms));
}

}  // namespace q38
