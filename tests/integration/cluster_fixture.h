// vramd hosts gpu1..gpuN on one real PostgreSQL (integration/postgres_server.h), each on its own
// test GPU (its own fake NVML state file), and fake GPU servers beside them: the fixtures of
// ClusterE2E, ClusterEvictE2E (Cluster: three hosts) and ClusterFaultE2E, ClusterHeartbeatE2E
// (ClusterFixture: N hosts, extra [daemon] settings).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "integration/daemon_fixture.h"
#include "integration/postgres_server.h"
#include "testgpu/fake_gpu_state.h"

namespace vramd::testing {

// What the test GPU of `f` has in use (by no one vramd knows). Replaces the whole state file:
// before any fake server puts its process there.
inline void set_used(DaemonFixture& f, Bytes used) {
  auto s = make_fake_gpu_state({{"NVIDIA GeForce RTX 3090", 24 * GiB}});
  s["gpus"][0]["used"] = used;
  ASSERT_TRUE(write_fake_gpu_state(f.state, s).ok());
}

// Three hosts gpu1..gpu3 on database `name`, a 3 s host_timeout. `services(i, cluster)`, when
// given, returns host i's [services.*] TOML; it runs after host i's GPU is set and before the
// host starts, and may start fake servers there with fake().
struct Cluster {
  using Services = std::function<std::string(int, Cluster&)>;
  PostgresServer* pg = PostgresServer::get();
  std::string db;
  DaemonFixture host[3];
  std::vector<std::unique_ptr<FakeService>> fakes;  // declared after the hosts: ended first

  explicit Cluster(const std::string& name, const std::vector<Bytes>& used,
                   const Services& services = {}) {
    if (!pg) return;
    db = pg->create_database(name);
    std::string toml[3];
    for (int i = 0; i < 3; ++i) {
      set_used(host[i], used[static_cast<size_t>(i)]);
      host[i].daemon_toml = fmt::format(
          "store = \"{}\"\nhost = \"gpu{}\"\nhost_timeout = \"3s\"\nlease_heartbeat = \"5m\"\n",
          pg->url(db), i + 1);
      if (services) toml[i] = services(i, *this);
    }
    for (int i = 0; i < 3; ++i) host[i].start(toml[i]);
  }
  DaemonFixture& by_name(const std::string& name) { return host[name.back() - '1']; }
  // A fake GPU server of `kind` holding its memory on host i's test GPU.
  FakeService& fake(int i, const std::string& kind, std::vector<std::string> extra = {}) {
    fakes.push_back(std::make_unique<FakeService>(host[i], kind, std::move(extra)));
    return *fakes.back();
  }
};

// Hosts gpu1..gpuN on database `db` (a fresh one named after `name`); `more` is added to each
// one's [daemon] section. Not started when there is no PostgreSQL (pg is null: skip).
struct ClusterFixture {
  PostgresServer* pg = PostgresServer::get();
  std::string db;
  std::vector<std::unique_ptr<DaemonFixture>> host;

  ClusterFixture(const std::string& name, const std::vector<Bytes>& used, const std::string& more) {
    if (!pg) return;
    db = pg->create_database(name);
    for (size_t i = 0; i < used.size(); ++i) {
      host.push_back(std::make_unique<DaemonFixture>());
      set_used(*host.back(), used[i]);
      host.back()->daemon_toml =
          fmt::format("store = \"{}\"\nhost = \"gpu{}\"\n{}", pg->url(db), i + 1, more);
    }
    for (auto& h : host) h->start("");
  }
  DaemonFixture& operator[](size_t i) { return *host[i]; }
  // One value of the store, by SQL (psql's unaligned output; "" for no row).
  std::string sql(const std::string& query) const { return pg->psql(db, query); }
};

inline Result<json> post_lease(const DaemonFixture& f, const json& body,
                               const std::string& query = "") {
  auto r = http_request({f.url}, "POST", "/v1/leases" + query, body.dump(), 20000);
  if (!r) return make_error(r.error());
  if (r->status != 201) return make_error(fmt::format("{}: {}", r->status, r->body));
  return json::parse(r->body);
}

inline json lease_at(const DaemonFixture& f, uint64_t id, const std::string& wait = "") {
  return get(f, fmt::format("/v1/leases/{}{}", id, wait.empty() ? "" : "?wait=" + wait));
}

}  // namespace vramd::testing
