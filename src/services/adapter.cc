#include "services/adapter.h"

#include "core/service_kinds.h"

#include <cstdlib>
#include <map>

#include "services/kinds.h"

namespace vramd {

boost::asio::awaitable<UnloadCall> Adapter::wake(SleepDepth) {
  UnloadCall out;
  out.result = UnloadCall::Result::not_supported;
  out.message = kind() + " has no reload call: it loads on the next request";
  co_return out;
}

Result<std::unique_ptr<Adapter>> make_adapter(const ServiceConfig& service,
                                              boost::asio::any_io_executor executor) {
  static const std::map<std::string, AdapterFactory> factories = {
      {"comfyui", make_comfyui_adapter},
      {"ollama", make_ollama_adapter},
      {"vllm", make_vllm_adapter},
      {"sglang", make_sglang_adapter},
      {"a1111", make_a1111_adapter},
      {"forge", make_a1111_adapter},
      {"textgen", make_textgen_adapter},
      {"tabbyapi", make_tabbyapi_adapter},
      {"llamacpp", make_llamacpp_adapter},
      {"triton", make_triton_adapter},
      {"localai", make_localai_adapter},
      {"speaches", make_speaches_adapter},
      {"generic_http", make_generic_http_adapter},
      {"process", make_process_adapter}};
  auto it = factories.find(service.kind);
  if (it == factories.end()) {
    return make_error("service " + service.name + ": unknown kind '" + service.kind + "'");
  }
  const ServiceKind* kind = find_service_kind(service.kind);
  if (kind && kind->needs_url) {
    if (service.url.empty()) {
      return make_error("service " + service.name + ": kind " + service.kind + " needs a url");
    }
    Result<HttpUrl> u = parse_http_url(service.url);
    if (!u) return make_error("service " + service.name + ": url: " + u.error());
    if (u->scheme == "https") {
      return make_error("service " + service.name +
                        ": https is not supported; put the service behind http on localhost");
    }
  }
  std::string api_key = service.api_key;
  if (!service.api_key_env.empty()) {
    // Only the variable's name may appear in a message, never its value.
    const char* v = std::getenv(service.api_key_env.c_str());
    if (!v || !*v) {
      return make_error("service " + service.name + ": api_key_env: environment variable " +
                        service.api_key_env + " is not set");
    }
    api_key = v;
  }
  return it->second(service, std::move(executor), std::move(api_key));
}

}  // namespace vramd
