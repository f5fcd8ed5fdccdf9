# The dashboard (web/): `npm ci` fetches uPlot (pinned in web/package-lock.json) into the build
# directory, then embed_assets.cmake turns our files and uPlot's into a C++ source for vramd_lib.
# Sets VRAMD_WEB_ASSETS_CC (the generated source) and VRAMD_WEB_GENERATED_DIR (its header's folder).

find_program(VRAMD_NPM npm)
if(NOT VRAMD_NPM)
  message(FATAL_ERROR
    "npm not found: the dashboard bundles uPlot from npm at build time. "
    "Run `make deps` (or `apt-get install nodejs npm`), then configure again.")
endif()

set(web_src ${CMAKE_SOURCE_DIR}/web)
set(web_npm ${CMAKE_BINARY_DIR}/web-npm)
set(VRAMD_NPM_CACHE ${CMAKE_BINARY_DIR}/npm-cache)
set(VRAMD_WEB_GENERATED_DIR ${CMAKE_BINARY_DIR}/generated)
set(VRAMD_WEB_ASSETS_CC ${VRAMD_WEB_GENERATED_DIR}/web_assets.cc)
file(MAKE_DIRECTORY ${web_npm} ${VRAMD_WEB_GENERATED_DIR})
configure_file(${CMAKE_SOURCE_DIR}/cmake/web_assets.h.in ${VRAMD_WEB_GENERATED_DIR}/web_assets.h COPYONLY)

# npm ci in a copy of the manifest and lock file, so node_modules never lands in the source tree.
set(uplot_dist ${web_npm}/node_modules/uplot/dist)
add_custom_command(
  OUTPUT ${web_npm}/npm-ci.stamp ${uplot_dist}/uPlot.iife.min.js ${uplot_dist}/uPlot.min.css
  COMMAND ${CMAKE_COMMAND} -E copy ${web_src}/package.json ${web_src}/package-lock.json ${web_npm}/
  COMMAND ${CMAKE_COMMAND} -DNPM=${VRAMD_NPM} -DDIR=${web_npm} -DCACHE=${VRAMD_NPM_CACHE}
          -DSTAMP=${web_npm}/npm-ci.stamp -P ${CMAKE_SOURCE_DIR}/cmake/npm_ci.cmake
  DEPENDS ${web_src}/package.json ${web_src}/package-lock.json ${CMAKE_SOURCE_DIR}/cmake/npm_ci.cmake
  COMMENT "npm ci: the dashboard's uPlot (web/package-lock.json)"
  VERBATIM)

# name|file|content type, one per served file (GET /assets/NAME; "/" is index.html).
set(web_assets
  "index.html|${web_src}/index.html|text/html"
  "app.js|${web_src}/app.js|text/javascript"
  "style.css|${web_src}/style.css|text/css"
  "favicon.svg|${web_src}/favicon.svg|image/svg+xml"
  "uPlot.iife.min.js|${uplot_dist}/uPlot.iife.min.js|text/javascript"
  "uPlot.min.css|${uplot_dist}/uPlot.min.css|text/css")
set(web_files)
foreach(entry IN LISTS web_assets)
  string(REPLACE "|" ";" parts "${entry}")
  list(GET parts 1 f)
  list(APPEND web_files ${f})
endforeach()
# Handed to the script in a file: a list of lists does not survive a command line.
list(JOIN web_assets "\n" web_assets_lines)
file(CONFIGURE OUTPUT ${VRAMD_WEB_GENERATED_DIR}/web_assets.list CONTENT "${web_assets_lines}\n")

add_custom_command(
  OUTPUT ${VRAMD_WEB_ASSETS_CC}
  COMMAND ${CMAKE_COMMAND} -DOUT=${VRAMD_WEB_ASSETS_CC} -DASSET_LIST=${VRAMD_WEB_GENERATED_DIR}/web_assets.list
          -P ${CMAKE_SOURCE_DIR}/cmake/embed_assets.cmake
  DEPENDS ${web_files} ${web_npm}/npm-ci.stamp ${VRAMD_WEB_GENERATED_DIR}/web_assets.list ${CMAKE_SOURCE_DIR}/cmake/embed_assets.cmake
  COMMENT "Embedding the dashboard (web/) into vramd"
  VERBATIM)
