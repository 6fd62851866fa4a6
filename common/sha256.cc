#include "common/sha256.h"

#include <openssl/evp.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/escaping.h"

namespace q38 {
namespace {

using Ctx = std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)>;

Ctx NewCtx() {
  Ctx ctx(EVP_MD_CTX_new(), &EVP_MD_CTX_free);
  EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr);
  return ctx;
}

std::string Finish(EVP_MD_CTX* ctx) {
  std::array<unsigned char, EVP_MAX_MD_SIZE> md;
  unsigned int n = 0;
  EVP_DigestFinal_ex(ctx, md.data(), &n);
  return absl::BytesToHexString(absl::string_view(reinterpret_cast<const char*>(md.data()), n));
}

}  // namespace

std::string Sha256Hex(absl::string_view bytes) {
  Ctx ctx = NewCtx();
  EVP_DigestUpdate(ctx.get(), bytes.data(), bytes.size());
  return Finish(ctx.get());
}

absl::StatusOr<std::string> Sha256File(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  Ctx ctx = NewCtx();
  std::array<char, 1 << 16> buf;
  while (in) {
    in.read(buf.data(), buf.size());
    EVP_DigestUpdate(ctx.get(), buf.data(), static_cast<size_t>(in.gcount()));
  }
  if (in.bad()) return absl::DataLossError(absl::StrCat(path, ": read failed"));
  return Finish(ctx.get());
}

}  // namespace q38
