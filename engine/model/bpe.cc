#include "engine/model/bpe.h"

#include <queue>

#include "engine/model/byte_level.h"

namespace framezip::engine::model {

namespace {
// One symbol of a word being merged (tokenizers' word.rs Symbol): a doubly linked list in a
// vector; len == 0 marks a symbol merged into its left neighbour.
struct Symbol {
  int32_t id;
  int32_t prev;
  int32_t next;
  size_t len;
};
struct QueuedMerge {
  size_t pos;
  int32_t rank;
  int32_t new_id;
};
// Lowest rank first, then leftmost position (tokenizers' Ord for Merge, reversed for a max-heap).
struct MergeOrder {
  bool operator()(const QueuedMerge& a, const QueuedMerge& b) const {
    if (a.rank != b.rank) return a.rank > b.rank;
    return a.pos > b.pos;
  }
};
}  // namespace

StatusOr<std::unique_ptr<BpeModel>> BpeModel::FromJson(const Json& model, std::string_view file) {
  const JsonPath at{std::string(file), "model."};
  if (!model.is_object()) {
    return InvalidArgumentError("{}: model: expected an object, got {}", file, JsonTypeName(model));
  }
  FZ_ASSIGN_OR_RETURN(std::string type, StringOr(model, "type", "BPE", at));
  if (type != "BPE") {
    return UnimplementedError("{}: model type '{}' is not supported (BPE only)", file, type);
  }
  std::unique_ptr<BpeModel> m(new BpeModel());
  const Json* dropout = FindField(model, "dropout");
  if (dropout != nullptr && !(dropout->is_number() && dropout->get<double>() == 0.0)) {
    return UnimplementedError("{}: model.dropout must be null or 0 (inference needs none)", file);
  }
  FZ_ASSIGN_OR_RETURN(m->continuing_subword_prefix_,
                      StringOr(model, "continuing_subword_prefix", "", at));
  FZ_ASSIGN_OR_RETURN(m->end_of_word_suffix_, StringOr(model, "end_of_word_suffix", "", at));
  FZ_ASSIGN_OR_RETURN(m->fuse_unk_, BoolOr(model, "fuse_unk", false, at));
  FZ_ASSIGN_OR_RETURN(m->byte_fallback_, BoolOr(model, "byte_fallback", false, at));
  FZ_ASSIGN_OR_RETURN(m->ignore_merges_, BoolOr(model, "ignore_merges", false, at));

  const Json* vocab = FindField(model, "vocab");
  if (vocab == nullptr || !vocab->is_object()) {
    return InvalidArgumentError("{}: model.vocab: expected an object", file);
  }
  m->vocab_.reserve(vocab->size());
  for (auto it = vocab->begin(); it != vocab->end(); ++it) {
    FZ_ASSIGN_OR_RETURN(int64_t id, AsInt(*it, "model.vocab." + it.key(), file));
    if (id < 0 || id >= (1 << 30)) {
      return InvalidArgumentError("{}: model.vocab.{}: id {} out of range", file, it.key(), id);
    }
    if (static_cast<size_t>(id) >= m->id_to_token_.size()) {
      m->id_to_token_.resize(id + 1);
      m->has_token_.resize(id + 1, false);
    }
    m->vocab_[it.key()] = static_cast<int32_t>(id);
    m->id_to_token_[id] = it.key();
    m->has_token_[id] = true;
  }
  FZ_ASSIGN_OR_RETURN(std::optional<std::string> unk, OptionalString(model, "unk_token", at));
  if (unk) {
    auto it = m->vocab_.find(*unk);
    if (it == m->vocab_.end()) {
      return InvalidArgumentError("{}: model.unk_token '{}' is not in the vocabulary", file, *unk);
    }
    m->unk_id_ = it->second;
  }

  const Json* merges = FindField(model, "merges");
  if (merges != nullptr && !merges->is_array()) {
    return InvalidArgumentError("{}: model.merges: expected a list", file);
  }
  if (merges != nullptr) {
    const size_t prefix_len = m->continuing_subword_prefix_.size();
    int32_t rank = 0;
    m->merges_.reserve(merges->size());
    for (size_t i = 0; i < merges->size(); ++i) {
      const Json& e = (*merges)[i];
      std::string a, b;
      if (e.is_string()) {
        const std::string s = e.get<std::string>();
        if (s.rfind("#version", 0) == 0) continue;  // header line of merges.txt
        const size_t sp = s.find(' ');
        if (sp == std::string::npos) {  // tokenizers uses splitn(2, ' ')
          return InvalidArgumentError("{}: model.merges[{}]: '{}' is not two tokens", file, i, s);
        }
        a = s.substr(0, sp);
        b = s.substr(sp + 1);
      } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
        a = e[0].get<std::string>();
        b = e[1].get<std::string>();
      } else {
        return InvalidArgumentError("{}: model.merges[{}]: expected \"a b\" or [a, b]", file, i);
      }
      auto ia = m->vocab_.find(a);
      auto ib = m->vocab_.find(b);
      if (ia == m->vocab_.end() || ib == m->vocab_.end()) {
        return InvalidArgumentError("{}: model.merges[{}]: token '{}' is not in the vocabulary",
                                    file, i, ia == m->vocab_.end() ? a : b);
      }
      const std::string merged =
          a + (b.size() >= prefix_len ? b.substr(prefix_len) : std::string());
      auto im = m->vocab_.find(merged);
      if (im == m->vocab_.end()) {
        return InvalidArgumentError(
            "{}: model.merges[{}]: merged token '{}' is not in the vocabulary", file, i, merged);
      }
      // tokenizers collects the merges into a HashMap, so a repeated pair takes the rank of its
      // last occurrence; so does this assignment.
      m->merges_[Key(ia->second, ib->second)] = Merge{rank, im->second};
      ++rank;
    }
  }
  return m;
}

const std::string* BpeModel::IdToToken(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= id_to_token_.size() || !has_token_[id]) return nullptr;
  return &id_to_token_[id];
}

int32_t BpeModel::TokenToId(std::string_view token) const {
  auto it = vocab_.find(std::string(token));
  return it == vocab_.end() ? -1 : it->second;
}

void BpeModel::Encode(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.empty()) return;
  if (piece.size() > kMaxCachedPieceBytes) {
    EncodeUncached(piece, out);
    return;
  }
  const std::string key(piece);
  {
    std::lock_guard<std::mutex> lock(cache_mu_);
    auto it = cache_.find(key);
    if (it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t start = out.size();
  EncodeUncached(piece, out);
  std::lock_guard<std::mutex> lock(cache_mu_);
  if (cache_.size() >= kCacheCapacity) cache_.clear();  // bounded; refills with hot words
  cache_.emplace(key, std::vector<int32_t>(out.begin() + start, out.end()));
}

void BpeModel::EncodeUncached(std::string_view piece, std::vector<int32_t>& out) const {
  if (ignore_merges_) {
    auto it = vocab_.find(std::string(piece));
    if (it != vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  // Characters -> initial symbols (tokenizers' merge_word).
  std::vector<Symbol> symbols;
  symbols.reserve(piece.size());
  bool last_was_unk = false;
  size_t i = 0;
  std::string token;
  while (i < piece.size()) {
    const size_t start = i;
    NextCodePoint(piece, i);
    const size_t end = std::min(i, piece.size());
    const std::string_view ch = piece.substr(start, end - start);
    token.assign(ch);
    if (start > 0 && !continuing_subword_prefix_.empty())
      token.insert(0, continuing_subword_prefix_);
    if (end == piece.size() && !end_of_word_suffix_.empty()) token += end_of_word_suffix_;
    auto it = vocab_.find(token);
    auto push = [&symbols](int32_t id, size_t len) {
      const auto n = static_cast<int32_t>(symbols.size());
      symbols.push_back(Symbol{id, n - 1, n + 1, len});
    };
    if (it != vocab_.end()) {
      push(it->second, ch.size());
      last_was_unk = false;
      continue;
    }
    if (byte_fallback_) {
      std::vector<int32_t> bytes;
      for (char c : ch) {
        auto b = vocab_.find(fmt::format("<0x{:02X}>", static_cast<uint8_t>(c)));
        if (b == vocab_.end()) {
          bytes.clear();
          break;
        }
        bytes.push_back(b->second);
      }
      if (bytes.size() == ch.size()) {
        for (int32_t id : bytes) push(id, 1);
        last_was_unk = false;
        continue;
      }
    }
    if (unk_id_ >= 0) {
      if (fuse_unk_ && last_was_unk) {
        symbols.back().len += ch.size();
      } else {
        push(unk_id_, ch.size());
      }
      last_was_unk = true;
    }
    // else: tokenizers drops a character it cannot represent.
  }
  if (symbols.empty()) return;
  symbols.back().next = -1;

  // merge_all: lowest rank first, leftmost on ties, lazily skipping stale queue entries.
  std::priority_queue<QueuedMerge, std::vector<QueuedMerge>, MergeOrder> queue;
  auto find = [this](int32_t a, int32_t b) -> const Merge* {
    auto it = merges_.find(Key(a, b));
    return it == merges_.end() ? nullptr : &it->second;
  };
  for (size_t k = 0; k + 1 < symbols.size(); ++k) {
    if (const Merge* m = find(symbols[k].id, symbols[k + 1].id)) {
      queue.push({k, m->rank, m->new_id});
    }
  }
  while (!queue.empty()) {
    const QueuedMerge top = queue.top();
    queue.pop();
    Symbol& cur = symbols[top.pos];
    if (cur.len == 0 || cur.next == -1) continue;
    const auto next_pos = static_cast<size_t>(cur.next);
    const Symbol right = symbols[next_pos];
    const Merge* m = find(cur.id, right.id);
    if (m == nullptr || m->new_id != top.new_id) continue;  // stale entry
    cur.id = top.new_id;
    cur.len += right.len;
    cur.next = right.next;
    symbols[next_pos].len = 0;
    if (right.next > -1 && static_cast<size_t>(right.next) < symbols.size()) {
      symbols[right.next].prev = static_cast<int32_t>(top.pos);
    }
    if (cur.prev >= 0) {
      if (const Merge* pm = find(symbols[cur.prev].id, cur.id)) {
        queue.push({static_cast<size_t>(cur.prev), pm->rank, pm->new_id});
      }
    }
    if (cur.next >= 0 && static_cast<size_t>(cur.next) < symbols.size()) {
      if (const Merge* nm = find(cur.id, symbols[cur.next].id)) {
        queue.push({top.pos, nm->rank, nm->new_id});
      }
    }
  }
  for (const Symbol& s : symbols) {
    if (s.len != 0) out.push_back(s.id);
  }
}

}  // namespace framezip::engine::model
