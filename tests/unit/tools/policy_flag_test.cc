// `--policy NAME:FIELD=VALUE,...` (tools/framezip/policy_flag.h): every option type the API's
// policy messages use, and each kind of bad input refused with what to write instead.
#include "tools/framezip/policy_flag.h"

#include <catch2/catch.hpp>
#include <string>

namespace framezip::cli {
namespace {

namespace v1 = framezip::v1;

Status Parse(const std::string& text, v1::CompressionPolicy& out) {
  return ParsePolicyFlag(text, out);
}

TEST_CASE("The policy flag sets the kind and its options by the API's field names", "[unit][cli]") {
  v1::CompressionPolicy p;
  REQUIRE(Parse("kivi", p).ok());
  CHECK(p.kind() == v1::POLICY_KIND_KIVI);
  CHECK_FALSE(p.has_kivi());

  p.Clear();
  REQUIRE(Parse("attentionpack:factor_bits=4,key_rank=8,energy=0.95", p).ok());
  CHECK(p.kind() == v1::POLICY_KIND_ATTENTIONPACK);
  CHECK(p.attentionpack().factor_bits() == 4);
  CHECK(p.attentionpack().key_rank() == 8);
  CHECK(p.attentionpack().energy() == Approx(0.95f));

  p.Clear();
  REQUIRE(Parse("ZipVL:other_mode=evict,per_head_selection=true,tau=0.9", p).ok());
  CHECK(p.kind() == v1::POLICY_KIND_ZIPVL);
  CHECK(p.zipvl().other_mode() == v1::UNIMPORTANT_TOKEN_MODE_EVICT);
  CHECK(p.zipvl().per_head_selection());
  CHECK(p.zipvl().tau() == Approx(0.9f));

  p.Clear();
  REQUIRE(Parse("dynamic_llava:vision_keep_ratio=0.3,gate_generated_tokens=false", p).ok());
  CHECK(p.dynamic_llava().vision_keep_ratio() == Approx(0.3f));
  CHECK_FALSE(p.dynamic_llava().gate_generated_tokens());
}

TEST_CASE("The policy flag refuses bad input, naming what it accepts", "[unit][cli]") {
  struct Bad {
    std::string text, message;
  };
  const Bad bad = GENERATE(
      Bad{"", "unknown policy '' (none, zipvl, attentionpack"},
      Bad{"unspecified", "unknown policy 'unspecified'"},
      Bad{"bogus:x=1", "unknown policy 'bogus'"}, Bad{"none:x=1", "none takes no options"},
      Bad{"kivi:", "'' is not FIELD=VALUE"}, Bad{"kivi:bits", "'bits' is not FIELD=VALUE"},
      Bad{"kivi:=4", "'=4' is not FIELD=VALUE"}, Bad{"kivi:bits=4,", "'' is not FIELD=VALUE"},
      Bad{"attentionpack:rank=4", "AttentionPackOptions has no option 'rank' (it has: key_rank"},
      Bad{"kivi:bits=-1", "bits=-1 is not a valid uint32"},
      Bad{"kivi:bits=99999999999", "bits=99999999999 is not a valid uint32"},
      Bad{"kivi:bits=4x", "bits=4x is not a valid uint32"},
      Bad{"zipvl:tau=nan", "tau=nan is not a valid float"},
      Bad{"zipvl:tau=0.5.5", "tau=0.5.5 is not a valid float"},
      Bad{"zipvl:per_head_selection=1", "per_head_selection=1 is not a valid bool"},
      Bad{"zipvl:other_mode=drop", "other_mode=drop is not a valid enum"},
      Bad{"zipvl:other_mode=", "other_mode= is not a valid enum"});
  CAPTURE(bad.text);
  v1::CompressionPolicy p;
  const Status st = Parse(bad.text, p);
  REQUIRE_FALSE(st.ok());
  CHECK(absl::IsInvalidArgument(st));
  CHECK(std::string(st.message()).find(bad.message) != std::string::npos);
}

}  // namespace
}  // namespace framezip::cli
