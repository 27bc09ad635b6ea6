#include "kvstore/service/remote_store.h"

#include <algorithm>

#include "common/crc32c.h"
#include "kvstore/service/kvstore_service.h"
#include "kvstore/service/proto_convert.h"

namespace framezip::kvstore::service {
namespace {

template <typename Repeated>
void AddKeys(std::span<const BlockKey> keys, Repeated* out) {
  for (const BlockKey& key : keys) out->Add(KeyToProto(key));
}

Status Annotated(const grpc::Status& status, const char* rpc, const std::string& address) {
  return Annotate(FromGrpc(status), fmt::format("kvstore {} at {}", rpc, address));
}

}  // namespace

StatusOr<std::unique_ptr<RemoteStore>> RemoteStore::Connect(RemoteStoreOptions options) {
  if (options.address.empty()) return InvalidArgumentError("remote kv store: no address");
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxMessageBytes);
  args.SetMaxSendMessageSize(kMaxMessageBytes);
  args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, kStreamWindowBytes);
  const int backoff_ms =
      static_cast<int>(std::max<int64_t>(options.max_reconnect_backoff.count(), 1));
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, std::min(backoff_ms, 100));
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, std::min(backoff_ms, 100));
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, backoff_ms);
  auto channel =
      grpc::CreateCustomChannel(options.address, grpc::InsecureChannelCredentials(), args);
  if (options.connect_timeout.count() > 0 &&
      !channel->WaitForConnected(std::chrono::system_clock::now() + options.connect_timeout)) {
    return UnavailableError("remote kv store: cannot connect to {} within {} ms", options.address,
                            options.connect_timeout.count());
  }
  return std::unique_ptr<RemoteStore>(new RemoteStore(std::move(options), std::move(channel)));
}

RemoteStore::RemoteStore(RemoteStoreOptions options, std::shared_ptr<grpc::Channel> channel)
    : options_(std::move(options)),
      channel_(std::move(channel)),
      stub_(v1::KvStore::NewStub(channel_)) {}

void RemoteStore::SetDeadline(grpc::ClientContext* context) const {
  context->set_deadline(std::chrono::system_clock::now() + options_.timeout);
}

StatusOr<PutResult> RemoteStore::Put(const BlockKey& key, std::string bytes,
                                     const PutOptions& options) {
  grpc::ClientContext context;
  SetDeadline(&context);
  v1::PutResponse response;
  auto writer = stub_->Put(&context, &response);
  v1::PutRequest request;
  v1::BlockHeader* header = request.mutable_header();
  header->set_key(KeyToProto(key));
  header->set_size_bytes(bytes.size());
  header->set_crc32c(Crc32c(bytes));
  header->mutable_placement()->set_tier(TierToProto(options.highest_tier));
  header->mutable_placement()->set_precision(PrecisionToProto(options.precision));
  header->mutable_placement()->set_redis_ttl_seconds(options.redis_ttl_seconds);
  header->set_pin_session_id(options.pin_session_id);
  // The header is buffered so it leaves with the first chunk; the last chunk half-closes the
  // stream in the same write (no separate WritesDone round).
  // (A failed write shows in Finish()'s status.)
  bool ok = true;
  if (bytes.empty()) {
    writer->WriteLast(request, grpc::WriteOptions());
  } else {
    ok = writer->Write(request, grpc::WriteOptions().set_buffer_hint());
  }
  for (size_t offset = 0; ok && offset < bytes.size(); offset += options_.chunk_bytes) {
    const size_t n = std::min<size_t>(options_.chunk_bytes, bytes.size() - offset);
    request.set_chunk(bytes.data() + offset, n);
    if (offset + n == bytes.size()) {
      writer->WriteLast(request, grpc::WriteOptions());
    } else {
      ok = writer->Write(request);
    }
  }
  const grpc::Status status = writer->Finish();
  if (!status.ok()) return Annotated(status, "Put", options_.address);
  PutResult result;
  result.already_present = response.already_present();
  for (int t : response.tiers()) {
    if (t >= 2 && t <= 5) result.tiers.push_back(static_cast<Tier>(t));
  }
  result.durable = response.durable();
  return result;
}

StatusOr<Block> RemoteStore::Get(const BlockKey& key, const GetOptions& options) {
  grpc::ClientContext context;
  SetDeadline(&context);
  v1::GetRequest request;
  request.set_key(KeyToProto(key));
  request.set_promote(options.promote);
  auto reader = stub_->Get(&context, request);
  v1::GetResponse response;
  Block block;
  auto bytes = std::make_shared<std::string>();
  uint64_t expected = 0;
  bool have_header = false;
  while (reader->Read(&response)) {
    if (response.has_header()) {
      have_header = true;
      expected = response.header().size_bytes();
      block.crc32c = response.header().crc32c();
      block.precision = PrecisionFromProto(response.header().placement().precision());
      const int tier = static_cast<int>(response.served_from());
      block.served_from = tier >= 2 && tier <= 5 ? static_cast<Tier>(tier) : Tier::kRemote;
      bytes->reserve(expected);
    } else {
      bytes->append(response.chunk());
    }
  }
  const grpc::Status status = reader->Finish();
  if (!status.ok()) return Annotated(status, "Get", options_.address);
  if (!have_header || bytes->size() != expected || Crc32c(*bytes) != block.crc32c) {
    return DataLossError("kvstore Get at {}: block {} arrived incomplete or failed its CRC",
                         options_.address, BlockKeyHex(key));
  }
  block.bytes = std::move(bytes);
  return block;
}

StatusOr<LookupResult> RemoteStore::Lookup(std::span<const BlockKey> keys,
                                           const LookupOptions& options) {
  grpc::ClientContext context;
  SetDeadline(&context);
  v1::LookupRequest request;
  AddKeys(keys, request.mutable_keys());
  request.set_pin_session_id(options.pin_session_id);
  request.set_prefetch(options.prefetch);
  v1::LookupResponse response;
  const grpc::Status status = stub_->Lookup(&context, request, &response);
  if (!status.ok()) return Annotated(status, "Lookup", options_.address);
  LookupResult result;
  result.present_prefix = response.present_prefix();
  for (int t : response.tiers()) {
    result.tiers.push_back(t >= 2 && t <= 5 ? static_cast<Tier>(t) : Tier::kRemote);
  }
  result.present_bytes = response.present_bytes();
  return result;
}

StatusOr<uint32_t> RemoteStore::Delete(std::span<const BlockKey> keys) {
  grpc::ClientContext context;
  SetDeadline(&context);
  v1::DeleteRequest request;
  AddKeys(keys, request.mutable_keys());
  v1::DeleteResponse response;
  const grpc::Status status = stub_->Delete(&context, request, &response);
  if (!status.ok()) return Annotated(status, "Delete", options_.address);
  return response.deleted();
}

StatusOr<uint32_t> RemoteStore::Pin(const std::string& session_id, std::span<const BlockKey> keys,
                                    std::chrono::seconds ttl) {
  grpc::ClientContext context;
  SetDeadline(&context);
  v1::PinRequest request;
  request.set_session_id(session_id);
  AddKeys(keys, request.mutable_keys());
  request.set_ttl_seconds(static_cast<uint32_t>(ttl.count()));
  v1::PinResponse response;
  const grpc::Status status = stub_->Pin(&context, request, &response);
  if (!status.ok()) return Annotated(status, "Pin", options_.address);
  return response.affected();
}

StatusOr<uint32_t> RemoteStore::Unpin(const std::string& session_id,
                                      std::span<const BlockKey> keys) {
  grpc::ClientContext context;
  SetDeadline(&context);
  v1::PinRequest request;
  request.set_session_id(session_id);
  AddKeys(keys, request.mutable_keys());
  v1::PinResponse response;
  const grpc::Status status = stub_->Unpin(&context, request, &response);
  if (!status.ok()) return Annotated(status, "Unpin", options_.address);
  return response.affected();
}

StatusOr<StoreStats> RemoteStore::Stats() {
  grpc::ClientContext context;
  SetDeadline(&context);
  v1::StatsResponse response;
  const grpc::Status status = stub_->Stats(&context, v1::StatsRequest(), &response);
  if (!status.ok()) return Annotated(status, "Stats", options_.address);
  StoreStats stats;
  for (const v1::TierStats& t : response.tiers()) stats.tiers.push_back(TierStatsFromProto(t));
  return stats;
}

}  // namespace framezip::kvstore::service
