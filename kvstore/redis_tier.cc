#include "kvstore/redis_tier.h"

#include <hiredis/hiredis.h>
#include <signal.h>

#include <charconv>
#include <cstdio>

#include "common/logging.h"
#include "common/crc32c.h"

namespace framezip::kvstore {
namespace {

struct ReplyDeleter {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
using Reply = std::unique_ptr<redisReply, ReplyDeleter>;

timeval ToTimeval(std::chrono::milliseconds ms) {
  return timeval{static_cast<time_t>(ms.count() / 1000),
                 static_cast<suseconds_t>((ms.count() % 1000) * 1000)};
}

std::string_view ReplyText(const redisReply* r) {
  return std::string_view(r->str, static_cast<size_t>(r->len));
}

struct Meta {
  uint64_t size = 0;
  uint32_t crc32c = 0;
  uint64_t chunks = 0;
  Precision precision = Precision::kUnspecified;
};

std::string EncodeMeta(const Meta& m) {
  return fmt::format("FZKV1 {} {} {} {}", m.size, m.crc32c, m.chunks,
                     static_cast<int>(m.precision));
}

std::optional<Meta> DecodeMeta(std::string_view text) {
  unsigned long long size = 0, chunks = 0;
  unsigned crc = 0, precision = 0;
  const std::string s(text);
  if (std::sscanf(s.c_str(), "FZKV1 %llu %u %llu %u", &size, &crc, &chunks, &precision) != 4 ||
      precision >= kNumPrecisions) {
    return std::nullopt;
  }
  return Meta{size, crc, chunks, static_cast<Precision>(precision)};
}

}  // namespace

// One hiredis connection. Commands are pipelined: Append several, then read as many replies.
class RedisTier::Connection {
 public:
  explicit Connection(redisContext* c) : c_(c) {}
  ~Connection() { redisFree(c_); }

  void Append(std::initializer_list<std::string_view> args) {
    std::vector<const char*> argv;
    std::vector<size_t> lens;
    for (std::string_view a : args) {
      argv.push_back(a.data());
      lens.push_back(a.size());
    }
    if (redisAppendCommandArgv(c_, static_cast<int>(argv.size()), argv.data(), lens.data()) !=
        REDIS_OK) {
      broken_ = true;
    }
  }
  // The next reply; nullptr when the connection broke (then it must be discarded).
  Reply Next() {
    if (broken_) return nullptr;
    void* r = nullptr;
    if (redisGetReply(c_, &r) != REDIS_OK || r == nullptr) {
      broken_ = true;
      return nullptr;
    }
    return Reply(static_cast<redisReply*>(r));
  }
  bool broken() const { return broken_ || c_->err != 0; }
  std::string error() const { return c_->err != 0 ? std::string(c_->errstr) : "connection lost"; }

 private:
  redisContext* c_;
  bool broken_ = false;
};

Status ParseRedisAddress(std::string_view address, RedisTierOptions* options) {
  std::string_view host = "127.0.0.1";
  std::string_view port = address;
  if (const size_t colon = address.rfind(':'); colon != std::string_view::npos) {
    if (colon > 0) host = address.substr(0, colon);
    port = address.substr(colon + 1);
  }
  int p = 0;
  auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), p);
  if (ec != std::errc() || end != port.data() + port.size() || p <= 0 || p > 65535) {
    return InvalidArgumentError("redis address '{}' is not host:port", address);
  }
  options->host = std::string(host);
  options->port = p;
  return absl::OkStatus();
}

RedisTier::RedisTier(RedisTierOptions options, StoreMetrics* metrics)
    : options_(std::move(options)), metrics_(metrics), backoff_(options_.backoff_initial) {
  // hiredis writes to sockets with write(2): a peer that went away must give EPIPE, not kill us.
  static const bool kIgnoreSigpipe = [] { return ::signal(SIGPIPE, SIG_IGN) != SIG_ERR; }();
  (void)kIgnoreSigpipe;
  metrics_->SetAvailable(Tier::kRedis, true);
}

RedisTier::~RedisTier() = default;

std::string RedisTier::MetaKey(const BlockKey& key) const {
  return options_.key_prefix + BlockKeyHex(key);
}

Status RedisTier::Unavailable(const std::string& why) {
  return UnavailableError("redis tier unavailable ({}:{}): {}", options_.host, options_.port, why);
}

StatusOr<std::unique_ptr<RedisTier::Connection>> RedisTier::Acquire() {
  {
    std::lock_guard lock(mu_);
    if (!idle_.empty()) {
      auto c = std::move(idle_.back());
      idle_.pop_back();
      return c;
    }
    if (!available_ && std::chrono::steady_clock::now() < next_attempt_) {
      return Unavailable(last_error_);
    }
  }
  redisContext* c = redisConnectWithTimeout(options_.host.c_str(), options_.port,
                                            ToTimeval(options_.connect_timeout));
  std::string error;
  if (c == nullptr) {
    error = "cannot allocate a connection";
  } else if (c->err != 0) {
    error = c->errstr;
    redisFree(c);
    c = nullptr;
  } else if (redisSetTimeout(c, ToTimeval(options_.command_timeout)) != REDIS_OK) {
    error = "cannot set the command timeout";
    redisFree(c);
    c = nullptr;
  }
  std::lock_guard lock(mu_);
  if (c == nullptr) {
    if (available_) FZ_LOG_WARN("redis tier {}:{} down: {}", options_.host, options_.port, error);
    available_ = false;
    last_error_ = error;
    next_attempt_ = std::chrono::steady_clock::now() + backoff_;
    backoff_ = std::min(backoff_ * 2, options_.backoff_max);
    metrics_->SetAvailable(Tier::kRedis, false);
    return Unavailable(error);
  }
  if (!available_) FZ_LOG_INFO("redis tier {}:{} is back", options_.host, options_.port);
  available_ = true;
  backoff_ = options_.backoff_initial;
  metrics_->SetAvailable(Tier::kRedis, true);
  return std::make_unique<Connection>(c);
}

void RedisTier::Release(std::unique_ptr<Connection> connection, bool healthy) {
  std::lock_guard lock(mu_);
  if (healthy && !connection->broken()) {
    if (static_cast<int>(idle_.size()) < options_.connections) {
      idle_.push_back(std::move(connection));
    }
    return;
  }
  // A broken connection means Redis went away: the idle ones are as dead, drop them all and
  // back off before the next attempt.
  const std::string error = connection->error();
  if (available_) FZ_LOG_WARN("redis tier {}:{} down: {}", options_.host, options_.port, error);
  idle_.clear();
  available_ = false;
  last_error_ = error;
  next_attempt_ = std::chrono::steady_clock::now() + backoff_;
  backoff_ = std::min(backoff_ * 2, options_.backoff_max);
  metrics_->SetAvailable(Tier::kRedis, false);
}

Status RedisTier::Put(const BlockKey& key, std::string_view bytes, uint32_t crc32c,
                      Precision precision, uint32_t ttl_seconds) {
  auto acquired = Acquire();
  if (!acquired.ok()) {
    std::lock_guard lock(mu_);
    ++write_failures_;
    metrics_->WriteFailure(Tier::kRedis);
    return acquired.status();
  }
  std::unique_ptr<Connection> c = std::move(acquired).value();
  const std::string ttl = std::to_string(ttl_seconds != 0 ? ttl_seconds
                                                          : options_.default_ttl_seconds);
  const std::string meta_key = MetaKey(key);
  const uint64_t chunk = std::max<uint64_t>(options_.chunk_bytes, 1);
  const uint64_t chunks = (bytes.size() + chunk - 1) / chunk;
  const std::string meta = EncodeMeta({bytes.size(), crc32c, chunks, precision});
  c->Append({"MULTI"});
  for (uint64_t i = 0; i < chunks; ++i) {
    const std::string chunk_key = fmt::format("{}:{}", meta_key, i);
    c->Append({"SET", chunk_key, bytes.substr(i * chunk, chunk), "EX", ttl});
  }
  c->Append({"SET", meta_key, meta, "EX", ttl});
  c->Append({"EXEC"});
  std::string error;
  for (uint64_t i = 0; i < chunks + 3; ++i) {  // MULTI, chunks, meta, EXEC
    Reply r = c->Next();
    if (!r) break;
    if (r->type == REDIS_REPLY_ERROR && error.empty()) error = std::string(ReplyText(r.get()));
    if (i == chunks + 2 && r->type != REDIS_REPLY_ARRAY && error.empty()) {
      error = "transaction aborted";
    }
  }
  const bool broken = c->broken();
  const std::string connection_error = broken ? c->error() : "";
  Release(std::move(c), !broken);
  std::lock_guard lock(mu_);
  if (broken || !error.empty()) {
    ++write_failures_;
    metrics_->WriteFailure(Tier::kRedis);
    if (broken) return Unavailable(connection_error);
    if (error.rfind("OOM", 0) == 0) return ResourceExhaustedError("redis tier: {}", error);
    return InternalError("redis tier: {}", error);
  }
  bytes_ += bytes.size();
  blocks_ += 1;
  metrics_->AddResident(Tier::kRedis, precision, static_cast<int64_t>(bytes.size()), 1);
  return absl::OkStatus();
}

StatusOr<Block> RedisTier::Get(const BlockKey& key) {
  FZ_ASSIGN_OR_RETURN(std::unique_ptr<Connection> c, Acquire());
  const std::string meta_key = MetaKey(key);
  c->Append({"GET", meta_key});
  Reply r = c->Next();
  std::optional<Meta> meta;
  bool corrupt = false;
  auto bytes = std::make_shared<std::string>();
  if (r && r->type == REDIS_REPLY_STRING) {
    meta = DecodeMeta(ReplyText(r.get()));
    corrupt = !meta.has_value();
  }
  if (meta) {
    const std::vector<std::string> chunk_keys = [&] {
      std::vector<std::string> keys;
      for (uint64_t i = 0; i < meta->chunks; ++i) keys.push_back(fmt::format("{}:{}", meta_key, i));
      return keys;
    }();
    for (const auto& k : chunk_keys) c->Append({"GET", k});
    bytes->reserve(meta->size);
    bool complete = true;
    for (uint64_t i = 0; i < meta->chunks; ++i) {
      Reply part = c->Next();
      if (!part) break;
      if (part->type != REDIS_REPLY_STRING) {
        complete = false;  // expired between the two reads: a miss, not corruption
        continue;
      }
      if (complete) bytes->append(ReplyText(part.get()));
    }
    if (!complete) meta.reset();
    if (meta && (bytes->size() != meta->size || Crc32c(*bytes) != meta->crc32c)) {
      corrupt = true;
      meta.reset();
    }
  }
  if (corrupt && !c->broken()) {
    c->Append({"DEL", meta_key});
    (void)c->Next();
  }
  const bool broken = c->broken();
  const std::string connection_error = broken ? c->error() : "";
  Release(std::move(c), !broken);
  if (broken) return Unavailable(connection_error);
  std::lock_guard lock(mu_);
  if (!meta) {
    ++misses_;
    metrics_->Miss(Tier::kRedis);
    if (corrupt) {
      ++corrupt_;
      metrics_->Corrupt(Tier::kRedis);
      FZ_LOG_ERROR("redis tier: block {} failed its size/CRC check; deleted", BlockKeyHex(key));
      return NotFoundError("redis tier: block {} failed its CRC check", BlockKeyHex(key));
    }
    return NotFoundError("redis tier: no block {}", BlockKeyHex(key));
  }
  ++hits_;
  metrics_->Hit(Tier::kRedis);
  return Block{std::move(bytes), meta->crc32c, meta->precision, Tier::kRedis};
}

StatusOr<std::vector<std::optional<uint64_t>>> RedisTier::SizesOf(
    std::span<const BlockKey> keys) {
  std::vector<std::optional<uint64_t>> sizes(keys.size());
  if (keys.empty()) return sizes;
  FZ_ASSIGN_OR_RETURN(std::unique_ptr<Connection> c, Acquire());
  for (const BlockKey& key : keys) c->Append({"GET", MetaKey(key)});
  for (size_t i = 0; i < keys.size(); ++i) {
    Reply r = c->Next();
    if (!r) break;
    if (r->type == REDIS_REPLY_STRING) {
      if (auto meta = DecodeMeta(ReplyText(r.get()))) sizes[i] = meta->size;
    }
  }
  const bool broken = c->broken();
  const std::string connection_error = broken ? c->error() : "";
  Release(std::move(c), !broken);
  if (broken) return Unavailable(connection_error);
  return sizes;
}

StatusOr<bool> RedisTier::Erase(const BlockKey& key) {
  FZ_ASSIGN_OR_RETURN(std::unique_ptr<Connection> c, Acquire());
  const std::string meta_key = MetaKey(key);
  c->Append({"GET", meta_key});
  Reply r = c->Next();
  std::optional<Meta> meta;
  if (r && r->type == REDIS_REPLY_STRING) meta = DecodeMeta(ReplyText(r.get()));
  bool existed = false;
  if (r && r->type == REDIS_REPLY_STRING) {
    c->Append({"DEL", meta_key});
    const uint64_t chunks = meta ? meta->chunks : 0;
    for (uint64_t i = 0; i < chunks; ++i) c->Append({"DEL", fmt::format("{}:{}", meta_key, i)});
    for (uint64_t i = 0; i < chunks + 1; ++i) {
      Reply d = c->Next();
      if (i == 0 && d && d->type == REDIS_REPLY_INTEGER) existed = d->integer > 0;
    }
  }
  const bool broken = c->broken();
  const std::string connection_error = broken ? c->error() : "";
  Release(std::move(c), !broken);
  if (broken) return Unavailable(connection_error);
  if (existed && meta) {
    std::lock_guard lock(mu_);
    bytes_ -= std::min(bytes_, meta->size);
    blocks_ -= std::min<uint64_t>(blocks_, 1);
    metrics_->AddResident(Tier::kRedis, meta->precision, -static_cast<int64_t>(meta->size), -1);
  }
  return existed;
}

StatusOr<std::optional<int64_t>> RedisTier::TtlOf(const BlockKey& key) {
  FZ_ASSIGN_OR_RETURN(std::unique_ptr<Connection> c, Acquire());
  c->Append({"TTL", MetaKey(key)});
  Reply r = c->Next();
  std::optional<int64_t> ttl;
  if (r && r->type == REDIS_REPLY_INTEGER && r->integer >= 0) ttl = r->integer;
  const bool broken = c->broken();
  const std::string connection_error = broken ? c->error() : "";
  Release(std::move(c), !broken);
  if (broken) return Unavailable(connection_error);
  return ttl;
}

bool RedisTier::available() const {
  std::lock_guard lock(mu_);
  return available_;
}

TierStats RedisTier::Stats() const {
  std::lock_guard lock(mu_);
  TierStats s;
  s.tier = Tier::kRedis;
  s.available = available_;
  s.bytes = bytes_;
  s.blocks = blocks_;
  s.hits = hits_;
  s.misses = misses_;
  s.corrupt_blocks = corrupt_;
  s.write_failures = write_failures_;
  return s;
}

}  // namespace framezip::kvstore
