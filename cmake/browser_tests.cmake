# Browser tests of the dashboard (tests/browser/): Node + playwright-core (pinned in
# tests/browser/package-lock.json, fetched by `npm ci` into the build directory) driving Debian's
# chromium against `vramd demo`. Without chromium the test reports itself skipped, saying why.

set(browser_src ${CMAKE_SOURCE_DIR}/tests/browser)
set(browser_npm ${CMAKE_BINARY_DIR}/browser-tests)
find_program(VRAMD_NODE NAMES node nodejs)
find_program(VRAMD_CHROMIUM NAMES chromium chromium-browser PATHS /usr/bin)
file(MAKE_DIRECTORY ${browser_npm})

if(VRAMD_NODE AND VRAMD_CHROMIUM)
  add_custom_command(
    OUTPUT ${browser_npm}/npm-ci.stamp
    COMMAND ${CMAKE_COMMAND} -E copy ${browser_src}/package.json ${browser_src}/package-lock.json
            ${browser_npm}/
    COMMAND ${CMAKE_COMMAND} -DNPM=${VRAMD_NPM} -DDIR=${browser_npm} -DCACHE=${VRAMD_NPM_CACHE}
            -DSTAMP=${browser_npm}/npm-ci.stamp -P ${CMAKE_SOURCE_DIR}/cmake/npm_ci.cmake
    DEPENDS ${browser_src}/package.json ${browser_src}/package-lock.json
    COMMENT "npm ci: playwright-core for the browser tests (tests/browser/package-lock.json)"
    VERBATIM)
  add_custom_target(browser_test_deps ALL DEPENDS ${browser_npm}/npm-ci.stamp)
endif()

if(VRAMD_NODE)
  add_test(NAME browser_dashboard
    COMMAND ${VRAMD_NODE} ${browser_src}/dashboard.test.mjs
            --vramd $<TARGET_FILE:vramd>
            --node-modules ${browser_npm}/node_modules
            --chromium "${VRAMD_CHROMIUM}"
            --screenshots ${CMAKE_BINARY_DIR}/screenshots)
  # 77: chromium is not installed (the test says so); ctest shows it as skipped, not passed.
  set_tests_properties(browser_dashboard PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 300 RUN_SERIAL ON)
else()
  add_test(NAME browser_dashboard COMMAND ${CMAKE_COMMAND} -E echo
           "SKIPPED: node is not installed (run `make deps`)")
endif()

# The dashboard's view of several hosts (tests/browser/cluster.test.mjs) runs from the gtest
# ClusterViewE2E.TheDashboardShowsEveryHostAndActsOnlyOnItsOwn, which sets up PostgreSQL and
# three daemons first: it is told where node, chromium and playwright-core are.
if(VRAMD_NODE AND VRAMD_CHROMIUM AND TARGET vramd_tests)
  # Read through tests/test_paths.h (generated at the end of CMakeLists.txt).
  set(VRAMD_TEST_BROWSER_NODE "${VRAMD_NODE}")
  set(VRAMD_TEST_BROWSER_CHROMIUM "${VRAMD_CHROMIUM}")
  set(VRAMD_TEST_BROWSER_MODULES "${browser_npm}/node_modules")
  add_dependencies(vramd_tests browser_test_deps)
endif()
