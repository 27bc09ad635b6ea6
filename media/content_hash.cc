#include "media/content_hash.h"

#include <openssl/evp.h>
#include <openssl/sha.h>

#include "common/status.h"

namespace framezip::media {

ContentHash HashBytes(std::span<const uint8_t> bytes) {
  ContentHash out;
  SHA256(bytes.data(), bytes.size(), out.data());
  return out;
}

// EVP rather than SHA256_Init: the low-level calls are deprecated in OpenSSL 3.
struct ContentHasher::State {
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  ~State() { EVP_MD_CTX_free(ctx); }
};

ContentHasher::ContentHasher() : state_(std::make_unique<State>()) {
  FZ_CHECK(state_->ctx != nullptr);
  FZ_CHECK(EVP_DigestInit_ex(state_->ctx, EVP_sha256(), nullptr) == 1);
}
ContentHasher::~ContentHasher() = default;

void ContentHasher::Update(std::span<const uint8_t> bytes) {
  FZ_CHECK(EVP_DigestUpdate(state_->ctx, bytes.data(), bytes.size()) == 1);
}

ContentHash ContentHasher::Finish() {
  ContentHash out;
  unsigned int len = 0;
  FZ_CHECK(EVP_DigestFinal_ex(state_->ctx, out.data(), &len) == 1 && len == out.size());
  return out;
}

std::string ToHex(const ContentHash& hash) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s(hash.size() * 2, '0');
  for (size_t i = 0; i < hash.size(); ++i) {
    s[2 * i] = kHex[hash[i] >> 4];
    s[2 * i + 1] = kHex[hash[i] & 0xf];
  }
  return s;
}

}  // namespace framezip::media
