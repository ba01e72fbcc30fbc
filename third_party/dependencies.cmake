# Dependency glue only: find each library on the system (Debian packages, the LunarG SDK,
# Homebrew, vcpkg) and, where a header-only or single-file one is missing, fetch a pinned
# release. No sources are copied into this repository.
include(FetchContent)

find_package(Vulkan REQUIRED COMPONENTS glslangValidator)
get_target_property(_vk_inc Vulkan::Headers INTERFACE_INCLUDE_DIRECTORIES)
find_program(GLSLANG_VALIDATOR NAMES glslangValidator HINTS ${Vulkan_GLSLANG_VALIDATOR_EXECUTABLE} REQUIRED)
# Used by the test that checks every embedded module; not needed to build.
find_program(SPIRV_VAL spirv-val)
find_program(SPIRV_CROSS spirv-cross)

# volk: the loader's entry points fetched at run time. Debian's libvulkan-volk-dev ships only
# volk.c/volk.h, so we compile volk.c ourselves.
find_path(VOLK_SOURCE_DIR volk.c PATHS /usr/include /usr/local/include $ENV{VULKAN_SDK}/include/Volk
          PATH_SUFFIXES volk Volk NO_CACHE)
if(NOT VOLK_SOURCE_DIR)
  message(STATUS "volk not found on the system: fetching pinned release")
  FetchContent_Declare(volk_src GIT_REPOSITORY https://github.com/zeux/volk.git GIT_TAG 1.3.250)
  FetchContent_Populate(volk_src)
  set(VOLK_SOURCE_DIR ${volk_src_SOURCE_DIR})
endif()
add_library(volk STATIC ${VOLK_SOURCE_DIR}/volk.c)
target_include_directories(volk SYSTEM PUBLIC ${VOLK_SOURCE_DIR} ${_vk_inc})
target_compile_definitions(volk PUBLIC VK_NO_PROTOTYPES)
if(APPLE)
  target_compile_definitions(volk PUBLIC VK_ENABLE_BETA_EXTENSIONS)
endif()
set_target_properties(volk PROPERTIES POSITION_INDEPENDENT_CODE ON)
target_link_libraries(volk PUBLIC ${CMAKE_DL_LIBS})

find_package(doctest QUIET)
if(NOT doctest_FOUND)
  FetchContent_Declare(doctest GIT_REPOSITORY https://github.com/doctest/doctest.git GIT_TAG v2.4.9)
  FetchContent_MakeAvailable(doctest)
endif()

find_package(CLI11 QUIET)
if(NOT CLI11_FOUND)
  FetchContent_Declare(cli11 GIT_REPOSITORY https://github.com/CLIUtils/CLI11.git GIT_TAG v2.3.2)
  FetchContent_MakeAvailable(cli11)
endif()

find_package(nlohmann_json 3.9 QUIET)
if(NOT nlohmann_json_FOUND)
  FetchContent_Declare(json URL https://github.com/nlohmann/json/releases/download/v3.11.2/json.tar.xz)
  FetchContent_MakeAvailable(json)
endif()

# PCRE2 (8-bit, UTF + UCP) for GPT-2's pre-tokenizer pattern with full Unicode categories.
find_package(PkgConfig QUIET)
if(PkgConfig_FOUND)
  pkg_check_modules(PCRE2 QUIET IMPORTED_TARGET libpcre2-8)
endif()
if(PCRE2_FOUND)
  add_library(pcre2 ALIAS PkgConfig::PCRE2)
else()
  find_path(PCRE2_INCLUDE_DIR pcre2.h)
  find_library(PCRE2_LIBRARY NAMES pcre2-8)
  if(NOT PCRE2_INCLUDE_DIR OR NOT PCRE2_LIBRARY)
    message(FATAL_ERROR "PCRE2 (libpcre2-8) not found: install libpcre2-dev (Debian), pcre2 (Homebrew) or pcre2 (vcpkg)")
  endif()
  add_library(pcre2 UNKNOWN IMPORTED)
  set_target_properties(pcre2 PROPERTIES IMPORTED_LOCATION ${PCRE2_LIBRARY}
                        INTERFACE_INCLUDE_DIRECTORIES ${PCRE2_INCLUDE_DIR})
endif()

# ICU's common library for BERT's WordPiece normaliser: NFD, full lowercase mappings, general
# categories and White_Space, so that no Unicode table is written here by hand.
find_package(ICU COMPONENTS uc)
if(NOT ICU_FOUND)
  message(FATAL_ERROR "ICU (icu-uc) not found: install libicu-dev (Debian), icu4c (Homebrew) or icu (vcpkg)")
endif()

# cpp-httplib for `gpt2vk serve`. Debian's libcpp-httplib-dev is a compiled library with a
# pkg-config file (its flags turn on TLS and compression, whose headers it depends on); other
# systems ship the single header, or a pinned release is fetched.
if(PkgConfig_FOUND)
  pkg_check_modules(HTTPLIB QUIET IMPORTED_TARGET cpp-httplib)
endif()
if(HTTPLIB_FOUND)
  add_library(httplib ALIAS PkgConfig::HTTPLIB)
else()
  find_path(HTTPLIB_INCLUDE_DIR httplib.h)
  if(NOT HTTPLIB_INCLUDE_DIR)
    message(STATUS "cpp-httplib not found on the system: fetching pinned release")
    FetchContent_Declare(httplib_src GIT_REPOSITORY https://github.com/yhirose/cpp-httplib.git
                         GIT_TAG v0.11.4)
    FetchContent_Populate(httplib_src)
    set(HTTPLIB_INCLUDE_DIR ${httplib_src_SOURCE_DIR})
  endif()
  find_package(Threads REQUIRED)
  add_library(httplib INTERFACE)
  target_include_directories(httplib SYSTEM INTERFACE ${HTTPLIB_INCLUDE_DIR})
  target_link_libraries(httplib INTERFACE Threads::Threads)
endif()

# SentencePiece for T5's spiece.model and Marian's source.spm/target.spm: the models are its
# protobufs, read and run by its processor rather than by a reader written here. Only the
# processor library is linked (pkg-config's flags add the trainer, which nothing here runs).
if(PkgConfig_FOUND)
  pkg_check_modules(SENTENCEPIECE_PC QUIET sentencepiece)
endif()
find_path(SENTENCEPIECE_INCLUDE_DIR sentencepiece_processor.h
          HINTS ${SENTENCEPIECE_PC_INCLUDE_DIRS})
find_library(SENTENCEPIECE_LIBRARY NAMES sentencepiece HINTS ${SENTENCEPIECE_PC_LIBRARY_DIRS})
if(NOT SENTENCEPIECE_INCLUDE_DIR OR NOT SENTENCEPIECE_LIBRARY)
  message(FATAL_ERROR "SentencePiece not found: install libsentencepiece-dev (Debian), sentencepiece (Homebrew) or sentencepiece (vcpkg)")
endif()
add_library(sentencepiece UNKNOWN IMPORTED)
set_target_properties(sentencepiece PROPERTIES IMPORTED_LOCATION ${SENTENCEPIECE_LIBRARY}
                      INTERFACE_INCLUDE_DIRECTORIES ${SENTENCEPIECE_INCLUDE_DIR})
