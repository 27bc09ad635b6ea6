#include "kvstore/disk_tier.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <set>
#include <vector>

#include "common/logging.h"
#include "common/crc32c.h"

namespace framezip::kvstore {

using disk::RecordBytes;
using disk::RecordHeader;
using disk::RecordType;

struct DiskTier::Segment {
  uint32_t id = 0;
  std::string path;
  int fd = -1;
  uint64_t size = 0;        // bytes in the file that belong to us (appends go here)
  uint64_t live_bytes = 0;  // record bytes of indexed (live) blocks
  std::unordered_set<BlockKey, BlockKeyHash> live_keys;
  ~Segment() {
    if (fd >= 0) ::close(fd);
  }
};

namespace {

std::string SegmentName(uint32_t id) { return fmt::format("seg-{:08d}.fzkv", id); }

std::optional<uint32_t> ParseSegmentName(const std::string& name) {
  unsigned id = 0;
  char tail[8] = {};
  if (std::sscanf(name.c_str(), "seg-%8u.%5s", &id, tail) != 2) return std::nullopt;
  if (std::string(tail) != "fzkv" || name != SegmentName(id)) return std::nullopt;
  return id;
}

// Reads exactly `size` bytes at `offset`; false on EOF or error.
bool ReadFull(int fd, void* buf, size_t size, uint64_t offset) {
  auto* p = static_cast<char*>(buf);
  while (size > 0) {
    const ssize_t n = ::pread(fd, p, size, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    size -= static_cast<size_t>(n);
    offset += static_cast<uint64_t>(n);
  }
  return true;
}

Status ErrnoStatus(int err, const std::string& what) {
  if (err == ENOSPC || err == EDQUOT) {
    return ResourceExhaustedError("disk tier: {}: {}", what, std::strerror(err));
  }
  return InternalError("disk tier: {}: {}", what, std::strerror(err));
}

}  // namespace

StatusOr<FsyncPolicy> ParseFsyncPolicy(std::string_view name) {
  if (name == "block") return FsyncPolicy::kPerBlock;
  if (name == "batch") return FsyncPolicy::kPerBatch;
  if (name == "off") return FsyncPolicy::kOff;
  return InvalidArgumentError("fsync policy '{}' is not one of block, batch, off", name);
}

std::string_view FsyncPolicyName(FsyncPolicy policy) {
  switch (policy) {
    case FsyncPolicy::kPerBlock: return "block";
    case FsyncPolicy::kPerBatch: return "batch";
    case FsyncPolicy::kOff: return "off";
  }
  return "unknown";
}

StatusOr<std::unique_ptr<DiskTier>> DiskTier::Open(DiskTierOptions options, const PinTable* pins,
                                                   StoreMetrics* metrics) {
  if (options.dir.empty()) return InvalidArgumentError("disk tier: no directory given");
  if (options.segment_bytes < 1024) {
    return InvalidArgumentError("disk tier: segment size {} is below 1024 bytes",
                                options.segment_bytes);
  }
  std::error_code ec;
  std::filesystem::create_directories(options.dir, ec);
  if (ec) return InternalError("disk tier: cannot create {}: {}", options.dir.string(), ec.message());
  const std::string lock_path = (options.dir / "LOCK").string();
  const int lock_fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock_fd < 0) return ErrnoStatus(errno, "open " + lock_path);
  if (::flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
    ::close(lock_fd);
    return FailedPreconditionError("disk tier: {} is in use by another process",
                                   options.dir.string());
  }
  std::unique_ptr<DiskTier> tier(new DiskTier(std::move(options), pins, metrics, lock_fd));
  FZ_RETURN_IF_ERROR(tier->Load());
  if (tier->options_.fsync == FsyncPolicy::kPerBatch) {
    tier->batch_sync_thread_ = std::thread([t = tier.get()] { t->BatchSyncLoop(); });
  }
  return tier;
}

DiskTier::DiskTier(DiskTierOptions options, const PinTable* pins, StoreMetrics* metrics,
                   int lock_fd)
    : options_(std::move(options)), pins_(pins), metrics_(metrics), lock_fd_(lock_fd) {
  metrics_->SetCapacity(Tier::kDisk, options_.capacity_bytes);
  metrics_->SetAvailable(Tier::kDisk, true);
}

DiskTier::~DiskTier() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  batch_cv_.notify_all();
  if (batch_sync_thread_.joinable()) batch_sync_thread_.join();
  std::lock_guard lock(mu_);
  if (active_ && options_.fsync != FsyncPolicy::kOff) (void)SyncFd(active_->fd);
  for (auto it = index_.begin(); it != index_.end();) {
    auto next = std::next(it);
    RemoveEntryLocked(it);
    it = next;
  }
  segments_.clear();
  active_.reset();
  ::close(lock_fd_);
}

Status DiskTier::SyncFd(int fd) const {
  if (::fdatasync(fd) != 0) return ErrnoStatus(errno, "fdatasync");
  return absl::OkStatus();
}

void DiskTier::SyncDir() const {
  if (options_.fsync == FsyncPolicy::kOff) return;
  const int fd = ::open(options_.dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  if (::fsync(fd) != 0) FZ_LOG_WARN("disk tier: fsync of {} failed: {}", options_.dir.string(),
                                    std::strerror(errno));
  ::close(fd);
}

Status DiskTier::Load() {
  std::vector<uint32_t> ids;
  for (const auto& entry : std::filesystem::directory_iterator(options_.dir)) {
    if (auto id = ParseSegmentName(entry.path().filename().string())) ids.push_back(*id);
  }
  std::sort(ids.begin(), ids.end());
  // The newest non-empty segment is the one a crash may have torn (an empty file after it is a
  // segment created just before the crash).
  uint32_t newest_id = 0;
  for (uint32_t id : ids) {
    std::error_code ec;
    if (std::filesystem::file_size(options_.dir / SegmentName(id), ec) > 0 && !ec) newest_id = id;
  }
  std::lock_guard lock(mu_);
  for (size_t i = 0; i < ids.size(); ++i) {
    auto segment = std::make_shared<Segment>();
    segment->id = ids[i];
    segment->path = (options_.dir / SegmentName(ids[i])).string();
    segment->fd = ::open(segment->path.c_str(), O_RDWR | O_CLOEXEC);
    if (segment->fd < 0) return ErrnoStatus(errno, "open " + segment->path);
    struct stat st {};
    if (::fstat(segment->fd, &st) != 0) return ErrnoStatus(errno, "stat " + segment->path);
    segment->size = static_cast<uint64_t>(st.st_size);
    if (segment->size == 0) {  // created just before a crash or an empty active segment
      ::unlink(segment->path.c_str());
      continue;
    }
    segments_[segment->id] = segment;
    file_bytes_ += segment->size;
    next_segment_id_ = segment->id + 1;
    // Check every payload of the segment a crash may have torn mid-record.
    const bool newest = segment->id == newest_id;
    FZ_RETURN_IF_ERROR(ScanSegment(segment, newest || options_.verify_all_on_open));
  }
  FZ_RETURN_IF_ERROR(NewActiveSegmentLocked());
  FZ_LOG_INFO("disk tier {}: {} blocks, {} live bytes in {} segments ({} bytes on disk), fsync={}",
              options_.dir.string(), index_.size(), live_bytes_, segments_.size() - 1,
              file_bytes_, FsyncPolicyName(options_.fsync));
  return absl::OkStatus();
}

Status DiskTier::ScanSegment(const std::shared_ptr<Segment>& segment, bool verify_payloads) {
  uint64_t offset = 0;
  std::string payload;
  while (offset < segment->size) {
    uint8_t raw[disk::kHeaderBytes];
    std::optional<RecordHeader> header;
    if (segment->size - offset >= disk::kHeaderBytes &&
        ReadFull(segment->fd, raw, sizeof(raw), offset)) {
      header = disk::DecodeHeader(raw);
    }
    const bool fits = header && header->payload_bytes <= segment->size &&
                      offset + RecordBytes(header->payload_bytes) <= segment->size;
    if (!fits) {
      // A torn tail (crash mid-append) or a garbled header: nothing after it can be framed. The
      // bytes stay as dead space until the segment is compacted.
      FZ_LOG_WARN("disk tier: {}: no valid record at offset {}; ignoring its last {} bytes",
                  segment->path, offset, segment->size - offset);
      ++corrupt_;
      metrics_->Corrupt(Tier::kDisk);
      break;
    }
    const uint64_t record_bytes = RecordBytes(header->payload_bytes);
    uint8_t trailer[disk::kTrailerBytes];
    const bool need_payload = verify_payloads || header->type == RecordType::kTombstone;
    bool ok = ReadFull(segment->fd, trailer, sizeof(trailer),
                       offset + disk::kHeaderBytes + header->payload_bytes);
    if (ok && need_payload) {
      payload.resize(header->payload_bytes);
      ok = ReadFull(segment->fd, payload.data(), payload.size(), offset + disk::kHeaderBytes) &&
           Crc32c(payload) == disk::DecodeU32(trailer);
    }
    if (!ok) {
      FZ_LOG_WARN("disk tier: {}: record at offset {} ({} bytes) fails its CRC; skipped",
                  segment->path, offset, record_bytes);
      ++corrupt_;
      metrics_->Corrupt(Tier::kDisk);
      offset += record_bytes;
      continue;
    }
    if (header->type == RecordType::kBlock) {
      if (auto it = index_.find(header->key); it != index_.end()) RemoveEntryLocked(it);
      AddEntryLocked(header->key, Entry{segment, offset, header->payload_bytes,
                                        disk::DecodeU32(trailer), header->precision});
    } else if (auto target = disk::DecodeTombstone(payload)) {
      auto it = index_.find(header->key);
      if (it != index_.end() && it->second.segment->id == target->segment_id &&
          it->second.offset == target->offset) {
        RemoveEntryLocked(it);
      }
    }
    offset += record_bytes;
  }
  return absl::OkStatus();
}

Status DiskTier::NewActiveSegmentLocked() {
  if (active_ && options_.fsync != FsyncPolicy::kOff && active_->size > 0) {
    FZ_RETURN_IF_ERROR(SyncFd(active_->fd));  // sealing: everything in it is durable now
  }
  auto segment = std::make_shared<Segment>();
  segment->id = next_segment_id_;
  segment->path = (options_.dir / SegmentName(segment->id)).string();
  segment->fd = ::open(segment->path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (segment->fd < 0) return ErrnoStatus(errno, "create " + segment->path);
  ++next_segment_id_;
  SyncDir();
  segments_[segment->id] = segment;
  active_ = segment;
  unsynced_bytes_ = 0;
  return absl::OkStatus();
}

void DiskTier::AddEntryLocked(const BlockKey& key, Entry entry) {
  const uint64_t record_bytes = RecordBytes(entry.payload_bytes);
  entry.segment->live_bytes += record_bytes;
  entry.segment->live_keys.insert(key);
  const auto p = static_cast<int>(entry.precision);
  bytes_by_precision_[p] += entry.payload_bytes;
  blocks_by_precision_[p] += 1;
  live_bytes_ += entry.payload_bytes;
  metrics_->AddResident(Tier::kDisk, entry.precision, static_cast<int64_t>(entry.payload_bytes),
                        1);
  index_[key] = std::move(entry);
}

void DiskTier::RemoveEntryLocked(Index::iterator it) {
  Entry& entry = it->second;
  entry.segment->live_bytes -= RecordBytes(entry.payload_bytes);
  entry.segment->live_keys.erase(it->first);
  const auto p = static_cast<int>(entry.precision);
  bytes_by_precision_[p] -= entry.payload_bytes;
  blocks_by_precision_[p] -= 1;
  live_bytes_ -= entry.payload_bytes;
  metrics_->AddResident(Tier::kDisk, entry.precision, -static_cast<int64_t>(entry.payload_bytes),
                        -1);
  index_.erase(it);
}

uint64_t DiskTier::PinnedBytesLocked(const Segment& segment) const {
  if (pins_ == nullptr) return 0;
  uint64_t pinned = 0;
  const auto now = PinTable::Clock::now();
  for (const BlockKey& key : segment.live_keys) {
    if (pins_->IsPinned(key, now)) pinned += RecordBytes(index_.at(key).payload_bytes);
  }
  return pinned;
}

StatusOr<uint64_t> DiskTier::AppendLocked(const RecordHeader& header, std::string_view payload,
                                          uint32_t payload_crc) {
  const uint64_t record_bytes = RecordBytes(payload.size());
  if (active_->size > 0 && active_->size + record_bytes > options_.segment_bytes) {
    FZ_RETURN_IF_ERROR(NewActiveSegmentLocked());
  }
  uint8_t head[disk::kHeaderBytes];
  disk::EncodeHeader(header, head);
  uint8_t trailer[disk::kTrailerBytes];
  disk::EncodeU32(payload_crc, trailer);
  const uint64_t start = active_->size;

  // The write: one pwritev of header, payload and trailer, resumed after short writes.
  iovec iov[3] = {{head, sizeof(head)},
                  {const_cast<char*>(payload.data()), payload.size()},
                  {trailer, sizeof(trailer)}};
  uint64_t done = 0;
  int err = 0;
  uint64_t limit = record_bytes;
  if (options_.inject_enospc_after_bytes != 0 &&
      written_bytes_ + record_bytes > options_.inject_enospc_after_bytes) {
    limit = record_bytes / 2;  // a partial write, then "no space left"
    err = ENOSPC;
  }
  while (done < limit) {
    iovec parts[3];
    int count = 0;
    uint64_t skip = done;
    uint64_t budget = limit - done;
    for (const iovec& v : iov) {
      if (skip >= v.iov_len) {
        skip -= v.iov_len;
        continue;
      }
      const uint64_t len = std::min<uint64_t>(v.iov_len - skip, budget);
      if (len == 0) break;
      parts[count++] = {static_cast<char*>(v.iov_base) + skip, len};
      budget -= len;
      skip = 0;
    }
    const ssize_t n = ::pwritev(active_->fd, parts, count, static_cast<off_t>(start + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      err = n < 0 ? errno : EIO;
      break;
    }
    done += static_cast<uint64_t>(n);
  }
  if (err == 0 && done < record_bytes) err = EIO;
  if (err != 0) {
    // Cut the partial record off so the segment stays a sequence of whole records. If even that
    // fails, the start-up scan stops at the garbage and never indexes it.
    if (::ftruncate(active_->fd, static_cast<off_t>(start)) != 0) {
      FZ_LOG_ERROR("disk tier: cannot truncate {} after a failed write: {}", active_->path,
                   std::strerror(errno));
      FZ_RETURN_IF_ERROR(NewActiveSegmentLocked());
    }
    ++write_failures_;
    metrics_->WriteFailure(Tier::kDisk);
    return ErrnoStatus(err, fmt::format("writing {} bytes to {}", record_bytes, active_->path));
  }
  active_->size += record_bytes;
  file_bytes_ += record_bytes;
  written_bytes_ += record_bytes;
  unsynced_bytes_ += record_bytes;
  if (options_.fsync == FsyncPolicy::kPerBlock ||
      (options_.fsync == FsyncPolicy::kPerBatch && unsynced_bytes_ >= options_.fsync_batch_bytes)) {
    FZ_RETURN_IF_ERROR(SyncFd(active_->fd));
    unsynced_bytes_ = 0;
  }
  return start;
}

Status DiskTier::MakeRoomLocked(uint64_t record_bytes) {
  if (record_bytes > options_.capacity_bytes) {
    return ResourceExhaustedError("disk tier: a {}-byte record exceeds its capacity of {} bytes",
                                  record_bytes, options_.capacity_bytes);
  }
  std::set<uint32_t> tried;  // each segment at most once per call, so this always ends
  while (file_bytes_ + record_bytes > options_.capacity_bytes) {
    std::shared_ptr<Segment> victim;
    // First reclaim dead records (compaction loses nothing): the segment with most dead bytes,
    // if enough of it is dead to be worth rewriting the rest.
    uint64_t most_dead = 0;
    for (const auto& [id, segment] : segments_) {
      if (segment == active_ || tried.count(id)) continue;
      const uint64_t dead = segment->size - segment->live_bytes;
      if (dead > most_dead && static_cast<double>(dead) >=
                                  options_.compact_dead_ratio * static_cast<double>(segment->size)) {
        most_dead = dead;
        victim = segment;
      }
    }
    bool evict = false;
    if (!victim) {  // then evict the oldest sealed segment that holds unpinned data
      for (const auto& [id, segment] : segments_) {
        if (segment == active_ || tried.count(id)) continue;
        if (segment->size > PinnedBytesLocked(*segment)) {
          victim = segment;
          evict = true;
          break;
        }
      }
    }
    if (!victim) {
      if (active_->size > 0 && active_->size > PinnedBytesLocked(*active_)) {
        FZ_RETURN_IF_ERROR(NewActiveSegmentLocked());  // seal it so it can be evicted
        continue;
      }
      ++write_failures_;
      metrics_->WriteFailure(Tier::kDisk);
      return ResourceExhaustedError(
          "disk tier: no room for {} bytes: {} of {} bytes in use and the rest is pinned",
          record_bytes, file_bytes_, options_.capacity_bytes);
    }
    tried.insert(victim->id);
    FZ_RETURN_IF_ERROR(DropSegmentLocked(victim, evict));
  }
  return absl::OkStatus();
}

Status DiskTier::DropSegmentLocked(const std::shared_ptr<Segment>& segment, bool evict_unpinned) {
  const auto now = PinTable::Clock::now();
  uint64_t offset = 0;
  std::string payload;
  int carried = 0, evicted = 0;
  while (offset + disk::kHeaderBytes <= segment->size) {
    uint8_t raw[disk::kHeaderBytes];
    if (!ReadFull(segment->fd, raw, sizeof(raw), offset)) break;
    auto header = disk::DecodeHeader(raw);
    if (!header || offset + RecordBytes(header->payload_bytes) > segment->size) break;
    const uint64_t record_bytes = RecordBytes(header->payload_bytes);
    if (header->type == RecordType::kBlock) {
      auto it = index_.find(header->key);
      const bool live = it != index_.end() && it->second.segment == segment &&
                        it->second.offset == offset;
      if (live) {
        const bool keep = !evict_unpinned || (pins_ != nullptr && pins_->IsPinned(it->first, now));
        payload.resize(header->payload_bytes);
        if (keep && ReadFull(segment->fd, payload.data(), payload.size(),
                             offset + disk::kHeaderBytes) &&
            Crc32c(payload) == it->second.crc32c) {
          Entry entry = it->second;
          FZ_ASSIGN_OR_RETURN(const uint64_t new_offset,
                              AppendLocked(*header, payload, entry.crc32c));
          RemoveEntryLocked(index_.find(header->key));
          entry.segment = active_;
          entry.offset = new_offset;
          AddEntryLocked(header->key, std::move(entry));
          ++carried;
        } else {
          if (keep) {  // failed its CRC while being copied: drop it, never serve it
            ++corrupt_;
            metrics_->Corrupt(Tier::kDisk);
          } else {
            ++evictions_;
            ++evicted;
            metrics_->Eviction(Tier::kDisk);
          }
          RemoveEntryLocked(it);
        }
      }
    } else {
      // A tombstone still matters while the segment holding the record it deletes exists.
      payload.resize(header->payload_bytes);
      if (ReadFull(segment->fd, payload.data(), payload.size(), offset + disk::kHeaderBytes)) {
        auto target = disk::DecodeTombstone(payload);
        if (target && target->segment_id != segment->id && segments_.count(target->segment_id)) {
          FZ_RETURN_IF_ERROR(AppendLocked(*header, payload, Crc32c(payload)).status());
        }
      }
    }
    offset += record_bytes;
  }
  // Entries the scan could not reach (should not happen: the index came from the same scan).
  for (auto key : std::vector<BlockKey>(segment->live_keys.begin(), segment->live_keys.end())) {
    RemoveEntryLocked(index_.find(key));
  }
  // What was copied must be durable before the old copy goes.
  if (carried > 0 && options_.fsync != FsyncPolicy::kOff) FZ_RETURN_IF_ERROR(SyncFd(active_->fd));
  if (::unlink(segment->path.c_str()) != 0) {
    FZ_LOG_WARN("disk tier: cannot remove {}: {}", segment->path, std::strerror(errno));
  }
  SyncDir();
  file_bytes_ -= segment->size;
  segments_.erase(segment->id);
  FZ_LOG_DEBUG("disk tier: dropped {} ({} blocks copied forward, {} evicted)", segment->path,
               carried, evicted);
  return absl::OkStatus();
}

StatusOr<bool> DiskTier::Put(const BlockKey& key, std::string_view bytes, uint32_t crc32c,
                             Precision precision) {
  std::lock_guard lock(mu_);
  if (index_.count(key)) return options_.fsync == FsyncPolicy::kPerBlock;
  const uint64_t record_bytes = RecordBytes(bytes.size());
  FZ_RETURN_IF_ERROR(MakeRoomLocked(record_bytes));
  RecordHeader header{RecordType::kBlock, precision, key, bytes.size()};
  FZ_ASSIGN_OR_RETURN(const uint64_t offset, AppendLocked(header, bytes, crc32c));
  AddEntryLocked(key, Entry{active_, offset, bytes.size(), crc32c, precision});
  if (options_.fsync == FsyncPolicy::kPerBatch) batch_cv_.notify_one();
  return options_.fsync == FsyncPolicy::kPerBlock;
}

StatusOr<Block> DiskTier::Get(const BlockKey& key) {
  Entry entry;
  {
    std::lock_guard lock(mu_);
    auto it = index_.find(key);
    if (it == index_.end()) {
      ++misses_;
      metrics_->Miss(Tier::kDisk);
      return NotFoundError("disk tier: no block {}", BlockKeyHex(key));
    }
    entry = it->second;  // holds the segment (and its fd) open while we read
  }
  // Check everything: the header must still frame this key and size, the payload its CRC.
  uint8_t raw[disk::kHeaderBytes];
  uint8_t trailer[disk::kTrailerBytes];
  auto bytes = std::make_shared<std::string>(entry.payload_bytes, '\0');
  bool ok = ReadFull(entry.segment->fd, raw, sizeof(raw), entry.offset);
  std::optional<RecordHeader> header;
  if (ok) header = disk::DecodeHeader(raw);
  ok = header && header->type == RecordType::kBlock && header->key == key &&
       header->payload_bytes == entry.payload_bytes &&
       ReadFull(entry.segment->fd, bytes->data(), bytes->size(),
                entry.offset + disk::kHeaderBytes) &&
       ReadFull(entry.segment->fd, trailer, sizeof(trailer),
                entry.offset + disk::kHeaderBytes + entry.payload_bytes) &&
       disk::DecodeU32(trailer) == entry.crc32c && Crc32c(*bytes) == entry.crc32c;
  std::lock_guard lock(mu_);
  if (!ok) {
    FZ_LOG_ERROR("disk tier: block {} in {} at offset {} is corrupt; dropped", BlockKeyHex(key),
                 entry.segment->path, entry.offset);
    ++corrupt_;
    ++misses_;
    metrics_->Corrupt(Tier::kDisk);
    metrics_->Miss(Tier::kDisk);
    auto it = index_.find(key);
    if (it != index_.end() && it->second.segment == entry.segment &&
        it->second.offset == entry.offset) {
      RemoveEntryLocked(it);
    }
    return NotFoundError("disk tier: block {} failed its CRC check", BlockKeyHex(key));
  }
  ++hits_;
  metrics_->Hit(Tier::kDisk);
  return Block{std::move(bytes), entry.crc32c, entry.precision, Tier::kDisk};
}

std::optional<uint64_t> DiskTier::SizeOf(const BlockKey& key) const {
  std::lock_guard lock(mu_);
  auto it = index_.find(key);
  if (it == index_.end()) return std::nullopt;
  return it->second.payload_bytes;
}

bool DiskTier::Erase(const BlockKey& key) {
  std::lock_guard lock(mu_);
  auto it = index_.find(key);
  if (it == index_.end()) return false;
  const std::string payload = disk::EncodeTombstone({it->second.segment->id, it->second.offset});
  RecordHeader header{RecordType::kTombstone, Precision::kUnspecified, key, payload.size()};
  RemoveEntryLocked(it);
  // Without the tombstone the block would come back after a restart: harmless (blocks are
  // immutable and content-addressed), so a failed write is logged, not returned.
  if (auto s = AppendLocked(header, payload, Crc32c(payload)); !s.ok()) {
    FZ_LOG_WARN("disk tier: tombstone for {} not written: {}", BlockKeyHex(key),
                MessageOf(s.status()));
  }
  return true;
}

Status DiskTier::Sync() {
  std::shared_ptr<Segment> active;
  {
    std::lock_guard lock(mu_);
    active = active_;
    unsynced_bytes_ = 0;
  }
  if (options_.fsync == FsyncPolicy::kOff) return absl::OkStatus();
  return SyncFd(active->fd);
}

StatusOr<int> DiskTier::Compact() {
  std::lock_guard lock(mu_);
  std::vector<std::shared_ptr<Segment>> victims;
  for (const auto& [id, segment] : segments_) {
    if (segment == active_ || segment->size == 0) continue;
    const double dead = static_cast<double>(segment->size - segment->live_bytes) /
                        static_cast<double>(segment->size);
    if (dead >= options_.compact_dead_ratio) victims.push_back(segment);
  }
  for (const auto& segment : victims) FZ_RETURN_IF_ERROR(DropSegmentLocked(segment, false));
  return static_cast<int>(victims.size());
}

void DiskTier::BatchSyncLoop() {
  std::unique_lock lock(mu_);
  while (!stopping_) {
    batch_cv_.wait_for(lock, options_.fsync_batch_interval);
    if (stopping_ || unsynced_bytes_ == 0) continue;
    // Give writers a full interval to batch up, then sync without holding the lock.
    batch_cv_.wait_for(lock, options_.fsync_batch_interval, [this] { return stopping_; });
    std::shared_ptr<Segment> active = active_;
    unsynced_bytes_ = 0;
    lock.unlock();
    if (auto s = SyncFd(active->fd); !s.ok()) FZ_LOG_WARN("{}", MessageOf(s));
    lock.lock();
  }
}

TierStats DiskTier::Stats() const {
  std::lock_guard lock(mu_);
  TierStats s;
  s.tier = Tier::kDisk;
  s.bytes = live_bytes_;
  s.capacity_bytes = options_.capacity_bytes;
  s.blocks = index_.size();
  s.hits = hits_;
  s.misses = misses_;
  s.evictions = evictions_;
  s.corrupt_blocks = corrupt_;
  s.write_failures = write_failures_;
  for (int p = 0; p < kNumPrecisions; ++p) {
    if (blocks_by_precision_[p] != 0) {
      s.bytes_by_precision.push_back(
          {static_cast<Precision>(p), bytes_by_precision_[p], blocks_by_precision_[p]});
    }
  }
  return s;
}

uint64_t DiskTier::FileBytes() const {
  std::lock_guard lock(mu_);
  return file_bytes_;
}

}  // namespace framezip::kvstore
