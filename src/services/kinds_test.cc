// The table of service kinds (core/service_kinds) and the adapters agree: every kind in the
// table has an adapter, config validation accepts exactly the table's kinds, and every key a
// kind owns is a key the config knows.
#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>

#include "core/config.h"
#include "core/service_kinds.h"
#include "services/adapter.h"

namespace vramd {
namespace {

TEST(ServiceKinds, EveryKindInTheTableHasAnAdapter) {
  boost::asio::io_context io;
  for (const auto& kind : service_kinds()) {
    ServiceConfig svc;
    svc.name = "x";
    svc.kind = std::string(kind.name);
    if (kind.needs_url) svc.url = "http://127.0.0.1:9";
    auto adapter = make_adapter(svc, io.get_executor());
    EXPECT_TRUE(adapter.ok()) << kind.name << ": " << (adapter.ok() ? "" : adapter.error());
  }
  ServiceConfig unknown;
  unknown.name = "x";
  unknown.kind = "not-a-kind";
  unknown.url = "http://127.0.0.1:9";
  EXPECT_FALSE(make_adapter(unknown, io.get_executor()).ok());
}

TEST(ServiceKinds, ConfigAcceptsTheTablesKindsAndTheirOwnKeysOnlyOnThem) {
  ASSERT_EQ(known_service_kinds().size(), service_kinds().size());
  for (const auto& kind : service_kinds()) {
    std::string toml = "[services.x]\nkind = \"" + std::string(kind.name) + "\"\n";
    if (kind.needs_url) toml += "url = \"http://127.0.0.1:9\"\n";
    auto c = parse_config(toml, "t.toml");
    EXPECT_TRUE(c.ok()) << kind.name << ": " << (c.ok() ? "" : c.error());
    for (std::string_view key : kind.own_keys) {
      // On another kind, the key is refused and the message names the kind it belongs to.
      auto other = parse_config("[services.x]\nkind = \"process\"\n" + std::string(key) + " = 1\n",
                                "t.toml");
      ASSERT_FALSE(other.ok()) << key;
      EXPECT_NE(other.error().find(std::string(kind.name)), std::string::npos) << other.error();
    }
  }
}

TEST(ServiceKinds, DefaultsAreSetForEveryKind) {
  for (const auto& kind : service_kinds()) {
    EXPECT_GT(kind.unload_timeout.count(), 0) << kind.name;
    EXPECT_GT(kind.reload_cost.count(), 0) << kind.name;
  }
  EXPECT_EQ(find_service_kind("comfyui")->unload_timeout, std::chrono::seconds(30));
  EXPECT_TRUE(find_service_kind("ollama")->self_report_covers_process);
  EXPECT_FALSE(find_service_kind("comfyui")->self_report_covers_process);
  EXPECT_FALSE(find_service_kind("process")->needs_url);
  EXPECT_EQ(find_service_kind("nope"), nullptr);
}

}  // namespace
}  // namespace vramd
