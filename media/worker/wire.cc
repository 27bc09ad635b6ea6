#include "media/worker/wire.h"

#include <cmath>
#include <cstring>
#include <type_traits>
#include <utility>

namespace framezip::media::worker {
namespace {

class Writer {
 public:
  explicit Writer(MessageKind kind) {
    Put(kWireMagic);
    Put(kWireVersion);
    Put(static_cast<uint16_t>(kind));
  }
  template <typename T>
  void Put(T value) {
    static_assert(std::is_arithmetic_v<T>);
    uint8_t bytes[sizeof(T)];
    std::memcpy(bytes, &value, sizeof(T));  // x86-64 and aarch64: little endian
    out_.insert(out_.end(), bytes, bytes + sizeof(T));
  }
  void PutString(const std::string& s) {
    const size_t n = std::min(s.size(), kMaxWireString);
    Put(static_cast<uint32_t>(n));
    out_.insert(out_.end(), s.begin(), s.begin() + static_cast<ptrdiff_t>(n));
  }
  void PutBytes(const uint8_t* data, size_t n) { out_.insert(out_.end(), data, data + n); }
  void PutDoubles(const std::vector<double>& v) {
    Put(static_cast<uint32_t>(v.size()));
    for (double d : v) Put(d);
  }
  std::vector<uint8_t> Take() { return std::move(out_); }

 private:
  std::vector<uint8_t> out_;
};

// Reads fields in order; the first out-of-bounds read sets an error and every later read yields
// zeros, so decoders check ok() once at the end (and before using any count).
class Reader {
 public:
  explicit Reader(std::span<const uint8_t> bytes) : bytes_(bytes) {}
  bool Header(MessageKind want) {
    if (bytes_.size() > kMaxMessageBytes) return Fail("message too large");
    if (Get<uint32_t>() != kWireMagic) return Fail("bad magic");
    if (Get<uint16_t>() != kWireVersion) return Fail("version mismatch");
    if (Get<uint16_t>() != static_cast<uint16_t>(want)) return Fail("unexpected message kind");
    return ok();
  }
  template <typename T>
  T Get() {
    T value{};
    if (!ok_ || pos_ + sizeof(T) > bytes_.size()) {
      Fail("truncated");
      return value;
    }
    std::memcpy(&value, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return value;
  }
  std::string GetString() {
    const uint32_t n = Get<uint32_t>();
    if (n > kMaxWireString) {
      Fail("string too long");
      return {};
    }
    if (!ok_ || pos_ + n > bytes_.size()) {
      Fail("truncated string");
      return {};
    }
    std::string s(reinterpret_cast<const char*>(bytes_.data() + pos_), n);
    pos_ += n;
    return s;
  }
  void GetBytes(uint8_t* out, size_t n) {
    if (!ok_ || pos_ + n > bytes_.size()) {
      Fail("truncated");
      return;
    }
    std::memcpy(out, bytes_.data() + pos_, n);
    pos_ += n;
  }
  std::vector<double> GetDoubles(size_t max) {
    const uint32_t n = Get<uint32_t>();
    if (n > max) {
      Fail("too many timestamps");
      return {};
    }
    std::vector<double> v;
    v.reserve(n);
    for (uint32_t i = 0; i < n && ok_; ++i) v.push_back(Get<double>());
    return v;
  }
  bool Fail(const char* why) {
    if (ok_) why_ = why;
    ok_ = false;
    return false;
  }
  bool ok() const { return ok_; }
  bool AtEnd() const { return pos_ == bytes_.size(); }
  const char* why() const { return why_; }

 private:
  std::span<const uint8_t> bytes_;
  size_t pos_ = 0;
  bool ok_ = true;
  const char* why_ = "";
};

template <typename E>
bool EnumInRange(uint8_t v, E last) {
  return v <= static_cast<uint8_t>(last);
}

}  // namespace

std::vector<uint8_t> EncodeReady(const ReadyMessage& r) {
  Writer w(MessageKind::kReady);
  w.Put<uint8_t>(r.seccomp);
  w.Put<uint8_t>(r.memory_limit);
  w.Put<uint8_t>(r.cpu_limit);
  w.Put<uint8_t>(r.network_namespace);
  return w.Take();
}

StatusOr<ReadyMessage> DecodeReady(std::span<const uint8_t> bytes) {
  Reader r(bytes);
  ReadyMessage m;
  if (r.Header(MessageKind::kReady)) {
    m.seccomp = r.Get<uint8_t>() != 0;
    m.memory_limit = r.Get<uint8_t>() != 0;
    m.cpu_limit = r.Get<uint8_t>() != 0;
    m.network_namespace = r.Get<uint8_t>() != 0;
  }
  if (!r.ok() || !r.AtEnd()) {
    return InternalError("malformed ready message from the media worker ({})",
                         r.ok() ? "trailing bytes" : r.why());
  }
  return m;
}

std::vector<uint8_t> EncodeFork() { return Writer(MessageKind::kFork).Take(); }

Status DecodeFork(std::span<const uint8_t> bytes) {
  Reader r(bytes);
  if (!r.Header(MessageKind::kFork) || !r.AtEnd()) {
    return InvalidArgumentError("malformed fork message ({})", r.ok() ? "trailing bytes" : r.why());
  }
  return absl::OkStatus();
}

namespace {

// The zygote's replies: a kind and two int32 fields.
std::vector<uint8_t> EncodeTwoInts(MessageKind kind, int32_t first, int32_t second) {
  Writer w(kind);
  w.Put<int32_t>(first);
  w.Put<int32_t>(second);
  return w.Take();
}

// INTERNAL naming `what` unless the message is `kind` with exactly two int32 fields that `valid`
// accepts.
StatusOr<std::pair<int32_t, int32_t>> DecodeTwoInts(std::span<const uint8_t> bytes,
                                                    MessageKind kind, const char* what,
                                                    bool (*valid)(int32_t, int32_t)) {
  Reader r(bytes);
  std::pair<int32_t, int32_t> fields{-1, 0};
  if (r.Header(kind)) {
    fields.first = r.Get<int32_t>();
    fields.second = r.Get<int32_t>();
  }
  if (!r.ok() || !r.AtEnd() || !valid(fields.first, fields.second)) {
    return InternalError("malformed {} message from the media workers' zygote ({})", what,
                         r.ok() ? "fields" : r.why());
  }
  return fields;
}

}  // namespace

std::vector<uint8_t> EncodeForked(const ForkedMessage& f) {
  return EncodeTwoInts(MessageKind::kForked, f.pid, f.error);
}

std::vector<uint8_t> EncodeExited(const ExitedMessage& e) {
  return EncodeTwoInts(MessageKind::kExited, e.pid, e.wait_status);
}

StatusOr<MessageKind> ZygoteMessageKind(std::span<const uint8_t> bytes) {
  for (MessageKind kind : {MessageKind::kForked, MessageKind::kExited}) {
    Reader r(bytes);
    if (r.Header(kind)) return kind;
  }
  return InternalError("malformed message from the media workers' zygote (header)");
}

StatusOr<ForkedMessage> DecodeForked(std::span<const uint8_t> bytes) {
  // A pid, or the errno of a fork that made none.
  FZ_ASSIGN_OR_RETURN(const auto fields, DecodeTwoInts(bytes, MessageKind::kForked, "forked",
                                                       [](int32_t pid, int32_t error) {
                                                         return pid > 0 || error != 0;
                                                       }));
  return ForkedMessage{.pid = fields.first, .error = fields.second};
}

StatusOr<ExitedMessage> DecodeExited(std::span<const uint8_t> bytes) {
  FZ_ASSIGN_OR_RETURN(const auto fields,
                      DecodeTwoInts(bytes, MessageKind::kExited, "exited",
                                    [](int32_t pid, int32_t) { return pid > 0; }));
  return ExitedMessage{.pid = fields.first, .wait_status = fields.second};
}

std::vector<uint8_t> EncodeRequest(const WorkRequest& q) {
  Writer w(MessageKind::kRequest);
  w.Put(static_cast<uint8_t>(q.op));
  w.Put(static_cast<uint8_t>(q.sampling.mode));
  w.Put<int32_t>(q.sampling.num_frames);
  w.Put<double>(q.sampling.fps);
  const PreprocessSpec& p = q.preprocess;
  w.Put(static_cast<uint8_t>(p.resize));
  w.Put<int32_t>(p.height);
  w.Put<int32_t>(p.width);
  w.Put<int32_t>(p.shortest_edge);
  w.Put(static_cast<uint8_t>(p.interpolation));
  w.Put(static_cast<uint8_t>(p.resampler));
  w.Put<uint8_t>(p.pad_to_square);
  w.PutBytes(p.pad_rgb.data(), 3);
  w.Put<int32_t>(p.crop_height);
  w.Put<int32_t>(p.crop_width);
  w.Put<double>(p.rescale_factor);
  for (float m : p.mean) w.Put(m);
  for (float s : p.std) w.Put(s);
  w.Put(static_cast<uint8_t>(p.channel_order));
  w.Put<uint32_t>(static_cast<uint32_t>(p.anyres_pinpoints.size()));
  for (const auto& [height, width] : p.anyres_pinpoints) {
    w.Put<int32_t>(static_cast<int32_t>(height));
    w.Put<int32_t>(static_cast<int32_t>(width));
  }
  const MediaLimits& l = q.limits;
  w.Put<int64_t>(l.max_bytes);
  w.Put<double>(l.max_duration_s);
  w.Put<int32_t>(l.max_width);
  w.Put<int32_t>(l.max_height);
  w.Put<int32_t>(l.max_frames);
  w.Put<double>(l.max_decode_s);
  w.Put<int32_t>(l.decode_threads);
  w.Put<int64_t>(l.max_output_bytes);
  w.Put<uint8_t>(q.has_content_hash);
  w.PutBytes(q.content_hash.data(), q.content_hash.size());
  return w.Take();
}

StatusOr<WorkRequest> DecodeRequest(std::span<const uint8_t> bytes) {
  Reader r(bytes);
  WorkRequest q;
  if (r.Header(MessageKind::kRequest)) {
    const uint8_t op = r.Get<uint8_t>();
    if (op < 1 || op > 3) r.Fail("unknown op");
    q.op = static_cast<WorkOp>(op);
    const uint8_t mode = r.Get<uint8_t>();
    if (!EnumInRange(mode, FrameSamplingSpec::Mode::kFps)) r.Fail("unknown sampling mode");
    q.sampling.mode = static_cast<FrameSamplingSpec::Mode>(mode);
    q.sampling.num_frames = r.Get<int32_t>();
    q.sampling.fps = r.Get<double>();
    PreprocessSpec& p = q.preprocess;
    const uint8_t resize = r.Get<uint8_t>();
    if (!EnumInRange(resize, ResizeMode::kShortestEdge)) r.Fail("unknown resize mode");
    p.resize = static_cast<ResizeMode>(resize);
    p.height = r.Get<int32_t>();
    p.width = r.Get<int32_t>();
    p.shortest_edge = r.Get<int32_t>();
    const uint8_t interpolation = r.Get<uint8_t>();
    if (!EnumInRange(interpolation, Interpolation::kNearest)) r.Fail("unknown interpolation");
    p.interpolation = static_cast<Interpolation>(interpolation);
    const uint8_t resampler = r.Get<uint8_t>();
    if (!EnumInRange(resampler, Resampler::kTorchvisionFloat)) r.Fail("unknown resampler");
    p.resampler = static_cast<Resampler>(resampler);
    p.pad_to_square = r.Get<uint8_t>() != 0;
    r.GetBytes(p.pad_rgb.data(), 3);
    p.crop_height = r.Get<int32_t>();
    p.crop_width = r.Get<int32_t>();
    p.rescale_factor = r.Get<double>();
    for (float& m : p.mean) m = r.Get<float>();
    for (float& s : p.std) s = r.Get<float>();
    const uint8_t order = r.Get<uint8_t>();
    if (!EnumInRange(order, ChannelOrder::kBgr)) r.Fail("unknown channel order");
    p.channel_order = static_cast<ChannelOrder>(order);
    const uint32_t pinpoints = r.Get<uint32_t>();
    if (pinpoints > kMaxAnyresPinpoints) r.Fail("too many anyres pinpoints");
    for (uint32_t i = 0; r.ok() && i < pinpoints; ++i) {
      const int32_t h = r.Get<int32_t>();
      p.anyres_pinpoints.emplace_back(h, r.Get<int32_t>());
    }
    MediaLimits& l = q.limits;
    l.max_bytes = r.Get<int64_t>();
    l.max_duration_s = r.Get<double>();
    l.max_width = r.Get<int32_t>();
    l.max_height = r.Get<int32_t>();
    l.max_frames = r.Get<int32_t>();
    l.max_decode_s = r.Get<double>();
    l.decode_threads = r.Get<int32_t>();
    l.max_output_bytes = r.Get<int64_t>();
    q.has_content_hash = r.Get<uint8_t>() != 0;
    r.GetBytes(q.content_hash.data(), q.content_hash.size());
    if (l.max_frames < 1 || l.max_frames > kMaxWireFrames || l.max_width < 1 || l.max_height < 1 ||
        l.max_bytes < 0 || l.max_output_bytes < 0 || !(l.max_decode_s > 0) ||
        !(l.max_duration_s > 0) || l.decode_threads < 0 || l.decode_threads > 64) {
      r.Fail("limits out of range");
    }
  }
  if (!r.ok() || !r.AtEnd()) {
    return InvalidArgumentError("malformed request to the media worker ({})",
                                r.ok() ? "trailing bytes" : r.why());
  }
  return q;
}

std::vector<uint8_t> EncodeResponse(const WorkResponse& s) {
  Writer w(MessageKind::kResponse);
  w.Put<int32_t>(s.code);
  w.PutString(s.message);
  const MediaInfo& i = s.result.info;
  w.Put(static_cast<uint8_t>(i.kind));
  w.PutString(i.mime_type);
  w.PutString(i.container);
  w.PutString(i.codec);
  w.PutString(i.pixel_format);
  w.Put<int32_t>(i.width);
  w.Put<int32_t>(i.height);
  w.Put<int32_t>(i.coded_width);
  w.Put<int32_t>(i.coded_height);
  w.Put<int32_t>(i.rotation_degrees);
  w.Put<double>(i.duration_s);
  w.Put<double>(i.fps);
  w.Put<int64_t>(i.frame_count);
  w.Put<uint8_t>(i.has_audio);
  w.Put<int64_t>(i.size_bytes);
  w.PutBytes(i.content_hash.data(), i.content_hash.size());
  const FrameBatch& f = s.result.frames;
  w.Put<uint8_t>(s.has_frames);
  w.Put<int32_t>(f.num_frames);
  w.Put<int32_t>(f.channels);
  w.Put<int32_t>(f.height);
  w.Put<int32_t>(f.width);
  w.PutDoubles(s.result.timestamps_s);
  w.PutDoubles(s.result.targets_s);
  const DecodedMedia::Stats& st = s.result.stats;
  w.Put<int32_t>(st.seeks);
  w.Put<int64_t>(st.packets);
  w.Put<int64_t>(st.frames_decoded);
  w.Put<int64_t>(st.decode_errors);
  return w.Take();
}

StatusOr<WorkResponse> DecodeResponse(std::span<const uint8_t> bytes, const MediaLimits& limits) {
  Reader r(bytes);
  WorkResponse s;
  if (r.Header(MessageKind::kResponse)) {
    s.code = r.Get<int32_t>();
    if (s.code < 0 || s.code > 16) r.Fail("unknown status code");
    s.message = r.GetString();
    MediaInfo& i = s.result.info;
    const uint8_t kind = r.Get<uint8_t>();
    if (!EnumInRange(kind, MediaKind::kImage)) r.Fail("unknown media kind");
    i.kind = static_cast<MediaKind>(kind);
    i.mime_type = r.GetString();
    i.container = r.GetString();
    i.codec = r.GetString();
    i.pixel_format = r.GetString();
    i.width = r.Get<int32_t>();
    i.height = r.Get<int32_t>();
    i.coded_width = r.Get<int32_t>();
    i.coded_height = r.Get<int32_t>();
    i.rotation_degrees = r.Get<int32_t>();
    i.duration_s = r.Get<double>();
    i.fps = r.Get<double>();
    i.frame_count = r.Get<int64_t>();
    i.has_audio = r.Get<uint8_t>() != 0;
    i.size_bytes = r.Get<int64_t>();
    r.GetBytes(i.content_hash.data(), i.content_hash.size());
    if (i.width < 0 || i.height < 0 || i.width > limits.max_width || i.height > limits.max_height ||
        i.size_bytes < 0 || i.size_bytes > limits.max_bytes || !std::isfinite(i.duration_s) ||
        i.duration_s < 0 || !std::isfinite(i.fps) || i.fps < 0 || i.frame_count < 0 ||
        (i.rotation_degrees % 90) != 0 || i.rotation_degrees < 0 || i.rotation_degrees >= 360) {
      r.Fail("media info out of range");
    }
    FrameBatch& f = s.result.frames;
    s.has_frames = r.Get<uint8_t>() != 0;
    f.num_frames = r.Get<int32_t>();
    f.channels = r.Get<int32_t>();
    f.height = r.Get<int32_t>();
    f.width = r.Get<int32_t>();
    s.result.timestamps_s = r.GetDoubles(static_cast<size_t>(std::max(limits.max_frames, 1)));
    s.result.targets_s = r.GetDoubles(static_cast<size_t>(std::max(limits.max_frames, 1)));
    DecodedMedia::Stats& st = s.result.stats;
    st.seeks = r.Get<int32_t>();
    st.packets = r.Get<int64_t>();
    st.frames_decoded = r.Get<int64_t>();
    st.decode_errors = r.Get<int64_t>();
    for (double t : s.result.timestamps_s) {
      if (!std::isfinite(t)) r.Fail("non-finite timestamp");
    }
    for (double t : s.result.targets_s) {
      if (!std::isfinite(t)) r.Fail("non-finite timestamp");
    }
    if (s.has_frames) {
      // Each dimension is bounded before they are multiplied (the product then fits in 64 bits).
      const bool dims_ok = f.num_frames >= 1 && f.num_frames <= limits.max_frames &&
                           f.channels == 3 && f.height >= 1 && f.width >= 1 && f.height <= 16384 &&
                           f.width <= 16384;
      if (!dims_ok ||
          int64_t{f.num_frames} * f.channels * f.height * f.width *
                  static_cast<int64_t>(sizeof(float)) >
              limits.max_output_bytes ||
          static_cast<size_t>(f.num_frames) != s.result.timestamps_s.size()) {
        r.Fail("frame shape out of range");
      }
    }
    if (s.code == 0 && (s.result.timestamps_s.size() != s.result.targets_s.size())) {
      r.Fail("frame and target times differ in count");
    }
  }
  if (!r.ok() || !r.AtEnd()) {
    return InternalError("malformed reply from the media worker ({})",
                         r.ok() ? "trailing bytes" : r.why());
  }
  return s;
}

Status ResponseStatus(const WorkResponse& response) {
  if (response.code == 0) return absl::OkStatus();
  return Status(static_cast<absl::StatusCode>(response.code), response.message);
}

}  // namespace framezip::media::worker
