// SHA-256 through OpenSSL's EVP interface (the one API that is not deprecated in 3.x).
#include <cerrno>
#include <cstring>
#include <fstream>
#include <memory>

#include <openssl/evp.h>

#include "fusor/cache.hpp"

namespace fusor {

namespace {

struct MdCtxFree {
  void operator()(EVP_MD_CTX* ctx) const { EVP_MD_CTX_free(ctx); }
};
using MdCtx = std::unique_ptr<EVP_MD_CTX, MdCtxFree>;

MdCtx new_sha256_ctx() {
  MdCtx ctx(EVP_MD_CTX_new());
  if (ctx && EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1) ctx.reset();
  return ctx;
}

std::string finish_hex(EVP_MD_CTX* ctx) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_DigestFinal_ex(ctx, digest, &len) != 1) return {};
  static constexpr char hex[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * len);
  for (unsigned int i = 0; i < len; ++i) {
    out.push_back(hex[digest[i] >> 4]);
    out.push_back(hex[digest[i] & 0xf]);
  }
  return out;
}

} // namespace

std::string sha256_hex(std::string_view bytes) {
  MdCtx ctx = new_sha256_ctx();
  // Allocation failure inside OpenSSL is the only way here; an empty digest never matches
  // a manifest, so callers treat it as a mismatch rather than trusting an artifact.
  if (!ctx || EVP_DigestUpdate(ctx.get(), bytes.data(), bytes.size()) != 1) return {};
  return finish_hex(ctx.get());
}

Expected<std::string> sha256_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error(ErrorCode::io_error, "cannot open " + path.string() + ": " + std::strerror(errno));
  MdCtx ctx = new_sha256_ctx();
  if (!ctx) return make_error(ErrorCode::internal, "OpenSSL could not create a SHA-256 context");
  std::string buffer(1 << 16, '\0');
  while (in) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    const std::streamsize got = in.gcount();
    if (got > 0 && EVP_DigestUpdate(ctx.get(), buffer.data(), static_cast<std::size_t>(got)) != 1)
      return make_error(ErrorCode::internal, "OpenSSL SHA-256 update failed on " + path.string());
  }
  if (in.bad()) return make_error(ErrorCode::io_error, "read error on " + path.string());
  std::string hex = finish_hex(ctx.get());
  if (hex.empty()) return make_error(ErrorCode::internal, "OpenSSL SHA-256 final failed on " + path.string());
  return hex;
}

} // namespace fusor
