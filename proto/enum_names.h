// The lower-case names the API's enums go by in JSON reports, metrics labels and logs: "length"
// for FINISH_REASON_LENGTH, "stop_string" for CANCEL_REASON_STOP_STRING, "unspecified" for 0.
#pragma once

#include <string>

#include "q38/v1/q38.pb.h"
#include "q38/worker/v1/worker.pb.h"

namespace q38 {

std::string FinishReasonName(v1::FinishReason reason);
std::string CancelReasonName(worker::v1::CancelReason reason);

}  // namespace q38
