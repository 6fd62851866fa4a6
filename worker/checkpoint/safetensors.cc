#include "worker/checkpoint/safetensors.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <tuple>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "common/status.h"
#include "worker/checkpoint/strict_json.h"

namespace q38 {
namespace {

using nlohmann::json;

constexpr char kMetadataKey[] = "__metadata__";

// The element types a checkpoint may use, listed here rather than taken from DTypeFromName so
// that a type added to common/dtype.h is not silently accepted in checkpoints.
constexpr DType kAcceptedDtypes[] = {DType::kBF16, DType::kF16, DType::kF32,   DType::kU8,
                                     DType::kI32,  DType::kI64, DType::kF8E4M3};

// One validated header entry, before it becomes a view.
struct Entry {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  uint64_t begin;
  uint64_t end;
};

std::string FileWhere(const std::string& path) {
  return absl::StrCat("safetensors file '", path, "'");
}

std::string TensorWhere(const std::string& path, absl::string_view name) {
  return absl::StrCat(FileWhere(path), ": tensor '", name, "'");
}

std::string Range(uint64_t begin, uint64_t end) { return absl::StrCat("[", begin, ", ", end, ")"); }

// A JSON value in a message: compact, cut short so a huge value cannot flood a log.
std::string Show(const json& j) {
  std::string s = j.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > 80) s = s.substr(0, 77) + "...";
  return s;
}

// A non-negative integer that fits int64, or nullopt.
std::optional<uint64_t> NonNegativeInt(const json& j) {
  if (!j.is_number_unsigned()) return std::nullopt;  // negatives parse as number_integer
  const uint64_t v = j.get<uint64_t>();
  if (v > static_cast<uint64_t>(INT64_MAX)) return std::nullopt;
  return v;
}

absl::StatusOr<DType> ParseDtype(const json& j, const std::string& where) {
  if (!j.is_string()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": dtype must be a string, got ", Show(j)));
  }
  const std::string& name = j.get_ref<const std::string&>();
  if (std::optional<DType> t = DTypeFromName(name);
      t && std::find(std::begin(kAcceptedDtypes), std::end(kAcceptedDtypes), *t) !=
               std::end(kAcceptedDtypes)) {
    return *t;
  }
  return absl::InvalidArgumentError(
      absl::StrCat(where, ": unsupported dtype \"", name,
                   "\" (accepted: BF16, F16, F32, U8, I32, I64, F8_E4M3)"));
}

// Parses the shape and returns its byte length for `dtype`, refusing any overflow.
absl::StatusOr<uint64_t> ParseShape(const json& j, DType dtype, const std::string& where,
                                    std::vector<int64_t>* shape) {
  if (!j.is_array()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": shape must be a list of non-negative integers, got ", Show(j)));
  }
  bool has_zero = false;
  for (const json& d : j) {
    std::optional<uint64_t> v = NonNegativeInt(d);
    if (!v) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": shape must be a list of non-negative integers, got ", Show(j)));
    }
    has_zero |= (*v == 0);
    shape->push_back(static_cast<int64_t>(*v));
  }
  if (has_zero) return 0;
  uint64_t numel = 1;
  for (int64_t d : *shape) {
    if (__builtin_mul_overflow(numel, static_cast<uint64_t>(d), &numel) ||
        numel > static_cast<uint64_t>(INT64_MAX)) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": shape ", Show(j), " has too many elements"));
    }
  }
  uint64_t nbytes;
  if (__builtin_mul_overflow(numel, static_cast<uint64_t>(DTypeSize(dtype)), &nbytes) ||
      nbytes > static_cast<uint64_t>(INT64_MAX)) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": shape ", Show(j), " is too large in bytes"));
  }
  return nbytes;
}

absl::StatusOr<Entry> ParseEntry(const std::string& name, const json& j, uint64_t data_size,
                                 const std::string& path) {
  const std::string where = TensorWhere(path, name);
  if (!j.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": entry must be an object, got ", Show(j)));
  }
  for (const auto& [key, value] : j.items()) {
    if (key != "dtype" && key != "shape" && key != "data_offsets") {
      return absl::InvalidArgumentError(absl::StrCat(where, ": unexpected key \"", key,
                                                     "\" (allowed: dtype, shape, data_offsets)"));
    }
  }
  for (const char* key : {"dtype", "shape", "data_offsets"}) {
    if (!j.contains(key)) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": missing key \"", key, "\""));
    }
  }
  Entry e{name, DType::kF32, {}, 0, 0};
  ASSIGN_OR_RETURN(e.dtype, ParseDtype(j["dtype"], where));
  ASSIGN_OR_RETURN(const uint64_t nbytes, ParseShape(j["shape"], e.dtype, where, &e.shape));

  const json& off = j["data_offsets"];
  std::optional<uint64_t> begin, end;
  if (off.is_array() && off.size() == 2) {
    begin = NonNegativeInt(off[0]);
    end = NonNegativeInt(off[1]);
  }
  if (!begin || !end) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": data_offsets must be two non-negative integers [begin, end], got ", Show(off)));
  }
  if (*begin > *end) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": data_offsets ", Show(off), " end before they begin"));
  }
  if (*end > data_size) {
    return absl::DataLossError(absl::StrCat(where, ": data_offsets ", Show(off),
                                            " run past the end of the data section (", data_size,
                                            " bytes); the file may be truncated"));
  }
  if (*end - *begin != nbytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": shape [", absl::StrJoin(e.shape, ", "), "] of ", std::string(DTypeName(e.dtype)),
        " needs ", nbytes, " bytes but data_offsets ", Show(off), " hold ", *end - *begin));
  }
  e.begin = *begin;
  e.end = *end;
  return e;
}

absl::StatusOr<std::map<std::string, std::string>> ParseMetadata(const json& j,
                                                                 const std::string& path) {
  const std::string where = absl::StrCat(FileWhere(path), ": \"", kMetadataKey, "\"");
  if (!j.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, " must be an object of strings, got ", Show(j)));
  }
  std::map<std::string, std::string> out;
  for (const auto& [key, value] : j.items()) {
    if (!value.is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": value of \"", key, "\" must be a string, got ", Show(value)));
    }
    out.emplace(key, value.get<std::string>());
  }
  return out;
}

// The tensors, sorted by offset, must cover [0, data_size) exactly once.
absl::Status CheckTiling(const std::vector<Entry>& sorted, uint64_t data_size,
                         const std::string& path) {
  uint64_t covered = 0;
  const Entry* prev = nullptr;
  for (const Entry& e : sorted) {
    if (e.begin < covered) {
      return absl::InvalidArgumentError(absl::StrCat(
          FileWhere(path), ": tensors '", prev->name, "' ", Range(prev->begin, prev->end), " and '",
          e.name, "' ", Range(e.begin, e.end), " overlap"));
    }
    if (e.begin > covered) {
      return absl::InvalidArgumentError(absl::StrCat(
          TensorWhere(path, e.name), ": gap of ", e.begin - covered, " unused bytes before it (",
          prev ? absl::StrCat("after tensor '", prev->name, "'") : "at the start of the data",
          "); tensors must tile the data section contiguously"));
    }
    covered = e.end;
    prev = &e;
  }
  if (covered != data_size) {
    return absl::DataLossError(absl::StrCat(
        FileWhere(path), ": data section holds ", data_size, " bytes but the tensors cover ",
        covered, "; ", data_size - covered, " trailing bytes belong to no tensor"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> mapping, MappedFile::Open(path));
  const size_t size = mapping->size();
  const uint8_t* base = mapping->data();
  const std::string where = FileWhere(path);

  if (size < 8) {
    return absl::DataLossError(
        absl::StrCat(where, ": ", size, " bytes, shorter than the 8-byte header length prefix"));
  }
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | base[i];  // little-endian
  if (n > kMaxSafetensorsHeaderBytes) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": header length ", n,
                                                   " exceeds the limit of ",
                                                   kMaxSafetensorsHeaderBytes, " bytes"));
  }
  if (n > size - 8) {
    return absl::DataLossError(absl::StrCat(where, ": header length ", n,
                                            " runs past the end of the ", size,
                                            "-byte file; the file may be truncated"));
  }
  const std::string_view text(reinterpret_cast<const char*>(base + 8), n);
  if (text.empty() || text.front() != '{') {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": header does not start with '{' (not a JSON object)"));
  }
  ASSIGN_OR_RETURN(json header, ParseStrictJson(text, absl::StrCat(where, ": header")));
  if (!header.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": header is not a JSON object"));
  }

  auto file = std::unique_ptr<SafetensorsFile>(new SafetensorsFile(std::move(mapping)));
  file->header_bytes_ = n;
  const uint64_t data_size = size - 8 - n;
  std::vector<Entry> entries;
  entries.reserve(header.size());
  for (const auto& [key, value] : header.items()) {
    if (key == kMetadataKey) {
      ASSIGN_OR_RETURN(file->metadata_, ParseMetadata(value, path));
      continue;
    }
    ASSIGN_OR_RETURN(Entry e, ParseEntry(key, value, data_size, path));
    entries.push_back(std::move(e));
  }
  // Names are unique here: ParseStrictJson refuses repeated keys.
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
  });
  RETURN_IF_ERROR(CheckTiling(entries, data_size, path));

  const uint8_t* data = base + 8 + n;
  file->tensors_.reserve(entries.size());
  for (Entry& e : entries) {
    file->index_.emplace(e.name, file->tensors_.size());
    file->tensors_.push_back(TensorView{std::move(e.name), e.dtype, std::move(e.shape),
                                        data + e.begin, static_cast<size_t>(e.end - e.begin),
                                        path});
  }
  return file;
}

const TensorView* SafetensorsFile::Find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

std::string_view SafetensorsFile::header() const {
  return std::string_view(reinterpret_cast<const char*>(mapping_->data()) + 8, header_bytes_);
}

std::string_view SafetensorsFile::data() const {
  const size_t begin = 8 + header_bytes_;
  return std::string_view(reinterpret_cast<const char*>(mapping_->data()) + begin, mapping_->size() - begin);
}

}  // namespace q38
