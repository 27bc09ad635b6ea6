#include "tools/framezip/policy_flag.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>

#include <cctype>
#include <charconv>
#include <cmath>
#include <string_view>
#include <vector>

namespace framezip::cli {
namespace {

namespace pb = google::protobuf;

std::string Upper(std::string_view s) {
  std::string out;
  for (char c : s) out += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

std::vector<std::string_view> Split(std::string_view s, char sep) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  for (size_t at = s.find(sep); at != std::string_view::npos; at = s.find(sep, start)) {
    parts.push_back(s.substr(start, at - start));
    start = at + 1;
  }
  parts.push_back(s.substr(start));
  return parts;
}

std::string FieldNames(const pb::Descriptor& d) {
  std::string names;
  for (int i = 0; i < d.field_count(); ++i) {
    if (i > 0) names += ", ";
    names += d.field(i)->name();
  }
  return names;
}

// One FIELD=VALUE of the kind's options message, by the field's type.
Status SetField(pb::Message& options, std::string_view key, std::string_view value) {
  const pb::Descriptor& d = *options.GetDescriptor();
  const pb::FieldDescriptor* field = d.FindFieldByName(std::string(key));
  if (field == nullptr) {
    return InvalidArgumentError("--policy: {} has no option '{}' (it has: {})", d.name(), key,
                                FieldNames(d));
  }
  const pb::Reflection& r = *options.GetReflection();
  const std::string v(value);
  const auto bad = [&] {
    return InvalidArgumentError("--policy: {}={} is not a valid {}", key, value,
                                field->cpp_type_name());
  };
  switch (field->cpp_type()) {
    case pb::FieldDescriptor::CPPTYPE_UINT32: {
      uint32_t n = 0;
      const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
      if (ec != std::errc() || end != v.data() + v.size()) return bad();
      r.SetUInt32(&options, field, n);
      return absl::OkStatus();
    }
    case pb::FieldDescriptor::CPPTYPE_FLOAT: {
      size_t used = 0;
      float f = 0;
      try {
        f = std::stof(v, &used);
      } catch (const std::exception&) {
        return bad();
      }
      if (used != v.size() || !std::isfinite(f)) return bad();
      r.SetFloat(&options, field, f);
      return absl::OkStatus();
    }
    case pb::FieldDescriptor::CPPTYPE_BOOL:
      if (v != "true" && v != "false") return bad();
      r.SetBool(&options, field, v == "true");
      return absl::OkStatus();
    case pb::FieldDescriptor::CPPTYPE_ENUM: {
      // The value without its enum's prefix: other_mode=evict for UNIMPORTANT_TOKEN_MODE_EVICT.
      std::string suffix = "_";
      suffix += Upper(v);
      for (int i = 0; i < field->enum_type()->value_count(); ++i) {
        const pb::EnumValueDescriptor* e = field->enum_type()->value(i);
        if (!v.empty() && e->name().ends_with(suffix)) {
          r.SetEnum(&options, field, e);
          return absl::OkStatus();
        }
      }
      return bad();
    }
    default:
      return InvalidArgumentError("--policy: option '{}' cannot be set from the command line", key);
  }
}

}  // namespace

Status ParsePolicyFlag(const std::string& text, v1::CompressionPolicy& out) {
  const size_t colon = text.find(':');
  const std::string name = text.substr(0, colon);
  v1::PolicyKind kind;
  if (name.empty() || !v1::PolicyKind_Parse("POLICY_KIND_" + Upper(name), &kind) ||
      kind == v1::POLICY_KIND_UNSPECIFIED) {
    return InvalidArgumentError(
        "--policy: unknown policy '{}' (none, zipvl, attentionpack, dynamic_llava, fastv, kivi)",
        name);
  }
  out.set_kind(kind);
  if (colon == std::string::npos) return absl::OkStatus();
  // The options message of this kind: the CompressionPolicy field named like the kind.
  std::string field_name;
  for (char c : name) field_name += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const pb::FieldDescriptor* options_field = out.GetDescriptor()->FindFieldByName(field_name);
  if (options_field == nullptr || options_field->message_type() == nullptr) {
    return InvalidArgumentError("--policy: {} takes no options", name);
  }
  pb::Message& options = *out.GetReflection()->MutableMessage(&out, options_field);
  for (const std::string_view pair : Split(std::string_view(text).substr(colon + 1), ',')) {
    const size_t eq = pair.find('=');
    if (eq == std::string_view::npos || eq == 0) {
      return InvalidArgumentError("--policy: '{}' is not FIELD=VALUE", pair);
    }
    FZ_RETURN_IF_ERROR(SetField(options, pair.substr(0, eq), pair.substr(eq + 1)));
  }
  return absl::OkStatus();
}

}  // namespace framezip::cli
