// One factory per kind, each in its own file (comfyui.cc, ollama.cc, ...); make_adapter picks.
// `api_key` is the resolved key (api_key, or the value of api_key_env), "" for none.
#pragma once

#include <memory>
#include <string>

#include "services/adapter.h"

namespace vramd {

// An UnloadCall (a helper: GCC 12 rejects braced string literals in co_return).
inline UnloadCall unload_call(UnloadCall::Result result, std::string message) {
  UnloadCall out;
  out.result = result;
  out.message = std::move(message);
  return out;
}

using AdapterFactory = std::unique_ptr<Adapter> (*)(const ServiceConfig&,
                                                    boost::asio::any_io_executor, std::string);

std::unique_ptr<Adapter> make_comfyui_adapter(const ServiceConfig&, boost::asio::any_io_executor,
                                              std::string api_key);
std::unique_ptr<Adapter> make_ollama_adapter(const ServiceConfig&, boost::asio::any_io_executor,
                                             std::string api_key);
std::unique_ptr<Adapter> make_vllm_adapter(const ServiceConfig&, boost::asio::any_io_executor,
                                           std::string api_key);
std::unique_ptr<Adapter> make_sglang_adapter(const ServiceConfig&, boost::asio::any_io_executor,
                                             std::string api_key);
std::unique_ptr<Adapter> make_a1111_adapter(const ServiceConfig&, boost::asio::any_io_executor,
                                            std::string api_key);
std::unique_ptr<Adapter> make_textgen_adapter(const ServiceConfig&, boost::asio::any_io_executor,
                                              std::string api_key);
std::unique_ptr<Adapter> make_tabbyapi_adapter(const ServiceConfig&, boost::asio::any_io_executor,
                                               std::string api_key);
std::unique_ptr<Adapter> make_llamacpp_adapter(const ServiceConfig&, boost::asio::any_io_executor,
                                               std::string api_key);
std::unique_ptr<Adapter> make_triton_adapter(const ServiceConfig&, boost::asio::any_io_executor,
                                             std::string api_key);
std::unique_ptr<Adapter> make_localai_adapter(const ServiceConfig&, boost::asio::any_io_executor,
                                              std::string api_key);
std::unique_ptr<Adapter> make_speaches_adapter(const ServiceConfig&, boost::asio::any_io_executor,
                                               std::string api_key);
std::unique_ptr<Adapter> make_generic_http_adapter(const ServiceConfig&,
                                                   boost::asio::any_io_executor,
                                                   std::string api_key);
std::unique_ptr<Adapter> make_process_adapter(const ServiceConfig&, boost::asio::any_io_executor,
                                              std::string api_key);

}  // namespace vramd
