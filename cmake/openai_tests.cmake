# The openai npm client through the front door (tests/openai/): Node + the openai package (pinned
# in tests/openai/package-lock.json, fetched by `npm ci` into the build directory) against
# `vramd serve` on the test GPU and a fake vLLM. Without node or the package the test is skipped (77).
set(openai_src ${CMAKE_SOURCE_DIR}/tests/openai)
set(openai_npm ${CMAKE_BINARY_DIR}/openai-tests)
file(MAKE_DIRECTORY ${openai_npm})
if(VRAMD_NODE AND VRAMD_NPM AND TARGET vramd_proxy_harness AND TARGET fake-gpu-server)
  add_custom_command(
    OUTPUT ${openai_npm}/npm-ci.stamp
    COMMAND ${CMAKE_COMMAND} -E copy ${openai_src}/package.json ${openai_src}/package-lock.json
            ${openai_npm}/
    COMMAND ${CMAKE_COMMAND} -DNPM=${VRAMD_NPM} -DDIR=${openai_npm} -DCACHE=${VRAMD_NPM_CACHE}
            -DSTAMP=${openai_npm}/npm-ci.stamp -P ${CMAKE_SOURCE_DIR}/cmake/npm_ci.cmake
    DEPENDS ${openai_src}/package.json ${openai_src}/package-lock.json
    COMMENT "npm ci: the openai client for the front door test (tests/openai/package-lock.json)"
    VERBATIM)
  add_custom_target(openai_test_deps ALL DEPENDS ${openai_npm}/npm-ci.stamp)
  add_test(NAME openai_client_front_door
    COMMAND ${VRAMD_NODE} ${openai_src}/openai.test.mjs
            --vramd $<TARGET_FILE:vramd> --nvml $<TARGET_FILE:nvidia-ml-fake>
            --fake $<TARGET_FILE:fake-gpu-server>
            --node-modules ${openai_npm}/node_modules)
  set_tests_properties(openai_client_front_door PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 120)
else()
  add_test(NAME openai_client_front_door COMMAND ${CMAKE_COMMAND} -E echo
           "SKIPPED: node, npm or the proxy harness is missing")
endif()
