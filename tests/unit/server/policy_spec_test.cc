// A request's AttentionPack options (server/request_validation.h) become the engine's policy spec
// (server/turn_types.h EngineSpec) and survive a shared session record (server/shared_sessions.h):
// factor_bits 4 asks for int4 factors, 16 or 0 for f16, anything else is refused naming the field.
#include <catch2/catch.hpp>

#include "server/request_validation.h"
#include "server/shared_sessions.h"

namespace framezip::server {
namespace {

v1::CompressionPolicy AttentionPack(uint32_t factor_bits) {
  v1::CompressionPolicy p;
  p.set_kind(v1::POLICY_KIND_ATTENTIONPACK);
  p.mutable_attentionpack()->set_key_rank(4);
  p.mutable_attentionpack()->set_factor_bits(factor_bits);
  return p;
}

TEST_CASE("attentionpack factor_bits reaches the engine as its factor format", "[unit][server]") {
  auto int4 = ValidatePolicy(AttentionPack(4), {}, "policy");
  REQUIRE(int4.ok());
  CHECK(EngineSpec(*int4) == "attentionpack:rank_k=4,factors=int4");
  auto f16 = ValidatePolicy(AttentionPack(16), {}, "policy");
  REQUIRE(f16.ok());
  CHECK(EngineSpec(*f16) == "attentionpack:rank_k=4");
  auto unset = ValidatePolicy(AttentionPack(0), {}, "policy");
  REQUIRE(unset.ok());
  CHECK(EngineSpec(*unset) == "attentionpack:rank_k=4");

  auto bad = ValidatePolicy(AttentionPack(3), {}, "policy");
  REQUIRE_FALSE(bad.ok());
  CHECK(absl::IsInvalidArgument(bad.status()));
  CHECK_THAT(std::string(bad.status().message()),
             Catch::Contains("policy.attentionpack.factor_bits"));
}

TEST_CASE("a shared session keeps its attentionpack factor format", "[unit][server]") {
  SessionRecord r;
  r.spec.session_id = "s1";
  r.spec.model = "tiny";
  r.owner = "alice";
  r.key = "s1.00112233445566778899aabbccddeeff";
  r.spec.policy = *ValidatePolicy(AttentionPack(4), {}, "policy");
  auto back = DecodeSharedSession(EncodeSharedSession(r, {}));
  INFO((back.ok() ? "" : std::string(back.status().message())));
  REQUIRE(back.ok());
  CHECK(back->record.spec.policy.ap_factor_bits == 4);
  CHECK(EngineSpec(back->record.spec.policy) == EngineSpec(r.spec.policy));
}

}  // namespace
}  // namespace framezip::server
