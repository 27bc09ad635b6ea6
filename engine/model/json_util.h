// Typed, error-reporting access to nlohmann::json for the HF file parsers of engine/model.
//
// Every accessor names the file and the dotted field path in its error ("config.json:
// text_config.hidden_size: expected an integer, got string"). A JSON null counts as absent,
// because transformers writes unset optional fields as null. Internal to engine/model.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "nlohmann/json.hpp"

namespace framezip::engine::model {

using Json = nlohmann::json;

// Parses `text` (exceptions from nlohmann are caught): INVALID_ARGUMENT "<file>: invalid JSON:
// <what>" on failure.
StatusOr<Json> ParseJson(std::string_view text, std::string_view file);

// Where a value lives, for messages: file name and the field path of the enclosing object.
struct JsonPath {
  std::string file;
  std::string prefix;  // "" at top level, else "text_config." etc.

  std::string Field(std::string_view key) const { return prefix + std::string(key); }
  JsonPath Child(std::string_view key) const { return {file, prefix + std::string(key) + "."}; }
};

// Human name of a JSON value's type ("string", "integer", ...).
std::string_view JsonTypeName(const Json& v);

// `obj[key]` if present and not null, else nullptr. `obj` must be an object.
const Json* FindField(const Json& obj, std::string_view key);

// Required / defaulted scalar fields. Integers accept integral floats (384.0); doubles accept ints.
StatusOr<std::optional<int64_t>> OptionalInt(const Json& obj, std::string_view key,
                                             const JsonPath& at);
StatusOr<int64_t> IntOr(const Json& obj, std::string_view key, int64_t fallback,
                        const JsonPath& at);
StatusOr<int64_t> RequiredInt(const Json& obj, std::string_view key, const JsonPath& at);
StatusOr<double> DoubleOr(const Json& obj, std::string_view key, double fallback,
                          const JsonPath& at);
StatusOr<bool> BoolOr(const Json& obj, std::string_view key, bool fallback, const JsonPath& at);
StatusOr<std::optional<std::string>> OptionalString(const Json& obj, std::string_view key,
                                                    const JsonPath& at);
StatusOr<std::string> StringOr(const Json& obj, std::string_view key, std::string_view fallback,
                               const JsonPath& at);

// A value as an integer (the field name is only for messages).
StatusOr<int64_t> AsInt(const Json& v, const std::string& field, std::string_view file);
StatusOr<double> AsDouble(const Json& v, const std::string& field, std::string_view file);

// An int or a list of ints (eos_token_id, vision_feature_layer). Absent -> empty.
StatusOr<std::vector<int64_t>> IntOrIntList(const Json& obj, std::string_view key,
                                            const JsonPath& at);

}  // namespace framezip::engine::model
