#include "kvstore/block_key.h"

#include <openssl/evp.h>

#include <memory>

namespace framezip::kvstore {
namespace {

struct MdCtxDeleter {
  void operator()(EVP_MD_CTX* ctx) const { EVP_MD_CTX_free(ctx); }
};

void UpdateU64(EVP_MD_CTX* ctx, uint64_t v) {
  uint8_t le[8];
  for (int i = 0; i < 8; ++i) le[i] = static_cast<uint8_t>(v >> (8 * i));
  EVP_DigestUpdate(ctx, le, sizeof(le));
}

void UpdateField(EVP_MD_CTX* ctx, const void* data, size_t bytes) {
  UpdateU64(ctx, bytes);
  if (bytes != 0) EVP_DigestUpdate(ctx, data, bytes);
}

}  // namespace

BlockKey ChainBlockKey(const BlockKey& parent, const BlockKeyInput& input) {
  std::unique_ptr<EVP_MD_CTX, MdCtxDeleter> ctx(EVP_MD_CTX_new());
  EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr);
  EVP_DigestUpdate(ctx.get(), parent.data(), parent.size());
  UpdateField(ctx.get(), input.model_id.data(), input.model_id.size());
  UpdateField(ctx.get(), input.compression_config.data(), input.compression_config.size());
  UpdateU64(ctx.get(), input.token_ids.size());
  for (int32_t id : input.token_ids) UpdateU64(ctx.get(), static_cast<uint32_t>(id));
  UpdateU64(ctx.get(), input.media_hashes.size());
  for (const auto& h : input.media_hashes) EVP_DigestUpdate(ctx.get(), h.data(), h.size());
  BlockKey key{};
  unsigned int len = 0;
  EVP_DigestFinal_ex(ctx.get(), key.data(), &len);
  return key;
}

std::string BlockKeyHex(const BlockKey& key) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s(64, '0');
  for (size_t i = 0; i < key.size(); ++i) {
    s[2 * i] = kHex[key[i] >> 4];
    s[2 * i + 1] = kHex[key[i] & 0xf];
  }
  return s;
}

}  // namespace framezip::kvstore
