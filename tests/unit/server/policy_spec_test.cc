// A request's CompressionPolicy (server/request_validation.h, server/policy_proto.h) becomes the
// engine's typed PolicyConfig field by field, under the same option names as the CLI's
// `--policy name:key=value`; a value out of range is refused naming the field; the config
// survives a shared session record (server/shared_sessions.h).
#include <google/protobuf/descriptor.h>

#include <catch2/catch.hpp>

#include "engine/compress/policy_config.h"
#include "server/policy_proto.h"
#include "server/request_validation.h"
#include "server/shared_sessions.h"

namespace framezip::server {
namespace {

namespace compress = engine::compress;

v1::CompressionPolicy AttentionPack(v1::Factors factors) {
  v1::CompressionPolicy p;
  p.set_kind(v1::POLICY_KIND_ATTENTIONPACK);
  p.mutable_attentionpack()->set_rank_k(4);
  p.mutable_attentionpack()->set_factors(factors);
  return p;
}

TEST_CASE("a request's policy options reach the engine's typed config", "[unit][server]") {
  const auto int4 = ValidatePolicy(AttentionPack(v1::FACTORS_INT4), {}, "policy");
  REQUIRE(int4.ok());
  CHECK(*int4 == *compress::ParsePolicyConfig("attentionpack:rank_k=4,factors=int4"));
  const auto unset = ValidatePolicy(AttentionPack(v1::FACTORS_UNSPECIFIED), {}, "policy");
  REQUIRE(unset.ok());
  CHECK(*unset == *compress::ParsePolicyConfig("attentionpack:rank_k=4"));

  // Options the server once dropped now reach the engine, 0 included where it is allowed.
  v1::CompressionPolicy z;
  z.set_kind(v1::POLICY_KIND_ZIPVL);
  z.mutable_zipvl()->set_tau(0.9f);
  z.mutable_zipvl()->set_low_bits(0);
  z.mutable_zipvl()->set_u_rows(v1::U_ROWS_ATTEND);
  z.mutable_zipvl()->set_u_sinks(0);
  const auto zipvl = ValidatePolicy(z, {}, "policy");
  REQUIRE(zipvl.ok());
  CHECK(*zipvl ==
        *compress::ParsePolicyConfig("zipvl:tau=0.9,low_bits=evict,u_rows=attend,u_sinks=0"));

  // Unspecified: the server's default, options and all.
  ValidationDefaults d;
  d.default_policy = *compress::ParsePolicyConfig("kivi:window=64");
  CHECK(*ValidatePolicy(v1::CompressionPolicy(), d, "policy") == d.default_policy);
  // Not served.
  d.served_policies = {PolicyKind::kNone, PolicyKind::kKivi};
  CHECK_THAT(MessageOf(ValidatePolicy(AttentionPack(v1::FACTORS_F16), d, "policy").status()),
             Catch::Contains("policy.kind: policy 'attentionpack' is not available"));
}

TEST_CASE("a policy option out of range is INVALID_ARGUMENT naming its field", "[unit][server]") {
  const auto refused = [](const v1::CompressionPolicy& p, const std::string& needle) {
    const auto r = ValidatePolicy(p, {}, "policy");
    REQUIRE_FALSE(r.ok());
    CHECK(absl::IsInvalidArgument(r.status()));
    CHECK_THAT(MessageOf(r.status()), Catch::Contains(needle));
  };
  v1::CompressionPolicy p;
  p.set_kind(v1::POLICY_KIND_ZIPVL);
  p.mutable_zipvl()->set_tau(1.5f);
  refused(p, "policy.zipvl.tau: 1.5 is not in");
  p.mutable_zipvl()->clear_tau();
  p.mutable_zipvl()->set_high_bits(8);
  refused(p, "policy.zipvl.high_bits: 8 is not one of 4|2|16");
  p.mutable_zipvl()->clear_high_bits();
  p.mutable_zipvl()->set_u_rows(static_cast<v1::URows>(42));
  refused(p, "policy.zipvl.u_rows: unknown value 42");
  v1::CompressionPolicy a = AttentionPack(static_cast<v1::Factors>(9));
  refused(a, "policy.attentionpack.factors");
  a = AttentionPack(v1::FACTORS_F16);
  a.mutable_attentionpack()->set_rank_k(0);
  refused(a, "policy.attentionpack.rank_k: 0 is not in [1, 65535]");
  v1::CompressionPolicy k;
  k.set_kind(v1::POLICY_KIND_KIVI);
  k.mutable_kivi()->set_bits(3);
  refused(k, "policy.kivi.bits: 3 is not one of 2|4");
  v1::CompressionPolicy unknown;
  unknown.set_kind(static_cast<v1::PolicyKind>(99));
  refused(unknown, "policy.kind: unknown policy 99");
}

// One spelling: every option of the engine's config is a field of the kind's options message,
// and every field of that message is an option (the proto's reserved names are the old ones).
TEST_CASE("the API's policy fields are the engine's option names", "[unit][server]") {
  const auto fields = [](const google::protobuf::Descriptor& d) {
    std::vector<std::string> names;
    for (int i = 0; i < d.field_count(); ++i) names.push_back(d.field(i)->name());
    std::sort(names.begin(), names.end());
    return names;
  };
  const auto options = [](const char* policy) {
    std::vector<std::string> names = compress::PolicyOptionNames(policy);
    std::sort(names.begin(), names.end());
    return names;
  };
  CHECK(fields(*v1::ZipVlOptions::descriptor()) == options("zipvl"));
  CHECK(fields(*v1::AttentionPackOptions::descriptor()) == options("attentionpack"));
  CHECK(fields(*v1::DynamicLlavaOptions::descriptor()) == options("dynamic_llava"));
  CHECK(fields(*v1::FastVOptions::descriptor()) == options("fastv"));
  CHECK(fields(*v1::KiviOptions::descriptor()) == options("kivi"));
}

TEST_CASE("a policy goes to the proto and back unchanged", "[unit][server]") {
  for (const char* spec : {"none", "zipvl:tau=0.9,per_head=1,u_rows=skip,low_bits=evict,seed=3",
                           "attentionpack:rank_v=8,top_fraction=0.5,factors=int4,recompress=16",
                           "zipvl+attentionpack:tau=0.8,dense_layers=1,rank_k=4",
                           "dynamic_llava:vision_keep=0.5,select=random,text_gate=off,bits=4",
                           "dynamic_llava", "fastv:k=3,r=0.75", "kivi4:window=64"}) {
    INFO(spec);
    const compress::PolicyConfig config = *compress::ParsePolicyConfig(spec);
    v1::CompressionPolicy p;
    PolicyToProto(config, &p);
    const auto back = PolicyFromProto(p, {}, "policy");
    REQUIRE(back.ok());
    CHECK(*back == config);
  }
}

TEST_CASE("a shared session keeps its policy options", "[unit][server]") {
  SessionRecord r;
  r.spec.session_id = "s1";
  r.spec.model = "tiny";
  r.owner = "alice";
  r.key = "s1.00112233445566778899aabbccddeeff";
  r.spec.policy = *ValidatePolicy(AttentionPack(v1::FACTORS_INT4), {}, "policy");
  auto back = DecodeSharedSession(EncodeSharedSession(r, {}));
  INFO((back.ok() ? "" : std::string(back.status().message())));
  REQUIRE(back.ok());
  CHECK(back->record.spec.policy == r.spec.policy);
  CHECK(std::get<compress::AttentionPackOptions>(back->record.spec.policy.options).factors ==
        engine::kv::FactorFormat::kInt4);
}

}  // namespace
}  // namespace framezip::server
