#include "engine/compress/policy.h"

#include "engine/compress/attentionpack.h"
#include "engine/compress/dynamic_llava.h"
#include "engine/compress/fastv.h"
#include "engine/compress/kivi.h"
#include "engine/compress/zipvl.h"
#include "engine/compress/zipvl_attentionpack.h"

namespace framezip::engine::compress {
namespace {

template <class... F>
struct Overloaded : F... {
  using F::operator()...;
};
template <class... F>
Overloaded(F...) -> Overloaded<F...>;

}  // namespace

std::vector<float> PrefillStats::KeptRatios() const {
  std::vector<float> r(tokens.size(), 1.f);
  for (size_t l = 0; l < tokens.size(); ++l) {
    if (tokens[l] > 0) r[l] = static_cast<float>(static_cast<double>(kept[l]) / tokens[l]);
  }
  return r;
}

StatusOr<std::unique_ptr<CompressionPolicy>> CreatePolicy(const PolicyConfig& config,
                                                          const PolicyResources& resources) {
  FZ_RETURN_IF_ERROR(ValidatePolicyConfig(config));
  using Made = StatusOr<std::unique_ptr<CompressionPolicy>>;
  return std::visit(
      Overloaded{
          [](const NoneOptions&) -> Made { return std::make_unique<NonePolicy>(); },
          [](const ZipVlOptions& o) -> Made { return std::make_unique<ZipVlPolicy>(o); },
          [](const AttentionPackOptions& o) -> Made {
            return std::make_unique<AttentionPackPolicy>(o);
          },
          [](const ZipVlAttentionPackOptions& o) -> Made {
            // seed and dense_layers are one option each: the zipvl fields hold them.
            AttentionPackOptions pack = o.pack;
            pack.seed = o.zipvl.seed;
            pack.dense_layers = static_cast<int>(o.zipvl.dense_layers);
            return std::make_unique<ZipVlAttentionPackPolicy>(o.zipvl, pack);
          },
          [&](const DynamicLlavaOptions& o) -> Made {
            return CreateDynamicLlavaPolicy(o, resources);
          },
          [](const FastVOptions& o) -> Made { return std::make_unique<FastVPolicy>(o); },
          [](const KiviOptions& o) -> Made { return std::make_unique<KiviPolicy>(o); },
      },
      config.options);
}

StatusOr<std::unique_ptr<CompressionPolicy>> CreatePolicy(std::string_view spec,
                                                          const PolicyResources& resources) {
  FZ_ASSIGN_OR_RETURN(const PolicyConfig config, ParsePolicyConfig(spec));
  return CreatePolicy(config, resources);
}

}  // namespace framezip::engine::compress
