// SharedSessions (server/shared_sessions.h) over an embedded store: a session's revisions are
// published and found latest-first, a replica knowing the latest finds nothing newer, a deleted
// session reads as deleted, another principal never finds it, two replicas writing one revision
// conflict, a store that lost the records reads as lost (not deleted) and is filled in by the
// next publish, and the record round-trips every field the next turn needs.
#include "server/shared_sessions.h"

#include <catch2/catch.hpp>

#include "kvstore/tiered_store.h"

namespace framezip::server {
namespace {

SessionRecord Record(uint64_t revision) {
  SessionRecord r;
  r.spec.session_id = "s1";
  r.spec.model = "tiny";
  r.spec.policy.options = engine::compress::ZipVlOptions{.tau = 0.9};
  r.spec.sampling.max_tokens = 12;
  r.spec.sampling.stop = {"\n\n"};
  r.spec.frames.num_frames = 4;
  r.spec.system_prompt = "You are terse.";
  r.spec.labels = {{"team", "a"}};
  r.owner = "alice";
  r.key = "s1.00112233445566778899aabbccddeeff";
  r.revision = revision;
  r.turns = static_cast<uint32_t>(revision);
  MediaInfo m;
  m.media_id = "media-1";
  m.name = "clip.mp4";
  m.content_hash = std::string(64, 'a');
  m.frame_timestamps = {0, 0.25, 0.5};
  m.visual_tokens = 37;
  m.path = "/this/replica/only";
  r.media.push_back(m);
  r.messages.push_back({Role::kSystem, {{"You are terse.", ""}}});
  r.messages.push_back({Role::kUser, {{"", "media-1"}, {"What moves?", ""}}});
  r.messages.push_back({Role::kAssistant, {{"a circle", ""}}});
  return r;
}

SharedKvState Kv() {
  SharedKvState kv;
  kv.stored_messages = 3;
  kv.precision = KvPrecision::kF16;
  SharedKvState::Block b;
  b.key.fill(7);
  b.bytes = 4096;
  kv.segments = {{b, b}, {b}};
  return kv;
}

TEST_CASE("a shared session record round-trips what the next turn needs", "[unit][server]") {
  const SessionRecord r = Record(2);
  auto back = DecodeSharedSession(EncodeSharedSession(r, Kv()));
  REQUIRE(back.ok());
  const SessionRecord& b = back->record;
  CHECK(b.key == r.key);
  CHECK(b.owner == "alice");
  CHECK(b.revision == 2);
  CHECK(KindOf(b.spec.policy) == PolicyKind::kZipVl);
  CHECK(std::get<engine::compress::ZipVlOptions>(b.spec.policy.options).tau == 0.9);
  CHECK(b.spec.sampling.stop == r.spec.sampling.stop);
  CHECK(b.spec.labels == r.spec.labels);
  REQUIRE(b.messages.size() == 3);
  CHECK(b.messages[1].content[0].media_id == "media-1");
  CHECK(b.messages[2].content[0].text == "a circle");
  REQUIRE(b.media.size() == 1);
  CHECK(b.media[0].frame_timestamps == r.media[0].frame_timestamps);
  CHECK(b.media[0].path.empty());  // each replica places media in its own directory
  CHECK(back->kv.stored_messages == 3);
  REQUIRE(back->kv.segments.size() == 2);
  CHECK(back->kv.segments[0][1].key == Kv().segments[0][1].key);
  CHECK(absl::IsDataLoss(DecodeSharedSession("{\"version\": 99}").status()));
  CHECK(absl::IsDataLoss(DecodeSharedSession("not json").status()));
}

TEST_CASE("revisions are found latest-first, per owner, and deletion reads as deleted",
          "[unit][server]") {
  auto store = kvstore::TieredStore::Open({});
  REQUIRE(store.ok());
  SharedSessions shared(store->get(), "tiny");
  const std::string key = Record(0).key;
  auto find = [&](const std::string& owner, int64_t known) {
    auto found = shared.Find(owner, "s1", known, known >= 0 ? key : "");
    REQUIRE(found.ok());
    return *found;
  };
  CHECK(find("alice", -1).found == SharedSessions::Found::kDeleted);  // never published
  REQUIRE(shared.Publish(Record(0), {}).ok());
  REQUIRE(shared.Publish(Record(1), Kv()).ok());
  REQUIRE(shared.Publish(Record(2), Kv()).ok());
  auto latest = find("alice", -1);
  REQUIRE(latest.found == SharedSessions::Found::kNewer);
  CHECK(latest.session->record.revision == 2);
  CHECK(find("alice", 0).session->record.revision == 2);
  CHECK(find("alice", 2).found == SharedSessions::Found::kNothingNewer);
  // Another principal has no such session.
  CHECK(find("bob", -1).found == SharedSessions::Found::kDeleted);
  // Two replicas writing the same revision: the second is told.
  CHECK(absl::IsAlreadyExists(shared.Publish(Record(2), Kv())));
  REQUIRE(shared.Remove("alice", "s1", key).ok());
  CHECK(find("alice", 2).found == SharedSessions::Found::kDeleted);
  CHECK(find("alice", -1).found == SharedSessions::Found::kDeleted);
}

TEST_CASE("a store that lost the records reads as lost and a publish fills them in",
          "[unit][server]") {
  kvstore::TieredStoreOptions options;
  auto store = kvstore::TieredStore::Open(options);
  REQUIRE(store.ok());
  SharedSessions shared(store->get(), "tiny");
  const std::string key = Record(0).key;
  for (uint64_t r = 0; r < 4; ++r) REQUIRE(shared.Publish(Record(r), Kv()).ok());
  // The store restarts empty: a new one in its place.
  store = kvstore::TieredStore::Open(options);
  REQUIRE(store.ok());
  SharedSessions after(store->get(), "tiny");
  auto known = after.Find("alice", "s1", 3, key);
  REQUIRE(known.ok());
  CHECK(known->found == SharedSessions::Found::kLost);
  // A replica that never knew it finds nothing (it cannot tell lost from deleted).
  CHECK(after.Find("alice", "s1", -1).value().found == SharedSessions::Found::kDeleted);
  // The holder republishes its revision: the earlier ones are filled in, every replica finds it.
  REQUIRE(after.Publish(Record(3), Kv()).ok());
  auto found = after.Find("alice", "s1", -1);
  REQUIRE(found.ok());
  REQUIRE(found->found == SharedSessions::Found::kNewer);
  CHECK(found->session->record.revision == 3);
  REQUIRE(after.Publish(Record(4), Kv()).ok());
  CHECK(after.Find("alice", "s1", 3, key).value().session->record.revision == 4);
  // Another incarnation's tombstone says nothing of this one.
  REQUIRE(after.Remove("alice", "s1", "s1.ffeeddccbbaa99887766554433221100").ok());
  CHECK(after.Find("alice", "s1", 4, key).value().found == SharedSessions::Found::kLost);
  REQUIRE(after.Remove("alice", "s1", key).ok());
  CHECK(after.Find("alice", "s1", 4, key).value().found == SharedSessions::Found::kDeleted);
}

TEST_CASE("sessions with more revisions than one lookup window", "[unit][server]") {
  auto store = kvstore::TieredStore::Open({});
  REQUIRE(store.ok());
  SharedSessions shared(store->get(), "tiny");
  for (uint64_t r = 0; r < 150; ++r) REQUIRE(shared.Publish(Record(r), {}).ok());
  auto found = shared.Find("alice", "s1", 3);
  REQUIRE(found.ok());
  REQUIRE(found->found == SharedSessions::Found::kNewer);
  CHECK(found->session->record.revision == 149);
}

}  // namespace
}  // namespace framezip::server
