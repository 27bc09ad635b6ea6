#include "engine/model/stored_quantization.h"

#include <optional>
#include <string>

namespace framezip::engine::model {
namespace {

constexpr std::string_view kWhatLoads =
    "framezip loads compressed-tensors checkpoints with int8 weights (format int-quantized) or "
    "FP8 E4M3 weights (format float-quantized), symmetric, per output channel, or an "
    "unquantised checkpoint with --weight-format int8";

Status NotLoaded(std::string_view file, const std::string& field, const Json& value) {
  return UnimplementedError("{}: quantization_config.{} is {}: not loaded; {}", file, field,
                            value.dump(), kWhatLoads);
}

bool IsAbsentOrEmpty(const Json& obj, std::string_view key) {
  const Json* v = FindField(obj, key);
  return v == nullptr || (v->is_object() && v->empty()) || (v->is_array() && v->empty());
}

// The format names of the two layouts framezip loads, and the QuantizationArgs `type` each
// implies.
std::optional<StoredQuantization> LayoutOfFormat(const Json& format) {
  if (format == "int-quantized" || format == "naive-quantized") {
    return StoredQuantization::kInt8PerChannel;
  }
  if (format == "float-quantized") return StoredQuantization::kFp8PerChannel;
  return std::nullopt;
}

// The quantisation arguments at `at` must describe `layout`'s weights (activations: false) or the
// activations framezip accepts beside them (activations: true). Absent fields take
// compressed-tensors' defaults, which are given as each check's fallback.
Status CheckArgs(std::string_view file, const std::string& at, const Json& args,
                 StoredQuantization layout, bool activations) {
  if (!args.is_object()) return NotLoaded(file, at, args);
  const auto field = [&](std::string_view key, const Json& fallback) -> const Json& {
    const Json* v = FindField(args, key);
    return v == nullptr ? fallback : *v;
  };
  const auto want = [&](std::string_view key, const Json& expected, const Json& fallback) {
    const Json& got = field(key, fallback);
    return got == expected ? absl::OkStatus() : NotLoaded(file, at + "." + std::string(key), got);
  };
  const bool fp8 = layout == StoredQuantization::kFp8PerChannel;
  FZ_RETURN_IF_ERROR(want("num_bits", 8, 8));
  FZ_RETURN_IF_ERROR(want("type", fp8 ? "float" : "int", "int"));
  FZ_RETURN_IF_ERROR(want("symmetric", true, true));
  if (activations) {
    // Scales computed per token at run time: framezip's int8 kernels quantise each row so, and
    // the CPU runs an FP8 checkpoint's activations in 16 bits. A static scale stored with the
    // checkpoint would not be read, so it is refused.
    FZ_RETURN_IF_ERROR(want("strategy", "token", "tensor"));
    FZ_RETURN_IF_ERROR(want("dynamic", true, false));
  } else {
    // Fixed scales per output channel; FP8 also one per tensor (the scale broadcast to every
    // channel), the layout of compressed-tensors' "FP8" scheme.
    const Json strategy = field("strategy", "tensor");  // a copy: the fallback is a temporary
    if (!(strategy == "channel" || (fp8 && strategy == "tensor"))) {
      return NotLoaded(file, at + ".strategy", strategy);
    }
    FZ_RETURN_IF_ERROR(want("dynamic", false, false));
  }
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
  const Json* format = FindField(q, "format");
  const std::optional<StoredQuantization> layout =
      format == nullptr ? std::nullopt : LayoutOfFormat(*format);
  if (!layout.has_value()) return NotLoaded(file, "format", format == nullptr ? Json() : *format);
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
    // A group may name its own format, but all must be the checkpoint's one layout.
    if (const Json* f = FindField(group, "format"); f != nullptr && LayoutOfFormat(*f) != layout) {
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
    FZ_RETURN_IF_ERROR(CheckArgs(file, at + ".weights", *weights, *layout,
                                 /*activations=*/false));
    if (const Json* in = FindField(group, "input_activations"); in != nullptr) {
      FZ_RETURN_IF_ERROR(CheckArgs(file, at + ".input_activations", *in, *layout,
                                   /*activations=*/true));
    }
    if (const Json* out = FindField(group, "output_activations"); out != nullptr) {
      return NotLoaded(file, at + ".output_activations", *out);
    }
  }
  return *layout;
}

}  // namespace framezip::engine::model
