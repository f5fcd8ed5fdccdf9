# `npm ci` in DIR with its cache inside the build directory; fails the build with a clear message.
#   cmake -DNPM=/usr/bin/npm -DDIR=build/web-npm -DCACHE=build/npm-cache -DSTAMP=file -P npm_ci.cmake
cmake_minimum_required(VERSION 3.25)
execute_process(
  COMMAND "${NPM}" ci --no-audit --no-fund --prefer-offline --cache "${CACHE}"
  WORKING_DIRECTORY "${DIR}"
  RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR
    "`npm ci` failed in ${DIR} (exit ${rc}). The dashboard (uPlot) and the browser tests "
    "(playwright-core) come from npm at build time: check that https://registry.npmjs.org is "
    "reachable (or set npm's registry/proxy), then build again. Packages are cached in ${CACHE}, "
    "so later builds work offline.")
endif()
file(TOUCH "${STAMP}")
