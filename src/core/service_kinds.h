// One table of service kinds (docs/adapters.md): per kind, the traits every part reads. Config
// validation, the core's defaults and the adapter factory all read this table, and a test checks
// that every kind in it has an adapter.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/sleep.h"
#include "core/units.h"

namespace vramd {

// What its unload call needs from the service's config, else the call is not offered (its
// adapter answers not_supported, and only a stop frees its memory).
enum class UnloadNeeds {
  nothing,
  unload_url,  // generic_http: the call is the config's own
  models,      // localai: it lists no models, so the config names what to unload
  router,      // llamacpp: only router mode (router unset: detected, assumed) unloads
};

struct ServiceKind {
  std::string_view name;
  // How long an unload may take to show on the GPU before it is judged (unload_timeout default).
  Duration unload_timeout;
  // A first guess at how long loading again takes, until vramd has measured one.
  Duration reload_cost;
  // Its own memory figure covers what its processes hold on the GPU (Ollama's size_vram). Where it
  // does not (ComfyUI's torch_vram_total under cudaMallocAsync), it is evidence only.
  bool self_report_covers_process = false;
  bool has_unload = true;  // it has an unload call (else only stopping its process frees memory)
  bool has_wake = false;  // it has a call that loads again (else its next request does, or a start)
  bool needs_url = true;  // it is reached over HTTP
  UnloadNeeds unload_needs = UnloadNeeds::nothing;
  bool sleep_levels = false;  // its depths are its own "level 1" and "level 2" (vLLM's /sleep)
  std::vector<std::string_view> own_keys;  // config keys that only this kind reads
  // Its sleeps (core/sleep.h), shallowest first: what its unload call can keep in host RAM.
  // Empty for a kind without an unload call (only a stop frees it). A service vramd can stop
  // also has `stop`, deepest.
  std::vector<SleepDepth> sleeps = {SleepDepth::sleep2};
  // A first guess at a sleep1 wake (weights back from host RAM), until vramd has measured one;
  // a sleep2 wake is guessed at reload_cost, a start at twice that.
  Duration sleep1_wake{0};
  // On the wire (../shared/reference/transport.md), what vramd's proxies must respect as the
  // server's client: how long it keeps an idle connection open (0: until the client closes it),
  // and whether it serves a fixed number of connections at once, one HTTP thread each, idle
  // keep-alive time included (llama-server's `--threads-http`: max(slots + 2, CPUs - 1)).
  Duration keep_alive_timeout = std::chrono::seconds(5);
  bool fixed_http_threads = false;
  // It serves Ollama's own API (/api/chat, /api/tags): the front door's Ollama routes list and
  // reach only such services (the others would answer 404).
  bool ollama_api = false;
};

// Every kind, in documentation order.
const std::vector<ServiceKind>& service_kinds();
// nullptr when no kind has this name.
const ServiceKind* find_service_kind(std::string_view name);

}  // namespace vramd
