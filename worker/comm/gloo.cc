// Gloo collectives for CPU workers in separate processes. Gloo reports failures by throwing;
// every call here turns them into a Status so a dead peer fails the request, not the process.
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/broadcast.h>
#include <gloo/config.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>

#include <csignal>
#include <chrono>
#include <exception>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "worker/comm/communicator.h"

namespace q38 {
namespace {

template <typename Fn>
absl::Status Guard(absl::string_view what, Fn fn) {
  try {
    fn();
    return absl::OkStatus();
  } catch (const gloo::IoException& e) {
    return absl::UnavailableError(absl::StrCat("gloo ", what, ": ", e.what()));
  } catch (const std::exception& e) {
    const std::string msg = e.what();
    if (msg.find("imed out") != std::string::npos) {
      return absl::DeadlineExceededError(absl::StrCat("gloo ", what, ": ", msg));
    }
    return absl::UnavailableError(absl::StrCat("gloo ", what, ": ", msg));
  }
}

class GlooCommunicator final : public Communicator {
 public:
  explicit GlooCommunicator(std::shared_ptr<gloo::rendezvous::Context> ctx) : ctx_(std::move(ctx)) {}
  int rank() const override { return ctx_->rank; }
  int size() const override { return ctx_->size; }
  std::string version() const override {
    return absl::StrCat("gloo-", GLOO_VERSION_MAJOR, ".", GLOO_VERSION_MINOR, ".", GLOO_VERSION_PATCH);
  }

  absl::Status AllReduceSum(Tensor& t) override {
    ASSIGN_OR_RETURN(float* data, HostF32(t));
    const size_t n = t.numel();
    return Guard("all-reduce", [&] {
      gloo::AllreduceOptions opts(ctx_);
      opts.setOutput(data, n);
      opts.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
      opts.setTag(next_tag_++);
      gloo::allreduce(opts);
    });
  }
  absl::Status AllGather(const Tensor& in_t, Tensor& out_t) override {
    ASSIGN_OR_RETURN(const float* in, HostF32(in_t));
    ASSIGN_OR_RETURN(float* out, HostF32(out_t));
    const size_t n = in_t.numel();
    if (out_t.numel() != static_cast<int64_t>(n) * size()) return absl::InvalidArgumentError("all-gather: output is not world × input");
    return Guard("all-gather", [&] {
      gloo::AllgatherOptions opts(ctx_);
      opts.setInput(const_cast<float*>(in), n);
      opts.setOutput(out, n * size());
      opts.setTag(next_tag_++);
      gloo::allgather(opts);
    });
  }
  absl::Status Broadcast(void* data, size_t n, int root) override {
    return Guard("broadcast", [&] {
      gloo::BroadcastOptions opts(ctx_);
      opts.setOutput(static_cast<uint8_t*>(data), n);
      opts.setRoot(root);
      opts.setTag(next_tag_++);
      gloo::broadcast(opts);
    });
  }

 private:
  std::shared_ptr<gloo::rendezvous::Context> ctx_;
  uint32_t next_tag_ = 0;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Communicator>> ConnectGloo(const GlooOptions& o) {
  if (o.size < 1 || o.rank < 0 || o.rank >= o.size) {
    return absl::InvalidArgumentError(absl::StrCat("gloo: rank ", o.rank, " outside a group of ", o.size));
  }
  // Gloo writes to plain TCP sockets: a peer that died would raise SIGPIPE and kill this process
  // instead of failing the collective with a status.
  signal(SIGPIPE, SIG_IGN);
  std::shared_ptr<gloo::rendezvous::Context> ctx;
  absl::Status s = Guard("rendezvous", [&] {
    gloo::transport::tcp::attr attr(o.hostname.c_str());
    auto device = gloo::transport::tcp::CreateDevice(attr);
    gloo::rendezvous::FileStore file_store(o.store_dir);
    gloo::rendezvous::PrefixStore store(o.prefix, file_store);
    ctx = std::make_shared<gloo::rendezvous::Context>(o.rank, o.size);
    ctx->setTimeout(std::chrono::milliseconds(o.timeout_ms));
    ctx->connectFullMesh(store, device);
  });
  if (!s.ok()) return s;
  return std::unique_ptr<Communicator>(std::make_unique<GlooCommunicator>(std::move(ctx)));
}

}  // namespace q38
