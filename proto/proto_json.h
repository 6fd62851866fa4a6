// The proto3 JSON mapping of the API messages as q38 prints them (manifests, reports): the .proto
// field names and every field, defaults included. 64-bit integers are strings, as the mapping says.
#pragma once

#include <string>

#include "google/protobuf/message.h"
#include "nlohmann/json.hpp"

namespace q38 {

// No trailing newline.
std::string ProtoJsonString(const google::protobuf::Message& message, bool pretty);
nlohmann::json ProtoJson(const google::protobuf::Message& message);

}  // namespace q38
