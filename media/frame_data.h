// FrameData: the floats of a batch of preprocessed frames (FrameBatch::data), held where they can
// cross from a media worker to the server without a copy.
//
// A decode in process keeps them on the heap. A media worker asks for them in a memfd
// (DecodeOptions::frames_in_memfd): the media stage writes the frames straight into shared
// memory, the worker seals the memfd against every change and sends it, and the server maps it
// read-only and reads the frames where they lie. Both copies the transfer used to make (the
// worker's write into the memfd, the server's read out of it, 57 MB each for 32 SigLIP frames)
// are gone.
//
// Copies share a read-only mapping (a writable one is copied to the heap); anything that writes
// through a read-only mapping (data() on a non-const object) first moves the values to the heap.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "common/status.h"

namespace framezip::media {

class FrameData {
 public:
  enum class Storage { kHeap, kMemfd };

  FrameData() = default;
  FrameData(const FrameData& other);
  FrameData& operator=(const FrameData& other);
  FrameData(FrameData&& other) noexcept;
  FrameData& operator=(FrameData&& other) noexcept;
  ~FrameData();

  // Frames in a memfd sealed against writes, growth and shrinking (checked: anything else is
  // INTERNAL, naming the missing seal), holding exactly `floats` values, mapped read-only.
  // The descriptor stays the caller's.
  static StatusOr<FrameData> MapSealedMemfd(int fd, size_t floats);

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  const float* data() const { return values_; }
  float* data();
  const float* begin() const { return values_; }
  const float* end() const { return values_ + size_; }
  float operator[](size_t i) const { return values_[i]; }

  // `n` values in new storage of the given kind: the first min(size(), n) kept, the rest 0.
  // A memfd that cannot be made is RESOURCE_EXHAUSTED (a heap that cannot grow throws bad_alloc,
  // as a vector's would).
  Status Resize(size_t n, Storage storage = Storage::kHeap);
  void clear() { *this = FrameData(); }

  // The memfd holding these frames, sealed against any change, for another process to map; the
  // writable mapping is dropped first (a write seal needs that), so this object is then empty.
  // The descriptor is the caller's. INTERNAL when the frames are not in a memfd.
  StatusOr<int> ReleaseSealedMemfd();

  friend bool operator==(const FrameData& a, const FrameData& b);

 private:
  struct Mapping;
  void PointAtStorage();

  std::vector<float> heap_;
  std::shared_ptr<Mapping> mapping_;  // a memfd's mapping (shared by copies when read-only)
  float* values_ = nullptr;
  size_t size_ = 0;
};

}  // namespace framezip::media
