// libFuzzer target: loading an arbitrary tokenizer.json must end in a status, and a tokenizer
// that loads must encode and decode arbitrary text without crashing. The input is split at the
// first 0 byte: before it the JSON, after it the text to encode (so mutations explore both).
// When the input has no 0 byte, a fixed byte-level tokenizer encodes the input as text, which
// fuzzes the added-token matcher, Oniguruma split, NFC and BPE on a real pipeline.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "engine/model/byte_level.h"
#include "engine/model/tokenizer.h"

namespace {
using framezip::engine::model::Tokenizer;

const Tokenizer* Fixed() {
  static const Tokenizer* tok = [] {
    // A minimal Qwen2-style file: all 256 byte symbols, a few merges, ChatML specials.
    std::string vocab;
    for (int b = 0; b < 256; ++b) {
      std::string s;
      framezip::engine::model::AppendUtf8(
          framezip::engine::model::ByteToUnicode(static_cast<uint8_t>(b)), s);
      std::string esc;
      for (char c : s) {
        if (c == '"' || c == '\\') esc.push_back('\\');
        esc.push_back(c);
      }
      vocab += (b ? "," : "") + std::string("\"") + esc + "\":" + std::to_string(b);
    }
    vocab += R"(,"he":256,"ll":257,"hell":258)";
    const std::string json =
        R"({"added_tokens":[{"id":259,"content":"<|im_end|>","special":true,"normalized":false},{"id":260,"content":"<x>","lstrip":true,"rstrip":true,"single_word":true,"normalized":false}],"normalizer":{"type":"NFC"},"pre_tokenizer":{"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"Regex":"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},"behavior":"Isolated","invert":false},{"type":"ByteLevel","add_prefix_space":false,"use_regex":false}]},"decoder":{"type":"ByteLevel"},"model":{"type":"BPE","vocab":{)" +
        vocab + R"(},"merges":["h e","l l",["he","ll"]]}})";
    auto t = Tokenizer::FromJson(json);
    if (!t.ok()) __builtin_trap();
    return t->release();
  }();
  return tok;
}

void Exercise(const Tokenizer& tok, std::string_view text) {
  auto ids = tok.Encode(text);
  if (!ids.ok()) return;  // invalid UTF-8
  const std::string back = tok.Decode(*ids);
  if (!framezip::engine::model::IsValidUtf8(back)) __builtin_trap();
  framezip::engine::model::StreamingDecoder stream(tok);
  std::string streamed;
  for (int32_t id : *ids) streamed += stream.Push(id);
  streamed += stream.Finish();
  if (streamed != back) __builtin_trap();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t zero = input.find('\0');
  if (zero == std::string_view::npos) {
    Exercise(*Fixed(), input);
    return 0;
  }
  auto tok = Tokenizer::FromJson(input.substr(0, zero), "fuzz.json");
  if (!tok.ok()) return 0;
  Exercise(**tok, input.substr(zero + 1, 4096));
  // Decoding arbitrary ids (including out-of-range ones) must be safe too.
  std::vector<int32_t> ids;
  for (size_t i = zero + 1; i + 1 < size && ids.size() < 64; i += 2) {
    ids.push_back(static_cast<int32_t>(data[i] | (data[i + 1] << 8)) - 16);
  }
  (void)(*tok)->Decode(ids);
  return 0;
}
