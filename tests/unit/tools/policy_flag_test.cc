// `--policy NAME:KEY=VALUE,...` (tools/framezip/policy_flag.h): the CLI's form parses into the
// engine's typed options and reaches the API's fields of the same names; bad input is refused
// naming what it accepts.
#include "tools/framezip/policy_flag.h"

#include <catch2/catch.hpp>
#include <string>

namespace framezip::cli {
namespace {

namespace v1 = framezip::v1;

TEST_CASE("The policy flag sets the kind and its options by their one name", "[unit][cli]") {
  v1::CompressionPolicy p;
  REQUIRE(ParsePolicyFlag("kivi", p).ok());
  CHECK(p.kind() == v1::POLICY_KIND_KIVI);
  CHECK(p.kivi().bits() == 2);  // every option set explicitly: the defaults

  REQUIRE(ParsePolicyFlag("kivi4", p).ok());
  CHECK(p.kind() == v1::POLICY_KIND_KIVI);
  CHECK(p.kivi().bits() == 4);

  REQUIRE(ParsePolicyFlag("attentionpack:factors=int4,rank_k=8,top_fraction=0.5", p).ok());
  CHECK(p.kind() == v1::POLICY_KIND_ATTENTIONPACK);
  CHECK(p.attentionpack().factors() == v1::FACTORS_INT4);
  CHECK(p.attentionpack().rank_k() == 8);
  CHECK(p.attentionpack().top_fraction() == Approx(0.5f));

  REQUIRE(ParsePolicyFlag("zipvl:low_bits=evict,per_head=1,tau=0.9,u_rows=attend", p).ok());
  CHECK(p.kind() == v1::POLICY_KIND_ZIPVL);
  CHECK(p.zipvl().has_low_bits());
  CHECK(p.zipvl().low_bits() == 0);  // evict
  CHECK(p.zipvl().per_head());
  CHECK(p.zipvl().tau() == Approx(0.9f));
  CHECK(p.zipvl().u_rows() == v1::U_ROWS_ATTEND);
  CHECK_FALSE(p.has_attentionpack());  // the last kind's options only

  REQUIRE(ParsePolicyFlag("dynamic_llava:vision_keep=0.3,text_gate=off", p).ok());
  CHECK(p.dynamic_llava().vision_keep() == Approx(0.3f));
  CHECK(p.dynamic_llava().has_text_gate());
  CHECK_FALSE(p.dynamic_llava().text_gate());
  CHECK_FALSE(p.dynamic_llava().has_sparse_layer());  // left to the model's predictors

  REQUIRE(ParsePolicyFlag("zipvl+attentionpack:tau=0.8,rank_v=8", p).ok());
  CHECK(p.kind() == v1::POLICY_KIND_ZIPVL_ATTENTIONPACK);
  CHECK(p.zipvl().tau() == Approx(0.8f));
  CHECK(p.attentionpack().rank_v() == 8);
}

TEST_CASE("The policy flag refuses bad input, naming what it accepts", "[unit][cli]") {
  struct Bad {
    std::string text, message;
  };
  const Bad bad = GENERATE(
      Bad{"bogus:x=1", "--policy: unknown compression policy 'bogus' (known: none, zipvl"},
      Bad{"none:x=1", "policy 'none' takes no options"},
      Bad{"kivi:bits", "option 'bits' is not key=value"},
      Bad{"kivi:=4", "option '=4' is not key=value"},
      Bad{"attentionpack:rank=4",
          "policy 'attentionpack' has no option 'rank' (it has: rank_k, rank_v"},
      Bad{"attentionpack:factor_bits=4", "has no option 'factor_bits'"},
      Bad{"kivi:bits=-1", "bits='-1' is not one of 2|4"},
      Bad{"kivi:window=99999999999", "window='99999999999' is not an integer in [1, 1048576]"},
      Bad{"kivi:window=4x", "window='4x' is not an integer"},
      Bad{"zipvl:tau=nan", "tau='nan' is not a number in"},
      Bad{"zipvl:tau=0.5.5", "tau='0.5.5' is not a number in"},
      Bad{"zipvl:per_head=yes", "per_head='yes' is not 1 or 0"},
      Bad{"zipvl:u_rows=drop", "u_rows='drop' is not one of local|skip|attend"},
      Bad{"zipvl:tau=0.9,tau=0.8", "option 'tau' given twice"});
  CAPTURE(bad.text);
  v1::CompressionPolicy p;
  const Status st = ParsePolicyFlag(bad.text, p);
  REQUIRE_FALSE(st.ok());
  CHECK(absl::IsInvalidArgument(st));
  CHECK_THAT(std::string(st.message()), Catch::Contains(bad.message));
}

}  // namespace
}  // namespace framezip::cli
