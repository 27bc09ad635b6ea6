#include "engine/model/json_util.h"

#include <cmath>
#include <exception>

namespace framezip::engine::model {

StatusOr<Json> ParseJson(std::string_view text, std::string_view file) {
  try {
    return Json::parse(text.begin(), text.end());
  } catch (const std::exception& e) {
    return InvalidArgumentError("{}: invalid JSON: {}", file, e.what());
  }
}

std::string_view JsonTypeName(const Json& v) {
  switch (v.type()) {
    case Json::value_t::null:
      return "null";
    case Json::value_t::object:
      return "object";
    case Json::value_t::array:
      return "array";
    case Json::value_t::string:
      return "string";
    case Json::value_t::boolean:
      return "boolean";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
      return "integer";
    case Json::value_t::number_float:
      return "number";
    case Json::value_t::binary:
      return "binary";
    case Json::value_t::discarded:
      return "discarded";
  }
  return "?";
}

const Json* FindField(const Json& obj, std::string_view key) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

StatusOr<int64_t> AsInt(const Json& v, const std::string& field, std::string_view file) {
  if (v.is_number_integer()) {
    if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
      return InvalidArgumentError("{}: {}: integer {} out of range", file, field,
                                  v.get<uint64_t>());
    }
    return v.get<int64_t>();
  }
  if (v.is_number_float()) {
    const double d = v.get<double>();
    // Some writers emit 384.0 for an integer field; accept exactly integral values only.
    if (std::isfinite(d) && std::floor(d) == d && std::fabs(d) < 9.0e15) {
      return static_cast<int64_t>(d);
    }
    return InvalidArgumentError("{}: {}: expected an integer, got {}", file, field, d);
  }
  return InvalidArgumentError("{}: {}: expected an integer, got {}", file, field, JsonTypeName(v));
}

StatusOr<double> AsDouble(const Json& v, const std::string& field, std::string_view file) {
  if (v.is_number()) return v.get<double>();
  return InvalidArgumentError("{}: {}: expected a number, got {}", file, field, JsonTypeName(v));
}

StatusOr<std::optional<int64_t>> OptionalInt(const Json& obj, std::string_view key,
                                             const JsonPath& at) {
  const Json* v = FindField(obj, key);
  if (v == nullptr) return std::optional<int64_t>();
  FZ_ASSIGN_OR_RETURN(int64_t i, AsInt(*v, at.Field(key), at.file));
  return std::optional<int64_t>(i);
}

StatusOr<int64_t> IntOr(const Json& obj, std::string_view key, int64_t fallback,
                        const JsonPath& at) {
  FZ_ASSIGN_OR_RETURN(std::optional<int64_t> v, OptionalInt(obj, key, at));
  return v.value_or(fallback);
}

StatusOr<int64_t> RequiredInt(const Json& obj, std::string_view key, const JsonPath& at) {
  FZ_ASSIGN_OR_RETURN(std::optional<int64_t> v, OptionalInt(obj, key, at));
  if (!v) return InvalidArgumentError("{}: missing required field {}", at.file, at.Field(key));
  return *v;
}

StatusOr<double> DoubleOr(const Json& obj, std::string_view key, double fallback,
                          const JsonPath& at) {
  const Json* v = FindField(obj, key);
  if (v == nullptr) return fallback;
  return AsDouble(*v, at.Field(key), at.file);
}

StatusOr<bool> BoolOr(const Json& obj, std::string_view key, bool fallback, const JsonPath& at) {
  const Json* v = FindField(obj, key);
  if (v == nullptr) return fallback;
  if (!v->is_boolean()) {
    return InvalidArgumentError("{}: {}: expected a boolean, got {}", at.file, at.Field(key),
                                JsonTypeName(*v));
  }
  return v->get<bool>();
}

StatusOr<std::optional<std::string>> OptionalString(const Json& obj, std::string_view key,
                                                    const JsonPath& at) {
  const Json* v = FindField(obj, key);
  if (v == nullptr) return std::optional<std::string>();
  if (!v->is_string()) {
    return InvalidArgumentError("{}: {}: expected a string, got {}", at.file, at.Field(key),
                                JsonTypeName(*v));
  }
  return std::optional<std::string>(v->get<std::string>());
}

StatusOr<std::string> StringOr(const Json& obj, std::string_view key, std::string_view fallback,
                               const JsonPath& at) {
  FZ_ASSIGN_OR_RETURN(std::optional<std::string> v, OptionalString(obj, key, at));
  return v ? *v : std::string(fallback);
}

StatusOr<std::vector<int64_t>> IntOrIntList(const Json& obj, std::string_view key,
                                            const JsonPath& at) {
  std::vector<int64_t> out;
  const Json* v = FindField(obj, key);
  if (v == nullptr) return out;
  if (v->is_array()) {
    for (size_t i = 0; i < v->size(); ++i) {
      FZ_ASSIGN_OR_RETURN(int64_t x,
                          AsInt((*v)[i], fmt::format("{}[{}]", at.Field(key), i), at.file));
      out.push_back(x);
    }
    return out;
  }
  FZ_ASSIGN_OR_RETURN(int64_t x, AsInt(*v, at.Field(key), at.file));
  out.push_back(x);
  return out;
}

}  // namespace framezip::engine::model
