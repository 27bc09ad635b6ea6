#include "engine/model/safetensors.h"

#include <catch2/catch.hpp>
#include <cstring>

#include "engine/core/half.h"
#include "tests/unit/engine/model/model_test_util.h"

namespace framezip::engine::model {
namespace {

using test::GoldenDir;
using test::ModelDir;
using test::WriteFile;

// A safetensors file from a header JSON text and a data section.
std::string RawFile(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(n >> (8 * i));
  return out + header + data;
}

Tensor F32(Shape shape, float start) {
  auto t = Tensor::Empty(std::move(shape), DType::kF32);
  REQUIRE(t.ok());
  for (int64_t i = 0; i < t->numel(); ++i) t->data<float>()[i] = start + static_cast<float>(i);
  return *t;
}

TEST_CASE("safetensors: write, mmap and read back zero-copy", "[unit][engine]") {
  testing::TempDir dir;
  auto bf = Tensor::Empty({3}, DType::kBF16);
  REQUIRE(bf.ok());
  for (int i = 0; i < 3; ++i) bf->data<BFloat16>()[i] = F32ToBF16(0.5f * i);
  REQUIRE(WriteSafetensors(dir / "a.safetensors",
                           {{"w", F32({2, 3}, 1.f)}, {"b", *bf}, {"e", F32({0, 4}, 0.f)}},
                           {{"format", "pt"}})
              .ok());
  Tensor w;
  {
    auto f = SafetensorsFile::Open(dir / "a.safetensors");
    REQUIRE(f.ok());
    CHECK(f->metadata().at("format") == "pt");
    CHECK(f->header().data_offset % 8 == 0);
    REQUIRE(f->tensors().size() == 3);
    auto got = f->Get("w");
    REQUIRE(got.ok());
    w = *got;
    CHECK(w.shape() == Shape{2, 3});
    auto b = f->Get("b");
    REQUIRE(b.ok());
    CHECK(b->dtype() == DType::kBF16);
    CHECK(BF16ToF32(b->data<BFloat16>()[2]) == 1.0f);
    auto e = f->Get("e");
    REQUIRE(e.ok());
    CHECK(e->numel() == 0);
    CHECK(f->Get("zz").status().code() == absl::StatusCode::kNotFound);
  }
  // The tensor keeps the mapping alive after the file object is gone.
  CHECK(w.data<float>()[5] == 6.f);
}

TEST_CASE("safetensors: header validation gives one line naming file and tensor",
          "[unit][engine]") {
  auto parse = [](const std::string& bytes) {
    return ParseSafetensorsHeader(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(),
                                  "m.safetensors");
  };
  const std::string ok_header =
      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F16","shape":[2],"data_offsets":[8,12]}})";
  REQUIRE(parse(RawFile(ok_header, std::string(12, '\0'))).ok());

  auto expect = [&](const std::string& bytes, absl::StatusCode code, const std::string& what) {
    auto h = parse(bytes);
    REQUIRE_FALSE(h.ok());
    CHECK(h.status().code() == code);
    const std::string msg = MessageOf(h.status());
    CHECK_THAT(msg, Catch::StartsWith("m.safetensors") && Catch::Contains(what));
    CHECK(msg.find('\n') == std::string::npos);
  };
  SECTION("truncated") {
    expect("\x05\x00\x00", absl::StatusCode::kDataLoss, "truncated");
    expect(RawFile(ok_header, std::string(12, '\0')).substr(0, 20), absl::StatusCode::kDataLoss,
           "truncated");
    expect(RawFile(ok_header, std::string(10, '\0')), absl::StatusCode::kDataLoss,
           "tensor b ends at data byte 12");
  }
  SECTION("bad header") {
    expect(RawFile("[1,2]", ""), absl::StatusCode::kInvalidArgument, "does not start with '{'");
    expect(RawFile("{\"a\": ", ""), absl::StatusCode::kInvalidArgument, "invalid JSON");
    std::string huge(8, '\xff');
    expect(huge, absl::StatusCode::kInvalidArgument, "exceeds the limit");
    expect(RawFile(R"({"a":{"dtype":"F33","shape":[1],"data_offsets":[0,4]}})", std::string(4, 0)),
           absl::StatusCode::kInvalidArgument, "tensor a: unknown dtype 'F33'");
    expect(RawFile(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", std::string(4, 0)),
           absl::StatusCode::kInvalidArgument, "tensor a");
    expect(RawFile(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", std::string(8, 0)),
           absl::StatusCode::kInvalidArgument, "tensor a: F32 [3] needs 12 bytes");
    expect(RawFile(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}})", std::string(4, 0)),
           absl::StatusCode::kInvalidArgument, "end before begin");
    expect(RawFile(R"({"__metadata__":{"x":1}})", ""), absl::StatusCode::kInvalidArgument,
           "__metadata__.x");
  }
  SECTION("overlap, hole and trailing bytes") {
    expect(
        RawFile(
            R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
            std::string(8, 0)),
        absl::StatusCode::kInvalidArgument, "tensor b data_offsets [4, 8] overlap tensor a");
    expect(RawFile(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", std::string(8, 0)),
           absl::StatusCode::kInvalidArgument, "hole");
    expect(RawFile(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", std::string(9, 0)),
           absl::StatusCode::kInvalidArgument, "5 trailing bytes");
  }
}

TEST_CASE("safetensors: an unaligned tensor is copied, an unsupported dtype refused",
          "[unit][engine]") {
  testing::TempDir dir;
  // Header of 7 bytes... padded by hand to an odd data offset: 'a' (U8, 1 byte) then 'b' F32.
  std::string header =
      R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"b":{"dtype":"F32","shape":[1],"data_offsets":[1,5]},"c":{"dtype":"F64","shape":[1],"data_offsets":[5,13]}})";
  while ((8 + header.size()) % 8 != 0) header += ' ';
  std::string data(13, '\0');
  const float v = 2.5f;
  std::memcpy(&data[1], &v, 4);
  WriteFile(dir / "u.safetensors", RawFile(header, data));
  auto f = SafetensorsFile::Open(dir / "u.safetensors");
  REQUIRE(f.ok());
  auto b = f->Get("b");
  REQUIRE(b.ok());
  CHECK(reinterpret_cast<uintptr_t>(b->raw_data()) % 4 == 0);
  CHECK(b->data<float>()[0] == 2.5f);
  auto c = f->Get("c");
  CHECK(c.status().code() == absl::StatusCode::kUnimplemented);
  CHECK_THAT(MessageOf(c.status()), Catch::Contains("tensor c") && Catch::Contains("F64"));
}

TEST_CASE("safetensors: sharded models through model.safetensors.index.json", "[unit][engine]") {
  testing::TempDir dir;
  REQUIRE(WriteSafetensors(dir / "model-00001-of-00002.safetensors",
                           {{"x.weight", F32({2}, 0.f)}, {"y.weight", F32({1}, 5.f)}})
              .ok());
  REQUIRE(WriteSafetensors(dir / "model-00002-of-00002.safetensors", {{"z.weight", F32({3}, 7.f)}})
              .ok());
  const std::string index = R"({"metadata": {"total_size": 24}, "weight_map": {
      "x.weight": "model-00001-of-00002.safetensors",
      "y.weight": "model-00001-of-00002.safetensors",
      "z.weight": "model-00002-of-00002.safetensors"}})";
  WriteFile(dir / "model.safetensors.index.json", index);
  auto m = SafetensorsModel::Open(dir.path());
  REQUIRE(m.ok());
  CHECK(m->num_files() == 2);
  CHECK(m->num_tensors() == 3);
  CHECK(m->Names() == std::vector<std::string>{"x.weight", "y.weight", "z.weight"});
  CHECK(m->FileOf("z.weight") == "model-00002-of-00002.safetensors");
  auto z = m->Get("z.weight");
  REQUIRE(z.ok());
  CHECK(z->data<float>()[2] == 9.f);

  SECTION("a weight_map entry its shard does not hold") {
    WriteFile(dir / "model.safetensors.index.json",
              R"({"weight_map": {"x.weight": "model-00002-of-00002.safetensors"}})");
    auto bad = SafetensorsModel::Open(dir.path());
    CHECK_THAT(MessageOf(bad.status()), Catch::Contains("tensor x.weight") &&
                                            Catch::Contains("model-00002-of-00002.safetensors"));
  }
  SECTION("a tensor in two shards") {
    REQUIRE(WriteSafetensors(dir / "model-00002-of-00002.safetensors",
                             {{"x.weight", F32({2}, 0.f)}, {"z.weight", F32({3}, 7.f)}})
                .ok());
    auto bad = SafetensorsModel::Open(dir.path());
    CHECK_THAT(MessageOf(bad.status()), Catch::Contains("x.weight appears in both"));
  }
  SECTION("a missing shard") {
    std::filesystem::remove(dir / "model-00002-of-00002.safetensors");
    auto bad = SafetensorsModel::Open(dir.path());
    CHECK(bad.status().code() == absl::StatusCode::kNotFound);
    CHECK_THAT(MessageOf(bad.status()), Catch::Contains("model-00002-of-00002.safetensors"));
  }
  SECTION("a shard path escaping the directory") {
    WriteFile(dir / "model.safetensors.index.json",
              R"({"weight_map": {"x.weight": "../evil.safetensors"}})");
    CHECK(SafetensorsModel::Open(dir.path()).status().code() == absl::StatusCode::kInvalidArgument);
  }
}

TEST_CASE("safetensors: a truncated model file names the file", "[unit][engine]") {
  testing::TempDir dir;
  auto text = ReadFileToString(ModelDir("tiny-ov-qwen2-f32") / "model.safetensors");
  REQUIRE(text.ok());
  WriteFile(dir / "model.safetensors", text->substr(0, text->size() - 100));
  auto m = SafetensorsModel::Open(dir.path());
  REQUIRE_FALSE(m.ok());
  CHECK(m.status().code() == absl::StatusCode::kDataLoss);
  CHECK_THAT(MessageOf(m.status()), Catch::Contains("model.safetensors") &&
                                        Catch::Contains("truncated") && Catch::Contains("tensor "));
  CHECK(SafetensorsModel::Open(dir / "nothing").status().code() == absl::StatusCode::kNotFound);
}

TEST_CASE("safetensors: reads the files transformers wrote", "[unit][engine][golden]") {
  for (const char* name :
       {"tiny-ov-qwen2-f32", "tiny-ov-qwen2-bf16", "tiny-llava-clip-llama-f32"}) {
    INFO(name);
    auto m = SafetensorsModel::Open(ModelDir(name));
    REQUIRE(m.ok());
    CHECK(m->num_tensors() > 50);
    auto g = SafetensorsModel::OpenFile(GoldenDir(name) / "forward.safetensors");
    REQUIRE(g.ok());
    auto logits = g->Get("logits");
    REQUIRE(logits.ok());
    CHECK(logits->rank() == 2);
    CHECK(logits->dim(1) == 448);
  }
}

}  // namespace
}  // namespace framezip::engine::model
