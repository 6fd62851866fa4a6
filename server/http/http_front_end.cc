#include "server/http/http_front_end.h"

#include <httplib.h>

#include <chrono>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "server/host_port.h"
#include "server/http/openai_request.h"
#include "server/http/openai_response.h"
#include "server/http/peer_socket.h"

namespace q38::http {
namespace {

constexpr std::chrono::milliseconds kPeerPoll{20};

using nlohmann::json;

int64_t UnixSeconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// JSON as sent: a token's text may hold part of a UTF-8 character, shown as U+FFFD.
std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

int HttpStatus(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kOutOfRange:
      return 400;
    case absl::StatusCode::kUnauthenticated:
      return 401;
    case absl::StatusCode::kPermissionDenied:
      return 403;
    case absl::StatusCode::kNotFound:
      return 404;
    case absl::StatusCode::kResourceExhausted:
      return 429;
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kCancelled:  // only a drain cancels a request whose client is still there
      return 503;
    case absl::StatusCode::kDeadlineExceeded:
      return 504;
    default:
      return 500;
  }
}

std::string ErrorType(int status) {
  switch (status) {
    case 400:
    case 413:
      return "invalid_request_error";
    case 401:
      return "authentication_error";
    case 403:
      return "permission_error";
    case 404:
      return "not_found_error";
    case 429:
      return "rate_limit_error";
    case 503:
      return "service_unavailable";
    default:
      return "server_error";
  }
}

json StatusBody(const absl::Status& s, Endpoint endpoint) {
  const int status = HttpStatus(s.code());
  return ErrorBody(std::string(s.message()), ErrorType(status), status == 400 ? OpenAiParam(s, endpoint) : "",
                   absl::IsNotFound(s) ? "model_not_found" : "");
}

void Reply(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(Dump(body), "application/json");
}

void ReplyError(httplib::Response& res, const absl::Status& s, Endpoint endpoint = Endpoint::kCompletions) {
  Reply(res, HttpStatus(s.code()), StatusBody(s, endpoint));
}

std::string BearerToken(const httplib::Request& req) {
  const std::string value = req.get_header_value("Authorization");
  return absl::StartsWith(value, "Bearer ") ? value.substr(7) : "";
}

absl::StatusOr<json> ParseBody(const httplib::Request& req) {
  json body = json::parse(req.body, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) return absl::InvalidArgumentError("body: not valid JSON (or not UTF-8)");
  return body;
}

}  // namespace

HttpFrontEnd::HttpFrontEnd(const HttpOptions& options, Generations& generations, const Access& access, const ServiceInfo& info)
    : options_(options), generations_(generations), access_(access), info_(info), started_(UnixSeconds()) {}

absl::StatusOr<std::unique_ptr<HttpFrontEnd>> HttpFrontEnd::Start(const HttpOptions& options, Generations& generations,
                                                                   const Access& access, const ServiceInfo& info) {
  absl::StatusOr<HostPort> at = ParseHostPort(options.address);
  if (!at.ok()) return absl::InvalidArgumentError(absl::StrCat("--http ", at.status().message()));
  std::unique_ptr<HttpFrontEnd> h(new HttpFrontEnd(options, generations, access, info));
  if (!options.tls_cert.empty()) {
    h->server_ = std::make_unique<httplib::SSLServer>(options.tls_cert.c_str(), options.tls_key.c_str());
  } else {
    h->server_ = std::make_unique<httplib::Server>();
  }
  if (!h->server_->is_valid()) return absl::InvalidArgumentError("--http over TLS: the certificate or key is not usable");
  h->server_->new_task_queue = [n = options.threads] { return new httplib::ThreadPool(n); };
  h->server_->set_payload_max_length(static_cast<size_t>(options.max_request_bytes));
  h->Route();
  h->port_ = at->port == 0 ? h->server_->bind_to_any_port(at->host.c_str())
                           : (h->server_->bind_to_port(at->host.c_str(), at->port) ? at->port : -1);
  if (h->port_ <= 0) return absl::UnavailableError(absl::StrCat("cannot serve HTTP on ", options.address));
  h->thread_ = std::thread([srv = h->server_.get()] { srv->listen_after_bind(); });
  return h;
}

HttpFrontEnd::~HttpFrontEnd() {
  if (server_) server_->stop();
  if (thread_.joinable()) thread_.join();
}

void HttpFrontEnd::Route() {
  httplib::Server& s = *server_;
  // Every route but /health needs the API key when the server has one.
  s.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (req.path == "/health") return httplib::Server::HandlerResponse::Unhandled;
    if (absl::Status a = access_.CheckUserToken(BearerToken(req)); !a.ok()) {
      ReplyError(res, a);
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  // Unknown routes (404), bodies over the limit (413) and the like get OpenAI's error body too.
  s.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    const std::string message = res.status == 404   ? absl::StrCat("no route ", req.method, " ", req.path)
                                : res.status == 413 ? "body: larger than --max_request_bytes"
                                                    : absl::StrCat("HTTP ", res.status);
    Reply(res, res.status, ErrorBody(message, ErrorType(res.status)));
  });
  s.set_exception_handler([](const httplib::Request& req, httplib::Response& res, std::exception_ptr e) {
    std::string what = "unknown exception";
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& x) {
      what = x.what();
    } catch (...) {
    }
    LOG(ERROR) << "HTTP " << req.method << " " << req.path << ": " << what;
    Reply(res, 500, ErrorBody("internal error", "server_error"));
  });

  s.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    Reply(res, serving_.load() ? 200 : 503, {{"status", serving_.load() ? "ok" : "unavailable"}});
  });
  s.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    Reply(res, 200,
          {{"object", "list"},
           {"data", json::array({{{"id", options_.served_model},
                                  {"object", "model"},
                                  {"created", started_},
                                  {"owned_by", "q38"},
                                  {"max_model_len", info_.limits.max_context}}})}});
  });
  s.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    Complete(req, res, Endpoint::kCompletions);
  });
  s.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
    Complete(req, res, Endpoint::kChat);
  });
  s.Post("/tokenize", [this](const httplib::Request& req, httplib::Response& res) {
    absl::StatusOr<json> body = ParseBody(req);
    absl::StatusOr<v1::GenerateRequest> parsed = body.ok() ? ParseTokenizeRequest(*body, options_.served_model) : body.status();
    absl::StatusOr<std::vector<int32_t>> ids = parsed.ok() ? generations_.Prompt(*parsed) : parsed.status();
    if (!ids.ok()) return ReplyError(res, ids.status(), parsed.ok() && parsed->has_chat() ? Endpoint::kChat : Endpoint::kCompletions);
    Reply(res, 200, {{"count", ids->size()}, {"max_model_len", info_.limits.max_context}, {"tokens", *ids}});
  });
  s.Post("/detokenize", [this](const httplib::Request& req, httplib::Response& res) {
    absl::StatusOr<json> body = ParseBody(req);
    absl::StatusOr<std::vector<int32_t>> ids = body.ok() ? ParseDetokenizeRequest(*body, options_.served_model) : body.status();
    if (!ids.ok()) return ReplyError(res, ids.status());
    if (info_.tokenizer == nullptr) return ReplyError(res, absl::FailedPreconditionError("tokens: this model ships no tokenizer"));
    for (size_t i = 0; i < ids->size(); ++i) {
      if ((*ids)[i] >= info_.limits.vocab_size) {
        return ReplyError(res, absl::InvalidArgumentError(absl::StrCat("tokens[", i, "]: ", (*ids)[i],
                                                                       " is outside the vocabulary of ", info_.limits.vocab_size)));
      }
    }
    Reply(res, 200, {{"prompt", info_.tokenizer->Decode(*ids)}});
  });
}

void HttpFrontEnd::Complete(const httplib::Request& req, httplib::Response& res, Endpoint endpoint) {
  absl::StatusOr<json> body = ParseBody(req);
  absl::StatusOr<OpenAiRequest> parsed = body.ok() ? ParseOpenAiRequest(*body, endpoint, options_.served_model) : body.status();
  if (!parsed.ok()) return ReplyError(res, parsed.status(), endpoint);
  v1::GenerateRequest& generate = parsed->generate;
  if (generate.max_tokens() == 0) {  // chat without max_tokens: the rest of the context
    absl::StatusOr<std::vector<int32_t>> ids = generations_.Prompt(generate);
    if (!ids.ok()) return ReplyError(res, ids.status(), endpoint);
    const int64_t rest = info_.limits.max_context - static_cast<int64_t>(ids->size());
    if (rest < 1) {
      return ReplyError(res, absl::InvalidArgumentError(absl::StrCat("messages: the prompt of ", ids->size(),
                                                                     " tokens fills the context of ", info_.limits.max_context)),
                        endpoint);
    }
    generate.set_max_tokens(static_cast<int32_t>(rest));
    generate.mutable_tokens()->mutable_ids()->Assign(ids->begin(), ids->end());  // tokenized once, not again in Admit
  }
  absl::StatusOr<std::unique_ptr<Generation>> admitted = generations_.Admit(generate);
  if (!admitted.ok()) return ReplyError(res, admitted.status(), endpoint);
  const std::string id = absl::StrCat(endpoint == Endpoint::kChat ? "chatcmpl-" : "cmpl-", started_, "-", next_id_++);
  auto builder = std::make_shared<ResponseBuilder>(*parsed, id, options_.served_model, UnixSeconds(), info_.tokenizer);
  // A client that hangs up cancels its request within a step, however long it has been silent.
  const PeerSocket peer = PeerSocket::Find(req.local_addr, req.local_port, req.remote_addr, req.remote_port);
  // The socket is looked at every kPeerPoll: HTTP has no cancel event to wait for.
  auto gone = [peer] { return peer.Closed() ? worker::v1::CANCEL_REASON_CLIENT : worker::v1::CANCEL_REASON_UNSPECIFIED; };

  if (!parsed->stream) {
    const absl::Status s = (*admitted)->Relay([&](const v1::GenerateResponse& m) { builder->Add(m); return true; }, gone, kPeerPoll);
    if (!s.ok()) return ReplyError(res, s, endpoint);
    return Reply(res, 200, builder->Body());
  }
  // Streaming: the status line is sent now; an error after it is a last event before [DONE].
  // Dropped unsent (the client left first), the generation cancels itself.
  std::shared_ptr<Generation> generation = std::move(*admitted);
  const bool include_usage = parsed->include_usage;
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider("text/event-stream", [=](size_t, httplib::DataSink& sink) {
    bool open = true;
    auto send = [&](const std::string& event) {
      open = open && sink.write(event.data(), event.size());
      return open;
    };
    auto data = [&](const json& j) { return send("data: " + Dump(j) + "\n\n"); };
    if (endpoint == Endpoint::kChat) data(builder->RoleChunk());
    const absl::Status s = generation->Relay(
        [&](const v1::GenerateResponse& m) {
          const json chunk = builder->Chunk(m);
          return chunk.is_null() ? open : data(chunk);
        },
        gone, kPeerPoll);
    if (!s.ok()) {
      data(StatusBody(s, endpoint));
    } else if (include_usage) {
      data(builder->UsageChunk());
    }
    send("data: [DONE]\n\n");
    sink.done();
    return open;
  });
}

}  // namespace q38::http
