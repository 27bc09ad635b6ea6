// PolicyConfig: the one typed form of a compression policy. The CLI's "name:key=value" parses into
// it, its canonical text parses back to the same value, and a bad option is named.
#include "engine/compress/policy_config.h"

#include <catch2/catch.hpp>

#include "common/status.h"

namespace framezip::engine::compress {
namespace {

TEST_CASE("ParsePolicyConfig fills the typed options of each policy", "[unit][compress]") {
  const PolicyConfig z =
      *ParsePolicyConfig("zipvl: tau=0.9, u_rows=attend, low_bits=evict, per_head=1, seed=7");
  REQUIRE(std::holds_alternative<ZipVlOptions>(z.options));
  const auto& zo = std::get<ZipVlOptions>(z.options);
  CHECK(zo.tau == 0.9);
  CHECK(zo.u_rows == URows::kAttendImportant);
  CHECK(zo.low_bits == 0);
  CHECK(zo.per_head);
  CHECK(zo.seed == 7);
  CHECK(zo.keep_recent == ZipVlOptions{}.keep_recent);  // untouched options keep their defaults

  const auto ap = std::get<AttentionPackOptions>(
      ParsePolicyConfig("attentionpack:rank_k=4,factors=int4,top_fraction=0.5")->options);
  CHECK(ap.rank_k == 4);
  CHECK(ap.factors == kv::FactorFormat::kInt4);
  CHECK(ap.top_fraction == 0.5);

  const PolicyConfig kivi4 = *ParsePolicyConfig("kivi4");
  CHECK(std::get<KiviOptions>(kivi4.options).bits == 4);
  CHECK(kivi4.name() == "kivi4");
  CHECK(ParsePolicyConfig("kivi:bits=4")->name() == "kivi4");

  const auto dl = std::get<DynamicLlavaOptions>(
      ParsePolicyConfig("dynamic_llava:text_gate=off,vision_keep=0.5")->options);
  CHECK_FALSE(dl.text_gate);
  CHECK(dl.vision_keep == 0.5);
  CHECK_FALSE(dl.sparse_layer.has_value());  // the predictors' own layer

  // zipvl+attentionpack takes both option sets; seed and dense_layers once.
  const auto both = std::get<ZipVlAttentionPackOptions>(
      ParsePolicyConfig("zipvl+attentionpack:tau=0.8,rank_v=8,seed=3")->options);
  CHECK(both.zipvl.tau == 0.8);
  CHECK(both.pack.rank_v == 8);
  CHECK(both.zipvl.seed == 3);
  CHECK(ParsePolicyConfig("")->name() == "none");
}

TEST_CASE("FormatPolicyConfig writes what differs from the defaults and parses back",
          "[unit][compress]") {
  for (const std::string& name : PolicyNames()) {
    INFO(name);
    CHECK(FormatPolicyConfig(*DefaultPolicyConfig(name)) == name);
  }
  for (const char* spec :
       {"zipvl:tau=0.9,keep_recent=8,per_head=1,u_rows=skip,high_bits=16,low_bits=evict,seed=5",
        "attentionpack:rank_k=4,rank_v=8,groups=1,ema=0.5,factors=int4,recompress=16",
        "zipvl+attentionpack:tau=0.9,dense_layers=1,rank_v=8,factors=int4",
        "dynamic_llava:sparse_layer=1,vision_keep=0.5,select=random,text_gate=off,bits=4",
        "fastv:k=3,r=0.75", "kivi4:window=64", "kivi:window=32"}) {
    INFO(spec);
    const PolicyConfig config = *ParsePolicyConfig(spec);
    const std::string text = FormatPolicyConfig(config);
    CHECK(text == spec);  // the specs above are written in the canonical order
    CHECK(*ParsePolicyConfig(text) == config);
  }
}

TEST_CASE("a bad policy option is refused naming it", "[unit][compress]") {
  const auto message = [](std::string_view spec) {
    const StatusOr<PolicyConfig> c = ParsePolicyConfig(spec);
    REQUIRE_FALSE(c.ok());
    CHECK(absl::IsInvalidArgument(c.status()));
    return MessageOf(c.status());
  };
  CHECK_THAT(
      message("attentionpack:rank=4"),
      Catch::Contains("policy 'attentionpack' has no option 'rank' (it has: rank_k, rank_v"));
  CHECK_THAT(message("zipvl:tau=1.5"), Catch::Contains("tau='1.5' is not a number in"));
  CHECK_THAT(message("zipvl:u_rows=sometimes"), Catch::Contains("one of local|skip|attend"));
  CHECK_THAT(message("zipvl:tau=0.9,tau=0.8"), Catch::Contains("'tau' given twice"));
  CHECK_THAT(message("zipvl:probes_recent=0"), Catch::Contains("probes_recent"));
  CHECK_THAT(message("kivi:bits=3"), Catch::Contains("bits='3'"));
  CHECK_THAT(message("none:x=1"), Catch::Contains("takes no options"));
  CHECK_THAT(message("zipvll"), Catch::Contains("known: none, zipvl"));

  // A typed config built elsewhere (the server, from the API) is checked by the same ranges.
  PolicyConfig typed{FastVOptions{.k = 0, .r = 0.5}};
  const Status bad = ValidatePolicyConfig(typed, "policy.");
  CHECK(absl::IsInvalidArgument(bad));
  CHECK_THAT(MessageOf(bad), Catch::Contains("policy.fastv.k: 0 is not in [1, 65536]"));
  typed.options = ZipVlOptions{.high_bits = 8};
  CHECK_THAT(MessageOf(ValidatePolicyConfig(typed, "policy.")),
             Catch::Contains("policy.zipvl.high_bits: 8 is not one of 4|2|16"));
  CHECK(ValidatePolicyConfig(*ParsePolicyConfig("dynamic_llava:vision_keep=0.3")).ok());
}

}  // namespace
}  // namespace framezip::engine::compress
