# Writes OUT, a header that defines GPT2VK_GIT_REVISION: `git describe --always --dirty` of
# SOURCE_DIR, or "unknown" outside git. CMakeLists.txt runs it at every build, not once at
# configure time, so that the revision follows each commit and edit; the header is rewritten
# only when the text changes, so an unchanged revision rebuilds nothing.
set(revision "unknown")
find_package(Git QUIET)
if(GIT_FOUND)
  execute_process(COMMAND ${GIT_EXECUTABLE} describe --always --dirty
                  WORKING_DIRECTORY ${SOURCE_DIR}
                  OUTPUT_VARIABLE described RESULT_VARIABLE failed
                  OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(NOT failed AND described)
    set(revision "${described}")
  endif()
endif()
set(text "// Written by cmake/version.cmake at build time.\n#pragma once\n#define GPT2VK_GIT_REVISION \"${revision}\"\n")
set(old "")
if(EXISTS "${OUT}")
  file(READ "${OUT}" old)
endif()
if(NOT old STREQUAL text)
  file(WRITE "${OUT}" "${text}")
endif()
