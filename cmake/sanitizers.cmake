# GPT2VK_SANITIZE: the whole build (libraries, the app, the tests) with AddressSanitizer and
# UndefinedBehaviorSanitizer. Any report fails: UB is not recoverable, and ASan stops at its
# first error. Leaks inside the Vulkan loader, lavapipe and the validation layer are
# suppressed (cmake/sanitizer_defaults.cpp says which and why); ours are not.
# GPT2VK_FUZZ: the libFuzzer targets in fuzz/ (clang only).
option(GPT2VK_SANITIZE "Build everything, tests included, with ASan and UBSan" OFF)
option(GPT2VK_FUZZ "Build the libFuzzer targets in fuzz/ (needs clang)" OFF)

# Linked by every executable: the sanitizers' default options, built in so that a sanitized
# binary behaves the same run from ctest, by hand, or as a child of the CLI tests.
add_library(gpt2vk_sanitizer_defaults INTERFACE)

if(GPT2VK_SANITIZE)
  if(MSVC)
    message(FATAL_ERROR "GPT2VK_SANITIZE: ASan+UBSan builds need GCC or clang")
  endif()
  # float-cast-overflow (a float out of an integer type's range, NaN included, cast to it) is
  # part of clang's "undefined" but not GCC's; hostile weights make NaN, so ask for it.
  set(sanitizers address,undefined,float-cast-overflow)
  add_compile_options(-fsanitize=${sanitizers} -fno-sanitize-recover=all -fno-omit-frame-pointer)
  # GCC 12 warns of maybe-uninitialized members inside libstdc++'s <regex> only when ASan
  # instruments it; the sanitizers change what its flow analysis sees (false positives).
  add_compile_options($<$<CXX_COMPILER_ID:GNU>:-Wno-maybe-uninitialized>)
  add_link_options(-fsanitize=${sanitizers})
  # -O1 and line tables only: half the compile time of -O2 -g, which keeps this build within
  # CI's time; the reports still give file:line (ASan's own advice is -O1).
  if(CMAKE_BUILD_TYPE STREQUAL "RelWithDebInfo" OR CMAKE_BUILD_TYPE STREQUAL "Release")
    add_compile_options(-O1 -g1)
  endif()
  target_sources(gpt2vk_sanitizer_defaults INTERFACE
                 ${CMAKE_CURRENT_LIST_DIR}/sanitizer_defaults.cpp)
  # The executables' own files (the commands, the server, the tests) at -O0: they are JSON,
  # HTTP and assertion plumbing whose template instantiations cost two to three times the
  # compile time at -O1 under the sanitizers (tests/test_serve.cpp: 30 CPU s against 80), and
  # little of the run time. The libraries they test keep -O1. (An INTERFACE option comes after
  # the directory's -O1 on the command line, so it wins.)
  target_compile_options(gpt2vk_sanitizer_defaults INTERFACE -O0)

  # Each kind of error must be reported; the overflows must also stop the program (UBSan
  # recovers by default), the leak is reported at exit.
  add_executable(gpt2vk_sanitizer_check ${CMAKE_CURRENT_LIST_DIR}/sanitizer_check.cpp)
  target_link_libraries(gpt2vk_sanitizer_check PRIVATE gpt2vk_sanitizer_defaults)
  foreach(kind_report IN ITEMS "heap-overflow=ERROR: AddressSanitizer: heap-buffer-overflow"
                               "signed-overflow=runtime error: signed integer overflow"
                               "leak=ERROR: LeakSanitizer: detected memory leaks")
    string(REPLACE "=" ";" kind_report ${kind_report})
    list(GET kind_report 0 kind)
    list(GET kind_report 1 report)
    add_test(NAME sanitizer_reports_${kind} COMMAND gpt2vk_sanitizer_check ${kind})
    set_tests_properties(sanitizer_reports_${kind} PROPERTIES
                         PASS_REGULAR_EXPRESSION "${report}"
                         FAIL_REGULAR_EXPRESSION "went on after the error")
  endforeach()
endif()
