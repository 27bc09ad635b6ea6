#include "engine/compress/policy_config.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <initializer_list>
#include <limits>
#include <map>
#include <set>
#include <type_traits>
#include <utility>

#include "engine/compress/dynamic_llava_predictors.h"

namespace framezip::engine::compress {
namespace {

constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();

// Every option of every policy, once: its name, its range or spellings. Parsing, formatting,
// validation and the list of names all walk these, so they cannot disagree.
template <class V>
void VisitOptions(ZipVlOptions& z, V& v) {
  v.Real("tau", z.tau, 1e-6, 1.0);
  v.Int("keep_recent", z.keep_recent, 0, 1 << 20);
  v.Int("probes_recent", z.probes_recent, 1, 1 << 20);
  v.Int("probes_random", z.probes_random, 0, 1 << 20);
  v.Bool("per_head", z.per_head, "1", "0");
  v.Choice("u_rows", z.u_rows,
           {{"local", URows::kLocal}, {"skip", URows::kSkip}, {"attend", URows::kAttendImportant}});
  v.Int("u_window", z.u_window, 1, 1 << 20);
  v.Int("u_sinks", z.u_sinks, 0, 1 << 20);
  v.Int("dense_layers", z.dense_layers, 0, 1 << 10);
  v.Choice("high_bits", z.high_bits, {{"4", 4}, {"2", 2}, {"16", 16}});
  v.Choice("low_bits", z.low_bits, {{"2", 2}, {"4", 4}, {"16", 16}, {"evict", 0}, {"0", 0}});
  v.Int("window", z.window, 0, 1 << 20);
  v.Int("seed", z.seed, 0, kInt64Max);
}

// `shared`: false inside zipvl+attentionpack, whose zipvl options hold seed and dense_layers.
template <class V>
void VisitOptions(AttentionPackOptions& a, V& v, bool shared = true) {
  v.Int("rank_k", a.rank_k, 1, UINT16_MAX);
  v.Int("rank_v", a.rank_v, 1, UINT16_MAX);
  v.Int("groups", a.groups, 1, 2);
  v.Real("top_fraction", a.top_fraction, 0, 1);
  v.Real("ema", a.ema, 0, 1);
  v.Int("regroup", a.regroup, 1, 1 << 20);
  if (shared) v.Int("dense_layers", a.dense_layers, 0, 1 << 16);
  v.Int("min_tokens", a.min_tokens, 1, 1 << 30);
  if (shared) v.Int("seed", a.seed, 0, kInt64Max);
  v.Choice("factors", a.factors,
           {{"f16", kv::FactorFormat::kF16}, {"int4", kv::FactorFormat::kInt4}});
  v.Int("recompress", a.recompress, 0, 1 << 20);
}

template <class V>
void VisitOptions(ZipVlAttentionPackOptions& o, V& v) {
  VisitOptions(o.zipvl, v);
  VisitOptions(o.pack, v, /*shared=*/false);
}

template <class V>
void VisitOptions(DynamicLlavaOptions& d, V& v) {
  v.OptInt("sparse_layer", d.sparse_layer, 0, 1 << 16);
  v.OptReal("vision_keep", d.vision_keep, 1e-6, 1.0);
  v.Bool("select", d.random_select, "random", "predictor");
  v.Int("seed", d.seed, 0, kInt64Max);
  v.Bool("text_gate", d.text_gate, "on", "off");
  v.Real("text_keep", d.text_keep, 0, 1);
  v.OptReal("text_threshold", d.text_threshold, -kMaxTextThreshold, kMaxTextThreshold);
  v.Choice("bits", d.bits, {{"16", 16}, {"4", 4}, {"2", 2}});
  v.Int("window", d.window, 1, 1 << 20);
}

template <class V>
void VisitOptions(FastVOptions& f, V& v) {
  v.Int("k", f.k, 1, 1 << 16);
  v.Real("r", f.r, 0.0, 1.0);
}

template <class V>
void VisitOptions(KiviOptions& k, V& v) {
  v.Choice("bits", k.bits, {{"2", 2}, {"4", 4}});
  v.Int("window", k.window, 1, 1 << 20);
}

template <class V>
void VisitOptions(NoneOptions&, V&) {}

std::string Number(double x) { return fmt::format("{}", x); }

template <class T>
using Spellings = std::initializer_list<std::pair<const char*, T>>;

// Each option's value as text (the CLI's spelling), in visiting order.
struct Collect {
  std::vector<std::pair<std::string, std::string>> values;

  void Real(const char* key, double& x, double, double) { values.emplace_back(key, Number(x)); }
  template <class T>
  void Int(const char* key, T& x, int64_t, int64_t) {
    values.emplace_back(key, fmt::format("{}", x));
  }
  void Bool(const char* key, bool& x, const char* on, const char* off) {
    values.emplace_back(key, x ? on : off);
  }
  template <class T>
  void Choice(const char* key, T& x, Spellings<T> spellings) {
    for (const auto& [word, value] : spellings) {
      if (value == x) {
        values.emplace_back(key, word);
        return;
      }
    }
    values.emplace_back(key, "?");
  }
  void OptReal(const char* key, std::optional<double>& x, double, double) {
    values.emplace_back(key, x ? Number(*x) : "");
  }
  template <class T>
  void OptInt(const char* key, std::optional<T>& x, int64_t, int64_t) {
    values.emplace_back(key, x ? fmt::format("{}", *x) : "");
  }
};

// Reads KEY=VALUE pairs into the options; remembers which keys it was asked for.
struct Parse {
  std::string_view policy;
  std::map<std::string, std::string> given;
  std::set<std::string> known;
  Status status;

  const std::string* Find(const char* key) {
    known.insert(key);
    if (!status.ok()) return nullptr;
    auto it = given.find(key);
    return it == given.end() ? nullptr : &it->second;
  }
  void Fail(const char* key, const std::string& value, std::string_view expected) {
    status = InvalidArgumentError("policy '{}': {}='{}' is not {}", policy, key, value, expected);
  }
  static bool ParseDouble(const std::string& s, double* out) {
    char* end = nullptr;
    *out = std::strtod(s.c_str(), &end);
    return !s.empty() && *end == '\0' && std::isfinite(*out);
  }
  static bool ParseInt(const std::string& s, int64_t* out) {
    const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
    return !s.empty() && ec == std::errc() && ptr == s.data() + s.size();
  }

  void Real(const char* key, double& x, double lo, double hi) {
    const std::string* s = Find(key);
    double v = 0;
    if (s == nullptr) return;
    if (!ParseDouble(*s, &v) || !(v >= lo && v <= hi)) {
      return Fail(key, *s, fmt::format("a number in [{}, {}]", lo, hi));
    }
    x = v;
  }
  template <class T>
  void Int(const char* key, T& x, int64_t lo, int64_t hi) {
    const std::string* s = Find(key);
    int64_t v = 0;
    if (s == nullptr) return;
    if (!ParseInt(*s, &v) || v < lo || v > hi) {
      return Fail(key, *s, fmt::format("an integer in [{}, {}]", lo, hi));
    }
    x = static_cast<T>(v);
  }
  void Bool(const char* key, bool& x, const char* on, const char* off) {
    const std::string* s = Find(key);
    if (s == nullptr) return;
    if (*s == on || *s == "true") {
      x = true;
    } else if (*s == off || *s == "false") {
      x = false;
    } else {
      Fail(key, *s, fmt::format("{} or {}", on, off));
    }
  }
  template <class T>
  void Choice(const char* key, T& x, Spellings<T> spellings) {
    const std::string* s = Find(key);
    if (s == nullptr) return;
    std::vector<std::string> words;
    for (const auto& [word, value] : spellings) {
      if (*s == word) {
        x = value;
        return;
      }
      words.emplace_back(word);
    }
    Fail(key, *s, fmt::format("one of {}", fmt::join(words, "|")));
  }
  void OptReal(const char* key, std::optional<double>& x, double lo, double hi) {
    if (Find(key) == nullptr) return;
    double v = 0;
    Real(key, v, lo, hi);
    x = v;
  }
  template <class T>
  void OptInt(const char* key, std::optional<T>& x, int64_t lo, int64_t hi) {
    if (Find(key) == nullptr) return;
    T v = 0;
    Int(key, v, lo, hi);
    x = v;
  }
};

// The first option outside its range.
struct Check {
  std::string prefix;  // "policy.zipvl."
  Status status;

  void Real(const char* key, double& x, double lo, double hi) {
    if (status.ok() && !(x >= lo && x <= hi)) {
      status = InvalidArgumentError("{}{}: {} is not in [{}, {}]", prefix, key, x, lo, hi);
    }
  }
  template <class T>
  void Int(const char* key, T& x, int64_t lo, int64_t hi) {
    bool in = false;
    if constexpr (std::is_unsigned_v<T>) {
      in = x <= static_cast<uint64_t>(hi) && (lo <= 0 || x >= static_cast<uint64_t>(lo));
    } else {
      in = static_cast<int64_t>(x) >= lo && static_cast<int64_t>(x) <= hi;
    }
    if (status.ok() && !in) {
      status = InvalidArgumentError("{}{}: {} is not in [{}, {}]", prefix, key, x, lo, hi);
    }
  }
  void Bool(const char*, bool&, const char*, const char*) {}
  template <class T>
  void Choice(const char* key, T& x, Spellings<T> spellings) {
    std::vector<std::string> words;
    for (const auto& [word, value] : spellings) {
      if (value == x) return;
      words.emplace_back(word);
    }
    if (status.ok()) {
      status = InvalidArgumentError("{}{}: {} is not one of {}", prefix, key,
                                    static_cast<int64_t>(x), fmt::join(words, "|"));
    }
  }
  void OptReal(const char* key, std::optional<double>& x, double lo, double hi) {
    if (x) Real(key, *x, lo, hi);
  }
  template <class T>
  void OptInt(const char* key, std::optional<T>& x, int64_t lo, int64_t hi) {
    if (x) Int(key, *x, lo, hi);
  }
};

// The names of the options, in visiting order.
struct Names {
  std::vector<std::string> names;
  void Real(const char* key, double&, double, double) { names.emplace_back(key); }
  template <class T>
  void Int(const char* key, T&, int64_t, int64_t) {
    names.emplace_back(key);
  }
  void Bool(const char* key, bool&, const char*, const char*) { names.emplace_back(key); }
  template <class T>
  void Choice(const char* key, T&, Spellings<T>) {
    names.emplace_back(key);
  }
  void OptReal(const char* key, std::optional<double>&, double, double) { names.emplace_back(key); }
  template <class T>
  void OptInt(const char* key, std::optional<T>&, int64_t, int64_t) {
    names.emplace_back(key);
  }
};

template <class V>
void VisitConfig(PolicyConfig& config, V& v) {
  std::visit([&](auto& options) { VisitOptions(options, v); }, config.options);
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
  return s;
}

// Names in the order of PolicyConfig::options' alternatives, then "kivi4".
constexpr const char* kNames[] = {"none",          "zipvl", "attentionpack", "zipvl+attentionpack",
                                  "dynamic_llava", "fastv", "kivi",          "kivi4"};

}  // namespace

std::string_view PolicyConfig::name() const {
  if (const auto* kivi = std::get_if<KiviOptions>(&options); kivi != nullptr && kivi->bits == 4) {
    return "kivi4";
  }
  return kNames[options.index()];
}

std::vector<std::string> PolicyNames() { return {std::begin(kNames), std::end(kNames)}; }

StatusOr<PolicyConfig> DefaultPolicyConfig(std::string_view name) {
  PolicyConfig c;
  if (name == "none" || name.empty()) {
    c.options = NoneOptions{};
  } else if (name == "zipvl") {
    c.options = ZipVlOptions{};
  } else if (name == "attentionpack") {
    c.options = AttentionPackOptions{};
  } else if (name == "zipvl+attentionpack") {
    c.options = ZipVlAttentionPackOptions{};
  } else if (name == "dynamic_llava") {
    c.options = DynamicLlavaOptions{};
  } else if (name == "fastv") {
    c.options = FastVOptions{};
  } else if (name == "kivi") {
    c.options = KiviOptions{};
  } else if (name == "kivi4") {
    c.options = KiviOptions{.bits = 4};
  } else {
    return InvalidArgumentError("unknown compression policy '{}' (known: {})", name,
                                fmt::join(PolicyNames(), ", "));
  }
  return c;
}

StatusOr<PolicyConfig> ParsePolicyConfig(std::string_view spec) {
  const size_t colon = spec.find(':');
  const std::string_view name = Trim(spec.substr(0, colon));
  FZ_ASSIGN_OR_RETURN(PolicyConfig config, DefaultPolicyConfig(name));
  Parse parse;
  parse.policy = name.empty() ? std::string_view("none") : name;
  if (colon != std::string_view::npos) {
    std::string_view rest = spec.substr(colon + 1);
    while (!rest.empty()) {
      const size_t comma = rest.find(',');
      const std::string_view pair = Trim(rest.substr(0, comma));
      rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
      if (pair.empty()) continue;
      const size_t eq = pair.find('=');
      if (eq == std::string_view::npos || Trim(pair.substr(0, eq)).empty()) {
        return InvalidArgumentError("policy '{}': option '{}' is not key=value", parse.policy,
                                    pair);
      }
      const std::string key(Trim(pair.substr(0, eq)));
      if (!parse.given.emplace(key, std::string(Trim(pair.substr(eq + 1)))).second) {
        return InvalidArgumentError("policy '{}': option '{}' given twice", parse.policy, key);
      }
    }
  }
  VisitConfig(config, parse);
  FZ_RETURN_IF_ERROR(parse.status);
  for (const auto& [key, value] : parse.given) {
    if (!parse.known.contains(key)) {
      const std::vector<std::string> names = PolicyOptionNames(parse.policy);
      if (names.empty()) return InvalidArgumentError("policy '{}' takes no options", parse.policy);
      return InvalidArgumentError("policy '{}' has no option '{}' (it has: {})", parse.policy, key,
                                  fmt::join(names, ", "));
    }
  }
  return config;
}

std::string FormatPolicyConfig(const PolicyConfig& config) {
  const std::string name(config.name());
  StatusOr<PolicyConfig> defaults = DefaultPolicyConfig(name);
  Collect given, standard;
  PolicyConfig copy = config;
  VisitConfig(copy, given);
  if (defaults.ok()) VisitConfig(*defaults, standard);
  std::vector<std::string> changed;
  for (size_t i = 0; i < given.values.size(); ++i) {
    const auto& [key, value] = given.values[i];
    if (i < standard.values.size() && standard.values[i].second == value) continue;
    changed.push_back(fmt::format("{}={}", key, value));
  }
  if (changed.empty()) return name;
  return fmt::format("{}:{}", name, fmt::join(changed, ","));
}

Status ValidatePolicyConfig(const PolicyConfig& config, std::string_view where) {
  const std::string_view name = config.name() == "kivi4" ? "kivi" : config.name();
  Check check;
  check.prefix = fmt::format("{}{}.", where, name);
  PolicyConfig copy = config;
  VisitConfig(copy, check);
  return check.status;
}

std::vector<std::string> PolicyOptionNames(std::string_view name) {
  StatusOr<PolicyConfig> config = DefaultPolicyConfig(name);
  if (!config.ok()) return {};
  Names names;
  VisitConfig(*config, names);
  return names.names;
}

}  // namespace framezip::engine::compress
