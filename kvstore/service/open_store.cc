#include "kvstore/service/open_store.h"

#include "kvstore/service/remote_store.h"
#include "kvstore/tiered_store.h"

namespace framezip::kvstore::service {

StatusOr<std::unique_ptr<KvStore>> OpenStore(const StoreFlags& flags, StoreMetrics* metrics) {
  if (!flags.address.empty()) {
    FZ_ASSIGN_OR_RETURN(auto remote, RemoteStore::Connect({.address = flags.address}));
    return std::unique_ptr<KvStore>(std::move(remote));
  }
  FZ_ASSIGN_OR_RETURN(TieredStoreOptions options, TieredStoreOptionsFrom(flags, metrics));
  FZ_ASSIGN_OR_RETURN(auto store, TieredStore::Open(std::move(options)));
  return std::unique_ptr<KvStore>(std::move(store));
}

}  // namespace framezip::kvstore::service
