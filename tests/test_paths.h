// Where the tests find this build's outputs, its checkout and the browser tools. They come from
// one file generated at configure time (tests/test_paths.cc.in), not from definitions on the test
// targets: a definition holding the build folder's path made every test batch compile
// differently in each clone, so that CI, on a clean clone, missed ccache on all of them.
#pragma once

#include <string>

namespace vramd::test_paths {

const std::string& build_dir();   // CMAKE_BINARY_DIR
const std::string& source_dir();  // CMAKE_SOURCE_DIR
// Found at configure time (cmake/browser_tests.cmake); empty where node or chromium was not.
const std::string& browser_node();
const std::string& browser_chromium();
const std::string& browser_modules();  // playwright-core's node_modules

}  // namespace vramd::test_paths
