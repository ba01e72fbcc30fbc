# Sourced by the scripts here on a lent GPU machine, from the repository root: the carried
# gpt2vk (.gpubin/, pack.sh) and its libraries, and NVIDIA's Vulkan driver made findable.
# Defines root, bin, lib, gv (gpt2vk with the carried libraries), say; prints the machine.
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
bin=$root/.gpubin/gpt2vk
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
say() { echo "== ${SECONDS}s: $*"; }
[[ -d $root/.gpubin/lib ]] || tar xzf "$root/.gpubin/lib.tar.gz" -C "$root/.gpubin"  # pack.sh
# The carried libraries for gpt2vk alone: PyTorch keeps the machine's own.
lib=$root/.gpubin/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
gv() { LD_LIBRARY_PATH=$lib "$bin" "$@"; }

# make-model copies GPT-2's tokenizer files from the source folder the build baked in.
src=$(grep -a -o -m1 -E '/[[:alnum:]/_.-]+/data/' "$bin" | head -1)
src=${src%/data/}
if [[ -n "$src" && ! -e "$src" ]]; then mkdir -p "$(dirname "$src")" && ln -sfn "$root" "$src"; fi

say "machine"
date -u
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
# The GL dispatch libraries NVIDIA's driver library needs, where the image lacks them (.gl/ holds
# Debian's libglvnd0 libglx0 libgl1 libegl1 libgles2 libopengl0 libvulkan1: pack.sh).
if [[ -d $root/.gl ]] && ! ldconfig -p | grep -q libGLdispatch; then
  for f in "$root"/.gl/*.deb; do dpkg -x "$f" /; done
  ldconfig
fi
# NVIDIA's Vulkan ICD: its manifest where the image has one, else one written for the driver's
# libGLX_nvidia, which holds the Vulkan driver.
if ! gv devices 2>/dev/null | grep -q -i nvidia; then
  icd=$(find /usr/local/nvidia /usr/share/vulkan /etc/vulkan /usr/lib /usr/lib64 -name 'nvidia_icd*.json' 2>/dev/null | head -1)
  if [[ -z $icd ]]; then
    glx=$( (ldconfig -p | awk '/libGLX_nvidia.so.0/ {print $NF}'; find / -xdev -name 'libGLX_nvidia.so.0' 2>/dev/null) | head -1)
    echo "no ICD manifest; the driver library: ${glx:-none}"
    icd=/tmp/nvidia_icd.json
    printf '{"file_format_version":"1.0.1","ICD":{"library_path":"%s","api_version":"1.3.0"}}\n' "$glx" > $icd
  fi
  echo "VK_DRIVER_FILES=$icd"; export VK_DRIVER_FILES=$icd
fi
gv devices || { VK_LOADER_DEBUG=error,warn gv devices; echo "no Vulkan device"; exit 1; }
