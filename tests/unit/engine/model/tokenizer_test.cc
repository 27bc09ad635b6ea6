#include "engine/model/tokenizer.h"

#include <catch2/catch.hpp>
#include <chrono>
#include <iostream>

#include "engine/model/byte_level.h"
#include "tests/unit/engine/model/model_test_util.h"

namespace framezip::engine::model {
namespace {

using test::GoldenDir;
using test::LoadJson;
using test::ModelDir;

std::unique_ptr<Tokenizer> Load(const std::string& model) {
  auto t = Tokenizer::FromFile(ModelDir(model) / "tokenizer.json");
  REQUIRE(t.ok());
  return std::move(*t);
}

std::vector<int32_t> Ids(const Json& j) { return j.get<std::vector<int32_t>>(); }

TEST_CASE("byte level: the GPT-2 table", "[unit][engine]") {
  CHECK(ByteToUnicode(' ') == 0x120);
  CHECK(ByteToUnicode('\n') == 0x10A);
  CHECK(ByteToUnicode('\t') == 0x109);
  CHECK(ByteToUnicode(0x00) == 0x100);
  CHECK(ByteToUnicode(0x7F) == 0x121);
  CHECK(ByteToUnicode(0xA0) == 0x142);
  CHECK(ByteToUnicode(0xAD) == 0x143);
  CHECK(ByteToUnicode('a') == 'a');
  CHECK(ByteToUnicode(0xE9) == 0xE9);
  for (int b = 0; b < 256; ++b) CHECK(UnicodeToByte(ByteToUnicode(static_cast<uint8_t>(b))) == b);
  CHECK(UnicodeToByte(' ') == -1);
  CHECK(ByteLevelEncode(" a\n") ==
        "\xC4\xA0"
        "a"
        "\xC4\x8A");
  std::string out;
  ByteLevelDecodeToken("\xC4\xA0hi", out);
  CHECK(out == " hi");
  out.clear();
  ByteLevelDecodeToken("a b", out);  // ' ' is not in the alphabet: raw bytes of the whole token
  CHECK(out == "a b");
}

TEST_CASE("utf8: lossy decoding replaces maximal invalid subparts like Rust", "[unit][engine]") {
  CHECK(Utf8Lossy("abc") == "abc");
  CHECK(Utf8Lossy("\xE4\xBD\xA0") == "\xE4\xBD\xA0");
  CHECK(Utf8Lossy("\xE4\xBD"
                  "A") ==
        "\xEF\xBF\xBD"
        "A");                                                  // truncated 3-byte: one U+FFFD
  CHECK(Utf8Lossy("\xF0\x80") == "\xEF\xBF\xBD\xEF\xBF\xBD");  // F0 80: bad second byte
  CHECK(Utf8Lossy("\x80\x80") == "\xEF\xBF\xBD\xEF\xBF\xBD");
  CHECK(Utf8Lossy("\xED\xA0\x80") == "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // surrogate
  CHECK(Utf8Lossy("\xC0\xAF") == "\xEF\xBF\xBD\xEF\xBF\xBD");                  // overlong
  size_t held = 0;
  CHECK(Utf8Lossy("ab\xF0\x9F\x98", true, &held) == "ab");
  CHECK(held == 3);
  CHECK(Utf8Lossy("ab\xF0\x9F\x98", false, &held) == "ab\xEF\xBF\xBD");
  CHECK(IsValidUtf8("\xF0\x9F\x98\x80"));
  CHECK_FALSE(IsValidUtf8("\xF0\x9F\x98"));
  CHECK_FALSE(IsValidUtf8("\xF4\x90\x80\x80"));  // > U+10FFFF
}

// A hand-written tokenizer.json: the Qwen2 pipeline with 7 merges (string or pair form).
std::string MiniTokenizer(bool pair_merges, bool ignore_merges) {
  Json vocab = Json::object();
  for (int b = 0; b < 256; ++b) {
    std::string tok;
    AppendUtf8(ByteToUnicode(static_cast<uint8_t>(b)), tok);
    vocab[tok] = b;
  }
  int next = 256;
  for (const char* t : {"he", "ll", "hell", "hello", "\xC4\xA0w", "\xC4\xA0wo", "lo"})
    vocab[t] = next++;
  const std::vector<std::pair<std::string, std::string>> merges = {
      {"h", "e"},        {"l", "l"},         {"he", "ll"}, {"hell", "o"},
      {"\xC4\xA0", "w"}, {"\xC4\xA0w", "o"}, {"l", "o"}};
  Json m = Json::array();
  for (const auto& [a, b] : merges) {
    if (pair_merges) {
      m.push_back(Json::array({a, b}));
    } else {
      m.push_back(a + " " + b);
    }
  }
  Json j = {
      {"version", "1.0"},
      {"added_tokens", Json::array({Json{{"id", 263},
                                         {"content", "<|im_end|>"},
                                         {"single_word", false},
                                         {"lstrip", false},
                                         {"rstrip", false},
                                         {"normalized", false},
                                         {"special", true}},
                                    Json{{"id", 264},
                                         {"content", "<x>"},
                                         {"single_word", false},
                                         {"lstrip", true},
                                         {"rstrip", true},
                                         {"normalized", false},
                                         {"special", false}}})},
      {"normalizer", {{"type", "NFC"}}},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         Json::array(
             {Json{
                  {"type", "Split"},
                  {"pattern",
                   {{"Regex",
                     R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"}}},
                  {"behavior", "Isolated"},
                  {"invert", false}},
              Json{{"type", "ByteLevel"},
                   {"add_prefix_space", false},
                   {"trim_offsets", false},
                   {"use_regex", false}}})}}},
      {"post_processor", {{"type", "ByteLevel"}}},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", nullptr},
        {"ignore_merges", ignore_merges},
        {"vocab", vocab},
        {"merges", m}}}};
  return j.dump();
}

TEST_CASE("tokenizer: BPE merges by rank, both merge forms, added tokens", "[unit][engine]") {
  auto a = Tokenizer::FromJson(MiniTokenizer(false, false));
  REQUIRE(a.ok());
  auto b = Tokenizer::FromJson(MiniTokenizer(true, false));
  REQUIRE(b.ok());
  for (const char* text : {"hello world", "hellohello", "yellow hello", "he<|im_end|>ll"}) {
    INFO(text);
    auto ia = (*a)->Encode(text);
    auto ib = (*b)->Encode(text);
    REQUIRE(ia.ok());
    REQUIRE(ib.ok());
    CHECK(*ia == *ib);
    CHECK((*a)->Decode(*ia) == text);
  }
  // "hello" -> he, ll, hell, hello (ranks 0..3); " world" -> Ġwo r l d.
  CHECK(*(*a)->Encode("hello world") == std::vector<int32_t>{259, 261, 'r', 'l', 'd'});
  // "yellow": y e ll o w? ranks: "l l"(1) before "l o"(6): y e ll o w.
  CHECK(*(*a)->Encode("yellow") == std::vector<int32_t>{'y', 'e', 257, 'o', 'w'});
  CHECK(*(*a)->Encode("he<|im_end|>ll") == std::vector<int32_t>{256, 263, 257});
  // lstrip/rstrip absorb the spaces around "<x>".
  CHECK(*(*a)->Encode("he  <x>  ll") == std::vector<int32_t>{256, 264, 257});
  CHECK((*a)->Decode(std::vector<int32_t>{256, 263, 257}, /*skip_special_tokens=*/true) == "hell");
  CHECK((*a)->TokenToId("<|im_end|>") == 263);
  CHECK((*a)->TokenToId("hello") == 259);
  CHECK((*a)->IsSpecial(263));
  CHECK_FALSE((*a)->IsSpecial(264));
  CHECK((*a)->vocab_size() == 265);
  CHECK((*a)->Encode("bad \xFF utf8").status().code() == absl::StatusCode::kInvalidArgument);

  // ignore_merges: a piece that is a vocab entry is emitted whole even without a merge path.
  auto c = Tokenizer::FromJson(MiniTokenizer(true, true));
  REQUIRE(c.ok());
  CHECK(*(*c)->Encode("lo") == std::vector<int32_t>{262});
}

TEST_CASE("tokenizer: unsupported or broken files are refused with the reason", "[unit][engine]") {
  auto no_model = Tokenizer::FromJson(R"({"model": {"type": "Unigram", "vocab": []}})");
  CHECK(no_model.status().code() == absl::StatusCode::kUnimplemented);
  CHECK_THAT(MessageOf(no_model.status()), Catch::Contains("Unigram"));
  auto bad_merge = Tokenizer::FromJson(
      R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": ["a b"]}})");
  CHECK_THAT(MessageOf(bad_merge.status()), Catch::Contains("merged token 'ab'"));
  auto bad_norm = Tokenizer::FromJson(
      R"({"normalizer": {"type": "Lowercase"}, "model": {"type": "BPE", "vocab": {}}})");
  CHECK_THAT(MessageOf(bad_norm.status()), Catch::Contains("Lowercase"));
  auto bad_regex = Tokenizer::FromJson(R"({"pre_tokenizer": {"type": "Split",
      "pattern": {"Regex": "(unclosed"}, "behavior": "Isolated"}, "model": {"type": "BPE", "vocab": {}}})");
  CHECK(bad_regex.status().code() == absl::StatusCode::kInvalidArgument);
  Json nested = {{"type", "NFC"}};
  for (int i = 0; i < 40; ++i)
    nested = {{"type", "Sequence"}, {"normalizers", Json::array({nested})}};
  auto deep = Tokenizer::FromJson(
      Json{{"normalizer", nested}, {"model", {{"type", "BPE"}, {"vocab", Json::object()}}}}.dump());
  CHECK_THAT(MessageOf(deep.status()), Catch::Contains("nested more than"));
  auto bad_json = Tokenizer::FromJson("{");
  CHECK_THAT(MessageOf(bad_json.status()), Catch::StartsWith("tokenizer.json: invalid JSON"));
}

TEST_CASE("tokenizer: streaming decode never emits a broken character", "[unit][engine]") {
  auto tok = Load("tiny-ov-qwen2-f32");
  const std::string text = "Emoji 😀🎉 and 我能吞下 and ünïcödé 👨‍👩‍👧 end";
  auto ids = tok->Encode(text, false);
  REQUIRE(ids.ok());
  StreamingDecoder dec(*tok);
  std::string streamed;
  int held_back = 0;
  for (int32_t id : *ids) {
    const std::string piece = dec.Push(id);
    CHECK(IsValidUtf8(piece));
    if (dec.pending_bytes() > 0) ++held_back;
    streamed += piece;
  }
  streamed += dec.Finish();
  CHECK(streamed == text);
  CHECK(streamed == tok->Decode(*ids));
  CHECK(held_back > 0);  // the tiny vocabulary splits multi-byte characters across tokens

  // A character cut off at the end becomes U+FFFD only at Finish.
  auto emoji = tok->Encode("😀", false);
  REQUIRE(emoji.ok());
  REQUIRE(emoji->size() > 1);
  StreamingDecoder partial(*tok);
  for (size_t i = 0; i + 1 < emoji->size(); ++i) CHECK(partial.Push((*emoji)[i]).empty());
  CHECK(partial.Finish() == "\xEF\xBF\xBD");

  // Special tokens pass through or are skipped.
  const int32_t im_end = *tok->TokenToId("<|im_end|>");
  StreamingDecoder keep(*tok), skip(*tok, /*skip_special_tokens=*/true);
  CHECK(keep.Push(im_end) == "<|im_end|>");
  CHECK(skip.Push(im_end).empty());
}

TEST_CASE("tokenizer: without a decoder tokens are joined with spaces, also when streaming",
          "[unit][engine]") {
  auto tok = Tokenizer::FromJson(R"({"added_tokens": [{"id": 3, "content": "<s>",
      "special": true, "normalized": false}],
      "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]}})");
  REQUIRE(tok.ok());
  const std::vector<int32_t> ids = {2, 3, 0, 99, 1};
  CHECK((*tok)->Decode(ids) == "ab <s> a b");
  CHECK((*tok)->Decode(ids, true) == "ab a b");
  StreamingDecoder stream(**tok, /*skip_special_tokens=*/true);
  std::string out;
  for (int32_t id : ids) out += stream.Push(id);
  out += stream.Finish();
  CHECK(out == "ab a b");
}

void CheckTokenizerGoldens(const std::string& model, bool nfc) {
  auto tok = Load(model);
  const Json golden = LoadJson(GoldenDir(model) / "tokenizer_ids.json");
  Normalizer norm;
  if (nfc) {
    auto n = Normalizer::FromJson(Json{{"type", "NFC"}}, "test");
    REQUIRE(n.ok());
    norm = *n;
  }
  size_t cases = 0;
  for (const Json& c : golden.at("encode")) {
    const std::string text = c.at("text").get<std::string>();
    INFO("text: " << text);
    auto ids = tok->Encode(text, true);
    REQUIRE(ids.ok());
    CHECK(*ids == Ids(c.at("ids")));
    auto plain = tok->Encode(text, false);
    REQUIRE(plain.ok());
    CHECK(*plain == Ids(c.at("ids_no_special")));
    CHECK(tok->Decode(*ids) == c.at("decoded").get<std::string>());
    CHECK(tok->Decode(*ids, true) == c.at("decoded_skip_special").get<std::string>());
    // Round trip, byte for byte (of the normalized text).
    auto expected = norm.Apply(text);
    REQUIRE(expected.ok());
    CHECK(tok->Decode(*plain) == *expected);
    ++cases;
  }
  CHECK(cases >= 30);
  for (const Json& c : golden.at("decode")) {
    const auto ids = Ids(c.at("ids"));
    CHECK(tok->Decode(ids) == c.at("decoded").get<std::string>());
    CHECK(tok->Decode(ids, true) == c.at("decoded_skip_special").get<std::string>());
  }
}

TEST_CASE("tokenizer golden: Qwen2 pipeline ids identical to HF tokenizers",
          "[unit][engine][golden]") {
  CheckTokenizerGoldens("tiny-ov-qwen2-f32", /*nfc=*/true);
}

TEST_CASE("tokenizer golden: Llama-3 pipeline (ignore_merges, BOS template) identical to HF",
          "[unit][engine][golden]") {
  CheckTokenizerGoldens("tiny-llava-clip-llama-f32", /*nfc=*/false);
  auto tok = Load("tiny-llava-clip-llama-f32");
  auto ids = tok->Encode("hi", true);
  REQUIRE(ids.ok());
  CHECK(ids->front() == *tok->TokenToId("<|begin_of_text|>"));
}

TEST_CASE("tokenizer config: special tokens resolve to ids", "[unit][engine]") {
  auto tok = Load("tiny-ov-qwen2-f32");
  auto c = LoadTokenizerConfig(ModelDir("tiny-ov-qwen2-f32"), *tok);
  REQUIRE(c.ok());
  CHECK(c->eos_token == "<|im_end|>");
  CHECK(c->eos_token_id == 402);
  CHECK(c->pad_token_id == 400);
  CHECK_FALSE(c->bos_token.has_value());
  CHECK_FALSE(c->clean_up_tokenization_spaces);
  auto obj = ParseTokenizerConfig(
      R"({"eos_token": {"content": "<|im_start|>", "__type": "AddedToken"}})", *tok);
  REQUIRE(obj.ok());
  CHECK(obj->eos_token_id == 401);
  auto bad = ParseTokenizerConfig(R"({"bos_token": "<s>"})", *tok);
  CHECK_THAT(MessageOf(bad.status()), Catch::Contains("bos_token '<s>'"));
}

TEST_CASE("tokenizer: encode throughput", "[.][bench]") {
  auto tok = Load("tiny-ov-qwen2-f32");
  const Json golden = LoadJson(GoldenDir("tiny-ov-qwen2-f32") / "tokenizer_ids.json");
  std::string text;
  while (text.size() < (2u << 20)) {
    for (const Json& c : golden.at("encode")) text += c.at("text").get<std::string>() + " ";
  }
  for (int round = 0; round < 2; ++round) {  // cold cache, then warm
    const auto t0 = std::chrono::steady_clock::now();
    auto ids = tok->Encode(text, false);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    REQUIRE(ids.ok());
    std::cout << fmt::format("encode {:.1f} MB -> {} ids in {:.3f} s: {:.1f} MB/s ({})\n",
                             text.size() / 1e6, ids->size(), s, text.size() / 1e6 / s,
                             round == 0 ? "cold" : "warm");
    const auto t1 = std::chrono::steady_clock::now();
    const std::string back = tok->Decode(*ids);
    const double d = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
    std::cout << fmt::format("decode: {:.1f} M ids/s\n", ids->size() / 1e6 / d);
  }
}

}  // namespace
}  // namespace framezip::engine::model
