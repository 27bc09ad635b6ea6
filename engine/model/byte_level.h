// GPT-2 byte-level alphabet and UTF-8 helpers used by the tokenizer (docs/models.md §6.3).
//
// Byte-level BPE works on a string where every byte of the UTF-8 input is replaced by one
// printable code point: bytes 0x21–0x7E, 0xA1–0xAC and 0xAE–0xFF map to themselves, the other 68
// bytes (in increasing order) to U+0100…U+0143 ("Ġ" = U+0120 is the space). Pure functions,
// thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace framezip::engine::model {

// Code point that byte `b` maps to.
char32_t ByteToUnicode(uint8_t b);
// The byte a code point stands for, or -1 if `cp` is not in the alphabet.
int UnicodeToByte(char32_t cp);

// Maps every byte of `bytes` to its alphabet code point, UTF-8 encoded.
std::string ByteLevelEncode(std::string_view bytes);
// Appends the bytes of one token the way the ByteLevel decoder does: if EVERY code point of
// `token` is in the alphabet, the bytes they stand for; otherwise the token's own UTF-8 bytes.
void ByteLevelDecodeToken(std::string_view token, std::string& out);

// Appends the UTF-8 encoding of `cp`.
void AppendUtf8(char32_t cp, std::string& out);
// Decodes one code point at `s[i]` (valid UTF-8 assumed) and advances i.
char32_t NextCodePoint(std::string_view s, size_t& i);
// True if `s` is well-formed UTF-8 (no surrogates, no overlongs, ≤ U+10FFFF).
bool IsValidUtf8(std::string_view s);

// Lossy UTF-8 decoding exactly like Rust's String::from_utf8_lossy: every maximal invalid
// subpart (Unicode "substitution of maximal subparts") becomes one U+FFFD.
// With `hold_incomplete_tail`, a trailing sequence that is a valid but incomplete prefix of a
// character is not decoded; its length is returned in *held (the caller keeps those bytes for
// the next call). This is what a streaming decoder needs to never emit a broken character.
std::string Utf8Lossy(std::string_view bytes, bool hold_incomplete_tail = false,
                      size_t* held = nullptr);

}  // namespace framezip::engine::model
