#include "engine/model/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>

#include "engine/model/config.h"
#include "engine/model/json_util.h"

namespace framezip::engine::model {

namespace {
constexpr uint64_t kMaxHeaderSize = 100'000'000;

struct DTypeEntry {
  std::string_view name;
  int bits;
};
// Every dtype of the format (safetensors/src/tensor.rs).
constexpr DTypeEntry kDTypes[] = {
    {"BOOL", 8},    {"U8", 8},      {"I8", 8},          {"I16", 16},        {"U16", 16},
    {"F16", 16},    {"BF16", 16},   {"I32", 32},        {"U32", 32},        {"F32", 32},
    {"F64", 64},    {"I64", 64},    {"U64", 64},        {"C64", 64},        {"F8_E4M3", 8},
    {"F8_E5M2", 8}, {"F8_E8M0", 8}, {"F8_E4M3FNUZ", 8}, {"F8_E5M2FNUZ", 8}, {"F4", 4},
    {"F6_E2M3", 6}, {"F6_E3M2", 6},
};
}  // namespace

int SafetensorsDTypeBits(std::string_view dtype_name) {
  for (const auto& e : kDTypes) {
    if (e.name == dtype_name) return e.bits;
  }
  return 0;
}

StatusOr<DType> EngineDType(std::string_view n) {
  if (n == "F32") return DType::kF32;
  if (n == "F16") return DType::kF16;
  if (n == "BF16") return DType::kBF16;
  if (n == "I64") return DType::kI64;
  if (n == "I32") return DType::kI32;
  if (n == "U8" || n == "BOOL") return DType::kU8;
  if (n == "I8") return DType::kI8;
  if (n == "F8_E4M3") return DType::kF8E4M3;
  return UnimplementedError("safetensors dtype {} is not supported by the engine", n);
}

std::string_view SafetensorsDTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "F32";
    case DType::kF16:
      return "F16";
    case DType::kBF16:
      return "BF16";
    case DType::kI32:
      return "I32";
    case DType::kI64:
      return "I64";
    case DType::kU8:
      return "U8";
    case DType::kI8:
      return "I8";
    case DType::kF8E4M3:
      return "F8_E4M3";
  }
  return "?";
}

namespace {

// Parses one header entry's "shape" and "data_offsets" and checks the byte length.
Status ParseEntry(const std::string& name, const Json& v, std::string_view file, TensorInfo& t) {
  t.name = name;
  if (!v.is_object()) {
    return InvalidArgumentError("{}: tensor {}: header entry is a {}, expected an object", file,
                                name, JsonTypeName(v));
  }
  const Json* dtype = FindField(v, "dtype");
  const Json* shape = FindField(v, "shape");
  const Json* offsets = FindField(v, "data_offsets");
  if (dtype == nullptr || !dtype->is_string()) {
    return InvalidArgumentError("{}: tensor {}: missing or non-string dtype", file, name);
  }
  t.dtype_name = dtype->get<std::string>();
  const int bits = SafetensorsDTypeBits(t.dtype_name);
  if (bits == 0) {
    return InvalidArgumentError("{}: tensor {}: unknown dtype '{}'", file, name, t.dtype_name);
  }
  if (shape == nullptr || !shape->is_array()) {
    return InvalidArgumentError("{}: tensor {}: missing or non-list shape", file, name);
  }
  // numel × 64 bits must fit in 64 bits: checked as the product grows.
  uint64_t numel = 1;
  for (const Json& d : *shape) {
    if (!d.is_number_unsigned() && !(d.is_number_integer() && d.get<int64_t>() >= 0)) {
      // (No dump of the shape: an adversarial header could nest it deeply.)
      return InvalidArgumentError(
          "{}: tensor {}: shape has a {} dim, expected a non-negative "
          "integer",
          file, name, d.is_number() ? "negative" : JsonTypeName(d));
    }
    const uint64_t dim = d.get<uint64_t>();
    if (dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
        (dim != 0 && numel > std::numeric_limits<uint64_t>::max() / 64 / dim)) {
      return InvalidArgumentError("{}: tensor {}: shape overflows 64-bit sizes", file, name);
    }
    numel *= dim;
    t.shape.push_back(static_cast<int64_t>(dim));
  }
  if (offsets == nullptr || !offsets->is_array() || offsets->size() != 2 ||
      !(*offsets)[0].is_number_unsigned() || !(*offsets)[1].is_number_unsigned()) {
    return InvalidArgumentError("{}: tensor {}: data_offsets must be [begin, end] (non-negative)",
                                file, name);
  }
  t.begin = (*offsets)[0].get<uint64_t>();
  t.end = (*offsets)[1].get<uint64_t>();
  if (t.end < t.begin) {
    return InvalidArgumentError("{}: tensor {}: data_offsets [{}, {}] end before begin", file, name,
                                t.begin, t.end);
  }
  const uint64_t total_bits = numel * static_cast<uint64_t>(bits);
  if (total_bits % 8 != 0 || total_bits / 8 != t.end - t.begin) {
    return InvalidArgumentError(
        "{}: tensor {}: {} {} needs {} bytes but data_offsets [{}, {}] hold {}", file, name,
        t.dtype_name, ShapeString(t.shape), total_bits / 8.0, t.begin, t.end, t.end - t.begin);
  }
  return absl::OkStatus();
}

}  // namespace

StatusOr<SafetensorsHeader> ParseSafetensorsHeader(const uint8_t* data, size_t size,
                                                   std::string_view file) {
  if (size < 8) {
    return DataLossError(
        "{}: truncated safetensors file: {} bytes, fewer than the 8-byte header "
        "length",
        file, size);
  }
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | data[i];  // little-endian regardless of host
  if (n > kMaxHeaderSize) {
    return InvalidArgumentError("{}: safetensors header length {} exceeds the limit of {}", file, n,
                                kMaxHeaderSize);
  }
  if (n > size - 8) {
    return DataLossError(
        "{}: truncated safetensors file: header of {} bytes but only {} bytes "
        "follow the length",
        file, n, size - 8);
  }
  if (n == 0 || data[8] != '{') {
    return InvalidArgumentError("{}: safetensors header does not start with '{{'", file);
  }
  SafetensorsHeader h;
  h.header_size = n;
  h.data_offset = 8 + n;
  const std::string_view text(reinterpret_cast<const char*>(data + 8), n);
  FZ_ASSIGN_OR_RETURN(Json root, ParseJson(text, fmt::format("{}: safetensors header", file)));
  if (!root.is_object()) {
    return InvalidArgumentError("{}: safetensors header is not a JSON object", file);
  }
  for (auto it = root.begin(); it != root.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it->is_object()) {
        return InvalidArgumentError("{}: __metadata__ is not an object", file);
      }
      for (auto m = it->begin(); m != it->end(); ++m) {
        if (!m->is_string()) {
          return InvalidArgumentError("{}: __metadata__.{} is not a string", file, m.key());
        }
        h.metadata[m.key()] = m->get<std::string>();
      }
      continue;
    }
    TensorInfo t;
    FZ_RETURN_IF_ERROR(ParseEntry(it.key(), *it, file, t));
    h.tensors.push_back(std::move(t));
  }
  // The tensors must tile the data section: sorted by offset, each starts where the previous
  // ended (no overlap, no hole), and the last ends at the file end.
  std::vector<const TensorInfo*> order;
  order.reserve(h.tensors.size());
  for (const auto& t : h.tensors) order.push_back(&t);
  std::sort(order.begin(), order.end(), [](const TensorInfo* a, const TensorInfo* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  uint64_t expected = 0;
  const TensorInfo* prev = nullptr;
  for (const TensorInfo* t : order) {
    if (t->begin < expected) {
      return InvalidArgumentError("{}: tensor {} data_offsets [{}, {}] overlap tensor {} [{}, {}]",
                                  file, t->name, t->begin, t->end, prev->name, prev->begin,
                                  prev->end);
    }
    if (t->begin > expected) {
      return InvalidArgumentError(
          "{}: tensor {} data_offsets [{}, {}] leave a hole after byte {} of the data section",
          file, t->name, t->begin, t->end, expected);
    }
    expected = t->end;
    prev = t;
  }
  const uint64_t data_size = size - h.data_offset;
  if (expected > data_size) {
    return DataLossError(
        "{}: truncated safetensors file: tensor {} ends at data byte {} but the "
        "data section has {} bytes",
        file, prev->name, expected, data_size);
  }
  if (expected < data_size) {
    return InvalidArgumentError("{}: {} trailing bytes after the last tensor's data", file,
                                data_size - expected);
  }
  return h;
}

StatusOr<std::shared_ptr<MappedFile>> MappedFile::Open(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) return NotFoundError("{} not found", path.string());
    return PermissionDeniedError("cannot open {}: {}", path.string(), std::strerror(err));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return InternalError("fstat {}: {}", path.string(), std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return InvalidArgumentError("{} is not a regular file", path.string());
  }
  std::shared_ptr<MappedFile> f(new MappedFile());
  f->path_ = path;
  f->size_ = static_cast<size_t>(st.st_size);
  if (f->size_ > 0) {
    void* addr = ::mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (addr == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      return ResourceExhaustedError("mmap {} ({} bytes): {}", path.string(), f->size_,
                                    std::strerror(err));
    }
    f->addr_ = addr;
  }
  ::close(fd);  // the mapping keeps the file referenced
  return f;
}

MappedFile::~MappedFile() {
  if (addr_ != nullptr) ::munmap(addr_, size_);
}

StatusOr<SafetensorsFile> SafetensorsFile::Open(const std::filesystem::path& path) {
  SafetensorsFile f;
  FZ_ASSIGN_OR_RETURN(f.file_, MappedFile::Open(path));
  FZ_ASSIGN_OR_RETURN(f.header_,
                      ParseSafetensorsHeader(f.file_->data(), f.file_->size(), path.string()));
  for (size_t i = 0; i < f.header_.tensors.size(); ++i) {
    f.index_.emplace(f.header_.tensors[i].name, i);
  }
  return f;
}

const TensorInfo* SafetensorsFile::Find(std::string_view name) const {
  auto it = index_.find(std::string(name));
  return it == index_.end() ? nullptr : &header_.tensors[it->second];
}

StatusOr<Tensor> SafetensorsFile::Get(std::string_view name) const {
  const TensorInfo* t = Find(name);
  if (t == nullptr) return NotFoundError("tensor {} not found in {}", name, path().string());
  auto dtype = EngineDType(t->dtype_name);
  if (!dtype.ok()) {
    return UnimplementedError("{}: tensor {}: {}", path().string(), name,
                              MessageOf(dtype.status()));
  }
  const uint8_t* ptr = file_->data() + header_.data_offset + t->begin;
  const size_t bytes = t->end - t->begin;
  const size_t elem = DTypeSize(*dtype);
  if (reinterpret_cast<uintptr_t>(ptr) % elem != 0) {
    // The format does not promise per-tensor alignment; typed access needs it, so copy.
    FZ_ASSIGN_OR_RETURN(Tensor copy, Tensor::Empty(t->shape, *dtype));
    if (bytes > 0) std::memcpy(copy.raw_data(), ptr, bytes);
    return copy;
  }
  // Aliasing shared_ptr: points at the tensor bytes, owns (a reference to) the whole mapping.
  // The mapping is read-only; the const_cast only satisfies Buffer's void* interface.
  std::shared_ptr<void> alias(file_, const_cast<uint8_t*>(ptr));
  Buffer buffer = Buffer::Adopt(std::move(alias), bytes, Device::Cpu());
  return Tensor::FromBuffer(std::move(buffer), 0, t->shape, *dtype);
}

StatusOr<SafetensorsModel> SafetensorsModel::OpenFile(const std::filesystem::path& path) {
  SafetensorsModel m;
  FZ_ASSIGN_OR_RETURN(SafetensorsFile f, SafetensorsFile::Open(path));
  for (const auto& t : f.tensors()) m.where_.emplace(t.name, 0);
  m.files_.push_back(std::move(f));
  return m;
}

StatusOr<SafetensorsModel> SafetensorsModel::Open(const std::filesystem::path& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path index_path = dir / "model.safetensors.index.json";
  std::vector<std::string> shard_names;
  Json weight_map;
  if (fs::exists(index_path, ec)) {
    FZ_ASSIGN_OR_RETURN(std::string text, ReadFileToString(index_path));
    FZ_ASSIGN_OR_RETURN(Json index, ParseJson(text, index_path.string()));
    const Json* wm = FindField(index, "weight_map");
    if (wm == nullptr || !wm->is_object()) {
      return InvalidArgumentError("{}: missing or non-object weight_map", index_path.string());
    }
    weight_map = *wm;
    for (auto it = wm->begin(); it != wm->end(); ++it) {
      if (!it->is_string()) {
        return InvalidArgumentError("{}: weight_map.{} is not a file name", index_path.string(),
                                    it.key());
      }
      const std::string shard = it->get<std::string>();
      // Shards live next to the index: refuse paths that climb out of the directory.
      if (shard.empty() || shard.find('/') != std::string::npos || shard == "..") {
        return InvalidArgumentError("{}: weight_map.{}: bad shard name '{}'", index_path.string(),
                                    it.key(), shard);
      }
      if (std::find(shard_names.begin(), shard_names.end(), shard) == shard_names.end()) {
        shard_names.push_back(shard);
      }
    }
    std::sort(shard_names.begin(), shard_names.end());
  } else if (fs::exists(dir / "model.safetensors", ec)) {
    shard_names.push_back("model.safetensors");
  } else {
    for (const auto& e : fs::directory_iterator(dir, ec)) {
      if (e.path().extension() == ".safetensors") shard_names.push_back(e.path().filename());
    }
    std::sort(shard_names.begin(), shard_names.end());
    if (shard_names.empty()) {
      return NotFoundError(
          "no model.safetensors, model.safetensors.index.json or *.safetensors "
          "in {}",
          dir.string());
    }
  }
  SafetensorsModel m;
  for (const std::string& shard : shard_names) {
    FZ_ASSIGN_OR_RETURN(SafetensorsFile f, SafetensorsFile::Open(dir / shard));
    const size_t idx = m.files_.size();
    for (const auto& t : f.tensors()) {
      auto [it, inserted] = m.where_.emplace(t.name, idx);
      if (!inserted) {
        return InvalidArgumentError("tensor {} appears in both {} and {}", t.name,
                                    m.files_[it->second].path().filename().string(), shard);
      }
    }
    m.files_.push_back(std::move(f));
  }
  // Every weight_map entry must be in the shard it names.
  for (auto it = weight_map.begin(); it != weight_map.end(); ++it) {
    const std::string shard = it->get<std::string>();
    auto w = m.where_.find(it.key());
    if (w == m.where_.end() || m.files_[w->second].path().filename() != shard) {
      return InvalidArgumentError("{}: tensor {} is listed in {} but that shard does not hold it",
                                  index_path.filename().string(), it.key(), shard);
    }
  }
  return m;
}

const TensorInfo* SafetensorsModel::Find(std::string_view name) const {
  auto it = where_.find(std::string(name));
  return it == where_.end() ? nullptr : files_[it->second].Find(name);
}

StatusOr<Tensor> SafetensorsModel::Get(std::string_view name) const {
  auto it = where_.find(std::string(name));
  if (it == where_.end()) return NotFoundError("tensor {} not found", name);
  return files_[it->second].Get(name);
}

std::vector<std::string> SafetensorsModel::Names() const {
  std::vector<std::string> names;
  names.reserve(where_.size());
  for (const auto& [name, idx] : where_) names.push_back(name);
  std::sort(names.begin(), names.end());
  return names;
}

std::string SafetensorsModel::FileOf(std::string_view name) const {
  auto it = where_.find(std::string(name));
  return it == where_.end() ? std::string() : files_[it->second].path().filename().string();
}

Status WriteSafetensors(const std::filesystem::path& path,
                        const std::vector<std::pair<std::string, Tensor>>& tensors,
                        const std::map<std::string, std::string>& metadata) {
  std::vector<const std::pair<std::string, Tensor>*> order;
  for (const auto& t : tensors) {
    if (!t.second.device().is_cpu()) {
      return InvalidArgumentError("WriteSafetensors: tensor {} is not on the CPU", t.first);
    }
    order.push_back(&t);
  }
  std::sort(order.begin(), order.end(), [](auto* a, auto* b) { return a->first < b->first; });
  Json header = Json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const auto* t : order) {
    if (header.contains(t->first)) {
      return InvalidArgumentError("WriteSafetensors: duplicate tensor {}", t->first);
    }
    const uint64_t bytes = t->second.nbytes();
    header[t->first] = {{"dtype", SafetensorsDTypeName(t->second.dtype())},
                        {"shape", t->second.shape()},
                        {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // data section 8-byte aligned, like the writers
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return PermissionDeniedError("cannot write {}", path.string());
  uint8_t len[8];
  uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(n >> (8 * i));
  out.write(reinterpret_cast<const char*>(len), 8);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  for (const auto* t : order) {
    out.write(static_cast<const char*>(t->second.raw_data()),
              static_cast<std::streamsize>(t->second.nbytes()));
  }
  out.close();
  if (!out) return DataLossError("error writing {}", path.string());
  return absl::OkStatus();
}

}  // namespace framezip::engine::model
