#include "engine/model/stored_quantization.h"

#include <string>

namespace framezip::engine::model {
namespace {

constexpr std::string_view kWhatLoads =
    "framezip loads compressed-tensors checkpoints with int8 weights, symmetric, per output "
    "channel (format int-quantized), or an unquantised checkpoint with --weight-format int8";

Status NotLoaded(std::string_view file, const std::string& field, const Json& value) {
  return UnimplementedError("{}: quantization_config.{} is {}: not loaded; {}", file, field,
                            value.dump(), kWhatLoads);
}

bool IsAbsentOrEmpty(const Json& obj, std::string_view key) {
  const Json* v = FindField(obj, key);
  return v == nullptr || (v->is_object() && v->empty()) || (v->is_array() && v->empty());
}

// `expect` lists field = value pairs the quantisation arguments must hold; absent fields take
// compressed-tensors' defaults, which are given as the fallback.
Status CheckArgs(std::string_view file, const std::string& at, const Json& args, bool activations) {
  if (!args.is_object()) return NotLoaded(file, at, args);
  const auto want = [&](std::string_view key, const Json& expected, const Json& fallback) {
    const Json* v = FindField(args, key);
    const Json& got = v == nullptr ? fallback : *v;
    return got == expected ? absl::OkStatus() : NotLoaded(file, at + "." + std::string(key), got);
  };
  FZ_RETURN_IF_ERROR(want("num_bits", 8, 8));
  FZ_RETURN_IF_ERROR(want("type", "int", "int"));
  FZ_RETURN_IF_ERROR(want("symmetric", true, true));
  // Weights: fixed per-channel scales. Activations: scales computed per token at run time, as
  // framezip's kernels quantise each row (a static scale stored with the checkpoint is not read).
  FZ_RETURN_IF_ERROR(want("strategy", activations ? "token" : "channel", "tensor"));
  FZ_RETURN_IF_ERROR(want("dynamic", activations, false));
  const Json* group_size = FindField(args, "group_size");
  if (group_size != nullptr) return NotLoaded(file, at + ".group_size", *group_size);
  const Json* block = FindField(args, "block_structure");
  if (block != nullptr) return NotLoaded(file, at + ".block_structure", *block);
  return absl::OkStatus();
}

}  // namespace

StatusOr<StoredQuantization> ParseStoredQuantization(const Json& q, std::string_view file) {
  if (!q.is_object()) return NotLoaded(file, "", q);
  const auto text = [&](std::string_view key) -> std::string {
    const Json* v = FindField(q, key);
    return v != nullptr && v->is_string() ? v->get<std::string>() : std::string();
  };
  if (text("quant_method") != "compressed-tensors") {
    return UnimplementedError(
        "{}: quantization_config (quant_method '{}', format '{}'): checkpoints stored quantised "
        "that way are not loaded; {}",
        file, text("quant_method"), text("format"), kWhatLoads);
  }
  const auto int8_format = [](const Json& v) {
    return v.is_string() && (v == "int-quantized" || v == "naive-quantized");
  };
  const Json* format = FindField(q, "format");
  if (format == nullptr || !int8_format(*format)) {
    return NotLoaded(file, "format", format == nullptr ? Json() : *format);
  }
  if (const Json* status = FindField(q, "quantization_status");
      status != nullptr && *status != "compressed") {
    return NotLoaded(file, "quantization_status", *status);
  }
  for (const char* key : {"sparsity_config", "transform_config", "kv_cache_scheme"}) {
    if (!IsAbsentOrEmpty(q, key)) return NotLoaded(file, key, q[key]);
  }
  const Json* groups = FindField(q, "config_groups");
  if (groups == nullptr || !groups->is_object() || groups->empty()) {
    return NotLoaded(file, "config_groups", groups == nullptr ? Json() : *groups);
  }
  for (const auto& [name, group] : groups->items()) {
    const std::string at = "config_groups." + name;
    if (!group.is_object()) return NotLoaded(file, at, group);
    if (const Json* f = FindField(group, "format"); f != nullptr && !int8_format(*f)) {
      return NotLoaded(file, at + ".format", *f);
    }
    const Json* targets = FindField(group, "targets");
    if (targets == nullptr || !targets->is_array() || targets->empty() ||
        !std::all_of(targets->begin(), targets->end(),
                     [](const Json& t) { return t == "Linear"; })) {
      return NotLoaded(file, at + ".targets", targets == nullptr ? Json() : *targets);
    }
    const Json* weights = FindField(group, "weights");
    if (weights == nullptr) return NotLoaded(file, at + ".weights", Json());
    FZ_RETURN_IF_ERROR(CheckArgs(file, at + ".weights", *weights, /*activations=*/false));
    if (const Json* in = FindField(group, "input_activations"); in != nullptr) {
      FZ_RETURN_IF_ERROR(CheckArgs(file, at + ".input_activations", *in, /*activations=*/true));
    }
    if (const Json* out = FindField(group, "output_activations"); out != nullptr) {
      return NotLoaded(file, at + ".output_activations", *out);
    }
  }
  return StoredQuantization::kInt8PerChannel;
}

}  // namespace framezip::engine::model
