// safetensors reader (mmap, zero-copy) and a small writer, docs/models.md §7.
//
// File layout: u64 little-endian header length N (≤ 100,000,000), N bytes of JSON
// {"name": {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {str: str}}, then the
// data section. Validation is strict, as in the reference Rust crate: header starts with '{',
// every dtype is known, numel × element size == end − begin, and the tensors tile the data section
// exactly (sorted by offset: no overlap, no hole, last end == data size). Any violation is
// INVALID_ARGUMENT / DATA_LOSS with one line naming the file and the tensor.
//
// Ownership: tensors returned by Get() are views into the read-only mapping and share ownership
// of it (Buffer::Adopt), so a tensor stays valid after the SafetensorsFile / SafetensorsModel that
// produced it is destroyed. The bytes are read-only: never write through raw_data().
// A tensor whose offset is not aligned to its element size is copied into an aligned host buffer.
// Thread-safety: const methods are safe to call concurrently.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/status.h"
#include "engine/core/tensor.h"

namespace framezip::engine::model {

// One entry of a safetensors header.
struct TensorInfo {
  std::string name;
  std::string dtype_name;  // as in the file: "BF16", "F32", ...
  Shape shape;
  uint64_t begin = 0;  // byte offsets relative to the data section, end exclusive
  uint64_t end = 0;
};

// A parsed and validated header.
struct SafetensorsHeader {
  uint64_t header_size = 0;         // N: the JSON length
  uint64_t data_offset = 0;         // 8 + N: where the data section starts in the file
  std::vector<TensorInfo> tensors;  // sorted by name
  std::map<std::string, std::string> metadata;
};

// Element size in bits of a safetensors dtype name (all 22 names of the format), 0 if unknown.
int SafetensorsDTypeBits(std::string_view dtype_name);
// The engine dtype of a safetensors dtype name: F32, F16, BF16, I64, I32, U8, I8, and BOOL (as U8).
// UNIMPLEMENTED naming the dtype otherwise.
StatusOr<DType> EngineDType(std::string_view dtype_name);
// The safetensors name of an engine dtype ("F32", ...).
std::string_view SafetensorsDTypeName(DType dtype);

// Parses and validates the header of a file whose complete contents are [data, data + size).
// Pure function (used by the fuzzer). `file_name` is for messages.
StatusOr<SafetensorsHeader> ParseSafetensorsHeader(const uint8_t* data, size_t size,
                                                   std::string_view file_name);

// A read-only memory mapping of a whole file (RAII: munmap on destruction).
class MappedFile {
 public:
  static StatusOr<std::shared_ptr<MappedFile>> Open(const std::filesystem::path& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return static_cast<const uint8_t*>(addr_); }
  size_t size() const { return size_; }
  const std::filesystem::path& path() const { return path_; }

 private:
  MappedFile() = default;
  void* addr_ = nullptr;
  size_t size_ = 0;
  std::filesystem::path path_;
};

// One .safetensors file.
class SafetensorsFile {
 public:
  static StatusOr<SafetensorsFile> Open(const std::filesystem::path& path);

  const SafetensorsHeader& header() const { return header_; }
  const std::vector<TensorInfo>& tensors() const { return header_.tensors; }
  const std::map<std::string, std::string>& metadata() const { return header_.metadata; }
  const std::filesystem::path& path() const { return file_->path(); }

  // nullptr if absent.
  const TensorInfo* Find(std::string_view name) const;
  // A CPU tensor viewing the mapping. NOT_FOUND naming the tensor and file if absent;
  // UNIMPLEMENTED if its dtype has no engine equivalent.
  StatusOr<Tensor> Get(std::string_view name) const;

 private:
  std::shared_ptr<MappedFile> file_;
  SafetensorsHeader header_;
  std::unordered_map<std::string, size_t> index_;  // name -> position in header_.tensors
};

// All weights of a model directory: model.safetensors.index.json (sharded), else model.safetensors,
// else every *.safetensors file in the directory. A tensor name in two shards, a weight_map entry
// whose shard lacks it, or a missing shard file is an error naming both.
class SafetensorsModel {
 public:
  static StatusOr<SafetensorsModel> Open(const std::filesystem::path& dir);
  // A single file, as a model (tests, goldens).
  static StatusOr<SafetensorsModel> OpenFile(const std::filesystem::path& path);

  bool Has(std::string_view name) const { return Find(name) != nullptr; }
  const TensorInfo* Find(std::string_view name) const;
  StatusOr<Tensor> Get(std::string_view name) const;
  // Every tensor name, sorted.
  std::vector<std::string> Names() const;
  // The file holding `name` (for messages), or "" when absent.
  std::string FileOf(std::string_view name) const;
  size_t num_tensors() const { return where_.size(); }
  size_t num_files() const { return files_.size(); }

 private:
  std::vector<SafetensorsFile> files_;
  std::unordered_map<std::string, size_t> where_;  // name -> index in files_
};

// Writes `tensors` (CPU, contiguous) as a safetensors file in the format transformers writes:
// sorted by name, header padded with spaces to a multiple of 8, optional __metadata__.
Status WriteSafetensors(const std::filesystem::path& path,
                        const std::vector<std::pair<std::string, Tensor>>& tensors,
                        const std::map<std::string, std::string>& metadata = {});

}  // namespace framezip::engine::model
