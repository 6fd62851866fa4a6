#include "proto/proto_json.h"

#include "google/protobuf/util/json_util.h"

namespace q38 {

std::string ProtoJsonString(const google::protobuf::Message& message, bool pretty) {
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = pretty;
  options.always_print_primitive_fields = true;
  options.preserve_proto_field_names = true;
  std::string out;
  // Fails only for messages that cannot exist here (Any with unknown types).
  (void)google::protobuf::util::MessageToJsonString(message, &out, options);
  while (!out.empty() && out.back() == '\n') out.pop_back();  // the pretty form ends with one
  return out;
}

nlohmann::json ProtoJson(const google::protobuf::Message& message) {
  return nlohmann::json::parse(ProtoJsonString(message, false));
}

}  // namespace q38
