#include "engine/model/text_pipeline.h"

#include <utf8proc.h>

#include <cstdlib>

#include "engine/model/byte_level.h"

namespace framezip::engine::model {

namespace {
// The GPT-2 pattern ByteLevel applies when use_regex is true (tokenizers byte_level.rs).
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

StatusOr<std::string> TypeOf(const Json& j, std::string_view stage, std::string_view file) {
  if (!j.is_object()) {
    return InvalidArgumentError("{}: {}: expected an object, got {}", file, stage, JsonTypeName(j));
  }
  const Json* t = FindField(j, "type");
  if (t == nullptr || !t->is_string()) {
    return InvalidArgumentError("{}: {}: missing type", file, stage);
  }
  return t->get<std::string>();
}

// Nested "Sequence" stages recurse; an adversarial file could nest them deeply.
constexpr int kMaxNesting = 16;
thread_local int g_nesting = 0;
struct NestingGuard {
  NestingGuard() { ++g_nesting; }
  ~NestingGuard() { --g_nesting; }
  bool too_deep() const { return g_nesting > kMaxNesting; }
};

StatusOr<const Json*> ListField(const Json& j, std::string_view key, std::string_view stage,
                                std::string_view file) {
  const Json* v = FindField(j, key);
  if (v == nullptr || !v->is_array()) {
    return InvalidArgumentError("{}: {}.{}: expected a list", file, stage, key);
  }
  return v;
}
}  // namespace

// ---------------------------------------------------------------------------------------------

StatusOr<Normalizer> Normalizer::FromJson(const Json& j, std::string_view file) {
  const NestingGuard guard;
  if (guard.too_deep()) {
    return InvalidArgumentError("{}: normalizer: Sequence nested more than {} deep", file,
                                kMaxNesting);
  }
  Normalizer n;
  if (j.is_null()) return n;
  FZ_ASSIGN_OR_RETURN(std::string type, TypeOf(j, "normalizer", file));
  if (type == "Sequence") {
    FZ_ASSIGN_OR_RETURN(const Json* list, ListField(j, "normalizers", "normalizer", file));
    for (const Json& sub : *list) {
      FZ_ASSIGN_OR_RETURN(Normalizer s, FromJson(sub, file));
      n.forms_.insert(n.forms_.end(), s.forms_.begin(), s.forms_.end());
    }
  } else if (type == "NFC") {
    n.forms_.push_back(Form::kNfc);
  } else if (type == "NFD") {
    n.forms_.push_back(Form::kNfd);
  } else if (type == "NFKC") {
    n.forms_.push_back(Form::kNfkc);
  } else if (type == "NFKD") {
    n.forms_.push_back(Form::kNfkd);
  } else {
    return UnimplementedError("{}: normalizer type '{}' is not supported", file, type);
  }
  return n;
}

StatusOr<std::string> Normalizer::Apply(std::string_view text) const {
  std::string cur(text);
  for (Form f : forms_) {
    bool ascii = true;
    for (char c : cur) ascii = ascii && static_cast<uint8_t>(c) < 0x80;
    if (ascii) continue;  // every normalization form leaves ASCII unchanged
    int options = UTF8PROC_STABLE;
    switch (f) {
      case Form::kNfc:
        options |= UTF8PROC_COMPOSE;
        break;
      case Form::kNfd:
        options |= UTF8PROC_DECOMPOSE;
        break;
      case Form::kNfkc:
        options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
        break;
      case Form::kNfkd:
        options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
        break;
    }
    utf8proc_uint8_t* dst = nullptr;
    const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(cur.data()),
                                            static_cast<utf8proc_ssize_t>(cur.size()), &dst,
                                            static_cast<utf8proc_option_t>(options));
    if (n < 0) {
      return InvalidArgumentError("normalizing text: {}", utf8proc_errmsg(n));
    }
    cur.assign(reinterpret_cast<const char*>(dst), static_cast<size_t>(n));
    std::free(dst);
  }
  return cur;
}

// ---------------------------------------------------------------------------------------------

StatusOr<PreTokenizer> PreTokenizer::FromJson(const Json& j, std::string_view file) {
  const NestingGuard guard;
  if (guard.too_deep()) {
    return InvalidArgumentError("{}: pre_tokenizer: Sequence nested more than {} deep", file,
                                kMaxNesting);
  }
  PreTokenizer p;
  if (j.is_null()) return p;
  FZ_ASSIGN_OR_RETURN(std::string type, TypeOf(j, "pre_tokenizer", file));
  if (type == "Sequence") {
    FZ_ASSIGN_OR_RETURN(const Json* list, ListField(j, "pretokenizers", "pre_tokenizer", file));
    for (const Json& sub : *list) {
      FZ_ASSIGN_OR_RETURN(PreTokenizer s, FromJson(sub, file));
      p.steps_.insert(p.steps_.end(), s.steps_.begin(), s.steps_.end());
    }
    return p;
  }
  Step step;
  const JsonPath at{std::string(file), "pre_tokenizer."};
  if (type == "Split") {
    step.kind = Kind::kSplit;
    const Json* pattern = FindField(j, "pattern");
    if (pattern == nullptr || !pattern->is_object()) {
      return InvalidArgumentError("{}: pre_tokenizer Split: missing pattern", file);
    }
    if (const Json* re = FindField(*pattern, "Regex"); re != nullptr && re->is_string()) {
      auto compiled = OnigRegex::Compile(re->get<std::string>());
      if (!compiled.ok()) return Annotate(compiled.status(), fmt::format("{}: Split", file));
      step.regex = std::shared_ptr<const OnigRegex>(std::move(*compiled));
    } else if (const Json* s = FindField(*pattern, "String"); s != nullptr && s->is_string()) {
      step.literal = s->get<std::string>();
      if (step.literal.empty()) {
        return InvalidArgumentError("{}: pre_tokenizer Split: empty String pattern", file);
      }
    } else {
      return InvalidArgumentError("{}: pre_tokenizer Split: pattern needs Regex or String", file);
    }
    FZ_ASSIGN_OR_RETURN(std::string behavior, StringOr(j, "behavior", "Isolated", at));
    if (behavior == "Isolated") {
      step.behavior = Behavior::kIsolated;
    } else if (behavior == "Removed") {
      step.behavior = Behavior::kRemoved;
    } else if (behavior == "MergedWithPrevious") {
      step.behavior = Behavior::kMergedWithPrevious;
    } else if (behavior == "MergedWithNext") {
      step.behavior = Behavior::kMergedWithNext;
    } else if (behavior == "Contiguous") {
      step.behavior = Behavior::kContiguous;
    } else {
      return InvalidArgumentError("{}: pre_tokenizer Split: unknown behavior '{}'", file, behavior);
    }
    FZ_ASSIGN_OR_RETURN(step.invert, BoolOr(j, "invert", false, at));
  } else if (type == "ByteLevel") {
    step.kind = Kind::kByteLevel;
    FZ_ASSIGN_OR_RETURN(step.add_prefix_space, BoolOr(j, "add_prefix_space", true, at));
    FZ_ASSIGN_OR_RETURN(bool use_regex, BoolOr(j, "use_regex", true, at));
    if (use_regex) {
      static const auto* gpt2 = OnigRegex::Compile(kGpt2Pattern)->release();
      step.regex = std::shared_ptr<const OnigRegex>(std::shared_ptr<const OnigRegex>(), gpt2);
    }
  } else {
    return UnimplementedError("{}: pre_tokenizer type '{}' is not supported", file, type);
  }
  p.steps_.push_back(std::move(step));
  return p;
}

void PreTokenizer::SplitPiece(const Step& step, std::string_view piece,
                              std::vector<std::string>& out) {
  // (range, is_match) segments covering the piece, like tokenizers' Pattern::find_matches.
  std::vector<std::pair<std::pair<size_t, size_t>, bool>> segs;
  std::vector<std::pair<size_t, size_t>> matches;
  if (step.regex) {
    matches = step.regex->FindAll(piece);
  } else {
    for (size_t pos = piece.find(step.literal); pos != std::string_view::npos;
         pos = piece.find(step.literal, pos + step.literal.size())) {
      matches.emplace_back(pos, pos + step.literal.size());
    }
  }
  size_t prev = 0;
  for (auto [b, e] : matches) {
    if (prev != b) segs.push_back({{prev, b}, false});
    segs.push_back({{b, e}, true});
    prev = e;
  }
  if (prev != piece.size()) segs.push_back({{prev, piece.size()}, false});
  if (step.invert) {
    for (auto& s : segs) s.second = !s.second;
  }
  // Apply the behavior on ranges, then drop empty pieces.
  std::vector<std::pair<size_t, size_t>> pieces;
  switch (step.behavior) {
    case Behavior::kIsolated:
      for (auto& s : segs) pieces.push_back(s.first);
      break;
    case Behavior::kRemoved:
      for (auto& s : segs) {
        if (!s.second) pieces.push_back(s.first);
      }
      break;
    case Behavior::kMergedWithPrevious: {
      bool prev_match = false;
      for (auto& s : segs) {
        if (s.second && !pieces.empty() && !prev_match) {
          pieces.back().second = s.first.second;
        } else {
          pieces.push_back(s.first);
        }
        prev_match = s.second;
      }
      break;
    }
    case Behavior::kMergedWithNext: {
      bool prev_match = false;
      for (auto& s : segs) {
        if (!s.second && !pieces.empty() && prev_match) {
          pieces.back().second = s.first.second;
        } else {
          pieces.push_back(s.first);
        }
        prev_match = s.second;
      }
      break;
    }
    case Behavior::kContiguous: {
      bool prev_match = false;
      for (size_t i = 0; i < segs.size(); ++i) {
        if (i > 0 && segs[i].second && prev_match) {
          pieces.back().second = segs[i].first.second;
        } else {
          pieces.push_back(segs[i].first);
        }
        prev_match = segs[i].second;
      }
      break;
    }
  }
  for (auto [b, e] : pieces) {
    if (e > b) out.emplace_back(piece.substr(b, e - b));
  }
}

void PreTokenizer::Apply(std::string_view text, std::vector<std::string>& out) const {
  std::vector<std::string> cur{std::string(text)};
  bool byte_mapped = false;
  for (const Step& step : steps_) {
    std::vector<std::string> next;
    if (step.kind == Kind::kSplit) {
      for (const std::string& piece : cur) SplitPiece(step, piece, next);
    } else {
      for (std::string& piece : cur) {
        // ByteLevel: optional prefix space, optional GPT-2 split (Isolated), then byte mapping.
        if (step.add_prefix_space && (piece.empty() || piece[0] != ' ')) piece = " " + piece;
        std::vector<std::string> parts;
        if (step.regex) {
          Step split;
          split.regex = step.regex;
          SplitPiece(split, piece, parts);
        } else if (!piece.empty()) {
          parts.push_back(std::move(piece));
        }
        for (auto& part : parts) next.push_back(ByteLevelEncode(part));
      }
      byte_mapped = true;
    }
    cur = std::move(next);
  }
  (void)byte_mapped;
  for (auto& piece : cur) {
    if (!piece.empty()) out.push_back(std::move(piece));
  }
}

// ---------------------------------------------------------------------------------------------

StatusOr<PostProcessor> PostProcessor::FromJson(const Json& j, std::string_view file) {
  const NestingGuard guard;
  if (guard.too_deep()) {
    return InvalidArgumentError("{}: post_processor: Sequence nested more than {} deep", file,
                                kMaxNesting);
  }
  PostProcessor p;
  if (j.is_null()) return p;
  FZ_ASSIGN_OR_RETURN(std::string type, TypeOf(j, "post_processor", file));
  if (type == "ByteLevel") return p;  // only adjusts offsets
  if (type == "Sequence") {
    FZ_ASSIGN_OR_RETURN(const Json* list, ListField(j, "processors", "post_processor", file));
    for (const Json& sub : *list) {
      FZ_ASSIGN_OR_RETURN(PostProcessor s, FromJson(sub, file));
      // Applied in order: later processors wrap the earlier result.
      p.prefix_.insert(p.prefix_.begin(), s.prefix_.begin(), s.prefix_.end());
      p.suffix_.insert(p.suffix_.end(), s.suffix_.begin(), s.suffix_.end());
    }
    return p;
  }
  if (type != "TemplateProcessing") {
    return UnimplementedError("{}: post_processor type '{}' is not supported", file, type);
  }
  FZ_ASSIGN_OR_RETURN(const Json* single, ListField(j, "single", "post_processor", file));
  const Json* specials = FindField(j, "special_tokens");
  bool seen_sequence = false;
  for (const Json& piece : *single) {
    if (const Json* seq = FindField(piece, "Sequence"); seq != nullptr) {
      if (seen_sequence) {
        return InvalidArgumentError("{}: TemplateProcessing.single has two sequences", file);
      }
      seen_sequence = true;
      continue;
    }
    const Json* sp = FindField(piece, "SpecialToken");
    const Json* id = sp != nullptr ? FindField(*sp, "id") : nullptr;
    if (id == nullptr || !id->is_string()) {
      return InvalidArgumentError(
          "{}: TemplateProcessing.single: a {} piece is neither "
          "Sequence nor SpecialToken",
          file, JsonTypeName(piece));
    }
    const std::string name = id->get<std::string>();
    const Json* entry = specials != nullptr ? FindField(*specials, name) : nullptr;
    const Json* ids = entry != nullptr ? FindField(*entry, "ids") : nullptr;
    if (ids == nullptr || !ids->is_array()) {
      return InvalidArgumentError("{}: TemplateProcessing: special token '{}' has no ids", file,
                                  name);
    }
    for (const Json& x : *ids) {
      FZ_ASSIGN_OR_RETURN(int64_t v, AsInt(x, "post_processor.special_tokens." + name, file));
      (seen_sequence ? p.suffix_ : p.prefix_).push_back(static_cast<int32_t>(v));
    }
  }
  if (!seen_sequence) {
    return InvalidArgumentError("{}: TemplateProcessing.single has no $A sequence", file);
  }
  return p;
}

void PostProcessor::Apply(std::vector<int32_t>& ids) const {
  if (!prefix_.empty()) ids.insert(ids.begin(), prefix_.begin(), prefix_.end());
  ids.insert(ids.end(), suffix_.begin(), suffix_.end());
}

}  // namespace framezip::engine::model
