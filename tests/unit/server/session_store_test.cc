// SessionStore (server/session_store.h): sessions scoped to their owner, one namespace per
// principal, keys unique per incarnation, ids held while a removed session's turn ends, and
// DeleteMedia's rules.
#include <catch2/catch.hpp>

#include "server/session_store.h"

namespace framezip::server {
namespace {

SessionSpec Named(const std::string& id) {
  SessionSpec spec;
  spec.session_id = id;
  return spec;
}

ChatMessage User(const std::string& text) { return {Role::kUser, {{text, ""}}}; }

TEST_CASE("a session exists only for the principal that created it", "[unit][server]") {
  SessionStore store({});
  auto mine = store.Create(Named("s1"), "alice");
  REQUIRE(mine.ok());
  CHECK(store.Get("s1", "alice").ok());
  for (const std::string other : {"bob", ""}) {
    CHECK(absl::IsNotFound(store.Get("s1", other).status()));
    CHECK(absl::IsNotFound(store.Remove("s1", other).status()));
    CHECK(absl::IsNotFound(store.CheckMediaRoom("s1", other).status()));
    CHECK(absl::IsNotFound(store.BeginTurn("s1", other, "t", User("hi"), {}).status()));
    CHECK(absl::IsNotFound(store.RemoveMedia("s1", other, "m").status()));
  }
  // The message for another's session is the one for no session at all.
  CHECK(store.Get("s1", "bob").status() == store.Get("s1", "carol").status());
  REQUIRE(store.Remove("s1", "alice").ok());
  const Status gone = store.Get("s1", "bob").status();
  REQUIRE(store.Create(Named("s1"), "alice").ok());
  CHECK(store.Get("s1", "bob").status() == gone);
  // Each principal has its own namespace.
  auto bobs = store.Create(Named("s1"), "bob");
  REQUIRE(bobs.ok());
  CHECK(bobs->key != mine->key);
  CHECK(absl::IsAlreadyExists(store.Create(Named("s1"), "alice").status()));
  auto alice_list = store.List("alice", 0, "");
  REQUIRE(alice_list.ok());
  REQUIRE(alice_list->sessions.size() == 1);
  CHECK(alice_list->sessions[0].owner == "alice");
  CHECK(store.All().size() == 2);
}

TEST_CASE("keys name one incarnation, a removed session's id waits for its turn to end",
          "[unit][server]") {
  SessionStore store({});
  auto first = store.Create(Named("s"), "");
  REQUIRE(first.ok());
  CHECK(first->key.rfind("s.", 0) == 0);
  CHECK(first->key.size() == 2 + 32);  // the id, '.', 128 bits in hex
  CHECK(SessionIdOfKey(first->key) == "s");
  auto turn = store.BeginTurn("s", "", "t1", User("hi"), {});
  REQUIRE(turn.ok());
  CHECK(turn->session_key == first->key);

  // Removed while its turn runs: the id stays taken until the turn ends.
  REQUIRE(store.Remove("s", "").ok());
  CHECK(absl::IsNotFound(store.Get("s", "").status()));
  CHECK(absl::IsAlreadyExists(store.Create(Named("s"), "").status()));
  CHECK_FALSE(store.EndTurn(first->key, "t1", User("hi"), std::string("answer")));
  auto second = store.Create(Named("s"), "");
  REQUIRE(second.ok());
  CHECK(second->key != first->key);
  // Nothing of the old incarnation reaches the new one.
  MediaInfo media;
  media.media_id = "m1";
  CHECK(absl::IsNotFound(store.AddMedia(first->key, media)));
  CHECK(store.AddMedia(second->key, media).ok());
  CHECK_FALSE(store.EndTurn(first->key, "t1", User("hi"), std::nullopt));
  CHECK(store.Get("s", "")->turns == 0);

  // Removed between turns: the id is free at once.
  REQUIRE(store.Remove("s", "").ok());
  CHECK(store.Create(Named("s"), "").ok());
}

TEST_CASE("DeleteMedia removes media no message shows, and only between turns",
          "[unit][server]") {
  SessionStore store({});
  auto s = store.Create(Named("s"), "");
  REQUIRE(s.ok());
  MediaInfo shown, spare;
  shown.media_id = "m-shown";
  spare.media_id = "m-spare";
  REQUIRE(store.AddMedia(s->key, shown).ok());
  auto turn = store.BeginTurn("s", "", "t1", {Role::kUser, {{"", "m-shown"}, {"look", ""}}}, {});
  REQUIRE(turn.ok());
  REQUIRE(store.AddMedia(s->key, spare).ok());
  CHECK(absl::IsFailedPrecondition(store.RemoveMedia("s", "", "m-spare").status()));  // running
  REQUIRE(store.EndTurn(s->key, "t1", turn->messages.back(), std::string("a circle")));
  CHECK(absl::IsFailedPrecondition(store.RemoveMedia("s", "", "m-shown").status()));
  auto removed = store.RemoveMedia("s", "", "m-spare");
  REQUIRE(removed.ok());
  CHECK(removed->media_id == "m-spare");
  CHECK(store.Get("s", "")->media.size() == 1);
  CHECK(absl::IsNotFound(store.RemoveMedia("s", "", "m-spare").status()));
}

}  // namespace
}  // namespace framezip::server
