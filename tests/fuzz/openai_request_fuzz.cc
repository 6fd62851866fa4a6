// The HTTP API's request parsers (server/http/openai_request.h) on arbitrary bytes, as the
// front end runs them: JSON without exceptions, then each endpoint's parser. OK, INVALID_ARGUMENT
// or NOT_FOUND, never a crash; an accepted request passes the shared validation or is refused
// there as INVALID_ARGUMENT.
#include <cstdint>
#include <string>

#include "server/http/openai_request.h"
#include "server/validation.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const nlohmann::json body = nlohmann::json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) return 0;
  auto expected = [](const absl::Status& s) { return s.ok() || absl::IsInvalidArgument(s) || absl::IsNotFound(s); };
  const q38::ModelLimits limits{.vocab_size = 151936, .max_context = 4096};
  for (q38::http::Endpoint e : {q38::http::Endpoint::kCompletions, q38::http::Endpoint::kChat}) {
    absl::StatusOr<q38::http::OpenAiRequest> r = q38::http::ParseOpenAiRequest(body, e, "small");
    if (!expected(r.status())) __builtin_trap();
    if (!r.ok()) {
      (void)q38::http::OpenAiParam(r.status(), e);
      continue;
    }
    if (r->generate.max_tokens() == 0) r->generate.set_max_tokens(1);  // chat's "rest of the context"
    const absl::Status valid = q38::ValidateGenerate(r->generate, limits);
    if (!valid.ok() && !absl::IsInvalidArgument(valid)) __builtin_trap();
  }
  if (!expected(q38::http::ParseTokenizeRequest(body, "small").status())) __builtin_trap();
  if (!expected(q38::http::ParseDetokenizeRequest(body, "small").status())) __builtin_trap();
  return 0;
}
