#!/usr/bin/env bash
# Installs everything gpt2vk needs to build, test and run. Idempotent: installs only what is missing.
# Debian/Ubuntu: apt packages. Elsewhere: prints what to install and exits non-zero.
set -euo pipefail

packages=(
  build-essential cmake pkg-config
  libvulkan-dev libvulkan-volk-dev glslang-tools spirv-tools spirv-cross
  mesa-vulkan-drivers vulkan-validationlayers vulkan-tools
  doctest-dev libpcre2-dev nlohmann-json3-dev libcli11-dev
  clang libclang-rt-dev  # the fuzz targets: clang's libFuzzer and sanitizer runtimes
  chromium               # the attention page's test renders it headless
)

if ! command -v apt-get >/dev/null 2>&1 || ! command -v dpkg-query >/dev/null 2>&1; then
  cat >&2 <<'MSG'
gpt2vk setup: this script installs packages on Debian/Ubuntu only.
On other systems install:
  - a C++17 compiler, CMake >= 3.20
  - the Vulkan SDK (LunarG, https://vulkan.lunarg.com): loader, headers, volk, glslangValidator,
    spirv-val, spirv-cross, validation layers; on macOS it also carries MoltenVK
  - doctest, PCRE2, nlohmann-json, CLI11 (Homebrew: doctest pcre2 nlohmann-json cli11;
    vcpkg: doctest pcre2 nlohmann-json cli11)
  - for the fuzz targets only: clang with libFuzzer (LLVM's compiler-rt)
  - for the attention page's test only: Chromium at /usr/bin/chromium
Then: cmake -S . -B build && cmake --build build
MSG
  exit 1
fi

missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$p")
done

if ((${#missing[@]} == 0)); then
  echo "gpt2vk setup: all ${#packages[@]} packages present"
  exit 0
fi

sudo=""
if [[ $(id -u) -ne 0 ]]; then sudo="sudo"; fi
echo "gpt2vk setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -q
$sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
