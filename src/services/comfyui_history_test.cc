#include "services/comfyui_history.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include "test_paths.h"

namespace vramd {
namespace comfy_history_test {

using nlohmann::json;

json fixture(const std::string& name) {
  std::ifstream in(vramd::test_paths::source_dir() + "/tests/fixtures/services/" + name);
  std::stringstream ss;
  ss << in.rdbuf();
  return json::parse(ss.str());
}

TimePoint ms(std::int64_t v) { return TimePoint{std::chrono::milliseconds(v)}; }

double seconds(const ComfyPromptRun& r) {
  return std::chrono::duration<double>(*r.ended_at - *r.started_at).count();
}

// ComfyUI's default SDXL graph in the API format, as "Save (API)" writes it.
json sdxl_graph() {
  return json::parse(R"({
    "3": {"inputs": {"seed": 156680208700286, "steps": 20, "cfg": 8, "sampler_name": "euler",
                     "scheduler": "normal", "denoise": 1, "model": ["4", 0],
                     "positive": ["6", 0], "negative": ["7", 0], "latent_image": ["5", 0]},
          "class_type": "KSampler"},
    "4": {"inputs": {"ckpt_name": "sd_xl_base_1.0.safetensors"},
          "class_type": "CheckpointLoaderSimple"},
    "5": {"inputs": {"width": 1024, "height": 1024, "batch_size": 1},
          "class_type": "EmptyLatentImage"},
    "6": {"inputs": {"text": "a purple galaxy bottle", "clip": ["4", 1]},
          "class_type": "CLIPTextEncode"},
    "7": {"inputs": {"text": "text, watermark", "clip": ["4", 1]}, "class_type": "CLIPTextEncode"},
    "8": {"inputs": {"samples": ["3", 0], "vae": ["4", 2]}, "class_type": "VAEDecode"},
    "9": {"inputs": {"filename_prefix": "ComfyUI", "images": ["8", 0]}, "class_type": "SaveImage"}
  })");
}

// One history entry: `messages` as ComfyUI records them.
json entry(const std::string& id, const json& graph, const json& messages,
           const json& extra = json::object()) {
  return {{"prompt", json::array({1, id, graph, extra, json::array({"9"})})},
          {"outputs", json::object()},
          {"status", {{"status_str", "success"}, {"completed", true}, {"messages", messages}}},
          {"meta", json::object()}};
}

json message(const std::string& event, std::int64_t timestamp, json data = json::object()) {
  data["prompt_id"] = "p";
  data["timestamp"] = timestamp;
  return json::array({event, data});
}

void expect_same_run(const ComfyPromptRun& a, const ComfyPromptRun& b) {
  EXPECT_EQ(a.prompt_id, b.prompt_id);
  EXPECT_EQ(a.queued_at, b.queued_at);
  EXPECT_EQ(a.started_at, b.started_at);
  EXPECT_EQ(a.ended_at, b.ended_at);
  EXPECT_EQ(a.outcome, b.outcome);
  EXPECT_EQ(a.cached_nodes, b.cached_nodes);
  EXPECT_EQ(a.workflow, b.workflow);
  EXPECT_EQ(a.model, b.model);
}

TEST(ComfyHistory, FixtureDurationsOutcomesAndCachedNodes) {
  Result<std::vector<ComfyPromptRun>> runs = parse_comfyui_history(fixture("comfyui-history.json"));
  ASSERT_TRUE(runs.ok()) << runs.error();
  ASSERT_EQ(runs->size(), 3u);  // the fourth has no end message yet

  const ComfyPromptRun& ok = (*runs)[0];
  EXPECT_EQ(ok.prompt_id, "6f1e2d3c-0000-4000-8000-00000000000a");
  EXPECT_EQ(ok.outcome, PromptOutcome::success);
  EXPECT_EQ(ok.queued_at, ms(1748001200000));
  EXPECT_EQ(ok.started_at, ms(1748001200150));
  EXPECT_EQ(ok.ended_at, ms(1748001212650));
  EXPECT_DOUBLE_EQ(seconds(ok), 12.5);
  EXPECT_EQ(ok.cached_nodes, 1);
  EXPECT_EQ(ok.model, "sd_xl_base_1.0.safetensors");
  EXPECT_EQ(ok.workflow.size(), 16u);
  EXPECT_EQ(ok.workflow.find_first_not_of("0123456789abcdef"), std::string::npos);

  const ComfyPromptRun& oom = (*runs)[1];
  EXPECT_EQ(oom.outcome, PromptOutcome::error);
  EXPECT_DOUBLE_EQ(seconds(oom), 7.5);
  EXPECT_EQ(oom.cached_nodes, 0);
  EXPECT_EQ(oom.model, "flux1-dev-fp8.safetensors");

  const ComfyPromptRun& stopped = (*runs)[2];
  EXPECT_EQ(stopped.outcome, PromptOutcome::interrupted);
  EXPECT_DOUBLE_EQ(seconds(stopped), 2.5);
  EXPECT_EQ(stopped.cached_nodes, 3);
  EXPECT_NE(stopped.workflow, ok.workflow);  // 30 steps, and fewer nodes
}

TEST(ComfyHistory, PromptSeenInTwoAnswersGivesTheSameRecord) {
  json all = fixture("comfyui-history.json");
  const std::string id = "6f1e2d3c-0000-4000-8000-00000000000a";
  // /history/{id} and /history?max_items=N answer the same entry.
  Result<std::vector<ComfyPromptRun>> one = parse_comfyui_history(json{{id, all[id]}});
  Result<std::vector<ComfyPromptRun>> many = parse_comfyui_history(all);
  ASSERT_TRUE(one.ok() && many.ok());
  ASSERT_EQ(one->size(), 1u);
  expect_same_run((*one)[0], (*many)[0]);
}

TEST(ComfyHistory, EntriesWithoutTimestampsOrPartsAreSkipped) {
  json g = sdxl_graph();
  json h = json::object();
  // ComfyUI before message timestamps (2024): nothing to place in time.
  h["old"] = entry("old", g,
                   json::array({json::array({"execution_start", {{"prompt_id", "old"}}}),
                                json::array({"execution_success", {{"prompt_id", "old"}}})}));
  h["no-start"] = entry("no-start", g, json::array({message("execution_success", 5000)}));
  h["no-status"] = entry("no-status", g, json::array());
  h["no-status"]["status"] = nullptr;
  h["no-graph"] = entry("no-graph", g, json::array({message("execution_success", 5000)}));
  h["no-graph"]["prompt"] = json::array({1, "no-graph"});
  h["not-an-entry"] = 12;
  h["bad-times"] =
      entry("bad-times", g,
            json::array({message("execution_start", -5),
                         json::array({"execution_success", {{"timestamp", "soon"}}})}));
  h["huge-time"] = entry("huge-time", g, json::array({message("execution_success", 0)}));
  h["huge-time"]["status"]["messages"][0][1]["timestamp"] = 1e300;
  h["garbled-messages"] =
      entry("garbled-messages", g,
            json::array({7, json::array({"execution_start"}), json::array({1, {}}),
                         message("execution_start", 1000), message("execution_success", 3000)}));
  h["garbled-messages"]["prompt"][3] = {{"create_time", "yesterday"}};

  Result<std::vector<ComfyPromptRun>> runs = parse_comfyui_history(h);
  ASSERT_TRUE(runs.ok()) << runs.error();
  ASSERT_EQ(runs->size(), 2u);
  EXPECT_EQ((*runs)[0].prompt_id, "garbled-messages");  // ended at 3000, before 5000
  EXPECT_EQ((*runs)[0].started_at, ms(1000));
  EXPECT_EQ((*runs)[0].queued_at, std::nullopt);
  EXPECT_EQ((*runs)[1].prompt_id, "no-start");
  EXPECT_EQ((*runs)[1].started_at, std::nullopt);
  EXPECT_EQ((*runs)[1].ended_at, ms(5000));

  EXPECT_FALSE(parse_comfyui_history(json::array()).ok());
  EXPECT_FALSE(parse_comfyui_history(json("history")).ok());
  Result<std::vector<ComfyPromptRun>> empty = parse_comfyui_history(json::object());
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());
}

TEST(ComfyHistory, HugeHistoryParses) {
  json h = json::object();
  json g = sdxl_graph();
  for (int i = 0; i < 5000; ++i) {
    std::string id = "prompt-" + std::to_string(i);
    g["3"]["inputs"]["seed"] = i;
    std::int64_t t = 1748000000000 + 10000LL * i;
    h[id] = entry(id, g,
                  json::array({message("execution_start", t),
                               message("execution_cached", t + 1, {{"nodes", {"4"}}}),
                               message("execution_success", t + 4000)}),
                  {{"create_time", t - 500}});
  }
  Result<std::vector<ComfyPromptRun>> runs = parse_comfyui_history(h);
  ASSERT_TRUE(runs.ok());
  ASSERT_EQ(runs->size(), 5000u);
  EXPECT_EQ(runs->front().prompt_id, "prompt-0");
  EXPECT_EQ(runs->back().prompt_id, "prompt-4999");
  for (const ComfyPromptRun& r : *runs) {
    ASSERT_EQ(r.workflow, runs->front().workflow);  // seeds differ, the workflow does not
    ASSERT_DOUBLE_EQ(seconds(r), 4.0);
  }
}

TEST(ComfyHistory, FingerprintIgnoresSeedTextAndFiles) {
  json g = sdxl_graph();
  const std::string fp = comfyui_workflow_fingerprint(g);
  ASSERT_EQ(fp.size(), 16u);
  EXPECT_EQ(comfyui_workflow_fingerprint(sdxl_graph()), fp);  // stable

  json seed = g;
  seed["3"]["inputs"]["seed"] = 1;
  EXPECT_EQ(comfyui_workflow_fingerprint(seed), fp);
  json text = g;
  text["6"]["inputs"]["text"] = "a red fox in the snow";
  text["7"]["inputs"]["text"] = "blurry";
  EXPECT_EQ(comfyui_workflow_fingerprint(text), fp);
  json checkpoint = g;
  checkpoint["4"]["inputs"]["ckpt_name"] = "juggernautXL_v9.safetensors";
  EXPECT_EQ(comfyui_workflow_fingerprint(checkpoint), fp);
  json key_order = json::object();  // the same graph, written in another order
  for (const char* id : {"9", "8", "7", "6", "5", "4", "3"}) key_order[id] = g[id];
  EXPECT_EQ(comfyui_workflow_fingerprint(key_order), fp);

  json steps = g;
  steps["3"]["inputs"]["steps"] = 24;
  EXPECT_NE(comfyui_workflow_fingerprint(steps), fp);
  json cfg = g;
  cfg["3"]["inputs"]["cfg"] = 7.5;
  EXPECT_NE(comfyui_workflow_fingerprint(cfg), fp);
  json sampler = g;  // sampler_name ends in _name but is no file
  sampler["3"]["inputs"]["sampler_name"] = "dpmpp_2m";
  EXPECT_NE(comfyui_workflow_fingerprint(sampler), fp);
  json relinked = g;
  relinked["8"]["inputs"]["samples"] = json::array({"5", 0});
  EXPECT_NE(comfyui_workflow_fingerprint(relinked), fp);
  json more = g;
  more["10"] = {{"inputs", {{"images", {"8", 0}}}}, {"class_type", "PreviewImage"}};
  EXPECT_NE(comfyui_workflow_fingerprint(more), fp);

  EXPECT_EQ(comfyui_workflow_fingerprint(json::array()), "");
  EXPECT_EQ(comfyui_workflow_fingerprint(json::object()).size(), 16u);
}

TEST(ComfyHistory, FingerprintDropsLongStringsFilesAndMedia) {
  auto fp = [](const std::string& name, const json& value) {
    json g = {{"1", {{"class_type", "Node"}, {"inputs", {{name, value}}}}}};
    return comfyui_workflow_fingerprint(g);
  };
  // Dropped: only the input's name counts.
  EXPECT_EQ(fp("lora_name", "a/b.safetensors"), fp("lora_name", "c.safetensors"));
  EXPECT_EQ(fp("vae_name", "sdxl_vae.pt"), fp("vae_name", "ae.sft"));
  EXPECT_EQ(fp("vae_name", "dir/sdxl_vae"), fp("vae_name", "other/vae"));
  EXPECT_EQ(fp("image", "example.png"), fp("image", "clipspace/mask 1"));
  EXPECT_EQ(fp("video", "a"), fp("video", "b"));
  EXPECT_EQ(fp("style", std::string(65, 'x')), fp("style", std::string(80, 'y')));
  EXPECT_EQ(fp("caption", "line one\nline two"), fp("caption", "other\n"));
  EXPECT_EQ(fp("path", "input/a.WEBP"), fp("path", "input/b.mp4"));
  EXPECT_EQ(fp("prompt", "a"), fp("prompt", "b"));
  EXPECT_EQ(fp("noise_seed", 1), fp("noise_seed", 2));
  // Kept.
  EXPECT_NE(fp("scheduler", "karras"), fp("scheduler", "normal"));
  EXPECT_NE(fp("vae_name", "pixel_space"), fp("vae_name", "taesd"));  // no file: a choice
  EXPECT_NE(fp("sampler_name", "euler"), fp("sampler_name", "euler_ancestral"));
  EXPECT_NE(fp("weight_dtype", "fp8_e4m3fn"), fp("weight_dtype", "default"));
  EXPECT_NE(fp("denoise", 1), fp("denoise", 0.5));
  EXPECT_NE(fp("tiled", true), fp("tiled", false));
  EXPECT_NE(fp("text", 1), fp("text", 2));  // a number named text is no text
  // A dropped value still differs from another input's.
  EXPECT_NE(fp("text", "a"), fp("positive", "a"));
}

TEST(ComfyHistory, MainModelIsTheLowestLoader) {
  EXPECT_EQ(comfyui_main_model(sdxl_graph()), "sd_xl_base_1.0.safetensors");
  json g = {
      {"10",
       {{"class_type", "CheckpointLoaderSimple"},
        {"inputs", {{"ckpt_name", "refiner.safetensors"}}}}},
      {"9", {{"class_type", "UnetLoaderGGUF"}, {"inputs", {{"unet_name", "flux.gguf"}}}}},
      {"2", {{"class_type", "LoraLoader"}, {"inputs", {{"lora_name", "style.safetensors"}}}}}};
  EXPECT_EQ(comfyui_main_model(g), "flux.gguf");  // 9 before 10
  EXPECT_EQ(comfyui_main_model(json{{"1", {{"class_type", "KSampler"}}}}), "");
  EXPECT_EQ(comfyui_main_model(json{{"1", {{"inputs", {{"ckpt_name", 3}}}}}}), "");
  EXPECT_EQ(comfyui_main_model(json("graph")), "");
}

TEST(ComfyHistory, VersionsAndArgv) {
  EXPECT_EQ(parse_vllm_version(json{{"version", "0.8.5"}}), "0.8.5");
  EXPECT_EQ(parse_vllm_version(json{{"version", 8}}), "");
  EXPECT_EQ(parse_vllm_version(json::array()), "");
  EXPECT_EQ(parse_ollama_version(json{{"version", "0.6.8"}}), "0.6.8");
  EXPECT_EQ(parse_ollama_version(json::object()), "");
  EXPECT_EQ(parse_llamacpp_build_info(
                json{{"build_info", "b5474-e5c834f7"}, {"total_slots", 1}, {"model_path", "m"}}),
            "b5474-e5c834f7");
  EXPECT_EQ(parse_llamacpp_build_info(json{{"total_slots", 1}}), "");

  json stats = fixture("comfyui-system-stats-new.json");
  stats["system"]["argv"] = {"main.py", "--listen", "0.0.0.0", 7, "--disable-async-offload"};
  EXPECT_EQ(parse_comfyui_argv(stats), (std::vector<std::string>{"main.py", "--listen", "0.0.0.0",
                                                                 "--disable-async-offload"}));
  EXPECT_TRUE(parse_comfyui_argv(json{{"system", {{"argv", "main.py"}}}}).empty());
  EXPECT_TRUE(parse_comfyui_argv(json::array()).empty());
}

}  // namespace comfy_history_test
}  // namespace vramd
