#include "tokenizer/tokenizer_test_fixture.h"

#include <fstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "tokenizer/byte_level.h"

namespace q38::tokenizer_test {

using json = nlohmann::json;

ParityFixture LoadParityFixture(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + path);
  ParityFixture f;
  std::string line;
  std::getline(in, line);
  const json meta = json::parse(line)["meta"];
  f.tokenizers_version = meta["tokenizers_version"];
  f.split_pattern = meta["split_pattern"];
  for (const json& v : meta["variants"]) {
    f.variant_names.push_back(v["name"]);
    f.variant_patches.push_back(v["patch"].dump());
  }
  while (std::getline(in, line)) {
    const json j = json::parse(line);
    if (j.contains("decode")) {
      f.decodes.push_back({j["decode"].get<std::vector<int32_t>>(), j["text"], j["text_skip"]});
      continue;
    }
    ParityCase c;
    c.variant = j["v"];
    c.text = j["t"];
    c.ids = j["ids"].get<std::vector<int32_t>>();
    if (j.contains("ids_nosp")) c.ids_nosp = j["ids_nosp"].get<std::vector<int32_t>>();
    if (j.contains("dec")) c.decoded = j["dec"].get<std::string>();
    if (j.contains("nfc")) c.nfc = j["nfc"].get<std::string>();
    if (j.contains("pre")) c.pre_ends = j["pre"].get<std::vector<int32_t>>();
    f.strings.push_back(std::move(c));
  }
  return f;
}

std::vector<ChatCase> LoadChatFixture(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + path);
  const json root = json::parse(in);
  std::vector<ChatCase> cases;
  for (const json& c : root["cases"]) {
    ChatCase out;
    for (const json& m : c["messages"]) {
      ChatMessage msg;
      msg.role = m["role"];
      msg.content = m["content"];
      if (m.contains("reasoning_content") && !m["reasoning_content"].is_null()) {
        msg.reasoning_content = m["reasoning_content"].get<std::string>();
      }
      out.messages.push_back(std::move(msg));
    }
    out.options.add_generation_prompt = c["add_generation_prompt"];
    if (c.contains("enable_thinking")) out.options.enable_thinking = c["enable_thinking"].get<bool>();
    out.text = c["text"];
    out.ids = c["ids"].get<std::vector<int32_t>>();
    out.messages_json = c["messages"].dump();
    cases.push_back(std::move(out));
  }
  return cases;
}

std::string PatchJson(const std::string& document, const std::string& patch) {
  return json::parse(document).patch(json::parse(patch)).dump();
}

std::string TinyTokenizerJson(const std::string& patch) {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) {
    std::string symbol;
    byte_level::EncodeBytes(std::string(1, static_cast<char>(b)), &symbol);
    vocab[symbol] = b;
  }
  vocab["he"] = 256;
  vocab["ll"] = 257;
  vocab["hell"] = 258;
  vocab["hello"] = 259;
  const json split = {{"type", "Split"},
                      {"pattern", {{"Regex", " ?\\p{L}+|\\s+"}}},
                      {"behavior", "Isolated"},
                      {"invert", false}};
  const json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}};
  const json tiny = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", json::array({{{"id", 260}, {"content", "<|end|>"}, {"special", true},
                                     {"lstrip", false}, {"rstrip", false}, {"single_word", false},
                                     {"normalized", false}}})},
      {"normalizer", {{"type", "NFC"}}},
      {"pre_tokenizer", {{"type", "Sequence"}, {"pretokenizers", json::array({split, byte_level})}}},
      {"post_processor", {{"type", "ByteLevel"}}},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"vocab", vocab},
        {"merges", json::array({"h e", json::array({"l", "l"}), "he ll", "hell o"})}}},
  };
  return tiny.patch(json::parse(patch)).dump();
}

std::string Quote(const std::string& s) {
  return json(s).dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace q38::tokenizer_test
