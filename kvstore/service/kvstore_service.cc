#include "kvstore/service/kvstore_service.h"

#include <thread>
#include <vector>

#include "common/crc32c.h"
#include "kvstore/service/proto_convert.h"

namespace framezip::kvstore::service {
namespace {

StatusOr<std::vector<BlockKey>> KeysFromProto(
    const google::protobuf::RepeatedPtrField<std::string>& keys) {
  std::vector<BlockKey> out;
  out.reserve(keys.size());
  for (int i = 0; i < keys.size(); ++i) {
    FZ_ASSIGN_OR_RETURN(BlockKey key, KeyFromProto(keys[i], fmt::format("keys[{}]", i)));
    out.push_back(key);
  }
  return out;
}

}  // namespace

void ConfigureServerBuilder(grpc::ServerBuilder& builder) {
  builder.SetMaxReceiveMessageSize(kMaxMessageBytes);
  builder.SetMaxSendMessageSize(kMaxMessageBytes);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, kStreamWindowBytes);
}

class KvStoreService::CallGuard {
 public:
  explicit CallGuard(std::atomic<int>& count) : count_(count) { ++count_; }
  ~CallGuard() { --count_; }

 private:
  std::atomic<int>& count_;
};

KvStoreService::KvStoreService(KvStore* store, KvStoreServiceOptions options)
    : store_(store), options_(options) {}

grpc::Status KvStoreService::Put(grpc::ServerContext*, grpc::ServerReader<v1::PutRequest>* reader,
                                 v1::PutResponse* response) {
  CallGuard guard(in_flight_);
  v1::PutRequest request;
  if (!reader->Read(&request) || !request.has_header()) {
    return ToGrpc(InvalidArgumentError("Put: the first message must carry the header"));
  }
  const v1::BlockHeader header = request.header();
  auto key = KeyFromProto(header.key(), "header.key");
  if (!key.ok()) return ToGrpc(key.status());
  if (header.size_bytes() > options_.max_block_bytes) {
    return ToGrpc(ResourceExhaustedError("Put: block of {} bytes is over the {}-byte maximum",
                                         header.size_bytes(), options_.max_block_bytes));
  }
  auto tier = TierFromProto(header.placement().tier());
  if (!tier.ok()) return ToGrpc(tier.status());
  std::string bytes;
  bytes.reserve(header.size_bytes());
  while (reader->Read(&request)) {
    if (request.has_header()) {
      return ToGrpc(InvalidArgumentError("Put: a second header after {} bytes", bytes.size()));
    }
    if (bytes.size() + request.chunk().size() > header.size_bytes()) {
      return ToGrpc(
          InvalidArgumentError("Put: more bytes than header.size_bytes = {}", header.size_bytes()));
    }
    bytes.append(request.chunk());
  }
  if (bytes.size() != header.size_bytes()) {
    return ToGrpc(InvalidArgumentError("Put: got {} bytes, header.size_bytes says {}", bytes.size(),
                                       header.size_bytes()));
  }
  if (const uint32_t crc = Crc32c(bytes); crc != header.crc32c()) {
    return ToGrpc(InvalidArgumentError(
        "Put: CRC32C of the bytes is {:08x}, header says {:08x}; block not stored", crc,
        header.crc32c()));
  }
  PutOptions options;
  options.highest_tier = *tier;
  options.precision = PrecisionFromProto(header.placement().precision());
  options.redis_ttl_seconds = header.placement().redis_ttl_seconds();
  options.pin_session_id = header.pin_session_id();
  if (options_.test_put_delay.count() > 0) std::this_thread::sleep_for(options_.test_put_delay);
  auto result = store_->Put(*key, std::move(bytes), options);
  if (!result.ok()) return ToGrpc(result.status());
  response->set_already_present(result->already_present);
  for (Tier t : result->tiers) response->add_tiers(TierToProto(t));
  response->set_durable(result->durable);
  return grpc::Status::OK;
}

grpc::Status KvStoreService::Get(grpc::ServerContext* context, const v1::GetRequest* request,
                                 grpc::ServerWriter<v1::GetResponse>* writer) {
  CallGuard guard(in_flight_);
  auto key = KeyFromProto(request->key(), "key");
  if (!key.ok()) return ToGrpc(key.status());
  auto block = store_->Get(*key, GetOptions{.promote = request->promote()});
  if (!block.ok()) return ToGrpc(block.status());
  const std::string& bytes = *block->bytes;
  v1::GetResponse head;
  v1::BlockHeader* header = head.mutable_header();
  header->set_key(request->key());
  header->set_size_bytes(bytes.size());
  header->set_crc32c(block->crc32c);
  header->mutable_placement()->set_tier(TierToProto(block->served_from));
  header->mutable_placement()->set_precision(PrecisionToProto(block->precision));
  head.set_served_from(TierToProto(block->served_from));
  if (!writer->Write(head)) return grpc::Status(grpc::StatusCode::CANCELLED, "client went away");
  v1::GetResponse chunk;
  for (size_t offset = 0; offset < bytes.size(); offset += options_.chunk_bytes) {
    if (context->IsCancelled()) return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled");
    chunk.set_chunk(bytes.data() + offset,
                    std::min<size_t>(options_.chunk_bytes, bytes.size() - offset));
    if (!writer->Write(chunk)) {
      return grpc::Status(grpc::StatusCode::CANCELLED, "client went away");
    }
  }
  return grpc::Status::OK;
}

grpc::Status KvStoreService::Lookup(grpc::ServerContext*, const v1::LookupRequest* request,
                                    v1::LookupResponse* response) {
  CallGuard guard(in_flight_);
  auto keys = KeysFromProto(request->keys());
  if (!keys.ok()) return ToGrpc(keys.status());
  auto result = store_->Lookup(
      *keys, {.pin_session_id = request->pin_session_id(), .prefetch = request->prefetch()});
  if (!result.ok()) return ToGrpc(result.status());
  response->set_present_prefix(result->present_prefix);
  for (Tier t : result->tiers) response->add_tiers(TierToProto(t));
  response->set_present_bytes(result->present_bytes);
  return grpc::Status::OK;
}

grpc::Status KvStoreService::Delete(grpc::ServerContext*, const v1::DeleteRequest* request,
                                    v1::DeleteResponse* response) {
  CallGuard guard(in_flight_);
  auto keys = KeysFromProto(request->keys());
  if (!keys.ok()) return ToGrpc(keys.status());
  auto deleted = store_->Delete(*keys);
  if (!deleted.ok()) return ToGrpc(deleted.status());
  response->set_deleted(*deleted);
  return grpc::Status::OK;
}

grpc::Status KvStoreService::Pin(grpc::ServerContext*, const v1::PinRequest* request,
                                 v1::PinResponse* response) {
  CallGuard guard(in_flight_);
  if (request->session_id().empty()) {
    return ToGrpc(InvalidArgumentError("Pin: session_id is empty"));
  }
  auto keys = KeysFromProto(request->keys());
  if (!keys.ok()) return ToGrpc(keys.status());
  auto pinned =
      store_->Pin(request->session_id(), *keys, std::chrono::seconds(request->ttl_seconds()));
  if (!pinned.ok()) return ToGrpc(pinned.status());
  response->set_affected(*pinned);
  return grpc::Status::OK;
}

grpc::Status KvStoreService::Unpin(grpc::ServerContext*, const v1::PinRequest* request,
                                   v1::PinResponse* response) {
  CallGuard guard(in_flight_);
  auto keys = KeysFromProto(request->keys());
  if (!keys.ok()) return ToGrpc(keys.status());
  auto unpinned = store_->Unpin(request->session_id(), *keys);
  if (!unpinned.ok()) return ToGrpc(unpinned.status());
  response->set_affected(*unpinned);
  return grpc::Status::OK;
}

grpc::Status KvStoreService::Stats(grpc::ServerContext*, const v1::StatsRequest*,
                                   v1::StatsResponse* response) {
  CallGuard guard(in_flight_);
  auto stats = store_->Stats();
  if (!stats.ok()) return ToGrpc(stats.status());
  for (const TierStats& s : stats->tiers) TierStatsToProto(s, response->add_tiers());
  return grpc::Status::OK;
}

}  // namespace framezip::kvstore::service
