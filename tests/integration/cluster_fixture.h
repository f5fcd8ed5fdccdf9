// Several vramd hosts on one real PostgreSQL (issue 17), for end-to-end tests: N daemons gpu1..gpuN,
// each on its own test GPU (its own fake NVML state file), all on one database of the test
// process's private server (postgres_server.h).
#pragma once

#include <string>
#include <vector>

#include "integration/daemon_fixture.h"
#include "integration/postgres_server.h"
#include "testgpu/fake_gpu_state.h"

namespace vramd::testing {

// What the test GPU of `f` has in use (by no one vramd knows).
inline void set_gpu_used(DaemonFixture& f, Bytes used) {
  auto s = make_fake_gpu_state({{"NVIDIA GeForce RTX 3090", 24 * GiB}});
  s["gpus"][0]["used"] = used;
  ASSERT_TRUE(write_fake_gpu_state(f.state, s).ok());
}

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
      set_gpu_used(*host.back(), used[i]);
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
