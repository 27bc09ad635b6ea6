#include "engine/compress/policy.h"

#include "engine/compress/attentionpack.h"
#include "engine/compress/dynamic_llava.h"
#include "engine/compress/fastv.h"
#include "engine/compress/kivi.h"
#include "engine/compress/policy_options.h"
#include "engine/compress/zipvl.h"
#include "engine/compress/zipvl_attentionpack.h"

namespace framezip::engine::compress {
namespace {

StatusOr<std::unique_ptr<CompressionPolicy>> CreateNonePolicy(PolicyOptions& options,
                                                              const PolicyResources&) {
  FZ_RETURN_IF_ERROR(options.CheckAllUsed());
  return std::unique_ptr<CompressionPolicy>(new NonePolicy());
}

struct PolicyFactory {
  const char* name;
  StatusOr<std::unique_ptr<CompressionPolicy>> (*create)(PolicyOptions& options,
                                                         const PolicyResources& resources);
};

// The policies that need nothing from the model.
template <StatusOr<std::unique_ptr<CompressionPolicy>> (*Create)(PolicyOptions&)>
StatusOr<std::unique_ptr<CompressionPolicy>> WithoutResources(PolicyOptions& options,
                                                              const PolicyResources&) {
  return Create(options);
}

// The registry: one line per policy.
// clang-format off
constexpr PolicyFactory kPolicies[] = {
    {"none", CreateNonePolicy},
    {"zipvl", WithoutResources<CreateZipVlPolicy>},
    {"fastv", WithoutResources<CreateFastVPolicy>},
    {"kivi", WithoutResources<CreateKiviPolicy>},
    {"kivi4", WithoutResources<CreateKivi4Policy>},
    {"dynamic_llava", CreateDynamicLlavaPolicy},
    {"attentionpack", WithoutResources<CreateAttentionPackPolicy>},
    {"zipvl+attentionpack", WithoutResources<CreateZipVlAttentionPackPolicy>},
};
// clang-format on

}  // namespace

std::vector<float> PrefillStats::KeptRatios() const {
  std::vector<float> r(tokens.size(), 1.f);
  for (size_t l = 0; l < tokens.size(); ++l) {
    if (tokens[l] > 0) r[l] = static_cast<float>(static_cast<double>(kept[l]) / tokens[l]);
  }
  return r;
}

std::vector<std::string> PolicyNames() {
  std::vector<std::string> names;
  for (const PolicyFactory& p : kPolicies) names.emplace_back(p.name);
  return names;
}

StatusOr<std::unique_ptr<CompressionPolicy>> CreatePolicy(std::string_view spec,
                                                          const PolicyResources& resources) {
  FZ_ASSIGN_OR_RETURN(PolicyOptions options, PolicyOptions::Parse(spec));
  const std::string name = options.name().empty() ? "none" : options.name();
  for (const PolicyFactory& p : kPolicies) {
    if (name == p.name) return p.create(options, resources);
  }
  return InvalidArgumentError("unknown compression policy '{}' (known: {})", name,
                              fmt::join(PolicyNames(), ", "));
}

}  // namespace framezip::engine::compress
