// The public RPCs take their requests as raw bytes and parse them here, so that bytes that do not
// decode (or a string field that is not UTF-8) get INVALID_ARGUMENT naming the message, where
// gRPC's own parsing answers INTERNAL with an empty message. Handlers stay plain blocking code:
// a streaming one runs on a thread of its own and writes through a MessageWriter.
#pragma once

#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "grpcpp/grpcpp.h"
#include "grpcpp/support/proto_buffer_reader.h"

namespace q38 {

template <class T>
class MessageWriter {
 public:
  virtual ~MessageWriter() = default;
  // False once the stream is broken (the client went away).
  virtual bool Write(const T& message) = 0;
  // `hook` runs once when the call is cancelled (the client cancelled, left or ran past its
  // deadline), at once if it already was; on gRPC's thread, so it must not block. An empty hook
  // unregisters it: once this returns, the previous one has finished and will not run.
  virtual void OnCancelled(std::function<void()> hook) = 0;
};

// INVALID_ARGUMENT naming the message type when `raw` does not decode.
template <class Req>
grpc::Status ParseRequest(grpc::ByteBuffer raw, Req* out) {
  grpc::ProtoBufferReader reader(&raw);
  if (out->ParseFromZeroCopyStream(&reader)) return grpc::Status::OK;
  return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                      "request: the bytes are not a valid " + Req::descriptor()->full_name() +
                          " (malformed protobuf, or a string field that is not UTF-8)");
}

template <class Req, class Resp>
using StreamingBody = std::function<grpc::Status(grpc::ServerContextBase&, const Req&, MessageWriter<Resp>&)>;

// A server-streaming call whose handler blocks: it runs on its own thread, and each Write waits
// until gRPC has taken the message.
template <class Req, class Resp>
class ThreadedStream final : public grpc::ServerWriteReactor<grpc::ByteBuffer>, public MessageWriter<Resp> {
 public:
  ThreadedStream(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* raw, StreamingBody<Req, Resp> body) {
    Req req;
    if (grpc::Status s = ParseRequest(*raw, &req); !s.ok()) {
      Finish(s);
      return;
    }
    thread_ = std::thread([this, ctx, req = std::move(req), body = std::move(body)] { Finish(body(*ctx, req, *this)); });
  }

  bool Write(const Resp& message) override {
    grpc::ByteBuffer buffer;
    bool own = false;
    if (!grpc::SerializationTraits<Resp>::Serialize(message, &buffer, &own).ok()) return false;
    std::unique_lock<std::mutex> l(mu_);
    writing_ = true;
    StartWrite(&buffer);
    cv_.wait(l, [&] { return !writing_; });
    return write_ok_;
  }

  void OnCancelled(std::function<void()> hook) override {
    std::lock_guard<std::mutex> l(cancel_mu_);
    cancel_hook_ = std::move(hook);
    if (cancelled_ && cancel_hook_) cancel_hook_();
  }

  void OnCancel() override {
    std::lock_guard<std::mutex> l(cancel_mu_);
    cancelled_ = true;
    if (cancel_hook_) cancel_hook_();
  }

  void OnWriteDone(bool ok) override {
    std::lock_guard<std::mutex> l(mu_);
    writing_ = false;
    write_ok_ = ok;
    cv_.notify_all();
  }

  void OnDone() override {
    if (thread_.joinable()) {
      if (thread_.get_id() == std::this_thread::get_id()) {
        thread_.detach();  // gRPC ran OnDone inside our own Finish: the thread ends right after
      } else {
        thread_.join();
      }
    }
    delete this;
  }

 private:
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool writing_ = false, write_ok_ = false;
  std::mutex cancel_mu_;
  std::function<void()> cancel_hook_;
  bool cancelled_ = false;
};

// A unary call: parsed here, answered inline.
template <class Req, class Resp>
grpc::ServerUnaryReactor* Unary(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* raw, grpc::ByteBuffer* out,
                                const std::function<grpc::Status(grpc::ServerContextBase&, const Req&, Resp*)>& body) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  Req req;
  grpc::Status status = ParseRequest(*raw, &req);
  if (status.ok()) {
    Resp resp;
    status = body(*ctx, req, &resp);
    bool own = false;
    if (status.ok() && !grpc::SerializationTraits<Resp>::Serialize(resp, out, &own).ok()) {
      status = grpc::Status(grpc::StatusCode::INTERNAL, "the response could not be serialized");
    }
  }
  reactor->Finish(status);
  return reactor;
}

}  // namespace q38
