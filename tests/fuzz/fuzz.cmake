# libFuzzer targets (tests/fuzz/README.md): built only with -DVRAMD_FUZZ=ON and clang, in a build
# directory of their own (`make fuzz` uses build-fuzz). The parsers under test are compiled into
# one small library with the sanitizers and fuzzer coverage; the rest of vramd is not built.
if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  message(FATAL_ERROR "VRAMD_FUZZ needs clang: cmake -DCMAKE_CXX_COMPILER=clang++ -DVRAMD_FUZZ=ON")
endif()

set(VRAMD_FUZZ_FLAGS -fsanitize=address,undefined -fno-sanitize-recover=undefined
    -fno-omit-frame-pointer -g)
add_library(vramd_fuzz_lib STATIC
  src/core/config.cc src/core/policies.cc src/core/durations.cc src/core/units.cc src/core/model.cc src/core/text.cc src/core/service_kinds.cc
  src/core/gpu_select.cc src/core/lease.cc src/core/process_scan.cc src/gpu/nvidia_smi_mig.cc
  src/gpu/nvidia_smi.cc
  src/host/cgroup.cc src/host/docker.cc src/host/docker_engine.cc src/host/systemd.cc src/host/subprocess.cc
  src/host/ports.cc src/host/proc_table.cc
  src/services/parsers.cc src/services/prometheus.cc src/services/fingerprint.cc
  src/services/comfyui_history.cc
  src/server/target.cc src/sim/trace.cc src/proxy/wire.cc src/supervisor/unit_watch.cc)
target_include_directories(vramd_fuzz_lib PUBLIC src)
target_compile_options(vramd_fuzz_lib PUBLIC ${VRAMD_FUZZ_FLAGS} -fsanitize=fuzzer-no-link)
target_link_options(vramd_fuzz_lib PUBLIC -fsanitize=address,undefined)
target_link_libraries(vramd_fuzz_lib PUBLIC
  Threads::Threads Boost::boost nlohmann_json::nlohmann_json tomlplusplus::tomlplusplus
  fmt::fmt spdlog::spdlog ${CMAKE_DL_LIBS})

file(GLOB fuzz_sources CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/fuzz/*_fuzz.cc)
set(VRAMD_FUZZ_TARGETS)
foreach(src IN LISTS fuzz_sources)
  get_filename_component(name ${src} NAME_WE)  # config_fuzz
  string(REGEX REPLACE "_fuzz$" "" target ${name})
  add_executable(fuzz_${target} ${src})
  target_link_libraries(fuzz_${target} PRIVATE vramd_fuzz_lib)
  target_link_options(fuzz_${target} PRIVATE -fsanitize=fuzzer)
  list(APPEND VRAMD_FUZZ_TARGETS ${target})
endforeach()
list(JOIN VRAMD_FUZZ_TARGETS " " targets_text)
file(WRITE ${CMAKE_BINARY_DIR}/fuzz-targets.txt "${targets_text}\n")
