// The disk tier: blocks in append-only segment files under one directory.
//
// Layout: <dir>/seg-<id>.fzkv segment files (record format in disk_record.h) and <dir>/LOCK
// (flock'ed, so two processes never share a directory). Records are appended to one active
// segment; a segment is sealed when it reaches segment_bytes and never written again.
//
// Durability (FsyncPolicy):
//   kPerBlock  fdatasync after every record, before Put returns (Put reports durable = true);
//              new and removed segment files also fsync the directory.
//   kPerBatch  fdatasync when batch_bytes have been written or every batch_interval (background
//              thread); a crash may lose the last interval, never corrupts.
//   kOff       no fsync (page cache only; survives a process kill, not a power loss).
//
// Start-up: the index (key -> segment, offset) is rebuilt by scanning every segment's record
// headers in id order; later records win, tombstones (from Delete) remove the record they name.
// The newest segment (the one a crash may have torn) is fully CRC-checked; torn or garbled
// records are skipped and never indexed. Appends always go to a new segment after a restart, so
// a damaged file is never extended and never truncated: its live records move out at compaction.
//
// Reads verify the payload CRC32C every time: a record that fails is dropped from the index,
// counted (corrupt_blocks, StoreMetrics::Corrupt) and reported as NOT_FOUND; never served.
//
// Capacity: the sum of segment file sizes stays <= capacity_bytes. To make room a Put first
// compacts sealed segments with dead records (deleted/superseded: live records are copied
// forward, nothing is lost), then evicts whole sealed segments oldest first (FIFO by write time;
// the host tier above provides LRU for hot blocks), copying pinned blocks forward. While records
// are copied forward usage may pass the cap by the size of those records.
//
// Disk full: a failed write (ENOSPC, EIO, or the injected ENOSPC for tests) truncates the
// partial record away and returns RESOURCE_EXHAUSTED (ENOSPC) or INTERNAL; reads keep working.
//
// Thread-safe: one mutex for the index and appends; payload reads run outside the lock.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "common/status.h"
#include "kvstore/disk_record.h"
#include "kvstore/metrics.h"
#include "kvstore/pin_table.h"
#include "kvstore/types.h"

namespace framezip::kvstore {

enum class FsyncPolicy { kPerBlock, kPerBatch, kOff };

// "block", "batch", "off".
StatusOr<FsyncPolicy> ParseFsyncPolicy(std::string_view name);
std::string_view FsyncPolicyName(FsyncPolicy policy);

struct DiskTierOptions {
  std::filesystem::path dir = {};
  uint64_t capacity_bytes = 16ull << 30;
  uint64_t segment_bytes = 64ull << 20;
  FsyncPolicy fsync = FsyncPolicy::kPerBlock;
  uint64_t fsync_batch_bytes = 8ull << 20;
  std::chrono::milliseconds fsync_batch_interval{20};
  // Compact() rewrites sealed segments with at least this fraction of dead bytes.
  double compact_dead_ratio = 0.5;
  // CRC-check every record's payload at start (slow for big stores), not just the newest segment.
  bool verify_all_on_open = false;
  // Testing: after this many bytes written by this process, writes fail as if with ENOSPC
  // (half a record is written first, to exercise the cleanup). 0 = off.
  uint64_t inject_enospc_after_bytes = 0;
};

class DiskTier {
 public:
  // Creates `dir` if needed, locks it and rebuilds the index. FAILED_PRECONDITION when another
  // process holds the directory.
  static StatusOr<std::unique_ptr<DiskTier>> Open(DiskTierOptions options, const PinTable* pins,
                                                  StoreMetrics* metrics);
  ~DiskTier();  // syncs (unless kOff), closes, unlocks
  DiskTier(const DiskTier&) = delete;
  DiskTier& operator=(const DiskTier&) = delete;

  // Appends the block (a present key is left alone). Returns whether it is durable now.
  StatusOr<bool> Put(const BlockKey& key, std::string_view bytes, uint32_t crc32c,
                     Precision precision);
  // The block, CRC-verified. NOT_FOUND when absent or corrupt. Counts a hit or a miss.
  StatusOr<Block> Get(const BlockKey& key);
  std::optional<uint64_t> SizeOf(const BlockKey& key) const;
  bool Contains(const BlockKey& key) const { return SizeOf(key).has_value(); }
  // Removes the key (a tombstone record makes it stick across restarts). False when absent.
  bool Erase(const BlockKey& key);
  // fdatasync of the active segment (a no-op for kPerBlock, where every Put syncs).
  Status Sync();
  // Rewrites sealed segments whose dead fraction is at least compact_dead_ratio; returns how
  // many were compacted.
  StatusOr<int> Compact();
  TierStats Stats() const;
  // Bytes of segment files on disk (what capacity_bytes bounds).
  uint64_t FileBytes() const;
  const DiskTierOptions& options() const { return options_; }

 private:
  struct Segment;
  struct Entry {
    std::shared_ptr<Segment> segment;
    uint64_t offset = 0;
    uint64_t payload_bytes = 0;
    uint32_t crc32c = 0;
    Precision precision = Precision::kUnspecified;
  };
  using Index = std::unordered_map<BlockKey, Entry, BlockKeyHash>;

  DiskTier(DiskTierOptions options, const PinTable* pins, StoreMetrics* metrics, int lock_fd);
  Status Load();
  Status ScanSegment(const std::shared_ptr<Segment>& segment, bool verify_payloads);
  Status NewActiveSegmentLocked();
  Status MakeRoomLocked(uint64_t record_bytes);
  Status DropSegmentLocked(const std::shared_ptr<Segment>& segment, bool evict_unpinned);
  StatusOr<uint64_t> AppendLocked(const disk::RecordHeader& header, std::string_view payload,
                                  uint32_t payload_crc);
  void AddEntryLocked(const BlockKey& key, Entry entry);
  void RemoveEntryLocked(Index::iterator it);
  uint64_t PinnedBytesLocked(const Segment& segment) const;
  Status SyncFd(int fd) const;
  void SyncDir() const;
  void BatchSyncLoop();

  const DiskTierOptions options_;
  const PinTable* pins_;
  StoreMetrics* metrics_;
  const int lock_fd_;

  mutable std::mutex mu_;
  Index index_;
  std::map<uint32_t, std::shared_ptr<Segment>> segments_;  // by id; the last is active
  std::shared_ptr<Segment> active_;
  uint32_t next_segment_id_ = 1;
  uint64_t file_bytes_ = 0;
  uint64_t written_bytes_ = 0;  // by this process, for the ENOSPC injection
  uint64_t unsynced_bytes_ = 0;
  uint64_t bytes_by_precision_[kNumPrecisions] = {};
  uint64_t blocks_by_precision_[kNumPrecisions] = {};
  uint64_t live_bytes_ = 0;
  uint64_t hits_ = 0, misses_ = 0, evictions_ = 0, corrupt_ = 0, write_failures_ = 0;

  std::thread batch_sync_thread_;
  std::condition_variable batch_cv_;
  bool stopping_ = false;
};

}  // namespace framezip::kvstore
