#include "media/frame_data.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace framezip::media {

// An mmap of a memfd: read-only over a sealed one another process filled (the descriptor stays
// the caller's), or writable over one this process made (and owns) to fill.
struct FrameData::Mapping {
  void* address = nullptr;
  size_t bytes = 0;
  int owned_fd = -1;
  bool writable = false;
  ~Mapping() {
    if (address != nullptr) ::munmap(address, bytes);
    if (owned_fd >= 0) ::close(owned_fd);
  }
};

FrameData::FrameData(const FrameData& other) { *this = other; }

FrameData& FrameData::operator=(const FrameData& other) {
  if (this == &other) return *this;
  if (other.mapping_ != nullptr && other.mapping_->writable) {
    heap_.assign(other.begin(), other.end());
    mapping_.reset();
  } else {
    heap_ = other.heap_;
    mapping_ = other.mapping_;
  }
  size_ = other.size_;
  PointAtStorage();
  return *this;
}

FrameData::FrameData(FrameData&& other) noexcept { *this = std::move(other); }

FrameData& FrameData::operator=(FrameData&& other) noexcept {
  if (this == &other) return *this;
  heap_ = std::move(other.heap_);  // the buffer moves, so a pointer into it stays valid
  mapping_ = std::move(other.mapping_);
  values_ = other.values_;
  size_ = other.size_;
  other.heap_.clear();
  other.values_ = nullptr;
  other.size_ = 0;
  return *this;
}

FrameData::~FrameData() = default;

void FrameData::PointAtStorage() {
  if (mapping_ != nullptr) {
    values_ = static_cast<float*>(mapping_->address);
  } else {
    values_ = heap_.empty() ? nullptr : heap_.data();
  }
}

float* FrameData::data() {
  if (mapping_ != nullptr && !mapping_->writable) {
    heap_.assign(begin(), end());
    mapping_.reset();
    PointAtStorage();
  }
  return values_;
}

Status FrameData::Resize(size_t n, Storage storage) {
  if (storage == Storage::kHeap || n == 0) {
    std::vector<float> grown(n, 0.0f);
    std::copy_n(values_, std::min(n, size_), grown.data());
    heap_ = std::move(grown);
    mapping_.reset();
    size_ = n;
    PointAtStorage();
    return absl::OkStatus();
  }
  auto mapping = std::make_shared<Mapping>();
  mapping->owned_fd = ::memfd_create("framezip-frames", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (mapping->owned_fd < 0) {
    return ResourceExhaustedError("memfd_create for the frames failed: {}", std::strerror(errno));
  }
  mapping->bytes = n * sizeof(float);
  if (::ftruncate(mapping->owned_fd, static_cast<off_t>(mapping->bytes)) != 0) {
    return ResourceExhaustedError("sizing the frames' memfd to {} bytes failed: {}", mapping->bytes,
                                  std::strerror(errno));
  }
  void* address =
      ::mmap(nullptr, mapping->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, mapping->owned_fd, 0);
  if (address == MAP_FAILED) {
    return ResourceExhaustedError("mapping the frames' memfd failed: {}", std::strerror(errno));
  }
  mapping->address = address;
  mapping->writable = true;
  std::copy_n(values_, std::min(n, size_), static_cast<float*>(address));  // the rest reads 0
  heap_.clear();
  heap_.shrink_to_fit();
  mapping_ = std::move(mapping);
  size_ = n;
  PointAtStorage();
  return absl::OkStatus();
}

StatusOr<int> FrameData::ReleaseSealedMemfd() {
  if (mapping_ == nullptr || !mapping_->writable || mapping_->owned_fd < 0 ||
      mapping_.use_count() != 1) {
    return InternalError("the frames are not in a memfd of their own");
  }
  const int fd = mapping_->owned_fd;
  mapping_->owned_fd = -1;
  *this = FrameData();  // unmaps: a write seal is refused while a writable mapping exists
  if (::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) != 0) {
    const int error = errno;
    ::close(fd);
    return InternalError("sealing the frames' memfd failed: {}", std::strerror(error));
  }
  return fd;
}

StatusOr<FrameData> FrameData::MapSealedMemfd(int fd, size_t floats) {
  struct stat st {};
  if (fd < 0 || ::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
      static_cast<uint64_t>(st.st_size) != floats * sizeof(float)) {
    return InternalError("the frame buffer is not {} bytes", floats * sizeof(float));
  }
  // Sealed, its pages cannot change or go away under the mapping (a shrink would turn reads
  // into SIGBUS).
  const int seals = ::fcntl(fd, F_GET_SEALS);
  const int needed = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE;
  if (seals < 0 || (seals & needed) != needed) {
    return InternalError("the frame buffer is not sealed against {}",
                         seals < 0 || (seals & F_SEAL_SHRINK) == 0 ? "shrinking"
                         : (seals & F_SEAL_WRITE) == 0             ? "writes"
                                                                   : "growth");
  }
  FrameData out;
  if (floats == 0) return out;
  auto mapping = std::make_shared<Mapping>();
  mapping->bytes = floats * sizeof(float);
  void* address = ::mmap(nullptr, mapping->bytes, PROT_READ, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (address == MAP_FAILED) {
    return ResourceExhaustedError("mapping the frame buffer failed: {}", std::strerror(errno));
  }
  mapping->address = address;
  out.mapping_ = std::move(mapping);
  out.size_ = floats;
  out.PointAtStorage();
  return out;
}

bool operator==(const FrameData& a, const FrameData& b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin());
}

}  // namespace framezip::media
