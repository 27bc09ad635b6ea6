// One call for a process that needs a KV store (framezip-server, tools): an embedded TieredStore
// by default, or a RemoteStore when --kv-address names a shared framezip-kvstore.
//
//   kvstore::StoreFlags store_flags;
//   kvstore::RegisterStoreFlags(flags, &store_flags);
//   ... parse ...
//   FZ_ASSIGN_OR_RETURN(auto store, kvstore::service::OpenStore(store_flags, &metrics));
#pragma once

#include <memory>

#include "kvstore/metrics.h"
#include "kvstore/store.h"
#include "kvstore/store_flags.h"

namespace framezip::kvstore::service {

// `metrics` (may be nullptr) is used by the embedded store only and must outlive it.
StatusOr<std::unique_ptr<KvStore>> OpenStore(const StoreFlags& flags, StoreMetrics* metrics);

}  // namespace framezip::kvstore::service
