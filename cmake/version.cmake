# SPDX-License-Identifier: Apache-2.0
# version.cmake: roomd's version, for `--version`, the start-up log line and roomd_build_info.
#   a git checkout at a release tag vX.Y.Z       -> X.Y.Z
#   N commits after it                           -> X.Y.Z-N-gCOMMIT
#   uncommitted changes                          -> ...-dirty
#   no git or no release tag (a tarball, the Debian source package, a clone before the first
#   tag)                                         -> the VERSION file
# Sets ROOMD_VERSION (that string), ROOMD_VERSION_NUMBER (X.Y.Z, for project()) and
# ROOMD_COMMIT (the short commit, "-dirty" with changes, "unknown" without git).
# As a script, `cmake -DSRC=<tree> -P cmake/version.cmake` prints ROOMD_VERSION (the tests).
if(NOT SRC)
  set(SRC ${CMAKE_CURRENT_LIST_DIR}/..)
endif()
file(STRINGS ${SRC}/VERSION ROOMD_VERSION LIMIT_COUNT 1)
string(STRIP "${ROOMD_VERSION}" ROOMD_VERSION)
set(ROOMD_COMMIT unknown)
find_program(ROOMD_GIT git)
if(ROOMD_GIT AND EXISTS ${SRC}/.git)
  execute_process(COMMAND ${ROOMD_GIT} describe --tags --match "v[0-9]*" --dirty --abbrev=7
    WORKING_DIRECTORY ${SRC} OUTPUT_VARIABLE described RESULT_VARIABLE rc
    OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(rc EQUAL 0 AND described MATCHES "^v([0-9]+\\.[0-9]+\\.[0-9]+.*)$")
    set(ROOMD_VERSION ${CMAKE_MATCH_1})
  endif()
  execute_process(COMMAND ${ROOMD_GIT} describe --always --dirty --abbrev=7 --exclude "*"
    WORKING_DIRECTORY ${SRC} OUTPUT_VARIABLE commit RESULT_VARIABLE rc
    OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(rc EQUAL 0 AND commit)
    set(ROOMD_COMMIT ${commit})
  endif()
endif()
if(NOT ROOMD_VERSION MATCHES "^([0-9]+\\.[0-9]+\\.[0-9]+)")
  message(FATAL_ERROR "version.cmake: no X.Y.Z version (VERSION file: '${ROOMD_VERSION}')")
endif()
set(ROOMD_VERSION_NUMBER ${CMAKE_MATCH_1})
if(CMAKE_SCRIPT_MODE_FILE)
  message("${ROOMD_VERSION}")
endif()
