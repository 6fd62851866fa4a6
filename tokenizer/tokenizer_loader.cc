// Reading tokenizer.json and tokenizer_config.json into a Tokenizer. Everything the byte-level
// BPE family can say is either implemented or refused with an error naming the field.
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/string_view_bridge.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_state.h"

namespace q38 {

using json = nlohmann::json;

namespace {

// Ids beyond this are taken as a corrupt file rather than allocated for.
constexpr int64_t kMaxTokenId = 1 << 24;

absl::Status Malformed(std::string_view file, std::string_view path, std::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(ToAbsl(file), ": ", ToAbsl(path), ": ", ToAbsl(what)));
}
absl::Status Unsupported(std::string_view file, std::string_view path, std::string_view what) {
  return absl::UnimplementedError(absl::StrCat(ToAbsl(file), ": ", ToAbsl(path), ": ", ToAbsl(what)));
}

std::string TypeName(const json& v) { return v.type_name(); }

absl::StatusOr<json> Parse(std::string_view text, std::string_view file) {
  try {
    return json::parse(text.begin(), text.end());
  } catch (const json::exception& e) {  // parse_error, and out_of_range for a number like 1e400
    return absl::InvalidArgumentError(absl::StrCat(ToAbsl(file), ": malformed JSON (", e.what(), ")"));
  }
}

// Checked accessors: every read names the field it reads when it fails.
class Reader {
 public:
  explicit Reader(std::string_view file) : file_(file) {}

  absl::Status Bad(std::string_view path, std::string_view what) const {
    return Malformed(file_, path, what);
  }
  absl::Status Refuse(std::string_view path, std::string_view what) const {
    return Unsupported(file_, path, what);
  }

  // nullptr when absent or null.
  const json* Optional(const json& obj, const char* key) const {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return nullptr;
    return &*it;
  }
  absl::StatusOr<const json*> Required(const json& obj, const char* key, std::string_view path) const {
    const json* v = Optional(obj, key);
    if (v == nullptr) return Bad(path, absl::StrCat("missing field '", key, "'"));
    return v;
  }
  absl::StatusOr<bool> Bool(const json& obj, const char* key, std::string_view path, bool dflt) const {
    const json* v = Optional(obj, key);
    if (v == nullptr) return dflt;
    if (!v->is_boolean()) return Bad(Join(path, key), absl::StrCat("expected a boolean, got ", TypeName(*v)));
    return v->get<bool>();
  }
  absl::StatusOr<std::string> String(const json& obj, const char* key, std::string_view path) const {
    ASSIGN_OR_RETURN(const json* v, Required(obj, key, path));
    if (!v->is_string()) return Bad(Join(path, key), absl::StrCat("expected a string, got ", TypeName(*v)));
    return v->get<std::string>();
  }
  absl::Status Object(const json& v, std::string_view path) const {
    if (!v.is_object()) return Bad(path, absl::StrCat("expected an object, got ", TypeName(v)));
    return absl::OkStatus();
  }
  absl::Status Array(const json& v, std::string_view path) const {
    if (!v.is_array()) return Bad(path, absl::StrCat("expected an array, got ", TypeName(v)));
    return absl::OkStatus();
  }
  absl::StatusOr<int32_t> Id(const json& v, std::string_view path) const {
    if (!v.is_number_integer()) return Bad(path, absl::StrCat("expected an integer id, got ", TypeName(v)));
    const int64_t id = v.get<int64_t>();
    if (id < 0 || id >= kMaxTokenId) return Bad(path, absl::StrCat("id ", id, " out of range"));
    return static_cast<int32_t>(id);
  }
  static std::string Join(std::string_view path, std::string_view key) {
    return path.empty() ? std::string(key) : absl::StrCat(ToAbsl(path), ".", ToAbsl(key));
  }

 private:
  std::string file_;
};

}  // namespace

class TokenizerLoader {
 public:
  static absl::StatusOr<std::unique_ptr<Tokenizer>> Load(std::string_view tokenizer_json,
                                                         std::string_view config_json) {
    std::unique_ptr<Tokenizer> t(new Tokenizer());
    {
      ASSIGN_OR_RETURN(json root, Parse(tokenizer_json, "tokenizer.json"));
      TokenizerLoader loader("tokenizer.json");
      RETURN_IF_ERROR(loader.LoadTokenizerJson(root, t.get()));
    }
    if (!config_json.empty()) {
      ASSIGN_OR_RETURN(json config, Parse(config_json, "tokenizer_config.json"));
      TokenizerLoader loader("tokenizer_config.json");
      RETURN_IF_ERROR(loader.LoadConfig(config, t.get()));
    }
    return t;
  }

 private:
  explicit TokenizerLoader(std::string_view file) : r_(file) {}

  absl::Status LoadTokenizerJson(const json& root, Tokenizer* t) {
    RETURN_IF_ERROR(r_.Object(root, "top level"));
    for (const char* key : {"truncation", "padding"}) {
      if (r_.Optional(root, key)) {
        return r_.Refuse(key, "must be null: truncation and padding are not applied by this tokenizer");
      }
    }
    ASSIGN_OR_RETURN(const json* model, r_.Required(root, "model", ""));
    RETURN_IF_ERROR(LoadModel(*model, t));
    RETURN_IF_ERROR(LoadNormalizer(r_.Optional(root, "normalizer"), "normalizer", t));
    RETURN_IF_ERROR(LoadPreTokenizer(r_.Optional(root, "pre_tokenizer"), t));
    RETURN_IF_ERROR(CheckDecoder(r_.Optional(root, "decoder")));
    RETURN_IF_ERROR(CheckPostProcessor(r_.Optional(root, "post_processor"), "post_processor"));
    RETURN_IF_ERROR(LoadAddedTokens(r_.Optional(root, "added_tokens"), t));
    return BuildTables(t);
  }

  absl::Status LoadModel(const json& model, Tokenizer* t) {
    RETURN_IF_ERROR(r_.Object(model, "model"));
    if (const json* type = r_.Optional(model, "type")) {
      if (!type->is_string()) return r_.Bad("model.type", "expected a string");
      if (*type != "BPE") {
        return r_.Refuse("model.type", absl::StrCat("model type '", type->get<std::string>(),
                                                    "' is not supported (only BPE)"));
      }
    }
    if (const json* d = r_.Optional(model, "dropout")) {
      if (!d->is_number() || d->get<double>() != 0.0) {
        return r_.Refuse("model.dropout", "BPE dropout is not supported");
      }
    }
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
      if (const json* v = r_.Optional(model, key); v && !(v->is_string() && v->get<std::string>().empty())) {
        return r_.Refuse(Reader::Join("model", key), "not supported for byte-level BPE");
      }
    }
    ASSIGN_OR_RETURN(const bool byte_fallback, r_.Bool(model, "byte_fallback", "model", false));
    if (byte_fallback) return r_.Refuse("model.byte_fallback", "byte_fallback is not supported");
    Bpe::Options options;
    ASSIGN_OR_RETURN(options.ignore_merges, r_.Bool(model, "ignore_merges", "model", false));

    ASSIGN_OR_RETURN(const json* v, r_.Required(model, "vocab", "model"));
    RETURN_IF_ERROR(r_.Object(*v, "model.vocab"));
    StringMap<int32_t> vocab;
    vocab.reserve(v->size());
    for (auto it = v->begin(); it != v->end(); ++it) {
      // The path string is only built for the error (there are ~150k entries).
      auto id = r_.Id(it.value(), "");
      if (!id.ok()) RETURN_IF_ERROR(r_.Id(it.value(), absl::StrCat("model.vocab['", it.key(), "']")).status());
      vocab.emplace(it.key(), *id);
    }

    ASSIGN_OR_RETURN(const json* m, r_.Required(model, "merges", "model"));
    RETURN_IF_ERROR(r_.Array(*m, "model.merges"));
    std::vector<std::pair<std::string_view, std::string_view>> merges;
    merges.reserve(m->size());
    for (size_t i = 0; i < m->size(); ++i) {
      const json& e = (*m)[i];
      auto path = [i] { return absl::StrCat("model.merges[", i, "]"); };
      if (e.is_string()) {  // "a b"
        const std::string& s = e.get_ref<const std::string&>();
        const size_t space = s.find(' ');
        if (space == std::string::npos) return r_.Bad(path(), "expected two tokens separated by a space");
        merges.emplace_back(std::string_view(s).substr(0, space), std::string_view(s).substr(space + 1));
      } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {  // [a, b]
        merges.emplace_back(e[0].get_ref<const std::string&>(), e[1].get_ref<const std::string&>());
      } else {
        return r_.Bad(path(), "expected \"a b\" or [\"a\", \"b\"]");
      }
    }
    auto bpe = Bpe::Create(std::move(vocab), merges, options);
    if (!bpe.ok()) return r_.Bad("model", FromAbsl(bpe.status().message()));
    t->s_->bpe = std::move(*bpe);
    return absl::OkStatus();
  }

  absl::Status LoadNormalizer(const json* n, const std::string& path, Tokenizer* t) {
    if (n == nullptr) return absl::OkStatus();
    RETURN_IF_ERROR(r_.Object(*n, path));
    ASSIGN_OR_RETURN(const std::string type, r_.String(*n, "type", path));
    if (type == "NFC") {
      t->s_->nfc = true;
      return absl::OkStatus();
    }
    if (type == "Sequence") {
      ASSIGN_OR_RETURN(const json* list, r_.Required(*n, "normalizers", path));
      RETURN_IF_ERROR(r_.Array(*list, path + ".normalizers"));
      for (size_t i = 0; i < list->size(); ++i) {
        RETURN_IF_ERROR(LoadNormalizer(&(*list)[i], absl::StrCat(path, ".normalizers[", i, "]"), t));
      }
      return absl::OkStatus();
    }
    return r_.Refuse(path, absl::StrCat("normalizer type '", type, "' is not supported (only NFC)"));
  }

  absl::Status CollectPreTokenizers(const json& p, const std::string& path,
                                    std::vector<std::pair<const json*, std::string>>* out) {
    RETURN_IF_ERROR(r_.Object(p, path));
    ASSIGN_OR_RETURN(const std::string type, r_.String(p, "type", path));
    if (type == "Sequence") {
      ASSIGN_OR_RETURN(const json* list, r_.Required(p, "pretokenizers", path));
      RETURN_IF_ERROR(r_.Array(*list, path + ".pretokenizers"));
      for (size_t i = 0; i < list->size(); ++i) {
        RETURN_IF_ERROR(CollectPreTokenizers((*list)[i], absl::StrCat(path, ".pretokenizers[", i, "]"), out));
      }
      return absl::OkStatus();
    }
    if (type != "Split" && type != "ByteLevel") {
      return r_.Refuse(path, absl::StrCat("pre-tokenizer type '", type,
                                          "' is not supported (only Split and ByteLevel)"));
    }
    out->emplace_back(&p, path);
    return absl::OkStatus();
  }

  absl::Status LoadPreTokenizer(const json* p, Tokenizer* t) {
    if (p == nullptr) {
      return r_.Refuse("pre_tokenizer", "missing: byte-level BPE needs a ByteLevel pre-tokenizer");
    }
    std::vector<std::pair<const json*, std::string>> steps;
    RETURN_IF_ERROR(CollectPreTokenizers(*p, "pre_tokenizer", &steps));
    std::vector<SplitStep> splits;
    std::optional<ByteLevelStep> byte_level;
    for (const auto& [step, path] : steps) {
      const std::string type = (*step)["type"].get<std::string>();
      if (byte_level.has_value()) {
        return r_.Refuse(path, absl::StrCat("a '", type, "' pre-tokenizer after ByteLevel is not supported"));
      }
      if (type == "ByteLevel") {
        ByteLevelStep b;
        ASSIGN_OR_RETURN(b.add_prefix_space, r_.Bool(*step, "add_prefix_space", path, true));
        ASSIGN_OR_RETURN(b.use_regex, r_.Bool(*step, "use_regex", path, true));
        byte_level = b;
        continue;
      }
      SplitStep s;
      ASSIGN_OR_RETURN(const json* pattern, r_.Required(*step, "pattern", path));
      RETURN_IF_ERROR(r_.Object(*pattern, path + ".pattern"));
      absl::StatusOr<Regex> regex;
      if (const json* re = r_.Optional(*pattern, "Regex"); re && re->is_string()) {
        regex = Regex::FromOniguruma(re->get<std::string>());
      } else if (const json* lit = r_.Optional(*pattern, "String"); lit && lit->is_string()) {
        regex = Regex::FromLiteral(lit->get<std::string>());
      } else {
        return r_.Bad(path + ".pattern", "expected {\"Regex\": ...} or {\"String\": ...}");
      }
      if (!regex.ok()) {
        return absl::Status(regex.status().code(),
                            absl::StrCat("tokenizer.json: ", path, ".pattern: ", regex.status().message()));
      }
      s.regex = std::move(*regex);
      ASSIGN_OR_RETURN(const std::string behavior, r_.String(*step, "behavior", path));
      auto parsed = ParseSplitBehavior(behavior);
      if (!parsed.ok()) return r_.Refuse(path + ".behavior", FromAbsl(parsed.status().message()));
      s.behavior = *parsed;
      ASSIGN_OR_RETURN(s.invert, r_.Bool(*step, "invert", path, false));
      splits.push_back(std::move(s));
    }
    if (!byte_level.has_value()) {
      return r_.Refuse("pre_tokenizer", "no ByteLevel step: only byte-level BPE is supported");
    }
    ASSIGN_OR_RETURN(t->s_->pre_tokenizer, PreTokenizer::Create(std::move(splits), *byte_level));
    return absl::OkStatus();
  }

  absl::Status CheckDecoder(const json* d) {
    if (d == nullptr) return r_.Refuse("decoder", "missing: byte-level BPE needs the ByteLevel decoder");
    RETURN_IF_ERROR(r_.Object(*d, "decoder"));
    ASSIGN_OR_RETURN(const std::string type, r_.String(*d, "type", "decoder"));
    if (type != "ByteLevel") {
      return r_.Refuse("decoder", absl::StrCat("decoder type '", type, "' is not supported (only ByteLevel)"));
    }
    return absl::OkStatus();
  }

  absl::Status CheckPostProcessor(const json* p, const std::string& path) {
    if (p == nullptr) return absl::OkStatus();
    RETURN_IF_ERROR(r_.Object(*p, path));
    ASSIGN_OR_RETURN(const std::string type, r_.String(*p, "type", path));
    if (type == "ByteLevel") return absl::OkStatus();  // only offsets: ids are unchanged
    if (type == "Sequence") {
      ASSIGN_OR_RETURN(const json* list, r_.Required(*p, "processors", path));
      RETURN_IF_ERROR(r_.Array(*list, path + ".processors"));
      for (size_t i = 0; i < list->size(); ++i) {
        RETURN_IF_ERROR(CheckPostProcessor(&(*list)[i], absl::StrCat(path, ".processors[", i, "]")));
      }
      return absl::OkStatus();
    }
    return r_.Refuse(path, absl::StrCat("post-processor type '", type,
                                        "' is not supported (only ByteLevel, which adds no tokens)"));
  }

  absl::Status LoadAddedTokens(const json* list, Tokenizer* t) {
    if (list == nullptr) return absl::OkStatus();
    RETURN_IF_ERROR(r_.Array(*list, "added_tokens"));
    t->s_->added.reserve(list->size());
    // HF does not take the ids from the file: a token already in the vocabulary keeps that id,
    // a new one gets the next free id past the model vocab. A file whose ids disagree would be
    // encoded differently by HF than its ids say, so it is refused.
    const int64_t model_size = static_cast<int64_t>(t->s_->bpe->vocab().size());
    int64_t max_added = -1;
    for (size_t i = 0; i < list->size(); ++i) {
      const json& e = (*list)[i];
      const std::string path = absl::StrCat("added_tokens[", i, "]");
      RETURN_IF_ERROR(r_.Object(e, path));
      AddedToken a;
      ASSIGN_OR_RETURN(const json* id, r_.Required(e, "id", path));
      ASSIGN_OR_RETURN(a.id, r_.Id(*id, path + ".id"));
      ASSIGN_OR_RETURN(a.content, r_.String(e, "content", path));
      if (a.content.empty()) return r_.Bad(path + ".content", "empty token");
      if (t->s_->added_by_content.contains(a.content)) {
        return r_.Bad(path + ".content", absl::StrCat("duplicate added token '", a.content, "'"));
      }
      ASSIGN_OR_RETURN(a.special, r_.Bool(e, "special", path, false));
      ASSIGN_OR_RETURN(a.lstrip, r_.Bool(e, "lstrip", path, false));
      ASSIGN_OR_RETURN(a.rstrip, r_.Bool(e, "rstrip", path, false));
      ASSIGN_OR_RETURN(a.single_word, r_.Bool(e, "single_word", path, false));
      ASSIGN_OR_RETURN(a.normalized, r_.Bool(e, "normalized", path, !a.special));
      int64_t expected;
      if (auto it = t->s_->bpe->vocab().find(a.content); it != t->s_->bpe->vocab().end()) {
        expected = it->second;
      } else if (max_added < 0) {
        expected = model_size;
      } else {
        expected = (max_added >= model_size || model_size == 0) ? max_added + 1 : model_size;
      }
      if (a.id != expected) {
        return r_.Bad(path + ".id", absl::StrCat("token '", a.content, "' has id ", a.id,
                                                 " but loads as id ", expected));
      }
      max_added = std::max<int64_t>(max_added, a.id);
      t->s_->added_by_content[a.content] = a.id;
      t->s_->added.push_back(std::move(a));
    }
    // HF searches special tokens first, then the others, each class in file order.
    std::vector<const AddedToken*> order;
    for (const AddedToken& a : t->s_->added) if (a.special) order.push_back(&a);
    for (const AddedToken& a : t->s_->added) if (!a.special) order.push_back(&a);
    std::vector<std::string> raw_patterns, norm_patterns;
    std::vector<const AddedToken*> raw_tokens, norm_tokens;
    for (const AddedToken* a : order) {
      if (a->normalized) {
        // Normalized tokens are looked for in their normalized form.
        std::string storage;
        norm_patterns.emplace_back(t->s_->nfc ? NfcNormalize(a->content, &storage) : a->content);
        norm_tokens.push_back(a);
      } else {
        raw_patterns.push_back(a->content);
        raw_tokens.push_back(a);
      }
    }
    ASSIGN_OR_RETURN(t->s_->raw_matcher, AddedTokenMatcher::Create(raw_patterns, raw_tokens));
    ASSIGN_OR_RETURN(t->s_->normalized_matcher, AddedTokenMatcher::Create(norm_patterns, norm_tokens));
    return absl::OkStatus();
  }

  // Id -> token string and id -> bytes, packed.
  absl::Status BuildTables(Tokenizer* t) {
    int32_t limit = 0;
    for (const auto& [token, id] : t->s_->bpe->vocab()) limit = std::max(limit, id + 1);
    for (const AddedToken& a : t->s_->added) limit = std::max(limit, a.id + 1);
    std::vector<const std::string*> token_of(limit, nullptr);
    t->s_->flags.assign(limit, 0);
    for (const auto& [token, id] : t->s_->bpe->vocab()) {
      if (token_of[id] != nullptr) {
        return r_.Bad("model.vocab", absl::StrCat("id ", id, " is used by both '", *token_of[id],
                                                  "' and '", token, "'"));
      }
      token_of[id] = &token;
    }
    for (const AddedToken& a : t->s_->added) {  // an added token wins over the model's entry
      token_of[a.id] = &a.content;
      if (a.special) t->s_->flags[a.id] |= Tokenizer::State::kSpecial;
    }
    t->s_->token_offsets.assign(1, 0);
    t->s_->byte_offsets.assign(1, 0);
    for (int32_t id = 0; id < limit; ++id) {
      if (const std::string* token = token_of[id]) {
        t->s_->flags[id] |= Tokenizer::State::kKnown;
        t->s_->token_text += *token;
        // The ByteLevel decoder maps tokens back to bytes; one outside the alphabet stays as is.
        if (!byte_level::DecodeToken(*token, &t->s_->token_bytes)) t->s_->token_bytes += *token;
      }
      t->s_->token_offsets.push_back(static_cast<uint32_t>(t->s_->token_text.size()));
      t->s_->byte_offsets.push_back(static_cast<uint32_t>(t->s_->token_bytes.size()));
    }
    return absl::OkStatus();
  }

  absl::Status LoadConfig(const json& config, Tokenizer* t) {
    RETURN_IF_ERROR(r_.Object(config, "top level"));
    for (const char* key : {"add_bos_token", "add_eos_token"}) {
      ASSIGN_OR_RETURN(const bool on, r_.Bool(config, key, "", false));
      if (on) return r_.Refuse(key, "adding special tokens around the text is not supported");
    }
    ASSIGN_OR_RETURN(t->s_->eos_id, SpecialToken(config, "eos_token", *t));
    ASSIGN_OR_RETURN(t->s_->pad_id, SpecialToken(config, "pad_token", *t));
    ASSIGN_OR_RETURN(t->s_->bos_id, SpecialToken(config, "bos_token", *t));
    if (const json* ct = r_.Optional(config, "chat_template")) {
      if (ct->is_string()) {
        t->s_->chat_template = ct->get<std::string>();
      } else if (ct->is_array()) {  // [{"name": ..., "template": ...}]: the default one
        for (const json& e : *ct) {
          if (e.is_object() && e.value("name", "") == "default" && e.contains("template") &&
              e["template"].is_string()) {
            t->s_->chat_template = e["template"].get<std::string>();
          }
        }
      } else {
        return r_.Bad("chat_template", "expected a string or a list of named templates");
      }
      t->s_->chat_kind = IdentifyChatTemplate(t->s_->chat_template);
    }
    return absl::OkStatus();
  }

  // A special token named by its text (or {"content": text}); nullopt when not set.
  absl::StatusOr<std::optional<int32_t>> SpecialToken(const json& config, const char* key,
                                                      const Tokenizer& t) {
    const json* v = r_.Optional(config, key);
    if (v == nullptr) return std::optional<int32_t>();
    std::string text;
    if (v->is_string()) {
      text = v->get<std::string>();
    } else if (v->is_object() && v->contains("content") && (*v)["content"].is_string()) {
      text = (*v)["content"].get<std::string>();
    } else {
      return r_.Bad(key, "expected a token string or {\"content\": ...}");
    }
    const std::optional<int32_t> id = t.TokenToId(text);
    if (!id.has_value()) return r_.Bad(key, absl::StrCat("token '", text, "' is not in the vocabulary"));
    return id;
  }

  Reader r_;
};

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromJson(std::string_view tokenizer_json,
                                                               std::string_view tokenizer_config_json) {
  return TokenizerLoader::Load(tokenizer_json, tokenizer_config_json);
}

namespace {
absl::StatusOr<std::string> ReadFile(const std::string& path, bool* exists) {
  std::ifstream in(path, std::ios::binary);
  *exists = static_cast<bool>(in);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrCat("cannot read ", path));
  return ss.str();
}
}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromDirectory(const std::string& dir) {
  bool exists = false;
  ASSIGN_OR_RETURN(const std::string tokenizer_json, ReadFile(dir + "/tokenizer.json", &exists));
  std::string config;
  auto c = ReadFile(dir + "/tokenizer_config.json", &exists);
  if (c.ok()) {
    config = std::move(*c);
  } else if (exists) {
    return c.status();
  }
  auto t = FromJson(tokenizer_json, config);
  if (!t.ok()) {
    return absl::Status(t.status().code(), absl::StrCat(dir, "/", t.status().message()));
  }
  return t;
}

}  // namespace q38
